"""The benchmark step planner (controller/benchstep.py), pure: a View of what was observed -> the reads it needs
(Need) and the Step. Each table feeds a world of answers (no API, no asyncio) and checks the step and the reads
the planner asked for, in order: the policy gate before any resolution, a claim before a child is read for a
decision, the pods only while an engine is not Ready, the log only once the client Job ended."""

from __future__ import annotations

import copy
import json
import time

import pytest

from specdeploy.controller import benchstep as bs
from specdeploy.core.bench.result import format_result_line
from specdeploy.core.policy import TenancyPolicy
from test_benchmark_controller import BENCH, DEP, NS, TINY, result

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NAME = BENCH["metadata"]["name"]
OWN = [{"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "name": NAME, "uid": "bench-uid",
        "controller": True, "blockOwnerDeletion": True}]
VARIANT = ["Job", "ConfigMap", "Deployment", "Service", "ConfigMap", "NetworkPolicy"]


def ts(ago: float) -> str:
    return bs.stamp(NOW - ago)


def doc(model: str) -> dict:
    return json.loads(TINY[f"{model}/config.json"])


def own(kind: str, name: str, **extra) -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": f"u-{name}", "ownerReferences": OWN,
                                       "creationTimestamp": ts(10)}, **extra}


class World:
    """The answers to the planner's reads; ``needs``: what it asked for, in order."""

    def __init__(self, **kw):
        self.pvcs: dict = kw.get("pvcs", {})
        self.resolve: dict = {"target": doc("tiny/target-flat"), "drafter": doc("tiny/dflash-accept-all"),
                              **kw.get("resolve", {})}
        self.children: dict = kw.get("children", {})  # (kind, name) -> obj, or ("taken", why)
        self.serving = kw.get("serving")
        self.pods: list = kw.get("pods", [])
        self.prompts = kw.get("prompts")
        self.log: str = kw.get("log", "")
        self.needs: list[tuple[str, tuple]] = []

    def answer(self, v: bs.View, n: bs.Need) -> None:
        self.needs.append((n.what, n.names or (n.label,)))
        if n.what == "pvcs":
            v.pvc_labels.update({c: self.pvcs.get(c) for c in n.names})
        elif n.what == "resolve":
            v.resolved[n.label] = self.resolve[n.label]
        elif n.what == "claim":
            for name in n.names:
                got = self.children.get(name)
                v.children[name] = (None, got[1]) if isinstance(got, tuple) else (got, None)
                if isinstance(got, tuple):
                    break
        elif n.what == "serving":
            v.serving = self.serving
        elif n.what == "pods":
            v.pods = self.pods
        elif n.what == "prompts":
            v.prompts = self.prompts
        elif n.what == "log":
            v.log = self.log


def bench(spec=None, status=None, **meta) -> dict:
    body = copy.deepcopy(BENCH)
    body["metadata"].update({"creationTimestamp": ts(100), **meta})
    if spec:
        spec(body["spec"])
    if status is not None:
        body["status"] = status
    return body


def deployment(change=None) -> dict:
    dep = {**copy.deepcopy(DEP), "metadata": {"name": "tiny", "namespace": NS, "uid": "dep-uid"}}
    if change:
        change(dep["spec"])
    return dep


def view(body=None, *, dep="default", **kw) -> bs.View:
    body = body if body is not None else bench()
    kw.setdefault("limits", bs.Limits(poll=3.0, ready=100.0, client=200.0, crash_restarts=3))
    return bs.View((NS, NAME), body, NOW, deployment=deployment() if dep == "default" else dep,
                   others=kw.pop("others", {(NS, NAME): body}), **kw)


def settle(v: bs.View, w: World) -> bs.Step:
    for _ in range(40):
        out = bs.plan_benchmark_step(v)
        if isinstance(out, bs.Step):
            return out
        assert isinstance(out, bs.Need), out
        w.answer(v, out)
    raise AssertionError("the planner never settled")


def results_cm(*variants: str) -> dict:
    data = {f"variant-{x}.json": bs.record_text(_plan(), _var(x), result(x, None, 100) if x == "baseline" else
                                                result(x, 3.5, 150))
            for x in variants}
    return own("ConfigMap", f"{NAME}-results", data=data)


def _plan():
    from specdeploy.api.types import SpeculativeDeployment
    from specdeploy.api import benchmark as B
    from specdeploy.core.bench.objects import plan_for

    cr, _ = B.validate(bench())
    dcr = SpeculativeDeployment.model_validate(deployment())
    return plan_for(cr.spec, dcr, doc("tiny/target-flat"), doc("tiny/dflash-accept-all"))


