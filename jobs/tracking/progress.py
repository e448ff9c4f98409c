"""Where a training job stands and when it may finish, from what its training script logs
(pure functions; ``jobs.services.progress`` reads the log).

The contract (docs/jobs.md): rank 0 prints ``GPU_PORTAL_PROGRESS step=<n> total=<m>`` from
time to time. The estimate is made only from what the log shows: the steps done per second
between the run's progress lines, projected over the steps left. None until there are
enough lines over enough time to tell a rate from noise; each estimate says how it was made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling.k8s_time import parse_time

PROGRESS_LINE = re.compile(
    r"^(?P<at>\S+) .*\bGPU_PORTAL_PROGRESS step=(?P<step>\d+) total=(?P<total>\d+)"
)
# Enough signal for an estimate: this many progress lines of the run, over at least this
# share of its steps (a rate read over a sliver of the run is mostly warm-up and noise).
MIN_LINES = 3
MIN_SHARE = 0.05


@dataclass(frozen=True)
class Progress:
    step: int | None
    total: int | None
    at: datetime  # when it was reported: the newest progress line's or status's time
    eta_seconds: float | None
    eta_basis: str
    source: str = "log"
    percent: float | None = None  # as reported; else from step and total

    def as_json(self) -> dict[str, Any]:
        """The API's ``progress`` (exactly these names: clients depend on them)."""
        percent = self.percent
        if percent is None and self.step is not None and self.total:
            percent = 100.0 * self.step / self.total
        return {
            "percent": None if percent is None else round(min(100.0, percent), 1),
            "step": self.step,
            "total": self.total,
            "source": self.source,
        }


TRAINER_STATUS = "trainerStatus"


def progress_from_trainer_status(status: dict[str, Any], now: datetime) -> Progress | None:
    """What a TrainJob's training code reported through Kubeflow Trainer (its
    ``status.trainerStatus``: ``progressPercentage``, ``estimatedRemainingSeconds`` and
    metrics, ``step`` and ``total`` among them when it sends those), the time left counted
    down from when it was reported; None when it reported no progress."""
    percent = status.get("progressPercentage")
    at = parse_time(str(status.get("lastUpdatedTime") or ""))
    if percent is None or at is None:
        return None
    metrics = {m.get("name"): m.get("value") for m in status.get("metrics") or []}

    def whole(name: str) -> int | None:
        value = str(metrics.get(name) or "")
        return int(value) if value.isdigit() else None

    remaining = status.get("estimatedRemainingSeconds")
    if remaining is None:
        eta, basis = None, "no estimate: the training code reports no time left"
    else:
        eta = max(0.0, float(remaining) - max(0.0, (now - at).total_seconds()))
        basis = (
            f"reported by the training code through Kubeflow Trainer at {at:%H:%M:%S} "
            "(trainerStatus), counted down since"
        )
    return Progress(
        whole("step"), whole("total"), at, eta, basis, source=TRAINER_STATUS, percent=float(percent)
    )


def _points(text: str) -> list[tuple[datetime, int, int]]:
    points = []
    for line in text.splitlines():
        found = PROGRESS_LINE.match(line)
        at = parse_time(found["at"]) if found else None
        if found is not None and at is not None and int(found["total"]) > 0:
            points.append((at, int(found["step"]), int(found["total"])))
    return points


def progress_from_log(text: str) -> Progress | None:
    """The newest progress a log (with timestamps) shows, and an estimate of the time left
    from the step rate of the current run (a restart begins a new run: a step lower than
    the one before it, or another total); None when the log has no progress line."""
    points = _points(text)
    if not points:
        return None
    at, step, total = points[-1]
    run = [points[-1]]
    for point in reversed(points[:-1]):
        if point[2] != total or point[1] > run[-1][1]:
            break
        run.append(point)
    first_at, first_step, _ = run[-1]
    span = (at - first_at).total_seconds()
    if step >= total:
        return Progress(step, total, at, 0.0, "finished its last step")
    if len(run) < MIN_LINES or step - first_step < MIN_SHARE * total or span <= 0:
        return Progress(
            step,
            total,
            at,
            None,
            f"no estimate yet: it needs {MIN_LINES} progress lines over "
            f"{MIN_SHARE:.0%} of the steps of this run",
        )
    rate = (step - first_step) / span
    return Progress(
        step,
        total,
        at,
        round((total - step) / rate, 1),
        f"from its log: {rate * 60:.1f} steps/min over steps {first_step}–{step} of this "
        f"run ({len(run)} progress lines)",
    )
