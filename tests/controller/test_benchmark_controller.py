"""BenchmarkController against an in-memory API: the step machine, restarts, failures (no cluster).

The embedded-cluster test (e2e/test_e2e_benchmark.py) runs the whole loop with a real `kopf run`;
these tables pin the decisions of each step: what is created once, what a restart finds and
continues, what ends the benchmark as Failed (and that nothing of the variant is left)."""

from __future__ import annotations

import asyncio
import copy
import json
from types import SimpleNamespace

import pytest
import yaml

from testkit import EXAMPLES
from specdeploy.controller.benchmark import BenchmarkController
from specdeploy.controller.kube import KubeError
from specdeploy.core.bench.result import format_result_line
from specdeploy_dev import tinymodels

TINY = tinymodels.build_tiny_models()
NS = "default"
DEP = yaml.safe_load((EXAMPLES / "dev" / "tiny-cpu.yaml").read_text())
BENCH = yaml.safe_load((EXAMPLES / "dev" / "tiny-benchmark.yaml").read_text())
BENCH["metadata"].update({"namespace": NS, "uid": "bench-uid", "generation": 1})


class Api:
    """Objects by (kind, ns, name); writes recorded in order (a create refused with 409 is recorded as
    ``create-409``: the server wrote nothing). Every object gets a uid; a delete with a uid precondition that
    does not match is refused with 409, as the API server does."""

    def __init__(self):
        self.objs: dict[tuple[str, str, str], dict] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.logs: dict[str, str] = {}
        self.deletes: list[tuple[str, str, str | None]] = []  # (kind, name, the uid precondition)
        self._uids = 0

    def _uid(self) -> str:
        self._uids += 1
        return f"uid-{self._uids}"

    async def get(self, kind, ns, name):
        o = self.objs.get((kind, ns, name))
        return copy.deepcopy(o) if o else None

    async def list(self, kind, ns, label_selector=None):
        want = dict(kv.split("=", 1) for kv in (label_selector or "").split(",") if kv)
        return [copy.deepcopy(o) for (k, n, _), o in self.objs.items() if k == kind and n == ns
                and all(((o.get("metadata") or {}).get("labels") or {}).get(a) == b for a, b in want.items())]

    async def apply(self, obj, force=False):
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.writes.append(("apply", key[0], key[2]))
        old = self.objs.get(key) or {"metadata": {"uid": self._uid()}}
        self.objs[key] = {**copy.deepcopy(old), **copy.deepcopy(obj),
                          "metadata": {**copy.deepcopy(obj["metadata"]), "uid": old["metadata"]["uid"]}}
        return copy.deepcopy(self.objs[key])

    async def create(self, obj):
        key = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key in self.objs:
            self.writes.append(("create-409", key[0], key[2]))
            raise KubeError(409, "AlreadyExists", "exists")
        self.writes.append(("create", key[0], key[2]))
        self.objs[key] = {**copy.deepcopy(obj), "metadata": {**copy.deepcopy(obj["metadata"]), "uid": self._uid()}}
        return copy.deepcopy(self.objs[key])

    async def delete(self, kind, ns, name, propagation="Background", uid=None):
        self.deletes.append((kind, name, uid))
        o = self.objs.get((kind, ns, name))
        if o is not None and uid is not None and (o.get("metadata") or {}).get("uid") != uid:
            raise KubeError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                            f"UID in object meta: {o['metadata'].get('uid')}")
        self.writes.append(("delete", kind, name))
        self.objs.pop((kind, ns, name), None)

    async def patch(self, kind, ns, name, patch, sub=None, content_type=None):
        self.writes.append(("patch", kind, name))
        return patch

    async def log(self, ns, pod, container=None, tail_lines=None, limit_bytes=None):
        return self.logs.get(pod, "")


class Resolver:
    def __init__(self):
        self.calls: list[tuple[str, str]] = []  # (role, model): what was resolved, in order

    async def resolve(self, admitted, role):
        from specdeploy.core.render import Admitted

        assert isinstance(admitted, Admitted)  # the controller resolves an admitted spec only
        cr = admitted.cr
        src = cr.spec.target if role == "target" else cr.spec.drafter
        self.calls.append((role, src.model))
        return SimpleNamespace(doc=json.loads(TINY[f"{src.model}/config.json"]))


def controller(api: Api, with_deployment: bool = True) -> tuple[BenchmarkController, dict]:
    deps = {(NS, "tiny"): {**copy.deepcopy(DEP), "metadata": {"name": "tiny", "namespace": NS}}} if with_deployment else {}
    bc = BenchmarkController(api, Resolver(), deployments=deps)
    body = copy.deepcopy(BENCH)
    bc.bodies[(NS, BENCH["metadata"]["name"])] = body
    return bc, body


def rendered_image() -> str:
    """The image the reconciler renders for the tiny deployment (what the serving client must run)."""
    from specdeploy.api.types import SpeculativeDeployment
    from specdeploy.core.render import render

    cr = SpeculativeDeployment.model_validate({**copy.deepcopy(DEP), "metadata": {"name": "tiny", "namespace": NS}})
    docs = [json.loads(TINY[f"{src.model}/config.json"]) for src in (cr.spec.target, cr.spec.drafter)]
    return render(cr, *docs).image


def step(bc) -> float | None:
    return asyncio.run(bc.reconcile((NS, BENCH["metadata"]["name"])))


def ready(api: Api, variant: str) -> None:
    api.objs[("Deployment", NS, f"tiny-sweep-{variant}")]["status"] = {"readyReplicas": 1}


