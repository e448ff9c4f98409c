"""Request bodies in Kubernetes' protobuf encoding (``application/vnd.kubernetes.protobuf``),
turned into the JSON objects the rest of the sandbox handles.

kubectl's imperative generators (``kubectl create namespace|deployment|job|configmap|
secret|service|serviceaccount|priorityclass|quota|cronjob``, ``kubectl run``) send typed
objects as protobuf, with no JSON fallback. The envelope is the magic ``k8s\\0`` and a
``runtime.Unknown`` {1 typeMeta {1 apiVersion, 2 kind}, 2 raw object}; the object is the
gogo-protobuf encoding of the Go struct, field numbers as in k8s.io/api's
``generated.proto`` (the tables below; only the kinds and fields those commands send, and
their common neighbours). A field with an unknown number is skipped, as protobuf readers
do; an unknown kind is refused with 415, naming it.

gogo writes non-pointer fields even when empty (``namespace: ""``, ``generation: 0``):
empty strings, zero numbers and empty messages are left out of the JSON, as Go's
``omitempty`` leaves them out of the JSON kubectl would otherwise send.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from sandbox.errors import ApiError

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# Field kinds: scalars, a message name, or a special JSON form.
S, INT, B, BYTES = "string", "int", "bool", "bytes"
Q, INTSTR, TIME, MICRO = "quantity", "intstr", "time", "microtime"
MAP_S, MAP_Q, MAP_B = "map:string", "map:quantity", "map:bytes"

# message → field number → (json name, kind, repeated). A json name of "" means the
# message is inlined: its fields go into the parent (Go's ``json:",inline"``).
Schema = dict[int, tuple[str, str, bool]]


def _f(*fields: tuple[int, str, str] | tuple[int, str, str, bool]) -> Schema:
    out: Schema = {}
    for field in fields:
        number, name, kind = field[0], field[1], field[2]
        out[number] = (name, kind, bool(field[3]) if len(field) > 3 else False)
    return out


R = True  # repeated

MESSAGES: dict[str, Schema] = {
    "ObjectMeta": _f(
        (1, "name", S),
        (2, "generateName", S),
        (3, "namespace", S),
        (5, "uid", S),
        (6, "resourceVersion", S),
        (7, "generation", INT),
        (8, "creationTimestamp", TIME),
        (10, "deletionGracePeriodSeconds", INT),
        (11, "labels", MAP_S),
        (12, "annotations", MAP_S),
        (13, "ownerReferences", "OwnerReference", R),
        (14, "finalizers", S, R),
    ),
    "OwnerReference": _f(
        (1, "kind", S),
        (3, "name", S),
        (4, "uid", S),
        (5, "apiVersion", S),
        (6, "controller", B),
        (7, "blockOwnerDeletion", B),
    ),
    "LabelSelector": _f((1, "matchLabels", MAP_S), (2, "matchExpressions", "LSReq", R)),
    "LSReq": _f((1, "key", S), (2, "operator", S), (3, "values", S, R)),
    # core/v1
    "Namespace": _f((1, "metadata", "ObjectMeta"), (2, "spec", "NamespaceSpec")),
    "NamespaceSpec": _f((1, "finalizers", S, R)),
    "ConfigMap": _f(
        (1, "metadata", "ObjectMeta"),
        (2, "data", MAP_S),
        (3, "binaryData", MAP_B),
        (4, "immutable", B),
    ),
    "Secret": _f(
        (1, "metadata", "ObjectMeta"),
        (2, "data", MAP_B),
        (3, "type", S),
        (4, "stringData", MAP_S),
        (5, "immutable", B),
    ),
    "ServiceAccount": _f(
        (1, "metadata", "ObjectMeta"),
        (2, "secrets", "ObjectReference", R),
        (3, "imagePullSecrets", "LocalObjectReference", R),
        (4, "automountServiceAccountToken", B),
    ),
    "ObjectReference": _f(
        (1, "kind", S), (2, "namespace", S), (3, "name", S), (4, "uid", S), (5, "apiVersion", S)
    ),
    "LocalObjectReference": _f((1, "name", S)),
    "Service": _f((1, "metadata", "ObjectMeta"), (2, "spec", "ServiceSpec")),
    "ServiceSpec": _f(
        (1, "ports", "ServicePort", R),
        (2, "selector", MAP_S),
        (3, "clusterIP", S),
        (4, "type", S),
        (5, "externalIPs", S, R),
        (7, "sessionAffinity", S),
        (10, "externalName", S),
        (11, "externalTrafficPolicy", S),
        (17, "ipFamilyPolicy", S),
        (18, "clusterIPs", S, R),
        (19, "ipFamilies", S, R),
        (22, "internalTrafficPolicy", S),
    ),
    "ServicePort": _f(
        (1, "name", S),
        (2, "protocol", S),
        (3, "port", INT),
        (4, "targetPort", INTSTR),
        (5, "nodePort", INT),
        (6, "appProtocol", S),
    ),
    "ResourceQuota": _f((1, "metadata", "ObjectMeta"), (2, "spec", "ResourceQuotaSpec")),
    "ResourceQuotaSpec": _f((1, "hard", MAP_Q), (2, "scopes", S, R)),
    "Pod": _f((1, "metadata", "ObjectMeta"), (2, "spec", "PodSpec")),
    "PodTemplateSpec": _f((1, "metadata", "ObjectMeta"), (2, "spec", "PodSpec")),
    "PodSpec": _f(
        (1, "volumes", "Volume", R),
        (2, "containers", "Container", R),
        (3, "restartPolicy", S),
        (4, "terminationGracePeriodSeconds", INT),
        (5, "activeDeadlineSeconds", INT),
        (6, "dnsPolicy", S),
        (7, "nodeSelector", MAP_S),
        (8, "serviceAccountName", S),
        (10, "nodeName", S),
        (14, "securityContext", "PodSecurityContext"),
        (15, "imagePullSecrets", "LocalObjectReference", R),
        (16, "hostname", S),
        (17, "subdomain", S),
        (19, "schedulerName", S),
        (20, "initContainers", "Container", R),
        (21, "automountServiceAccountToken", B),
        (22, "tolerations", "Toleration", R),
        (24, "priorityClassName", S),
        (25, "priority", INT),
        (29, "runtimeClassName", S),
        (31, "preemptionPolicy", S),
    ),
    "Container": _f(
        (1, "name", S),
        (2, "image", S),
        (3, "command", S, R),
        (4, "args", S, R),
        (5, "workingDir", S),
        (6, "ports", "ContainerPort", R),
        (7, "env", "EnvVar", R),
        (8, "resources", "ResourceRequirements"),
        (9, "volumeMounts", "VolumeMount", R),
        (13, "terminationMessagePath", S),
        (14, "imagePullPolicy", S),
        (15, "securityContext", "SecurityContext"),
        (16, "stdin", B),
        (17, "stdinOnce", B),
        (18, "tty", B),
        (20, "terminationMessagePolicy", S),
    ),
    "ContainerPort": _f(
        (1, "name", S), (2, "hostPort", INT), (3, "containerPort", INT), (4, "protocol", S)
    ),
    "EnvVar": _f((1, "name", S), (2, "value", S)),
    "ResourceRequirements": _f((1, "limits", MAP_Q), (2, "requests", MAP_Q)),
    "VolumeMount": _f((1, "name", S), (2, "readOnly", B), (3, "mountPath", S), (4, "subPath", S)),
    "Volume": _f((1, "name", S), (2, "", "VolumeSource")),
    "VolumeSource": _f(
        (2, "emptyDir", "EmptyDirVolumeSource"),
        (6, "secret", "SecretVolumeSource"),
        (10, "persistentVolumeClaim", "PVCVolumeSource"),
        (19, "configMap", "ConfigMapVolumeSource"),
    ),
    "EmptyDirVolumeSource": _f((1, "medium", S), (2, "sizeLimit", Q)),
    "SecretVolumeSource": _f((1, "secretName", S), (3, "defaultMode", INT), (4, "optional", B)),
    "ConfigMapVolumeSource": _f(
        (1, "", "LocalObjectReference"), (3, "defaultMode", INT), (4, "optional", B)
    ),
    "PVCVolumeSource": _f((1, "claimName", S), (2, "readOnly", B)),
    "Toleration": _f(
        (1, "key", S),
        (2, "operator", S),
        (3, "value", S),
        (4, "effect", S),
        (5, "tolerationSeconds", INT),
    ),
    "SecurityContext": _f(
        (1, "capabilities", "Capabilities"),
        (2, "privileged", B),
        (4, "runAsUser", INT),
        (5, "runAsNonRoot", B),
        (6, "readOnlyRootFilesystem", B),
        (7, "allowPrivilegeEscalation", B),
        (8, "runAsGroup", INT),
        (11, "seccompProfile", "SeccompProfile"),
    ),
    "PodSecurityContext": _f(
        (2, "runAsUser", INT),
        (3, "runAsNonRoot", B),
        (5, "fsGroup", INT),
        (6, "runAsGroup", INT),
        (10, "seccompProfile", "SeccompProfile"),
    ),
    "Capabilities": _f((1, "add", S, R), (2, "drop", S, R)),
    "SeccompProfile": _f((1, "type", S), (2, "localhostProfile", S)),
    # apps/v1
    "Deployment": _f((1, "metadata", "ObjectMeta"), (2, "spec", "DeploymentSpec")),
    "DeploymentSpec": _f(
        (1, "replicas", INT),
        (2, "selector", "LabelSelector"),
        (3, "template", "PodTemplateSpec"),
        (4, "strategy", "DeploymentStrategy"),
        (5, "minReadySeconds", INT),
        (6, "revisionHistoryLimit", INT),
        (7, "paused", B),
        (9, "progressDeadlineSeconds", INT),
    ),
    "DeploymentStrategy": _f((1, "type", S), (2, "rollingUpdate", "RollingUpdateDeployment")),
    "RollingUpdateDeployment": _f((1, "maxUnavailable", INTSTR), (2, "maxSurge", INTSTR)),
    # batch/v1
    "Job": _f((1, "metadata", "ObjectMeta"), (2, "spec", "JobSpec")),
    "JobSpec": _f(
        (1, "parallelism", INT),
        (2, "completions", INT),
        (3, "activeDeadlineSeconds", INT),
        (4, "selector", "LabelSelector"),
        (5, "manualSelector", B),
        (6, "template", "PodTemplateSpec"),
        (7, "backoffLimit", INT),
        (8, "ttlSecondsAfterFinished", INT),
        (9, "completionMode", S),
        (10, "suspend", B),
    ),
    "CronJob": _f((1, "metadata", "ObjectMeta"), (2, "spec", "CronJobSpec")),
    "CronJobSpec": _f(
        (1, "schedule", S),
        (2, "startingDeadlineSeconds", INT),
        (3, "concurrencyPolicy", S),
        (4, "suspend", B),
        (5, "jobTemplate", "JobTemplateSpec"),
        (6, "successfulJobsHistoryLimit", INT),
        (7, "failedJobsHistoryLimit", INT),
        (8, "timeZone", S),
    ),
    "JobTemplateSpec": _f((1, "metadata", "ObjectMeta"), (2, "spec", "JobSpec")),
    # scheduling/v1, coordination/v1, policy/v1
    "PriorityClass": _f(
        (1, "metadata", "ObjectMeta"),
        (2, "value", INT),
        (3, "globalDefault", B),
        (4, "description", S),
        (5, "preemptionPolicy", S),
    ),
    "Lease": _f((1, "metadata", "ObjectMeta"), (2, "spec", "LeaseSpec")),
    "LeaseSpec": _f(
        (1, "holderIdentity", S),
        (2, "leaseDurationSeconds", INT),
        (3, "acquireTime", MICRO),
        (4, "renewTime", MICRO),
        (5, "leaseTransitions", INT),
    ),
    "Eviction": _f((1, "metadata", "ObjectMeta"), (2, "deleteOptions", "DeleteOptions")),
    "DeleteOptions": _f(
        (1, "gracePeriodSeconds", INT),
        (3, "orphanDependents", B),
        (4, "propagationPolicy", S),
        (5, "dryRun", S, R),
    ),
}


# --- the wire format ------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field of one message, in order."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, wire, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            out.append((number, wire, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            out.append((number, wire, data[pos : pos + 8]))
            pos += 8
        elif wire == 5:
            out.append((number, wire, data[pos : pos + 4]))
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _raw(value: int | bytes) -> bytes:
    return value if isinstance(value, bytes) else b""


def _int(value: int | bytes | None) -> int:
    return value if isinstance(value, int) else 0


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _time(raw: bytes, micro: bool) -> str | None:
    fields = {n: v for n, _, v in _fields(raw)}
    seconds, nanos = _signed(_int(fields.get(1))), _int(fields.get(2))
    if not seconds and not nanos:
        return None
    moment = datetime.fromtimestamp(seconds + nanos / 1e9, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    fields = {n: v for n, _, v in _fields(raw)}
    key, value = fields.get(1, b""), fields.get(2, b"")
    return _text(key), value if isinstance(value, bytes) else str(value).encode()


def _value(kind: str, value: int | bytes) -> Any:
    if kind == S:
        return _text(value)
    if kind == INT:
        return _signed(_int(value))
    if kind == B:
        return bool(value)
    if kind == BYTES:
        return base64.b64encode(_raw(value)).decode()
    if kind == Q:
        return _text({n: v for n, _, v in _fields(_raw(value))}.get(1, b""))
    if kind == INTSTR:
        fields = {n: v for n, _, v in _fields(_raw(value))}
        if _int(fields.get(1)) == 1:
            return _text(fields.get(3, b""))
        return _signed(_int(fields.get(2)))
    if kind in (TIME, MICRO):
        return _time(_raw(value), kind == MICRO)
    return _message(kind, _raw(value))


def _empty(value: Any) -> bool:
    return value in ("", 0, None, False, {}, [])


def _message(name: str, raw: bytes) -> dict[str, Any]:
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, _wire, value in _fields(raw):
        field = schema.get(number)
        if field is None:
            continue  # a field this table does not know: skipped, as protobuf readers do
        json_name, kind, repeated = field
        if kind.startswith("map:"):
            entries = out.setdefault(json_name, {})
            key, raw_value = _map_entry(_raw(value))
            entries[key] = _value(kind.removeprefix("map:"), raw_value)
            continue
        decoded = _value(kind, value)
        if json_name == "":
            out.update(decoded)
        elif repeated:
            out.setdefault(json_name, []).append(decoded)
        elif not _empty(decoded):
            out[json_name] = decoded
    return {k: v for k, v in out.items() if not _empty(v) or k in ("data", "stringData")}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object (envelope included)."""
    if not body.startswith(MAGIC):
        raise _unsupported("the body does not start with the protobuf envelope's magic number")
    try:
        envelope = {n: v for n, _, v in _fields(body[len(MAGIC) :])}
        type_meta = {n: _text(v) for n, _, v in _fields(_raw(envelope.get(1, b"")))}
        api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        if kind not in MESSAGES:
            raise _unsupported(f"protobuf bodies of kind {kind!r} are not understood")
        obj = _message(kind, _raw(envelope.get(2, b"")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"cannot decode the protobuf body: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}


def _unsupported(why: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"{why}; send application/json, application/yaml or application/apply-patch+yaml",
    )
