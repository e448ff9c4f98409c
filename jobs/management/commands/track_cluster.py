"""``manage.py track_cluster``: follow each cluster's watch streams and keep job rows in step
(``jobs.tracking.tracker``): one tracker per cluster that is not disabled, each leading
through a Lease in its own cluster. A cluster an admin adds (or enables) is tracked within
``--rescan`` seconds, and one disabled or removed stops being tracked, without a restart.
Run one or more (one leads per cluster); SIGTERM or SIGINT stops it."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Any

from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection

from cluster.services import clusters_tracked
from jobs.tracking.reconcile import reconcile_requeue
from jobs.tracking.tracker import ClusterTracker

logger = logging.getLogger(__name__)


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
        self.stdout.write(f"tracker {options['identity']} started")
        running: dict[tuple[int, str, str, str], tuple[ClusterTracker, threading.Thread]] = {}
        while not stop.is_set():
            close_old_connections()
            try:
                wanted = {_key(c): c for c in clusters_tracked()}
            except Exception:
                logger.exception("tracker: the clusters could not be read")
                connection.close()
                wanted = {key: tracker.cluster for key, (tracker, _) in running.items()}
            for key in [k for k, (_, thread) in running.items() if not thread.is_alive()]:
                running.pop(key)  # it ended on an error (logged): started again below
            for key in set(running) - set(wanted):
                # Disabled, removed, or reached differently now: its tracker stops (and
                # starts again below with the new way to reach it).
                tracker, thread = running.pop(key)
                tracker.stop()
                thread.join(timeout=10)
                self.stdout.write(f"tracker of cluster {key[1]} stopped")
            for key, cluster in wanted.items():
                if key not in running:
                    # Finished jobs free quota: their teams' admission is queued as the
                    # reconcile does.
                    tracker = ClusterTracker(
                        options["identity"], on_report=reconcile_requeue, cluster=cluster
                    )
                    thread = threading.Thread(
                        target=_run, args=(tracker,), name=f"track-{cluster.name}", daemon=True
                    )
                    thread.start()
                    running[key] = (tracker, thread)
                    self.stdout.write(f"tracking cluster {cluster.name}")
            stop.wait(options["rescan"])
        for tracker, _ in running.values():
            tracker.stop()
        for _, thread in running.values():
            thread.join(timeout=10)
        self.stdout.write("tracker stopped")


def _key(cluster: Any) -> tuple[int, str, str, str]:
    """What a running tracker depends on: the cluster, and how it is reached."""
    return (
        cluster.pk,
        cluster.name,
        cluster.access,
        f"{cluster.kubeconfig_path}|{cluster.kube_context}",
    )


def _run(tracker: ClusterTracker) -> None:
    try:
        tracker.run()
    except Exception:
        logger.exception("tracker of cluster %s ended", tracker.cluster.name)
    finally:
        connection.close()
