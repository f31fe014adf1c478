"""Canary rollouts (``spec.rollout.strategy: Canary``) on the real loop: vLLM's CPU build through the operator and the
dev kubelet, with drafters trained here.

Opt-in like e2e/test_e2e_vllm_cpu.py (``SPECDEPLOY_E2E_VLLM_CPU=1``); serial. The scene is
``specdeploy_dev.realloop.RealLoop`` without Prometheus, the dev kubelet with ``--service-proxy`` (kube-proxy's part:
a random ready pod per connection, so the canary's share of the traffic is its share of the endpoints), and
``train-tiny-drafter``'s models: the trained target ``tiny/lang-target`` with its DFlash drafter ``tiny/lang-dflash``
(seed 0), the same weights with shifted ids ``tiny/lang-dflash-shifted`` (offline replay tau 1.46 against 3.80), a
second drafter of the same target trained with another seed ``tiny/lang-dflash-seed1`` (``--drafter-seed 1``) and
``tiny/lang-dflash-broken``: seed 0's repository with its weights file cut short (an interrupted upload: the configs
are intact, so the gate and the preflight pass it; vLLM fails when it loads the weights). One deployment,
one scenario after the other on its live state; the stable pod of (a) serves through (c).

A load client (``ServiceLoad``: greedy completions, the next 0.3 s after the last one ended) runs through the
Service during every scenario and keeps every request; a timeline recorder reads, every ~2 s, each
engine pod's own counters by track and ``status.rollout``.

(a) the shifted drafter (accepted through ``spec.checks.accept``) is canaried and rolled back with
    ``AcceptanceBelowStable``, both measured taus in the message (those of ``status.rollout.analysis``), the stable
    pod's uid unchanged and never restarted, a Warning Event, ``refusedRevision``; the load client saw no failed
    request, the canary's removal included.
(c) the broken drafter: the canary's engine cannot start; rolled back with ``CanaryCrashing`` well before the deadline.
(b) the seed-1 drafter is promoted: the stable Deployment serves it, the canary goes, and the acceptance baseline
    follows (``status.acceptance.baseline`` learned on the new revision, at the canary's measured tau).
(d) back to the seed-0 drafter: the operator is killed (SIGKILL) during the analysis and started again; the same
    canary (same canary Deployment and pod uids, revision, startedAt) continues to a decision.

The time from ``kubectl apply`` to the decision is printed per scenario (and the figures, ``FIGURES``); the timelines
are written to ``$SPECDEPLOY_E2E_ROLLOUT_TIMELINE`` (default: the loop's work directory) for
``python -m specdeploy_dev.rollout_plot`` (docs/images/rollout-tau.png, docs/how-to/roll-out-safely.md).
``SPECDEPLOY_E2E_IP_RANGE=FIRST-LAST`` moves the pods off 127.0.0.2.. as in the other real-loop modules.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specdeploy.core import acceptance as acc
from specdeploy.core.names import ROLLOUT, TRACK_CANARY, TRACK_LABEL
from specdeploy_dev.harness import BIN, wait_for
from specdeploy_dev import canaryscene as scene
from specdeploy_dev.canaryscene import (ANALYSIS, BOOT_TIMEOUT, BROKEN, DEADLINE_S, DECISION_TIMEOUT, KUBELET_ARGS,
                                        LANG_TARGET, LOAD, NAME, PROBE_PERIOD_CAP, SECOND, SHIFTED, TRAINED)
from specdeploy_dev.realloop import RealLoop, ServiceLoad, http, truncated_copy

CANARY = f"{NAME}-canary"  # core/render/children.names(NAME)["canary"]


def _models(workdir: Path) -> dict:
    return {"more_models": lambda models: truncated_copy(models, TRAINED, BROKEN)}


pytestmark = [pytest.mark.vllm_cpu, pytest.mark.serial,
              pytest.mark.real_loop(_models, trained=True, drafter_seeds=(1,), prometheus=False,
                                    kubelet_args=list(KUBELET_ARGS), probe_period_cap=PROBE_PERIOD_CAP)]

FIGURES: dict[str, Any] = {}
TIMELINES: list[dict] = []
TAU_MESSAGE = re.compile(r"canary tau ([0-9.]+) vs stable ([0-9.]+)")


def state(loop: RealLoop) -> dict:
    return loop.__dict__.setdefault("rollout_state", {})


def rollout_cr(drafter: str, *, accept: list[str] | None = None, analysis: dict | None = None) -> dict:
    return scene.rollout_cr(drafter, name=NAME, accept=accept, analysis=analysis)


def rollout(loop: RealLoop) -> dict:
    return scene.rollout(loop, NAME)


def engine_pods(loop: RealLoop) -> list[dict]:
    """The deployment's engine pods, stable and canary (the Service's selector), not terminating."""
    items = loop.get("pods", "-l", f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=engine")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def track(pod: dict) -> str:
    return "canary" if (pod["metadata"].get("labels") or {}).get(TRACK_LABEL) == TRACK_CANARY else "stable"


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def stable_pods(loop: RealLoop) -> list[dict]:
    return [p for p in engine_pods(loop) if track(p) == "stable"]


def restarts(pod: dict) -> int:
    return sum(cs.get("restartCount", 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


def drafter_of(loop: RealLoop, deployment: str) -> str:
    dep = loop.get("deployment", deployment)
    args = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]
    return json.loads(args[args.index("--speculative-config") + 1])["model"]


def counters(text: str) -> tuple[float, float]:
    """(drafts, accepted tokens) of one scrape of a vLLM engine (summed over series)."""
    drafts = accepted = 0.0
    for s in acc.parse_exposition(text):
        if s.name == acc.VLLM_DRAFTS:
            drafts += s.value
        elif s.name == acc.VLLM_ACCEPTED:
            accepted += s.value
    return drafts, accepted


class Timeline:
    """Every ``period`` s from the apply on: each ready engine pod's own counters, summed by track as deltas from the
    pod's first reading (as the operator's analysis counts them), the canary pods' uids, and ``status.rollout``."""

    def __init__(self, loop: RealLoop, scenario: str, title: str, period: float = 2.0):
        self.loop, self.period = loop, period
        self.doc: dict[str, Any] = {"scenario": scenario, "title": title, "samples": []}
        self.t0 = time.monotonic()
        self.canary_uids: set[str] = set()  # canary pods seen
        self.canary_deployments: set[str] = set()  # canary Deployments (uids) seen
        self._first: dict[str, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"timeline-{scenario}", daemon=True)

    def __enter__(self) -> "Timeline":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def sample(self) -> None:
        tracks: dict[str, dict] = {t: {"drafts": 0.0, "accepted": 0.0, "pods": 0, "ready": False}
                                   for t in ("stable", "canary")}
        for p in engine_pods(self.loop):
            tr = tracks[track(p)]
            tr["pods"] += 1
            if track(p) == "canary":
                self.canary_uids.add(p["metadata"]["uid"])
            if not ready(p):
                continue
            tr["ready"] = True
            try:
                now = counters(http(f"{self.loop.pod_url(p)}/metrics", timeout=5))
            except Exception:  # noqa: BLE001 - a pod going away between the list and the scrape
                continue
            first = self._first.setdefault(p["metadata"]["uid"], now)
            tr["drafts"] += now[0] - first[0]
            tr["accepted"] += now[1] - first[1]
        self.canary_deployments |= {d["metadata"]["uid"] for d in self.loop.get(
            "deployments", "-l", f"{TRACK_LABEL}={TRACK_CANARY}")["items"]}
        ro = rollout(self.loop)
        self.doc["samples"].append({"t": round(time.monotonic() - self.t0, 1), "phase": ro.get("phase"),
                                    "tracks": tracks, "analysis": ro.get("analysis")})

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - the recorder never fails a scenario; a gap in the plot at most
                pass
            self._stop.wait(self.period)

    def decided(self, decision: dict, seconds: float) -> None:
        self.doc["decision"] = {"t": round(seconds, 1), "result": decision.get("result"),
                                "reason": decision.get("reason"), "message": decision.get("message")}


