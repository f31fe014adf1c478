"""A canary rollout through the reconciler on the embedded API server, judged from stand-in engines' counters.

The scene: the reconciler in-process against the embedded API server (tests/controller/ssa_support.py; the
watches are played by GETs, the test plays the kubelet by writing the Deployments' status). The analysis is
the operator's own acceptance monitor's (controller/monitor.py, reported in ``cache.canaries`` (controller/canary.py)):
it scrapes a stable and a canary engine pod whose /metrics are stand-in vLLM engines' (``specdeploy_dev.engine_standin``,
one per track, with controllable acceptance; answered in-process, a fake monitor clock). The probe is off in these
specs (its HTTP side is tested in test_probe.py / test_monitor_rollout.py).

- a drafter change under Canary: the canary Deployment appears, the stable Deployment is not written (same
  generation and template: its pods keep their uids);
- the operator is replaced mid-analysis by a fresh one (nothing in memory): the same canary continues;
- low acceptance on the canary: rolled back (AcceptanceBelowStable, the two taus in the message, a Warning
  Event, the canary's children deleted, the stable still untouched);
- a good drafter: promoted, the stable rolls to the new revision, the canary goes once the stable is ready,
  and the acceptance baseline is the canary's measured tau.
"""

from __future__ import annotations

import time

import pytest

from specdeploy.controller.monitor import ENGINE_POD_LABELS, monitor_for, pod_target
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.controller.resolve import Resolver
from specdeploy.core import names as N
from specdeploy.core.rollout import canary as ro
from specdeploy_dev.engine_standin import EngineStandin
from owners import controller_ref, pod_owner
from ssa_support import Env

NAME = "canary"
CANARY, CANARY_CM = f"{NAME}-canary", f"{NAME}-canary-engine"
CHILDREN = [("ConfigMap", f"{NAME}-engine"), ("Deployment", NAME), ("Service", NAME), ("PodDisruptionBudget", NAME),
            ("ConfigMap", CANARY_CM), ("Deployment", CANARY)]
ROLLOUT = {"strategy": "Canary", "canary": {"replicas": 1},
           "analysis": {"window": "10s", "minDrafts": 50, "probe": {"enabled": False}}, "deadline": "5m"}
SCRAPES = 6  # per pod: the first primes, each later one adds the stand-in's steps since the previous


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("rollout"), "rollout")
    yield e
    e.close()


class Operator:
    """One operator process's worth of memory: a Controller and its caches (replaced to simulate a restart)."""

    def __init__(self, env: Env):
        self.env = env
        self.offset = 0.0  # seconds the wall clock is moved on (a canary's age without sleeping)
        self.ctl = Controller(env.kube, Resolver(env.kube), Settings(workers=0, backoff_min=0.01, backoff_max=0.02),
                              wall=lambda: time.time() + self.offset)

    def sync(self) -> None:
        key = (self.env.ns, NAME)
        self.ctl.bodies[key] = self.env.get("SpeculativeDeployment", NAME)
        for kind, cname in CHILDREN:
            live = self.env.get(kind, cname)
            if live is None:
                self.ctl.children.pop((kind, self.env.ns, cname), None)
            else:
                self.ctl.children[(kind, self.env.ns, cname)] = {**live, "kind": kind}

    def reconcile(self) -> float | None:
        self.sync()
        return self.env.run(self.ctl.run_once((self.env.ns, NAME)))

    def hand_over(self, revision: str, stable: EngineStandin, canary: EngineStandin) -> ro.Totals:
        """The acceptance monitor of this operator scrapes a stable and a canary pod served by the stand-ins
        (its watch-fed pod cache fed here, scrapes answered in-process, a fake clock) and hands its analysis
        over; returns the canary's totals as handed over."""
        engines: dict[str, EngineStandin] = {}
        clock = [0.0]

        async def fetch(url: str, timeout: float) -> str:
            return engines[url].metrics_text(advance=True)

        m = monitor_for(self.ctl, 30, fetch=fetch, clock=lambda: clock[0])
        self.sync()
        for p, standin, workload in ((engine_pod(self.env.ns, "stable-0", "10.0.0.7"), stable, NAME),
                                     (engine_pod(self.env.ns, "canary-0", "10.0.0.8", revision), canary, CANARY)):
            # the pod's ReplicaSet, controlled by the live Deployment (the monitor trusts the uid chain)
            rs = pod_owner({**self.env.get("Deployment", workload), "kind": "Deployment"})
            m.observe_owner("ADDED", rs)
            p["metadata"]["ownerReferences"] = [controller_ref("ReplicaSet", rs["metadata"]["name"],
                                                               rs["metadata"]["uid"])]
            m.observe_pod("ADDED", p)
            engines[pod_target(p).url] = standin
        for _ in range(SCRAPES):
            clock[0] += 30
            self.env.run(m.tick())
        part = self.ctl.cache.canaries[(self.env.ns, NAME)]
        assert part.revision == revision
        return part.canary


