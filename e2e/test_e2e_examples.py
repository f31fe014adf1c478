"""Both examples applied with kubectl apply -k; drift repair; rollout on spec change; deletion."""

from __future__ import annotations

import json
import re

import pytest

from e2e_support import (KIMI, QWEN, RESYNC, apply, child_names, config_hash, embedded_only, engine_container,
                         events_for, example_cr, exists, get, wait_for, wait_reconciles)

CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*$")
NAMES = {"kimi-k26": KIMI, "qwen36-27b": QWEN}


def flag(args: list[str], name: str) -> str:
    assert name in args, f"{name} not in {args}"
    return args[args.index(name) + 1]


@pytest.fixture(scope="module")
def examples(cluster):
    for example in NAMES.values():
        cluster.kubectl("apply", "-k", str(example), "-n", cluster.namespace)
    for name in NAMES:
        cluster.wait_condition(name, "DrafterCompatible", "True")
        cluster.wait_condition(name, "Progressing", "True")
    return cluster


def test_examples_children_args_and_conditions(examples):
    c = examples
    for name in NAMES:
        cr = get(c, "specdeploy", name)
        uid = cr["metadata"]["uid"]
        for kind, cname in child_names(name).items():
            obj = wait_for(lambda: get(c, kind, cname), 30, f"{kind}/{cname}")
            refs = obj["metadata"].get("ownerReferences") or []
            assert [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in refs] == \
                [("SpeculativeDeployment", name, uid, True)], f"{kind}/{cname} ownerReferences: {refs}"
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] == name
            assert labels["app.kubernetes.io/managed-by"] == "specdeploy"
            assert labels["app.kubernetes.io/name"] == "specdeploy-engine"
            assert labels["app.kubernetes.io/component"] == "engine"
        conds = {x["type"]: x for x in cr["status"]["conditions"]}
        gen = cr["metadata"]["generation"]
        assert conds["DrafterCompatible"]["status"] == "True"
        assert conds["DrafterCompatible"]["reason"] == "Compatible"
        assert conds["Progressing"]["status"] == "True"
        for x in conds.values():
            assert x["observedGeneration"] == gen, x
        assert cr["status"]["observedGeneration"] == gen
        assert not exists(c, "job", f"{name}-inspect-target")

    kimi = engine_container(get(c, "deployment", "kimi-k26"))
    assert flag(kimi["args"], "--speculative-algorithm") == "DFLASH"
    assert flag(kimi["args"], "--speculative-num-draft-tokens") == "8"
    assert flag(kimi["args"], "--tp-size") == "8"

    qwen_dep = get(c, "deployment", "qwen36-27b")
    qwen = engine_container(qwen_dep)
    spec_cfg = json.loads(flag(qwen["args"], "--speculative-config"))
    assert spec_cfg["num_speculative_tokens"] == 15
    assert spec_cfg["method"] == "dflash"
    assert {"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1"} in qwen["env"]
    assert qwen_dep["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-B300-SXM6-AC"


@embedded_only
def test_examples_ready_printer_columns_and_events(examples):
    c = examples
    for name in NAMES:
        c.mark_workload_ready(name, "deployment", c.namespace)
    for name in NAMES:
        r = c.wait_condition(name, "Ready", "True", "AllReplicasReady")
        cr = get(c, "specdeploy", name)
        assert r["observedGeneration"] == cr["metadata"]["generation"]
        assert cr["status"]["readyReplicas"] == 1
    # printer columns of kubectl get specdeploy
    lines = c.kubectl("get", "specdeploy", "-n", c.namespace).stdout.splitlines()
    header = lines[0].split()
    assert "READY" in header, lines
    rows = {ln.split()[0]: dict(zip(header, ln.split())) for ln in lines[1:]}
    for name in NAMES:
        assert rows[name]["READY"] == "1/1" and rows[name]["STATUS"] == "AllReplicasReady", lines
    # Events: CamelCase reasons, the verdict and readiness both posted
    for name in NAMES:
        evs = wait_for(lambda: {e["reason"] for e in events_for(c, name)} >= {"Compatible", "AllReplicasReady"}
                       and events_for(c, name), 30, f"Compatible and AllReplicasReady events of {name}")
        for e in evs:
            assert CAMEL.match(e["reason"]), e["reason"]
            assert e["type"] in ("Normal", "Warning")
    out = c.kubectl("get", "events", "-n", c.namespace).stdout
    assert "AllReplicasReady" in out and "Compatible" in out


def test_drift_repair(examples):
    c = examples
    name = "qwen36-27b"
    dep = get(c, "deployment", name)
    image = engine_container(dep)["image"]
    svc_uid = get(c, "service", name)["metadata"]["uid"]
    c.kubectl("delete", "service", name, "-n", c.namespace)
    patched = json.loads(c.kubectl("patch", "deployment", name, "-n", c.namespace, "--type=json", "-o", "json", "-p",
                                   json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
                                                "value": "example.invalid/hacked:1"}])).stdout)
    assert engine_container(patched)["image"] == "example.invalid/hacked:1"  # the edit landed (repair may follow at once)
    # restored within a couple of resync periods (watch events usually repair it at once)
    wait_for(lambda: (s := get(c, "service", name)) and s["metadata"]["uid"] != svc_uid, 3 * RESYNC + 10,
             "the Service to be re-created")
    wait_for(lambda: engine_container(get(c, "deployment", name))["image"] == image, 3 * RESYNC + 10,
             "the Deployment's image to be restored")
    svc = get(c, "service", name)
    assert svc["metadata"]["ownerReferences"][0]["name"] == name


