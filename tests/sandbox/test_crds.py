"""CustomResourceDefinitions, as a platform engineer installs and uses them with a real
kubectl: the CRD is applied, established and listed; its kind is in discovery, in
``kubectl explain``, in tables with its printer columns; its objects are pruned, defaulted
and validated against its schema with the API server's words; deleting the CRD takes its
objects and its endpoints with it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.sandbox.conftest import rows

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gpuleases.example.gpu-portal.dev
spec:
  group: example.gpu-portal.dev
  scope: Namespaced
  names:
    plural: gpuleases
    singular: gpulease
    kind: GpuLease
    shortNames: [gl]
    categories: [gpu]
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: GPUs
      type: integer
      jsonPath: .spec.gpus
    - name: Product
      type: string
      jsonPath: .spec.product
    - name: Granted
      type: string
      jsonPath: .status.conditions[?(@.type=="Granted")].status
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        description: A lease on GPUs, to try the sandbox's CRD support.
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            description: What is leased.
            required: [gpus]
            properties:
              gpus:
                type: integer
                minimum: 1
                description: How many GPUs.
              product:
                type: string
                default: NVIDIA-A100-SXM4-80GB
              sharing:
                type: string
                enum: [exclusive, mig, shared]
              quota:
                x-kubernetes-int-or-string: true
                anyOf: [{type: integer}, {type: string}]
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"""

LEASE = """
apiVersion: example.gpu-portal.dev/v1alpha1
kind: GpuLease
metadata:
  name: {name}
spec:
  gpus: {gpus}
"""


@pytest.fixture(scope="module")
def crd(kubectl):  # type: ignore[no-untyped-def]
    out = kubectl("apply", "-f", "-", stdin=CRD)
    assert "customresourcedefinition.apiextensions.k8s.io/gpuleases.example.gpu-portal.dev" in out
    yield
    kubectl("delete", "crd", "gpuleases.example.gpu-portal.dev", "--ignore-not-found")


def test_an_applied_crd_is_established_and_its_kind_served(kubectl, crd) -> None:  # type: ignore[no-untyped-def]
    # The CRD is listed and established, as `kubectl wait` expects
    out = kubectl("wait", "--for=condition=Established", "crd/gpuleases.example.gpu-portal.dev")
    assert "condition met" in out
    assert rows(kubectl("get", "crd"))[0] == ["NAME", "CREATED AT"]
    # Its kind is in discovery, by plural, short name and category
    resources = kubectl("api-resources", "--api-group=example.gpu-portal.dev")
    assert rows(resources)[1][:4] == ["gpuleases", "gl", "example.gpu-portal.dev/v1alpha1", "true"]
    # And kubectl explain reads its schema
    explained = kubectl("explain", "gpulease.spec.gpus")
    assert "FIELD: gpus <integer>" in explained and "How many GPUs." in explained


def test_custom_objects_print_the_crds_columns_and_are_defaulted(kubectl, crd, namespace) -> None:  # type: ignore[no-untyped-def]
    kubectl("apply", "-n", namespace, "-f", "-", stdin=LEASE.format(name="four", gpus=4))
    # The default for a field left out is written
    stored = json.loads(kubectl("get", "-n", namespace, "gl", "four", "-o", "json"))
    assert stored["spec"] == {"gpus": 4, "product": "NVIDIA-A100-SXM4-80GB"}
    assert stored["metadata"]["generation"] == 1
    # The status subresource takes a condition; the table shows it, found by its filter
    patch = {"status": {"conditions": [{"type": "Granted", "status": "True"}]}}
    kubectl(
        "patch", "-n", namespace, "gpulease", "four", "--subresource=status",
        "--type=merge", "-p", json.dumps(patch),
    )  # fmt: skip
    table = rows(kubectl("get", "-n", namespace, "gpuleases"))
    assert table[0] == ["NAME", "GPUS", "PRODUCT", "GRANTED", "AGE"]
    assert table[1][:4] == ["four", "4", "NVIDIA-A100-SXM4-80GB", "True"]
    # And the category lists it beside nothing else
    assert [row[0] for row in rows(kubectl("get", "-n", namespace, "gpu"))] == ["NAME", "four"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            "gpus: 0",
            "spec.gpus: Invalid value: 0: spec.gpus in body should be greater than or equal to 1",
        ),
        (
            'gpus: "two"',
            'spec.gpus: Invalid value: "string": spec.gpus in body must be of type integer: '
            '"string"',
        ),
        (
            "gpus: 1\n  sharing: half",
            'spec.sharing: Unsupported value: "half": supported values: "exclusive", "mig", '
            '"shared"',
        ),
        ("product: x", "spec.gpus: Required value"),
        (
            "gpus: 1\n  quota: [1]",
            'spec.quota: Invalid value: "array": spec.quota in body must be of type '
            'integer-or-string: "array"',
        ),
    ],
)
def test_a_custom_object_is_checked_against_its_schema(
    kubectl, crd, namespace, body, words
) -> None:  # type: ignore[no-untyped-def]
    manifest = LEASE.format(name="bad", gpus=1).replace("gpus: 1", body)
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest, check=False)
    assert 'The GpuLease "bad" is invalid' in out and words in out


def test_an_unknown_field_is_refused_by_kubectl_apply_and_pruned_otherwise(
    kubectl, crd, namespace
) -> None:  # type: ignore[no-untyped-def]
    manifest = LEASE.format(name="typo", gpus=2) + "  gpuz: 3\n"
    out = kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest, check=False)
    assert 'unknown field "spec.gpuz"' in out
    kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", stdin=manifest)
    stored: dict[str, Any] = json.loads(kubectl("get", "-n", namespace, "gl", "typo", "-o", "json"))
    assert "gpuz" not in stored["spec"]


def test_deleting_the_crd_takes_its_objects_and_endpoints(kubectl, namespace) -> None:  # type: ignore[no-untyped-def]
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=CRD.replace("gpuleases.example", "gpuleases.other").replace(
            "group: example", "group: other"
        ),
    )
    kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=LEASE.format(name="gone", gpus=1).replace("example.", "other."),
    )
    kubectl("delete", "crd", "gpuleases.other.gpu-portal.dev")
    time.sleep(0.2)
    out = kubectl("get", "-n", namespace, "gpuleases.other.gpu-portal.dev", check=False)
    assert "the server doesn't have a resource type" in out
