"""The one gate before any pod (core/render/gate.py, issue 37): render refuses what the tenancy policy refuses
before building anything; a SpeculativeBenchmark's policy covers its deployment and each method drafter (pure)."""

from __future__ import annotations

import pytest

from testkit import pair
from specdeploy.api.benchmark import SpeculativeBenchmarkSpec
from specdeploy.core.bench.plan import Variant
from specdeploy.core.bench.render import BenchOwner, render_variant
from specdeploy.core.policy import TenancyPolicy
from specdeploy.core.render import (Admitted, PolicyRefused, admit, benchmark_claims, benchmark_refusals, render,
                                    with_drafter)
from test_render import make_cr

POLICY = TenancyPolicy(token_secrets=("hf-token",), pvcs=("models",))
OWNER = BenchOwner("sweep", "models", "bench-uid")

ATTACKS = [
    ({"engine": {"image": "evil.io/miner:1"}}, "PolicyImageNotAllowed", "spec.engine.image"),
    ({"pod": {"serviceAccountName": "admin"}}, "PolicyServiceAccountNotAllowed", "spec.pod.serviceAccountName"),
    ({"pod": {"tolerations": [{"operator": "Exists"}]}}, "PolicyTolerationNotAllowed", "spec.pod.tolerations[0].key"),
    ({"pod": {"priorityClassName": "system-cluster-critical"}}, "PolicyPriorityClassNotAllowed",
     "spec.pod.priorityClassName"),
    ({"target": {"trustRemoteCode": True}}, "PolicyTrustRemoteCodeNotAllowed", "spec.target.trustRemoteCode"),
    ({"drafter": {"tokenSecretRef": {"name": "prod-db", "key": "token"}}}, "PolicyTokenSecretNotAllowed",
     "spec.drafter.tokenSecretRef.name"),
    ({"drafter": {"tokenSecretRef": {"name": "hf-token", "key": "password"}}}, "PolicyTokenSecretKeyNotAllowed",
     "spec.drafter.tokenSecretRef.key"),
    ({"target": {"pvc": {"claimName": "other-team"}}}, "PolicyClaimNotAllowed", "spec.target.pvc.claimName"),
]
IDS = [a[1] for a in ATTACKS]


def _cr(change: dict):
    return make_cr("vllm", "0.33.0", **{k: dict(v) for k, v in change.items()})


@pytest.mark.parametrize("change,code,path", ATTACKS, ids=IDS)
def test_render_with_a_policy_refuses_before_building_anything(change, code, path):
    d, t = pair("qwen3.6-27b")
    with pytest.raises(PolicyRefused) as e:
        render(_cr(change), t, d, policy=POLICY)
    assert [(f.code, f.path) for f in e.value.findings] == [(code, path)]
    with pytest.raises(PolicyRefused):  # a benchmark variant of it: the same gate (render_variant renders)
        render_variant(_cr(change), t, d, OWNER, Variant("baseline", False), policy=POLICY)
    with pytest.raises(PolicyRefused):  # the resolver's and the inspector's gate
        admit(_cr(change), POLICY)


def test_an_admitted_spec_renders():
    d, t = pair("qwen3.6-27b")
    cr = make_cr("vllm", "0.33.0", drafter={"tokenSecretRef": {"name": "hf-token", "key": "token"}})
    assert render(cr, t, d, policy=POLICY).objects
    got = admit(cr, POLICY)
    assert isinstance(got, Admitted) and got.cr is cr


def test_a_method_variants_drafter_is_rendered_only_through_the_gate():
    """A method variant's drafter (spec.matrix.methods[].drafter) in its pod: refused as the deployment's would be."""
    d, t = pair("qwen3.6-27b")
    cr = make_cr("vllm", "0.33.0")
    bad = Variant("eagle3", True, method="eagle3", method_speculation={"method": "eagle3"},
                  drafter={"model": "z/d", "tokenSecretRef": {"name": "prod-db", "key": "token"}})
    with pytest.raises(PolicyRefused) as e:
        render_variant(cr, t, d, OWNER, bad, policy=POLICY)
    assert [(f.code, f.path) for f in e.value.findings] == [("PolicyTokenSecretNotAllowed",
                                                            "spec.drafter.tokenSecretRef.name")]


def _bench(methods: list[dict]) -> SpeculativeBenchmarkSpec:
    return SpeculativeBenchmarkSpec.model_validate({"deploymentRef": {"name": "qwen36"},
                                                    "matrix": {"contexts": [64], "concurrency": [1],
                                                               "methods": methods}})


def test_benchmark_refusals_name_the_deployment_and_each_method_drafter():
    dep = _cr({"engine": {"image": "evil.io/miner:1"}})
    bench = _bench([{"method": "ngram"},
                    {"method": "eagle3", "drafter": {"model": "a/b", "tokenSecretRef": {"name": "prod-db"}}},
                    {"method": "eagle3", "drafter": {"model": "c", "pvc": {"claimName": "models"}}},
                    {"method": "draft_model", "drafter": {"model": "c", "pvc": {"claimName": "other"}}}])
    got = [(f.code, f.path) for f in benchmark_refusals(bench, dep, POLICY)]
    assert got == [("PolicyImageNotAllowed", "SpeculativeDeployment qwen36 spec.engine.image"),
                   ("PolicyTokenSecretNotAllowed", "spec.matrix.methods[1].drafter.tokenSecretRef.name"),
                   ("PolicyClaimNotAllowed", "spec.matrix.methods[3].drafter.pvc.claimName")]
    assert benchmark_refusals(_bench([{"method": "ngram"}]), make_cr("vllm", "0.33.0"), POLICY) == []
    # the variant's spec: the deployment's own drafter replaced, nothing else changed
    v = with_drafter(dep, bench.matrix.methods[1].drafter)
    assert v.spec.drafter.model == "a/b" and dep.spec.drafter.model == "z-lab/Qwen3.6-27B-DFlash"
    assert v.spec.engine.image == dep.spec.engine.image


def test_the_claim_label_rule_reads_the_deployments_and_the_method_drafters_claims():
    policy = TenancyPolicy(pvcs=("models",), pvc_label=("specdeploy.io/models", "true"))
    dep = _cr({"target": {"pvc": {"claimName": "team-target"}}})
    bench = _bench([{"method": "eagle3", "drafter": {"model": "c", "pvc": {"claimName": "team-drafter"}}},
                    {"method": "eagle3", "drafter": {"model": "c", "pvc": {"claimName": "models"}}}])
    assert benchmark_claims(bench, dep, policy) == ["team-target", "team-drafter"]
    labelled = {"specdeploy.io/models": "true"}
    assert benchmark_refusals(bench, dep, policy, {"team-target": labelled, "team-drafter": labelled}) == []
    got = benchmark_refusals(bench, dep, policy, {"team-target": labelled, "team-drafter": {"x": "y"}})
    assert [(f.code, f.path) for f in got] == [("PolicyClaimNotAllowed", "spec.matrix.methods[0].drafter.pvc.claimName")]
    # undecidable without the labels (the webhook): left to the controller, which reads them
    assert benchmark_refusals(bench, dep, policy) == []
