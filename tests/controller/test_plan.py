"""The reconcile planner (controller/plan.py), pure: tables of spec + observed children + configs -> plan.

No API server, no client, no event loop: what to apply, what to delete, which status to write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specdeploy.api.types import Resolved
from specdeploy.api.validation import validate
from specdeploy.controller import plan as pl
from specdeploy.controller import resolve
from specdeploy.controller import status as st
from specdeploy.controller.reports import AcceptanceReport
from specdeploy.core.findings import Finding, Severity, Source
from specdeploy.core.render import selector_labels

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QWEN, KIMI = "qwen3.6-27b-b300-vllm", "kimi-k2.6-rtx-pro-6000-sglang"
ENGINE_LABELS = {"app.kubernetes.io/managed-by": "specdeploy", "app.kubernetes.io/component": "engine"}


def example(name: str, drafter: str | None = None, **spec):
    d = EXAMPLES / name
    body = yaml.safe_load((d / "speculativedeployment.yaml").read_text())
    body["metadata"].update(namespace="ns", uid="uid-1", generation=3)
    for k, v in spec.items():
        body["spec"][k] = {**body["spec"].get(k, {}), **v} if isinstance(v, dict) else v
    cr, problems = validate(body)
    assert cr is not None, problems
    cr.metadata.namespace = "ns"
    target = resolve.Resolved(json.loads((d / "target.config.json").read_text()), "sha256:t", "test")
    dpath = (EXAMPLES / "mistakes" / drafter) if drafter else d / "drafter.config.json"
    drafter_cfg = resolve.Resolved(json.loads(dpath.read_text()), "sha256:d", "test", "c" * 40)
    return body, cr, target, drafter_cfg


def child(kind: str, name: str, instance: str, component: str = "engine", owner: str | None = "uid-1") -> dict:
    refs = [{"uid": owner, "controller": True, "kind": "SpeculativeDeployment", "name": instance}] if owner else []
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "ownerReferences": refs, "labels": {
        **ENGINE_LABELS, "app.kubernetes.io/component": component, "app.kubernetes.io/instance": instance}}}


# ----------------------------------------------------------------- what to apply, what to delete, or why nothing

PLANS = [
    # (id, example, drafter mistake, spec overrides, lws served, observed children, expect)
    ("single-node", QWEN, None, {}, True, {},
     {"apply": ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"], "delete": [], "blocked": None}),
    ("multi-node", KIMI, None, {"nodes": 2}, True, {},
     {"apply": ["ConfigMap", "LeaderWorkerSet", "Service", "PodDisruptionBudget"], "delete": [], "blocked": None}),
    ("multi-node without the LWS API", KIMI, None, {"nodes": 2}, False, {},
     {"apply": [], "delete": [], "blocked": "LeaderWorkerSetMissing"}),
    ("switch to multi-node deletes the Deployment", KIMI, None, {"nodes": 2}, True,
     {("Deployment", "kimi-k26"): child("Deployment", "kimi-k26", "kimi-k26")},
     {"apply": ["ConfigMap", "LeaderWorkerSet", "Service", "PodDisruptionBudget"],
      "delete": [("Deployment", "kimi-k26")], "blocked": None}),
    ("an object of another instance is not deleted", KIMI, None, {"nodes": 2}, True,
     {("Deployment", "kimi-k26"): child("Deployment", "kimi-k26", "someone-else")}, {"delete": []}),
    ("an object of another component is not deleted", KIMI, None, {"nodes": 2}, True,
     {("Deployment", "kimi-k26"): child("Deployment", "kimi-k26", "kimi-k26", component="benchmark")}, {"delete": []}),
    ("an object with our labels that another controls is not deleted", KIMI, None, {"nodes": 2}, True,
     {("Deployment", "kimi-k26"): child("Deployment", "kimi-k26", "kimi-k26", owner="uid-2")}, {"delete": []}),
    ("an unowned object with our labels is not deleted", KIMI, None, {"nodes": 2}, True,
     {("Deployment", "kimi-k26"): child("Deployment", "kimi-k26", "kimi-k26", owner=None)}, {"delete": []}),
    ("a failing check applies nothing", QWEN, "qwen3.6-ids-plus-one.drafter.json", {}, True,
     {("Deployment", "qwen36-27b"): child("Deployment", "qwen36-27b", "qwen36-27b")},
     {"apply": [], "delete": [], "blocked": None, "checked": True}),
]


@pytest.mark.parametrize("name,ex,mistake,spec,lws,children,expect", PLANS, ids=[p[0] for p in PLANS])
def test_plan_reconcile(name, ex, mistake, spec, lws, children, expect):
    body, cr, target, drafter = example(ex, mistake, **spec)
    plan = pl.plan_reconcile(cr, target, drafter, generation=3, children=children, lws=lws)
    if "apply" in expect:
        assert [o["kind"] for o in plan.apply] == expect["apply"]
    assert plan.delete == expect["delete"]
    if "blocked" in expect:
        assert (plan.blocked or (None,))[0] == expect["blocked"]
    assert plan.findings is not None  # checked in every row: configs resolved
    assert plan.resolved is not None and plan.resolved.drafter_revision == "c" * 40
    if plan.apply:
        assert plan.check_failure is None and plan.resolved.config_hash == plan.rendered.config_hash
    elif mistake:
        assert plan.check_failure and plan.resolved.config_hash is None and plan.rendered is None


def test_a_failing_check_names_its_first_error_code():
    _, cr, target, drafter = example(QWEN, "qwen3.6-ids-plus-one.drafter.json")
    plan = pl.plan_reconcile(cr, target, drafter, generation=3, children={})
    assert plan.check_failure == next(f.code for f in plan.findings if f.severity is Severity.ERROR)


@pytest.mark.parametrize("guard,benchmarks,want", [
    (None, {}, None),
    ({"maxConcurrency": 8}, {}, ("True", 8)),
    ({"fromBenchmark": "sweep"}, {}, ("False", None)),  # no such benchmark: nothing rendered, the condition says why
])
def test_plan_reconcile_guard(guard, benchmarks, want):
    _, cr, target, drafter = example(QWEN, speculation={"guard": guard} if guard else {})
    plan = pl.plan_reconcile(cr, target, drafter, generation=1, children={}, benchmarks=benchmarks)
    if want is None:
        assert plan.guard is None and plan.resolved.guard_max_concurrency is None
    else:
        status = {True: "True", False: "False", None: "Unknown"}[plan.guard[0]]
        assert (status, plan.resolved.guard_max_concurrency) == want


def test_blocked_plans_resolve_check_and_apply_nothing():
    invalid = pl.blocked(2, "InvalidSpec", "spec.gpu: required")
    assert (invalid.apply, invalid.delete, invalid.findings, invalid.resolved) == ([], [], None, None)
    assert invalid.blocked == invalid.resolution_error == ("InvalidSpec", "spec.gpu: required")
    waiting = pl.blocked(2, "ConfigMapNotFound", "create it", unresolved=False)
    assert waiting.blocked is None and waiting.resolution_error == ("ConfigMapNotFound", "create it")


# ----------------------------------------------------------------- observation

def workload(kind="Deployment", hash_="h1", gen=2, seen=2, ready=1, updated=1):
    tmpl = {"metadata": {"annotations": {"specdeploy.io/config-hash": hash_}}}
    spec = {"template": tmpl} if kind == "Deployment" else {"leaderWorkerTemplate": {"leaderTemplate": tmpl}}
    return {"kind": kind, "metadata": {"generation": gen}, "spec": spec,
            "status": {"replicas": 1, "readyReplicas": ready, "updatedReplicas": updated, "observedGeneration": seen}}


class _Rendered:
    config_hash = "h1"


@pytest.mark.parametrize("w,rendered,exists,updated", [
    (None, _Rendered, False, False),
    (workload(), _Rendered, True, True),
    (workload("LeaderWorkerSet"), _Rendered, True, True),
    (workload(hash_="old"), _Rendered, True, False),  # still the previous config
    (workload(seen=1), _Rendered, True, False),  # the workload controller has not seen the change yet
    (workload(), None, True, False),  # nothing applied this time: not "updated"
])
def test_observe(w, rendered, exists, updated):
    obs = pl.observe(2, {"spec": {"replicas": 1}}, w, [], rendered)
    assert (obs.workload_exists, obs.workload_updated) == (exists, updated)


# ----------------------------------------------------------------- status

def finding(code="SomeWarning"):
    return Finding(code=code, severity=Severity.WARNING, source=Source.SPEC, path="spec.x", message="m")


def obs(**kw) -> st.Observation:
    base = dict(generation=1, findings=[], workload_exists=True, workload_updated=True, desired_replicas=1,
                replicas=1, ready_replicas=1, updated_replicas=1)
    return st.Observation(**{**base, **kw})


RESOLVED = Resolved(target_config_digest="sha256:t", drafter_config_digest="sha256:d", profile="b300", config_hash="h")


def test_plan_status_writes_once_then_nothing():
    first = pl.plan_status("m", None, obs(), RESOLVED, None, "T1")
    assert first is not None
    assert set(first.status) == {"conditions", "observedGeneration", "replicas", "readyReplicas", "ready", "selector",
                                 "resolved", "acceptedFindings"}
    assert first.status["ready"] == "1/1"
    assert first.status["resolved"] == {"targetConfigDigest": "sha256:t", "drafterConfigDigest": "sha256:d",
                                        "profile": "b300", "configHash": "h"}  # absent fields are omitted
    assert first.status["acceptedFindings"] == []  # checked, nothing accepted: written as empty
    assert first.status["selector"] == ",".join(f"{k}={v}" for k, v in selector_labels("m").items())
    assert {c["type"] for c in first.transitions} == set(st.CONDITION_TYPES)
    assert ("Normal", "AllReplicasReady") in {ev[:2] for _, ev in first.events}
    assert pl.plan_status("m", first.status, obs(), RESOLVED, None, "T2") is None  # idle: no write


@pytest.mark.parametrize("change,field,want", [
    (dict(findings=None), "acceptedFindings", "absent"),  # not checked this time: not written
    (dict(accepted=[finding()]), "acceptedFindings",
     [{"code": "SomeWarning", "severity": "warning", "source": "spec", "path": "spec.x", "message": "m"}]),
    (dict(ready_replicas=0), "readyReplicas", 0),
    # the READY printer column: ready / desired (spec.replicas), as kubectl shows a Deployment's
    (dict(ready_replicas=1, replicas=2, desired_replicas=2), "ready", "1/2"),
    (dict(ready_replicas=0, replicas=0, desired_replicas=0, workload_exists=False), "ready", "0/0"),
])
def test_plan_status_fields(change, field, want):
    got = pl.plan_status("m", None, obs(**change), None, None, "T1")
    assert "resolved" not in got.patch  # None: not resolved, not written
    assert (got.patch.get(field, "absent")) == want


def test_plan_status_nulls_what_a_merge_patch_would_keep():
    guarded = RESOLVED.model_copy(update={"guard_max_concurrency": 8})
    first = pl.plan_status("m", None, obs(), guarded, AcceptanceReport(acceptance={"length": 3.0,
                                                                                   "baseline": {"length": 3}}), "T1")
    assert first.status["resolved"]["guardMaxConcurrency"] == 8
    second = pl.plan_status("m", first.status, obs(), RESOLVED, AcceptanceReport(acceptance={"length": 3.5}), "T2")
    assert second.patch["resolved"]["guardMaxConcurrency"] is None  # the guard went: null it
    assert second.patch["acceptance"] == {"length": 3.5, "baseline": None}  # a reset baseline: null it
    assert "guardMaxConcurrency" not in second.status["resolved"]
    cleared = pl.plan_status("m", second.status, obs(), RESOLVED, AcceptanceReport(), "T3")
    assert cleared.patch["acceptance"] is None


def test_plan_status_keeps_transition_times_and_reports_only_transitions():
    first = pl.plan_status("m", None, obs(), None, None, "T1")
    second = pl.plan_status("m", first.status, obs(ready_replicas=0), None, None, "T2")
    times = {c["type"]: c["lastTransitionTime"] for c in second.status["conditions"]}
    assert times["Ready"] == "T2" and times["DrafterCompatible"] == "T1"
    assert {c["type"] for c in second.transitions} == {"Ready", "Progressing"}  # Degraded stays AsExpected


def test_internal_error_status():
    got = pl.plan_status("m", None, obs(internal_error=("ZeroDivisionError", "boom")), None, None, "T1")
    conds = {c["type"]: c for c in got.status["conditions"]}
    assert conds["Ready"]["reason"] == "InternalError" and "ZeroDivisionError: boom" in conds["Ready"]["message"]


def test_planner_imports_no_client():
    import ast

    tree = ast.parse(Path(pl.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    for forbidden in ("kube", "kopf", "kubernetes", "aiohttp", "asyncio", "executor", "reconciler"):
        assert not any(n == forbidden or n.endswith("." + forbidden) or n.startswith(forbidden + ".") for n in names), \
            forbidden


@pytest.mark.parametrize("owners,want", [
    (None, None),  # absent: may be created
    ([{"uid": "uid-1", "controller": True}], None),  # this deployment's
    ([{"uid": "other", "controller": True}], "controlled by another object"),  # another controller's
    ([], "not owned by specdeploy"),  # nobody's (a person's Service `api`): never adopted (issue 24)
    ([{"uid": "other", "controller": False}], "not owned by specdeploy"),  # only another's owner reference
    ([{"uid": "uid-1", "controller": False}], "owned by this resource but not as its controller"),
])
def test_ownership_gate(owners, want):
    """What plan.obsolete and the executor ask before touching a child (was ``plan.foreign``, which let an
    unowned object be adopted)."""
    from specdeploy.controller import ownership

    actual = None if owners is None else {"metadata": {"ownerReferences": owners}}
    assert ownership.conflict(actual, "uid-1") == want
