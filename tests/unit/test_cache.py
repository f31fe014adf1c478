"""spec.cache (pure): the cache plan from the spec or the administrator's default, the tenancy policy
for cache claims and node paths, the rendered volume, and the status lines saying where weights come from."""

from __future__ import annotations

import pydantic
import pytest

from testkit import pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.cache import CacheError, CachePlan, plan_cache, weight_source
from specdeploy.core.podsecurity import RUNTIME_UID
from specdeploy.core.policy import TenancyPolicy, check_policy
from specdeploy.core.render import HF_HOME, RenderError, render

LISTED = TenancyPolicy(pvcs=("hf-cache",), cache_node_paths=(("nvme", "/mnt/nvme/hf"),))


def cr(**spec_extra) -> SpeculativeDeployment:
    spec = {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "Qwen/Qwen3.6-27B"},
            "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"}, "gpu": {"type": "b300"}, **spec_extra}
    return SpeculativeDeployment.model_validate({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                                                 "metadata": {"name": "q", "namespace": "m"}, "spec": spec})


def pod_spec(r) -> dict:
    return r.by_kind("Deployment")[0]["spec"]["template"]["spec"]


@pytest.mark.parametrize("cache,policy,want", [
    (None, None, CachePlan("emptyDir")),
    (None, TenancyPolicy(default_cache=("pvc", "shared")), CachePlan("pvc", claim="shared", from_default=True)),
    (None, TenancyPolicy(default_cache=("nodePath", "nvme"), cache_node_paths=(("nvme", "/mnt/nvme/hf"),)),
     CachePlan("nodePath", node_path_name="nvme", host_path="/mnt/nvme/hf", from_default=True)),
    ({"type": "emptyDir"}, TenancyPolicy(default_cache=("pvc", "shared")), CachePlan("emptyDir")),
    ({"type": "pvc", "pvc": {"claimName": "mine"}}, TenancyPolicy(default_cache=("pvc", "shared")),
     CachePlan("pvc", claim="mine")),
    ({"type": "nodePath", "nodePath": "nvme"}, LISTED, CachePlan("nodePath", node_path_name="nvme", host_path="/mnt/nvme/hf")),
])
def test_plan(cache, policy, want):
    extra = {"cache": cache} if cache else {}
    assert plan_cache(cr(**extra).spec, policy) == want


def test_an_unlisted_node_path_is_refused_by_policy_and_by_render():
    spec = cr(cache={"type": "nodePath", "nodePath": "etc"}).spec
    (f,) = check_policy(spec, LISTED)
    assert f.code == "PolicyCacheNodePathNotAllowed" and f.path == "spec.cache.nodePath"
    assert "'etc'" in f.message and "listed: nvme" in f.message and "cache.nodePaths" in f.message
    with pytest.raises(CacheError):
        plan_cache(spec, LISTED)
    d, t = pair("qwen3.6-27b")
    with pytest.raises(RenderError) as e:
        render(cr(cache={"type": "nodePath", "nodePath": "etc"}), t, d)
    assert [x.code for x in e.value.findings if x.severity.value == "error"] == ["PolicyCacheNodePathNotAllowed"]


def test_a_cache_claim_is_a_claim_under_the_policy():
    spec = cr(cache={"type": "pvc", "pvc": {"claimName": "someone-elses"}}).spec
    (f,) = check_policy(spec, LISTED)
    assert f.code == "PolicyClaimNotAllowed" and f.path == "spec.cache.pvc.claimName"
    assert check_policy(cr(cache={"type": "pvc", "pvc": {"claimName": "hf-cache"}}).spec, LISTED) == []


@pytest.mark.parametrize("cache,message", [
    ({"type": "pvc"}, "cache.pvc is required with type pvc"),
    ({"type": "emptyDir", "pvc": {"claimName": "x"}}, "cache.pvc is required with type pvc and only allowed with it"),
    ({"type": "nodePath"}, "cache.nodePath is required with type nodePath"),
    ({"type": "nodePath", "nodePath": "/etc"}, "String should match pattern"),
    ({"type": "hostPath", "path": "/"}, "type"),
])
def test_bad_cache_specs(cache, message):
    with pytest.raises(pydantic.ValidationError) as e:
        cr(cache=cache)
    assert message in str(e.value)


def test_rendered_volumes():
    d, t = pair("qwen3.6-27b")
    plain = pod_spec(render(cr(), t, d))
    assert {"name": "hf-cache", "emptyDir": {}} in plain["volumes"]
    pvc = pod_spec(render(cr(cache={"type": "pvc", "pvc": {"claimName": "hf-cache"}}), t, d, policy=LISTED))
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}} in pvc["volumes"]
    assert pvc["securityContext"]["fsGroup"] == RUNTIME_UID  # the claim is writable by the runtime user
    pre = pvc["initContainers"][0]
    assert {"name": "hf-cache", "mountPath": HF_HOME} in pre["volumeMounts"]
    assert {"name": "HF_HOME", "value": HF_HOME} in pre["env"]
    node = pod_spec(render(cr(cache={"type": "nodePath", "nodePath": "nvme"}), t, d, policy=LISTED))
    assert {"name": "hf-cache", "hostPath": {"path": "/mnt/nvme/hf", "type": "DirectoryOrCreate"}} in node["volumes"]
    # only the administrator's listed path ever becomes a hostPath
    assert [v for v in node["volumes"] if "hostPath" in v] == [
        {"name": "hf-cache", "hostPath": {"path": "/mnt/nvme/hf", "type": "DirectoryOrCreate"}}]


def test_models_on_claims_are_not_prefetched():
    d, t = pair("qwen3.6-27b")
    both = cr(cache={"type": "pvc", "pvc": {"claimName": "hf-cache"}},
              target={"model": "qwen", "pvc": {"claimName": "hf-cache"}},
              drafter={"model": "drafter", "pvc": {"claimName": "hf-cache"}})
    r = render(both, t, d, policy=LISTED)
    assert "--weights-cache" not in pod_spec(r)["initContainers"][0]["args"]
    assert "HF_HUB_OFFLINE" not in r.engine_config.env


def test_weight_sources():
    c = cr(cache={"type": "pvc", "pvc": {"claimName": "hf-cache"}}, target={"model": "Qwen/Qwen3.6-27B", "revision": "v1"})
    plan = plan_cache(c.spec, LISTED)
    assert weight_source(c.spec.target, "target", plan).startswith(
        "hub Qwen/Qwen3.6-27B@v1, downloaded once into the pvc/hf-cache cache by the preflight")
    assert "downloaded by every engine pod at start (emptyDir cache" in weight_source(c.spec.target, "target", CachePlan("emptyDir"))
    assert weight_source(c.spec.drafter, "drafter", plan, "img:1") == "baked into the image img:1 (never downloaded)"
    on_claim = cr(target={"model": "qwen", "pvc": {"claimName": "models"}}).spec.target
    assert weight_source(on_claim, "target", plan) == "claim models, path qwen (never downloaded)"


def test_policy_round_trips_through_the_environment():
    p = TenancyPolicy(cache_node_paths=(("nvme", "/mnt/nvme/hf"),), default_cache=("nodePath", "nvme"))
    assert TenancyPolicy.from_env(p.to_env()) == p
