"""Which cluster a job runs on: the one its spec's ``cluster`` names, or, for ``any``, the
cluster where it would start soonest, with the reason said in the job's timeline.

A cluster takes new work while it is enabled (not draining nor disabled); ``any`` also
passes over one its tracker finds unreachable while another answers. For ``any`` with
several such clusters, each is asked the fit preview's question (``jobs.selectors.fit``),
and the best answer wins: fits now on nominal quota, then on borrowed quota, then by
preempting, then waiting; among equals, the one where fewer of the team's jobs are queued
ahead of it, then the first by name (so the first that fits now on nominal quota ends the
asking). One cluster is chosen without asking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from cluster.models import Cluster
from cluster.services import cluster_first, on_cluster_row
from core.errors import ApplicationError
from jobs.selectors.fit import FitPreview

ANY = "any"

# The fit preview's verdicts, best first, and how a person reads each beside a cluster.
_VERDICTS = {
    "fits": (0, "fits now"),
    "preempts": (2, "starts by preempting lower-priority work"),
    "waits-for-quota": (3, "waits for the team's quota"),
    "waits": (4, "waits for GPUs to free"),
    "unknown": (5, "not answering"),
    "never": (6, "has no node that could run it"),
}


def _answer(fit: FitPreview) -> tuple[int, str]:
    if fit.verdict == "fits" and fit.quota == "borrowing":
        return 1, "fits now on borrowed quota"
    rank, words = _VERDICTS.get(fit.verdict, (5, fit.verdict))
    if fit.ahead:
        words += f" ({fit.ahead} job{'s' if fit.ahead != 1 else ''} ahead)"
    return rank, words


@dataclass(frozen=True)
class Placement:
    cluster: Cluster
    reason: str  # "" when there was no choice to make
    fit: FitPreview | None = None  # the chosen cluster's answer, when asked


def _error(message: str) -> ApplicationError:
    return ApplicationError(f"cluster: {message}", field_errors={"cluster": [message]})


def clusters_for(name: str) -> list[Cluster]:
    """The clusters a spec's ``cluster`` allows, in name order: the one it names, or every
    cluster taking new work for ``any``. Refused, naming the field and the choices, when
    there is none."""
    clusters = list(Cluster.objects.order_by("name"))
    if all(c.name != settings.CLUSTER_NAME for c in clusters):
        cluster_first()  # made again from the settings (a flushed database lost it)
        clusters = list(Cluster.objects.order_by("name"))
    open_ = [c for c in clusters if c.takes_new_work]
    choices = ", ".join(c.name for c in open_) or "none now"
    if name == ANY:
        if not open_:
            raise _error(
                "No cluster takes new work now (each is draining or disabled); try again "
                "later or ask a platform admin."
            )
        # Not where the tracker finds no answer, while another answers (with none that
        # answers, the job waits for one, as it would on a cluster down for a while).
        return [c for c in open_ if c.unreachable_since is None] or open_
    cluster = next((c for c in clusters if c.name == name), None)
    if cluster is None:
        raise _error(f"There is no cluster '{name}'; use one of: {choices}, or 'any'.")
    if not cluster.takes_new_work:
        raise _error(
            f"Cluster '{name}' is {cluster.state}: it takes no new work; use one of: "
            f"{choices}, or 'any'."
        )
    return [cluster]  # one not answering now: the job waits for it (its page says so)


def job_place(candidates: list[Cluster], preview: Callable[[Cluster], FitPreview]) -> Placement:
    """The candidate where ``preview`` (run against each cluster in turn) answers best."""
    if len(candidates) == 1:
        return Placement(candidates[0], "")
    answers: list[tuple[int, str, Cluster, FitPreview]] = []
    for cluster in candidates:
        with on_cluster_row(cluster.pk):
            fit = preview(cluster)
        rank, words = _answer(fit)
        answers.append((rank, words, cluster, fit))
        if rank == 0:
            # Nothing beats fitting now on nominal quota, and the clusters are asked in the
            # order that breaks ties: the rest need not be asked (each answer is a scheduling
            # pass over its cluster's snapshot, ~0.25 s at 540 nodes: bench_placement).
            break
    # Among equal answers, where fewer of the team's jobs wait ahead of it (it starts sooner
    # there), then the first by name.
    rank, _, chosen, fit = min(
        answers, key=lambda answer: (answer[0], answer[3].ahead, answer[2].name)
    )
    reason = "; ".join(f"{c.name}: {words}" for _, words, c, _ in answers)
    return Placement(chosen, f"Placed on {chosen.name} ({reason}).", fit)