def engine_pod(ns: str, name: str, ip: str, canary_revision: str | None = None) -> dict:
    """An engine pod as the kubelet reports it: ready, its http port; a canary one carries the track label and its
    revision."""
    labels = {**ENGINE_POD_LABELS, N.LABEL_INSTANCE: NAME, N.ENGINE_LABEL: "vllm"}
    annotations = {}
    if canary_revision is not None:
        labels[N.TRACK_LABEL] = N.TRACK_CANARY
        annotations[N.REVISION_ANNOTATION] = canary_revision
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": labels,
                         "annotations": annotations, "creationTimestamp": "2026-12-01T19:00:00Z"},
            "spec": {"containers": [{"name": "engine", "command": ["vllm", "serve"],
                                     "args": ["Qwen/Qwen3.6-27B", "--port", "8000"],
                                     "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"podIP": ip, "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "engine", "ready": True, "restartCount": 0,
                                              "state": {"running": {}}}]}}


def spec(drafter: str) -> dict:
    return {"drafter": {"model": drafter, "configFrom": {"configMapKeyRef": {"name": "ssa-drafter"}}},
            "rollout": ROLLOUT}


def patch_status_sub(env: Env, name: str, body: dict) -> None:
    from specdeploy.controller.kube import KINDS

    env.run(env.other.call("PATCH", KINDS["Deployment"].path(env.ns, name) + "/status", body=body,
                           content_type="application/merge-patch+json"))


def mark_ready(env: Env, name: str) -> None:
    d = env.get("Deployment", name)
    r = d["spec"]["replicas"]
    patch_status_sub(env, name, {"status": {"observedGeneration": d["metadata"]["generation"], "replicas": r,
                                            "updatedReplicas": r, "readyReplicas": r, "availableReplicas": r}})


def rollout_status(env: Env) -> dict:
    return (env.get("SpeculativeDeployment", NAME).get("status") or {}).get("rollout") or {}


def condition(env: Env) -> dict | None:
    conds = (env.get("SpeculativeDeployment", NAME).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == N.ROLLOUT), None)