def finish_job(api: Api, variant: str, doc: dict | None = None, *, failed: bool = False, log: str | None = None) -> None:
    job = f"tiny-sweep-{variant}-client"
    api.objs[("Job", NS, job)]["status"] = {"failed": 1} if failed else {"succeeded": 1}
    pod = {"kind": "Pod", "metadata": {"name": f"{job}-x1", "namespace": NS, "labels": {"job-name": job},
                                       "creationTimestamp": "2026-01-01T00:00:00Z"}}
    api.objs[("Pod", NS, pod["metadata"]["name"])] = pod
    api.logs[pod["metadata"]["name"]] = log if log is not None else "starting\n" + format_result_line(doc) + "\n"


def result(variant: str, tau: float | None, tps: float, digests=("a" * 64,) * 4) -> dict:
    pts = []
    for n in (1, 2):
        p = {"id": f"{variant}/c32/n{n}", "context": 32, "concurrency": n, "completed": 4, "failed": 0,
             "outputTokensPerSecond": tps * n, "outputDigests": list(digests)}
        if tau:
            p["acceptance"] = {"length": tau, "perPosition": [0.9, 0.8, 0.7], "drafts": 10}
        pts.append(p)
    return {"variant": variant, "client": "test", "points": pts}


def test_a_benchmark_runs_variant_after_variant_and_completes():
    api = Api()
    bc, body = controller(api)
    assert step(bc) > 0  # baseline: engine objects created (a POST each, the workload last), never applied over a GET
    assert [w for w in api.writes if w[1] != "SpeculativeBenchmark"] == [
        ("create", "ConfigMap", "tiny-sweep-baseline-engine"), ("create", "Service", "tiny-sweep-baseline"),
        ("create", "Deployment", "tiny-sweep-baseline")]
    assert body["status"]["phase"] == "Running" and body["status"]["current"] == "baseline: starting the engine"
    dep = api.objs[("Deployment", NS, "tiny-sweep-baseline")]
    assert dep["metadata"]["ownerReferences"][0]["uid"] == "bench-uid"
    n = len(api.writes)
    step(bc)  # not ready yet: nothing written
    assert api.writes[n:] == []
    ready(api, "baseline")
    step(bc)  # ready: the plan and the Job
    plan = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-baseline-plan")]["data"]["plan.json"])
    assert plan["baseUrl"] == "http://tiny-sweep-baseline.default.svc:8000" and plan["model"] == "tiny/target-flat"
    assert [p["id"] for p in plan["points"]] == ["baseline/c32/n1", "baseline/c32/n2"]
    assert ("create", "Job", "tiny-sweep-baseline-client") in api.writes
    # an operator restart: a new controller finds the Job and waits for it (never a second create)
    bc2, _ = controller(api)
    bc2.bodies[(NS, "tiny-sweep")]["status"] = dict(body["status"])
    n = len(api.writes)
    step(bc2)
    assert api.writes[n:] == []
    finish_job(api, "baseline", result("baseline", None, 100))
    step(bc2)
    stored = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-results")]["data"]["variant-baseline.json"])
    assert [p["variant"] for p in stored["points"]] == ["baseline", "baseline"]
    assert not [k for k in api.objs if k[0] in ("Deployment", "Service", "Job") and "baseline" in k[2]]
    step(bc2)  # the next variant
    ready(api, "k3")
    step(bc2)
    finish_job(api, "k3", result("k3", 3.5, 150))
    step(bc2)
    step(bc2)  # every variant measured: results and status
    st = bc2.bodies[(NS, "tiny-sweep")]["status"]
    assert st["phase"] == "Complete" and st["progress"] == "2/2"
    assert {(p["variant"], p["concurrency"], p.get("tau"), p.get("equalToBaseline")) for p in st["points"]} == {
        ("baseline", 1, None, None), ("baseline", 2, None, None), ("k3", 1, 3.5, True), ("k3", 2, 3.5, True)}
    assert st["recommendation"]["best"] == "k3" and st["recommendation"]["guard"] == {}
    assert st["conditions"][0]["type"] == "Complete" and st["conditions"][0]["message"] == st["recommendation"]["summary"]
    full = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-results")]["data"]["results.json"])
    assert len(full["points"]) == 4 and full["recommendation"]["bands"][0]["speedup"] == 1.5
    # `specdeploy bench report` reads this document as it is
    from specdeploy.benchreport import load_results, rows

    results, reco = load_results(full)
    assert [r.variant for r in results] == ["baseline", "k3"] and reco == full["recommendation"]
    assert [(r.variant, r.equal) for r in rows(results)][2:] == [("k3", True), ("k3", True)]
    n = len(api.writes)
    assert step(bc2) is None and api.writes[n:] == []  # Complete: nothing more


def test_a_client_without_a_result_line_fails_the_benchmark_and_cleans_up():
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", log="Traceback: boom\n")
    step(bc)
    st = body["status"]
    assert st["phase"] == "Failed"
    cond = st["conditions"][0]
    assert cond["type"] == "Failed" and cond["reason"] == "ClientResultInvalid" and "no SPECDEPLOY_BENCH_RESULT" in cond["message"]
    assert not [k for k in api.objs if k[0] in ("Deployment", "Service", "Job")]
    n = len(api.writes)
    assert step(bc) is None and api.writes[n:] == []  # Failed stays Failed


def test_a_failed_client_job_reports_its_log_tail():
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", failed=True, log="line 1\nerror: the engine does not answer\n")
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "ClientFailed" and "the engine does not answer" in cond["message"]


def test_a_crashing_variant_fails_early_with_the_reason():
    api = Api()
    bc, body = controller(api)
    step(bc)
    api.objs[("Pod", NS, "tiny-sweep-baseline-abc")] = {"kind": "Pod", "metadata": {
        "name": "tiny-sweep-baseline-abc", "labels": {"app.kubernetes.io/instance": "tiny-sweep-baseline"}},
        "status": {"containerStatuses": [{"name": "engine", "restartCount": 3, "lastState": {
            "terminated": {"exitCode": 132, "reason": "Error", "message": "illegal instruction"}}}]}}
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "VariantCrashing" and "exit code 132" in cond["message"] and "illegal instruction" in cond["message"]
    assert ("Deployment", NS, "tiny-sweep-baseline") not in api.objs