def _var(name: str):
    return next(x for x in _plan().variants if x.name == name)


def running(**extra) -> dict:
    return {"phase": "Running", "current": "baseline: client running", **extra}


def reason(step: bs.Step) -> str | None:
    return step.failed.reason if step.failed else None


def baseline(ready=True, age=10.0) -> dict:
    dep = own("Deployment", f"{NAME}-baseline", status={"readyReplicas": 1 if ready else 0})
    dep["metadata"]["creationTimestamp"] = ts(age)
    return {("Deployment", f"{NAME}-baseline"): dep}


def job(status: dict, age=10.0) -> dict:
    j = own("Job", f"{NAME}-baseline-client", status=status)
    j["metadata"]["creationTimestamp"] = ts(age)
    return {("Job", f"{NAME}-baseline-client"): j}


# ----------------------------------------------------------------- before a variant: waits and refusals


def test_not_synced_judges_nothing():
    w = World()
    step = settle(view(synced=False, dep=None), w)
    assert step == bs.Step(requeue=3.0) and w.needs == []


def test_another_benchmark_of_the_deployment_goes_first():
    older = bench(name="older", creationTimestamp=ts(200))
    body = bench()
    w = World()
    step = settle(view(body, others={(NS, NAME): body, (NS, "older"): older}), w)
    assert step.status.fields["phase"] == "Pending" and step.requeue == 15.0 and w.needs == []
    assert step.status.running[:2] == ("False", "AnotherBenchmarkRunning") and "older" in step.status.running[2]


@pytest.mark.parametrize("other_meta, other_status, goes_first", [
    ({"creationTimestamp": ts(200)}, None, True),  # older
    ({"creationTimestamp": ts(50)}, None, False),  # younger
    ({"creationTimestamp": ts(50)}, {"phase": "Running"}, True),  # younger but running
    ({"creationTimestamp": ts(200)}, {"phase": "Complete"}, False),  # finished
    ({"creationTimestamp": ts(200)}, {"phase": "Failed"}, False),
    ({"creationTimestamp": ts(200), "deletionTimestamp": ts(1)}, None, False),  # going away
    ({"creationTimestamp": ts(200), "namespace": "elsewhere"}, None, False),
], ids=["older", "younger", "younger-running", "complete", "failed", "deleting", "other-namespace"])
def test_ahead_of(other_meta, other_status, goes_first):
    other = bench(status=other_status, name="other", **other_meta)
    key = (other_meta.get("namespace", NS), "other")
    assert (bs.ahead_of((NS, NAME), bench(), {key: other}, "tiny") == "other") is goes_first
    assert bs.ahead_of((NS, NAME), bench(), {key: other}, "another-deployment") is None


def test_a_missing_deployment_waits_pending_and_fails_a_running_benchmark():
    step = settle(view(dep=None), World())
    assert step.status.fields == {"phase": "Pending", "current": step.status.fields["current"]} and step.failed is None
    assert step.requeue == 15.0 and step.status.running[1] == "DeploymentNotFound"
    step = settle(view(bench(status=running()), dep=None), World())
    assert reason(step) == "DeploymentNotFound" and step.requeue is None
    assert step.failed.message.endswith("(while variant baseline: client running)")
    assert step.status.fields["phase"] == "Failed" and step.status.condition[:3] == ("Failed", "True", "DeploymentNotFound")


@pytest.mark.parametrize("change, why", [
    (lambda s: s.pop("deploymentRef"), "InvalidSpec"),
    (lambda s: s["matrix"].update(speculativeTokens=[5]), "InvalidMatrix"),
], ids=["invalid-spec", "invalid-matrix"])
def test_a_bad_benchmark_fails_and_writes_nothing(change, why):
    step = settle(view(bench(spec=change)), World())
    assert reason(step) == why and step.put == [] and step.create is None


def test_an_invalid_deployment_fails():
    step = settle(view(dep=deployment(lambda s: s.pop("target"))), World())
    assert reason(step) == "DeploymentInvalid" and "SpeculativeDeployment tiny" in step.failed.message


def test_a_deployment_the_policy_refuses_is_never_resolved():
    w = World()
    step = settle(view(dep=deployment(lambda s: s["engine"].update(image="evil.io/miner:1")),
                       policy=TenancyPolicy(token_secrets=("hf-token",))), w)
    assert reason(step) == "PolicyRefused" and "PolicyImageNotAllowed" in step.failed.message
    assert not [n for n in w.needs if n[0] == "resolve"], w.needs