def test_rollout_on_spec_change(examples):
    c = examples
    cr = example_cr(QWEN, "qwen-rollout")
    apply(c, cr)
    c.wait_condition("qwen-rollout", "Progressing", "True")
    dep0 = wait_for(lambda: get(c, "deployment", "qwen-rollout"), 30, "deployment qwen-rollout")
    h0 = config_hash(dep0)
    args0 = engine_container(dep0)["args"]
    assert json.loads(flag(args0, "--speculative-config"))["num_speculative_tokens"] == 15

    # lower block size than trained: 8 -> 7 draft tokens
    c.kubectl("patch", "specdeploy", "qwen-rollout", "-n", c.namespace, "--type=merge",
              "-p", json.dumps({"spec": {"speculation": {"blockSize": 8}}}))
    dep1 = wait_for(lambda: (d := get(c, "deployment", "qwen-rollout")) and config_hash(d) != h0 and d, 30,
                    "a new config hash after blockSize: 8")
    args1 = engine_container(dep1)["args"]
    assert json.loads(flag(args1, "--speculative-config"))["num_speculative_tokens"] == 7
    gen = get(c, "specdeploy", "qwen-rollout")["metadata"]["generation"]
    wait_for(lambda: get(c, "specdeploy", "qwen-rollout")["status"].get("observedGeneration") == gen, 30,
             f"status.observedGeneration == {gen}")
    cr1 = get(c, "specdeploy", "qwen-rollout")
    assert cr1["status"]["resolved"]["blockSize"] == 8
    assert cr1["status"]["resolved"]["configHash"] == config_hash(dep1)

    # extraArgs: appear in the args, hash changes again
    c.kubectl("patch", "specdeploy", "qwen-rollout", "-n", c.namespace, "--type=merge",
              "-p", json.dumps({"spec": {"engine": {"extraArgs": ["--max-num-seqs", "64"]}}}))
    h1 = config_hash(dep1)
    dep2 = wait_for(lambda: (d := get(c, "deployment", "qwen-rollout")) and config_hash(d) not in (h0, h1) and d, 30,
                    "a new config hash after extraArgs")
    args2 = engine_container(dep2)["args"]
    assert flag(args2, "--max-num-seqs") == "64"
    gen2 = get(c, "specdeploy", "qwen-rollout")["metadata"]["generation"]
    assert gen2 > gen
    wait_for(lambda: get(c, "specdeploy", "qwen-rollout")["status"].get("observedGeneration") == gen2, 30,
             f"status.observedGeneration == {gen2}")
    conds = {x["type"]: x for x in get(c, "specdeploy", "qwen-rollout")["status"]["conditions"]}
    assert all(x["observedGeneration"] == gen2 for x in conds.values()), conds
    # the rendered engine ConfigMap follows too
    cm = get(c, "configmap", "qwen-rollout-engine")
    assert "--max-num-seqs" in json.dumps(cm["data"])


def test_deletion_removes_children(examples):
    c = examples
    apply(c, example_cr(KIMI, "kimi-delete"))
    c.wait_condition("kimi-delete", "Progressing", "True")
    for kind, cname in child_names("kimi-delete").items():
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")
    c.kubectl("delete", "specdeploy", "kimi-delete", "-n", c.namespace)
    for kind, cname in child_names("kimi-delete").items():
        wait_for(lambda: not exists(c, kind, cname), 30, f"{kind}/{cname} to be gone")
    # the operator must not re-create them from the children's DELETED events: let it do two
    # resync rounds over the other CRs of this namespace, then look again
    others = len(c.get_json("specdeploy", "-n", c.namespace)["items"])
    assert others >= 1
    wait_reconciles(c, 2 * others, timeout=4 * RESYNC + 20)
    for kind, cname in child_names("kimi-delete").items():
        assert not exists(c, kind, cname), f"{kind}/{cname} came back after the CR was deleted"
