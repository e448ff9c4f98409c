"""PromQL builders for every panel (pure functions: strings in, strings out, no I/O).

Everything is aggregated in PromQL (``sum``/``avg``/``max by (…)``) so Prometheus
returns one series per thing drawn, never the raw per-device series for Python to
fold. Three facts about dcgm-exporter output shape every query:

1. The node is ``Hostname`` (``hostname`` in newer releases): ``with_node`` copies
   whichever is present into a ``node`` label, and queries that show the node group by
   ``node``. Aggregates that do not show it group by the host labels themselves
   (``DEVICE_KEY``): the same devices, without ``label_replace`` on every raw series at
   every step, which was about half of what a 24 h cluster query cost Prometheus.
2. MIG devices report no ``DCGM_FI_DEV_GPU_UTIL``; their utilisation is
   ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a 0–1 ratio) × 100. ``or`` prefers the
   first operand when both exist for the same labels (whole GPUs with profiling on).
3. A time-sliced GPU repeats its one series once per pod sharing it, with the same
   value: ``max by`` a device's labels counts it once, and a pod's "utilisation"
   is really the whole GPU's (the UI says so).
"""

from __future__ import annotations

import math
import re

# The ranges a page or API accepts, in seconds.
RANGES: dict[str, int] = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800}
DEFAULT_RANGE = "1h"
MAX_POINTS = 1000
# Steps a person reads easily on an axis; the smallest that keeps a series under MAX_POINTS.
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)

UTIL = "DCGM_FI_DEV_GPU_UTIL"
MIG_UTIL = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
POWER = "DCGM_FI_DEV_POWER_USAGE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"

# One physical device (or MIG instance): what ``max by`` keeps to de-duplicate the
# per-pod copies of a time-sliced GPU's series.
DEVICE = ("node", "gpu", "GPU_I_ID")
# The same device told apart by the labels the raw series carry: the host under either
# spelling (and ``node`` where a relabelling adds one; one host, one value of each).
GPU_KEY = ("node", "Hostname", "hostname", "gpu")
DEVICE_KEY = (*GPU_KEY, "GPU_I_ID")


class RangeError(ValueError):
    """An unknown ``range`` value; the message lists the accepted ones."""


def parse_range(value: str | None) -> tuple[str, int]:
    """``(key, seconds)`` for a ``range`` parameter; empty means the default (1h)."""
    key = value or DEFAULT_RANGE
    if key not in RANGES:
        raise RangeError(f"range must be one of {', '.join(RANGES)} (got {value!r}).")
    return key, RANGES[key]


def step_for(seconds: float, max_points: int = MAX_POINTS) -> int:
    """The query step (seconds) for a window: the smallest readable step giving at most
    ``max_points`` points per series (Prometheus returns ``window/step + 1`` points)."""
    needed = max(1.0, seconds / max(1, max_points - 1))
    for step in NICE_STEPS:
        if step >= needed:
            return step
    return math.ceil(needed)