def wait_decision(loop: RealLoop, before: dict | None, timeout: float = DECISION_TIMEOUT) -> tuple[dict, dict]:
    """The next ``status.rollout.decision`` (a new one: not ``before``) and the ``status.rollout`` it came in."""
    return scene.wait_decision(loop, before, NAME, timeout)


def canary_ready(loop: RealLoop, sc: dict, timeout: float = BOOT_TIMEOUT) -> dict:
    """The canary's one pod once it is ready; fails at once when a decision comes first (a canary rolled back while
    it starts would otherwise be waited for until the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            decision = rollout(loop).get("decision")
            pods = [p for p in engine_pods(loop) if track(p) == "canary"]
        except Exception:  # noqa: BLE001 - kubectl against a busy API server: try again
            decision, pods = sc["before"], []
        if decision != sc["before"]:
            pytest.fail(f"decided before the canary was ready: {decision}")
        if len(pods) == 1 and ready(pods[0]):
            return pods[0]
        if time.monotonic() > deadline:
            pytest.fail(f"no ready canary pod after {timeout:.0f}s: {[p.get('status') for p in pods]}"[:3000])
        time.sleep(1.0)


def under_analysis(loop: RealLoop, sc: dict) -> dict:
    """status.rollout once the canary's revision is under analysis (or already decided: on the tiny pair a verdict
    can come seconds after the canary is ready, since the window counts from its creation)."""
    return wait_for(lambda: ((r := rollout(loop)).get("canaryRevision") or r.get("decision") != sc["before"])
                    and r, 120, "the canary's revision in status.rollout")


def scenario(loop: RealLoop, key: str, title: str, cr: dict, *, load: bool = True) -> dict:
    """Apply ``cr`` with the load client and the timeline running; returns the scene's handles."""
    m = loop.trained_manifest
    st = state(loop)
    proxy = loop.service_proxy()
    sc: dict[str, Any] = {"before": rollout(loop).get("decision"), "rollout_before": rollout(loop)}
    sc["load"] = ServiceLoad(proxy, loop.service_url(NAME), LANG_TARGET, prompts=m["prompts"], **LOAD).__enter__() \
        if load else None
    sc["timeline"] = Timeline(loop, key, title).__enter__()
    sc["t0"] = time.monotonic()
    loop.apply(cr)
    st[key] = sc
    return sc


