"""Issue 37 item 6: node cache paths bound to namespaces (a spec elsewhere is refused; the default cache falls back
to emptyDir there), and model paths of the engine pod refused at admission unless they lie in the namespace's own
storage (a claim, or the hub cache when it is a claim or a node path bound to this namespace by name)."""

from __future__ import annotations

import argparse

import pytest

from testkit import pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.cache import CacheError, CachePlan, plan_cache
from specdeploy.core.policy import TenancyPolicy, check_policy, is_model_path
from specdeploy.core.render import HF_HOME, render

SNAP = f"{HF_HOME}/hub/models--team-a--private/snapshots/0123456789abcdef0123456789abcdef01234567"
NODE = (("nvme", "/mnt/nvme/hf"), ("shared", "/mnt/shared/hf"), ("all", "/mnt/all/hf"))
BOUND = TenancyPolicy(pvcs=("hf-cache", "models"), cache_node_paths=NODE,
                      cache_node_path_namespaces=(("all", ("*",)), ("nvme", ("team-a", "team-c"))))


def cr(namespace: str | None = "team-a", **spec_extra) -> SpeculativeDeployment:
    spec = {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "Qwen/Qwen3.6-27B"},
            "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"}, "gpu": {"type": "b300"}, **spec_extra}
    meta = {"name": "q", **({"namespace": namespace} if namespace else {})}
    return SpeculativeDeployment.model_validate({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                                                 "metadata": meta, "spec": spec})


def codes(findings):
    return [(f.code, f.path) for f in findings]


# ----------------------------------------------------------------- node paths bound to namespaces


@pytest.mark.parametrize("name, namespace, ok", [
    ("nvme", "team-a", True), ("nvme", "team-c", True), ("nvme", "team-b", False), ("nvme", None, False),
    ("shared", "team-b", True),  # unbound (the chart's plain-path shape): every namespace, as before
    ("all", "team-b", True), ("all", None, True), ("etc", "team-a", False),
])
def test_a_node_path_is_used_only_where_it_is_bound(name, namespace, ok):
    spec = cr(namespace, cache={"type": "nodePath", "nodePath": name}).spec
    got = check_policy(spec, BOUND, namespace=namespace)
    assert codes(got) == ([] if ok else [("PolicyCacheNodePathNotAllowed", "spec.cache.nodePath")])
    if ok:
        assert plan_cache(spec, BOUND, namespace).host_path == dict(NODE)[name]
    else:
        with pytest.raises(CacheError):
            plan_cache(spec, BOUND, namespace)


def test_the_refusal_names_the_binding_and_the_setting():
    [f] = check_policy(cr("team-b", cache={"type": "nodePath", "nodePath": "nvme"}).spec, BOUND, namespace="team-b")
    assert "bound to the namespaces team-a, team-c, not team-b" in f.message
    assert "cache.nodePaths.nvme.namespaces" in f.message and "--cache-node-path-namespaces" in f.message


def test_the_default_node_path_obeys_the_binding():
    p = TenancyPolicy(cache_node_paths=NODE, cache_node_path_namespaces=(("nvme", ("team-a",)),),
                      default_cache=("nodePath", "nvme"))
    assert plan_cache(cr("team-a").spec, p, "team-a") == CachePlan("nodePath", node_path_name="nvme",
                                                                    host_path="/mnt/nvme/hf", from_default=True)
    assert plan_cache(cr("team-b").spec, p, "team-b") == CachePlan("emptyDir", from_default=True)
    d, t = pair("qwen3.6-27b")
    for ns, want in (("team-a", {"path": "/mnt/nvme/hf", "type": "DirectoryOrCreate"}), ("team-b", None)):
        volumes = render(cr(ns), t, d, policy=p).by_kind("Deployment")[0]["spec"]["template"]["spec"]["volumes"]
        [hf] = [v for v in volumes if v["name"] == "hf-cache"]
        assert hf.get("hostPath") == want and (want is not None or hf == {"name": "hf-cache", "emptyDir": {}}), ns


# ----------------------------------------------------------------- model paths of the pod


