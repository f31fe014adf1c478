"""Issue 24, item 6 through the operator (real `kopf run`, real kubectl) on the API server: with the operator's
engine NetworkPolicy on, every SpeculativeDeployment gets an owned NetworkPolicy selecting its engine pods; the
engine API key comes from an allowed Secret through the environment; a Secret off the allow-list is refused
before anything is applied (docs/concepts/security.md, "Engine network")."""

from __future__ import annotations

import pytest

from e2e_support import QWEN, apply, child_names, configmap, example_cr, example_doc, exists, get, new_cluster, \
    stop_cluster, wait_for


@pytest.fixture(scope="module")
def cluster():
    c = new_cluster("engine-network", extra_env={"SPECDEPLOY_ENGINE_NETWORK_POLICY": "monitoring"})
    yield c
    stop_cluster(c)


def keyed_cr(name: str, secret: str) -> list[dict]:
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    # key token: the default policy.allowedApiKeySecretKeys (any other key is refused)
    cr["spec"]["engine"]["apiKey"] = {"secretKeyRef": {"name": secret, "key": "token"}}
    return [configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", example_doc(QWEN, "drafter")),
            cr]


def test_network_policy_child_and_api_key_from_the_secret(cluster):
    c = cluster
    name = "net-keyed"
    apply(c, *keyed_cr(name, "hub-token"))  # hub-token: on the suite's allow-list (--allowed-token-secret)
    c.wait_condition(name, "DrafterCompatible", "True")
    np = wait_for(lambda: get(c, "networkpolicy", name), 60, f"networkpolicy/{name}")
    uid = get(c, "specdeploy", name)["metadata"]["uid"]
    assert [(r["kind"], r["uid"], r.get("controller")) for r in np["metadata"]["ownerReferences"]] == \
        [("SpeculativeDeployment", uid, True)]
    dep = wait_for(lambda: get(c, "deployment", name), 60, f"deployment/{name}")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    peers = np["spec"]["ingress"][0]["from"]
    assert {"podSelector": {}} in peers
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in peers
    [engine] = [x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "engine"]
    assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "token"}}} in engine["env"]
    assert not any("api-key" in a for a in engine["args"])


def test_api_key_secret_off_the_allow_list_is_refused(cluster):
    c = cluster
    name = "net-other-secret"
    apply(c, *keyed_cr(name, "database-credentials"))
    cond = c.wait_condition(name, "Progressing", "False", "PolicyRefused")
    assert "spec.engine.apiKey.secretKeyRef.name" in cond["message"], cond["message"]
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname), f"{kind}/{cname} exists for a refused CR"
    assert not exists(c, "networkpolicy", name)
