"""The admin console as platform admins use it: teams, quotas (with the audit log), catalog."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from cluster.models import Cluster
from jobs.models import JobState
from monitoring.models import GpuPrice
from teams.models import AuditLog, GpuQuota, GroupMapping, Team
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


class FormFields(HTMLParser):
    """What a browser would submit for one ``<form>``: named inputs, selects and textareas."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.in_form = False
        self.data: dict[str, str] = {}
        self._select: str | None = None
        self._first_option: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id") == self.form_id:
            self.in_form = True
        if not self.in_form or (not a.get("name") and tag != "option"):
            return
        if tag == "input":
            kind = a.get("type", "text")
            if kind in ("submit", "button", "image", "file"):
                return
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            self.data[a["name"]] = a.get("value", "on" if kind == "checkbox" else "")
        elif tag == "select":
            self._select, self._first_option = a["name"], None
            self.data[a["name"]] = ""
        elif tag == "option" and self._select:
            value = a.get("value", "")
            if self._first_option is None:
                self._first_option = value
                self.data[self._select] = value
            if "selected" in a:
                self.data[self._select] = value
        elif tag == "textarea":
            self._textarea = a["name"]
            self.data[a["name"]] = ""

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea" and self._textarea:
            self.data[self._textarea] = self.data[self._textarea].removeprefix("\n")
            self._textarea = None
        elif tag == "form" and self.in_form:
            self.in_form = False


def form_fields(page: str, form_id: str) -> dict[str, str]:
    parser = FormFields(form_id)
    parser.feed(page)
    assert parser.data, f"no form #{form_id} on the page"
    return parser.data


def inline_prefix(data: dict[str, str], field: str) -> str:
    """The formset prefix whose forms have ``field`` (e.g. ``quotas`` for ``resource``)."""
    prefixes = [key.removesuffix("-TOTAL_FORMS") for key in data if key.endswith("-TOTAL_FORMS")]
    matches = [p for p in prefixes if any(re.fullmatch(rf"{p}-\d+-{field}", k) for k in data)]
    assert len(matches) == 1, (prefixes, field)
    return matches[0]


def saved_rows(data: dict[str, str], prefix: str) -> dict[str, int]:
    """Row index of each saved quota by resource; the first empty row under ``""``."""
    rows: dict[str, int] = {}
    for i in range(int(data[f"{prefix}-TOTAL_FORMS"])):
        key = data[f"{prefix}-{i}-resource"] if data.get(f"{prefix}-{i}-id") else ""
        rows.setdefault(key, i)
    return rows


def admin_client(client: Client, user: User) -> Client:
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "model",
    [
        "teams/team",
        "teams/cohort",
        "teams/gpuquota",
        "teams/membership",
        "cluster/gpuproduct",
        "cluster/migprofile",
        "teams/auditlog",
        "portal/apitoken",
        "jobs/job",
    ],
)
def test_changelists_render(
    client: Client, admin_user: User, demo: dict[str, Any], model: str
) -> None:
    # Given the demo data and a job
    JobFactory(team=demo["teams"]["vision"], owner=demo["users"]["alice"])
    admin_client(client, admin_user)
    # When the admin opens the list page
    response = client.get(f"/admin/{model}/")
    # Then it renders
    assert response.status_code == 200


def test_changing_a_quota_limit_is_audited(client: Client, admin_user: User) -> None:
    # Given vision's quota of 16 × nvidia.com/gpu
    quota = GpuQuota.objects.get(team__slug="vision", resource="nvidia.com/gpu")
    admin_client(client, admin_user)
    url = f"/admin/teams/gpuquota/{quota.pk}/change/"
    data = form_fields(client.get(url).content.decode(), "gpuquota_form")
    assert data["limit"] == "16"
    # When the admin raises it to 24 and saves
    data.update(limit="24", _save="Save")
    response = client.post(url, data)
    # Then the limit is 24 and the audit log says who changed it, old → new
    assert response.status_code == 302, response.content.decode()[:2000]
    quota.refresh_from_db()
    assert quota.limit == 24
    entry = AuditLog.objects.get(action="quota.update")
    assert entry.actor == admin_user
    assert entry.changes == {
        "team": "vision",
        "resource": "nvidia.com/gpu",
        "old": 16,
        "new": 24,
    }


def test_adding_and_deleting_quotas_inline_on_a_team_is_audited(
    client: Client, admin_user: User
) -> None:
    # Given the team page of vision, as a browser would post it back
    team = Team.objects.get(slug="vision")
    admin_client(client, admin_user)
    url = f"/admin/teams/team/{team.pk}/change/"
    data = form_fields(client.get(url).content.decode(), "team_form")
    prefix = inline_prefix(data, "resource")
    blank = saved_rows(data, prefix)[""]
    # When the admin adds 4 × Tesla-T4 in the empty row and saves
    add = dict(data, _save="Save")
    add.update({f"{prefix}-{blank}-resource": "Tesla-T4", f"{prefix}-{blank}-limit": "4"})
    response = client.post(url, add)
    # Then the quota exists and its creation is audited
    assert response.status_code == 302, response.content.decode()[:2000]
    assert GpuQuota.objects.get(team=team, resource="Tesla-T4").limit == 4
    created = AuditLog.objects.get(action="quota.create", actor=admin_user)
    assert created.changes == {"team": "vision", "resource": "Tesla-T4", "old": None, "new": 4}
    assert not AuditLog.objects.filter(action__in=["quota.update", "quota.delete"]).exists()
    assert created.target == "vision/Tesla-T4"

    # When the admin ticks "Delete" on the shared-GPU quota and saves
    data = form_fields(client.get(url).content.decode(), "team_form")
    row = saved_rows(data, prefix)["nvidia.com/gpu.shared"]
    data.update({f"{prefix}-{row}-DELETE": "on", "_save": "Save"})
    response = client.post(url, data)
    # Then the quota is gone and its deletion is audited
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not GpuQuota.objects.filter(team=team, resource="nvidia.com/gpu.shared").exists()
    deleted = AuditLog.objects.get(action="quota.delete", actor=admin_user)
    assert deleted.changes == {
        "team": "vision",
        "resource": "nvidia.com/gpu.shared",
        "old": 8,
        "new": None,
    }


