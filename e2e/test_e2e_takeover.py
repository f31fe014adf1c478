"""Issue 24's "takeover by name" and "status as input" attacks through the operator (real `kopf run`,
real kubectl) on the API server: a CR named after an object specdeploy does not control leaves that
object as it is (no ownerReference, no field of ours, never deleted) and says so (ChildConflict, a
Warning Event); the client Job of ``useServingDeployment`` runs the image the operator renders, not
one written into the SpeculativeDeployment's status.

Before issue 24 each of these objects was adopted by server-side apply (forced after the 409),
garbage-collected with the CR, benchmarked, deleted or replaced."""

from __future__ import annotations

import json

import pytest

from e2e_support import (QWEN, apply, child_names, configmap, embedded_only, events_for, example_cr, example_doc,
                         exists, get, wait_for)

ATTACKER_IMAGE = "docker.io/attacker/anything:latest"


def sd(c, name: str) -> dict:
    """A SpeculativeDeployment NAME with its two config ConfigMaps, applied."""
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    apply(c, configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", example_doc(QWEN, "drafter")), cr)
    return cr


def owner_refs(obj: dict) -> list:
    return (obj.get("metadata") or {}).get("ownerReferences") or []


def victim_service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"team": "web"}},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "web", "port": 80, "protocol": "TCP"}]}}


def victim_configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"team": "web"}},
            "data": {"settings.json": '{"mine": true}'}}


def victim_pdb(name: str) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "labels": {"team": "web"}},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}


def victim_deployment(name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"team": "web"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]}}}}


def victim_job(name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"team": "web"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "work", "image": "example.com/work:1"}]}}}}


def assert_untouched(before: dict, after: dict | None) -> None:
    """The victim still exists, is the same object, and carries nothing of specdeploy's."""
    assert after is not None, "the object was deleted"
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the object was replaced"
    assert owner_refs(after) == [], owner_refs(after)
    assert "app.kubernetes.io/managed-by" not in (after["metadata"].get("labels") or {})
    assert "specdeploy.io/applied" not in (after["metadata"].get("annotations") or {})
    assert not [m for m in after["metadata"].get("managedFields") or [] if m.get("manager") == "specdeploy"]
    for key in ("spec", "data"):
        assert after.get(key) == before.get(key), key


# ----------------------------------------------------------------------------- SpeculativeDeployment children

TAKEOVERS = [
    # (tag, the victim's kind for kubectl, its name from the CR's name, its manifest)
    ("service", "service", lambda n: n, victim_service),  # the issue's Service `api`
    ("engine-configmap", "configmap", lambda n: f"{n}-engine", victim_configmap),
    ("pdb", "poddisruptionbudget", lambda n: n, victim_pdb),
]


@pytest.mark.parametrize("tag, kind, victim_name, manifest", TAKEOVERS, ids=[t[0] for t in TAKEOVERS])
def test_a_child_name_taken_by_an_unowned_object_is_left_alone(cluster, tag, kind, victim_name, manifest):
    c = cluster
    name = f"api-{tag}"
    vname = victim_name(name)
    apply(c, manifest(vname))
    before = get(c, kind, vname)
    sd(c, name)
    cond = c.wait_condition(name, "Degraded", "True", "ChildConflict")
    assert f"/{vname} (not owned by specdeploy)" in cond["message"], cond["message"]
    warnings = [e for e in events_for(c, name) if e["reason"] == "ChildConflict"]
    assert warnings and warnings[-1]["type"] == "Warning" and vname in warnings[-1]["message"]
    # all or nothing: the workload would mount (or be exposed by) what is not ours, and a child the pass created
    # before it met the taken name (the engine ConfigMap is created first) was deleted again
    assert not exists(c, "deployment", name)
    for other, cname in child_names(name).items():
        if (other, cname) != (kind, vname):
            wait_for(lambda: not exists(c, other, cname), 30, f"{other}/{cname} to be absent")
    assert_untouched(before, get(c, kind, vname))
    # the CR goes; the victim stays (before issue 24 it was garbage-collected with it)
    c.kubectl("delete", "specdeploy", name, "-n", c.namespace, "--wait=true", timeout=60)
    assert_untouched(before, get(c, kind, vname))


def test_a_name_freed_again_is_then_applied(cluster):
    """Once the other object is gone, the next reconcile creates the children (the condition was the only effect)."""
    c = cluster
    name = "api-freed"
    apply(c, victim_service(name))
    sd(c, name)
    c.wait_condition(name, "Degraded", "True", "ChildConflict")
    c.kubectl("delete", "service", name, "-n", c.namespace)
    wait_for(lambda: exists(c, "deployment", name), 60, f"deployment/{name}")
    svc = wait_for(lambda: get(c, "service", name), 60, f"service/{name}")
    assert owner_refs(svc)[0]["kind"] == "SpeculativeDeployment" and owner_refs(svc)[0]["controller"] is True
    c.wait_condition(name, "Degraded", "False", "AsExpected")


@embedded_only
def test_an_inspector_job_name_taken_is_neither_deleted_nor_read(cluster):
    """`<name>-inspect-target` existed as someone else's Job: before issue 24 it was deleted and replaced."""
    c = cluster
    name = "api-pvc"
    job_name = f"{name}-inspect-target"
    apply(c, victim_job(job_name))
    before = get(c, "job", job_name)
    cr = example_cr(QWEN, name, drafter_cm=f"{name}-d")
    cr["spec"]["target"] = {"model": "qwen3.6-27b", "pvc": {"claimName": "models"}}
    apply(c, configmap(f"{name}-d", example_doc(QWEN, "drafter")), cr)
    cond = c.wait_condition(name, "Degraded", "True", "ChildConflict")
    assert f"Job/{job_name} (not owned by specdeploy)" in cond["message"], cond["message"]
    compat = c.condition(name, "DrafterCompatible")
    assert (compat["status"], compat["reason"]) == ("Unknown", "ChildConflict") and job_name in compat["message"]
    assert_untouched(before, get(c, "job", job_name))
    assert not exists(c, "deployment", name)


