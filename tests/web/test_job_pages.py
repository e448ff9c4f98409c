"""The job pages a researcher uses in the browser: submit, preview, clone, list, detail, cancel."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job, JobState
from jobs.services.submit import job_submit
from tests.conftest import training_spec
from tests.factories import JobFactory, MembershipFactory

pytestmark = pytest.mark.django_db

JOB_LINK_RE = re.compile(r'href="/jobs/(\d+)/"')
FIELD_RE = re.compile(
    r'<div class="field" data-field="(?P<name>[^"]+)">(?P<body>.*?)</div>\s*'
    r"(?=<div class=\"field\"|</fieldset>)",
    re.S,
)
ERROR_RE = re.compile(r'<div class="error" role="alert">(.*?)</div>', re.S)


def form_data(**overrides: str) -> dict[str, str]:
    """What the browser posts for a valid 1-GPU training job of team vision."""
    data = {
        "team": "vision",
        "name": "resnet50",
        "kind": "training",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": "torchrun train.py",
        "args": "--epochs 10",
        "env": "SEED=1",
        "gpu_count": "1",
        "gpu_sharing": "exclusive",
        "gpu_product": "",
        "gpu_mig_profile": "",
        "cpu": "",
        "memory": "",
        "priority": "normal",
        "volumes": "",
        "workers": "1",
        "max_runtime_seconds": "",
        "retries": "0",
        "replicas": "",
        "port": "",
        "health_path": "",
    }
    data.update(overrides)
    return data


def field_errors(page: str) -> dict[str, list[str]]:
    """Error messages rendered inside each form field's block, by field name."""
    return {
        match["name"]: [html.unescape(e).strip() for e in ERROR_RE.findall(match["body"])]
        for match in FIELD_RE.finditer(page)
    }


def input_value(page: str, name: str) -> str | None:
    match = re.search(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"', page)
    return html.unescape(match.group(1)) if match else None


def textarea_value(page: str, name: str) -> str:
    match = re.search(rf'<textarea[^>]*name="{name}"[^>]*>(.*?)</textarea>', page, re.S)
    assert match, f"no textarea {name}"
    return html.unescape(match.group(1)).strip()


def listed_job_ids(page: str) -> set[int]:
    return {int(pk) for pk in JOB_LINK_RE.findall(page)}


def logged_in(client: Client, user: User) -> Client:
    client.force_login(user)
    return client


# --- login ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "/teams/"])
def test_pages_require_login(client: Client, path: str) -> None:
    # Given an anonymous visitor
    # When they open a portal page
    response = client.get(path)
    # Then they are sent to the login page, coming back afterwards
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


# --- submit form ----------------------------------------------------------------------


def test_submit_form_shows_sections_and_only_the_users_teams(client: Client, alice: User) -> None:
    # Given alice, a member of vision only
    logged_in(client, alice)
    # When she opens the submit form
    page = client.get("/jobs/new/").content.decode()
    # Then every section is there
    for title in ("Basics", "GPUs", "Resources", "Scheduling", "Storage", "Runtime"):
        assert f"<legend>{title}</legend>" in page
    # And the team choices are her teams only
    select = re.search(r'<select name="team"[^>]*>(.*?)</select>', page, re.S)
    assert select is not None
    assert re.findall(r'<option value="([^"]*)"', select.group(1)) == ["vision"]
    # And each GPU product says its memory in the unit GFD's MiB really make (GiB, not GB)
    assert ">NVIDIA-A100-SXM4-80GB (80 GiB memory)</option>" in page


def test_submitting_a_valid_job_queues_it_and_shows_its_page(client: Client, alice: User) -> None:
    # Given alice on the submit form
    logged_in(client, alice)
    # When she posts a valid 1-GPU training job for vision
    response = client.post("/jobs/new/", form_data())
    # Then exactly one queued job is stored and she lands on its page
    job = Job.objects.get()
    assert (job.team.slug, job.owner, job.state) == ("vision", alice, JobState.QUEUED)
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/{job.pk}/"
    # And the page shows its state and the manifest YAML
    page = client.get(response["Location"]).content.decode()
    assert 'data-testid="job-state">queued<' in page
    assert "kind: Job" in page
    assert "nvidia.com/gpu" in page


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"gpu_count": "0.5"}, "gpu_count", "whole number"),
        ({"name": "Bad_Name"}, "name", "lower-case"),
        ({"gpu_mig_profile": "1g.10gb"}, "gpu_mig_profile", "sharing 'mig'"),
        ({"env": "SEED=1\nNOEQUALS"}, "env", "Line 2"),
    ],
)
def test_bad_input_is_shown_next_to_its_field_and_stores_nothing(
    client: Client, alice: User, overrides: dict[str, str], field: str, words: str
) -> None:
    # Given alice on the submit form
    logged_in(client, alice)
    # When she posts one bad field
    response = client.post("/jobs/new/", form_data(**overrides))
    # Then the form comes back with the error under that field
    assert response.status_code == 200
    errors = field_errors(response.content.decode())
    assert any(words in message for message in errors[field]), errors
    assert [name for name, messages in errors.items() if messages] == [field]
    # And nothing was stored
    assert not Job.objects.exists()


