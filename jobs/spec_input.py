"""Structural validation of a job spec (the JSON the API and the form both produce).

``spec_parse`` checks shapes, types, sizes and characters and returns a ``JobSpec``;
checks that need the database (team membership, catalog, quota) are in
``jobs.services.submit.job_spec_check``. Every error names its field with a dotted path
(``gpu.count``, ``volumes[1].mount_path``) and says how to fix it.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cluster.priority_classes import PRIORITIES
from core.api_errors import flatten_errors
from core.errors import ApplicationError
from jobs.spec import KINDS, SHARINGS, JobSpec, fields_not_for
from scheduling import parse_quantity

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A container image reference: [registry[:port]/]path[:tag][@sha256:digest]
IMAGE_RE = re.compile(
    r"^(?:[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]{1,5})?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY_RE = re.compile(r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.[0-9]+gb$")
GPU_PRODUCT_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
HEALTH_PATH_RE = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$")
MOUNT_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]*$")

MAX_NAME = 40
MAX_GPUS_PER_POD = 64
MAX_WORKERS = 64
MAX_REPLICAS = 32
MAX_LIST_ITEMS = 64
MAX_ARG_LEN = 4096
MAX_ENV = 64
MAX_ENV_VALUE = 8192
MAX_ENV_NAME = 128
# command + args + env names and values, in UTF-8 bytes: far above any real launcher
# line, far below the ~1.5 MB an object may have in etcd (each pod template repeats it).
MAX_CONTAINER_TEXT_BYTES = 64 * 1024
MAX_QUANTITY = 32
MAX_GPU_PRODUCT = 63  # a node label value
MAX_VOLUMES = 16
MAX_CPU_CORES = Decimal(256)
MAX_MEMORY_BYTES = Decimal(2 * 1024**4)  # 2 TiB on one pod is already a very large node
MIN_MEMORY_BYTES = Decimal(64 * 1024**2)
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
# Set by the portal for distributed training; a user value would silently break torchrun.
RESERVED_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK"})
RESERVED_ENV_PREFIXES = ("PET_",)
RESERVED_MOUNT_PATHS = ("/dev", "/proc", "/sys", "/etc", "/")

# Free text (command, args, env values) may hold tabs and newlines (a ``bash -c`` script),
# never other control characters, which terminals and the YAML preview interpret, nor
# bidirectional overrides, which make the preview show a command other than the one that
# runs ("Trojan Source").
TEXT_CONTROLS_ALLOWED = frozenset("\t\n")
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def quantity_value(text: str) -> Decimal:
    """The value of a Kubernetes quantity such as ``500m``, ``8``, ``64Gi``.

    Users get a narrower syntax than the API server accepts (no exponents or signs), so a
    typo is refused rather than read as something else.
    """
    if not QUANTITY_RE.fullmatch(text):
        raise ValueError(text)
    return parse_quantity(text)


# Anything but printable ASCII: whitespace, control characters, and every non-ASCII
# letter, among them the look-alikes (Cyrillic 'е' for Latin 'e') and the invisible ones
# (zero-width space) that make a name read like another and be a different object.
_NOT_TOKEN_CHAR = re.compile(r"[^\x21-\x7e]")
_NOT_TEXT_CHAR = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff" + "".join(sorted(BIDI_CONTROLS)) + "]"
)
GPU_COUNT_RE = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$")


_CONTROL_NAMES = {"\t": "TAB", "\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\x00": "NUL"}


def describe_char(char: str) -> str:
    """A character the user may not be able to see or tell apart: ``U+0435 CYRILLIC …``."""
    fallback = "CONTROL CHARACTER" if unicodedata.category(char) == "Cc" else "UNNAMED CHARACTER"
    name = _CONTROL_NAMES.get(char) or unicodedata.name(char, fallback)
    return f"U+{ord(char):04X} {name}"


def check_token(value: str, what: str, example: str) -> None:
    """Refuse whitespace and anything but printable ASCII in a name, image, path or quantity.

    The patterns of those fields accept only ASCII anyway; this says *which* character
    made a value that looks right wrong, and where.
    """
    found = _NOT_TOKEN_CHAR.search(value)
    if found is None:
        return
    char, position = found.group(), found.start() + 1
    if char.isspace():
        raise serializers.ValidationError(
            f"Remove the whitespace ({describe_char(char)}) at character {position}: "
            f"{what} has none (e.g. {example})."
        )
    raise serializers.ValidationError(
        f"Character {position} is {describe_char(char)}: {what} is plain ASCII (look-alike "
        f"letters from other alphabets and invisible characters are refused), e.g. {example}."
    )


def text_problem(value: str) -> str | None:
    """Why free text (command, args, env values) is refused, or None when it is fine."""
    found = _NOT_TEXT_CHAR.search(value)
    if found is None:
        return None
    return (
        f"Character {found.start() + 1} is {describe_char(found.group())}: only tabs and "
        "newlines are allowed among control characters, and no bidirectional overrides."
    )


class PrintableAscii:
    """``check_token`` as a field validator: says *which* character is wrong, before any
    pattern says the value does not match."""

    def __init__(self, what: str, example: str) -> None:
        self.what, self.example = what, example

    def __call__(self, value: Any) -> None:
        check_token(value, self.what, self.example)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a typo must not be silently dropped."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {
                        key: [f"Unknown field '{key}'. Allowed: {', '.join(sorted(self.fields))}."]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": MAX_GPUS_PER_POD})
class GpuCountField(serializers.Field):
    """A whole number of GPUs; fractions get advice instead of a bare type error."""

    default_error_messages = {
        "fraction": (
            "GPUs are whole devices: {value} is not a whole number. To share a GPU use "
            "sharing 'mig' (a MIG slice, e.g. mig_profile 1g.10gb) or 'shared' "
            "(a time-sliced GPU)."
        ),
        "invalid": "Enter a whole number of GPUs (0 for a CPU-only job).",
        "min": "The GPU count cannot be negative.",
        "max": f"At most {MAX_GPUS_PER_POD} GPUs per pod; use more workers for larger jobs.",
    }

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            self.fail("invalid")
        text = str(data).strip()
        # Decimal() also reads other scripts' digits and "1_0"; a count is plain ASCII.
        if isinstance(data, str) and not GPU_COUNT_RE.match(text):
            self.fail("invalid")
        try:
            value = Decimal(text)
        except (InvalidOperation, ValueError):
            self.fail("invalid")
        if not value.is_finite():
            self.fail("invalid")
        # Bounds before int(): int(Decimal("1e1000000")) takes seconds of CPU.
        if value < 0 and value == value.to_integral_value():
            self.fail("min")
        if value > MAX_GPUS_PER_POD:
            self.fail("max")
        if value != value.to_integral_value():
            self.fail("fraction", value=data)
        return int(value)

    def to_representation(self, value: int) -> int:
        return value


class GpuInput(StrictSerializer):
    count = GpuCountField(default=0)
    product = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=MAX_GPU_PRODUCT,
        default=None,
        trim_whitespace=False,
    )
    sharing = serializers.ChoiceField(choices=SHARINGS, default="exclusive")
    mig_profile = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=30,
        default=None,
        trim_whitespace=False,
    )

    def validate_product(self, value: str | None) -> str | None:
        if value:
            check_token(value, "a GPU product", "NVIDIA-A100-SXM4-80GB")
        if value and not GPU_PRODUCT_RE.fullmatch(value):
            raise serializers.ValidationError(
                "A GPU product is a node label value such as NVIDIA-A100-SXM4-80GB."
            )
        return value or None

    def validate_mig_profile(self, value: str | None) -> str | None:
        if value:
            check_token(value, "a MIG profile", "1g.10gb")
        if value and not MIG_PROFILE_RE.fullmatch(value):
            raise serializers.ValidationError("A MIG profile looks like 1g.10gb or 3g.40gb.")
        return value or None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sharing, profile = attrs.get("sharing", "exclusive"), attrs.get("mig_profile")
        if sharing == "mig" and not profile:
            raise serializers.ValidationError(
                {"mig_profile": ["Choose a MIG profile (e.g. 1g.10gb) when sharing is 'mig'."]}
            )
        if profile and sharing != "mig":
            raise serializers.ValidationError(
                {
                    "mig_profile": [
                        "A MIG profile needs sharing 'mig'; set sharing to 'mig' or "
                        "remove mig_profile."
                    ]
                }
            )
        if sharing != "exclusive" and attrs.get("count", 0) == 0:
            raise serializers.ValidationError(
                {
                    "count": [
                        f"sharing '{sharing}' needs at least 1 GPU; use count 0 with "
                        "sharing 'exclusive' for a CPU-only job."
                    ]
                }
            )
        return attrs


class ClaimMountInput(StrictSerializer):
    """A PersistentVolumeClaim of the team's namespace and where the container mounts it."""

    claim = serializers.CharField(max_length=253, trim_whitespace=False)
    mount_path = serializers.CharField(max_length=256, trim_whitespace=False)

    def validate_claim(self, value: str) -> str:
        check_token(value, "a PersistentVolumeClaim name", "imagenet")
        if not DNS_SUBDOMAIN_RE.fullmatch(value):
            raise serializers.ValidationError(
                "A PersistentVolumeClaim name uses lower-case letters, digits, '-' and '.'."
            )
        return value

    def validate_mount_path(self, value: str) -> str:
        check_token(value, "a mount path", "/data")
        if not MOUNT_PATH_RE.fullmatch(value) or "//" in value or "/../" in f"{value}/":
            raise serializers.ValidationError(
                "Use an absolute path such as /data with letters, digits, '.', '_', '-' and '/'."
            )
        normalised = value.rstrip("/") or "/"
        if normalised in RESERVED_MOUNT_PATHS or any(
            normalised.startswith(p + "/") for p in RESERVED_MOUNT_PATHS if p != "/"
        ):
            raise serializers.ValidationError(
                f"{value} is a system path; mount volumes elsewhere, e.g. /data."
            )
        return normalised