@pytest.mark.parametrize("namespace, extra, ok", [
    ("team-a", {"target": {"model": SNAP}}, False),  # emptyDir cache: a path of the image
    ("team-a", {"target": {"model": SNAP}, "cache": {"type": "nodePath", "nodePath": "nvme"}}, True),  # bound by name
    ("team-b", {"target": {"model": SNAP}, "cache": {"type": "nodePath", "nodePath": "shared"}}, False),  # shared
    ("team-b", {"target": {"model": SNAP}, "cache": {"type": "nodePath", "nodePath": "all"}}, False),  # '*'
    ("team-a", {"target": {"model": SNAP}, "cache": {"type": "pvc", "pvc": {"claimName": "hf-cache"}}}, True),
    ("team-a", {"target": {"model": "/etc/passwd"}, "cache": {"type": "nodePath", "nodePath": "nvme"}}, False),
    ("team-a", {"target": {"model": HF_HOME + "-evil/x"}, "cache": {"type": "nodePath", "nodePath": "nvme"}}, False),
    ("team-a", {"target": {"model": "/models/drafter/x"}}, False),
    ("team-a", {"target": {"model": "var/cache/huggingface/hub/x"}}, False),  # relative to the working directory
    ("team-a", {"target": {"model": "/abs/in/claim", "pvc": {"claimName": "models"}}}, True),  # inside the claim
    ("team-a", {"target": {"model": "Qwen/Qwen3.6-27B"}}, True),
])
def test_model_paths(namespace, extra, ok):
    spec = cr(namespace, **extra).spec
    assert codes(check_policy(spec, BOUND, namespace=namespace)) == (
        [] if ok else [("PolicyModelPathNotAllowed", "spec.target.model")])


def test_a_drafter_path_and_the_default_cache():
    p = TenancyPolicy(cache_node_paths=NODE, cache_node_path_namespaces=(("nvme", ("team-a",)),),
                      default_cache=("nodePath", "nvme"))
    spec = cr("team-a", drafter={"model": SNAP}).spec
    assert check_policy(spec, p, namespace="team-a") == []  # the default cache is team-a's by name
    assert codes(check_policy(cr("team-b", drafter={"model": SNAP}).spec, p, namespace="team-b")) == [
        ("PolicyModelPathNotAllowed", "spec.drafter.model")]
    [f] = check_policy(cr("team-b", drafter={"model": "/etc"}).spec, p, namespace="team-b")
    assert "hub repository id" in f.message and "spec.drafter.pvc" in f.message and "--cache-node-path-namespaces" in f.message


@pytest.mark.parametrize("model, path", [("Qwen/Qwen3.6-27B", False), ("gpt2", False), ("/x", True), ("a/b/c", True)])
def test_is_model_path(model, path):
    assert is_model_path(model) is path


# ----------------------------------------------------------------- flags


def _parse(*argv):
    from specdeploy.cli.common import add_policy_args, policy_args

    p = argparse.ArgumentParser()
    add_policy_args(p)
    return policy_args(p.parse_args(list(argv)))


def test_the_binding_flag_builds_the_policy_and_round_trips():
    p = _parse("--cache-node-path", "nvme=/mnt/nvme/hf", "--cache-node-path", "ssd=/data/hf",
               "--cache-node-path-namespaces", "nvme=team-a,team-b", "--cache-node-path-namespaces", "ssd=")
    assert p.cache_node_path_namespaces == (("nvme", ("team-a", "team-b")), ("ssd", ()))
    assert not p.node_path_allowed("ssd", "team-a") and p.node_path_allowed("nvme", "team-b")
    assert TenancyPolicy.from_env(p.to_env()) == p
    from specdeploy.cli.common import UsageError

    for bad in (["--cache-node-path-namespaces", "nvme=team-a"], ["--cache-node-path", "nvme=/x",
                                                                  "--cache-node-path-namespaces", "nvme=Team_A"],
                ["--cache-node-path", "nvme=/x", "--cache-node-path-namespaces", "nvme"]):
        with pytest.raises(UsageError, match="--cache-node-path-namespaces"):
            _parse(*bad)


def test_a_dot_segment_never_passes_the_path_rule():
    """The API refuses '..' in a model (types.py); the policy rule does not lean on it."""
    from specdeploy.core.policy import model_path_allowed

    spec = cr("team-a", cache={"type": "nodePath", "nodePath": "nvme"}).spec
    assert model_path_allowed(SNAP, spec, BOUND, "team-a")
    assert not model_path_allowed(f"{HF_HOME}/../../etc", spec, BOUND, "team-a")
    assert not model_path_allowed(f"{HF_HOME}/./x", spec, BOUND, "team-a")
