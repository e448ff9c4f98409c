"""The simulated nodes' object store: objects in memory, written through to SQLite, and
the nodes' private state (``meta_*``: device assignments, container lives, faults, the
simulated clock). ``sandbox.nodes.store.NodeStore`` fills it from the API server's watches.

One re-entrant lock guards everything: the kubelets' pass holds it for one object at a time,
and steps aside between objects when a reader is waiting (``serving``,
``yield_to_requests``: a Prometheus scrape of the DCGM exporter). Writes go to SQLite at once
(WAL, no fsync) so a killed process loses at most the change in flight.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
# Aliases: inside ``Store`` the name ``list`` is the method, not the builtin.
ObjList = list[Obj]
StrList = list[str]


class Store:
    def __init__(self, path: str | Path, reset: bool = False) -> None:
        self.lock = threading.RLock()
        self._waiting = 0  # readers blocked on ``lock`` (see ``serving``)
        self._waiting_guard = threading.Lock()
        path = Path(path)
        if reset and path.exists():
            path.unlink()
            for suffix in ("-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS objects (res TEXT, ns TEXT, name TEXT, body TEXT,"
            " PRIMARY KEY (res, ns, name))"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._meta: dict[str, Any] = {}
        for res, ns, name, body in self._db.execute("SELECT res, ns, name, body FROM objects"):
            obj = json.loads(body)
            self._objects.setdefault(res, {})[(ns, name)] = obj
        for key, value in self._db.execute("SELECT key, value FROM meta"):
            self._meta[key] = json.loads(value)
        self._rv = int(self._meta.get("resourceVersion", 1000))
        # Set by the cluster: every write also records the simulated time, so a killed
        # process never restarts with its clock behind timestamps it already handed out.
        self.clock_fn: Callable[[], float] | None = None
        self._clock_saved = 0.0

    # -- sharing the lock between the kubelets' pass and readers ----------------------------
    @contextmanager
    def serving(self) -> Iterator[None]:
        """Hold the lock for one reader, announced so the kubelets' pass steps aside."""
        with self._waiting_guard:
            self._waiting += 1
        try:
            self.lock.acquire()
        finally:
            with self._waiting_guard:
                self._waiting -= 1
        try:
            yield
        finally:
            self.lock.release()

    def yield_to_requests(self, max_wait: float = 0.05) -> bool:
        """Between two objects of a pass (lock held once): let waiting readers in.

        Without this a reader waited for the whole pass, and at 10,000 pods a pass takes tens
        of milliseconds. Returns whether the lock was let go: objects read before may have
        changed or gone since.
        """
        if not self._waiting:
            return False
        # Let go however deeply the lock is held, as threading.Condition.wait does.
        state = self.lock._release_save()  # type: ignore[attr-defined]
        try:
            deadline = time.monotonic() + max_wait
            while self._waiting and time.monotonic() < deadline:
                time.sleep(0.0002)
        finally:
            self.lock._acquire_restore(state)  # type: ignore[attr-defined]
        return True

    def still_stored_after_yield(self, res: str, obj: Obj) -> bool:
        """Let waiting readers in; then whether ``obj`` is still the stored object of ``res``
        (a watch event may have deleted or replaced it meanwhile)."""
        if not self.yield_to_requests():
            return True
        meta = obj["metadata"]
        return self.get(res, meta.get("namespace", ""), meta["name"]) is obj

    # -- resource versions --------------------------------------------------------------
    def next_rv(self) -> str:
        self._rv += 1
        self._meta["resourceVersion"] = self._rv
        return str(self._rv)

    def current_rv(self) -> str:
        return str(self._rv)

    # -- objects ------------------------------------------------------------------------
    def get(self, res: str, ns: str, name: str) -> Obj | None:
        return self._objects.get(res, {}).get((ns, name))

    def list(self, res: str, ns: str | None = None) -> ObjList:
        items = self._objects.get(res, {})
        keys = sorted(k for k in items if ns is None or k[0] == ns)
        return [items[k] for k in keys]

    def iter(self, res: str) -> Iterator[Obj]:
        return iter(list(self._objects.get(res, {}).values()))

    def count(self, res: str) -> int:
        return len(self._objects.get(res, {}))

    def put(self, res: str, obj: Obj) -> Obj:
        """Store ``obj`` under a new resourceVersion (callers hold ``lock``)."""
        meta = obj["metadata"]
        meta["resourceVersion"] = self.next_rv()
        ns = meta.get("namespace", "")
        self._objects.setdefault(res, {})[(ns, meta["name"])] = obj
        body = json.dumps(obj, separators=(",", ":"))
        self._db.execute(
            "INSERT OR REPLACE INTO objects (res, ns, name, body) VALUES (?, ?, ?, ?)",
            (res, ns, meta["name"], body),
        )
        self._save_rv()
        return obj

    def _save_clock(self) -> None:
        if self.clock_fn is None:
            return
        now = self.clock_fn()
        if now - self._clock_saved > 0.05:
            self._clock_saved = now
            self._meta["clock"] = now
            self._db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('clock', ?)", (json.dumps(now),)
            )

    def delete(self, res: str, ns: str, name: str) -> Obj | None:
        obj = self._objects.get(res, {}).pop((ns, name), None)
        if obj is not None:
            self._db.execute(
                "DELETE FROM objects WHERE res = ? AND ns = ? AND name = ?", (res, ns, name)
            )
        return obj

    # -- the nodes' private state (device assignments, container lives, faults, clock) ----
    def meta_get(self, key: str, default: Any = None) -> Any:
        return self._meta.get(key, default)

    def meta_set(self, key: str, value: Any) -> None:
        self._meta[key] = value
        self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
        )

    def meta_delete(self, key: str) -> None:
        if self._meta.pop(key, None) is not None:
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def meta_keys(self, prefix: str) -> StrList:
        return [k for k in self._meta if k.startswith(prefix)]

    def _save_rv(self) -> None:
        self._save_clock()
        self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('resourceVersion', ?)",
            (json.dumps(self._rv),),
        )

    def close(self) -> None:
        with self.lock:
            self._db.close()