def test_the_claim_label_rule_reads_the_claims_labels_first():
    methods = [{"method": "eagle3", "drafter": {"model": "d", "pvc": {"claimName": "team-models"}}}]
    policy = TenancyPolicy(pvc_label=("specdeploy.io/models", "true"))
    for labels, refused in (({"specdeploy.io/models": "true"}, False), ({"team": "b"}, True), (None, True)):
        w = World(pvcs={"team-models": labels})
        step = settle(view(bench(spec=lambda s: s["matrix"].update(methods=methods)), policy=policy), w)
        assert w.needs[0] == ("pvcs", ("team-models",))
        assert (reason(step) == "PolicyRefused") is refused, step


def test_an_unresolved_config_waits_with_its_delay():
    w = World(resolve={"drafter": bs.Wait("InspectionPending", "inspecting", 5.0)})
    step = settle(view(), w)
    assert step.requeue == 5.0 and step.status.fields["phase"] == "Pending"
    assert step.status.running[1:] == ("InspectionPending", "SpeculativeDeployment tiny: inspecting")
    assert [n[0] for n in w.needs] == ["resolve", "resolve"]


def test_a_results_configmap_of_another_fails_as_child_conflict():
    w = World(children={("ConfigMap", f"{NAME}-results"): ("taken", "not owned by specdeploy")})
    step = settle(view(), w)
    assert reason(step) == "ChildConflict" and step.put == [] and step.delete == []
    assert step.failed.message.startswith(f"ConfigMap/{NAME}-results (not owned by specdeploy): the name is taken")


# ----------------------------------------------------------------- a variant's engine


def test_a_variant_starts_with_its_objects_the_workload_among_them():
    w = World()
    step = settle(view(), w)
    objects = (("ConfigMap", f"{NAME}-baseline-engine"), ("Deployment", f"{NAME}-baseline"),
               ("Service", f"{NAME}-baseline"))
    assert tuple((o["kind"], o["metadata"]["name"]) for o in step.put) == objects  # the executor creates the workload last
    assert step.status.fields["phase"] == "Running" and step.status.fields["current"] == "baseline: starting the engine"
    assert step.status.fields["startedAt"] == bs.stamp(NOW) and step.requeue == 3.0
    assert step.status.event[1] == "VariantStarting" and step.status.running == (
        "True", "Measuring", "baseline: starting the engine (0/2 measured)")
    assert w.needs[-1] == ("claim", objects) and not [n for n in w.needs if n[0] in ("pods", "log")]
    step = settle(view(network_policy=("monitoring",)), World())
    [np] = [o for o in step.put if o["kind"] == "NetworkPolicy"]
    assert np["metadata"]["name"] == f"{NAME}-baseline" and len(step.put) == 4


def test_a_variant_name_taken_fails_before_anything_is_put():
    w = World(children={("Deployment", f"{NAME}-baseline"): ("taken", "controlled by another object")})
    step = settle(view(), w)
    assert reason(step) == "ChildConflict" and step.put == [] and f"Deployment/{NAME}-baseline" in step.failed.message
    assert len(w.needs) == 4 and w.needs[-1][0] == "claim"  # the first name taken ends the claims
    assert step.delete == [] and step.failed.delete == ()


@pytest.mark.parametrize("age, pods, outcome", [
    (10.0, [], None),  # young: waits
    (101.0, [], "VariantNotReady"),  # past the ready deadline (from the Deployment's creation)
    (10.0, [{"metadata": {"name": "p1"}, "status": {"containerStatuses": [{"name": "engine", "restartCount": 3,
             "lastState": {"terminated": {"exitCode": 132, "reason": "Error", "message": "illegal instruction"}}}]}}],
     "VariantCrashing"),
    (10.0, [{"metadata": {"name": "p1"}, "status": {"containerStatuses": [{"name": "engine", "restartCount": 2,
             "lastState": {"terminated": {"exitCode": 1}}}]}}], None),  # under the restart limit
], ids=["young", "late", "crashing", "restarting"])
def test_an_engine_not_ready(age, pods, outcome):
    w = World(children=baseline(ready=False, age=age), pods=pods)
    body = bench(status=running(startedAt="2999-01-01T00:00:00Z"))  # status moves no deadline
    step = settle(view(body), w)
    assert w.needs[-1] == ("pods", ("app.kubernetes.io/instance=tiny-sweep-baseline",))
    assert reason(step) == outcome
    if outcome is None:
        assert step == bs.Step(requeue=3.0)
    else:
        assert [k for k, _ in step.delete] == VARIANT and step.status.fields["phase"] == "Failed"
        assert step.status.condition[2] == outcome and step.status.running == ("False", outcome, step.failed.message)
    if outcome == "VariantCrashing":
        assert "exit code 132" in step.failed.message and "illegal instruction" in step.failed.message


