"""Tenancy policy (pure): what a SpeculativeDeployment may make the operator do."""

from __future__ import annotations

import pytest

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.policy import TenancyPolicy, check_policy, image_allowed, normalize_image


def cr(**spec_extra):
    spec = {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "Qwen/Qwen3.6-27B"},
            "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"}, "gpu": {"type": "b300", "count": 1}}
    for k, v in spec_extra.items():
        spec[k] = {**spec.get(k, {}), **v} if isinstance(v, dict) else v
    return SpeculativeDeployment.model_validate({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                                                 "metadata": {"name": "x"}, "spec": spec})


def codes(findings):
    return [(f.code, f.path) for f in findings]


def test_defaults_allow_an_example_and_refuse_the_attacks():
    p = TenancyPolicy()
    assert check_policy(cr().spec, p) == []
    attack = cr(engine={"image": "docker.io/attacker/anything:latest"}, pod={"serviceAccountName": "namespace-admin"},
                target={"tokenSecretRef": {"name": "database-credentials", "key": "password"}})
    got = check_policy(attack.spec, p)
    assert codes(got) == [("PolicyImageNotAllowed", "spec.engine.image"),
                          ("PolicyServiceAccountNotAllowed", "spec.pod.serviceAccountName"),
                          ("PolicyTokenSecretNotAllowed", "spec.target.tokenSecretRef.name")]
    for f in got:  # each names the policy value and the setting an admin changes
        assert "allowed" in f.message and ("policy." in f.message or "hub.tokenSecrets" in f.message)


@pytest.mark.parametrize("image, ok", [
    ("ghcr.io/specdeploy/runtime:vllm-0.33.0", True),
    ("ghcr.io/specdeploy/runtime@sha256:" + "a" * 64, True),
    ("ghcr.io/specdeploy/runtime-evil:1", False),
    ("ghcr.io/specdeploy/runtime2", False),
    ("ghcr.io/specdeploy", False),
    ("attacker/anything:latest", False),
    ("ubuntu", False),
])
def test_image_prefix_boundary(image, ok):
    assert image_allowed(image, ("ghcr.io/specdeploy/runtime",)) is ok


def test_short_names_are_normalised_like_the_runtime_does():
    assert normalize_image("ubuntu:22.04") == "docker.io/library/ubuntu:22.04"
    assert normalize_image("me/img") == "docker.io/me/img"
    assert image_allowed("me/img:1", ("docker.io/me",))


def test_allowed_values_pass():
    p = TenancyPolicy(image_prefixes=("registry.example.com/ml",), engine_service_account="specdeploy-engine",
                      service_accounts=("team-a-engine",), token_secrets=("hf-token",), pvcs=("models",))
    ok = cr(engine={"image": "registry.example.com/ml/vllm:1"}, pod={"serviceAccountName": "team-a-engine"},
            target={"tokenSecretRef": {"name": "hf-token"}, "pvc": {"claimName": "models"}})
    assert check_policy(ok.spec, p) == []
    assert check_policy(cr(pod={"serviceAccountName": "specdeploy-engine"}).spec, p) == []


def test_claims_by_name_or_label():
    spec = cr(target={"model": "qwen", "pvc": {"claimName": "other"}}).spec
    assert codes(check_policy(spec, TenancyPolicy())) == [("PolicyClaimNotAllowed", "spec.target.pvc.claimName")]
    labelled = TenancyPolicy(pvc_label=("specdeploy.io/models", "true"))
    assert check_policy(spec, labelled) == []  # undecidable without the claim: left to the reconciler
    assert check_policy(spec, labelled, {"other": {"specdeploy.io/models": "true"}}) == []
    [f] = check_policy(spec, labelled, {"other": {}})
    assert "specdeploy.io/models=true" in f.message
    [f] = check_policy(spec, labelled, {"other": None})  # the claim does not exist
    assert f.code == "PolicyClaimNotAllowed"


def test_env_round_trip():
    p = TenancyPolicy(image_prefixes=("a/b",), engine_service_account="e", service_accounts=("s",), token_secrets=("t",),
                      pvcs=("m",), pvc_label=("k", "v"))
    assert TenancyPolicy.from_env(p.to_env()) == p
    assert TenancyPolicy.from_env(None) == TenancyPolicy()