# ----------------------------------------------------------------------------- SpeculativeBenchmark children

def bench(name: str, deployment: str, **spec) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "metadata": {"name": name},
            "spec": {"deploymentRef": {"name": deployment},
                     "matrix": {"speculativeTokens": [3], "contexts": [16], "concurrency": [1],
                                "promptsPerPoint": 2, "maxOutputTokens": 8}, **spec}}


def bench_status(c, name: str) -> dict:
    return (get(c, "specbench", name) or {}).get("status") or {}


def wait_failed(c, name: str, timeout: float = 60) -> dict:
    def failed():
        st = bench_status(c, name)
        conds = [x for x in st.get("conditions") or [] if x["type"] == "Failed" and x["status"] == "True"]
        return conds[0] if st.get("phase") == "Failed" and conds else None
    return wait_for(failed, timeout, f"SpeculativeBenchmark {name} Failed")


def test_a_benchmark_results_configmap_name_taken_is_left_alone(cluster):
    """`<bench>-results` existed: before issue 24 it was read as results, then adopted and collected at the TTL."""
    c = cluster
    sd(c, "bdep-r")
    apply(c, victim_configmap("rsweep-results"))
    before = get(c, "configmap", "rsweep-results")
    # finishedAt has whole seconds (as a Job's completion time), so a TTL of N keeps the finished benchmark N-1 to N s:
    # 3 leaves this wait at least 2 s to see it Failed before the TTL deletes it (with 1 it was gone within 0-1 s)
    apply(c, bench("rsweep", "bdep-r", ttlSecondsAfterFinished=3))
    cond = wait_failed(c, "rsweep")
    assert cond["reason"] == "ChildConflict" and "ConfigMap/rsweep-results" in cond["message"], cond
    assert not exists(c, "deployment", "rsweep-baseline")
    events = [e for e in c.get_json("events", "-n", c.namespace).get("items") or []
              if (e.get("involvedObject") or {}).get("name") == "rsweep" and e.get("reason") == "ChildConflict"]
    assert events and events[-1]["type"] == "Warning"
    wait_for(lambda: not exists(c, "specbench", "rsweep"), 60, "the benchmark's TTL")
    assert_untouched(before, get(c, "configmap", "rsweep-results"))


def test_a_benchmark_variant_name_taken_is_neither_benchmarked_nor_deleted(cluster):
    """`<bench>-baseline` existed and was Ready: before issue 24 it was adopted, benchmarked by a client Job,
    then deleted with its Service and ConfigMap; had it never been Ready, the benchmark polled forever."""
    c = cluster
    sd(c, "bdep-v")
    apply(c, victim_deployment("vsweep-baseline"))
    c.mark_workload_ready("vsweep-baseline")
    before = get(c, "deployment", "vsweep-baseline")
    apply(c, bench("vsweep", "bdep-v"))
    cond = wait_failed(c, "vsweep")
    assert cond["reason"] == "ChildConflict" and "Deployment/vsweep-baseline" in cond["message"], cond
    for kind, cname in (("job", "vsweep-baseline-client"), ("service", "vsweep-baseline"),
                        ("configmap", "vsweep-baseline-engine"), ("configmap", "vsweep-baseline-plan")):
        assert not exists(c, kind, cname), f"{kind}/{cname}"
    after = get(c, "deployment", "vsweep-baseline")
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"] and owner_refs(after) == []
    assert after["spec"] == before["spec"]


def test_the_serving_client_image_is_rendered_not_read_from_status(cluster):
    """Whoever may write `speculativedeployments/status` wrote status.resolved.image: before issue 24 the
    client Job of `useServingDeployment` ran that image."""
    c = cluster
    sd(c, "sdep")
    wait_for(lambda: exists(c, "deployment", "sdep"), 60, "deployment/sdep")
    c.mark_workload_ready("sdep")
    rendered = get(c, "deployment", "sdep")["spec"]["template"]["spec"]["containers"][0]["image"]
    apply(c, bench("ssweep", "sdep", useServingDeployment=True))
    variants = wait_for(lambda: bench_status(c, "ssweep").get("variants"), 60, "the benchmark's plan")
    assert variants[-1] == "serving", variants
    # every other variant measured already (a results ConfigMap the benchmark controls): serving is next
    uid = get(c, "specbench", "ssweep")["metadata"]["uid"]
    results = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssweep-results", "ownerReferences": [
        {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "name": "ssweep", "uid": uid,
         "controller": True}]},
        "data": {f"variant-{v}.json": json.dumps({"variant": v, "points": [], "settings": {"name": v}})
                 for v in variants[:-1]}}
    apply(c, results)

    def forged_until_client() -> dict | None:
        # the attacker keeps the forged value in place (the operator's reconcile writes its own back)
        c.kubectl("patch", "specdeploy", "sdep", "-n", c.namespace, "--subresource=status", "--type=merge",
                  "-p", json.dumps({"status": {"resolved": {"image": ATTACKER_IMAGE}}}))
        return get(c, "job", "ssweep-serving-client")

    job = wait_for(forged_until_client, 90, "the serving client Job", interval=0.3)
    [client] = job["spec"]["template"]["spec"]["containers"]
    assert client["image"] == rendered and client["image"] != ATTACKER_IMAGE