def test_crash_message_counts_init_containers_and_needs_a_last_state():
    init = {"metadata": {"name": "p"}, "status": {"initContainerStatuses": [
        {"name": "fetch", "restartCount": 5, "lastState": {"terminated": {"exitCode": 2}}}]}}
    assert "container fetch of pod p restarted 5 times (last exit code 2, no reason)" in bs.crash_message([init], 3)
    no_last = {"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "e", "restartCount": 9}]}}
    assert bs.crash_message([no_last], 3) is None


# ----------------------------------------------------------------- the client


def test_a_ready_engine_gets_its_plan_and_client_job():
    w = World(children=baseline())
    step = settle(view(), w)
    [cm] = step.put
    assert cm["metadata"]["name"] == f"{NAME}-baseline-plan" and step.create["kind"] == "Job"
    assert step.create["metadata"]["name"] == f"{NAME}-baseline-client"
    plan = json.loads(cm["data"]["plan.json"])
    assert plan["baseUrl"] == f"http://{NAME}-baseline.{NS}.svc:8000"
    assert step.status.fields["current"] == "baseline: client running" and step.status.event[1] == "ClientStarted"
    assert [n for n in w.needs if n[0] == "claim"][-2:] == [("claim", (("Job", f"{NAME}-baseline-client"),)),
                                                            ("claim", (("ConfigMap", f"{NAME}-baseline-plan"),))]
    assert not [n for n in w.needs if n[0] in ("pods", "log", "prompts")]


@pytest.mark.parametrize("status, age, log, outcome, words", [
    ({}, 10.0, "", None, None),  # running
    ({}, 201.0, "", "ClientTimedOut", "ran past 200s"),
    ({"failed": 1}, 10.0, "a\nerror: the engine does not answer\n", "ClientFailed", "the engine does not answer"),
    ({"conditions": [{"type": "Failed", "status": "True"}]}, 10.0, "", "ClientFailed", "its log ends: (empty)"),
    ({"succeeded": 1}, 10.0, "Traceback: boom\n", "ClientResultInvalid", "no SPECDEPLOY_BENCH_RESULT"),
    ({"succeeded": 1}, 10.0, format_result_line(result("k3", 3.0, 1)) + "\n", "ClientResultInvalid",
     "reported variant k3, not baseline"),
], ids=["running", "timed-out", "failed", "failed-condition", "no-result", "another-variant"])
def test_a_client_job(status, age, log, outcome, words):
    w = World(children={**baseline(), **job(status, age)}, log=log)
    step = settle(view(bench(status=running(startedAt="2999-01-01T00:00:00Z"))), w)
    assert reason(step) == outcome
    if outcome is None:
        assert step == bs.Step(requeue=3.0) and ("log", (f"{NAME}-baseline-client",)) not in w.needs
    else:
        assert words in step.failed.message and [k for k, _ in step.delete] == VARIANT
    if outcome in ("ClientFailed", "ClientResultInvalid"):
        assert w.needs[-1] == ("log", (f"{NAME}-baseline-client",))


def test_a_measured_variant_is_recorded_and_deleted():
    doc_ = result("baseline", None, 100)
    doc_["points"].append({**doc_["points"][0], "id": "baseline/c99/n9"})  # not planned: dropped
    w = World(children={**baseline(), **job({"succeeded": 1})}, log="start\n" + format_result_line(doc_) + "\n")
    step = settle(view(bench(status=running())), w)
    [cm] = step.put
    stored = json.loads(cm["data"]["variant-baseline.json"])
    assert [p["id"] for p in stored["points"]] == ["baseline/c32/n1", "baseline/c32/n2"]
    assert {p["variant"] for p in stored["points"]} == {"baseline"} and stored["points"][0]["numPrompts"] == 4
    assert stored["settings"]["name"] == "baseline"
    assert step.delete == bs.variant_children(NAME, "baseline") and step.status is None
    assert step.events == [("Normal", "VariantMeasured", "variant baseline measured (1/2)")] and step.requeue == 0.05


@pytest.mark.parametrize("cm, outcome, words", [
    (None, "PromptsNotFound", "labelled specdeploy.io/prompts=true"),
    ({"metadata": {"name": "p", "labels": {"specdeploy.io/prompts": "false"}}, "data": {"prompts.jsonl": "x"}},
     "PromptsNotFound", "labelled specdeploy.io/prompts=true"),
    ({"metadata": {"name": "p", "labels": {"specdeploy.io/prompts": "true"}}, "data": {}}, "PromptsNotFound",
     "has no key prompts.jsonl"),
    ({"metadata": {"name": "p", "labels": {"specdeploy.io/prompts": "true"}}, "data": {"prompts.jsonl": "not json"}},
     "PromptsInvalid", "spec.prompts.configMapRef"),
    ({"metadata": {"name": "p", "labels": {"specdeploy.io/prompts": "true"}}, "data": {"prompts.jsonl": "{}"}},
     None, None),
], ids=["absent", "unmarked", "no-key", "invalid-requests", "marked"])
def test_configmap_prompts(cm, outcome, words):
    fmt = "requests" if outcome == "PromptsInvalid" else None
    ref = {"name": "p", **({"format": fmt} if fmt else {})}
    w = World(children=baseline(), prompts=cm)
    step = settle(view(bench(spec=lambda s: s.update(prompts={"configMapRef": ref}))), w)
    assert ("prompts", ("p",)) in w.needs
    assert reason(step) == outcome
    if outcome:
        assert words in step.failed.message and step.create is None and [k for k, _ in step.delete] == VARIANT
    else:
        assert step.put[0]["data"]["prompts.jsonl"] == "{}" and step.create is not None


# ----------------------------------------------------------------- serving, the end, the TTL


def test_the_serving_deployment_is_measured_only_when_its_own_and_ready():
    spec = lambda s: s.update(useServingDeployment=True)  # noqa: E731
    children = {("ConfigMap", f"{NAME}-results"): results_cm("baseline", "k3")}
    mine = {"kind": "Deployment", "metadata": {"name": "tiny", "ownerReferences": [{"uid": "dep-uid", "controller": True}]},
            "status": {"readyReplicas": 1}}
    for serving, ok in ((mine, True), ({**mine, "status": {}}, False), (None, False),
                        ({**mine, "metadata": {"name": "tiny"}}, False)):
        w = World(children=children, serving=serving)
        step = settle(view(bench(spec=spec)), w)
        assert ("serving", ("tiny",)) in w.needs
        if ok:
            assert step.create["metadata"]["name"] == f"{NAME}-serving-client"
            assert json.loads(step.put[0]["data"]["plan.json"])["baseUrl"] == f"http://tiny.{NS}.svc:8000"
        else:
            assert reason(step) == "ServingNotReady" and step.delete == []


def test_every_variant_measured_completes_with_the_recommendation():
    w = World(children={("ConfigMap", f"{NAME}-results"): results_cm("baseline", "k3")})
    step = settle(view(bench(status=running())), w)
    [cm] = step.put
    full = json.loads(cm["data"][bs.RESULTS_KEY])
    assert set(cm["data"]) == {"variant-baseline.json", "variant-k3.json", bs.RESULTS_KEY}
    assert full["recommendation"]["best"] == "k3" and len(full["points"]) == 4
    f = step.status.fields
    assert f["phase"] == "Complete" and f["progress"] == "2/2" and f["current"] is None
    assert f["finishedAt"] == bs.stamp(NOW) and f["resultsConfigMap"] == f"{NAME}-results"
    assert {(p["variant"], p["concurrency"], p.get("tau"), p.get("equalToBaseline")) for p in f["points"]} == {
        ("baseline", 1, None, None), ("baseline", 2, None, None), ("k3", 1, 3.5, True), ("k3", 2, 3.5, True)}
    assert step.status.condition == ("Complete", "True", "Measured", full["recommendation"]["summary"])
    assert step.failed is None and step.delete == [] and step.requeue is None


def test_a_results_document_over_the_budget_drops_the_digests():
    done = {v: json.loads(results_cm("baseline", "k3")["data"][f"variant-{v}.json"]) for v in ("baseline", "k3")}
    for d in done.values():
        for p in d["points"]:
            p["outputDigests"] = ["f" * 64] * 4000
    from specdeploy.core.bench.render import BenchOwner

    step = bs.plan_finish(BenchOwner(NAME, NS, "bench-uid"), "tiny", _plan(), done, {"variant-k3.json": "x"}, NOW)
    full = json.loads(step.put[0]["data"][bs.RESULTS_KEY])
    assert full["digestsOmitted"] is True and not any("outputDigests" in p for p in full["points"])
    assert step.put[0]["data"]["variant-k3.json"] == "x"


@pytest.mark.parametrize("ttl, finished, expected", [
    (60, ts(61), bs.Step(delete_benchmark=True)),
    (60, ts(10), bs.Step(requeue=50.0)),
    (None, ts(1000), bs.Step()),
    (True, ts(1000), bs.Step()),  # a bool is not a TTL
], ids=["expired", "not-yet", "none", "bool"])
def test_a_finished_benchmark_expires_after_its_ttl(ttl, finished, expected):
    for phase in ("Complete", "Failed"):
        body = bench(spec=lambda s: s.update(ttlSecondsAfterFinished=ttl) if ttl is not None else None,
                     status={"phase": phase, "finishedAt": finished})
        w = World()
        assert settle(view(body), w) == expected and w.needs == []


# ----------------------------------------------------------------- status


def test_plan_status_writes_only_a_change_and_posts_the_transitions():
    write = bs.StatusWrite({"phase": "Failed", "current": None}, condition=("Failed", "True", "ClientFailed", "boom"),
                           running=("False", "ClientFailed", "boom"))
    first = bs.plan_status({"phase": "Running"}, 2, write, NOW)
    assert first.patch["status"]["current"] is None and "current" not in first.status
    assert [c["type"] for c in first.status["conditions"]] == ["Failed", "Running"]
    assert first.events == [("Warning", "ClientFailed", "boom")]  # the end's own event, not Running's
    assert bs.plan_status(first.status, 2, write, NOW + 5) is None  # nothing changed: no write
    wait = bs.StatusWrite({"phase": "Pending"}, running=("False", "DeploymentNotFound", "gone"))
    assert bs.plan_status({}, 1, wait, NOW).events == [("Normal", "DeploymentNotFound", "gone")]
    stage = bs.StatusWrite({"phase": "Running", "startedAt": "t1"}, running=("True", "Measuring", "m"),
                           event=("Normal", "ClientStarted", "c"))
    done = bs.plan_status({}, 1, stage, NOW)
    assert done.events == [("Normal", "ClientStarted", "c")]
    assert bs.plan_status(done.status, 1, bs.StatusWrite({**stage.fields, "startedAt": "t2"}, running=stage.running),
                          NOW) is None  # startedAt alone never writes
    nested = bs.plan_status({}, 1, bs.StatusWrite({"points": [{"a": 1, "b": None}]}), NOW)
    assert nested.patch["status"]["points"] == [{"a": 1}]


def test_cleanup_keeps_the_results_configmap():
    assert bs.cleanup_target({"metadata": {"labels": {"app.kubernetes.io/component": "engine"}}})
    assert not bs.cleanup_target({"metadata": {"labels": {"app.kubernetes.io/component": "benchmark-results"}}})


def test_the_planner_is_pure():
    """No clock, no environment: the same view plans the same step (the controller passes now and the limits)."""
    a, b = settle(view(), World()), settle(view(), World())
    assert a == b and a.status.fields["startedAt"] == bs.stamp(NOW) != bs.stamp(time.time())


def test_a_method_variants_own_spec_is_gated_again_before_its_drafter_resolves(monkeypatch):
    """Defence in depth: the variant's spec as it will run passes the gate (core/render/gate.py) itself, even when
    the benchmark-wide check (benchmark_refusals) let it through."""
    monkeypatch.setattr(bs, "benchmark_refusals", lambda *a, **k: [])
    methods = [{"method": "eagle3", "drafter": {"model": "z/d", "tokenSecretRef": {"name": "prod-db", "key": "t"}}}]
    body = bench(spec=lambda s: s["matrix"].update(methods=methods, baseline=False))
    w = World(children={("ConfigMap", f"{NAME}-results"): own("ConfigMap", f"{NAME}-results",
                                                              data={"variant-k3.json": "{}"})})  # k3 measured
    step = settle(view(body, policy=TenancyPolicy(token_secrets=("hf-token",))), w)
    assert reason(step) == "PolicyRefused" and step.failed.message.startswith("variant eagle3: ")
    assert [n[1] for n in w.needs if n[0] == "resolve"] == [("target",), ("drafter",)]  # not drafter:eagle3
