"""Hostile request bodies on the JSON API: a clear 4xx, never a 500, and nothing stored.

Oversized and deeply nested JSON, unicode look-alikes in names, the wrong content type,
malformed JSON and JSON that is not an object, on submit and on preview.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from jobs.models import Job
from tests.conftest import training_spec

pytestmark = pytest.mark.django_db

SUBMIT = "/api/v1/jobs/"
PREVIEW = "/api/v1/jobs/preview/"
ENDPOINTS = [SUBMIT, PREVIEW]


def post_raw(client: APIClient, url: str, body: bytes | str, content_type: str) -> Any:
    return client.generic("POST", url, body, content_type=content_type)  # type: ignore[arg-type]


def detail(response: Any) -> str:
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("detail"), str), body
    return body["detail"]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_an_oversized_body_is_refused_and_nothing_is_stored(alice_api: APIClient, url: str) -> None:
    # Given a 5 MiB JSON spec (one huge argument)
    body = json.dumps(training_spec(args=["x" * (5 * 1024 * 1024)]))
    before = Job.objects.count()
    # When it is posted
    response = post_raw(alice_api, url, body, "application/json")
    # Then it is refused with a message about the size, and nothing is stored
    assert response.status_code in (400, 413), response.content[:300]
    message = json.dumps(response.json())
    assert any(word in message for word in ("large", "4096", "size", "64 KiB")), message
    assert Job.objects.count() == before


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize("opening,closing", [("[", "]"), ('{"a":', "}")])
def test_deeply_nested_json_is_a_400_not_a_500(
    alice_api: APIClient, url: str, opening: str, closing: str
) -> None:
    # Given JSON nested 10,000 levels deep inside a spec field
    body = '{"team": ' + opening * 10_000 + "1" + closing * 10_000 + "}"
    before = Job.objects.count()
    # When it is posted
    response = post_raw(alice_api, url, body, "application/json")
    # Then it is a 400 that says why, and nothing is stored
    assert response.status_code == 400, response.content[:300]
    assert "JSON" in detail(response) or "nested" in detail(response)
    assert Job.objects.count() == before


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize(
    "name,words",
    [
        ("résnet", ["U+00E9", "ASCII"]),
        ("rеsnet", ["CYRILLIC"]),  # Cyrillic е
        ("resnet-🚀", ["U+1F680"]),
        ("resnet\u202e05", ["RIGHT-TO-LEFT OVERRIDE"]),
        ("\u2066resnet", ["LEFT-TO-RIGHT ISOLATE"]),
        ("res\u200bnet", ["ZERO WIDTH SPACE"]),
        ("resnet\n", ["whitespace"]),
        ("ｒｅｓｎｅｔ", ["FULLWIDTH"]),
    ],
)
def test_unicode_in_a_name_is_a_400_naming_name(
    alice_api: APIClient, url: str, name: str, words: list[str]
) -> None:
    before = Job.objects.count()
    # Given a name with a non-ASCII, invisible or look-alike character, When it is posted
    response = alice_api.post(url, training_spec(name=name), format="json")
    # Then the error names the field and the character, and nothing is stored
    assert response.status_code == 400, response.json()
    errors = response.json()["errors"]
    assert list(errors) == ["name"], errors
    for word in words:
        assert word in errors["name"][0], errors
    assert Job.objects.count() == before


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize(
    "content_type,body",
    [
        ("text/plain", json.dumps(training_spec())),
        ("application/xml", "<job><team>vision</team><name>resnet50</name></job>"),
        (
            "application/x-www-form-urlencoded",
            "team=vision&name=resnet50&kind=training&image=nginx&gpu.count=1",
        ),
        (
            "multipart/form-data; boundary=XX",
            '--XX\r\nContent-Disposition: form-data; name="team"\r\n\r\nvision\r\n'
            '--XX\r\nContent-Disposition: form-data; name="name"\r\n\r\nresnet50\r\n'
            '--XX\r\nContent-Disposition: form-data; name="kind"\r\n\r\ntraining\r\n'
            '--XX\r\nContent-Disposition: form-data; name="image"\r\n\r\nnginx\r\n--XX--\r\n',
        ),
        ("", json.dumps(training_spec())),
    ],
)
def test_a_body_that_is_not_json_is_refused_and_nothing_is_stored(
    alice_api: APIClient, url: str, content_type: str, body: str
) -> None:
    before = Job.objects.count()
    # Given a spec sent with another content type than application/json, When it is posted
    response = post_raw(alice_api, url, body, content_type)
    # Then it is a 415 (or a 400) saying what to send, and nothing is stored
    assert response.status_code in (400, 415), response.content[:300]
    message = detail(response)
    assert "application/json" in message or "media type" in message, message
    assert Job.objects.count() == before


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize(
    "body",
    [
        '{"team": "vision", "name": ',
        "{'team': 'vision'}",
        '{"team": "vision",}',
        '{"team": NaN}',
        "\xff\xfe{}",
        '{"gpu": {"count": 1' + "0" * 5000 + "}}",
    ],
)
def test_malformed_json_is_a_400(alice_api: APIClient, url: str, body: str) -> None:
    before = Job.objects.count()
    # Given a body that is not valid JSON, When it is posted
    response = post_raw(alice_api, url, body.encode("latin-1"), "application/json")
    # Then it is a 400 that says so, and nothing is stored
    assert response.status_code == 400, response.content[:300]
    assert detail(response)
    assert Job.objects.count() == before


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize(
    "body", ["[]", "[" + json.dumps(training_spec()) + "]", "null", "42", '"x"', "true"]
)
def test_json_that_is_not_an_object_is_a_400(alice_api: APIClient, url: str, body: str) -> None:
    before = Job.objects.count()
    # Given a JSON array, null, number, string or boolean as the body, When it is posted
    response = post_raw(alice_api, url, body, "application/json")
    # Then it is a 400 asking for a JSON object, and nothing is stored
    assert response.status_code == 400, response.content[:300]
    assert "JSON object" in detail(response)
    assert Job.objects.count() == before


def test_a_valid_spec_is_still_accepted(alice_api: APIClient) -> None:
    # Given the same client and a plain spec (the refusals above are about the input)
    response = post_raw(alice_api, SUBMIT, json.dumps(training_spec()), "application/json")
    # Then it is stored
    assert response.status_code == 201, response.json()
    assert Job.objects.count() == 1
