"""Whatever a user types into a job spec, the manifests keep the portal's shape and safety.

Property (Hypothesis, no database): arbitrary strings — any unicode, control characters,
look-alike letters, huge values — go into every field a user types. Whenever
``spec_parse`` accepts the spec, the manifests built from it

1. have exactly the key paths of a plain spec of the same shape (same kind, workers,
   GPU sharing, number of volumes, env vars, …): user input only ever fills values;
2. pass the Kubernetes schema (``validate_manifests``) and the policy
   (``check_manifests``) with nothing to report;
3. carry names and label values the API server accepts;
4. never use something the user typed as a dict key;
5. hold no control characters (but tab and newline) and no bidirectional overrides.

Whenever it refuses the spec, it raises ``ApplicationError`` naming the field; any
other exception fails the test.
"""

from __future__ import annotations

import copy
import operator
import re
from dataclasses import replace
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cluster.priority_classes import PRIORITIES
from core.errors import ApplicationError
from jobs.manifests import ManifestContext, build_manifests, validate_manifests
from jobs.manifests.security import check_manifests
from jobs.spec import KINDS, SHARINGS, JobSpec, VolumeMount
from jobs.spec_input import JobSpecInput, spec_parse
from tests.conftest import FULL_SPEC

CTX = ManifestContext(job_id=987654321, namespace="team-vision")
K8S_VERSION = "1.33"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_PROFILE = re.compile(r"[1-7]g\.[0-9]+gb")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# Kubernetes' classic rule for env var names (the C identifiers the portal allows pass it).
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
UNSAFE_CHAR = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SPEC_FIELDS = frozenset(JobSpecInput().fields)

# Characters that have broken input validation somewhere: whitespace and line breaks
# (Python's ``$`` matches before a final newline), control and escape characters, NUL,
# surrogates, invisible and bidirectional formatting, and letters that look Latin.
TRICKY_CHARS = [
    " ",
    "\t",
    "\n",
    "\r",
    "\x00",
    "\x1b",
    "\x7f",
    "\x85",
    "\xa0",
    "\u2028",
    "\u200b",
    "\u202e",
    "\u2066",
    "\ufeff",
    "\ud800",
    "е",  # CYRILLIC SMALL LETTER IE
    "ο",  # GREEK SMALL LETTER OMICRON
    "０",  # FULLWIDTH DIGIT ZERO
    "ﬁ",  # LATIN SMALL LIGATURE FI
    "K",  # KELVIN SIGN
    "٣",  # ARABIC-INDIC DIGIT THREE
    "{",
    '"',
    "'",
    ":",
    "#",
    "&",
    "*",
    "$",
    "%",
    "\\",
]

# Values that pass each field's pattern, so that accepted specs are common.
VALID = {
    "team": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", fullmatch=True),
    "name": st.from_regex(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?", fullmatch=True),
    "image": st.from_regex(
        r"([a-z0-9]{1,8}(\.[a-z0-9]{1,5}){1,2}(:[0-9]{1,5})?/)?[a-z0-9]{1,10}"
        r"([._-][a-z0-9]{1,5}){0,2}(/[a-z0-9]{1,8}){0,3}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,20})?",
        fullmatch=True,
    ),
    "env_name": st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True),
    "health_path": st.from_regex(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]{0,40}", fullmatch=True),
    "claim": st.from_regex(
        r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,8}){0,3}", fullmatch=True
    ),
    "mount_path": st.from_regex(
        r"/[A-Za-z0-9._-]{1,12}(/[A-Za-z0-9._-]{1,12}){0,3}", fullmatch=True
    ),
    "cpu": st.from_regex(r"[1-9][0-9]?(\.[0-9]{1,3})?|[1-9][0-9]{1,4}m", fullmatch=True),
    "memory": st.from_regex(
        r"(6[4-9]|[1-9][0-9]{2,3})(Mi|M)|[1-9][0-9]{0,2}(\.[0-9])?Gi", fullmatch=True
    ),
    "product": st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?", fullmatch=True),
    "mig_profile": st.from_regex(r"[1-7]g\.[0-9]{1,3}gb", fullmatch=True),
}

# Up to 4096 repetitions of a short string: the size limits, without the generation cost.
huge_text = st.builds(operator.mul, st.text(min_size=1, max_size=3), st.integers(1, 4096))


def _insert(value: str, char: str, position: int) -> str:
    position %= len(value) + 1
    return value[:position] + char + value[position:]