def test_quota_changelist_shows_what_is_in_use(
    client: Client, admin_user: User, demo: dict[str, Any]
) -> None:
    # Given vision running a 3-GPU job admitted against nvidia.com/gpu
    JobFactory(
        team=demo["teams"]["vision"],
        owner=demo["users"]["alice"],
        state=JobState.RUNNING,
        admitted_at="2025-01-01T00:00:00Z",
        demand={"nvidia.com/gpu": 3},
        gpu_count=3,
    )
    admin_client(client, admin_user)
    # When the admin opens the quota list
    page = client.get("/admin/teams/gpuquota/").content.decode()
    # Then an "In use" column shows it
    assert "In use" in page
    row = re.search(
        r"<tr>(?:(?!</tr>).)*>vision<(?:(?!</tr>).)*nvidia.com/gpu<(?:(?!</tr>).)*</tr>", page, re.S
    )
    assert row is not None
    assert re.search(r'<td class="field-in_use">3</td>', row.group(0))


def test_non_staff_users_are_kept_out_of_the_admin(client: Client, alice: User) -> None:
    # Given alice, a researcher
    client.force_login(alice)
    # When she opens the admin
    response = client.get("/admin/")
    # Then she is sent to the admin login instead
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_new_team_without_namespace_gets_team_slug(client: Client, admin_user: User) -> None:
    # Given the admin's "add team" page
    admin_client(client, admin_user)
    data = form_fields(client.get("/admin/teams/team/add/").content.decode(), "team_form")
    # When a team is saved with no namespace
    data.update(name="Perception", slug="perception", namespace="", _save="Save")
    response = client.post("/admin/teams/team/add/", data)
    # Then its namespace is team-<slug>
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Team.objects.get(slug="perception").namespace == "team-perception"
    assert AuditLog.objects.filter(action="team.create", actor=admin_user).exists()


def test_group_mappings_and_gpu_prices_are_audited(client: Client, admin_user: User) -> None:
    client.force_login(admin_user)
    vision = Team.objects.get(slug="vision")
    # Given a platform admin mapping an IdP group to a team and setting a GPU price
    added = client.post(
        "/admin/teams/groupmapping/add/",
        {"group": "ml-vision-leads", "team": vision.pk, "role": "lead"},
    )
    assert added.status_code == 302, added.content[:500]
    priced = client.post(
        "/admin/monitoring/gpuprice/add/",
        {"product": "NVIDIA-H100-80GB-HBM3", "price_per_gpu_hour": "4.25",
         "effective_from": "2026-12-01"},
    )  # fmt: skip
    assert priced.status_code == 302, priced.content[:500]
    mapping = GroupMapping.objects.get(group="ml-vision-leads")
    price = GpuPrice.objects.get(effective_from="2026-12-01")
    # When both are deleted with the bulk action
    for url, pk in (
        ("/admin/teams/groupmapping/", mapping.pk),
        ("/admin/monitoring/gpuprice/", price.pk),
    ):
        response = client.post(
            url, {"action": "delete_selected", "_selected_action": [pk], "post": "yes"}
        )
        assert response.status_code == 302
    # Then every change is in the audit log, with who made it
    actions = list(
        AuditLog.objects.filter(actor=admin_user, action__startswith=("group_mapping"))
        .values_list("action", flat=True)
        .order_by("id")
    ) + list(
        AuditLog.objects.filter(actor=admin_user, action__startswith="gpu_price")
        .values_list("action", flat=True)
        .order_by("id")
    )
    assert actions == [
        "group_mapping.create",
        "group_mapping.delete",
        "gpu_price.create",
        "gpu_price.delete",
    ]
    created = AuditLog.objects.get(action="gpu_price.create")
    assert created.changes["price_per_gpu_hour"] == [None, "4.25"]


def test_a_quota_on_another_cluster_is_set_in_the_admin_audited_and_listed_with_it(
    client: Client, admin_user: User
) -> None:
    # Given a second cluster
    east = Cluster.objects.create(name="h200-east", kubeconfig_path="/k/h200-east")
    vision = Team.objects.get(slug="vision")
    admin_client(client, admin_user)
    # When the admin adds vision 8 GPUs there
    url = "/admin/teams/gpuquota/add/"
    data = form_fields(client.get(url).content.decode(), "gpuquota_form")
    data.update(team=str(vision.pk), cluster=str(east.pk), resource="nvidia.com/gpu", limit="8")
    response = client.post(url, {**data, "_save": "Save"})
    # Then it is a quota of that cluster, beside the first's, audited with the cluster
    assert response.status_code == 302, response.content.decode()[:2000]
    rows = GpuQuota.objects.filter(team=vision, resource="nvidia.com/gpu")
    assert {q.cluster_id: q.limit for q in rows} == {east.pk: 8, None: 16}
    entry = AuditLog.objects.get(action="quota.create", target="vision/h200-east/nvidia.com/gpu")
    assert entry.actor == admin_user and entry.changes["cluster"] == "h200-east"
    # ...and the quota list names each row's cluster
    page = client.get(f"/admin/teams/gpuquota/?team__id__exact={vision.pk}").content.decode()
    assert "h200-east" in page and "(first)" in page