def finish(loop: RealLoop, key: str, sc: dict, decision: dict) -> dict:
    seconds = time.monotonic() - sc["t0"]
    sc["timeline"].decided(decision, seconds)
    print(f"\n[{key}] apply -> decision {decision.get('result')} {decision.get('reason')}: {seconds:.1f} s "
          f"({decision.get('message')})")
    FIGURES.setdefault("apply_to_decision_s", {})[key] = round(seconds, 1)
    FIGURES.setdefault("decisions", {})[key] = decision
    return {"seconds": seconds}


def close(loop: RealLoop, key: str, sc: dict) -> dict:
    """Stop the load client and the timeline; record both."""
    load: ServiceLoad | None = sc["load"]
    if load is not None:
        load.stop()
    sc["timeline"].__exit__()
    doc = sc["timeline"].doc
    if load is not None:
        doc["load"] = {"requests": load.requests, "failed": [{**f, "t": round(f["start"] - (time.time() - (
            time.monotonic() - sc["t0"])), 1)} for f in load.failed]}
        FIGURES.setdefault("load", {})[key] = {"requests": load.requests, "failed": len(load.failed),
                                               "first_failures": [f["error"] for f in load.failed[:3]]}
    TIMELINES.append(doc)
    out = Path(os.environ.get("SPECDEPLOY_E2E_ROLLOUT_TIMELINE") or loop.workdir / "rollout-timeline.json")
    out.write_text(json.dumps(TIMELINES, indent=1) + "\n")
    print(f"[{key}] timeline: {out}")
    return doc