# What copy and paste leaves at the end of a value; Python's ``$`` matches before "\n".
TRAILING = st.sampled_from(["\n", "\r\n", " ", "\t"]) | st.sampled_from(TRICKY_CHARS)


def wild(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Any string at all, or a valid one with a tricky character slipped in or appended."""
    appended = st.builds(operator.add, valid, TRAILING)
    return st.one_of(
        st.text(max_size=80),
        huge_text,
        st.builds(_insert, valid, st.sampled_from(TRICKY_CHARS), st.integers(0, 100)),
        # Twice as likely: a valid value with something after it slips through most easily.
        appended,
        appended,
    )


# Free text (command, args, env values): any unicode but control characters is accepted;
# one draw in three is wild (controls, surrogates, bidi overrides, huge).
printable_text = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=60)
free_text = st.one_of(
    printable_text,
    printable_text,
    st.one_of(
        st.text(max_size=60),
        huge_text,
        st.builds(_insert, printable_text, st.sampled_from(TRICKY_CHARS), st.integers(0, 60)),
    ),
)
TYPED_FIELDS = (
    "team",
    "name",
    "image",
    "env_name",
    "health_path",
    "claim",
    "mount_path",
    "cpu",
    "memory",
    "product",
    "mig_profile",
)


@st.composite
def raw_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A spec as a client would send it; one typed field (at random) gets wild values.

    One at a time, so that a wild value is not hidden behind another field's refusal.
    """
    wild_field = draw(st.sampled_from(TYPED_FIELDS))

    def typed(field: str) -> str:
        return draw(wild(VALID[field]) if field == wild_field else VALID[field])

    def present(field: str) -> bool:
        """Optional fields are always there when they are the wild one."""
        return field == wild_field or draw(st.booleans())

    kind = "inference" if wild_field == "health_path" else draw(st.sampled_from(KINDS))
    sharing = "mig" if wild_field == "mig_profile" else draw(st.sampled_from(SHARINGS))
    count = draw(st.integers(1 if sharing != "exclusive" or wild_field == "product" else 0, 2))
    gpu: dict[str, Any] = {"count": count, "sharing": sharing}
    if sharing == "mig":
        gpu["mig_profile"] = typed("mig_profile")
    if count and present("product"):
        gpu["product"] = typed("product")
    least = {field: int(wild_field == field) for field in ("env_name", "claim", "mount_path")}
    spec: dict[str, Any] = {
        "team": typed("team"),
        "name": typed("name"),
        "kind": kind,
        "image": typed("image"),
        "command": draw(st.lists(free_text, max_size=3)),
        "args": draw(st.lists(free_text, max_size=3)),
        "env": {
            typed("env_name"): draw(free_text)
            for _ in range(draw(st.integers(least["env_name"], 3)))
        },
        "gpu": gpu,
        "priority": draw(st.sampled_from(PRIORITIES)),
        "volumes": [
            {
                "claim": typed("claim"),
                "mount_path": typed("mount_path"),
                "read_only": draw(st.booleans()),
            }
            for _ in range(draw(st.integers(max(least["claim"], least["mount_path"]), 2)))
        ],
    }
    if present("cpu"):
        spec["cpu"] = typed("cpu")
    if present("memory"):
        spec["memory"] = typed("memory")
    if kind == "training":
        spec["workers"] = draw(st.integers(1, 3))
        spec["retries"] = draw(st.integers(0, 2))
        if draw(st.booleans()):
            spec["max_runtime_seconds"] = draw(st.integers(60, 86400))
    else:
        spec["replicas"] = draw(st.integers(1, 3))
        spec["port"] = draw(st.integers(1024, 65535))
        spec["health_path"] = typed("health_path")
    return spec


def plain_like(spec: JobSpec) -> JobSpec:
    """The same shape as ``spec`` with every user-typed value replaced by a plain one."""
    gpu = spec.gpu
    return replace(
        spec,
        team="plain",
        name="plain",
        image="registry.example/plain:1",
        command=("plain",) * len(spec.command),
        args=("plain",) * len(spec.args),
        env={f"PLAIN_{index}": "plain" for index in range(len(spec.env))},
        gpu=replace(
            gpu,
            product=None if gpu.product is None else "PLAIN-GPU",
            mig_profile=None if gpu.mig_profile is None else "1g.10gb",
        ),
        cpu=None if spec.cpu is None else "1",
        memory=None if spec.memory is None else "1Gi",
        volumes=tuple(
            VolumeMount(claim=f"plain-{i}", mount_path=f"/plain/{i}", read_only=v.read_only)
            for i, v in enumerate(spec.volumes)
        ),
        health_path="/plain",
    )


def _key(key: Any) -> str:
    assert isinstance(key, str), f"non-string key {key!r}"
    if key.startswith(MIG_RESOURCE_PREFIX):
        # The one key a user value takes part in: the MIG resource nvidia.com/mig-<profile>,
        # and only with a profile that passed the strict pattern.
        assert MIG_PROFILE.fullmatch(key.removeprefix(MIG_RESOURCE_PREFIX)), key
        return MIG_RESOURCE_PREFIX + "<profile>"
    return key


def key_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every path of dict keys in ``obj``, list indices collapsed to ``[]``."""
    paths: set[tuple[str, ...]] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = (*prefix, _key(key))
            paths.add(path)
            paths |= key_paths(value, path)
    elif isinstance(obj, list):
        for item in obj:
            paths |= key_paths(item, (*prefix, "[]"))
    return paths


def all_keys(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        return set(obj).union(*(all_keys(value) for value in obj.values()))
    if isinstance(obj, list):
        return set().union(*(all_keys(item) for item in obj))
    return set()


def typed_strings(obj: Any) -> set[str]:
    """Every string in the client's spec, env names included."""
    if isinstance(obj, str):
        return {obj}
    if isinstance(obj, dict):
        return {k for k in obj if isinstance(k, str)}.union(
            *(typed_strings(value) for value in obj.values())
        )
    if isinstance(obj, list):
        return set().union(*(typed_strings(item) for item in obj))
    return set()


def api_server_problems(manifests: list[dict[str, Any]]) -> list[str]:
    """What the API server would refuse although the JSON schema allows it: object names,
    label values, env var names, claim names, image references with whitespace."""
    problems = []

    def label_values(labels: dict[str, Any], where: str) -> None:
        for key, value in labels.items():
            if not (isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.fullmatch(value)):
                problems.append(f"{where}: label {key}={value!r}")

    for manifest in manifests:
        kind, metadata, spec = manifest["kind"], manifest["metadata"], manifest["spec"]
        if not (len(metadata["name"]) <= 63 and DNS_LABEL.fullmatch(metadata["name"])):
            problems.append(f"{kind}: name {metadata['name']!r}")
        label_values(metadata.get("labels", {}), kind)
        if kind == "Service":
            label_values(spec["selector"], f"{kind} selector")
            continue
        label_values(spec.get("selector", {}).get("matchLabels", {}), f"{kind} selector")
        template = spec["template"]
        label_values(template["metadata"]["labels"], f"{kind} pod")
        pod = template["spec"]
        for container in pod["containers"]:
            image = container["image"]
            if image != image.strip() or not image.isprintable():
                problems.append(f"{kind}: image {image!r}")
            for env in container.get("env", []):
                if not ENV_NAME.fullmatch(env["name"]):
                    problems.append(f"{kind}: env name {env['name']!r}")
            for mount in container.get("volumeMounts", []):
                if not mount["mountPath"].startswith("/") or ":" in mount["mountPath"]:
                    problems.append(f"{kind}: mountPath {mount['mountPath']!r}")
        for volume in pod.get("volumes", []):
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and not (len(claim) <= 253 and DNS_SUBDOMAIN.fullmatch(claim)):
                problems.append(f"{kind}: claimName {claim!r}")
        node_affinity = pod.get("affinity", {}).get("nodeAffinity", {})
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {})
        for term in required.get("nodeSelectorTerms", []):
            for expression in term["matchExpressions"]:
                values = {f"values[{i}]": v for i, v in enumerate(expression["values"])}
                label_values(values, f"{kind} affinity")
    return problems


