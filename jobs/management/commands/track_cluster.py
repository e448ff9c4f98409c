"""``manage.py track_cluster``: follow the cluster's watch streams and keep job rows in step
(``jobs.tracking.tracker``). Run one or more (one leads); SIGTERM or SIGINT stops it."""

from __future__ import annotations

import os
import signal
import socket
from typing import Any

from django.core.management.base import BaseCommand

from jobs.tracking.reconcile import reconcile_requeue
from jobs.tracking.tracker import ClusterTracker


class Command(BaseCommand):
    help = "Track jobs from the cluster's watch streams (leader-elected; run beside beat)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--identity",
            default=f"{socket.gethostname()}-{os.getpid()}",
            help="this tracker's name in the leader Lease (default: host and pid)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Finished jobs free quota: their teams' admission is queued as the reconcile does.
        tracker = ClusterTracker(options["identity"], on_report=reconcile_requeue)

        def stop(signum: int, frame: object) -> None:
            tracker.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"tracker {options['identity']} started")
        tracker.run()
        self.stdout.write("tracker stopped")