def test_preview_returns_the_manifest_yaml_for_valid_fields(client: Client, alice: User) -> None:
    # Given alice typing a valid job
    logged_in(client, alice)
    # When htmx asks for the preview
    response = client.post("/jobs/new/preview/", form_data(), HTTP_HX_REQUEST="true")
    # Then the YAML of the Job with its GPU request comes back
    page = response.content.decode()
    assert response.status_code == 200
    yaml_block = re.search(r'data-testid="yaml-preview">(.*?)</pre>', page, re.S)
    assert yaml_block is not None
    assert "kind: Job" in yaml_block.group(1)
    assert "nvidia.com/gpu" in yaml_block.group(1)
    # And nothing is stored
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"gpu_count": "0.5"}, "gpu.count"), ({"name": "Bad_Name"}, "name")],
)
def test_preview_lists_errors_naming_the_field(
    client: Client, alice: User, overrides: dict[str, str], field: str
) -> None:
    # Given alice typing an invalid field
    logged_in(client, alice)
    # When htmx asks for the preview
    response = client.post("/jobs/new/preview/", form_data(**overrides), HTTP_HX_REQUEST="true")
    # Then the errors name the field and no YAML is shown
    page = response.content.decode()
    assert response.status_code == 200
    assert f"<li><code>{field}</code>:" in page
    assert "yaml-preview" not in page
    assert not Job.objects.exists()


def test_clone_prefills_the_form_with_the_job(client: Client, alice: User) -> None:
    # Given a job of alice with env vars, volumes and 2 GPUs
    job = job_submit(
        user=alice,
        data=training_spec(
            name="bert-run7",
            env={"SEED": "1", "WANDB_PROJECT": "resnet"},
            gpu={"count": 2},
            volumes=[
                {"claim": "imagenet", "mount_path": "/data", "read_only": True},
                {"claim": "checkpoints", "mount_path": "/ckpt"},
            ],
        ),
    )
    logged_in(client, alice)
    # When she clicks "Clone"
    response = client.get(f"/jobs/{job.pk}/clone/")
    # Then the submit form is prefilled with the job's fields
    page = response.content.decode()
    assert response.status_code == 200
    assert input_value(page, "name") == "bert-run7"
    assert input_value(page, "image") == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert input_value(page, "gpu_count") == "2"
    assert textarea_value(page, "env").splitlines() == ["SEED=1", "WANDB_PROJECT=resnet"]
    assert textarea_value(page, "volumes").splitlines() == [
        "imagenet:/data:ro",
        "checkpoints:/ckpt",
    ]


def test_a_submitted_clone_says_which_job_it_was_cloned_from(
    client: Client, alice: User, carol: User
) -> None:
    # Given a job of alice's team and one of carol's team (nlp), which alice cannot see
    source = job_submit(user=alice, data=training_spec(name="source"))
    hidden = job_submit(
        user=carol,
        data=training_spec(
            name="hidden", team="nlp", gpu={"count": 1, "product": "NVIDIA-A100-SXM4-80GB"}
        ),
    )
    logged_in(client, alice)

    # When alice submits the clone form of her job, and a form naming carol's job
    client.post("/jobs/new/", {**form_data(name="the-clone"), "clone_of": str(source.pk)})
    client.post("/jobs/new/", {**form_data(name="forged"), "clone_of": str(hidden.pk)})

    # Then the clone records its source and its page links to it
    clone = Job.objects.get(name="the-clone")
    assert clone.cloned_from_id == source.pk
    page = client.get(f"/jobs/{clone.pk}/").content.decode()
    assert f'href="/jobs/{source.pk}/" data-testid="cloned-from">#{source.pk}</a>' in page
    # and a job the user cannot see is not recorded as a source
    assert Job.objects.get(name="forged").cloned_from_id is None