def test_a_missing_deployment_waits_and_a_bad_matrix_fails():
    api = Api()
    bc, body = controller(api, with_deployment=False)
    assert step(bc) == 15.0
    assert body["status"]["phase"] == "Pending" and "SpeculativeDeployment tiny does not exist" in body["status"]["current"]
    bc, body = controller(api)
    body["spec"]["matrix"]["speculativeTokens"] = [5]
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "InvalidMatrix"
    assert "spec.matrix.speculativeTokens[0]" in cond["message"] and not api.objs


def test_use_serving_deployment_measures_it_last_without_touching_it():
    api = Api()
    bc, body = controller(api)
    body["spec"]["useServingDeployment"] = True
    bc.deployments[(NS, "tiny")]["metadata"]["uid"] = "dep-uid"
    # status is output only: an image written there by whoever may write /status is never the client's
    bc.deployments[(NS, "tiny")]["status"] = {"resolved": {"image": "docker.io/attacker/anything:latest"}}
    api.objs[("Deployment", NS, "tiny")] = {"kind": "Deployment", "metadata": {
        "name": "tiny", "namespace": NS, "ownerReferences": [{"uid": "dep-uid", "controller": True}]},
        "status": {"readyReplicas": 1}}
    for v, tau in (("baseline", None), ("k3", 3.0)):
        step(bc)
        ready(api, v)
        step(bc)
        finish_job(api, v, result(v, tau, 100))
        step(bc)
    step(bc)  # serving: no engine objects, straight to its client
    assert not [w for w in api.writes if w[0] == "apply" and "serving" in w[2] and w[1] != "ConfigMap"]
    plan = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-serving-plan")]["data"]["plan.json"])
    assert plan["baseUrl"] == "http://tiny.default.svc:8000" and [p["id"] for p in plan["points"]] == [
        "serving/c32/n1", "serving/c32/n2"]
    [client] = api.objs[("Job", NS, "tiny-sweep-serving-client")]["spec"]["template"]["spec"]["containers"]
    assert client["image"] == rendered_image() and "attacker" not in client["image"]
    finish_job(api, "serving", result("serving", 3.0, 90))
    step(bc)
    step(bc)
    st = body["status"]
    assert st["phase"] == "Complete" and st["variants"] == ["baseline", "k3", "serving"]
    assert ("Deployment", NS, "tiny") in api.objs and ("delete", "Deployment", "tiny") not in api.writes


def test_the_deployment_going_away_mid_run_fails_and_leaves_nothing_running():
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)  # the client Job runs
    assert ("Job", NS, "tiny-sweep-baseline-client") in api.objs
    bc.deployments.clear()  # the SpeculativeDeployment was deleted
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "DeploymentNotFound"
    left = [k for k in api.objs if k[0] in ("Deployment", "Service", "Job", "ConfigMap")]
    assert left == [], left


def test_ttl_deletes_the_finished_benchmark():
    api = Api()
    bc, body = controller(api)
    body["spec"]["ttlSecondsAfterFinished"] = 60
    body["status"] = {"phase": "Complete", "finishedAt": "2020-01-01T00:00:00Z"}
    assert step(bc) is None and api.writes == [("delete", "SpeculativeBenchmark", "tiny-sweep")]
    assert api.deletes == [("SpeculativeBenchmark", "tiny-sweep", "bench-uid")]  # only the one that finished
    # a benchmark created again under the name since the watch delivered the finished one: left alone
    again = {"kind": "SpeculativeBenchmark", "metadata": {"name": "tiny-sweep", "namespace": NS, "uid": "new-uid"}}
    api.objs[("SpeculativeBenchmark", NS, "tiny-sweep")] = again
    assert step(bc) is None and api.objs[("SpeculativeBenchmark", NS, "tiny-sweep")] == again
    api.writes.clear()
    body["status"]["finishedAt"] = "2999-01-01T00:00:00Z"  # not yet: requeued for the time left
    assert step(bc) > 60 and api.writes == []


PROMPTS_MARK = {"specdeploy.io/prompts": "true"}


def _prompts_run(cm: dict | None) -> tuple[Api, dict]:
    """A benchmark whose spec.prompts.configMapRef names my-prompts, run to its client step."""
    api = Api()
    if cm is not None:
        api.objs[("ConfigMap", NS, "my-prompts")] = cm
    bc, body = controller(api)
    body["spec"]["prompts"] = {"configMapRef": {"name": "my-prompts"}}
    step(bc)
    ready(api, "baseline")
    step(bc)
    return api, body


def _prompts_cm(labels: dict | None, data: dict) -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": "my-prompts", "namespace": NS, "uid": "cm-uid",
                                              **({"labels": labels} if labels is not None else {})}, "data": data}


def test_configmap_prompts_travel_with_the_plan_or_fail_naming_the_configmap():
    api, body = _prompts_run(_prompts_cm(PROMPTS_MARK, {"other": "x"}))
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "PromptsNotFound" and "ConfigMap my-prompts has no key prompts.jsonl" in cond["message"]
    assert not [k for k in api.objs if k[0] in ("Deployment", "Job")]
    api, body = _prompts_run(_prompts_cm(PROMPTS_MARK, {"prompts.jsonl": '{"prompt": "hi"}\n'}))
    cm = api.objs[("ConfigMap", NS, "tiny-sweep-baseline-plan")]
    assert cm["data"]["prompts.jsonl"] == '{"prompt": "hi"}\n'
    assert json.loads(cm["data"]["plan.json"])["prompts"] == {"kind": "file", "path": "/etc/specdeploy/bench/prompts.jsonl"}


