"""Structural input checks: sizes and characters of every typed field (no database).

Look-alike letters, invisible characters, whitespace and control characters are refused
with a message that names the field and the character; free text (command, args, env
values) keeps tabs and newlines and any printable unicode.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from core.errors import ApplicationError
from jobs.spec_input import MAX_CONTAINER_TEXT_BYTES, spec_parse
from tests.conftest import inference_spec, training_spec


def refused(spec: dict[str, Any]) -> dict[str, list[str]]:
    with pytest.raises(ApplicationError) as caught:
        spec_parse(spec)
    return caught.value.field_errors


@pytest.mark.parametrize(
    "spec,field,words",
    [
        # look-alikes and invisible characters in identifiers
        (training_spec(name="rеsnet"), "name", ["U+0435 CYRILLIC SMALL LETTER IE", "ASCII"]),
        (training_spec(name="résnet"), "name", ["U+00E9", "ASCII"]),
        (training_spec(name="resnet🚀"), "name", ["U+1F680", "ASCII"]),
        (training_spec(name="resnet\u202e05"), "name", ["U+202E RIGHT-TO-LEFT OVERRIDE"]),
        (training_spec(name="res\u200bnet"), "name", ["U+200B ZERO WIDTH SPACE"]),
        (training_spec(name="resnet\n"), "name", ["whitespace", "LINE FEED"]),
        (training_spec(name=" resnet"), "name", ["whitespace", "SPACE", "character 1"]),
        (training_spec(team="vision "), "team", ["whitespace"]),
        (training_spec(team="visiοn"), "team", ["GREEK SMALL LETTER OMICRON"]),
        (training_spec(team="Vision"), "team", ["slug"]),
        (training_spec(image="nvcr.io/nvidia/pytorch:24.05-py3\n"), "image", ["whitespace"]),
        (training_spec(image="nvcr.io/nvidіa/pytorch:24.05"), "image", ["U+0456", "image"]),
        (training_spec(image="nvcr.io/nvidia/pytorch:２4.05"), "image", ["FULLWIDTH DIGIT TWO"]),
        (training_spec(gpu={"count": 1, "product": "Tesla-T4 "}), "gpu.product", ["whitespace"]),
        (
            training_spec(gpu={"count": 1, "sharing": "mig", "mig_profile": "1g.10gb\n"}),
            "gpu.mig_profile",
            ["whitespace"],
        ),
        (training_spec(gpu={"count": "３"}), "gpu.count", ["whole number"]),
        (training_spec(cpu=" 4"), "cpu", ["whitespace"]),
        (training_spec(memory="16Gi\n"), "memory", ["whitespace"]),
        (training_spec(memory="16Ｇi"), "memory", ["FULLWIDTH"]),
        (inference_spec(health_path="/healthz "), "health_path", ["whitespace"]),
        (inference_spec(health_path="/hеalthz"), "health_path", ["CYRILLIC"]),
        (
            training_spec(volumes=[{"claim": "data\u00a0set", "mount_path": "/data"}]),
            "volumes[0].claim",
            ["NO-BREAK SPACE"],
        ),
        (
            training_spec(volumes=[{"claim": "data", "mount_path": "/data\t"}]),
            "volumes[0].mount_path",
            ["whitespace", "TAB"],
        ),
        # env names
        (training_spec(env={"SEED\n": "1"}), "env", ["variable name"]),
        (training_spec(env={"SЕED": "1"}), "env", ["variable name", "ASCII"]),
        (training_spec(env={"A" * 129: "1"}), "env", ["128"]),
        (training_spec(env={"": "1"}), "env", ["variable name"]),
        # control characters in free text
        (training_spec(env={"SEED": "1\x00"}), "env.SEED", ["Null"]),
        (training_spec(env={"SEED": "\x1b[2J"}), "env.SEED", ["U+001B", "control"]),
        (training_spec(env={"SEED": "1\r"}), "env.SEED", ["CARRIAGE RETURN"]),
        (training_spec(command=["python", "train.py\x7f"]), "command[1]", ["U+007F"]),
        (training_spec(args=["--lr", "\u202e1e-3"]), "args[1]", ["RIGHT-TO-LEFT OVERRIDE"]),
        (training_spec(args=["\x85"]), "args[0]", ["U+0085"]),
        # sizes
        (training_spec(command=["x" * 4097]), "command[0]", ["4096"]),
        (training_spec(args=["x"] * 65), "args", ["64"]),
        (training_spec(env={f"V{i}": "x" for i in range(65)}), "env", ["64"]),
        (training_spec(env={"V": "x" * 8193}), "env.V", ["8192"]),
        (training_spec(cpu="1" * 33), "cpu", ["32"]),
        (
            training_spec(env={f"V{i}": "x" * 8000 for i in range(9)}),
            "env",
            ["64 KiB", "command, args and env"],
        ),
        (
            training_spec(args=["y" * 4000] * 16, env={"V": "x" * 2000}),
            "args",
            ["64 KiB"],
        ),
        # not a JSON object
        (training_spec(gpu={"count": "1e1000000"}), "gpu.count", ["whole number"]),
        (training_spec(gpu={"count": 1e300}), "gpu.count", ["At most 64"]),
    ],
)
def test_bad_characters_and_sizes_are_refused_naming_the_field(
    spec: dict[str, Any], field: str, words: list[str]
) -> None:
    # Given a spec with one bad field, When it is parsed
    errors = refused(spec)
    # Then the error names that field and says what is wrong
    assert field in errors, errors
    message = " ".join(errors[field])
    for word in words:
        assert word in message, (word, message)


@pytest.mark.parametrize(
    "overrides",
    [
        {"command": ["bash", "-c", "for i in 1 2; do\n\techo $i\ndone"]},
        {"args": ["--prompt", "résumé ünïcode 日本語 🚀 שלום"]},
        {"env": {"GREETING": "héllo\twörld\n", "_X1": ""}},
        {"env": {"BIG": "x" * 8192}, "args": ["y" * 4096] * 12},
    ],
)
def test_free_text_keeps_tabs_newlines_and_unicode(overrides: dict[str, Any]) -> None:
    # Given free text a real launcher uses, When it is parsed, Then it is kept as typed
    spec = spec_parse(training_spec(**overrides))
    for key, value in overrides.items():
        got = getattr(spec, key)
        assert (list(got) if isinstance(got, tuple) else got) == value
    sizes = sum(len(a.encode()) for a in spec.args) + sum(
        len(k) + len(v.encode()) for k, v in spec.env.items()
    )
    assert sizes <= MAX_CONTAINER_TEXT_BYTES


def test_a_huge_gpu_count_is_refused_at_once() -> None:
    # Given counts whose integer value has a million digits (int() of them takes seconds)
    started = time.monotonic()
    for count in ("1e1000000", "9" * 1000, 10**1000):
        # When each is parsed, Then it is refused by name
        assert "gpu.count" in refused(training_spec(gpu={"count": count}))
    # … without spending the CPU on converting it
    assert time.monotonic() - started < 1


def test_a_form_encoded_body_is_not_taken_for_a_spec() -> None:
    from django.http import QueryDict

    # Given what DRF makes of a form-encoded body
    data = QueryDict("team=vision&name=resnet50&kind=training&image=nginx")
    # When it is parsed, Then it is refused with the content type to use
    with pytest.raises(ApplicationError, match="application/json"):
        spec_parse(data)


def _outcome(spec: dict[str, Any]) -> object:
    try:
        return spec_parse(spec)
    except ApplicationError as exc:
        return exc.field_errors


def test_specs_parsed_at_once_in_many_threads_each_get_their_own_answer() -> None:
    # given valid and refused specs of every shape (the serializers' fields are shared)
    specs = [
        training_spec(),
        training_spec(name="two", workers=2, volumes=[{"claim": "data", "mount_path": "/d"}]),
        inference_spec(),
        training_spec(replicas=2),  # refused from the request's own initial_data
        inference_spec(workers=2),
        training_spec(name="Bad_Name"),
        training_spec(gpu={"count": 1, "sharing": "mig"}),
        training_spec(volumes=[{"claim": "a", "mount_path": "/x"}] * 2),
        training_spec(gpu={"count": 0.5}),
        training_spec(bogus=1),
    ]
    expected = [_outcome(spec) for spec in specs]
    assert sum(isinstance(e, dict) for e in expected) == 7

    # when eight threads parse them over and over, interleaved
    def parse_all(offset: int) -> list[tuple[int, object]]:
        order = [(offset + i) % len(specs) for i in range(len(specs) * 30)]
        return [(i, _outcome(specs[i])) for i in order]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [r for rs in pool.map(parse_all, range(8)) for r in rs]

    # then every answer is the one that spec gets alone
    assert all(outcome == expected[i] for i, outcome in results)
