"""config.json from the Hugging Face hub (a local stand-in: specdeploy_dev.hubserver)."""

from __future__ import annotations

import base64
import json

import pytest

from e2e_support import (QWEN, apply, child_names, events_for, example_cr, exists, get, new_cluster, stop_cluster,
                         wait_for)
from specdeploy_dev.hubserver import HubRepo, commit_sha, start_in_thread

TARGET = "Qwen/Qwen3.6-27B"
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"
PRIVATE_DRAFTER = "acme-e2e/Qwen3.6-27B-DFlash-private"
TOKEN = "hf_e2e_private_token"


@pytest.fixture(scope="module")
def hub():
    target = (QWEN / "target.config.json").read_bytes()
    drafter = (QWEN / "drafter.config.json").read_bytes()
    repos = [
        HubRepo(TARGET, {"config.json": target}),
        HubRepo(DRAFTER, {"config.json": drafter}, revisions={"main": commit_sha(DRAFTER, "v1")}),
        HubRepo(PRIVATE_DRAFTER, {"config.json": drafter}, token=TOKEN),
    ]
    with start_in_thread(repos) as url:
        yield url


@pytest.fixture(scope="module")
def cluster(hub, tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf-home")
    c = new_cluster("hub", extra_env={"HF_ENDPOINT": str(hub), "HF_HOME": str(cache),
                                      "HF_HUB_CACHE": str(cache / "hub"), "HF_HUB_OFFLINE": "0",
                                      "HF_HUB_DISABLE_TELEMETRY": "1"})
    yield c
    stop_cluster(c)


def hub_cr(name: str, target: str = TARGET, drafter: str = DRAFTER) -> dict:
    cr = example_cr(QWEN, name)
    for role, model in (("target", target), ("drafter", drafter)):
        cr["spec"][role].pop("configFrom", None)
        cr["spec"][role]["model"] = model
    return cr


def test_public_models_from_hub(cluster, hub):
    c = cluster
    name = "hub-qwen"
    apply(c, hub_cr(name))
    c.wait_condition(name, "DrafterCompatible", "True", "Compatible")
    resolved = get(c, "specdeploy", name)["status"]["resolved"]
    assert resolved["targetRevision"] == commit_sha(TARGET, "main")
    assert resolved["drafterRevision"] == commit_sha(DRAFTER, "v1")
    # where the weights come from: no spec.cache and no default, so every pod start downloads them
    assert resolved["cache"] == "emptyDir"
    assert resolved["targetWeights"].startswith(f"hub {TARGET}, downloaded by every engine pod at start")
    assert resolved["drafterWeights"].startswith(f"hub {DRAFTER}, downloaded by every engine pod at start")
    for kind, cname in child_names(name).items():
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")
    assert hub.server.count(contains="/Qwen/Qwen3.6-27B/resolve/") >= 1


def test_private_model_with_token_secret(cluster, hub):
    c = cluster
    name = "hub-private"
    apply(c, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-token"}, "type": "Opaque",
              "data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
    cr = hub_cr(name, drafter=PRIVATE_DRAFTER)
    cr["spec"]["drafter"]["tokenSecretRef"] = {"name": "hub-token"}
    apply(c, cr)
    c.wait_condition(name, "DrafterCompatible", "True", "Compatible")
    assert get(c, "specdeploy", name)["status"]["resolved"]["drafterRevision"] == commit_sha(PRIVATE_DRAFTER, "main")
    dep = wait_for(lambda: get(c, "deployment", name), 30, "the Deployment")
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "token"}}} in env


def test_unknown_repo(cluster):
    c = cluster
    name = "hub-unknown"
    apply(c, hub_cr(name, target="nobody-e2e/no-such-model"))
    cond = c.wait_condition(name, "DrafterCompatible", "Unknown", "ModelNotFound")
    assert "nobody-e2e/no-such-model" in cond["message"]
    evs = wait_for(lambda: [e for e in events_for(c, name) if e["reason"] == "ModelNotFound"], 30,
                   "a ModelNotFound event")
    assert evs[0]["type"] == "Warning"
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname)


def test_private_model_stays_private_to_the_token_that_fetched_it(cluster, hub):
    """Issue 24 item 4: after a CR with the token resolved the private drafter (by branch and by pinned commit),
    CRs without a token get ModelNotFound exactly as before, also after an operator restart (the on-disk hub
    cache is per credential), and get no workload."""
    from e2e_support import start_operator

    c = cluster
    pinned = commit_sha(PRIVATE_DRAFTER, "main")
    apply(c, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hub-token"}, "type": "Opaque",
              "data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
    for name, rev in (("hub-owner", None), ("hub-owner-pinned", pinned)):
        cr = hub_cr(name, drafter=PRIVATE_DRAFTER)
        cr["spec"]["drafter"]["tokenSecretRef"] = {"name": "hub-token"}
        if rev:
            cr["spec"]["drafter"]["revision"] = rev
        apply(c, cr)
        c.wait_condition(name, "DrafterCompatible", "True", "Compatible")

    def intruder(name: str, rev: str | None) -> None:
        cr = hub_cr(name, drafter=PRIVATE_DRAFTER)
        if rev:
            cr["spec"]["drafter"]["revision"] = rev
        apply(c, cr)
        cond = c.wait_condition(name, "DrafterCompatible", "Unknown", "ModelNotFound")
        assert PRIVATE_DRAFTER in cond["message"] and "tokenSecretRef" in cond["message"], cond["message"]
        assert "resolved" not in (get(c, "specdeploy", name).get("status") or {}) or \
            pinned not in json.dumps(get(c, "specdeploy", name)["status"]["resolved"])
        for kind, cname in child_names(name).items():
            assert not exists(c, kind, cname), f"{kind}/{cname} exists for a CR without access"

    intruder("hub-intruder", None)
    intruder("hub-intruder-pinned", pinned)
    c.stop_operator()
    start_operator(c)
    intruder("hub-intruder-restart", pinned)
