"""``manage.py track_cluster``: follow each cluster's watch streams and keep job rows in step
(``jobs.tracking.tracker``): one tracker per cluster that is not disabled, each leading
through a Lease in its own cluster. A cluster an admin adds (or enables) is tracked within
``--rescan`` seconds, and one disabled or removed stops being tracked, without a restart.
Run one or more (one leads per cluster); SIGTERM or SIGINT stops it."""

from __future__ import annotations

import os
import signal
import socket
import threading
from typing import Any

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from cluster.models import Cluster
from jobs.tracking.reconcile import reconcile_requeue
from jobs.tracking.tracker import ClusterTracker, TrackerSupervisor


class Command(BaseCommand):
    help = "Track jobs from each cluster's watch streams (leader-elected; run beside beat)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--identity",
            default=f"{socket.gethostname()}-{os.getpid()}",
            help="this tracker's name in the leader Leases (default: host and pid)",
        )
        parser.add_argument(
            "--rescan",
            type=float,
            default=10.0,
            help="seconds between looks at the clusters the admin registered (default 10)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def stopping(signum: int, frame: object) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)

        def make(cluster: Cluster) -> ClusterTracker:
            # Finished jobs free quota: their teams' admission is queued as the reconcile does.
            return ClusterTracker(options["identity"], on_report=reconcile_requeue, cluster=cluster)

        supervisor = TrackerSupervisor(make)
        self.stdout.write(f"tracker {options['identity']} started")
        while not stop.is_set():
            close_old_connections()
            supervisor.step()
            stop.wait(options["rescan"])
        supervisor.stop()
        self.stdout.write("tracker stopped")
