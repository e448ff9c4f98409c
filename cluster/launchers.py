"""Which training launchers the cluster can run (docs/jobs.md, "Launchers"): the Indexed
Job always; Kubeflow's PyTorchJob and Trainer's TrainJob where the cluster serves their
APIs (and, for TrainJob, has the runtime ``TRAINJOB_RUNTIME``) and the admin enabled them
(``TRAINING_LAUNCHERS``).

Discovery is asked at most once a minute per process: the answer changes when an operator
is installed, not between two submissions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from cluster import kube
from cluster.nodes import cluster_error_text
from core.errors import ClusterUnavailable

JOB = "job"
PYTORCHJOB = "pytorchjob"
TRAINJOB = "trainjob"


@dataclass(frozen=True)
class Launcher:
    name: str  # the spec's ``launcher`` value
    kind: str  # the object the portal creates
    api: str  # its group/version
    plural: str

    @property
    def what(self) -> str:
        return f"{self.kind} ({self.api})"


LAUNCHERS: dict[str, Launcher] = {
    JOB: Launcher(JOB, "Job", "batch/v1", "jobs"),
    PYTORCHJOB: Launcher(PYTORCHJOB, "PyTorchJob", "kubeflow.org/v1", "pytorchjobs"),
    TRAINJOB: Launcher(TRAINJOB, "TrainJob", "trainer.kubeflow.org/v1alpha1", "trainjobs"),
}
CACHE_SECONDS = 60.0
_cache: dict[tuple[str | bool, ...], tuple[float, frozenset[str]]] = {}
_lock = threading.Lock()


def _cached(what: str, ask: Callable[[], frozenset[str]]) -> frozenset[str]:
    key = (*kube.cluster_key(), what)
    with _lock:
        found = _cache.get(key)
        if found is not None and time.monotonic() - found[0] < CACHE_SECONDS:
            return found[1]
    result = ask()
    with _lock:
        _cache[key] = (time.monotonic(), result)
    return result


def served_apis() -> frozenset[str]:
    """The launchers whose API the cluster serves (``job`` always), by discovery. Raises
    ``kube.ClusterError`` when the cluster cannot be asked."""

    def ask() -> frozenset[str]:
        served = {JOB}
        for launcher in LAUNCHERS.values():
            if launcher.name == JOB:
                continue
            group, version = launcher.api.split("/")
            if launcher.plural in kube.served_resources(group, version):
                served.add(launcher.name)
        return frozenset(served)

    return _cached("apis", ask)


def served_launchers() -> frozenset[str]:
    """The launchers the cluster can run: its API served, and for TrainJob the runtime
    ``TRAINJOB_RUNTIME`` in place (Trainer without it cannot run the portal's jobs).
    Raises ``kube.ClusterError`` when the cluster cannot be asked."""

    def ask() -> frozenset[str]:
        served = set(served_apis())
        if TRAINJOB in served and not _runtime_exists(settings.TRAINJOB_RUNTIME):
            served.discard(TRAINJOB)
        return frozenset(served)

    return _cached(f"launchers|{settings.TRAINJOB_RUNTIME}", ask)


def _runtime_exists(name: str) -> bool:
    try:
        kube.get("ClusterTrainingRuntime", name, None)
    except kube.ObjectNotFound:
        return False
    return True


# The launchers the portal builds, and those it runs on Kueue (Kueue's Kubeflow v1
# integration is on its way out: not PyTorchJob; TrainJob through Kueue's
# trainer.kubeflow.org/trainjob integration).
BUILT = (JOB, PYTORCHJOB, TRAINJOB)
ON_KUEUE = (JOB, TRAINJOB)


def _offered(served: frozenset[str]) -> list[str]:
    usable = ON_KUEUE if settings.QUEUEING == "kueue" else BUILT
    return [n for n in settings.TRAINING_LAUNCHERS if n in served and n in usable]


def launchers_offered_now() -> list[str]:
    """What a training job may use now: enabled (in the order of ``TRAINING_LAUNCHERS``),
    served by the cluster, built by the portal and, on Kueue, managed by it."""
    return _offered(served_launchers())


def launchers_list() -> list[dict[str, object]]:
    """Every launcher the portal knows, with whether the cluster serves it and whether a
    training job may use it now (``GET /api/v1/cluster/launchers/``). Raises
    ``ClusterUnavailable`` (a 503 naming the cluster's trouble) when it cannot be asked."""
    try:
        served = served_launchers()
    except kube.ClusterError as exc:
        raise ClusterUnavailable(cluster_error_text(exc)) from exc
    return [
        {
            "name": launcher.name,
            "kind": launcher.kind,
            "api": launcher.api,
            "served": launcher.name in served,
            "enabled": launcher.name in settings.TRAINING_LAUNCHERS,
            "offered": launcher.name in _offered(served),
            "default": launcher.name == settings.DEFAULT_TRAINING_LAUNCHER,
        }
        for launcher in LAUNCHERS.values()
    ]


def owner_kinds() -> tuple[str, ...]:
    """The operator kinds beyond Job and Deployment the portal's jobs may be, whose API the
    cluster serves (what tracking lists and watches, whether or not a job may use them now:
    jobs made earlier are followed to their end)."""
    try:
        served = served_apis()
    except kube.ClusterError:
        return ()
    return tuple(LAUNCHERS[n].kind for n in sorted(served) if n != JOB)


def launchers_forget() -> None:
    """Ask discovery again next time (tests, or after installing an operator)."""
    with _lock:
        _cache.clear()
