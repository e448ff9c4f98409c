"""GPU-hour reports: the page, its CSV and the API show the same numbers, to the right people.

Rows are stored as the rollup writes them (``test_accounting`` checks the rollup against
Prometheus); here the readers are under test.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from monitoring.accounting import monthly_summary_send
from monitoring.models import GpuUsageDay, RollupDay
from notifications.models import Delivery
from teams.models import Membership
from tests.conftest import api_client_for
from tests.factories import JobFactory, UserFactory

OCTOBER = (date(2026, 10, 1), date(2026, 10, 31))
API = "/api/v1/reports/gpu-hours/"


def usage(
    job: Any,
    day: date,
    allocated: float,
    used: float | None,
    idle: float | None,
    cost: str | None = None,
    product: str = "NVIDIA-A100-SXM4-80GB",
) -> GpuUsageDay:
    return GpuUsageDay.objects.create(
        day=day,
        job=job,
        job_name=job.object_name,
        team=job.team,
        user=job.owner,
        product=product,
        gpu_hours_allocated=allocated,
        gpu_hours_used=used,
        idle_gpu_hours=idle,
        cost=None if cost is None else Decimal(cost),
        rolled_up_at=timezone.now(),
    )


@pytest.fixture
def october(demo: dict[str, Any]) -> dict[str, Any]:
    """October rolled up: vision (alice's and bob's jobs) and nlp (carol's), prices on A100s."""
    teams, users = demo["teams"], demo["users"]
    nlp_lead = UserFactory(username="nina", email="nina@example.com")
    Membership.objects.create(user=nlp_lead, team=teams["nlp"], role=Membership.Role.LEAD)
    began = datetime(2026, 9, 30, tzinfo=UTC)
    jobs = {
        key: JobFactory(team=teams[team], owner=users[owner], object_name=name, started_at=began)
        for key, team, owner, name in (
            ("a1", "vision", "alice", "resnet-11"),
            ("a2", "vision", "alice", "sweep-12"),
            ("b1", "vision", "bob", "bert-13"),
            ("c1", "nlp", "carol", "llm-14"),
        )
    }
    first = OCTOBER[0]
    usage(jobs["a1"], first, 24.0, 12.0, 2.0, "60.00")
    usage(jobs["a1"], first + timedelta(days=1), 10.0, 2.5, 6.0, "25.00")
    usage(jobs["a2"], first + timedelta(days=1), 4.0, None, None, "10.00")  # no metrics
    usage(jobs["b1"], first + timedelta(days=2), 8.0, 6.0, 0.0, None, product="mig-1g.10gb")
    usage(jobs["c1"], first, 48.0, 36.0, 1.5, "120.00")
    usage(jobs["c1"], date(2026, 9, 30), 99.0, 99.0, 0.0)  # outside the period
    for n in range(31):
        RollupDay.objects.create(
            day=first + timedelta(days=n),
            complete=True,
            measured=n != 1,
            rolled_up_at=timezone.now(),
        )
    return {"jobs": jobs, "users": {**users, "nina": nlp_lead}, "teams": teams}


def api_report(user: User, **params: str) -> Any:
    query = {"start": str(OCTOBER[0]), "end": str(OCTOBER[1]), **params}
    return api_client_for(user).get(API, query)


def csv_rows(user: User, **params: str) -> list[dict[str, str]]:
    response = api_report(user, format="csv", **params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def as_text(value: Any) -> str:
    return "" if value is None else str(value)


def test_page_csv_and_api_show_the_same_numbers(october: dict[str, Any]) -> None:
    admin = october["users"]["admin"]
    body = api_report(admin).json()
    assert body["scope"] == "all" and body["currency"] == "USD"
    by_team = {row["team"]: row for row in body["rows"]}
    assert set(by_team) == {"vision", "nlp"}
    vision = by_team["vision"]
    assert vision["gpu_hours_allocated"] == 46.0
    assert vision["gpu_hours_used"] == 20.5
    # Efficiency over the hours with metrics: 20.5 used of 42 measured (sweep-12 had none).
    assert vision["efficiency"] == round(20.5 / 42.0, 4)
    assert vision["gpu_hours_unmeasured"] == 4.0
    assert vision["idle_gpu_hours"] == 8.0
    assert vision["cost"] == 95.0  # bert-13's MIG hours have no price: not counted
    assert body["totals"]["gpu_hours_allocated"] == 94.0
    assert body["days_missing"] == [] and body["days_unmeasured"] == ["2026-10-02"]

    # CSV: the same rows and figures, under the contract's column names.
    rows = csv_rows(admin)
    assert list(rows[0]) == [
        "team",
        "user",
        "product",
        "gpu_hours_allocated",
        "gpu_hours_used",
        "efficiency",
        "idle_gpu_hours",
        "cost",
    ]
    for row in rows:
        api_row = by_team[row["team"]]
        for column in row:
            expected = api_row[column]
            if column == "cost" and expected is not None:
                expected = f"{Decimal(str(expected)):.2f}"
            assert row[column] == as_text(expected), column

    # The page: the same rows, drawn from the same reader.
    client = Client()
    client.force_login(admin)
    page = client.get("/monitoring/reports/", {"period": "month", "month": "2026-10"})
    assert page.status_code == 200
    shown = {row.team: row for row in page.context["report"].rows}
    for team, api_row in by_team.items():
        assert shown[team].gpu_hours_allocated == api_row["gpu_hours_allocated"]
        assert shown[team].gpu_hours_used == api_row["gpu_hours_used"]
        assert shown[team].efficiency == api_row["efficiency"]
    html = page.content.decode()
    assert "46.00" in html and "20.50" in html and "49%" in html  # vision's row
    assert "Rolled up while Prometheus could not answer: 2026-10-02" in html
    # The most wasted job first, linked to its page.
    wasted = page.context["wasted"]
    assert [w.job_name for w in wasted][:2] == ["resnet-11", "llm-14"]
    assert f'href="/jobs/{october["jobs"]["a1"].pk}/"' in html
    # The CSV links are the API's own.
    assert f"{API}?start=2026-10-01&amp;end=2026-10-31&amp;group_by=user&amp;format=csv" in html


def test_per_user_product_job_and_day_groupings(october: dict[str, Any]) -> None:
    admin = october["users"]["admin"]
    users = {(r["team"], r["user"]): r for r in api_report(admin, group_by="user").json()["rows"]}
    assert users[("vision", "alice")]["gpu_hours_allocated"] == 38.0
    assert users[("vision", "bob")]["gpu_hours_allocated"] == 8.0
    products = api_report(admin, group_by="product").json()["rows"]
    assert {(r["team"], r["product"]) for r in products} == {
        ("vision", "NVIDIA-A100-SXM4-80GB"),
        ("vision", "mig-1g.10gb"),
        ("nlp", "NVIDIA-A100-SXM4-80GB"),
    }
    jobs = api_report(admin, group_by="job", team="vision").json()["rows"]
    assert [(r["job_name"], r["user"], r["gpu_hours_allocated"]) for r in jobs] == [
        ("resnet-11", "alice", 34.0),
        ("sweep-12", "alice", 4.0),
        ("bert-13", "bob", 8.0),
    ]
    days = api_report(admin, group_by="day").json()["rows"]
    assert [(r["day"], r["team"], r["gpu_hours_allocated"]) for r in days] == [
        ("2026-10-01", "nlp", 48.0),
        ("2026-10-01", "vision", 24.0),
        ("2026-10-02", "vision", 14.0),
        ("2026-10-03", "vision", 8.0),
    ]
    day_csv = csv_rows(admin, group_by="day")
    assert next(iter(day_csv[0])) == "day" and day_csv[0]["team"] == "nlp"


def test_leads_see_their_team_members_their_own_jobs(october: dict[str, Any]) -> None:
    users = october["users"]
    # bob leads vision: vision's rows, nothing of nlp.
    bob = api_report(users["bob"]).json()
    assert bob["scope"] == "teams"
    assert [r["team"] for r in bob["rows"]] == ["vision"]
    assert bob["totals"]["gpu_hours_allocated"] == 46.0
    assert api_report(users["bob"], team="nlp").status_code == 404
    assert api_report(users["bob"], team="nlp", format="csv").status_code == 404
    # nina leads nlp: the reverse.
    assert [r["team"] for r in api_report(users["nina"]).json()["rows"]] == ["nlp"]
    # alice is a member of vision: her own jobs only, not bob's.
    alice = api_report(users["alice"], group_by="user").json()
    assert alice["scope"] == "own"
    assert [(r["team"], r["user"]) for r in alice["rows"]] == [("vision", "alice")]
    assert alice["totals"]["gpu_hours_allocated"] == 38.0
    # carol sees her own; the page agrees and offers no other team.
    client = Client()
    client.force_login(users["carol"])
    page = client.get(
        "/monitoring/reports/", {"period": "custom", "start": "2026-10-01", "end": "2026-10-31"}
    )
    assert page.context["report"].totals.gpu_hours_allocated == 48.0
    assert "vision" not in page.content.decode()
    assert client.get("/monitoring/reports/", {"team": "vision"}).status_code == 404


def test_bad_input_names_the_field(october: dict[str, Any]) -> None:
    admin = october["users"]["admin"]
    swapped = api_report(admin, start="2026-10-31", end="2026-10-01")
    assert swapped.status_code == 400 and "swap them" in swapped.json()["errors"]["end"][0]
    too_long = api_report(admin, start="2024-01-01", end="2026-10-01")
    assert too_long.status_code == 400 and "400 days" in too_long.json()["errors"]["end"][0]
    bad_day = api_report(admin, start="2026-02-30")
    assert bad_day.status_code == 400 and "start" in bad_day.json()["errors"]
    missing = api_client_for(admin).get(API, {"end": "2026-10-31"})
    assert missing.status_code == 400 and "start" in missing.json()["errors"]
    assert api_report(admin, group_by="week").status_code == 400
    assert api_report(admin, format="xlsx").status_code == 400
    client = Client()
    client.force_login(admin)
    page = client.get(
        "/monitoring/reports/", {"period": "custom", "start": "2026-10-09", "end": "x"}
    )
    assert page.status_code == 400
    assert "end: &#x27;x&#x27; is not a day; write it as YYYY-MM-DD." in page.content.decode()
    month = client.get("/monitoring/reports/", {"month": "2026-13"})
    assert month.status_code == 400 and "write it as YYYY-MM" in month.content.decode()


def test_monthly_summary_goes_to_each_lead_once(october: dict[str, Any], settings: Any) -> None:
    settings.TIME_ZONE = "UTC"
    november_2nd = datetime(2026, 11, 2, 7, 0, tzinfo=timezone.get_default_timezone())
    created = monthly_summary_send(now=november_2nd)
    sent = Delivery.objects.filter(pk__in=created).select_related("destination__user")
    by_lead = {d.destination.user.username: d for d in sent}
    assert set(by_lead) == {"bob", "nina"}  # the leads; not alice or carol
    vision = by_lead["bob"]
    assert vision.subject == "GPU-hours of team vision in October 2026"
    assert "46.0 GPU-h allocated, 20.5 used (49% efficiency), 8.0 idle" in vision.body
    assert "- alice: 38.0 GPU-h allocated" in vision.body
    assert "resnet-11 (alice): 8.0 idle GPU-h" in vision.body
    assert vision.payload["gpu_hours_allocated"] == 46.0
    assert "team=vision" in vision.payload["url"]
    # Once: the next day's run sends nothing more.
    assert monthly_summary_send(now=november_2nd + timedelta(days=1)) == []
    assert Delivery.objects.filter(event="report.monthly").count() == 2


def test_monthly_summary_waits_for_the_whole_month(october: dict[str, Any], settings: Any) -> None:
    settings.TIME_ZONE = "UTC"
    RollupDay.objects.filter(day=date(2026, 10, 20)).update(complete=False)
    november_2nd = datetime(2026, 11, 2, 7, 0, tzinfo=timezone.get_default_timezone())
    assert monthly_summary_send(now=november_2nd) == []
    RollupDay.objects.update(complete=True)
    # Past the first week of the month it is not sent late.
    assert monthly_summary_send(now=november_2nd + timedelta(days=10)) == []
    assert len(monthly_summary_send(now=november_2nd)) == 2


def test_before_the_first_rollup_the_page_says_so_instead_of_blank_charts(
    demo: dict[str, Any], settings: Any
) -> None:
    # Given a fresh portal: jobs, but no day rolled up yet (the rollup runs every 2 min)
    settings.ACCOUNTING_INTERVAL_SECONDS = 120
    client = Client()
    client.force_login(demo["users"]["bob"])

    # When bob opens Reports
    html = client.get("/monitoring/reports/").content.decode()

    # Then it says nothing is rolled up yet and when that changes, not "0.0 allocated"
    assert 'data-testid="not-rolled-up"' in html
    assert "the first rollup runs within 2 min of the workers starting" in html
    assert "GPU-hours allocated ·" not in html
    # And each chart is a sentence, not blank axes
    assert "data-plotly-figure" not in html
    assert html.count("data-empty-chart=") == 2
    assert "GPU-hours allocated per day, by team</strong>: nothing is rolled up" in html


def test_after_a_rollup_the_page_says_when_the_next_one_is_due(
    demo: dict[str, Any], settings: Any
) -> None:
    # Given today rolled up a minute ago (with no GPU-hours) and yesterday not yet
    settings.ACCOUNTING_INTERVAL_SECONDS = 900
    now = timezone.now()
    today = timezone.localdate()
    RollupDay.objects.create(day=today, rolled_up_at=now - timedelta(minutes=1))
    client = Client()
    client.force_login(demo["users"]["bob"])

    # When bob opens the last 30 days
    html = client.get("/monitoring/reports/", {"period": "30d"}).content.decode()

    # Then the totals are shown, with the days still to do and when the next run is due
    due = timezone.localtime(now - timedelta(minutes=1) + timedelta(minutes=15))
    assert 'data-testid="not-rolled-up"' not in html
    assert "Not rolled up yet: 29 days" in html
    assert f"the rollup runs every 15 min; the next run is due at {due:%H:%M}." in html
    # And the empty charts say there are no GPU-hours, not that nothing is rolled up
    assert "by team</strong>: no GPU-hours in this period." in html
