"""The controller manager: one background thread running every controller in turn.

One thread (rather than one per controller) keeps the order fixed — workload controllers
create pods, the scheduler binds them, the kubelet runs them — so a given seed and speed
behave alike every run. Each object's sync is atomic under the store lock; API requests
may land between objects, as they do between real controllers' syncs.
"""

from __future__ import annotations

import logging
import threading
import time

from sandbox.controllers import (
    daemonset,
    deployment,
    faultplan,
    gc,
    gpu_operator,
    job,
    jobset,
    kubelet,
    kueue,
    lease,
    nodelifecycle,
    pytorchjob,
    trainjob,
)
from sandbox.controllers.scheduler import Scheduler
from sandbox.state import Cluster

log = logging.getLogger("sandbox.controllers")
TICK_SECONDS = 0.05  # real seconds between passes
CLOCK_SAVE_SECONDS = 0.5


class ControllerManager:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.scheduler = Scheduler(cluster)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controllers", daemon=True)
        self._last_save = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def run_once(self) -> None:
        # Each controller's step holds the store lock on its own, as separate controllers
        # would, and lets waiting API requests in between the objects it syncs: a request
        # waits for one object's sync, not for a step (tens of ms at 10,000 pods).
        steps = (
            lambda: kueue.reconcile(self.cluster),
            lambda: trainjob.reconcile(self.cluster),
            lambda: jobset.reconcile(self.cluster),
            lambda: pytorchjob.reconcile(self.cluster),
            lambda: job.reconcile(self.cluster),
            lambda: deployment.reconcile(self.cluster),
            lambda: daemonset.reconcile(self.cluster),
            self.scheduler.reconcile,
            lambda: kubelet.reconcile(self.cluster),
            lambda: lease.reconcile(self.cluster),
            lambda: nodelifecycle.reconcile(self.cluster),
            lambda: gpu_operator.reconcile(self.cluster),
            lambda: faultplan.reconcile(self.cluster),
            lambda: gc.reconcile(self.cluster),
        )
        for step in steps:
            with self.cluster.store.lock:
                step()
        with self.cluster.store.lock:
            if time.monotonic() - self._last_save > CLOCK_SAVE_SECONDS:
                self.cluster.store.meta_set("clock", self.cluster.now())
                self._last_save = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # a bug in one pass must not stop the cluster
                log.exception("controller pass failed")
            # Passes keep the store lock busy: on a big cluster (10,000 jobs, a pass of a
            # second) rest as long as a pass took, so API requests get at least half the time.
            self._stop.wait(max(TICK_SECONDS, time.monotonic() - started))
        with self.cluster.store.lock:
            self.cluster.store.meta_set("clock", self.cluster.now())
