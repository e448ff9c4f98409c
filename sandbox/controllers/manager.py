"""The controller manager: one background thread running every controller in turn.

One thread (rather than one per controller) keeps each pass atomic under the store lock
and the order fixed — workload controllers create pods, the scheduler binds them, the
kubelet runs them — so a given seed and speed behave the same every run.
"""

from __future__ import annotations

import logging
import threading
import time

from sandbox.cluster import Cluster
from sandbox.controllers import deployment, gc, job, kubelet
from sandbox.controllers.scheduler import Scheduler

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
        with self.cluster.store.lock:
            job.reconcile(self.cluster)
            deployment.reconcile(self.cluster)
            self.scheduler.reconcile()
            kubelet.reconcile(self.cluster)
            gc.reconcile(self.cluster)
            if time.monotonic() - self._last_save > CLOCK_SAVE_SECONDS:
                self.cluster.store.meta_set("clock", self.cluster.now())
                self._last_save = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a bug in one pass must not stop the cluster
                log.exception("controller pass failed")
            self._stop.wait(TICK_SECONDS)
        with self.cluster.store.lock:
            self.cluster.store.meta_set("clock", self.cluster.now())