def rollout_status_text(loop: RealLoop) -> str:
    p = subprocess.run([str(BIN / "specdeploy"), "rollout", "status", NAME, "-n", loop.namespace, "--kubeconfig",
                        loop.cluster.kubeconfig], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.rstrip()


def analysis_row(decision_or_status: dict, which: str) -> dict:
    return next(r for r in decision_or_status.get("analysis") or [] if r.get("track") == which)


# ----------------------------------------------------------------------------- the stable deployment


def test_stable_serves_the_trained_drafter(loop):
    m, second = loop.trained_manifests["dflash"], loop.trained_manifests["dflash-seed1"]
    assert m["models"][:2] == [LANG_TARGET, TRAINED] and second["models"][:2] == [LANG_TARGET, SECOND]
    assert second["target_sha256"] == m["target_sha256"]  # one target, two drafters
    FIGURES["offline_replay_tau"] = {"seed0": m["replay"]["right_ids"]["tau"], "shifted": m["replay"]["shifted_ids"]["tau"],
                                     "seed1": second["replay"]["right_ids"]["tau"]}
    t0 = time.monotonic()
    loop.apply(rollout_cr(TRAINED))
    loop.wait_condition(NAME, "DrafterCompatible", "True")
    pod = loop.ready_pod(NAME, timeout=BOOT_TIMEOUT)  # the first revision rolls as usual: no stable to compare with
    FIGURES["stable_apply_to_ready_s"] = round(time.monotonic() - t0, 1)
    assert track(pod) == "stable" and drafter_of(loop, NAME) == TRAINED
    ro = wait_for(lambda: (r := rollout(loop)).get("phase") == "Stable" and r.get("stableRevision") and r, 60,
                  "status.rollout: Stable with its stable revision")
    assert not loop.get("deployments", "-l", f"{TRACK_LABEL}={TRACK_CANARY}")["items"]
    # traffic through the Service until the stable revision's acceptance baseline settles
    with ServiceLoad(loop.service_proxy(), loop.service_url(NAME), LANG_TARGET, prompts=m["prompts"], **LOAD) as load:
        base = wait_for(lambda: ((loop.status(NAME).get("acceptance") or {}).get("baseline") or {}).get("length")
                        and loop.status(NAME)["acceptance"]["baseline"], 240, "the stable revision's baseline")
    assert not load.failed, load.failed[:3]
    assert base["length"] >= 3.0, base  # the trained pair: 3.72 on this engine (docs/benchmarks.md)
    st = state(loop)
    st.update(stable_uid=pod["metadata"]["uid"], stable_name=pod["metadata"]["name"], revision0=ro["stableRevision"],
              baseline0=base)
    FIGURES["stable"] = {"revision": ro["stableRevision"], "baseline": base, "requests": load.requests}


# ----------------------------------------------------------------------------- (a) shifted ids: rolled back


def test_a_shifted_drafter_is_rolled_back_acceptance_below_stable_with_no_failed_request(loop):
    st = state(loop)
    if "stable_uid" not in st:
        pytest.fail("needs the stable deployment of the previous test")
    sc = scenario(loop, "a", "(a) drafter with shifted layer ids",
                  rollout_cr(SHIFTED, accept=["TargetLayerIdsShifted"]))
    try:
        canary = canary_ready(loop, sc)
        assert track(canary) == TRACK_CANARY and drafter_of(loop, CANARY) == SHIFTED
        assert drafter_of(loop, NAME) == TRAINED  # the stable Deployment keeps the live template
        # removed after its verdict, the canary drains: preStop wait, then vLLM finishes its requests on SIGTERM
        engine = next(c for c in canary["spec"]["containers"] if c["name"] == "engine")
        assert engine["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep", engine.get("lifecycle")
        assert "--shutdown-timeout" in engine["args"], engine["args"]
        ro = under_analysis(loop, sc)
        refused = ro.get("canaryRevision") or ro.get("refusedRevision")
        assert ro["stableRevision"] == st["revision0"] != refused
        decision, at_decision = wait_decision(loop, sc["before"])
        finish(loop, "a", sc, decision)
        assert (decision["result"], decision["reason"]) == ("Rollback", "AcceptanceBelowStable"), decision
        cond = loop.condition(NAME, ROLLOUT)
        assert cond["status"] == "False" and cond["reason"] == "AcceptanceBelowStable", cond
        # both measured taus in the message: those of the analysis table the verdict was made on
        got = TAU_MESSAGE.search(cond["message"])
        assert got, cond["message"]
        c_row, s_row = analysis_row(at_decision, "canary"), analysis_row(at_decision, "stable")
        assert float(got.group(1)) == pytest.approx(c_row["tau"], abs=0.006)
        assert float(got.group(2)) == pytest.approx(s_row["tau"], abs=0.006)
        assert c_row["tau"] < ANALYSIS["minAcceptanceRatio"] * s_row["tau"], (c_row, s_row)
        assert c_row["drafts"] >= ANALYSIS["minDrafts"] and s_row["drafts"] >= ANALYSIS["minDrafts"]
        ro = rollout(loop)
        assert ro["refusedRevision"] == refused and ro["stableRevision"] == st["revision0"]
        assert [e for e in loop.events(NAME, "AcceptanceBelowStable") if e.get("type") == "Warning"], "a Warning Event"
        # the canary goes; the stable pod is the same pod, never restarted
        wait_for(lambda: not [p for p in engine_pods(loop) if track(p) == "canary"]
                 and not loop.get("deployments", "-l", f"{TRACK_LABEL}={TRACK_CANARY}")["items"], 120,
                 "the canary Deployment and pod gone")
        hooks = [ln for ln in (loop.workdir / "kubelet.log").read_text().splitlines() if "preStop" in ln]
        assert not hooks, hooks  # the canary's preStop hook ran: no "no local executable", no overrun
        time.sleep(5)  # the load keeps running on the stable pod alone
        (stable,) = stable_pods(loop)
        assert stable["metadata"]["uid"] == st["stable_uid"] and restarts(stable) == 0, stable["metadata"]
        assert ro["phase"] == "RolledBack", ro
        # what a person reads: `specdeploy rollout status` (the CLI against the cluster) and `kubectl get -o wide`
        shown = rollout_status_text(loop)
        assert "AcceptanceBelowStable" in shown and got.group(0) in shown and "canary" in shown, shown
        wide = loop.wide()
        assert "ROLLOUT" in wide.splitlines()[0] and "RolledBack" in wide, wide
        print(f"\n$ specdeploy rollout status {NAME}\n{shown}\n$ kubectl get specdeploy -o wide\n{wide}")
    finally:
        doc = close(loop, "a", sc)
    load = sc["load"]
    # requests reached both tracks (the canary's analysis counted the load's, not only the probe's) and none failed,
    # the canary's removal included
    assert c_row["requests"] > 0 and load.requests >= 10, (c_row, load.requests)
    assert not load.failed, f"{len(load.failed)} of {load.requests} requests failed: {load.failed[:3]}"
    FIGURES["a"] = {"stable_tau": s_row["tau"], "canary_tau": c_row["tau"], "message": cond["message"],
                    "rollout_status": shown, "analysis": at_decision.get("analysis"), "probe": at_decision.get("probe"),
                    "canary_pods": sorted(sc["timeline"].canary_uids), "samples": len(doc["samples"])}


# ----------------------------------------------------------------------------- (c) an engine that cannot start


def test_c_canary_whose_engine_cannot_start_is_rolled_back_canary_crashing(loop):
    st = state(loop)
    if "stable_uid" not in st:
        pytest.fail("needs the stable deployment")
    sc = scenario(loop, "c", "(c) weights cut short", rollout_cr(BROKEN))
    try:
        # the gate passes it (its config.json is the trained drafter's) and renders the canary
        loop.wait_condition(NAME, "DrafterCompatible", "True")
        wait_for(lambda: loop.get("deployments", "-l", f"{TRACK_LABEL}={TRACK_CANARY}")["items"], 120,
                 "the canary Deployment")
        assert drafter_of(loop, CANARY) == BROKEN
        decision, _ = wait_decision(loop, sc["before"])
        took = finish(loop, "c", sc, decision)["seconds"]
        assert (decision["result"], decision["reason"]) == ("Rollback", "CanaryCrashing"), decision
        assert took < DEADLINE_S / 2, took  # well before the deadline: the crash decides, not the clock
        cond = loop.condition(NAME, ROLLOUT)
        assert cond["status"] == "False" and cond["reason"] == "CanaryCrashing", cond
        assert [e for e in loop.events(NAME, "CanaryCrashing") if e.get("type") == "Warning"], "a Warning Event"
        wait_for(lambda: not [p for p in engine_pods(loop) if track(p) == "canary"], 120, "the canary pod gone")
        (stable,) = stable_pods(loop)
        assert stable["metadata"]["uid"] == st["stable_uid"] and restarts(stable) == 0
        assert rollout(loop)["stableRevision"] == st["revision0"]
    finally:
        close(loop, "c", sc)
    FIGURES["c"] = {"message": cond["message"], "load_failed": len(sc["load"].failed)}
    assert not sc["load"].failed, sc["load"].failed[:3]  # the canary never became an endpoint


# ----------------------------------------------------------------------------- (b) a second good drafter: promoted


def test_b_second_good_drafter_is_promoted_and_the_baseline_follows(loop):
    st = state(loop)
    if "stable_uid" not in st:
        pytest.fail("needs the stable deployment")
    before = loop.status(NAME).get("acceptance") or {}
    sc = scenario(loop, "b", "(b) drafter trained with another seed", rollout_cr(SECOND))
    try:
        canary = canary_ready(loop, sc)
        assert drafter_of(loop, CANARY) == SECOND and drafter_of(loop, NAME) == TRAINED
        ro = under_analysis(loop, sc)
        revision = ro.get("canaryRevision") or ro.get("stableRevision")
        decision, at_decision = wait_decision(loop, sc["before"])
        finish(loop, "b", sc, decision)
        assert (decision["result"], decision["reason"]) == ("Promote", "Promoted"), decision
        c_row, s_row = analysis_row(at_decision, "canary"), analysis_row(at_decision, "stable")
        # promotion: the stable Deployment rolls to the new revision, then the canary goes
        new_stable = wait_for(lambda: (ps := stable_pods(loop)) and len(ps) == 1 and ready(ps[0])
                              and ps[0]["metadata"]["uid"] != st["stable_uid"] and ps[0], BOOT_TIMEOUT,
                              "the stable Deployment's pod at the promoted revision")
        assert drafter_of(loop, NAME) == SECOND
        wait_for(lambda: not [p for p in engine_pods(loop) if track(p) == "canary"], 180, "the canary gone")
        ro = wait_for(lambda: (r := rollout(loop)).get("phase") == "Stable" and r, 120, "phase Stable")
        assert ro["stableRevision"] == revision != st["revision0"] and not ro.get("canaryRevision")
        cond = loop.condition(NAME, ROLLOUT)
        assert (cond["status"], cond["reason"]) == ("True", "Promoted"), cond
        # the baseline follows: learned on the promoted revision, at the canary's measured tau
        base = wait_for(lambda: (a := loop.status(NAME).get("acceptance") or {}).get("baseline") and
                        a["baseline"]["revision"] == a.get("revision") != before.get("revision") and a["baseline"],
                        240, "status.acceptance.baseline on the promoted revision")
        assert base["length"] == pytest.approx(c_row["tau"], abs=0.3), (base, c_row)
    finally:
        close(loop, "b", sc)
    st.update(stable_uid=new_stable["metadata"]["uid"], revision1=ro["stableRevision"])
    FIGURES["b"] = {"stable_tau": s_row["tau"], "canary_tau": c_row["tau"], "baseline_before": before.get("baseline"),
                    "baseline_after": base, "message": decision.get("message"),
                    "load_failed": len(sc["load"].failed), "load_requests": sc["load"].requests}


# ----------------------------------------------------------------------------- (d) operator killed mid-analysis


def test_d_operator_killed_during_analysis_the_same_canary_continues_to_a_decision(loop):
    st = state(loop)
    if "revision1" not in st:
        pytest.fail("needs the promoted deployment of (b)")
    # enough drafts that the analysis lasts past the kill (the window counts from the canary's creation: a boot of a
    # minute or more has already used it); the analysis settings are no part of the revision
    sc = scenario(loop, "d", "(d) operator killed mid-analysis", rollout_cr(TRAINED, analysis={
        "minDrafts": 600}))
    try:
        canary = canary_ready(loop, sc)
        ro = wait_for(lambda: (r := rollout(loop)).get("phase") == "Analyzing" and r, 120, "phase Analyzing")
        dep = loop.get("deployment", CANARY)
        time.sleep(5)
        assert rollout(loop).get("decision") == sc["before"], "decided before the kill: raise minDrafts"
        killed_at = time.monotonic() - sc["t0"]
        loop.kill_operator()
        time.sleep(5)  # the load goes on; nothing reconciles
        loop.start_operator()
        # the new process picks the same canary up from status and labels: revision, start, Deployment
        again = wait_for(lambda: (r := rollout(loop)).get("phase") in ("Analyzing", "Promoting", "RolledBack", "Stable")
                         and (r.get("canaryRevision") == ro["canaryRevision"] or r.get("decision") != sc["before"])
                         and r, 120, "the restarted operator on the same canary")
        if again.get("decision") == sc["before"]:
            assert again.get("startedAt") == ro.get("startedAt"), (again, ro)
        decision, _ = wait_decision(loop, sc["before"])
        finish(loop, "d", sc, decision)
        after = rollout(loop)
        assert decision["result"] in ("Promote", "Rollback"), decision
        # the decision is on the canary the first process started: its revision, one canary Deployment and pod
        assert ro["canaryRevision"] == (after["stableRevision"] if decision["result"] == "Promote"
                                        else after.get("refusedRevision")), (ro, after)
        assert sc["timeline"].canary_deployments == {dep["metadata"]["uid"]}, sc["timeline"].canary_deployments
        assert sc["timeline"].canary_uids == {canary["metadata"]["uid"]}, sc["timeline"].canary_uids
    finally:
        close(loop, "d", sc)
    FIGURES["d"] = {"killed_at_s": round(killed_at, 1), "decision": decision, "canary_pod": canary["metadata"]["uid"],
                    "started_at": ro.get("startedAt"), "load_failed": len(sc["load"].failed)}
