"""What "idle" means, decided in one place for the Idle GPUs panel, the idle-GPU policy and
the GPU-hour accounting (three places that once each decided it, and disagreed).

A team's **rule** is its own threshold and window (``Team.idle_threshold_percent``,
``Team.idle_window_minutes``), each defaulting to the portal's
(``IDLE_GPU_THRESHOLD_PERCENT``, ``IDLE_GPU_WINDOW_MINUTES``).

- A running job **is idle** when every GPU of every pod it placed stayed under its team's
  threshold for its team's whole window, and its pods already held them one window ago
  (``jobs_idleness``; Prometheus decides both from its own samples). It is **busy** when a
  GPU it holds reached the threshold in the window. With no samples it is neither, and
  nothing acts on it.
- A running **workspace is idle** by its team's workspace rule (``workspaces_idleness``):
  no activity in its server for the team's minutes and no kernel executing, AND its GPUs
  idle as above (the default), or one of the two. A signal that cannot be read makes it
  unknown, and nothing acts on it.
- A held GPU-second **is idle** when that GPU's utilisation was under its team's threshold
  (``idle_gpu_seconds``): the panel's "GPU-hours wasted" and the accounting's idle
  GPU-hours both count these.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from jobs.models import Job
from monitoring import prometheus, queries
from monitoring.selectors.common import PodKey, placement_pods, pods_to_jobs
from teams.models import Team
from workspaces.selectors import Activity, ActivityUnavailable


@dataclass(frozen=True)
class IdleRule:
    threshold_percent: float
    window_minutes: float

    @property
    def window_seconds(self) -> float:
        return self.window_minutes * 60


def idle_rule(team: Team) -> IdleRule:
    """The team's threshold and window, each the portal's where the team sets none."""
    threshold = team.idle_threshold_percent
    window = team.idle_window_minutes
    return IdleRule(
        threshold_percent=float(
            settings.IDLE_GPU_THRESHOLD_PERCENT if threshold is None else threshold
        ),
        window_minutes=float(settings.IDLE_GPU_WINDOW_MINUTES if window is None else window),
    )


def portal_idle_rule() -> IdleRule:
    """The rule of a team that sets none of its own."""
    return IdleRule(
        threshold_percent=float(settings.IDLE_GPU_THRESHOLD_PERCENT),
        window_minutes=float(settings.IDLE_GPU_WINDOW_MINUTES),
    )


@dataclass(frozen=True)
class HeldGpu:
    node: str
    index: str
    peak: float  # its highest utilisation in the window, percent


@dataclass(frozen=True)
class Idleness:
    """One running job against its team's rule, at one moment."""

    job: Job
    rule: IdleRule
    pods: list[PodKey]
    idle: bool
    peak: float | None  # the highest utilisation any of its GPUs reached (None: no samples)
    gpus: list[HeldGpu]  # each GPU it holds, with its peak

    @property
    def busy(self) -> bool:
        return any(gpu.peak >= self.rule.threshold_percent for gpu in self.gpus)


def _key(sample: prometheus.Sample) -> PodKey:
    return (sample.labels.get("namespace", ""), sample.labels.get("pod", ""))


