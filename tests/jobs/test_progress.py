"""Progress and time to finish from a training log's GPU_PORTAL_PROGRESS lines: what a job
shows before there is enough signal, the estimate once there is, and a restart's new run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.tracking.progress import progress_from_log, progress_from_trainer_status

START = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def log(*points: tuple[float, int], total: int = 1000) -> str:
    """A log with timestamps: other lines, and a progress line at each (seconds, step)."""
    lines = [f"{START.isoformat()} epoch 1/10 step 1/100 loss=2.5"]
    for seconds, step in points:
        at = (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
        lines.append(f"{at} epoch 1/10 step 3/100 loss=2.1")
        lines.append(f"{at} GPU_PORTAL_PROGRESS step={step} total={total}")
    return "\n".join(lines)


def test_a_log_without_progress_lines_reports_nothing() -> None:
    assert progress_from_log(log()) is None


def test_progress_shows_at_once_but_no_estimate_before_enough_signal() -> None:
    # Given two progress lines, a minute apart
    found = progress_from_log(log((0, 100), (60, 200)))
    # Then where the job stands is known, and the time to finish is not yet, saying why
    assert found is not None
    assert found.as_json() == {"percent": 20.0, "step": 200, "total": 1000, "source": "log"}
    assert found.eta_seconds is None
    assert found.eta_basis == (
        "no estimate yet: it needs 3 progress lines over 5% of the steps of this run"
    )


def test_no_estimate_from_a_sliver_of_the_run() -> None:
    # Given three lines, but over 2 % of the run's steps
    found = progress_from_log(log((0, 100), (1, 110), (2, 120)))
    # Then no estimate: that rate is mostly warm-up and noise
    assert found is not None and found.eta_seconds is None


def test_the_estimate_projects_the_runs_step_rate_over_the_steps_left() -> None:
    # Given 100 steps a minute for three minutes
    found = progress_from_log(log((0, 100), (60, 200), (120, 300), (180, 400)))
    # Then 600 steps are left: six minutes, and it says how it knows
    assert found is not None and found.eta_seconds == 360.0
    assert found.eta_basis == (
        "from its log: 100.0 steps/min over steps 100–400 of this run (4 progress lines)"
    )


def test_a_restart_starts_a_new_run_for_the_rate() -> None:
    # Given a run that reached step 400, then a restart from the checkpoint at step 300
    found = progress_from_log(log((0, 100), (60, 200), (120, 300), (180, 400), (600, 310)))
    # Then the estimate waits for the new run's own lines
    assert found is not None and found.step == 310 and found.eta_seconds is None


def test_a_finished_run_has_nothing_left() -> None:
    found = progress_from_log(log((0, 900), (60, 1000)))
    assert found is not None and found.eta_seconds == 0.0 and found.as_json()["percent"] == 100.0


# --- from Kubeflow Trainer's trainerStatus ------------------------------------------------


def test_trainer_status_gives_the_percent_its_steps_and_the_time_left_counted_down() -> None:
    reported = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    status = {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "step", "value": "420"}, {"name": "total", "value": "1000"}],
        "lastUpdatedTime": "2026-11-27T12:00:00Z",
    }
    found = progress_from_trainer_status(status, reported + timedelta(seconds=90))
    assert found is not None
    assert found.as_json() == {"percent": 42.0, "step": 420, "total": 1000,
                               "source": "trainerStatus"}  # fmt: skip
    assert found.eta_seconds == 510  # 600 s when reported, 90 s ago
    assert found.eta_basis.startswith("reported by the training code through Kubeflow Trainer")


def test_trainer_status_without_steps_or_an_estimate_says_so() -> None:
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    found = progress_from_trainer_status(
        {"progressPercentage": 7, "lastUpdatedTime": "2026-11-27T11:59:00Z"}, now
    )
    assert found is not None
    assert found.as_json() == {"percent": 7.0, "step": None, "total": None,
                               "source": "trainerStatus"}  # fmt: skip
    assert found.eta_seconds is None and found.eta_basis.startswith("no estimate")
    # No progress reported (only metrics): nothing to show, the log is read instead
    assert progress_from_trainer_status({"metrics": [], "lastUpdatedTime": "x"}, now) is None