def duration(seconds: float) -> str:
    """A PromQL duration literal, whole seconds (``[600s]``)."""
    return f"{max(1, round(seconds))}s"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_escape(value: str) -> str:
    """Escape a literal for an RE2 matcher (``=~``); Prometheus anchors the whole pattern."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", value)


def matchers(
    *, equal: dict[str, str] | None = None, regex: dict[str, str] | None = None, held: bool = False
) -> str:
    """``{a="x",b=~"y|z",pod!=""}``; ``held`` keeps only devices a pod holds."""
    parts = [f"{k}={_quote(v)}" for k, v in sorted((equal or {}).items())]
    parts += [f"{k}=~{_quote(v)}" for k, v in sorted((regex or {}).items())]
    if held:
        parts.append('pod!=""')
    return "{" + ",".join(parts) + "}" if parts else ""


def with_node(expr: str) -> str:
    """Copy ``Hostname`` or ``hostname`` (whichever the exporter sends) into ``node``."""
    inner = f'label_replace({expr}, "node", "$1", "Hostname", "(.+)")'
    return f'label_replace({inner}, "node", "$1", "hostname", "(.+)")'


def raw_utilisation(selector: str = "") -> str:
    """Per-device utilisation in percent, MIG instances included, labels as scraped."""
    return f"({UTIL}{selector} or ({MIG_UTIL}{selector} * 100))"


def utilisation(selector: str = "") -> str:
    """Per-device utilisation in percent, MIG instances included, with a ``node`` label."""
    return with_node(raw_utilisation(selector))


def utilisation_over_time(function: str, selector: str, window_seconds: float) -> str:
    """``<function>_over_time`` of each device's utilisation: applied to the raw series (a
    range needs a plain selector), then MIG-merged like ``raw_utilisation``."""
    window = f"[{duration(window_seconds)}]"
    whole = f"{function}({UTIL}{selector}{window})"
    mig = f"{function}({MIG_UTIL}{selector}{window})"
    return f"({whole} or ({mig} * 100))"


def by(*labels: str) -> str:
    return f"by ({', '.join(labels)})"


# --- Cluster overview ------------------------------------------------------------------


def cluster_utilisation_by_gpu() -> str:
    """Heatmap cells: node × GPU index. MIG instances of one GPU are averaged."""
    return f"avg {by('node', 'gpu')} ({utilisation()})"


def cluster_temperature_by_gpu() -> str:
    return f"max {by('node', 'gpu')} ({with_node(TEMP)})"


def gpu_utilisation_by_host() -> str:
    """``cluster_utilisation_by_gpu`` without the ``node`` label: the same GPUs, cheaper."""
    return f"avg {by(*GPU_KEY)} ({raw_utilisation()})"


def cluster_utilisation(*, recorded: bool = False) -> str:
    """Cluster utilisation over time: the mean of the GPUs' utilisation (each GPU once, its
    MIG instances averaged first): the mean of ``cluster_utilisation_by_gpu``'s cells.

    ``recorded``: the same line as the recording rule keeps it (``recording_rules``)."""
    if recorded:
        return _recorded(CLUSTER_UTILISATION_RECORD)
    return f"avg({gpu_utilisation_by_host()})"


def firing_alerts() -> str:
    """The ``ALERTS`` series of firing alerts (the alerts API adds values and annotations)."""
    return 'ALERTS{alertstate="firing"}'


# --- Idle GPUs -------------------------------------------------------------------------


def idle_pods(*, threshold_percent: float, window_seconds: float) -> str:
    """Pods whose every GPU stayed under ``threshold_percent`` for the whole window; the
    value is the highest utilisation any of them reached.

    ``and … offset <window>`` keeps only pods that already held their GPUs one window
    ago: a pod that started a minute ago has not been idle for 30 minutes. Prometheus
    decides this from its own samples, so no clock other than its own is trusted.
    """
    held = matchers(held=True)
    peak = utilisation_over_time("max_over_time", held, window_seconds)
    back = duration(window_seconds)
    earlier = f"({UTIL}{held} offset {back} or {MIG_UTIL}{held} offset {back})"
    return (
        f"max {by('namespace', 'pod')} ({peak}) < {threshold_percent:g}"
        f" and on (namespace, pod) group {by('namespace', 'pod')} ({earlier})"
    )


def held_device_peaks(*, window_seconds: float) -> str:
    """Each held device's highest utilisation over the window, per holding pod: the idle
    policy's evidence that a pod is busy again, and the GPUs a warning names. A pod with
    no series here has no samples: the policy never acts on missing metrics."""
    peak = utilisation_over_time("max_over_time", matchers(held=True), window_seconds)
    return f"max {by('namespace', 'pod', *DEVICE_KEY)} ({peak})"


def idle_gpu_seconds(
    *, threshold_percent: float, lookback_seconds: float, step: int, recorded: bool = False
) -> str:
    """Seconds each pod's GPUs spent under the threshold while held (summed over its GPUs).

    A device's series carries ``pod`` only while a pod holds it, so counting the
    below-threshold samples of the subquery counts held-and-idle time only. ``recorded``:
    the held devices' utilisation as the recording rule keeps it (``recording_rules``).
    """
    device = POD_DEVICE_UTILISATION_RECORD if recorded else _held_devices_by_pod()
    below = f"({device} < bool {threshold_percent:g})"
    counted = f"sum_over_time({below}{_steps(lookback_seconds, step)})"
    return f"sum {by('namespace', 'pod')} ({counted}) * {step}"


def _steps(lookback_seconds: float, step: int) -> str:
    """A subquery range over the steps in (now − lookback, now]: one second short, because
    Prometheus 2 takes a range's start as well (3 does not), and a step exactly at the start
    belongs to the window before (two consecutive days would both count midnight)."""
    return f"[{duration(max(1.0, lookback_seconds - 1))}:{duration(step)}]"


def used_gpu_seconds(*, lookback_seconds: float, step: int, recorded: bool = False) -> str:
    """GPU-seconds each pod's GPUs did work in the lookback: every held device's utilisation
    integrated over time (Σ utilisation/100 × step at each subquery step).

    The subquery's steps are aligned to multiples of ``step`` since the epoch, each standing
    for the ``step`` seconds before it, so consecutive windows (two days) split a pod's
    hours without counting any step twice. MIG instances count their engine activity; a
    time-sliced GPU's per-pod copy carries the whole GPU's utilisation (DCGM cannot tell
    the pods sharing it apart).
    """
    device = POD_DEVICE_UTILISATION_RECORD if recorded else _held_devices_by_pod()
    counted = f"sum_over_time({device}{_steps(lookback_seconds, step)})"
    return f"sum {by('namespace', 'pod')} ({counted}) * {step / 100:g}"


def _devices(selector: str, *group: str) -> str:
    """Each device's utilisation once per ``group`` (a time-sliced GPU's per-pod copies
    merged, unless ``pod`` is in the group)."""
    return f"max {by(*group, *DEVICE_KEY)} ({raw_utilisation(selector)})"


def _held_devices_by_pod() -> str:
    """Each held device's utilisation, once per holding pod (a pod's copy of a shared GPU)."""
    return _devices(matchers(held=True), "namespace", "pod")


# --- GPU failures ----------------------------------------------------------------------


def held_devices_over(window_seconds: float) -> str:
    """Every (pod, device) a pod held at some point in the window (its utilisation series
    carry the pod while it holds the device)."""
    held = matchers(held=True)
    window = f"[{duration(window_seconds)}]"
    source = f"(max_over_time({UTIL}{held}{window}) or max_over_time({MIG_UTIL}{held}{window}))"
    return f"max {by('namespace', 'pod', *GPU_KEY)} ({source})"


def gpu_xid_now() -> str:
    """Each GPU's last XID (DCGM keeps it until the driver reloads), where it is not 0."""
    return f"max {by('node', 'gpu')} ({with_node(XID)}) > 0"