@pytest.mark.parametrize("labels", [None, {"specdeploy.io/prompts": "false"}, {"specdeploy.io/prompt": "true"}],
                         ids=["unlabelled", "false", "another-label"])
def test_only_configmaps_marked_as_prompts_are_copied(labels):
    """Issue 37: spec.prompts.configMapRef copied any ConfigMap key of the namespace into the operator-owned plan
    ConfigMap (and the client's requests). Only one labelled specdeploy.io/prompts=true is read; any other answers
    as an absent one does (no oracle of the namespace's ConfigMaps), naming the field and the label."""
    secret = '{"prompt": "db-password=hunter2"}\n'
    api, body = _prompts_run(_prompts_cm(labels, {"prompts.jsonl": secret}))
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "PromptsNotFound", cond
    assert "spec.prompts.configMapRef" in cond["message"] and "specdeploy.io/prompts=true" in cond["message"]
    assert "hunter2" not in json.dumps([v for k, v in api.objs.items() if k[2] != "my-prompts"])
    assert ("ConfigMap", NS, "tiny-sweep-baseline-plan") not in api.objs and ("Job", NS, "tiny-sweep-baseline-client") \
        not in api.objs and ("Deployment", NS, "tiny-sweep-baseline") not in api.objs
    _, absent = _prompts_run(None)  # the same answer for a ConfigMap that does not exist
    assert absent["status"]["conditions"][0]["message"] == cond["message"]


def test_benchmarks_of_one_deployment_run_one_at_a_time():
    api = Api()
    bc, body = controller(api)
    body["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"
    other = copy.deepcopy(BENCH)
    other["metadata"].update({"name": "older", "uid": "u2", "creationTimestamp": "2026-01-01T00:00:00Z"})
    bc.bodies[(NS, "older")] = other
    assert step(bc) == 15.0 and body["status"]["phase"] == "Pending"
    assert "SpeculativeBenchmark older measures SpeculativeDeployment tiny first" in body["status"]["current"]
    assert not [w for w in api.writes if w[0] in ("apply", "create")]
    other["status"] = {"phase": "Complete"}
    step(bc)
    assert body["status"]["phase"] == "Running"  # the older one finished: this one starts


def test_an_operator_start_judges_nothing_until_the_deployment_cache_is_complete():
    """A restart mid-run: the benchmark's watch can deliver it before the SpeculativeDeployment's watch
    delivers its deployment. Until the cache has synced, the missing deployment is not a verdict."""
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)  # the client Job runs
    assert body["status"]["phase"] == "Running"
    deployment = bc.deployments.pop((NS, "tiny"))  # the new operator's cache: not filled yet
    bc.deployments_synced = asyncio.Event()
    writes = len(api.writes)
    assert step(bc) is not None  # retried
    assert body["status"]["phase"] == "Running" and len(api.writes) == writes  # nothing judged, nothing written
    bc.deployments[(NS, "tiny")] = deployment  # the watch delivers it; the cache has synced
    bc.deployments_synced.set()
    step(bc)
    assert body["status"]["phase"] == "Running" and ("Job", NS, "tiny-sweep-baseline-client") in api.objs
    bc.deployments.clear()  # after the sync a missing deployment is one that was deleted
    step(bc)
    assert body["status"]["phase"] == "Failed"


def _events(bc) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []

    async def event(body, kind, reason, message):
        seen.append((kind, reason, message))

    bc.event = event
    return seen


def test_running_condition_and_events_follow_the_benchmark():
    """Issue 27: Running is True while measuring and False with the reason once it ends (the STATUS column);
    each stage posts an Event, the end posts one (Measured), a wait posts one."""
    api = Api()
    bc, body = controller(api)
    seen = _events(bc)
    conds = lambda: {c["type"]: c for c in body["status"]["conditions"]}  # noqa: E731
    step(bc)
    assert (conds()["Running"]["status"], conds()["Running"]["reason"]) == ("True", "Measuring")
    assert "baseline: starting the engine (0/2 measured)" == conds()["Running"]["message"]
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", result("baseline", None, 100))
    step(bc)
    step(bc)
    ready(api, "k3")
    step(bc)
    finish_job(api, "k3", result("k3", 3.5, 150))
    step(bc)
    step(bc)
    assert [r for _, r, _ in seen] == ["VariantStarting", "ClientStarted", "VariantMeasured", "VariantStarting",
                                       "ClientStarted", "VariantMeasured", "Measured"]
    assert all(k == "Normal" for k, _, _ in seen)
    assert ("Normal", "VariantMeasured", "variant k3 measured (2/2)") in seen
    c = conds()
    assert (c["Running"]["status"], c["Running"]["reason"]) == ("False", "Measured")
    assert [x["type"] for x in body["status"]["conditions"]] == ["Complete", "Running"]

    # a failure: Running False with the failure's reason, one Warning Event
    api = Api()
    bc, body = controller(api)
    seen = _events(bc)
    step(bc)
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", failed=True, log="error: boom\n")
    step(bc)
    assert (conds()["Running"]["status"], conds()["Running"]["reason"]) == ("False", "ClientFailed")
    assert [(k, r) for k, r, _ in seen][-1] == ("Warning", "ClientFailed")

    # a wait: Running False with the wait's reason, posted once
    api = Api()
    bc, body = controller(api, with_deployment=False)
    seen = _events(bc)
    step(bc)
    step(bc)
    assert body["status"]["phase"] == "Pending" and conds()["Running"]["status"] == "False"
    assert [r for _, r, _ in seen] == [conds()["Running"]["reason"]]