class VolumeInput(ClaimMountInput):
    # The JSON name is fixed; DRF's metaclass moves it out of the class attribute it shadows.
    read_only = serializers.BooleanField(default=False)  # type: ignore[assignment]


class CheckpointInput(ClaimMountInput):
    """``checkpoint: {claim, mount_path}`` (training): read-write, ``CHECKPOINT_DIR``."""


def _string_list() -> serializers.ListField:
    """``command`` / ``args``: a bounded list of strings, kept exactly as typed."""
    return serializers.ListField(
        child=serializers.CharField(
            max_length=MAX_ARG_LEN, allow_blank=True, trim_whitespace=False
        ),
        required=False,
        default=list,
        max_length=MAX_LIST_ITEMS,
    )


def _optional_quantity() -> serializers.CharField:
    """``cpu`` / ``memory``: a Kubernetes quantity, or empty for the per-GPU default."""
    return serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=MAX_QUANTITY,
        trim_whitespace=False,
    )


class JobSpecInput(StrictSerializer):
    """The job spec as clients send it; see README "Job spec"."""

    team = serializers.CharField(max_length=40, trim_whitespace=False)
    name = serializers.CharField(max_length=200, trim_whitespace=False)
    kind = serializers.ChoiceField(choices=[(k, k.title()) for k in KINDS])
    image = serializers.CharField(max_length=255, trim_whitespace=False)
    command = _string_list()
    args = _string_list()
    env = serializers.DictField(
        child=serializers.CharField(
            max_length=MAX_ENV_VALUE, allow_blank=True, trim_whitespace=False
        ),
        required=False,
        default=dict,
    )
    gpu = GpuInput(required=False)
    cpu = _optional_quantity()
    memory = _optional_quantity()
    priority = serializers.ChoiceField(choices=PRIORITIES, default="normal")
    cluster = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=40,
        required=False,
        default="any",
        error_messages={
            "invalid": "Name a cluster (lower-case letters, digits and '-', e.g. a100-west) "
            "or say 'any'."
        },
        help_text="Where it runs: a cluster's name (GET /api/v1/clusters/), or 'any' (the "
        "default): the cluster where it would start soonest.",
    )
    volumes = VolumeInput(many=True, required=False, default=list)
    checkpoint = CheckpointInput(
        required=False,
        allow_null=True,
        help_text="Training only: the claim checkpoints are kept on and where it is mounted; "
        "the container gets CHECKPOINT_DIR and RESTART_ATTEMPT.",
    )
    launcher = serializers.ChoiceField(
        choices=["job", "pytorchjob", "trainjob"],
        required=False,
        help_text="Training only: what runs it: job (an Indexed Job, the portal's own), "
        "pytorchjob (Kubeflow's PyTorchJob) or trainjob (Kubeflow Trainer's TrainJob), where "
        "the cluster serves it (GET /api/v1/cluster/launchers/); the admin's default "
        "otherwise.",
    )
    workers = serializers.IntegerField(required=False, min_value=1, max_value=MAX_WORKERS)
    max_runtime_seconds = serializers.IntegerField(
        required=False, allow_null=True, min_value=60, max_value=MAX_RUNTIME_SECONDS
    )
    retries = serializers.IntegerField(required=False, min_value=0, max_value=10)
    replicas = serializers.IntegerField(required=False, min_value=1, max_value=MAX_REPLICAS)
    port = serializers.IntegerField(
        required=False,
        min_value=1024,
        max_value=65535,
        error_messages={
            "min_value": "Use a port of 1024 or above: containers run as a non-root user."
        },
    )
    health_path = serializers.CharField(
        required=False,
        max_length=256,
        trim_whitespace=False,
        # The pattern is a RegexValidator so that the OpenAPI schema carries it.
        validators=[
            PrintableAscii("an HTTP path", "/healthz"),
            RegexValidator(HEALTH_PATH_RE, "Use an HTTP path starting with '/', e.g. /healthz."),
        ],
    )

    workspace_image = serializers.CharField(
        required=False,
        max_length=40,
        help_text="Workspace only: the name of a workspace image the admins offer "
        "(GET /api/v1/workspace-images/).",
    )

    def validate_team(self, value: str) -> str:
        check_token(value, "a team slug", "vision")
        if not DNS_LABEL_RE.fullmatch(value):
            raise serializers.ValidationError(
                "Use your team's slug: lower-case letters, digits and '-' (e.g. vision)."
            )
        return value

    def validate_name(self, value: str) -> str:
        check_token(value, "a job name", "resnet50-run2")
        if len(value) > MAX_NAME:
            raise serializers.ValidationError(
                f"Use at most {MAX_NAME} characters (this one has {len(value)})."
            )
        if not DNS_LABEL_RE.fullmatch(value):
            raise serializers.ValidationError(
                "Use a DNS-1123 label: lower-case letters, digits and '-', starting and ending "
                "with a letter or digit (e.g. resnet50-run2)."
            )
        return value

    def validate_image(self, value: str) -> str:
        check_token(value, "a container image reference", "nvcr.io/nvidia/pytorch:24.05-py3")
        if not IMAGE_RE.fullmatch(value):
            raise serializers.ValidationError(
                "Not a container image reference; use e.g. nvcr.io/nvidia/pytorch:24.05-py3."
            )
        return value

    def validate_command(self, value: list[str]) -> list[str]:
        return _check_strings(value)

    def validate_args(self, value: list[str]) -> list[str]:
        return _check_strings(value)

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV:
            raise serializers.ValidationError(f"At most {MAX_ENV} environment variables.")
        for key, item in value.items():
            if len(key) > MAX_ENV_NAME or not ENV_NAME_RE.fullmatch(key):
                raise serializers.ValidationError(
                    f"{key[:60]!a} is not a valid variable name: use ASCII letters, digits "
                    f"and '_', not starting with a digit, at most {MAX_ENV_NAME} characters."
                )
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
                raise serializers.ValidationError(
                    f"{key} is set by the portal for distributed training; remove it."
                )
            problem = text_problem(item)
            if problem is not None:
                raise serializers.ValidationError({key: [problem]})
        return value

    def validate_cpu(self, value: str | None) -> str | None:
        if not value:
            return None
        check_token(value, "a CPU quantity", "500m or 8")
        amount = _quantity(value, "CPU", "500m or 8")
        if amount <= 0:
            raise serializers.ValidationError("CPU must be more than 0.")
        if amount > MAX_CPU_CORES:
            raise serializers.ValidationError(f"At most {MAX_CPU_CORES} CPU cores per pod.")
        return value

    def validate_memory(self, value: str | None) -> str | None:
        if not value:
            return None
        check_token(value, "a memory quantity", "16Gi")
        amount = _quantity(value, "memory", "16Gi")
        if amount < MIN_MEMORY_BYTES:
            raise serializers.ValidationError("Memory must be at least 64Mi (e.g. 16Gi).")
        if amount > MAX_MEMORY_BYTES:
            raise serializers.ValidationError("At most 2Ti of memory per pod.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        raw = self.initial_data if isinstance(self.initial_data, dict) else {}
        kind = attrs.get("kind")
        # Only a partial spec (a template) has no kind: it may hold any kind's fields.
        wrong = fields_not_for(kind) if kind else {}
        errors = {
            field: [_wrong_kind(field, owner, kind or "")]
            for field, owner in wrong.items()
            if field in raw and raw[field] is not None
        }
        if not self.partial and kind == "workspace" and not attrs.get("workspace_image"):
            errors["workspace_image"] = [
                "Pick the workspace image to run (GET /api/v1/workspace-images/ lists them), "
                "e.g. jupyter-pytorch."
            ]
        paths = [v["mount_path"] for v in attrs.get("volumes", [])]
        if len(paths) != len(set(paths)):
            errors["volumes"] = ["Two volumes use the same mount_path; give each its own."]
        checkpoint = attrs.get("checkpoint")
        if checkpoint and checkpoint["mount_path"] in paths:
            errors["checkpoint.mount_path"] = [
                f"A volume is mounted at {checkpoint['mount_path']} already; mount the "
                "checkpoints elsewhere, e.g. /checkpoints."
            ]
        if len(attrs.get("volumes", [])) > MAX_VOLUMES:
            errors["volumes"] = [f"At most {MAX_VOLUMES} volumes."]
        if attrs.get("launcher") == "trainjob" and attrs.get("retries"):
            errors["retries"] = [
                "A TrainJob takes no retries: its runtime fails it at the first failed node "
                "(the portal still runs it again after a GPU or node failure). Use 0, or "
                "launcher job or pytorchjob."
            ]
        sizes = {
            "command": sum(len(item.encode()) for item in attrs.get("command", [])),
            "args": sum(len(item.encode()) for item in attrs.get("args", [])),
            "env": sum(len(k) + len(v.encode()) for k, v in attrs.get("env", {}).items()),
        }
        if sum(sizes.values()) > MAX_CONTAINER_TEXT_BYTES:
            largest = max(sizes, key=sizes.__getitem__)
            errors[largest] = [
                f"command, args and env together take {sum(sizes.values()):,} bytes; at most "
                f"{MAX_CONTAINER_TEXT_BYTES:,} (64 KiB). Put long scripts or configuration in "
                "the image or on a volume."
            ]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class WorkspaceSpecInput(JobSpecInput):
    """A workspace's spec: its image, command and port come from its ``workspace_image``."""

    kind = serializers.ChoiceField(
        choices=[("workspace", "Workspace")],
        required=False,
        help_text="workspace (the default at /api/v1/workspaces/).",
    )

    image = serializers.CharField(
        max_length=255,
        trim_whitespace=False,
        required=False,
        help_text="Not for workspaces: the workspace image gives it (refused if sent).",
    )


def _wrong_kind(field: str, owner: str, kind: str) -> str:
    if owner == "workspace image":
        return (
            f"A workspace's {field} comes from its workspace image; remove '{field}' and pick "
            "the image with workspace_image."
        )
    return f"'{field}' applies to {owner} jobs only; remove it for a {kind} job."


def _check_strings(values: list[str]) -> list[str]:
    # Keyed by index, so the error names the item: ``command[2]``.
    errors = {
        str(index): [problem]
        for index, item in enumerate(values)
        if (problem := text_problem(item)) is not None
    }
    if errors:
        raise serializers.ValidationError(errors)
    return values


def _quantity(value: str, what: str, example: str) -> Decimal:
    try:
        return quantity_value(value)
    except ValueError:
        raise serializers.ValidationError(
            f"'{value[:40]}' is not a Kubernetes {what} quantity; use e.g. {example}."
        ) from None


def spec_parse(data: Any) -> JobSpec:
    """Validate the JSON form of a spec; raise ``ApplicationError`` naming each bad field."""
    # A QueryDict is a form-encoded body sent to the JSON API: its lists and nesting are lost.
    if not isinstance(data, dict) or isinstance(data, QueryDict):
        raise ApplicationError(
            "The job spec must be a JSON object, sent with Content-Type: application/json."
        )
    kind_input = WorkspaceSpecInput if data.get("kind") == "workspace" else JobSpecInput
    serializer = kind_input(data=data)
    if not serializer.is_valid():
        errors = flatten_errors(serializer.errors)
        first = next(iter(errors.items()))
        raise ApplicationError(f"{first[0]}: {first[1][0]}", field_errors=errors)
    values = dict(serializer.validated_data)
    values["gpu"] = dict(values.get("gpu") or {"count": 0, "sharing": "exclusive"})
    for field in ("workers", "retries", "replicas", "port", "health_path", "launcher"):
        if values.get(field) is None:
            values.pop(field, None)
    if values.get("kind") == "training":
        values.setdefault("launcher", settings.DEFAULT_TRAINING_LAUNCHER)
    if values.get("kind") == "workspace":
        values.setdefault("image", "")  # its workspace image's, filled in by job_spec_check
    return JobSpec.from_dict(values)