def gpu_ecc_dbe_now() -> str:
    """Each GPU's double-bit ECC error count, where it is not 0."""
    return f"max {by('node', 'gpu')} ({with_node(ECC_DBE)}) > 0"


def gpu_xid_highest(window_seconds: float) -> str:
    """Each GPU's highest XID in the window, over all its series (the exporter labels a held
    GPU's series with the pod: a fault under a job ends the pod's series and starts one
    without a pod that carries the code from its first sample). Compared before and after
    a job failed, it says whether the GPU reported a new XID then
    (``monitoring.gpu_failures``). DCGM keeps a GPU's last XID until the driver reloads, so
    only a rise is news."""
    return f"max {by(*GPU_KEY)} (max_over_time({XID}[{duration(window_seconds)}]))"


# --- Team usage ------------------------------------------------------------------------


def _team_devices(namespace: str) -> str:
    """Each device the team's pods hold, once (a time-sliced GPU's per-pod copies merged)."""
    return _devices(matchers(equal={"namespace": namespace}))


def team_utilisation(namespace: str, *, recorded: bool = False) -> str:
    """Mean utilisation (%) of the GPUs the team's pods hold (a shared GPU counts once)."""
    if recorded:
        return _recorded(NAMESPACE_UTILISATION_RECORD, namespace)
    return f"avg({_team_devices(namespace)})"


