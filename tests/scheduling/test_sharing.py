"""Quota sharing in a cohort: Kueue's capacity rules on its own worked cases, the admission
order across teams, and the choice of jobs a reclaim evicts (pure: no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.sharing import (
    Cohort,
    FitKind,
    Head,
    ResourceQuota,
    Running,
    TeamShare,
    next_head,
    preemption_victims,
    wait_reason,
)

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def cohort(**teams: TeamShare) -> Cohort:
    return Cohort(teams)


def team(nominal: int, used: int = 0, *, weight: float = 1.0, **limits: int | None) -> TeamShare:
    return TeamShare({GPU: ResourceQuota(nominal, **limits)}, {GPU: used}, weight)


# --- capacity: Kueue's worked cases ----------------------------------------------------------


def test_a_team_can_use_its_own_nominal_and_everything_the_cohort_lends() -> None:
    # Kueue: A nominal 9, B nominal 12, same cohort → A can use 21
    shared = cohort(a=team(9), b=team(12))
    assert shared.most("a", GPU) == 21
    assert shared.available("a", GPU) == 21


def test_a_borrowing_limit_caps_what_the_team_takes_above_nominal() -> None:
    # Kueue: give A a borrowing limit of 1 → A can use 10
    shared = cohort(a=team(9, borrowing_limit=1), b=team(12))
    assert shared.most("a", GPU) == 10
    assert shared.available("a", GPU) == 10
    # and B, unlimited, can still use all of A's 9
    assert shared.most("b", GPU) == 21


def test_a_lending_limit_keeps_the_rest_of_nominal_for_its_owner() -> None:
    # Kueue: give B a lending limit of 1 instead → A can use 10, B 21
    shared = cohort(a=team(9), b=team(12, lending_limit=1))
    assert shared.most("a", GPU) == 10
    assert shared.most("b", GPU) == 21
    # B's guarded 11 stay B's even when A has taken everything it may
    shared.add("a", {GPU: 10})
    assert shared.available("b", GPU) == 11


def test_what_is_left_follows_usage_and_never_goes_below_zero() -> None:
    shared = cohort(a=team(8, used=8), b=team(8, used=2))
    assert shared.available("a", GPU) == 6  # B's 6 idle GPUs
    assert shared.available("b", GPU) == 6  # its own 6
    shared.add("a", {GPU: 6})
    assert shared.available("a", GPU) == 0
    assert shared.available("b", GPU) == 0  # B's 6 are lent out: a reclaim, not a fit
    assert shared.borrowed("a", GPU) == 6
    assert shared.lent() == {"a": {GPU: 0}, "b": {GPU: 6}}


def test_a_team_alone_never_goes_above_nominal() -> None:
    alone = cohort(a=team(4))
    assert alone.most("a", GPU) == 4
    assert alone.fit("a", {GPU: 5}).kind is FitKind.NO


def test_resources_are_never_mixed() -> None:
    # B lends MIG slices, not whole GPUs: A cannot borrow GPUs from them
    shared = cohort(
        a=TeamShare({GPU: ResourceQuota(2)}, {GPU: 2}),
        b=TeamShare({MIG: ResourceQuota(14)}, {}),
    )
    assert shared.available("a", GPU) == 0
    assert shared.fit("a", {GPU: 1}).resource == GPU
    assert shared.available("a", MIG) == 0  # A has no MIG quota to borrow against


def test_limits_are_checked_when_the_quota_is_built() -> None:
    with pytest.raises(ValueError, match="lending limit"):
        ResourceQuota(4, lending_limit=5)
    with pytest.raises(ValueError, match="borrowing limit"):
        ResourceQuota(4, borrowing_limit=-1)


# --- a job's fit -------------------------------------------------------------------------------


def test_a_job_fits_on_nominal_by_borrowing_or_not_at_all() -> None:
    shared = cohort(a=team(8, used=6, borrowing_limit=4), b=team(8))
    assert shared.fit("a", {GPU: 2}).kind is FitKind.NOMINAL
    borrowing = shared.fit("a", {GPU: 4})
    assert borrowing.kind is FitKind.BORROWING
    assert borrowing.borrowed == {GPU: 2}
    refused = shared.fit("a", {GPU: 7})  # 6 + 7 = 13 > 8 + 4
    assert (refused.kind, refused.resource) == (FitKind.NO, GPU)


def test_resources_without_a_quota_row_do_not_limit() -> None:
    shared = cohort(a=team(8))
    assert shared.fit("a", {GPU: 1, "cpu": 10**9}).kind is FitKind.NOMINAL


# --- fair sharing ----------------------------------------------------------------------------


def test_the_share_is_borrowed_over_the_pool_divided_by_the_weight() -> None:
    shared = cohort(a=team(4, used=8), b=team(4, used=6, weight=2), c=team(8))
    # pool = 16; A borrows 4 → 250; B borrows 2 → 125 / 2
    assert shared.share("a") == pytest.approx(250.0)
    assert shared.share("b") == pytest.approx(62.5)
    assert shared.share("c") == 0.0
    assert shared.share("c", {GPU: 9}) == pytest.approx(1000 * 1 / 16)
    assert cohort(a=team(4, used=5, weight=0), b=team(4)).share("a") == float("inf")


def test_admission_prefers_nominal_then_the_lower_share_then_priority_then_age() -> None:
    shared = cohort(a=team(4, used=4), b=team(4, used=4, weight=3), c=team(8, used=2))
    heads = [
        Head("a", 1, priority=100, submitted_at=T0, demand={GPU: 2}),
        Head("b", 2, priority=10, submitted_at=T0 + timedelta(minutes=1), demand={GPU: 2}),
        Head("c", 3, priority=1, submitted_at=T0 + timedelta(minutes=2), demand={GPU: 2}),
    ]
    # c fits on its own quota: it goes first whatever its priority
    chosen, fit = next_head(shared, heads)  # type: ignore[misc]
    assert (chosen.team, fit.kind) == ("c", FitKind.NOMINAL)
    shared.add("c", {GPU: 2})
    # then b, whose weight 3 makes its share after admission lower than a's
    chosen, fit = next_head(shared, heads[:2])  # type: ignore[misc]
    assert (chosen.team, fit.kind) == ("b", FitKind.BORROWING)
    shared.add("b", {GPU: 2})
    # then a borrows c's last 2 idle GPUs, and after that no head fits
    chosen, fit = next_head(shared, heads[:1])  # type: ignore[misc]
    assert (chosen.team, fit.kind) == ("a", FitKind.BORROWING)
    shared.add("a", {GPU: 2})
    assert next_head(shared, heads) is None


# --- reclaim ---------------------------------------------------------------------------------


def running(team: str, job_id: int, gpus: int, *, priority: int = 10, minute: int = 0) -> Running:
    return Running(team, job_id, priority, T0 + timedelta(minutes=minute), {GPU: gpus})


def test_a_reclaim_evicts_the_fewest_borrowing_jobs_lowest_priority_then_newest() -> None:
    # Given robotics (8) idle while vision (8) runs 14 GPUs: 6 of them borrowed
    shared = cohort(vision=team(8, used=14), robotics=team(8))
    jobs = [
        running("vision", 1, 8, priority=100, minute=0),  # within nominal: never a victim alone
        running("vision", 2, 2, priority=10, minute=5),
        running("vision", 3, 2, priority=10, minute=9),  # newest of the low-priority ones
        running("vision", 4, 2, priority=1000, minute=7),
    ]
    # When robotics asks for 4 GPUs of its own quota (only 2 are idle)
    victims = preemption_victims(shared, team="robotics", demand={GPU: 4}, candidates=jobs)
    # Then exactly one 2-GPU job goes: the newest of the lowest priority
    assert [v.job_id for v in victims or []] == [3]


def test_the_minimal_set_puts_back_a_victim_not_needed_after_all() -> None:
    # vision borrows 6: a 2-GPU low-priority job, then a 4-GPU one; robotics needs 6 of its 8
    shared = cohort(vision=team(8, used=14), robotics=team(8))
    jobs = [
        running("vision", 1, 8, priority=100),
        running("vision", 2, 2, priority=1, minute=9),
        running("vision", 3, 4, priority=5, minute=1),
    ]
    victims = preemption_victims(shared, team="robotics", demand={GPU: 6}, candidates=jobs)
    # 2 idle + 4 freed = 6: the 4-GPU job alone is enough, the 2-GPU one stays
    assert [v.job_id for v in victims or []] == [3]


def test_no_reclaim_from_a_team_within_its_nominal_quota_or_for_a_job_that_would_borrow() -> None:
    shared = cohort(vision=team(8, used=8), robotics=team(8, used=8))
    jobs = [running("vision", 1, 8)]
    # vision is within its nominal quota: nothing of it may be evicted
    assert preemption_victims(shared, team="robotics", demand={GPU: 1}, candidates=jobs) is None
    # robotics asking for more than its nominal waits; it never evicts to borrow
    lender = cohort(vision=team(8, used=10), robotics=team(8, used=6))
    jobs = [running("vision", 2, 2)]
    assert preemption_victims(lender, team="robotics", demand={GPU: 3}, candidates=jobs) is None


def test_a_job_that_fits_already_evicts_nobody() -> None:
    shared = cohort(vision=team(8, used=10), robotics=team(8, used=2))
    jobs = [running("vision", 1, 2)]
    assert preemption_victims(shared, team="robotics", demand={GPU: 4}, candidates=jobs) == []


def test_a_team_back_within_its_nominal_quota_loses_no_more_jobs() -> None:
    # Given vision 2 over its nominal with two jobs still marked borrowing (its nominal jobs
    # finished since), speech 2 over with one, and robotics needing 4 of its own 8 back
    shared = cohort(vision=team(8, used=10), speech=team(8, used=10), robotics=team(8, used=4))
    borrowing = [
        running("vision", 1, 2, priority=1, minute=9),
        running("vision", 2, 2, priority=1, minute=5),
        running("speech", 3, 2, priority=100, minute=1),
    ]
    # When robotics reclaims
    victims = preemption_victims(shared, team="robotics", demand={GPU: 4}, candidates=borrowing)
    # Then vision gives back only what it borrowed; speech gives the rest
    assert [v.job_id for v in victims or []] == [1, 3]


# --- explanations ----------------------------------------------------------------------------


def test_a_waiting_job_says_what_its_team_uses_may_borrow_and_what_the_cohort_has() -> None:
    shared = cohort(vision=team(16, used=16), robotics=team(8, used=8))
    reason = wait_reason(shared, team="vision", demand={GPU: 2}, cohort_name="research")
    assert reason == (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal) and may borrow 8 more; "
        "the cohort research has 0 unused: robotics uses 8 of its 8"
    )


def test_a_job_past_the_borrowing_limit_says_so() -> None:
    shared = cohort(vision=team(8, used=10, borrowing_limit=4), robotics=team(8))
    reason = wait_reason(shared, team="vision", demand={GPU: 4}, cohort_name="research")
    assert reason == (
        "team vision uses 10 of 8 nvidia.com/gpu (nominal); "
        "would exceed vision's borrowing limit (4)"
    )


def test_a_team_without_a_cohort_keeps_the_plain_words() -> None:
    alone = cohort(vision=team(16, used=16))
    reason = wait_reason(alone, team="vision", demand={GPU: 1}, cohort_name=None)
    assert reason == "team vision uses 16 of 16 nvidia.com/gpu"
    assert wait_reason(alone, team="vision", demand={}, cohort_name=None) is None