def jobs_idleness(*, jobs: Iterable[Job], now: datetime) -> list[Idleness]:
    """Each of ``jobs`` (running, with their ``team`` loaded) against its team's rule.

    1. The jobs are grouped by rule; per rule, two Prometheus queries: the pods whose
       GPUs all stayed under the threshold for the window (and held them a window ago),
       and each held GPU's peak over the window.
    2. A job's pods are those its placement names, else the pods the queries saw under its
       object name (``pods_to_jobs``).
    3. It is idle when it has pods and every one of them is in the first answer.
    Raises ``MetricsUnavailable``.
    """
    # The portal's rule is always asked, so a Prometheus that cannot answer is said even
    # when no job runs (the panel shows "metrics unavailable", not "nothing idle").
    groups: dict[IdleRule, list[Job]] = {portal_idle_rule(): []}
    for job in jobs:
        groups.setdefault(idle_rule(job.team), []).append(job)
    found: list[Idleness] = []
    for rule, members in groups.items():
        seconds = rule.window_seconds
        peaks = {
            _key(s): s.value
            for s in prometheus.query(
                queries.idle_pods(threshold_percent=rule.threshold_percent, window_seconds=seconds),
                at=now,
            )
        }
        gpus: dict[PodKey, list[HeldGpu]] = defaultdict(list)
        for s in prometheus.query(queries.held_device_peaks(window_seconds=seconds), at=now):
            node = s.labels.get("Hostname") or s.labels.get("hostname") or s.labels.get("node")
            gpus[_key(s)].append(HeldGpu(node or "?", s.labels.get("gpu", "?"), s.value or 0.0))
        seen: dict[int, list[PodKey]] = defaultdict(list)
        for pod, holder in pods_to_jobs(set(peaks) | set(gpus), members).items():
            seen[holder.pk].append(pod)
        for job in members:
            pods = [(job.namespace, p) for p in placement_pods(job)] or sorted(seen[job.pk])
            held = [gpu for pod in pods for gpu in gpus.get(pod, [])]
            idle = bool(pods) and all(pod in peaks for pod in pods)
            if idle:
                peak = max((peaks[pod] or 0.0 for pod in pods), default=None)
            else:
                peak = max((gpu.peak for gpu in held), default=None)
            found.append(Idleness(job=job, rule=rule, pods=pods, idle=idle, peak=peak, gpus=held))
    return found


def idle_gpu_seconds(
    *,
    teams: Iterable[Team],
    lookback_seconds: float,
    step: int,
    at: datetime,
    timeout: float | None = None,
) -> dict[PodKey, float]:
    """Each pod's GPU-seconds under its team's threshold while held, in the lookback before
    ``at`` (summed over its GPUs): one query per threshold in use. Raises
    ``MetricsUnavailable``."""
    namespaces: dict[float, set[str]] = defaultdict(set)
    for team in teams:
        namespaces[idle_rule(team).threshold_percent].add(team.namespace)
    seconds: dict[PodKey, float] = {}
    for threshold, wanted in namespaces.items():
        for s in prometheus.query(
            queries.idle_gpu_seconds(
                threshold_percent=threshold,
                lookback_seconds=lookback_seconds,
                step=step,
                recorded=bool(settings.PROMETHEUS_RECORDING_RULES),
            ),
            at=at,
            timeout=timeout,
        ):
            if _key(s)[0] in wanted:
                seconds[_key(s)] = s.value or 0.0
    return seconds


@dataclass(frozen=True)
class WorkspaceIdleness:
    """One running workspace against its team's workspace rule (``Team.workspace_idle``).

    ``idle``: every signal the rule asks for says idle. ``unknown``: a signal it asks for
    could not be read (why, in words): nothing is decided from it, in either direction.
    ``over_lifetime``: it has run ``Team.workspace_max_hours``, busy or not."""

    job: Job
    idle: bool
    over_lifetime: bool
    unknown: str
    finding: str  # what was seen, in words


def _activity_quiet(activity: Activity, team: Team, now: datetime) -> tuple[bool, str]:
    quiet_for = (now - activity.last_activity).total_seconds() / 60
    if activity.busy_kernels:
        return False, f"{activity.busy_kernels} kernel(s) executing"
    if quiet_for < team.workspace_idle_minutes:
        return False, f"last activity {quiet_for:.0f} min ago"
    return True, (
        f"no activity in its server for {quiet_for:.0f} min (the team's limit: "
        f"{team.workspace_idle_minutes:g} min), no kernel executing"
    )


def _gpu_quiet(found: Idleness | None) -> tuple[bool | None, str]:
    """(quiet, words); quiet None: no samples to decide from."""
    if found is None or (not found.idle and found.peak is None):
        return None, "no GPU samples yet"
    rule = found.rule
    if found.idle:
        return True, (
            f"its GPUs under {rule.threshold_percent:g}% for {rule.window_minutes:g} min "
            f"(peak {found.peak or 0:.1f}%)"
        )
    return False, f"its GPUs reached {found.peak or 0:.1f}%"