def test_canary_rollback_restart_and_promotion(env: Env):
    op = Operator(env)
    env.put_cr(NAME, spec("z-lab/Qwen3.6-27B-DFlash"))
    for _ in range(3):
        op.reconcile()
    mark_ready(env, NAME)
    op.reconcile()
    stable = env.get("Deployment", NAME)
    first = stable["spec"]["template"]["metadata"]["annotations"][N.REVISION_ANNOTATION]
    assert rollout_status(env)["phase"] == "Stable" and rollout_status(env)["stableRevision"] == first
    assert env.get("Deployment", CANARY) is None

    # a drafter change: a canary beside the untouched stable
    env.put_cr(NAME, spec("z-lab/Qwen3.6-27B-DFlash-shifted"))
    assert op.reconcile() == pytest.approx(10.0)  # analysing: requeued so that deadlines fire without traffic
    canary = env.get("Deployment", CANARY)
    assert canary is not None and env.get("ConfigMap", CANARY_CM) is not None
    assert canary["spec"]["template"]["metadata"]["labels"][N.TRACK_LABEL] == N.TRACK_CANARY
    bad = canary["spec"]["template"]["metadata"]["annotations"][N.REVISION_ANNOTATION]
    assert bad != first
    now = env.get("Deployment", NAME)
    assert now["metadata"]["generation"] == stable["metadata"]["generation"]  # no write of the stable template
    assert now["spec"]["template"] == stable["spec"]["template"]
    assert rollout_status(env)["phase"] == "Progressing" and rollout_status(env)["canaryRevision"] == bad
    mark_ready(env, CANARY)
    op.reconcile()
    assert rollout_status(env)["phase"] in ("Progressing", "Analyzing")

    # the operator dies mid-analysis; a fresh one (nothing in memory) continues the same canary
    op = Operator(env)
    op.offset = 30.0  # past the 10 s window
    op.hand_over(bad, EngineStandin("vllm", "healthy"), EngineStandin("vllm", "collapsed"))
    op.reconcile()
    assert env.get("Deployment", CANARY) is None and env.get("ConfigMap", CANARY_CM) is None
    c = condition(env)
    assert (c["status"], c["reason"]) == ("False", "AcceptanceBelowStable"), c
    assert "canary tau" in c["message"] and "stable" in c["message"] and " < 0.90" in c["message"]
    rs = rollout_status(env)
    assert rs["phase"] == "RolledBack" and rs["refusedRevision"] == bad and rs["stableRevision"] == first
    assert rs["decision"]["result"] == "Rollback" and {r["track"] for r in rs["analysis"]} == {"stable", "canary"}
    warnings = [e for e in env.events(NAME) if e["reason"] == "AcceptanceBelowStable" and e["type"] == "Warning"]
    assert len(warnings) == 1 and warnings[0]["message"] == c["message"]
    now = env.get("Deployment", NAME)
    assert now["metadata"]["generation"] == stable["metadata"]["generation"]
    assert now["spec"]["template"] == stable["spec"]["template"]
    # refused: no new canary on the next reconciles
    op.reconcile()
    assert env.get("Deployment", CANARY) is None and rollout_status(env)["phase"] == "RolledBack"

    # a good drafter: promoted, the stable rolls, the canary goes once the stable is ready
    env.put_cr(NAME, spec("z-lab/Qwen3.6-27B-DFlash-seed2"))
    op.offset = 0.0
    op.reconcile()
    canary = env.get("Deployment", CANARY)
    good = canary["spec"]["template"]["metadata"]["annotations"][N.REVISION_ANNOTATION]
    mark_ready(env, CANARY)
    op.offset = 30.0
    measured = op.hand_over(good, EngineStandin("vllm", "healthy"), EngineStandin("vllm", "healthy"))
    op.reconcile()
    c = condition(env)
    assert (c["status"], c["reason"]) == ("True", "Promoted"), c
    assert rollout_status(env)["phase"] == "Promoting"
    rolled = env.get("Deployment", NAME)
    assert rolled["spec"]["template"]["metadata"]["annotations"][N.REVISION_ANNOTATION] == good
    assert env.get("Deployment", CANARY) is not None  # it serves until the stable pods are ready
    baseline = env.get("SpeculativeDeployment", NAME)["status"]["acceptance"]["baseline"]
    assert baseline["length"] == pytest.approx(round(measured.tau(), 2))
    mark_ready(env, NAME)
    op.reconcile()
    assert env.get("Deployment", CANARY) is None
    # the monitor was asked to report it (a command: its report is its own), so later status writes keep it
    assert env.get("SpeculativeDeployment", NAME)["status"]["acceptance"]["baseline"] == baseline
    rs = rollout_status(env)
    assert rs["phase"] == "Stable" and rs["stableRevision"] == good and "canaryRevision" not in rs
    assert condition(env)["reason"] == "Promoted"
    assert [e for e in env.events(NAME) if e["reason"] == "Promoted" and e["type"] == "Normal"]
