"""``manage.py track_cluster`` keeps one tracker per cluster that is not disabled: a cluster
added or enabled in the admin is tracked at the next look, one disabled or reached
differently loses its tracker (and gets a new one), one whose tracker died gets another,
with no restart."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cluster.models import Cluster
from jobs.tracking.tracker import TrackerSupervisor

pytestmark = pytest.mark.django_db(transaction=True)


class Idle:
    """A tracker that runs until stopped (or, with ``dies``, fails at once)."""

    def __init__(self, cluster: Cluster, dies: bool = False) -> None:
        self.cluster, self.dies = cluster, dies
        self.stopped = threading.Event()

    def run(self) -> None:
        if self.dies:
            raise RuntimeError("the watch blew up")
        self.stopped.wait(30)

    def stop(self) -> None:
        self.stopped.set()


def test_a_cluster_added_or_disabled_in_the_admin_is_tracked_or_not_without_a_restart() -> None:
    made: list[Idle] = []

    def make(cluster: Cluster) -> Any:
        # the first tracker of cluster "flaky" dies on an error
        first_flaky = cluster.name == "flaky" and all(t.cluster.name != "flaky" for t in made)
        made.append(Idle(cluster, dies=first_flaky))
        return made[-1]

    supervisor = TrackerSupervisor(make)
    try:
        supervisor.step()
        assert [t.cluster.name for t in made] == [Cluster.first().name]

        # An admin adds a cluster: tracked at the next look, the first one's left alone
        east = Cluster.objects.create(name="h200-east", kubeconfig_path="/k/east")
        supervisor.step()
        assert [t.cluster.name for t in made] == [Cluster.first().name, "h200-east"]

        # ...points it at another kubeconfig: its tracker is replaced
        Cluster.objects.filter(pk=east.pk).update(kubeconfig_path="/k/east-2")
        supervisor.step()
        assert made[1].stopped.is_set() and made[2].cluster.kubeconfig_path == "/k/east-2"

        # ...disables it: its tracker stops, none replaces it
        Cluster.objects.filter(pk=east.pk).update(state=Cluster.State.DISABLED)
        supervisor.step()
        assert made[2].stopped.is_set() and len(made) == 3
        assert {key[1] for key in supervisor.running} == {Cluster.first().name}

        # A tracker that dies on an error gets another at the next look
        Cluster.objects.create(name="flaky", kubeconfig_path="/k/flaky")
        supervisor.step()
        supervisor.running[max(supervisor.running)][1].join(timeout=5)
        supervisor.step()
        assert [t.cluster.name for t in made[3:]] == ["flaky", "flaky"]
    finally:
        supervisor.stop()
    assert all(t.stopped.is_set() or t.dies for t in made)