# --- list -----------------------------------------------------------------------------


def test_job_list_shows_own_team_jobs_only(
    client: Client, alice: User, carol: User, demo: dict[str, Any]
) -> None:
    # Given a vision job and an nlp job
    vision_job = JobFactory(team=demo["teams"]["vision"], owner=alice)
    nlp_job = JobFactory(team=demo["teams"]["nlp"], owner=carol)
    logged_in(client, alice)
    # When alice opens the job list
    page = client.get("/jobs/").content.decode()
    # Then she sees her team's job and not nlp's
    assert listed_job_ids(page) == {vision_job.pk}
    assert nlp_job.name not in page


def test_job_list_says_why_in_words_not_codes(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given a job waiting for quota, with the portal's words for why
    words = (
        "team vision uses 16 of 16 nvidia.com/gpu (nominal) and may not borrow; "
        "2 jobs ahead of it in the team's queue, 3 in the cluster"
    )
    JobFactory(team=demo["teams"]["vision"], owner=alice, reason="QuotaExceeded", message=words)
    logged_in(client, alice)
    # When alice opens the job list
    page = client.get("/jobs/").content.decode()
    cell = re.search(r'<td class="reason" data-testid="reason" title="([^"]*)">(.*?)</td>', page)
    # Then the reason column shows the first words of the message, not the code
    assert cell is not None
    visible = re.sub(r'<span class="visually-hidden">.*?</span>', "", cell.group(2))
    assert "team vision uses 16 of 16 nvidia.com/gpu" in visible
    assert "QuotaExceeded" not in visible and len(html.unescape(re.sub("<.*?>", "", visible))) <= 72
    # And the whole message is there on hover (with the code) and for screen readers
    assert html.unescape(cell.group(1)) == f"QuotaExceeded: {words}"
    assert f'<span class="visually-hidden">{words}</span>' in html.unescape(cell.group(2))


def test_job_list_filters_by_state_kind_and_team(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given alice in vision and speech, with jobs of several states, kinds and teams
    vision, speech = demo["teams"]["vision"], demo["teams"]["speech"]
    MembershipFactory(user=alice, team=speech)
    queued = JobFactory(team=vision, owner=alice, state=JobState.QUEUED)
    running = JobFactory(team=vision, owner=alice, state=JobState.RUNNING)
    inference = JobFactory(team=vision, owner=alice, kind="inference", state=JobState.RUNNING)
    speech_job = JobFactory(team=speech, owner=alice, state=JobState.QUEUED)
    logged_in(client, alice)
    # When she filters the list
    by_state = client.get("/jobs/", {"state": "running"}).content.decode()
    by_kind = client.get("/jobs/", {"kind": "inference"}).content.decode()
    by_team = client.get("/jobs/", {"team": "speech"}).content.decode()
    combined = client.get("/jobs/", {"team": "vision", "state": "queued"}).content.decode()
    # Then only the matching jobs are listed
    assert listed_job_ids(by_state) == {running.pk, inference.pk}
    assert listed_job_ids(by_kind) == {inference.pk}
    assert listed_job_ids(by_team) == {speech_job.pk}
    assert listed_job_ids(combined) == {queued.pk}
    # And a filter no job can match (a NUL, which PostgreSQL cannot compare) lists nothing
    nul = client.get("/jobs/", {"team": "vi\x00sion"})
    assert nul.status_code == 200
    assert listed_job_ids(nul.content.decode()) == set()


def test_job_list_pages_by_50(client: Client, alice: User, demo: dict[str, Any]) -> None:
    # Given 55 jobs of vision
    jobs = JobFactory.create_batch(55, team=demo["teams"]["vision"], owner=alice)
    logged_in(client, alice)
    # When alice opens the first and second pages
    first = client.get("/jobs/").content.decode()
    second = client.get("/jobs/", {"page": 2}).content.decode()
    # Then the first has the 50 newest, the second the other 5
    assert len(listed_job_ids(first)) == 50
    assert len(listed_job_ids(second)) == 5
    assert listed_job_ids(first) | listed_job_ids(second) == {j.pk for j in jobs}
    assert "Page 1 of 2" in first
    assert "page=2" in first


# --- detail and cancel ----------------------------------------------------------------


def test_another_teams_job_is_not_found(
    client: Client, alice: User, carol: User, demo: dict[str, Any]
) -> None:
    # Given a vision job
    job = JobFactory(team=demo["teams"]["vision"], owner=alice)
    client.raise_request_exception = False
    logged_in(client, carol)
    # When carol (nlp) opens, clones or cancels it
    responses = [
        client.get(f"/jobs/{job.pk}/"),
        client.get(f"/jobs/{job.pk}/clone/"),
        client.post(f"/jobs/{job.pk}/cancel/"),
    ]
    # Then each is 404, as if it did not exist, and the job is untouched
    assert [r.status_code for r in responses] == [404, 404, 404]
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_owner_cancels_a_queued_job(client: Client, alice: User) -> None:
    # Given alice's queued job
    job = job_submit(user=alice, data=training_spec())
    logged_in(client, alice)
    assert "Cancel</button>" in client.get(f"/jobs/{job.pk}/").content.decode()
    # When she presses Cancel
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    # Then the job is cancelled and its timeline says so
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    page = response.content.decode()
    assert 'data-testid="job-state">cancelled<' in page
    assert "<strong>Cancelled</strong>" in page


def test_member_cannot_cancel_a_teammates_job(client: Client, alice: User, bob: User) -> None:
    # Given bob's queued job in vision
    job = job_submit(user=bob, data=training_spec(name="bobs-job"))
    logged_in(client, alice)
    # When alice (a member, not the owner) tries to cancel it
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    # Then she is told why, and the job stays queued
    page = html.unescape(response.content.decode())
    assert "Only the job's owner or a lead of team vision can cancel it." in page
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert "Cancel</button>" not in page


def test_lead_cancels_a_members_job(client: Client, alice: User, bob: User) -> None:
    # Given alice's queued job in vision
    job = job_submit(user=alice, data=training_spec())
    logged_in(client, bob)
    # When bob, vision's lead, cancels it
    client.post(f"/jobs/{job.pk}/cancel/")
    # Then it is cancelled, by bob
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert "bob" in job.message


# --- teams ----------------------------------------------------------------------------


def test_teams_page_shows_own_team_quotas_only(client: Client, alice: User) -> None:
    # Given alice in vision (16 × nvidia.com/gpu) and nlp with an A100 quota
    logged_in(client, alice)
    # When she opens the teams page
    page = client.get("/teams/").content.decode()
    # Then she sees vision's quotas with their limits, and nothing of nlp
    rows = dict(
        re.findall(r"<tr><td><code>([^<]+)</code></td><td>[^<]*</td><td>([^<]+)</td>", page)
    )
    assert rows == {
        "nvidia.com/gpu": "16",
        "nvidia.com/gpu.shared": "8",
        "nvidia.com/mig-1g.10gb": "8",
    }
    assert "team-vision" in page
    assert "NVIDIA-A100-SXM4-80GB" not in page
    assert "team-nlp" not in page


def test_job_list_shows_how_long_each_job_ran_and_its_gpu_hours_and_refreshes_itself(
    client: Client, alice: User, demo: dict[str, Any]
) -> None:
    # Given a 4-GPU job that ran 90 minutes, one running for 30 with 2 GPUs, one queued
    from datetime import timedelta

    from django.utils import timezone

    now, vision = timezone.now(), demo["teams"]["vision"]
    done = JobFactory(
        team=vision,
        owner=alice,
        state=JobState.SUCCEEDED,
        gpu_count=4,
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(minutes=30),
    )
    running = JobFactory(
        team=vision,
        owner=alice,
        state=JobState.RUNNING,
        gpu_count=2,
        started_at=now - timedelta(minutes=30),
    )
    queued = JobFactory(team=vision, owner=alice, state=JobState.QUEUED)
    logged_in(client, alice)

    # When alice opens the job list
    page = client.get("/jobs/").content.decode()

    # Then each row says how long the job ran and the GPU-hours it held
    def cells(job_id: int) -> list[str]:
        row = re.search(rf"<tr>\s*<td>{job_id}</td>(.*?)</tr>", page, re.S)
        assert row is not None
        return [
            html.unescape(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        ]

    # (ran, GPU-hours, then progress: none of them reports any)
    assert cells(done.pk)[-3:] == ["1\xa0hour, 30\xa0minutes", "6.0", "—"]
    assert cells(running.pk)[-3:] == ["30\xa0minutes", "1.0", "—"]
    assert cells(queued.pk)[-3:] == ["—", "—", "—"]
    # And the table refreshes itself in place
    assert 'id="job-table" hx-get="/jobs/" hx-trigger="every 15s" hx-select="#job-table"' in page
