"""Children converge exactly: server-side apply with field ownership (issue 18).

The reconciler runs in-process against the embedded API server (ssa_support.Env): removed spec
fields leave the children, idle reconciles write nothing, foreign edits of fields specdeploy
applies are put back (with an Event naming the other manager), foreign fields survive, and
children written by a version before server-side apply are taken over without stale fields.
"""

from __future__ import annotations

import pytest

from specdeploy.controller import ownership
from specdeploy.core.gpus import PRODUCT_LABEL_KEY, get_profile
from specdeploy.core.render import render
from specdeploy.api.types import SpeculativeDeployment

from ssa_support import EX, Env, engine, managers, pod_spec

GPU = get_profile("b300").product_label


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("ssa"), "ssa")
    yield e
    e.close()


def test_a_removed_node_selector_leaves_the_deployment(env: Env):
    """The issue's case: nodeSelector {team: a}, then the same CR without it."""
    env.put_cr("ns1", {"pod": {"nodeSelector": {"team": "a"}}})
    env.converge("ns1")
    assert pod_spec(env.get("Deployment", "ns1"))["nodeSelector"] == {"team": "a", PRODUCT_LABEL_KEY: GPU}
    env.put_cr("ns1", {})
    env.converge("ns1")
    assert pod_spec(env.get("Deployment", "ns1"))["nodeSelector"] == {PRODUCT_LABEL_KEY: GPU}


def test_creation_writes_and_idle_reconciles_write_nothing(env: Env):
    env.put_cr("idle", {})
    writes = env.reconcile("idle")
    # uncached children are created (a POST is refused when the name is taken: no read before it)
    assert sorted(writes) == sorted([("create", "ConfigMap"), ("create", "Deployment"), ("create", "Service"),
                                     ("create", "PodDisruptionBudget"), ("patch-status", "SpeculativeDeployment"),
                                     ("create", "Event")])
    env.converge("idle")
    for _ in range(3):
        assert env.reconcile("idle") == []
    dep = env.get("Deployment", "idle")
    assert ownership.APPLIED_ANNOTATION in dep["metadata"]["annotations"]
    assert set(managers(dep)) == {("specdeploy", "Update")}  # the create's entry, specdeploy's until a change
    # the first change moves it into the Apply entry (takeover), then applies; idle again afterwards
    env.put_cr("idle", {"pod": {"nodeSelector": {"team": "a"}}})
    assert ("apply", "Deployment") in env.reconcile("idle")
    env.converge("idle")
    dep = env.get("Deployment", "idle")
    assert set(managers(dep)) == {("specdeploy", "Apply")}
    assert pod_spec(dep)["nodeSelector"] == {"team": "a", PRODUCT_LABEL_KEY: GPU}
    for _ in range(2):
        assert env.reconcile("idle") == []


def test_removed_labels_resources_env_and_args_leave_the_children(env: Env):
    env.put_cr("rm", {"pod": {"cpu": "4", "memory": "8Gi", "tolerations": [{"key": "team", "operator": "Exists"}]},
                      "engine": {"name": "vllm", "version": "0.33.0", "extraArgs": ["--max-num-seqs", "8"]}})
    env.converge("rm")
    dep = env.get("Deployment", "rm")
    assert engine(dep)["resources"]["limits"]["cpu"] == "4"
    assert "--max-num-seqs" in engine(dep)["args"]
    assert any(t.get("key") == "team" for t in pod_spec(dep)["tolerations"])
    env.put_cr("rm", {})
    env.converge("rm")
    dep = env.get("Deployment", "rm")
    assert "cpu" not in engine(dep)["resources"]["limits"] and "memory" not in engine(dep)["resources"]["limits"]
    assert "--max-num-seqs" not in engine(dep)["args"]
    assert not any(t.get("key") == "team" for t in pod_spec(dep)["tolerations"])
    assert [c["name"] for c in pod_spec(dep)["containers"]] == ["engine"]


