"""The shared state every part of the sandbox works on: store, clock, events, ids."""

from __future__ import annotations

import random
import string
import tempfile
import time
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.clock import SimClock, parse_rfc3339, rfc3339, rfc3339_micro
from sandbox.profiles import Device
from sandbox.servers import Servers
from sandbox.store import Obj, Store

EVENT_MESSAGE_LIMIT = 1024


@dataclass
class Options:
    token: str = "sandbox-token"  # noqa: S105 - a local dev sandbox, not a secret
    seed: int = 0
    speed: float = 1.0
    event_ttl: float = 3600.0  # simulated seconds, like the API server's --event-ttl=1h
    default_training_seconds: float = 60.0
    continue_ttl: float = 300.0  # simulated seconds before a continue token is "compacted"
    faults: dict[str, Any] | None = None  # the profile's fault rates (controllers.faultplan)
    workdir: str = ""  # where real processes keep their files (beside the state file)


def _involved_object(obj: Obj, component: str) -> Obj:
    """An event's ``involvedObject``: the kubelet names the pod's container; a Node is
    cluster-scoped (its events go to ``default``)."""
    meta = obj["metadata"]
    involved = {
        "kind": obj.get("kind", ""),
        "namespace": meta.get("namespace") or "default",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "apiVersion": obj.get("apiVersion", "v1"),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if obj.get("kind") == "Pod" and component == "kubelet":
        containers = obj["spec"].get("containers") or [{}]
        involved["fieldPath"] = f"spec.containers{{{containers[0].get('name', '')}}}"
    if obj.get("kind") == "Node":
        involved.pop("namespace")
    return involved


class Cluster:
    """Everything a request handler or controller needs, behind ``store.lock``."""

    def __init__(self, store: Store, options: Options) -> None:
        self.store = store
        self.options = options
        workdir = Path(options.workdir) if options.workdir else Path(tempfile.mkdtemp("-sandbox"))
        # The real servers (JupyterLab, code-server) of workspace images' pods (sandbox.servers).
        self.servers = Servers(workdir)
        start = store.meta_get("clock")
        self.clock = SimClock(float(start) if start is not None else time.time(), options.speed)
        store.clock_fn = self.clock.now
        # Random names are seeded too, so a run with the same --seed names pods alike.
        self._rng = random.Random(f"{options.seed}/{store.current_rv()}")
        self._event_index: dict[tuple[str, str, str, str], str] = {}
        # Controllers' memory of objects whose last sync changed nothing (uid → signature),
        # per resource; process-local, so a restart syncs everything once.
        self.settled: dict[str, dict[str, tuple[Any, ...]]] = {}
        # No event can expire before this simulated time (see ``expire_events``).
        self._next_expiry = 0.0
        for event in store.list("events"):
            self._event_index[self._event_key(event)] = event["metadata"]["name"]

    # -- time and ids --------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def timestamp(self) -> str:
        return self.stamp(self.now())

    def wall_now(self) -> float:
        return self.clock.wall(self.now())

    def stamp(self, sim_time: float) -> str:
        """The API timestamp (``metav1.Time``, wall clock) of a simulated moment."""
        return rfc3339(self.clock.wall(sim_time))

    def stamp_micro(self, sim_time: float) -> str:
        """``metav1.MicroTime`` of a simulated moment."""
        return rfc3339_micro(self.clock.wall(sim_time))

    def sim_time(self, timestamp: str) -> float:
        """The simulated moment of an API timestamp."""
        return self.clock.sim(parse_rfc3339(timestamp))

    def new_uid(self) -> str:
        return str(uuidlib.UUID(int=self._rng.getrandbits(128), version=4))

    def random_suffix(self, length: int = 5) -> str:
        # The API server's generateName alphabet: no vowels, no ambiguous characters.
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        return "".join(self._rng.choice(alphabet) for _ in range(length))

    def random_hex(self, length: int) -> str:
        return "".join(self._rng.choice(string.hexdigits[:16]) for _ in range(length))

    # -- GPU devices ---------------------------------------------------------------------
    def devices(self, node: str) -> list[Device]:
        return [Device.from_json(d) for d in self.store.meta_get(f"devices/{node}", [])]

    def assignment(self, pod_uid: str) -> list[str]:
        """Device ids (GPU or MIG UUIDs) the kubelet gave a pod at bind time."""
        return list(self.store.meta_get(f"assign/{pod_uid}", []))

    # -- events --------------------------------------------------------------------------
    @staticmethod
    def _event_key(event: Obj) -> tuple[str, str, str, str]:
        component = event.get("reportingComponent") or event.get("source", {}).get("component", "")
        return (
            event["involvedObject"].get("uid", ""),
            event.get("reason", ""),
            event.get("message", ""),
            component,
        )

    def record_event(
        self,
        obj: Obj,
        event_type: str,
        reason: str,
        message: str,
        component: str,
        *,
        action: str | None = None,
        host: str | None = None,
    ) -> Obj:
        """Record or aggregate an event about ``obj``.

        Controllers and the kubelet use the core/v1 recorder (``source``, ``count``,
        ``firstTimestamp``); the scheduler uses events.k8s.io (``action``, ``eventTime``,
        ``series``), so the two look different when listed through core/v1, as they do
        on a real cluster. Repeats of the same event bump its count instead of piling up.
        """
        message = message[:EVENT_MESSAGE_LIMIT]
        meta = obj["metadata"]
        involved = _involved_object(obj, component)
        ns = involved.get("namespace", "default")
        now = self.now()
        new_api = action is not None
        key = (involved["uid"], reason, message, component)
        existing_name = self._event_index.get(key)
        existing = self.store.get("events", ns, existing_name) if existing_name else None
        if existing is not None:
            self._repeat(existing, new_api=new_api, now=now)
            existing["involvedObject"] = involved
            return self.store.put("events", existing)
        name = f"{meta['name']}.{int(now * 1e9):x}"[:253]
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": self.new_uid(),
                "creationTimestamp": self.stamp(now),
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": event_type,
        }
        if new_api:
            event.update(
                {
                    "source": {},
                    "firstTimestamp": None,
                    "lastTimestamp": None,
                    "eventTime": self.stamp_micro(now),
                    "action": action,
                    "reportingComponent": component,
                    "reportingInstance": f"{component}-sandbox-control-plane",
                }
            )
        else:
            source: dict[str, Any] = {"component": component}
            if host:
                source["host"] = host
            event.update(
                {
                    "source": source,
                    "firstTimestamp": self.stamp(now),
                    "lastTimestamp": self.stamp(now),
                    "count": 1,
                    "eventTime": None,
                    "reportingComponent": component,
                    "reportingInstance": host or "",
                }
            )
        self._event_index[key] = name
        return self.store.put("events", event)

    def _repeat(self, event: Obj, *, new_api: bool, now: float) -> None:
        """The same event again: its series (events.k8s.io) or its count (core/v1) grows."""
        if new_api:
            series = event.get("series") or {"count": 1}
            event["series"] = {
                "count": int(series.get("count", 1)) + 1,
                "lastObservedTime": self.stamp_micro(now),
            }
        else:
            event["count"] = int(event.get("count", 1)) + 1
            event["lastTimestamp"] = self.stamp(now)

    def expire_events(self) -> None:
        """Delete events older than the TTL (the API server's etcd lease does this).

        Parsing 60,000 timestamps every controller pass to find none expired was a tenth of
        the pass: after a scan, nothing can expire before the oldest survivor's deadline
        (new events are younger), so the next scan waits for it.
        """
        now = self.now()
        if now < self._next_expiry:
            return
        cutoff = now - self.options.event_ttl
        oldest = now
        for event in self.store.iter("events"):
            created = self.sim_time(event["metadata"]["creationTimestamp"])
            if created < cutoff:
                self.store.delete(
                    "events", event["metadata"]["namespace"], event["metadata"]["name"]
                )
                self._event_index.pop(self._event_key(event), None)
            else:
                oldest = min(oldest, created)
        self._next_expiry = oldest + self.options.event_ttl
