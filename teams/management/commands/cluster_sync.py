"""Mirror every team into the cluster and refresh the GPU catalog from its nodes.

    manage.py cluster_sync            # after the first install, a restore, or `make run`
    manage.py cluster_sync --team vision

What beat does every few minutes (``teams_sync_task``, ``catalog_refresh_task``), at once:
the catalog first (the ResourceQuotas name its products), then each team's namespace,
ResourceQuota, LimitRange, NetworkPolicy and the PriorityClasses; with Kueue managed by the
portal (QUEUEING=kueue), Kueue's flavors, ClusterQueues and LocalQueues last; with Kueue run
by the platform team (KUEUE_MANAGED=false), each mapped team's quotas read from its
ClusterQueue instead. Safe to run
again: only what differs changes. In every cluster that is not disabled (a line says which
when there are several). Exits 1 when a cluster refused or could not be reached.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cluster import kube
from cluster.services import catalog_refresh, clusters_tracked
from teams.cluster_sync import team_cluster_sync
from teams.kueue_config import kueue_managed_sync, kueue_sync
from teams.models import Team


class Command(BaseCommand):
    help = "Mirror every team into the cluster and refresh the GPU catalog from the nodes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", help="only this team (its slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        teams = Team.objects.order_by("slug")
        if options["team"]:
            teams = teams.filter(slug=options["team"])
            if not teams.exists():
                raise CommandError(f"No team {options['team']!r}.")
        failed: list[str] = []
        clusters = clusters_tracked()
        for cluster in clusters:
            # Every cluster a job may be placed on; with several, each line says which.
            first = cluster.name == settings.CLUSTER_NAME
            where = f"[{cluster.name}] " if len(clusters) > 1 else ""
            with kube.on_cluster(cluster.access_to()):
                self._sync(list(teams), where=where, first=first, failed=failed)
        if failed:
            raise CommandError(f"Not mirrored: {', '.join(failed)} (see above).")

    def _sync(self, teams: list[Team], *, where: str, first: bool, failed: list[str]) -> None:
        try:
            added = catalog_refresh()
            found = [name for names in added.values() for name in names]
            self.stdout.write(
                f"{where}GPU catalog: {', '.join(found) + ' added' if found else 'up to date'}"
            )
        except kube.ClusterError as exc:
            failed.append(f"{where}the GPU catalog")
            self.stderr.write(f"{where}GPU catalog not refreshed: {exc.message}")
        for team in teams:
            try:
                outcome = team_cluster_sync(team_id=team.pk)
            except kube.ClusterError as exc:
                failed.append(f"{where}team {team.slug}")
                self.stderr.write(f"{where}team {team.slug}: {exc.message}")
                continue
            changed = {k: v for k, v in outcome.items() if v not in ("unchanged", "absent")}
            what = ", ".join(f"{k} {v}" for k, v in sorted(changed.items())) or "unchanged"
            self.stdout.write(f"{where}team {team.slug} ({team.namespace}): {what}")
        if not first and not settings.KUEUE_MANAGED:
            return  # Kueue's configuration is read back from the first cluster alone
        try:
            synced = kueue_sync() if first else kueue_managed_sync()
            kueue = {k: v for k, v in synced.items() if v != "unchanged"}
            if kueue:
                self.stdout.write(
                    f"{where}Kueue: " + ", ".join(f"{k} {v}" for k, v in sorted(kueue.items()))
                )
        except kube.ClusterError as exc:
            failed.append(f"{where}Kueue's configuration")
            self.stderr.write(f"{where}Kueue's configuration: {exc.message}")