def test_a_foreign_edit_is_put_back_with_an_event_and_foreign_fields_survive(env: Env):
    env.put_cr("fe", {})
    env.converge("fe")
    image = engine(env.get("Deployment", "fe"))["image"]
    # kubectl edit of a field specdeploy applies (Update: the field moves to kubectl-edit)
    env.foreign("Deployment", "fe", {"spec": {"template": {"spec": {"containers": [
        {"name": "engine", "image": "example.com/other:1"}]}}}}, "kubectl-edit", how="strategic")
    # kubectl rollout restart and a mesh: fields specdeploy does not apply
    env.foreign("Deployment", "fe", {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"}}}}}, "kubectl-rollout")
    env.foreign("Deployment", "fe", {"metadata": {"annotations": {"mesh.example.com/inject": "true"}}}, "mesh")
    writes = env.reconcile("fe")
    assert ("apply", "Deployment") in writes
    dep = env.get("Deployment", "fe")
    assert engine(dep)["image"] == image
    assert dep["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
    assert dep["metadata"]["annotations"]["mesh.example.com/inject"] == "true"
    ev = [e for e in env.events("fe") if e["reason"] == "FieldOwnershipConflict"]
    assert ev and "kubectl-edit" in ev[-1]["message"] and ev[-1]["type"] == "Warning"
    env.converge("fe")
    assert env.reconcile("fe") == []
    # a foreign annotation alone never causes a write
    env.foreign("Service", "fe", {"metadata": {"annotations": {"note": "mine"}}}, "someone")
    assert env.reconcile("fe") == []
    assert env.get("Service", "fe")["metadata"]["annotations"]["note"] == "mine"


def test_a_deleted_child_is_recreated(env: Env):
    env.put_cr("del", {})
    env.converge("del")
    env.run(env.other.delete("PodDisruptionBudget", env.ns, "del"))
    assert ("create", "PodDisruptionBudget") in env.reconcile("del")
    assert env.get("PodDisruptionBudget", "del") is not None


def test_a_name_owned_by_another_controller_is_a_conflict(env: Env):
    owner_uid = env.get("ConfigMap", "ssa-target")["metadata"]["uid"]
    other = {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": "taken", "namespace": env.ns, "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                                   "name": "ssa-target", "uid": owner_uid,
                                                                   "controller": True}]},
        "spec": {"ports": [{"port": 1, "protocol": "TCP"}]}}
    env.foreign("Service", "taken", other, "someone", how="apply")
    env.put_cr("taken", {})
    env.reconcile("taken")
    svc = env.get("Service", "taken")
    assert svc["spec"]["ports"] == [{"port": 1, "protocol": "TCP"}] and "app.kubernetes.io/managed-by" not in \
        (svc["metadata"].get("labels") or {})
    cr = env.get("SpeculativeDeployment", "taken")
    text = " ".join(c["message"] for c in cr["status"]["conditions"])
    assert "Service/taken" in text


def test_children_of_an_older_version_are_taken_over(env: Env):
    """Created and merge-patched by the create+patch operator (Update entries of 'specdeploy'), then the
    new version applies a spec without the node selector and the extra label: nothing stale, nothing doubled."""
    old_spec = {"pod": {"nodeSelector": {"team": "a"}, "tolerations": [{"key": "team", "operator": "Exists"}]},
                "engine": {"name": "vllm", "version": "0.33.0", "extraArgs": ["--max-num-seqs", "8"]}}
    body = env.put_cr("old", old_spec)
    cr = SpeculativeDeployment.model_validate(body)
    import json
    target = json.loads((EX / "target.config.json").read_text())
    drafter = json.loads((EX / "drafter.config.json").read_text())
    for obj in render(cr, target, drafter).objects:  # what the older operator created
        obj["metadata"].setdefault("labels", {})["legacy"] = "1"
        env.run(env.other.call("POST", f"{_path(obj)}", body=obj, query=[("fieldManager", "specdeploy")]))
    # and a merge patch it sent later (lists replaced whole)
    dep = env.get("Deployment", "old")
    containers = pod_spec(dep)["containers"]
    containers[0]["env"] = containers[0]["env"] + [{"name": "OLD_ONLY", "value": "1"}]
    env.foreign("Deployment", "old", {"spec": {"template": {"spec": {"containers": containers}}}}, "specdeploy")
    assert set(managers(env.get("Deployment", "old"))) == {("specdeploy", "Update")}

    env.put_cr("old", {})
    writes = env.reconcile("old")
    assert ("patch", "Deployment") in writes  # the one-time move of ownership
    env.converge("old")
    dep = env.get("Deployment", "old")
    assert pod_spec(dep)["nodeSelector"] == {PRODUCT_LABEL_KEY: GPU}
    assert not any(t.get("key") == "team" for t in pod_spec(dep)["tolerations"])
    assert "--max-num-seqs" not in engine(dep)["args"]
    names = [e["name"] for e in engine(dep)["env"]]
    assert "OLD_ONLY" not in names and len(names) == len(set(names))
    assert [c["name"] for c in pod_spec(dep)["containers"]] == ["engine"]
    assert "legacy" not in dep["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget", "ConfigMap"):
        child = env.get(kind, "old-engine" if kind == "ConfigMap" else "old")
        assert "legacy" not in child["metadata"]["labels"], kind
        assert set(managers(child)) == {("specdeploy", "Apply")}, (kind, managers(child))
    assert set(managers(dep)) == {("specdeploy", "Apply")}
    assert env.reconcile("old") == []


def _path(obj: dict) -> str:
    from specdeploy.controller.kube import KINDS
    return KINDS[obj["kind"]].path(obj["metadata"]["namespace"])
