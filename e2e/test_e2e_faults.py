"""Convergence under injected API faults and broken watches (embedded API server only)."""

from __future__ import annotations

import json
import urllib.request

from e2e_support import KIMI, QWEN, RESYNC, child_names, embedded_only, engine_container, fired_faults, get, wait_for

pytestmark = embedded_only

NAMES = {"kimi-k26": KIMI, "qwen36-27b": QWEN}
PLURALS = {"configmap": "configmaps", "deployment": "deployments", "service": "services",
           "poddisruptionbudget": "poddisruptionbudgets"}
DEADLINE = 90  # a few backoff steps (5 s, 10 s, ...) when faults hit the same CR in a row


def pending_faults(c) -> list[dict]:
    return c._get("/_specdeploy/faults")["pending"]  # noqa: SLF001


def test_converges_under_faults(cluster):
    c = cluster
    # new children are created (POST): a 409 there says the name is taken, so the name is claimed (a GET finds
    # nothing) and the child applied (PATCH), where a 409 is a field conflict, answered by a forced apply
    c.fault(verb="create", resource="deployments", status=409, count=1)
    c.fault(verb="patch", resource="deployments", status=409, count=1)
    c.fault(verb="patch", resource="speculativedeployments/status", status=500, count=2)
    c.fault(verb="create", resource="services", status=503, count=2)
    for ex in NAMES.values():
        c.kubectl("apply", "-k", str(ex), "-n", c.namespace)
    # every open watch breaks; the next deployments watch gets 410 Gone and must re-list
    c.fault(verb="watch", resource="deployments", status=410, count=1)
    c.drop_watches()

    for name in NAMES:
        c.wait_condition(name, "DrafterCompatible", "True", timeout=DEADLINE)
        c.wait_condition(name, "Progressing", "True", "RollingOut", timeout=DEADLINE)
    for name in NAMES:
        for kind, cname in child_names(name).items():
            wait_for(lambda: get(c, kind, cname), DEADLINE, f"{kind}/{cname}")
    wait_for(lambda: not pending_faults(c), 30, "every injected fault to fire")
    fired = {(f["verb"], f["resource"], f["status"]) for f in fired_faults(c)}
    assert {("create", "deployments", 409), ("patch", "deployments", 409), ("patch", "speculativedeployments", 500),
            ("create", "services", 503), ("watch", "deployments", 410)} <= fired, fired

    # exactly the right children, once each
    for kind, plural in PLURALS.items():
        items = c.get_json(plural, "-n", c.namespace, "-l", "app.kubernetes.io/managed-by=specdeploy")["items"]
        assert sorted(o["metadata"]["name"] for o in items) == sorted(child_names(n)[kind] for n in NAMES), kind
    kimi = engine_container(get(c, "deployment", "kimi-k26"))
    assert kimi["args"][kimi["args"].index("--speculative-num-draft-tokens") + 1] == "8"
    qwen = engine_container(get(c, "deployment", "qwen36-27b"))
    assert json.loads(qwen["args"][qwen["args"].index("--speculative-config") + 1])["num_speculative_tokens"] == 15
    for name in NAMES:
        cr = get(c, "specdeploy", name)
        assert cr["status"]["observedGeneration"] == cr["metadata"]["generation"]

    # the re-established watches still deliver: workload status (deployments watch after 410)
    # and a deleted Service (services watch after the drop)
    for name in NAMES:
        c.mark_workload_ready(name, "deployment", c.namespace)
    for name in NAMES:
        c.wait_condition(name, "Ready", "True", "AllReplicasReady", timeout=DEADLINE)
    uid = get(c, "service", "kimi-k26")["metadata"]["uid"]
    c.kubectl("delete", "service", "kimi-k26", "-n", c.namespace)
    wait_for(lambda: (s := get(c, "service", "kimi-k26")) and s["metadata"]["uid"] != uid, 3 * RESYNC + 20,
             "the deleted Service to be re-created")


def test_expired_watches_recover(cluster):
    """410 Expired sent on every open watch: the operator re-lists and keeps reconciling."""
    c = cluster
    req = urllib.request.Request(c.url + "/_specdeploy/watches/expire", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    assert json.loads(urllib.request.urlopen(req, timeout=5).read())["watches"] >= 1
    c.kubectl("patch", "specdeploy", "qwen36-27b", "-n", c.namespace, "--type=merge",
              "-p", json.dumps({"spec": {"engine": {"extraArgs": ["--max-num-seqs", "32"]}}}))
    dep = wait_for(lambda: (d := get(c, "deployment", "qwen36-27b")) and "--max-num-seqs" in engine_container(d)["args"]
                   and d, DEADLINE, "the spec change to reach the Deployment after expired watches")
    args = engine_container(dep)["args"]
    assert args[args.index("--max-num-seqs") + 1] == "32"
