"""spec.rollout Canary in the reconcile planner (controller/plan.py), pure: tables of spec + observed children +
the monitor's analysis -> what is applied, deleted and written.

Which spec changes start a canary (a new rollout revision on the pod template) and which never do; what the
stable Deployment is applied with while a canary runs (its live template: no restart); the canary's children;
promotion, rollback, requests, restarts (everything from the canary Deployment and the status).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from specdeploy.api.validation import validate
from specdeploy.controller import plan as pl
from specdeploy.controller import resolve
from specdeploy.controller import status as st
from specdeploy.controller.reports import AcceptanceReport, CanaryReport
from specdeploy.core import names as N
from specdeploy.core.rollout import canary as ro
from specdeploy.core.render import names, selector_labels

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
NAME = "qwen36-27b"
NOW = 1_800_000_000.0
CANARY = {"strategy": "Canary", "canary": {"replicas": 1}, "analysis": {"window": "1m", "minDrafts": 10},
          "deadline": "5m"}


def _deep(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _deep(out.get(k) or {}, v) if isinstance(v, dict) else v
    return out


def respec(body: dict, change: dict) -> dict:
    """``body`` with its spec changed (nested keys merged)."""
    return _deep(body, {"spec": change})


def body_of(spec: dict | None = None, annotations: dict | None = None, rollout: dict | None = CANARY) -> dict:
    body = yaml.safe_load((QWEN / "speculativedeployment.yaml").read_text())
    body["metadata"].update(namespace="ns", uid="uid-1", generation=3, annotations=dict(annotations or {}))
    if rollout is not None:
        body["spec"]["rollout"] = copy.deepcopy(rollout)
    body["spec"] = _deep(body["spec"], spec or {})
    return body


def parsed(body: dict):
    cr, problems = validate(body)
    assert cr is not None, problems
    cr.metadata.namespace = "ns"
    return cr


def configs(drafter_commit: str = "c" * 40, target_commit: str = "a" * 40):
    target = resolve.Resolved(json.loads((QWEN / "target.config.json").read_text()), "sha256:t", "test", target_commit)
    drafter = resolve.Resolved(json.loads((QWEN / "drafter.config.json").read_text()), "sha256:d", "test",
                               drafter_commit)
    return target, drafter


def plan_of(body: dict, children: dict | None = None, status: dict | None = None, monitor: CanaryReport | None = None,
            now: float = NOW, commits: tuple[str, str] | None = None) -> pl.Plan:
    target, drafter = configs(*(commits or ()))
    return pl.plan_reconcile(parsed(body), target, drafter, generation=3, children=children or {},
                             status=status, rollout=monitor, now=now)


def revision_of(body: dict, **kw) -> str:
    plan = plan_of(body, **kw)
    assert plan.rendered is not None and plan.rendered.revision
    return plan.rendered.revision


def live(plan: pl.Plan, *, created: float | None = None, ready: bool = True) -> dict:
    """The children a plan applied, as the API server would return them (status and creation time added)."""
    out = {}
    for obj in plan.apply:
        o = copy.deepcopy(obj)
        o["metadata"]["creationTimestamp"] = pl._epoch_rfc3339(created if created is not None else NOW - 3600)
        o["metadata"]["generation"] = 1
        o["metadata"]["uid"] = f"uid-{o['kind']}-{o['metadata']['name']}"
        if o["kind"] == "Deployment":
            r = o["spec"]["replicas"]
            o["status"] = {"observedGeneration": 1, "replicas": r, "updatedReplicas": r,
                           "readyReplicas": r if ready else 0}
        out[(o["kind"], o["metadata"]["name"])] = o
    return out


def kinds(objs) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


def template(objs, name: str) -> dict:
    return next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == name)["spec"]["template"]


# ----------------------------------------------------------------- which changes start a canary

BASE = body_of({"drafter": {"revision": "main"}, "target": {"revision": "main"}})
TRIGGERS = [
    # (id, spec change, resolver commits (target, drafter) or None, whether the revision changes)
    ("drafter model", {"drafter": {"model": "z-lab/Qwen3.6-27B-DFlash-b"}}, None, True),
    ("drafter revision", {"drafter": {"revision": "v2"}}, ("a" * 40, "e" * 40), True),
    ("drafter revision naming the same commit (same weights)", {"drafter": {"revision": "v2"}}, None, False),
    ("drafter retrained under the same name (new resolved commit)", {}, ("a" * 40, "d" * 40), True),
    ("target revision", {"target": {"revision": "v2"}}, ("b" * 40, "c" * 40), True),
    ("target revision naming the same commit", {"target": {"revision": "v2"}}, None, False),
    ("target retrained (new resolved commit)", {}, ("b" * 40, "c" * 40), True),
    ("engine image", {"engine": {"image": "registry.example/runtime:vllm-0.33.0-custom"}}, None, True),
    ("engine version", {"engine": {"version": "0.33.1"}}, None, True),
    ("extraArgs", {"engine": {"extraArgs": ["--max-num-seqs=64"]}}, None, True),
    ("resources: cpu", {"pod": {"cpu": "16"}}, None, True),
    ("resources: memory", {"pod": {"memory": "200Gi"}}, None, True),
    ("speculation settings", {"speculation": {"blockSize": 8}}, None, True),
    ("replicas", {"replicas": 3}, None, False),
    ("replicas to zero", {"replicas": 0}, None, False),
    ("monitoring thresholds", {"monitoring": {"minAcceptanceLength": 2.0}}, None, False),
    ("rollout analysis settings", {"rollout": {"analysis": {"window": "2m"}, "canary": {"replicas": 2}}}, None, False),
]


@pytest.mark.parametrize("change,commits,new", [t[1:] for t in TRIGGERS], ids=[t[0] for t in TRIGGERS])
def test_which_changes_start_a_canary(change, commits, new):
    before = revision_of(BASE)
    after = revision_of(respec(BASE, change), commits=commits)
    assert (after != before) == new


def test_the_revision_is_on_the_pod_template_and_the_engine_is_pinned_to_the_resolved_commits():
    plan = plan_of(BASE)
    tmpl = template(plan.apply, NAME)
    assert tmpl["metadata"]["annotations"][N.REVISION_ANNOTATION] == plan.rendered.revision
    args = tmpl["spec"]["containers"][0]["args"]
    assert "c" * 40 in json.dumps(args) and "a" * 40 in json.dumps(args)  # drafter and target commits, not "main"
    assert "main" not in args


def test_rolling_update_renders_no_revision_and_no_pin():
    plan = plan_of(body_of({"drafter": {"revision": "main"}}, rollout=None))
    tmpl = template(plan.apply, NAME)
    assert N.REVISION_ANNOTATION not in tmpl["metadata"]["annotations"]
    assert plan.rendered.revision is None
    assert "c" * 40 not in json.dumps(tmpl)
    assert plan.rollout.step is None and plan.rollout.status is None
    explicit = plan_of(body_of({"drafter": {"revision": "main"}}, rollout={"strategy": "RollingUpdate"}))
    assert explicit.apply == plan.apply  # spec.rollout RollingUpdate == no spec.rollout


def test_canary_pods_leave_the_endpoints_first_then_drain_within_the_grace_period():
    """Under Canary the engine container waits in preStop (its endpoint goes first), then vLLM finishes its in-flight
    requests on SIGTERM (--shutdown-timeout; 0, its default, aborts them), both inside the grace period; a user's own
    --shutdown-timeout in extraArgs wins; RollingUpdate renders neither."""
    from specdeploy.core.render import argv, objects

    def engine(body: dict) -> tuple[dict, list[str]]:
        tmpl = template(plan_of(body).apply, NAME)
        return tmpl["spec"], tmpl["spec"]["containers"][0]["args"]

    pod, args = engine(BASE)
    hook = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["sleep", str(objects.PRESTOP_SLEEP_SECONDS)]
    i = args.index("--shutdown-timeout")
    assert args[i + 1] == str(argv.VLLM_DRAIN_SECONDS) and args.count("--shutdown-timeout") == 1
    assert objects.PRESTOP_SLEEP_SECONDS + argv.VLLM_DRAIN_SECONDS < pod["terminationGracePeriodSeconds"]
    _, own = engine(respec(BASE, {"engine": {"extraArgs": ["--shutdown-timeout=7"]}}))
    assert "--shutdown-timeout" not in own and own[-1] == "--shutdown-timeout=7"
    pod, args = engine(body_of({"drafter": {"revision": "main"}}, rollout=None))
    assert "lifecycle" not in pod["containers"][0] and not [a for a in args if a.startswith("--shutdown-timeout")]


# ----------------------------------------------------------------- the state machine through the planner


def monitor(revision: str, stable_tau: float, canary_tau: float, *, drafts: float = 500, ready: int = 1,
            restarts: int = 0, probe: ro.Probe | None = None) -> CanaryReport:
    def totals(tau: float) -> ro.Totals:
        return ro.Totals(pods=1, drafts=drafts, draft_tokens=drafts * 15, accepted_tokens=(tau - 1) * drafts,
                         output_tokens=tau * drafts, running_request_seconds=tau * drafts / 10, requests=40)
    return CanaryReport(revision=revision, stable=totals(stable_tau), canary=totals(canary_tau),
                        probe=probe if probe is not None else ro.Probe(prompts=4, identical=4, errors=0),
                        health=ro.Health(pods=1, ready=ready, restarts=restarts, crash_looping=False), since=0.0)


@pytest.fixture
def stable():
    """A deployment that runs revision A (drafter commit c...) for an hour; the spec now asks for another drafter."""
    old = plan_of(BASE)
    return old, live(old), respec(BASE, {"drafter": {"model": "z-lab/Qwen3.6-27B-DFlash-b"}})


def test_first_apply_has_no_canary():
    plan = plan_of(BASE)
    assert kinds(plan.apply) == [("ConfigMap", f"{NAME}-engine"), ("Deployment", NAME), ("Service", NAME),
                                 ("PodDisruptionBudget", NAME)]
    assert plan.rollout.status["phase"] == "Stable"
    assert plan.rollout.requeue is None


def test_a_change_starts_a_canary_and_the_stable_keeps_its_live_template(stable):
    old, children, new = stable
    plan = plan_of(new, children)
    n = names(NAME)
    assert ("Deployment", n["canary"]) in kinds(plan.apply) and ("ConfigMap", n["canaryconfigmap"]) in kinds(plan.apply)
    assert template(plan.apply, NAME) == template(old.apply, NAME)  # live: no restart of the stable pods
    stable_cm = next(o for o in plan.apply if o["metadata"]["name"] == n["configmap"])
    assert stable_cm["data"] == next(o for o in old.apply if o["metadata"]["name"] == n["configmap"])["data"]
    canary = next(o for o in plan.apply if o["metadata"]["name"] == n["canary"])
    assert canary["spec"]["replicas"] == 1
    assert canary["metadata"]["labels"][N.TRACK_LABEL] == N.TRACK_CANARY
    assert canary["spec"]["selector"]["matchLabels"] == {**selector_labels(NAME), N.TRACK_LABEL: N.TRACK_CANARY}
    tmpl = canary["spec"]["template"]
    assert tmpl["metadata"]["labels"][N.TRACK_LABEL] == N.TRACK_CANARY
    assert tmpl["metadata"]["annotations"][N.REVISION_ANNOTATION] == plan.rendered.revision
    assert {"name": "engine-config", "configMap": {"name": n["canaryconfigmap"]}} in tmpl["spec"]["volumes"]
    # the Service still selects every engine pod: stable and canary share the traffic by endpoints
    svc = next(o for o in plan.apply if o["kind"] == "Service")
    assert set(svc["spec"]["selector"].items()) <= set(tmpl["metadata"]["labels"].items())
    assert plan.rollout.status["phase"] == "Progressing"
    assert plan.rollout.status["canaryRevision"] == plan.rendered.revision
    assert plan.rollout.status["stableRevision"] == old.rendered.revision
    assert plan.rollout.condition[0] == "Unknown"
    assert plan.rollout.requeue == pl.ANALYZING_REQUEUE_S
    assert plan.delete == []


def test_replicas_follow_the_spec_on_the_live_stable_while_a_canary_runs(stable):
    _, children, new = stable
    plan = plan_of(respec(new, {"replicas": 3}), children)
    dep = next(o for o in plan.apply if o["metadata"]["name"] == NAME)
    assert dep["spec"]["replicas"] == 3
    assert next(o for o in plan.apply if o["metadata"]["name"] == f"{NAME}-canary")["spec"]["replicas"] == 1


def test_a_scale_change_alone_rolls_nothing(stable):
    old, children, _ = stable
    plan = plan_of(respec(BASE, {"replicas": 4}), children)
    assert f"{NAME}-canary" not in [o["metadata"]["name"] for o in plan.apply]
    assert template(plan.apply, NAME) == template(old.apply, NAME)
    assert plan.rollout.status["phase"] == "Stable"


def _running(new: dict, children: dict, created: float = NOW - 120) -> tuple[dict, str]:
    """The children once the canary of ``new`` was created (``created``) and its pods are ready."""
    first = plan_of(new, children)
    canary = live(first, created=created)
    both = {**children, **{k: v for k, v in canary.items() if k[1].startswith(f"{NAME}-canary")}}
    return both, first.rendered.revision


def test_analyzing_waits_for_drafts(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.6, drafts=5))
    assert plan.rollout.status["phase"] == "Analyzing"
    assert plan.rollout.condition[0] == "Unknown" and "5/10 drafts" in plan.rollout.condition[2]
    assert plan.rollout.status["startedAt"] == pl._epoch_rfc3339(NOW - 120)
    assert [r["track"] for r in plan.rollout.status["analysis"]] == ["stable", "canary"]


def test_low_acceptance_rolls_back_with_the_numbers(stable):
    old, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.72, 1.45))
    assert plan.rollout.status["phase"] == "RolledBack"
    status, reason, message = plan.rollout.condition
    assert (status, reason) == ("False", "AcceptanceBelowStable")
    assert "1.45" in message and "3.72" in message and "0.39 < 0.90" in message
    assert ("Deployment", f"{NAME}-canary") in plan.delete and ("ConfigMap", f"{NAME}-canary-engine") in plan.delete
    assert template(plan.apply, NAME) == template(old.apply, NAME)
    assert plan.rollout.status["refusedRevision"] == rev
    assert plan.rollout.status["decision"]["result"] == "Rollback"
    assert plan.rollout.baseline is None
    # the status path: Rollout=False with a Warning Event
    body = new
    sp = pl.plan_status(NAME, body.get("status"), plan.observation(body, both[("Deployment", NAME)]), plan.resolved,
                        None, "2027-01-15T08:00:00Z")
    cond = next(c for c in sp.status["conditions"] if c["type"] == N.ROLLOUT)
    assert cond["status"] == "False" and cond["reason"] == "AcceptanceBelowStable"
    assert ("Warning", "AcceptanceBelowStable", cond["message"]) in [ev for _, ev in sp.events]
    assert sp.patch["rollout"]["phase"] == "RolledBack"
    # the stable keeps its old config: Progressing is not stuck rolling out
    prog = next(c for c in sp.status["conditions"] if c["type"] == N.PROGRESSING)
    assert prog["reason"] == "RolledOut"


def test_a_refused_revision_is_not_retried_until_asked(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    back = plan_of(new, both, monitor=monitor(rev, 3.72, 1.45))
    status = {"rollout": back.rollout.status}
    again = plan_of(new, children, status=status)  # the canary is gone
    assert f"{NAME}-canary" not in [o["metadata"]["name"] for o in again.apply]
    assert again.rollout.status["phase"] == "RolledBack"
    assert again.rollout.condition[:2] == ("False", "AcceptanceBelowStable")
    retry = plan_of(body_of(new["spec"], annotations={N.ROLLOUT_ANNOTATION: "retry@1"}, rollout=None),
                    children, status=status)
    assert f"{NAME}-canary" in [o["metadata"]["name"] for o in retry.apply]
    assert retry.rollout.status["requestHandled"] == "retry@1"
    assert "refusedRevision" not in retry.rollout.status
    # a spec change again: a new revision gets its canary
    other = plan_of(respec(new, {"drafter": {"model": "z-lab/Qwen3.6-27B-DFlash-c"}}), children, status=status)
    assert f"{NAME}-canary" in [o["metadata"]["name"] for o in other.apply]


def test_good_acceptance_promotes_and_the_baseline_follows(stable):
    old, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.8))
    assert plan.rollout.status["phase"] == "Promoting"
    assert plan.rollout.condition[:2] == ("True", "Promoted")
    assert template(plan.apply, NAME)["metadata"]["annotations"][N.REVISION_ANNOTATION] == rev
    assert f"{NAME}-canary" in [o["metadata"]["name"] for o in plan.apply]  # kept until the stable is rolled
    assert plan.rollout.decision["result"] == "Promote"
    assert plan.rollout.baseline["length"] == 3.8
    # the status path writes it (no acceptance report needed: the planner decided) for the promoted revision
    obs = plan.observation(new, both[("Deployment", NAME)])
    promoted = plan.promoted_baseline(new)
    assert obs.promoted_baseline == promoted and promoted["length"] == 3.8 and promoted["revision"]
    for report in (None, AcceptanceReport(acceptance={"length": 3.7, "baseline": {"length": 3.7}})):
        sp = pl.plan_status(NAME, new.get("status"), obs, plan.resolved, report, "2027-01-15T08:00:00Z")
        assert sp.patch["acceptance"]["baseline"] == promoted
    assert plan.observation(new, both[("Deployment", NAME)], ["Deployment qwen"]).promoted_baseline is None
    # once the stable Deployment serves the revision and is ready: the canary goes
    promoted = live(plan)
    done = {**both, ("Deployment", NAME): promoted[("Deployment", NAME)],
            ("ConfigMap", f"{NAME}-engine"): promoted[("ConfigMap", f"{NAME}-engine")]}
    final = plan_of(new, done, status={"rollout": plan.rollout.status}, monitor=monitor(rev, 3.7, 3.8))
    assert final.rollout.status["phase"] == "Stable"
    # the analysis the promotion was decided on, its stable row still the old revision's (not relabelled)
    assert final.rollout.status["analysis"] == plan.rollout.status["analysis"]
    measured_stable = plan.rollout.status["analysis"][0]
    assert measured_stable["track"] == "stable" and measured_stable.get("revision") != rev
    assert [r.get("revision") for r in final.rollout.status["analysis"]] == [measured_stable.get("revision"), rev]
    assert ("Deployment", f"{NAME}-canary") in final.delete
    assert final.rollout.status["stableRevision"] == rev


def test_crashing_canary_rolls_back(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.7, ready=0, restarts=3))
    assert plan.rollout.condition[:2] == ("False", "CanaryCrashing")


def test_the_deadline_fires_without_any_analysis(stable):
    _, children, new = stable
    both, rev = _running(new, children, created=NOW - 301)
    plan = plan_of(new, both)  # the monitor handed nothing over
    assert plan.rollout.condition[:2] == ("False", "DeadlineExceeded")
    assert plan.rollout.status["phase"] == "RolledBack"
    before = plan_of(new, {**both}, now=NOW - 2)
    assert before.rollout.status["phase"] in ("Progressing", "Analyzing")


def test_an_analysis_of_another_revision_is_not_used(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor("0" * 16, 3.72, 1.45))
    assert plan.rollout.status["phase"] != "RolledBack"


def test_abort_and_promote_requests_are_acted_on_once(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    abort = body_of(new["spec"], annotations={N.ROLLOUT_ANNOTATION: "abort@7"}, rollout=None)
    plan = plan_of(abort, both, monitor=monitor(rev, 3.7, 3.7, drafts=1))
    assert plan.rollout.condition[:2] == ("False", "Aborted")
    assert plan.rollout.status["requestHandled"] == "abort@7"
    promote = body_of(new["spec"], annotations={N.ROLLOUT_ANNOTATION: "promote@8"}, rollout=None)
    plan = plan_of(promote, both, monitor=monitor(rev, 3.7, 3.7, drafts=1))
    assert plan.rollout.status["phase"] == "Promoting"
    # handled already: no second promotion of a later canary
    later = plan_of(promote, both, status={"rollout": {"phase": "Analyzing", "requestHandled": "promote@8"}},
                    monitor=monitor(rev, 3.7, 3.7, drafts=1))
    assert later.rollout.status["phase"] == "Analyzing"


def test_an_operator_restart_continues_the_same_canary(stable):
    """Nothing in memory: the canary Deployment (its revision and creationTimestamp) and the status say it all."""
    _, children, new = stable
    both, rev = _running(new, children, created=NOW - 200)
    a = plan_of(new, both, status={"rollout": {"phase": "Analyzing"}})
    b = plan_of(new, both, status={"rollout": {"phase": "Analyzing"}})
    assert a.rollout.status == b.rollout.status
    assert a.rollout.status["startedAt"] == pl._epoch_rfc3339(NOW - 200)
    canary = next(o for o in a.apply if o["metadata"]["name"] == f"{NAME}-canary")
    assert canary == next(o for o in plan_of(new, children).apply if o["metadata"]["name"] == f"{NAME}-canary")


def test_switching_to_rolling_update_removes_the_canary_and_the_rollout_status(stable):
    _, children, new = stable
    both, rev = _running(new, children)
    body = copy.deepcopy(new)
    del body["spec"]["rollout"]
    plan = plan_of(body, both)
    assert ("Deployment", f"{NAME}-canary") in plan.delete
    current = {"rollout": {"phase": "Analyzing"}, "conditions": [
        {"type": N.ROLLOUT, "status": "Unknown", "reason": "Analyzing", "message": "", "lastTransitionTime": "x"}]}
    sp = pl.plan_status(NAME, current, plan.observation(body, both[("Deployment", NAME)]), plan.resolved, None,
                        "2027-01-15T08:00:00Z")
    assert sp.patch["rollout"] is None
    assert N.ROLLOUT not in [c["type"] for c in sp.status["conditions"]]


def test_a_stable_from_before_canary_goes_through_a_canary():
    old = plan_of(body_of({"drafter": {"revision": "main"}}, rollout=None))
    children = live(old)
    plan = plan_of(BASE, children)
    assert f"{NAME}-canary" in [o["metadata"]["name"] for o in plan.apply]
    assert template(plan.apply, NAME) == template(old.apply, NAME)


def test_rollout_condition_events():
    assert st.event_for({"type": N.ROLLOUT, "status": "False", "reason": "OutputsDiffer", "message": "m"}) == \
        ("Warning", "OutputsDiffer", "m")
    assert st.event_for({"type": N.ROLLOUT, "status": "True", "reason": "Promoted", "message": "m"}) == \
        ("Normal", "Promoted", "m")
    assert st.event_for({"type": N.ROLLOUT, "status": "Unknown", "reason": "Analyzing", "message": "m"}) is None



def test_a_hand_edited_status_rollout_does_not_fail_the_reconcile(stable):
    _, children, new = stable
    plan = plan_of(new, children, status={"rollout": {"phase": "Analyzing", "decision": {"result": "Maybe"},
                                                      "analysis": "lots", "refusedRevision": 7}})
    assert plan.rollout.status["phase"] == "Progressing"
    assert "decision" not in plan.rollout.status and "analysis" not in plan.rollout.status


# ----------------------------------------------------------------- issue 43: the probe and the stable's status

DIFFER = ro.Probe(prompts=4, identical=3, errors=0, message="prompt 2: 'Paris' vs 'Lyon'")


def test_greedy_outputs_that_differ_roll_the_canary_back(stable):
    """Speculative decoding is lossless: at temperature 0 the canary must answer exactly as the stable does while
    the target model and the engine are the same (only the drafter changed here), whatever its acceptance."""
    _, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.8, probe=DIFFER))
    assert plan.rollout.condition[:2] == ("False", "OutputsDiffer")
    assert "1 of 4 probe prompts" in plan.rollout.condition[2] and "Lyon" in plan.rollout.condition[2]
    assert plan.rollout.status["phase"] == "RolledBack"
    # the same analysis with identical outputs promotes
    assert plan_of(new, both, monitor=monitor(rev, 3.7, 3.8)).rollout.status["phase"] == "Promoting"


@pytest.mark.parametrize("change", [{"engine": {"image": "registry.example/runtime:vllm-0.33.0-custom"}},
                                    {"engine": {"version": "0.33.1"}}], ids=["engine image", "engine version"])
def test_an_engine_change_is_not_judged_by_identical_outputs(change):
    """Another engine build may legitimately change greedy outputs (kernels, numerics): with the image or the
    engine version changed the probe's differences are not a rollback reason (core/rollout.judge
    ``compare_outputs=False``), and the verdict says the outputs were not compared."""
    old = plan_of(BASE)
    children = live(old)
    new = respec(BASE, change)
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.8, probe=DIFFER))
    assert plan.rollout.status["phase"] == "Promoting", plan.rollout.condition
    assert "outputs not compared" in plan.rollout.status["decision"]["message"]


def test_a_stable_status_of_an_older_generation_is_not_rolled(stable):
    """Deployment status counts describe spec generation status.observedGeneration; until the controller has
    observed the promoted template (observedGeneration < metadata.generation) updatedReplicas/readyReplicas are the
    old ReplicaSet's (kubectl rollout status waits for ``Generation <= ObservedGeneration`` first:
    kubectl/pkg/polymorphichelpers/rollout_status.go). The canary stays until the new template is really rolled."""
    old, children, new = stable
    both, rev = _running(new, children)
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.8))
    assert plan.rollout.status["phase"] == "Promoting"
    promoted = live(plan)
    dep = promoted[("Deployment", NAME)]
    dep["metadata"]["generation"], dep["status"]["observedGeneration"] = 2, 1  # the write is not observed yet
    done = {**both, ("Deployment", NAME): dep, ("ConfigMap", f"{NAME}-engine"): promoted[("ConfigMap", f"{NAME}-engine")]}
    stale = plan_of(new, done, status={"rollout": plan.rollout.status}, monitor=monitor(rev, 3.7, 3.8))
    assert stale.rollout.status["phase"] == "Promoting"
    assert ("Deployment", f"{NAME}-canary") not in stale.delete
    dep["status"]["observedGeneration"] = 2  # observed: now it is rolled
    final = plan_of(new, done, status={"rollout": plan.rollout.status}, monitor=monitor(rev, 3.7, 3.8))
    assert final.rollout.status["phase"] == "Stable" and ("Deployment", f"{NAME}-canary") in final.delete


def test_a_target_change_is_not_judged_by_identical_outputs():
    """A new target revision (other weights) changes greedy outputs by design: not compared either."""
    old = plan_of(BASE)
    children = live(old)
    new = respec(BASE, {"target": {"revision": "v2"}})
    commits = ("b" * 40, "c" * 40)
    first = plan_of(new, children, commits=commits)
    both = {**children, **{k: v for k, v in live(first, created=NOW - 120).items() if k[1].startswith(f"{NAME}-canary")}}
    rev = first.rendered.revision
    plan = plan_of(new, both, monitor=monitor(rev, 3.7, 3.8, probe=DIFFER), commits=commits)
    assert plan.rollout.status["phase"] == "Promoting", plan.rollout.condition
    assert "outputs not compared" in plan.rollout.status["decision"]["message"]
