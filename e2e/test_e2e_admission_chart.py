"""The chart's admission path on the embedded cluster: `helm template charts/specdeploy | kubectl
apply -f -`, the operator run with the rendered Deployment's own args (the harness plays the
kubelet and the endpoints controller), then every CR of the negative set refused by `kubectl apply`
with the message a real API server + our webhook give: schema (OpenAPI), CEL
(x-kubernetes-validations) and webhook (drafter/target check) refusals.

Embedded only: on a real cluster the operator runs as the chart's pod from its image.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest

from e2e_support import (HELM3 as HELM, QWEN, Cluster, apply_chart, configmap, embedded_only, example_cr, example_doc,
                         new_cluster, stop_cluster, wait_for)

RELEASE_NS = "specdeploy-system"

pytestmark = [embedded_only, pytest.mark.skipif(not HELM.exists(), reason="helm3 is installed by .ci/setup-test")]


@pytest.fixture(scope="module")
def chart_cluster():
    c = new_cluster("admission-chart", operator=False)
    try:
        apply_chart(c, RELEASE_NS)
        yield c
    finally:
        stop_cluster(c)


def _apply(c: Cluster, doc: dict) -> subprocess.CompletedProcess:
    return c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(doc), check=False)


def _variant(name: str, change) -> dict:
    doc = example_cr(QWEN, name)
    change(doc["spec"])
    return doc


def test_no_operator_means_failed_webhook_call(chart_cluster):
    """failurePolicy Fail and no endpoints: refused as on a cluster whose operator is down."""
    p = _apply(chart_cluster, example_cr(QWEN, "early"))
    assert p.returncode != 0
    assert 'failed calling webhook "mutate.specdeploy.io"' in p.stderr
    assert 'no endpoints available for service "specdeploy-webhook"' in p.stderr


NEGATIVE = [
    ("block-one", lambda s: s.setdefault("speculation", {}).update(blockSize=1),
     'The SpeculativeDeployment "block-one" is invalid: spec.speculation.blockSize: Invalid value: 1: '
     "spec.speculation.blockSize in body should be greater than or equal to 2"),
    ("window-below-block", lambda s: s.setdefault("speculation", {}).update(blockSize=16, draftWindow=8),
     'The SpeculativeDeployment "window-below-block" is invalid: spec.speculation.draftWindow: '
     'Invalid value: "object": draftWindow must be >= blockSize'),
    ("gpus-per-node", lambda s: (s["gpu"].update(count=3), s.update(nodes=2)),
     'The SpeculativeDeployment "gpus-per-node" is invalid: spec.gpu.count: Invalid value: "object": '
     "gpu.count (GPUs per replica) must be a multiple of nodes"),
    ("ddtree-on-dflash", lambda s: s.setdefault("speculation", {}).update(method="dflash", ddtree={"budget": 8}),
     'The SpeculativeDeployment "ddtree-on-dflash" is invalid: spec.speculation.ddtree: Invalid value: "object": '
     "ddtree settings apply only to method ddtree"),
    ("bad-engine", lambda s: s["engine"].update(name="tgi"),
     'The SpeculativeDeployment "bad-engine" is invalid: spec.engine.name: Unsupported value: "tgi": '
     'supported values: "sglang", "vllm"'),
]


def test_operator_webhooks_and_the_negative_set(chart_cluster):
    c = chart_cluster
    c.play_operator_pod(RELEASE_NS, "specdeploy")
    wait_for(lambda: c.get_json("validatingwebhookconfiguration", "specdeploy")["webhooks"][0]
             ["clientConfig"].get("caBundle"), 60, "the operator to publish its caBundle")
    wait_for(lambda: c.get_json("mutatingwebhookconfiguration", "specdeploy")["webhooks"][0]
             ["clientConfig"].get("caBundle"), 60, "the operator to publish its caBundle (mutating)")
    target, drafter = example_doc(QWEN, "target"), example_doc(QWEN, "drafter")
    for doc in (configmap("qwen36-27b-target-config", target), configmap("qwen36-27b-drafter-config", drafter)):
        c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(doc))

    ok = _apply(c, example_cr(QWEN, "good"))
    assert ok.returncode == 0, ok.stderr
    applied = c.get_json("specdeploy", "good", "-n", c.namespace)
    # Defaults: the CRD's (schema) and the mutating webhook's.
    assert applied["spec"]["replicas"] == 1 and applied["spec"]["nodes"] == 1

    for name, change, message in NEGATIVE:
        p = _apply(c, _variant(name, change))
        assert p.returncode != 0, f"{name} was accepted"
        assert p.stderr.strip() == message, p.stderr

    # The webhook: a drafter that does not fit its target (the drafter's config read as the target's).
    wrong = example_cr(QWEN, "wrong-pair", target_cm="qwen36-27b-drafter-config")
    p = _apply(c, wrong)
    assert p.returncode != 0
    assert p.stderr.startswith('The SpeculativeDeployment "wrong-pair" is invalid:'), p.stderr
    assert "outside the target's" in p.stderr or "differs from the target" in p.stderr, p.stderr
    assert c.kubectl("get", "specdeploy", "wrong-pair", "-n", c.namespace, check=False).returncode != 0

    # Strict field validation (kubectl's default): an unknown field.
    unknown = copy.deepcopy(example_cr(QWEN, "typo"))
    unknown["spec"]["replica"] = 2
    p = _apply(c, unknown)
    assert p.returncode != 0
    assert 'strict decoding error: unknown field "spec.replica"' in p.stderr, p.stderr

    # A SpeculativeBenchmark: the schema's defaults and CEL rules, and the webhook's check of what they cannot say
    bench = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "metadata": {"name": "sweep"},
             "spec": {"deploymentRef": {"name": "good"}, "matrix": {"contexts": [64], "concurrency": [1, 4]}}}
    assert _apply(c, bench).returncode == 0
    assert c.get_json("specbench", "sweep", "-n", c.namespace)["spec"]["matrix"]["promptsPerPoint"] == 16
    dup = copy.deepcopy(bench)
    dup["metadata"]["name"] = "dup"
    dup["spec"]["matrix"]["concurrency"] = [4, 4]
    p = _apply(c, dup)
    assert p.returncode != 0 and "concurrency lists a value twice: list each value once" in p.stderr, p.stderr
    both = copy.deepcopy(bench)
    both["metadata"]["name"] = "both"
    both["spec"]["prompts"] = {"bundled": "code", "generated": {"seed": 1}}
    p = _apply(c, both)
    assert p.returncode != 0 and "set exactly one of prompts.bundled" in p.stderr, p.stderr