def unsafe_strings(obj: Any) -> list[str]:
    """Strings holding control characters other than tab and newline, or bidi overrides:
    what a terminal or the YAML preview would interpret instead of showing."""
    if isinstance(obj, str):
        return [obj] if UNSAFE_CHAR.search(obj) else []
    if isinstance(obj, dict):
        return [
            s for key, value in obj.items() for s in unsafe_strings(key) + unsafe_strings(value)
        ]
    if isinstance(obj, list):
        return [s for item in obj for s in unsafe_strings(item)]
    return []


def check_refusal(error: ApplicationError) -> None:
    assert error.field_errors, f"refused without naming a field: {error.message!r}"
    for path, messages in error.field_errors.items():
        root = re.split(r"[.\[]", path, maxsplit=1)[0]
        assert root in SPEC_FIELDS, f"error names no spec field: {path!r}"
        assert messages and all(isinstance(m, str) and m for m in messages), (path, messages)


def check_spec_property(raw: dict[str, Any]) -> None:
    """The property of this module, for one spec as a client sent it."""
    # When the spec is parsed
    try:
        spec = spec_parse(raw)
    except ApplicationError as error:
        # Then a refusal names the field to fix
        event("refused")
        check_refusal(error)
        return
    event("accepted")
    manifests = build_manifests(spec, CTX)
    plain = build_manifests(plain_like(spec), CTX)
    # Then user input only ever fills values in the portal's own structure …
    assert key_paths(manifests) == key_paths(plain)
    keys, plain_keys = all_keys(manifests), all_keys(plain)
    assert not {s for s in typed_strings(raw) if s in keys and s not in plain_keys}
    # … and the manifests are valid, within policy and acceptable to the API server.
    assert validate_manifests(manifests, K8S_VERSION) == []
    assert check_manifests(manifests, namespace=CTX.namespace) == []
    assert api_server_problems(manifests) == []
    assert unsafe_strings(manifests) == []


