"""Optional APIs: LeaderWorkerSet for spec.nodes > 1 and PodMonitor, used only once installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e_support import (KIMI, QWEN, RESYNC, apply, child_names, configmap, engine_container, example_cr, example_doc,
                         exists, get, new_cluster, stop_cluster, wait_for, wait_reconciles)

CRDS = Path(__file__).parent / "crds"
LWS_CRD = CRDS / "leaderworkerset-minimal.yaml"
PODMONITOR_CRD = CRDS / "podmonitor-minimal.yaml"
LWS = "leaderworkersets.leaderworkerset.x-k8s.io"
PODMONITOR = "podmonitors.monitoring.coreos.com"
CAPABILITY_TTL = 1.0


def has_api(c, group: str, plural: str) -> bool:
    out = c.kubectl("api-resources", f"--api-group={group}", "-o", "name", check=False).stdout.split()
    return any(x.split(".")[0] == plural for x in out)


@pytest.fixture(scope="module")
def cluster():
    """Own cluster: the module installs CRDs. A short capability TTL makes installs visible fast."""
    c = new_cluster("multinode", extra_env={"SPECDEPLOY_CAPABILITY_TTL": str(CAPABILITY_TTL)})
    installed: list[Path] = []
    c.install_crd = lambda path: (installed.append(path), c.kubectl("apply", "-f", str(path)))  # type: ignore[attr-defined]
    yield c
    if not c.embedded:  # leave a real cluster as found
        for path in installed:
            c.kubectl("delete", "-f", str(path), "--wait=false", check=False)
    stop_cluster(c)


def multinode_cr(name: str) -> dict:
    cr = example_cr(KIMI, name, target_cm="mn-kimi-target", drafter_cm="mn-kimi-drafter")
    cr["spec"]["nodes"] = 2  # 8 GPUs per replica over 2 nodes of 4
    return cr


def test_leaderworkerset_missing_then_installed(cluster):
    c = cluster
    if has_api(c, "leaderworkerset.x-k8s.io", "leaderworkersets"):
        pytest.skip("this cluster already serves leaderworkerset.x-k8s.io/v1: the 'missing' case cannot be shown")
    name = "kimi-multi"
    apply(c, configmap("mn-kimi-target", example_doc(KIMI, "target")),
          configmap("mn-kimi-drafter", example_doc(KIMI, "drafter")), multinode_cr(name))
    prog = c.wait_condition(name, "Progressing", "False", "LeaderWorkerSetMissing")
    assert "spec.nodes=2" in prog["message"] and "leaderworkerset.x-k8s.io/v1" in prog["message"]
    c.wait_condition(name, "DrafterCompatible", "True")  # the check itself passed
    # no partial objects, also after further reconciles
    wait_reconciles(c, 2, timeout=4 * RESYNC + 20)
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname), f"{kind}/{cname} created although the workload kind is missing"
    cr = get(c, "specdeploy", name)
    conds = {x["type"]: x for x in cr["status"]["conditions"]}
    assert conds["Ready"]["status"] == "False"
    assert conds["Degraded"]["status"] == "False"  # no workload runs: nothing is degraded

    c.install_crd(LWS_CRD)
    wait_for(lambda: has_api(c, "leaderworkerset.x-k8s.io", "leaderworkersets"), 30, "the LeaderWorkerSet API")
    lws = wait_for(lambda: get(c, LWS, name), CAPABILITY_TTL + 3 * RESYNC + 20, "the operator to create the LeaderWorkerSet")
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    assert tmpl["leaderTemplate"]["spec"]["containers"][0]["name"] == "engine"
    assert tmpl["workerTemplate"]["spec"]["containers"][0]["name"] == "engine"
    assert lws["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
    leader_args = engine_container(lws)["args"]
    assert "--speculative-algorithm" in leader_args
    c.wait_condition(name, "Progressing", "True")
    for kind in ("configmap", "service", "poddisruptionbudget"):
        cname = child_names(name)[kind]
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")
    assert not exists(c, "deployment", name), "a multi-node replica must not get a Deployment"
    svc = get(c, "service", name)
    assert svc["spec"]["selector"].get("leaderworkerset.sigs.k8s.io/worker-index") == "0"

    # the operator now watches the new API: a deleted LeaderWorkerSet is re-created
    uid = lws["metadata"]["uid"]
    c.kubectl("delete", LWS, name, "-n", c.namespace)
    wait_for(lambda: (x := get(c, LWS, name)) and x["metadata"]["uid"] != uid, 3 * RESYNC + 20,
             "the deleted LeaderWorkerSet to be re-created")


def test_podmonitor_only_when_api_exists(cluster):
    c = cluster
    if has_api(c, "monitoring.coreos.com", "podmonitors"):
        pytest.skip("this cluster already serves monitoring.coreos.com/v1 podmonitors")
    name = "qwen-monitored"
    apply(c, configmap("mn-qwen-target", example_doc(QWEN, "target")),
          configmap("mn-qwen-drafter", example_doc(QWEN, "drafter")),
          example_cr(QWEN, name, target_cm="mn-qwen-target", drafter_cm="mn-qwen-drafter"))
    c.wait_condition(name, "Progressing", "True")
    for kind, cname in child_names(name).items():
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")

    c.install_crd(PODMONITOR_CRD)
    wait_for(lambda: has_api(c, "monitoring.coreos.com", "podmonitors"), 30, "the PodMonitor API")
    pm = wait_for(lambda: get(c, PODMONITOR, name), CAPABILITY_TTL + 3 * RESYNC + 20, "the operator to create the PodMonitor")
    assert pm["metadata"]["labels"]["app.kubernetes.io/instance"] == name
    assert pm["metadata"]["ownerReferences"][0]["name"] == name
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == name