def test_synthetic_acceptance_on_the_cpu_pool_fails_before_any_engine_starts():
    api = Api()
    bc, body = controller(api)
    body["spec"]["matrix"]["syntheticAcceptance"] = [2.0]
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "InvalidMatrix"
    assert "spec.matrix.syntheticAcceptance" in cond["message"] and "CPU build refuses" in cond["message"]
    assert not api.objs

# ----------------------------------------------------------------- issue 24: only what it controls; deadlines


def _old(obj: dict, seconds: float) -> None:
    import datetime as dt

    t = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    obj["metadata"]["creationTimestamp"] = t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def test_an_own_variant_that_never_becomes_ready_fails_at_the_deadline_of_its_creation():
    """Before: the deadline counted from status.startedAt, absent after a restart that found the variant (or
    forged by whoever may write /status), so the benchmark polled forever."""
    from specdeploy.controller import benchmark as bm

    api = Api()
    bc, body = controller(api)
    step(bc)  # the baseline's objects, owned by the benchmark
    dep = api.objs[("Deployment", NS, "tiny-sweep-baseline")]
    body["status"].pop("startedAt")  # a restart that finds the variant: no stage start in status
    assert step(bc) == bm.POLL_SECONDS  # young: waits
    body["status"]["startedAt"] = "2999-01-01T00:00:00Z"  # a forged start in the future moves nothing
    _old(dep, bm.READY_DEADLINE + 5)
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "VariantNotReady", cond
    assert ("Deployment", NS, "tiny-sweep-baseline") not in api.objs  # ours: deleted


def test_a_client_job_past_its_deadline_fails_whatever_status_says():
    from specdeploy.controller import benchmark as bm

    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    job = api.objs[("Job", NS, "tiny-sweep-baseline-client")]
    body["status"]["startedAt"] = "2999-01-01T00:00:00Z"
    assert step(bc) == bm.POLL_SECONDS
    _old(job, bm.CLIENT_DEADLINE + 5)
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "ClientTimedOut" and "tiny-sweep-baseline-client" in cond["message"]
    assert ("Job", NS, "tiny-sweep-baseline-client") not in api.objs


def _foreign(kind: str, name: str, refs: list | None = None, labels: dict | None = None, **extra) -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": "victim",
                                       **({"ownerReferences": refs} if refs is not None else {}),
                                       **({"labels": labels} if labels is not None else {})}, **extra}


FOREIGN = [
    # (what, the object already there, refs) -- every child name of a benchmark
    ("results ConfigMap", "ConfigMap", "tiny-sweep-results", None),
    ("variant engine ConfigMap", "ConfigMap", "tiny-sweep-baseline-engine", None),
    ("variant Deployment", "Deployment", "tiny-sweep-baseline", None),
    ("variant Service", "Service", "tiny-sweep-baseline", None),
    ("variant Deployment of another controller", "Deployment", "tiny-sweep-baseline",
     [{"uid": "someone", "controller": True}]),
    ("variant Deployment owned without the controller flag", "Deployment", "tiny-sweep-baseline",
     [{"uid": "bench-uid", "controller": False}]),
]


@pytest.mark.parametrize("what, kind, name, refs", FOREIGN, ids=[f[0] for f in FOREIGN])
def test_a_child_name_taken_fails_the_benchmark_and_leaves_the_object(what, kind, name, refs):
    api = Api()
    victim = _foreign(kind, name, refs, data={"variant-baseline.json": "{}"} if kind == "ConfigMap" else None)
    api.objs[(kind, NS, name)] = copy.deepcopy(victim)
    bc, body = controller(api)
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "ChildConflict", cond
    assert f"{kind}/{name}" in cond["message"]
    assert api.objs[(kind, NS, name)] == victim
    assert not [w for w in api.writes if w[0] in ("apply", "create", "delete") and w[1] != "SpeculativeBenchmark"], api.writes


@pytest.mark.parametrize("kind, name", [("Job", "tiny-sweep-baseline-client"), ("ConfigMap", "tiny-sweep-baseline-plan")])
def test_a_client_name_taken_is_neither_read_nor_written(kind, name):
    """A Job `<bench>-<variant>-client` that already succeeded, with a result line in its pod's log: before
    issue 24 its result was recorded as the variant's measurement."""
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    victim = _foreign(kind, name, status={"succeeded": 1})
    api.objs[(kind, NS, name)] = copy.deepcopy(victim)
    if kind == "Job":
        finish_job(api, "baseline", result("baseline", None, 1e6))  # the planted "measurement"
        victim = copy.deepcopy(api.objs[(kind, NS, name)])
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "ChildConflict" and f"{kind}/{name}" in cond["message"], cond
    assert api.objs[(kind, NS, name)] == victim
    assert "variant-baseline.json" not in ((api.objs.get(("ConfigMap", NS, "tiny-sweep-results")) or {}).get("data") or {})
    # the benchmark's own variant objects were cleaned up; the other object was not
    assert ("Deployment", NS, "tiny-sweep-baseline") not in api.objs


def test_cleanup_deletes_only_labelled_objects_it_controls():
    api = Api()
    bc, body = controller(api)
    labels = {"specdeploy.io/benchmark": "tiny-sweep"}
    api.objs[("Deployment", NS, "web")] = {"kind": "Deployment", "metadata": {"name": "web", "namespace": NS,
                                                                           "labels": dict(labels)}}
    api.objs[("Service", NS, "mine")] = {"kind": "Service", "metadata": {
        "name": "mine", "namespace": NS, "labels": dict(labels),
        "ownerReferences": [{"uid": "bench-uid", "controller": True}]}}
    asyncio.run(bc._cleanup(NS, "tiny-sweep"))
    assert ("Deployment", NS, "web") in api.objs and ("Service", NS, "mine") not in api.objs