PLACES: dict[str, Any] = {
    "team": lambda spec, v: spec.update(team=v),
    "name": lambda spec, v: spec.update(name=v),
    "image": lambda spec, v: spec.update(image=v),
    "env_name": lambda spec, v: spec.update(env={v: "1"}),
    "health_path": lambda spec, v: spec.update(health_path=v),
    "claim": lambda spec, v: spec["volumes"][0].update(claim=v),
    "mount_path": lambda spec, v: spec["volumes"][0].update(mount_path=v),
    "cpu": lambda spec, v: spec.update(cpu=v),
    "memory": lambda spec, v: spec.update(memory=v),
    "product": lambda spec, v: spec["gpu"].update(product=v),
    "mig_profile": lambda spec, v: spec["gpu"].update(mig_profile=v),
    "command": lambda spec, v: spec.update(command=["python", v]),
    "args": lambda spec, v: spec.update(args=[v]),
    "env_value": lambda spec, v: spec.update(env={"MODEL": v}),
}


@settings(max_examples=400, deadline=None, database=None)
@given(data=st.data(), field=st.sampled_from(sorted(PLACES)))
def test_one_wild_field_in_a_valid_spec(data: st.DataObject, field: str) -> None:
    # Given a valid spec with one typed field replaced by a wild value
    value = data.draw(wild(VALID[field]) if field in VALID else free_text, label=field)
    raw = copy.deepcopy(FULL_SPEC)
    PLACES[field](raw, value)
    # When it is parsed, Then it is refused by name or its manifests keep the plain shape
    check_spec_property(raw)


@settings(max_examples=300, deadline=None, database=None)
@given(raw=raw_specs())
def test_wild_values_in_specs_of_every_shape(raw: dict[str, Any]) -> None:
    # Given specs of every shape (kinds, workers, GPU sharing, volumes, env) with a wild field
    # When each is parsed, Then it is refused by name or its manifests keep the plain shape
    check_spec_property(raw)


@settings(max_examples=150, deadline=None, database=None)
@given(
    field=st.sampled_from(sorted(SPEC_FIELDS)),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=40),
        st.lists(st.text(max_size=5), max_size=3),
        st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
        st.recursive(
            st.none() | st.integers() | st.text(max_size=3),
            lambda children: (
                st.lists(children, max_size=3)
                | st.dictionaries(st.text(max_size=3), children, max_size=3)
            ),
            max_leaves=10,
        ),
    ),
)
def test_a_value_of_any_json_type_in_any_field_is_accepted_or_refused_by_name(
    field: str, value: Any
) -> None:
    # Given a valid spec with one field replaced by a JSON value of any type
    raw: dict[str, Any] = {
        "team": "vision",
        "name": "resnet50",
        "kind": "training",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "gpu": {"count": 1},
    }
    raw[field] = value
    # When it is parsed, Then it is accepted (and builds valid manifests) or refused by name
    try:
        spec = spec_parse(raw)
    except ApplicationError as error:
        check_refusal(error)
        return
    manifests = build_manifests(spec, CTX)
    assert validate_manifests(manifests, K8S_VERSION) == []
    assert check_manifests(manifests, namespace=CTX.namespace) == []
