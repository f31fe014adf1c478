"""The drafter/target gate: no workload for an incompatible pair; fixing a referenced ConfigMap
re-triggers the reconcile; a later breakage leaves the running workload alone."""

from __future__ import annotations

import json

from e2e_support import (EMBEDDED, KIMI, QWEN, apply, child_names, config_hash, configmap, engine_container,
                         events_for, example_cr, example_doc, exists, get, wait_for)


def bad_qwen_drafter() -> dict:
    d = example_doc(QWEN, "drafter")
    ids = d["dflash_config"]["target_layer_ids"]
    ids[-1] = 64  # the Qwen3.5/3.6-27B target has 64 layers: valid ids are 0..63
    return d


def assert_no_children(c, name: str) -> None:
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname), f"{kind}/{cname} exists for an incompatible pair"
    if _has_lws(c):
        assert not exists(c, "leaderworkersets.leaderworkerset.x-k8s.io", name)


def _has_lws(c) -> bool:
    return c.kubectl("api-resources", "--api-group=leaderworkerset.x-k8s.io", "-o", "name",
                     check=False).stdout.strip() != ""


def test_incompatible_pair_blocked_then_fixed_by_configmap(cluster):
    c = cluster
    name = "gate-qwen"
    apply(c, configmap("gate-qwen-target", example_doc(QWEN, "target")),
          configmap("gate-qwen-drafter", bad_qwen_drafter()),
          example_cr(QWEN, name, target_cm="gate-qwen-target", drafter_cm="gate-qwen-drafter"))
    cond = c.wait_condition(name, "DrafterCompatible", "False", "TargetLayerOutOfRange")
    assert "$.dflash_config.target_layer_ids[4]" in cond["message"], cond["message"]
    cr = get(c, "specdeploy", name)
    assert cond["observedGeneration"] == cr["metadata"]["generation"]
    conds = {x["type"]: x for x in cr["status"]["conditions"]}
    assert conds["Progressing"]["status"] == "False" and conds["Progressing"]["reason"] == "BlockedByCheck"
    assert conds["Ready"]["status"] == "False"
    evs = wait_for(lambda: [e for e in events_for(c, name) if e["reason"] == "TargetLayerOutOfRange"], 30,
                   "a TargetLayerOutOfRange event")
    assert evs[0]["type"] == "Warning"
    assert_no_children(c, name)

    # fix the referenced ConfigMap only; the CR is not touched
    gen = cr["metadata"]["generation"]
    rv = cr["metadata"]["resourceVersion"]
    apply(c, configmap("gate-qwen-drafter", example_doc(QWEN, "drafter")))
    c.wait_condition(name, "DrafterCompatible", "True", "Compatible")
    dep = wait_for(lambda: get(c, "deployment", name), 30, "the Deployment after the fix")
    assert json.loads(engine_container(dep)["args"][engine_container(dep)["args"].index("--speculative-config") + 1]
                      )["num_speculative_tokens"] == 15
    cr = get(c, "specdeploy", name)
    assert cr["metadata"]["generation"] == gen, "the spec was not supposed to change"
    assert cr["metadata"]["resourceVersion"] != rv
    for kind, cname in child_names(name).items():
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")


def test_wrong_target_blocked(cluster):
    """The Qwen drafter against the Kimi target: several errors, the first one is the reason."""
    c = cluster
    name = "gate-wrong-target"
    apply(c, configmap("gate-kimi-target", example_doc(KIMI, "target")),
          configmap("gate-qwen-drafter-ok", example_doc(QWEN, "drafter")),
          example_cr(QWEN, name, target_cm="gate-kimi-target", drafter_cm="gate-qwen-drafter-ok"))
    cond = c.wait_condition(name, "DrafterCompatible", "False")
    first = cond["message"].split(";")[0]
    assert first.startswith(f"error {cond['reason']} at "), cond["message"]
    assert "$." in first
    for code in ("NumTargetLayersMismatch", "HiddenSizeMismatch"):
        assert code in cond["message"]
    wait_for(lambda: [e for e in events_for(c, name) if e["type"] == "Warning" and e["reason"] == cond["reason"]],
             30, "a Warning event with the first error code")
    assert_no_children(c, name)


def test_running_workload_kept_when_pair_breaks(cluster):
    c = cluster
    name = "gate-keep"
    apply(c, configmap("gate-keep-target", example_doc(QWEN, "target")),
          configmap("gate-keep-drafter", example_doc(QWEN, "drafter")),
          example_cr(QWEN, name, target_cm="gate-keep-target", drafter_cm="gate-keep-drafter"))
    c.wait_condition(name, "DrafterCompatible", "True")
    dep0 = wait_for(lambda: get(c, "deployment", name), 30, "the Deployment")
    if EMBEDDED:  # play the Deployment controller: a healthy workload
        c.mark_workload_ready(name, "deployment", c.namespace)
        c.wait_condition(name, "Ready", "True")
        dep0 = get(c, "deployment", name)
    cm0 = get(c, "configmap", f"{name}-engine")

    apply(c, configmap("gate-keep-drafter", bad_qwen_drafter()))
    c.wait_condition(name, "DrafterCompatible", "False", "TargetLayerOutOfRange")
    deg = c.wait_condition(name, "Degraded", "True", "RunningPreviousConfig")
    assert "TargetLayerOutOfRange" in deg["message"]
    dep1 = get(c, "deployment", name)
    assert config_hash(dep1) == config_hash(dep0)
    assert engine_container(dep1)["args"] == engine_container(dep0)["args"]
    assert dep1["metadata"]["generation"] == dep0["metadata"]["generation"]
    assert dep1["metadata"]["uid"] == dep0["metadata"]["uid"]
    wait_for(lambda: [e for e in events_for(c, name) if e["type"] == "Warning" and e["reason"] == "RunningPreviousConfig"],
             30, "a RunningPreviousConfig warning event")
    # the rendered engine config of the running workload is kept too
    assert get(c, "configmap", f"{name}-engine")["data"] == cm0["data"]
