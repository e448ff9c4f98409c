"""JobSpec's stored form: the JSON the Job row keeps and the API returns."""

from __future__ import annotations

import json
from dataclasses import fields

from jobs.spec import JobSpec
from jobs.spec_input import spec_parse
from tests.conftest import FULL_SPEC as SPEC


def test_the_stored_form_is_plain_json_in_the_contracts_order_and_rebuilds_the_spec() -> None:
    spec = spec_parse(SPEC)

    data = spec.to_dict()

    assert list(data) == [f.name for f in fields(JobSpec)]
    assert json.loads(json.dumps(data)) == data
    assert data["command"] == ["python", "serve.py"]
    assert data["gpu"] == {
        "count": 1,
        "product": "A100",
        "sharing": "mig",
        "mig_profile": "1g.10gb",
    }
    assert data["volumes"] == [{"claim": "models", "mount_path": "/models", "read_only": True}]
    assert JobSpec.from_dict(data) == spec


def test_changing_the_stored_form_leaves_the_spec_as_it_was() -> None:
    spec = spec_parse(SPEC)

    data = spec.to_dict()
    data["env"]["EXTRA"] = "1"
    data["gpu"]["count"] = 8
    data["volumes"][0]["claim"] = "other"

    assert spec.to_dict() == spec_parse(SPEC).to_dict()
    assert "EXTRA" not in spec.env
