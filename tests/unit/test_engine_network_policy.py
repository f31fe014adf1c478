"""Issue 24, item 6: a NetworkPolicy per SpeculativeDeployment (docs/concepts/security.md, "Engine network").

With the operator's --engine-network-policy (chart value engineNetworkPolicy.enabled) every deployment gets an
owned NetworkPolicy: ingress to its engine pods (leader and workers) only from pods of its namespace, of the
operator's and of --engine-ingress-namespace. Through the operator: tests/controller/test_engine_network.py."""

from __future__ import annotations

from test_render import do_render, make_cr
from specdeploy.controller.settings import from_env


def policy_of(r) -> dict:
    [np] = r.by_kind("NetworkPolicy")
    return np


def test_no_network_policy_unless_asked():
    assert do_render(make_cr()).by_kind("NetworkPolicy") == []


def test_engine_pods_take_connections_from_their_namespace_and_the_listed_ones_only():
    cr = make_cr("vllm", "0.33.0", uid="0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a11")
    r = do_render(cr, network_policy=("monitoring", "models", "specdeploy-system"))
    np = policy_of(r)
    assert np["metadata"]["name"] == "qwen36" and np["metadata"]["namespace"] == "models"
    [owner] = np["metadata"]["ownerReferences"]
    assert owner["controller"] is True and owner["uid"] == "0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a11"
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert np["spec"]["ingress"] == [{"from": [
        {"podSelector": {}},  # the CR's own namespace
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "specdeploy-system"}}}]}]
    [dep] = r.by_kind("Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    sel = np["spec"]["podSelector"]["matchLabels"]
    assert sel and all(labels.get(k) == v for k, v in sel.items())
    # the same selector as the workload's: a pod of another deployment is not selected
    assert sel == dep["spec"]["selector"]["matchLabels"]


def test_multinode_policy_selects_leader_and_workers():
    r = do_render(make_cr("vllm", "0.33.0", "b300", 2, nodes=2), network_policy=())
    np = policy_of(r)
    [lws] = r.by_kind("LeaderWorkerSet")
    sel = np["spec"]["podSelector"]["matchLabels"]
    for role in ("leaderTemplate", "workerTemplate"):
        labels = lws["spec"]["leaderWorkerTemplate"][role]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in sel.items()), role
    assert np["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]


def test_operator_setting_from_the_environment():
    def engine_network_policy_from_env(env):
        return from_env(env).reconciler.engine_network_policy

    assert engine_network_policy_from_env({}) is None
    assert engine_network_policy_from_env({"SPECDEPLOY_ENGINE_NETWORK_POLICY": ""}) == ()
    env = {"SPECDEPLOY_ENGINE_NETWORK_POLICY": "monitoring,obs", "POD_NAMESPACE": "specdeploy-system"}
    assert engine_network_policy_from_env(env) == ("monitoring", "obs", "specdeploy-system")


# ----------------------------------------------------------------- issue 37: benchmark variants


def _matches(selector: dict, labels: dict) -> bool:
    """matchLabels as the API server reads it: an empty selector selects every pod."""
    return all(labels.get(k) == v for k, v in selector.items())


def _pod_labels(obj: dict) -> dict:
    return obj["spec"]["template"]["metadata"]["labels"]


def test_a_benchmark_variant_takes_connections_from_its_own_client_and_the_listed_namespaces_only():
    from test_benchrender import OWNER, variant
    from specdeploy.core.bench.plan import Variant
    from specdeploy.core.bench.render import build_client_job, build_variant_network_policy

    cr, vo = variant()
    _, other = variant(v=Variant("k4", True, 4))
    np = build_variant_network_policy(OWNER, vo, ("monitoring", "models", "specdeploy-system"))
    assert (np["metadata"]["name"], np["metadata"]["namespace"]) == ("sweep-k3", "models")
    [owner] = np["metadata"]["ownerReferences"]
    assert owner["kind"] == "SpeculativeBenchmark" and owner["uid"] == "bench-uid-1" and owner["controller"] is True
    assert np["spec"]["policyTypes"] == ["Ingress"]
    # selects this variant's engine pod only: not another variant's, not the deployment's own engine pods
    sel = np["spec"]["podSelector"]["matchLabels"]
    dep = next(o for o in vo.objects if o["kind"] == "Deployment")
    assert _matches(sel, _pod_labels(dep))
    assert not _matches(sel, _pod_labels(next(o for o in other.objects if o["kind"] == "Deployment")))
    own = next(o for o in do_render(cr).objects if o["kind"] == "Deployment")
    assert not _matches(sel, _pod_labels(own))
    # admits this variant's client pods and the listed namespaces (the benchmark's own is not opened to all its pods)
    [rule] = np["spec"]["ingress"]
    client, *namespaces = rule["from"]
    assert list(client) == ["podSelector"]
    assert _matches(client["podSelector"]["matchLabels"], _pod_labels(build_client_job(OWNER, "k3", "img")))
    assert not _matches(client["podSelector"]["matchLabels"], _pod_labels(build_client_job(OWNER, "k4", "img")))
    assert not _matches(client["podSelector"]["matchLabels"], _pod_labels(own))
    assert namespaces == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
                          for ns in ("monitoring", "specdeploy-system")]