def workspaces_idleness(
    *,
    jobs: Iterable[Job],
    now: datetime,
    activity_of: Callable[[Job], Activity],
) -> list[WorkspaceIdleness]:
    """Each running workspace (``team`` loaded) against its team's rule: both signals by
    default (no activity in its server for the team's minutes AND its GPUs idle by the
    team's idle-GPU rule), or one of them; and its maximum lifetime.

    1. GPUs: ``jobs_idleness`` for the workspaces with GPUs whose rule asks for them
       (Prometheus down: every GPU signal is unknown).
    2. Activity: ``activity_of`` (its server's API; ``ActivityUnavailable``: unknown).
    3. A workspace without GPUs has nothing to be busy on: its GPU signal counts as idle.
    """
    jobs = list(jobs)
    modes = {job.pk: job.team.workspace_idle for job in jobs}
    wants_gpu = [j for j in jobs if modes[j.pk] in ("both", "gpu") and j.gpu_count > 0]
    gpus: dict[int, Idleness] = {}
    metrics_problem = ""
    if wants_gpu:
        try:
            gpus = {found.job.pk: found for found in jobs_idleness(jobs=wants_gpu, now=now)}
        except prometheus.MetricsUnavailable as exc:
            metrics_problem = f"GPU metrics unavailable ({exc})"
    verdicts = []
    for job in jobs:
        team, mode = job.team, modes[job.pk]
        hours = team.workspace_max_hours
        run = (now - job.started_at).total_seconds() / 3600 if job.started_at else 0.0
        over = hours is not None and run >= hours
        quiet: list[bool] = []
        words: list[str] = [f"running {run:.1f} h"] if over else []
        unknown = ""
        if mode in ("both", "activity"):
            try:
                activity_idle, said = _activity_quiet(activity_of(job), team, now)
                quiet.append(activity_idle)
                words.append(said)
            except ActivityUnavailable as exc:
                unknown = f"activity unknown: {exc}"
        if mode in ("both", "gpu") and job.gpu_count > 0:
            if metrics_problem:
                unknown = unknown or metrics_problem
            else:
                gpu_idle, said = _gpu_quiet(gpus.get(job.pk))
                words.append(said)
                if gpu_idle is None:
                    unknown = unknown or said
                else:
                    quiet.append(gpu_idle)
        idle = mode != "off" and not unknown and bool(quiet) and all(quiet)
        verdicts.append(WorkspaceIdleness(job, idle, over, unknown, "; ".join(words)))
    return verdicts


@dataclass(frozen=True)
class NodeGpuUse:
    """A node's whole GPUs over a window: how many reported, their mean and highest
    utilisation (percent)."""

    node: str
    gpus: int
    mean_percent: float
    peak_percent: float

    @property
    def idle(self) -> bool:
        """Every whole GPU stayed under the portal's idle threshold for the whole window."""
        return self.gpus > 0 and self.peak_percent < portal_idle_rule().threshold_percent


def nodes_gpu_use(*, window_seconds: float) -> dict[str, NodeGpuUse]:
    """Each node's whole GPUs (not MIG instances) over the window, from DCGM. Raises
    ``prometheus.MetricsUnavailable``."""
    whole = '{GPU_I_ID=""}'
    means = prometheus.query(queries.node_utilisation("avg", whole, window_seconds))
    peaks = prometheus.query(queries.node_utilisation("max", whole, window_seconds))
    counts = prometheus.query(queries.node_gpu_count(whole, window_seconds))
    peak = {s.labels.get("node", ""): s.value for s in peaks}
    count = {s.labels.get("node", ""): s.value for s in counts}
    return {
        s.labels["node"]: NodeGpuUse(
            node=s.labels["node"],
            gpus=int(count.get(s.labels["node"]) or 0),
            mean_percent=float(s.value or 0.0),
            peak_percent=float(peak.get(s.labels["node"]) or 0.0),
        )
        for s in means
        if s.labels.get("node")
    }