def test_another_method_is_a_variant_without_the_deployments_drafter_and_bands_name_the_method():
    api = Api()
    bc, body = controller(api)
    body["spec"]["matrix"]["methods"] = [{"method": "ngram", "ngram": {"lookupMin": 2, "lookupMax": 3}}]
    for variant, tau, tps in (("baseline", None, 100), ("k3", 3.5, 150), ("ngram", 2.0, 180)):
        step(bc)
        ready(api, variant)
        step(bc)
        if variant == "ngram":  # the ngram engine: the deployment's target, no drafter, ngram speculative config
            cfg = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-ngram-engine")]["data"]["engine-config.json"])
            sc = json.loads(cfg["args"][cfg["args"].index("--speculative-config") + 1])
            assert sc["method"] == "ngram" and "model" not in sc and sc["prompt_lookup_max"] == 3
            assert not (cfg.get("drafter") or {}).get("model")
        finish_job(api, variant, result(variant, tau, tps))
        step(bc)
    step(bc)
    st = body["status"]
    assert st["phase"] == "Complete" and st["progress"] == "3/3"
    reco = st["recommendation"]
    assert reco["best"] == "ngram" and {b["method"] for b in reco["bands"]} == {"ngram"}
    assert "best method per band: context 32: ngram at 1, ngram at 2" in reco["summary"]


def test_guarded_needs_the_deployments_guard():
    api = Api()
    bc, body = controller(api)
    body["spec"]["matrix"]["guarded"] = True
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "InvalidMatrix"
    assert "spec.matrix.guarded" in cond["message"] and "guard.maxConcurrency" in cond["message"]


def test_a_drafter_method_variant_resolves_and_gates_its_own_drafter():
    eagle = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 128,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 384,
             "num_hidden_layers": 1, "vocab_size": 512, "draft_vocab_size": 512, "max_position_embeddings": 4096,
             "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16",
             "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    TINY["tiny/eagle3-test/config.json"] = json.dumps(eagle)
    TINY["tiny/eagle3-wrong/config.json"] = json.dumps({**eagle, "hidden_size": 256})
    try:
        for model, ok in (("tiny/eagle3-test", True), ("tiny/eagle3-wrong", False)):
            api = Api()
            bc, body = controller(api)
            body["spec"]["matrix"]["baseline"] = False
            body["spec"]["matrix"]["speculativeTokens"] = [3]
            body["spec"]["matrix"]["methods"] = [{"method": "eagle3", "drafter": {"model": model}}]
            step(bc)  # k3 first
            ready(api, "k3")
            step(bc)
            finish_job(api, "k3", result("k3", 3.5, 150))
            step(bc)
            step(bc)  # the eagle3 variant: its drafter resolved and checked against the deployment's target
            if ok:
                cfg = json.loads(api.objs[("ConfigMap", NS, "tiny-sweep-eagle3-engine")]["data"]["engine-config.json"])
                sc = json.loads(cfg["args"][cfg["args"].index("--speculative-config") + 1])
                assert sc["method"] == "eagle3" and sc["model"] == model, sc
            else:
                cond = body["status"]["conditions"][0]
                assert body["status"]["phase"] == "Failed" and cond["reason"] == "VariantNotRenderable", cond
                assert "variant eagle3" in cond["message"] and "hidden" in cond["message"].lower(), cond["message"]
                assert ("Deployment", NS, "tiny-sweep-eagle3") not in api.objs
    finally:
        TINY.pop("tiny/eagle3-test/config.json", None)
        TINY.pop("tiny/eagle3-wrong/config.json", None)


# ----------------------------------------------------------------- issue 37: the executor's create-only path


class RacingApi(Api):
    """The name of ``kind/name`` is taken by a tenant's object between the benchmark's read and its write: at
    the create (``on="create"``) or at the delete (``on="delete"``: ours deleted and theirs created under the name
    since the read)."""

    def __init__(self, kind: str, name: str, on: str):
        super().__init__()
        self.race, self.on, self.victim = (kind, name), on, None

    def _plant(self, kind, name):
        if (kind, name) == self.race and self.victim is None:
            self.victim = _foreign(kind, name, labels={"specdeploy.io/benchmark": "tiny-sweep"})
            self.objs[(kind, NS, name)] = copy.deepcopy(self.victim)

    async def create(self, obj):
        if self.on == "create":
            self._plant(obj["kind"], obj["metadata"]["name"])
        return await super().create(obj)

    async def delete(self, kind, ns, name, propagation="Background", uid=None):
        if self.on == "delete" and (kind, ns, name) in self.objs:
            self._plant(kind, name)
        return await super().delete(kind, ns, name, propagation, uid)


def _writes(api: Api) -> list[tuple[str, str, str]]:
    return [w for w in api.writes if w[1] != "SpeculativeBenchmark"]


def test_a_variant_name_taken_at_the_create_is_left_and_the_pass_is_undone():
    """The claim found the Deployment's name free; a tenant's Deployment takes it before the POST: the server
    refuses the create (409), the benchmark fails as ChildConflict, the tenant's Deployment is neither applied to
    nor deleted, and the ConfigMap and Service this pass created are deleted again (nothing half-applied)."""
    api = RacingApi("Deployment", "tiny-sweep-baseline", on="create")
    bc, body = controller(api)
    step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "ChildConflict", cond
    assert "Deployment/tiny-sweep-baseline (not owned by specdeploy)" in cond["message"]
    assert api.objs[("Deployment", NS, "tiny-sweep-baseline")] == api.victim
    assert [w for w in _writes(api) if w[0] == "apply" or w[2] == "tiny-sweep-baseline" and w[1] == "Deployment"] == [
        ("create-409", "Deployment", "tiny-sweep-baseline")]
    assert not [k for k in api.objs if k[2] != "tiny-sweep-baseline" or k[0] != "Deployment"], api.objs
    # each undo delete names the object this pass created (its uid), never the name alone
    assert {(k, n) for k, n, _ in api.deletes} >= {("ConfigMap", "tiny-sweep-baseline-engine"),
                                                  ("Service", "tiny-sweep-baseline")}
    assert all(uid and uid.startswith("uid-") for _, _, uid in api.deletes), api.deletes