def team_busy_gpus(namespace: str, *, recorded: bool = False) -> str:
    """GPU-equivalents actually busy: Σ utilisation / 100 over the team's devices."""
    if recorded:
        return _recorded(NAMESPACE_BUSY_RECORD, namespace)
    return f"sum({_team_devices(namespace)}) / 100"


# --- Recording rules -------------------------------------------------------------------
#
# A 24 h line over every GPU makes Prometheus read each device's samples at every step
# (seconds at 1,024 GPUs). These rules keep the lines themselves, one sample per
# evaluation, so the panels read one series, and the held devices' utilisation per pod,
# which the idle GPU-seconds count without recomputing it at every subquery step; the
# rules file ships them and ``PROMETHEUS_RECORDING_RULES`` tells the portal the Prometheus
# it reads evaluates them.

CLUSTER_UTILISATION_RECORD = "gpu_portal:cluster_gpu_utilisation:avg"
POD_DEVICE_UTILISATION_RECORD = "gpu_portal:pod_gpu_utilisation:max"
NAMESPACE_UTILISATION_RECORD = "gpu_portal:namespace_gpu_utilisation:avg"
NAMESPACE_BUSY_RECORD = "gpu_portal:namespace_busy_gpus:sum"


def recording_rules() -> dict[str, str]:
    """Record name → expression: exactly the raw panel queries, kept for every namespace."""
    held = _devices(matchers(held=True), "namespace")
    return {
        CLUSTER_UTILISATION_RECORD: cluster_utilisation(),
        POD_DEVICE_UTILISATION_RECORD: _held_devices_by_pod(),
        NAMESPACE_UTILISATION_RECORD: f"avg {by('namespace')} ({held})",
        NAMESPACE_BUSY_RECORD: f"sum {by('namespace')} ({held}) / 100",
    }


def _recorded(record: str, namespace: str | None = None) -> str:
    # max() of the one recorded series: its values without its name and labels, the shape
    # the raw expression returns (and one line even if a second copy of the rules ran).
    selector = matchers(equal={"namespace": namespace}) if namespace is not None else ""
    return f"max({record}{selector})"


# --- One job's GPUs --------------------------------------------------------------------

JOB_METRICS: dict[str, tuple[str, str]] = {
    # key: (title, unit)
    "utilisation": ("GPU utilisation", "%"),
    "memory_used": ("GPU memory used", "MiB"),
    "temperature": ("GPU temperature", "°C"),
    "power": ("Power draw", "W"),
}


def job_pods_selector(namespace: str, pods: list[str], object_name: str) -> str:
    """The job's pods by name when known (placement), else every pod named after the job."""
    if pods:
        pattern = "|".join(regex_escape(p) for p in sorted(set(pods)))
    else:
        pattern = regex_escape(object_name) + "-.+"
    return matchers(equal={"namespace": namespace}, regex={"pod": pattern})


def job_gpu_metric(metric: str, selector: str) -> str:
    """One line per (pod, device) the job holds."""
    if metric not in JOB_METRICS:
        raise ValueError(f"unknown job metric {metric!r}")
    source = {
        "utilisation": utilisation(selector),
        "memory_used": with_node(f"{FB_USED}{selector}"),
        "temperature": with_node(f"{TEMP}{selector}"),
        "power": with_node(f"{POWER}{selector}"),
    }[metric]
    return f"max {by('pod', *DEVICE)} ({source})"


# --- GPU shapes (the GPU stack page's advice) ----------------------------------------------


def node_utilisation(function: str, selector: str, window_seconds: float) -> str:
    """Per node, ``function`` (avg or max) over its devices of each one's
    ``<function>_over_time`` utilisation in the window."""
    inner = with_node(f"{function}_over_time({UTIL}{selector}[{duration(window_seconds)}])")
    return f"{function} {by('node')} ({inner})"


def node_gpu_count(selector: str, window_seconds: float) -> str:
    """Per node, how many devices reported utilisation in the window."""
    inner = with_node(f"last_over_time({UTIL}{selector}[{duration(window_seconds)}])")
    return f"count {by('node')} ({inner})"
