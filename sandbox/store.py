"""The object store: every API object in memory, written through to SQLite.

One re-entrant lock guards everything: each HTTP request holds it for its whole duration,
and each controller for the sync of one object, so readers never see half-applied changes.
Controllers step aside between objects when a request is waiting (``serving``,
``yield_to_requests``), as a real API server answers while controllers work. Writes go to SQLite at
once (WAL, no fsync) so a killed process loses at most the change in flight.
"""

from __future__ import annotations

import bisect
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
# Aliases: inside ``Store`` the name ``list`` is the method, not the builtin.
ObjList = list[Obj]
StrList = list[str]
KeyedList = list[tuple[str, Obj]]

# Changes the watch cache keeps (all resources together). A real API server keeps a few
# minutes per resource; a client further behind than this relists.
WATCH_WINDOW = 20_000


@dataclass(frozen=True)
class Change:
    rv: int
    res: str
    type: str  # ADDED | MODIFIED | DELETED
    body: str  # the object's JSON at that version


ChangeList = list[Change]


class Store:
    def __init__(
        self, path: str | Path, reset: bool = False, watch_window: int = WATCH_WINDOW
    ) -> None:
        self.lock = threading.RLock()
        self._waiting = 0  # API requests blocked on ``lock`` (see ``serving``)
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
        # Controller owner uid → the keys of the objects it controls, per resource, kept in
        # step with every put and delete: controllers ask "what does this Job own?" once per
        # object per pass, and a scan per question made a pass cost jobs × pods.
        self._owned: dict[str, dict[str, set[tuple[str, str]]]] = {}
        self._owner_of: dict[str, dict[tuple[str, str], str]] = {}
        # Per resource and owner uid, a stamp that moves whenever one of its owned objects is
        # put or deleted: what a controller compares to know nothing it owns changed.
        self._owned_stamps: dict[str, dict[str, int]] = {}
        self._stamp = 0
        # Sorted listings per (resource, namespace), dropped when the resource changes: a
        # list page on a quiet cluster of 60,000 events need not sort them all again.
        self._sorted: dict[tuple[str, str | None], KeyedList] = {}
        # Each object's JSON as a list item (no apiVersion/kind) at the resourceVersion it
        # was encoded for; every change goes through ``put``, which moves the version on.
        self._encoded: dict[str, dict[str, tuple[str, bytes]]] = {}
        # Per resource, a counter moved by every put and delete: controllers with nothing
        # to do on an unchanged cluster compare it instead of scanning 10,000 objects.
        self._versions: dict[str, int] = {}
        self._meta: dict[str, Any] = {}
        for res, ns, name, body in self._db.execute("SELECT res, ns, name, body FROM objects"):
            obj = json.loads(body)
            self._objects.setdefault(res, {})[(ns, name)] = obj
            self._index_owner(res, (ns, name), obj)
        for key, value in self._db.execute("SELECT key, value FROM meta"):
            self._meta[key] = json.loads(value)
        self._rv = int(self._meta.get("resourceVersion", 1000))
        # Bumped on every write; the scheduler retries pending pods when it moves.
        self.generation = 0
        # Set by the cluster: every write also records the simulated time, so a killed
        # process never restarts with its clock behind timestamps it already handed out.
        self.clock_fn: Callable[[], float] | None = None
        self._clock_saved = 0.0
        # The watch cache: the last changes, oldest first, each (resourceVersion, resource,
        # event type, the object's JSON then). A watch resumes from any version still in
        # it; an older one is told 410 Gone, as a real API server's watch cache does.
        self._history: ChangeList = []
        self._window = watch_window
        self._history_cond = threading.Condition()

    # -- sharing the lock between API requests and controllers --------------------------
    @contextmanager
    def serving(self) -> Iterator[None]:
        """Hold the lock for one API request, announced so controllers step aside."""
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
        """Between two objects of a controller step (lock held once): let waiting requests in.

        Without this a request waited for the whole step, and at 10,000 pods steps are tens
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
        """Let waiting requests in; then whether ``obj`` is still the stored object of ``res``
        (a request may have deleted or replaced it meanwhile)."""
        if not self.yield_to_requests():
            return True
        meta = obj["metadata"]
        return self.get(res, meta.get("namespace", ""), meta["name"]) is obj

    @property
    def fresh(self) -> bool:
        return not self._objects

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

    def keyed(self, res: str, ns: str | None = None) -> KeyedList:
        """``("<ns>/<name>", obj)`` pairs in the API server's (etcd) key order.

        Callers must not change the returned list; it is cached until ``res`` changes.
        """
        cached = self._sorted.get((res, ns))
        if cached is None:
            items = self._objects.get(res, {})
            cached = sorted(
                ((f"{key[0]}/{key[1]}", obj) for key, obj in items.items() if ns in (None, key[0])),
                key=lambda pair: pair[0],
            )
            self._sorted[(res, ns)] = cached
        return cached

    def encoded_item(self, res: str, key: str, obj: Obj, *, custom: bool = False) -> bytes:
        """``obj`` (stored under etcd ``key``) as list-item JSON, re-encoded only when changed:
        without ``apiVersion``/``kind`` but for a ``custom`` resource's (which keeps them)."""
        cache = self._encoded.setdefault(res, {})
        rv = obj["metadata"].get("resourceVersion", "")
        hit = cache.get(key)
        if hit is not None and hit[0] == rv:
            return hit[1]
        item = obj if custom else {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        data = json.dumps(item, separators=(",", ":")).encode()
        cache[key] = (rv, data)
        return data

    def version(self, res: str) -> int:
        """How many times ``res`` has changed in this process (not persisted)."""
        return self._versions.get(res, 0)

    def _changed(self, res: str) -> None:
        self._versions[res] = self._versions.get(res, 0) + 1
        for key in [k for k in self._sorted if k[0] == res]:
            del self._sorted[key]

    def owned(self, res: str, ns: str, owner_uid: str) -> ObjList:
        """Objects of ``res`` in ``ns`` whose controller owner has ``owner_uid``, by name."""
        keys = self._owned.get(res, {}).get(owner_uid, set())
        items = self._objects.get(res, {})
        return [items[k] for k in sorted(keys) if k[0] == ns]

    def owned_stamp(self, res: str, owner_uid: str) -> int:
        """Moves whenever an object of ``res`` controlled by ``owner_uid`` is put or deleted."""
        return self._owned_stamps.get(res, {}).get(owner_uid, 0)

    def _index_owner(self, res: str, key: tuple[str, str], obj: Obj | None) -> None:
        owner_of = self._owner_of.setdefault(res, {})
        owned = self._owned.setdefault(res, {})
        stamps = self._owned_stamps.setdefault(res, {})
        # Stamps come from one counter and are never reused, so an owner that loses all it
        # owns never looks like it did before it had any.
        self._stamp += 1
        before = owner_of.pop(key, None)
        if before is not None:
            stamps[before] = self._stamp
            owned[before].discard(key)
            if not owned[before]:
                del owned[before]
        if obj is None:
            return
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("uid"):
                owner_of[key] = ref["uid"]
                owned.setdefault(ref["uid"], set()).add(key)
                stamps[ref["uid"]] = self._stamp
                break

    def put(self, res: str, obj: Obj) -> Obj:
        """Store ``obj`` under a new resourceVersion (callers hold ``lock``)."""
        meta = obj["metadata"]
        meta["resourceVersion"] = self.next_rv()
        ns = meta.get("namespace", "")
        existed = (ns, meta["name"]) in self._objects.get(res, {})
        self._objects.setdefault(res, {})[(ns, meta["name"])] = obj
        self._index_owner(res, (ns, meta["name"]), obj)
        self._changed(res)
        body = json.dumps(obj, separators=(",", ":"))
        self._db.execute(
            "INSERT OR REPLACE INTO objects (res, ns, name, body) VALUES (?, ?, ?, ?)",
            (res, ns, meta["name"], body),
        )
        self._save_rv()
        self.generation += 1
        self._record(res, "MODIFIED" if existed else "ADDED", body)
        return obj

    # -- the watch cache ------------------------------------------------------------------
    def _record(self, res: str, kind: str, body: str) -> None:
        with self._history_cond:
            self._history.append(Change(self._rv, res, kind, body))
            if len(self._history) > 2 * self._window:
                del self._history[: -self._window]  # amortised: one move per window
            self._history_cond.notify_all()

    def changes_since(self, rv: int, res: str, timeout: float) -> tuple[ChangeList, int] | None:
        """The changes of ``res`` after ``rv``, waiting up to ``timeout`` seconds for one,
        and the version they bring the caller up to (every change of ``res`` up to it is
        in the list); None when ``rv`` is older than the window holds (relist)."""
        deadline = time.monotonic() + timeout
        with self._history_cond:
            while True:
                if rv < self.oldest_rv():
                    return None
                start = bisect.bisect_right(self._history, rv, key=lambda c: c.rv)
                found = [c for c in self._history[start:] if c.res == res]
                upto = self._history[-1].rv if self._history else rv
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found, max(rv, upto)
                self._history_cond.wait(left)

    def oldest_rv(self) -> int:
        """The oldest version a watch can resume from: every change after it is held."""
        with self._history_cond:
            return self._history[0].rv - 1 if self._history else self._rv

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
            self._index_owner(res, (ns, name), None)
            self._encoded.get(res, {}).pop(f"{ns}/{name}", None)
            self._changed(res)
            self._db.execute(
                "DELETE FROM objects WHERE res = ? AND ns = ? AND name = ?", (res, ns, name)
            )
            # A delete is a change too: watchers and lists see a newer resourceVersion.
            self.next_rv()
            self._save_rv()
            self.generation += 1
            gone = dict(obj, metadata={**obj["metadata"], "resourceVersion": str(self._rv)})
            self._record(res, "DELETED", json.dumps(gone, separators=(",", ":")))
        return obj

    # -- sandbox-private state (device assignments, clock, controller bookkeeping) --------
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