@pytest.mark.parametrize("kind, name", [("Job", "tiny-sweep-baseline-client"), ("ConfigMap", "tiny-sweep-baseline-plan")])
def test_a_client_name_taken_at_the_create_is_left(kind, name):
    api = RacingApi(kind, name, on="create")
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "ChildConflict" and f"{kind}/{name}" in cond["message"], cond
    assert api.objs[(kind, NS, name)] == api.victim
    assert not [w for w in _writes(api) if w[2] == name and w[0] not in ("create-409",)], api.writes
    assert ("Deployment", NS, "tiny-sweep-baseline") not in api.objs  # the benchmark's own variant: cleaned up


@pytest.mark.parametrize("kind, name", [("Deployment", "tiny-sweep-baseline"), ("Service", "tiny-sweep-baseline"),
                                        ("ConfigMap", "tiny-sweep-baseline-engine"),
                                        ("Job", "tiny-sweep-baseline-client"), ("ConfigMap", "tiny-sweep-baseline-plan")])
def test_an_object_recreated_under_a_childs_name_since_the_read_is_not_deleted(kind, name):
    """The benchmark read its own child, then someone deleted it and created theirs under the name: the delete
    carries the uid of the object read, the server refuses it (409), the new object stays."""
    api = RacingApi(kind, name, on="delete")
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", failed=True, log="error: boom\n")
    step(bc)  # ClientFailed: the variant is deleted (then _cleanup)
    assert body["status"]["phase"] == "Failed"
    assert api.victim is not None and api.objs[(kind, NS, name)] == api.victim
    assert ("delete", kind, name) not in api.writes
    assert (kind, name) in {(k, n) for k, n, _ in api.deletes}  # tried, as the object read only


def test_every_delete_of_a_child_carries_the_uid_of_the_object_read():
    api = Api()
    bc, body = controller(api)
    bc.network_policy = ()
    for v, tau in (("baseline", None), ("k3", 3.0)):
        step(bc)
        ready(api, v)
        step(bc)
        finish_job(api, v, result(v, tau, 100))
        step(bc)
    step(bc)
    assert body["status"]["phase"] == "Complete"
    children = [d for d in api.deletes if d[0] != "SpeculativeBenchmark"]
    assert {k for k, _, _ in children} == {"Job", "ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    assert all(uid and uid.startswith("uid-") for _, _, uid in children), children


def test_a_tenants_object_created_under_a_variants_name_after_its_delete_is_untouched():
    """The baseline was measured and deleted; a tenant then creates a Deployment of that name, with the benchmark's
    label (a label never makes an object ours). The benchmark failing later deletes only what it controls."""
    api = Api()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    step(bc)
    finish_job(api, "baseline", result("baseline", None, 100))
    step(bc)  # measured: the baseline's objects deleted
    victim = _foreign("Deployment", "tiny-sweep-baseline", labels={"specdeploy.io/benchmark": "tiny-sweep"})
    api.objs[("Deployment", NS, "tiny-sweep-baseline")] = copy.deepcopy(victim)
    step(bc)  # k3 starts
    bc.deployments.clear()  # the SpeculativeDeployment goes away: Failed, cleanup
    step(bc)
    assert body["status"]["phase"] == "Failed"
    assert api.objs[("Deployment", NS, "tiny-sweep-baseline")] == victim
    assert ("Deployment", NS, "tiny-sweep-k3") not in api.objs


def test_an_own_client_job_found_at_its_create_is_waited_for():
    """The client Job's POST is refused (409) because an earlier attempt of this benchmark created it (that
    response was lost): the claim finds the Job ours and the benchmark waits for it, nothing fails."""

    class Lost(Api):
        lost = False

        async def create(self, obj):
            if obj["kind"] == "Job" and not self.lost:
                self.lost = True
                await super().create(obj)  # the earlier attempt's create, which landed
            return await super().create(obj)

    api = Lost()
    bc, body = controller(api)
    step(bc)
    ready(api, "baseline")
    assert step(bc) > 0
    assert ("create-409", "Job", "tiny-sweep-baseline-client") in api.writes
    assert body["status"]["phase"] == "Running" and body["status"]["current"] == "baseline: client running"
    assert ("Job", NS, "tiny-sweep-baseline-client") in api.objs


# ----------------------------------------------------------------- issue 37: the variants' NetworkPolicy


def test_with_the_engine_network_policy_each_variant_gets_one_created_before_its_engine_and_deleted_with_it():
    api = Api()
    bc, body = controller(api)
    bc.network_policy = ("monitoring", NS)
    step(bc)
    assert _writes(api) == [("create", "ConfigMap", "tiny-sweep-baseline-engine"),
                            ("create", "Service", "tiny-sweep-baseline"),
                            ("create", "NetworkPolicy", "tiny-sweep-baseline"),
                            ("create", "Deployment", "tiny-sweep-baseline")]
    np = api.objs[("NetworkPolicy", NS, "tiny-sweep-baseline")]
    assert np["metadata"]["ownerReferences"][0]["uid"] == "bench-uid"
    pod_labels = api.objs[("Deployment", NS, "tiny-sweep-baseline")]["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    ready(api, "baseline")
    step(bc)
    client = api.objs[("Job", NS, "tiny-sweep-baseline-client")]["spec"]["template"]["metadata"]["labels"]
    [rule] = np["spec"]["ingress"]
    assert all(client.get(k) == v for k, v in rule["from"][0]["podSelector"]["matchLabels"].items())
    assert rule["from"][1:] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    finish_job(api, "baseline", result("baseline", None, 100))
    step(bc)
    assert ("NetworkPolicy", NS, "tiny-sweep-baseline") not in api.objs
    # off (the default): none
    api = Api()
    bc, _ = controller(api)
    step(bc)
    assert not [k for k in api.objs if k[0] == "NetworkPolicy"]


def test_a_tenants_network_policy_under_a_variants_name_fails_the_benchmark_untouched():
    api = Api()
    victim = _foreign("NetworkPolicy", "tiny-sweep-baseline", spec={"podSelector": {}, "ingress": [{}]})
    api.objs[("NetworkPolicy", NS, "tiny-sweep-baseline")] = copy.deepcopy(victim)
    bc, body = controller(api)
    bc.network_policy = ()
    step(bc)
    cond = body["status"]["conditions"][0]
    assert cond["reason"] == "ChildConflict" and "NetworkPolicy/tiny-sweep-baseline" in cond["message"], cond
    assert api.objs[("NetworkPolicy", NS, "tiny-sweep-baseline")] == victim
    assert not [w for w in _writes(api) if w[0] in ("apply", "create", "delete")], api.writes


# ----------------------------------------------------------------- issue 37: the tenancy policy at reconcile

from specdeploy.core.policy import TenancyPolicy  # noqa: E402

POLICY = TenancyPolicy(token_secrets=("hf-token",), pvcs=("models",))


def policed(api: Api, policy: TenancyPolicy = POLICY, dep_change=None, methods=None):
    dep = {**copy.deepcopy(DEP), "metadata": {"name": "tiny", "namespace": NS}}
    if dep_change is not None:
        dep_change(dep["spec"])
    bc = BenchmarkController(api, Resolver(), deployments={(NS, "tiny"): dep}, policy=policy)
    body = copy.deepcopy(BENCH)
    if methods is not None:
        body["spec"]["matrix"]["methods"] = methods
    bc.bodies[(NS, BENCH["metadata"]["name"])] = body
    return bc, body


def refused_with(bc, body, api) -> list[str]:
    """The benchmark ended Failed/PolicyRefused having created, applied and resolved nothing: the codes."""
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "PolicyRefused", cond
    assert [w for w in api.writes if w[0] in ("apply", "create")] == [], api.writes
    assert bc.resolver.calls == []  # no token Secret read, no inspector Job, no hub fetch on its behalf
    import re

    return re.findall(r"\[(Policy\w+)\]", cond["message"])


@pytest.mark.parametrize("drafter,code", [
    ({"model": "z/d", "tokenSecretRef": {"name": "prod-db", "key": "token"}}, "PolicyTokenSecretNotAllowed"),
    ({"model": "z/d", "tokenSecretRef": {"name": "hf-token", "key": "aws-secret"}}, "PolicyTokenSecretKeyNotAllowed"),
    ({"model": "d", "pvc": {"claimName": "other-team"}}, "PolicyClaimNotAllowed"),
], ids=["unlisted-secret", "unlisted-key", "unlisted-claim"])
def test_a_method_drafter_the_policy_refuses_fails_the_benchmark_before_anything_runs(drafter, code):
    api = Api()
    bc, body = policed(api, methods=[{"method": "eagle3", "drafter": drafter}])
    assert step(bc) is None
    assert refused_with(bc, body, api) == [code]
    assert "spec.matrix.methods[0].drafter." in body["status"]["conditions"][0]["message"]


def test_the_claim_label_rule_is_decided_with_the_claims_labels():
    label = ("specdeploy.io/models", "true")
    for labels, allowed in (({"specdeploy.io/models": "true"}, True), ({"team": "b"}, False), (None, False)):
        api = Api()
        if labels is not None:
            api.objs[("PersistentVolumeClaim", NS, "team-models")] = {"metadata": {"name": "team-models",
                                                                                  "labels": labels}}
        bc, body = policed(api, TenancyPolicy(pvc_label=label),
                           methods=[{"method": "eagle3", "drafter": {"model": "d", "pvc": {"claimName": "team-models"}}}])
        step(bc)
        if allowed:  # measured: the baseline first
            assert body["status"]["phase"] == "Running" and ("create", "Deployment", "tiny-sweep-baseline") in api.writes
        else:
            assert refused_with(bc, body, api) == ["PolicyClaimNotAllowed"]


@pytest.mark.parametrize("change,code", [
    (lambda s: s["engine"].update(image="evil.io/miner:1"), "PolicyImageNotAllowed"),
    (lambda s: s["pod"].update(serviceAccountName="cluster-admin-sa"), "PolicyServiceAccountNotAllowed"),
    (lambda s: s["pod"].update(tolerations=[{"operator": "Exists"}]), "PolicyTolerationNotAllowed"),
    (lambda s: s["pod"].update(priorityClassName="system-node-critical"), "PolicyPriorityClassNotAllowed"),
    (lambda s: s["target"].update(trustRemoteCode=True), "PolicyTrustRemoteCodeNotAllowed"),
    (lambda s: s["engine"].update(extraArgs=["--enforce-eager", "--worker-cls", "evil.Worker"]),
     "PolicyCodeArgNotAllowed"),
    (lambda s: s["target"].update(pvc={"claimName": "other-team"}), "PolicyClaimNotAllowed"),
], ids=["image", "service-account", "toleration", "priority-class", "trust-remote-code", "code-flag", "claim"])
def test_a_benchmark_of_a_deployment_the_policy_refuses_runs_nothing(change, code):
    """Hole 2: the variants and the client Job would run the refused deployment's image, account, tolerations..."""
    api = Api()
    bc, body = policed(api, dep_change=change)
    assert step(bc) is None
    assert refused_with(bc, body, api) == [code]
    assert "SpeculativeDeployment tiny spec." in body["status"]["conditions"][0]["message"]
