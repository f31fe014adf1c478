"""The acceptance monitor's canary side (controller/monitor.py): two tracks of one deployment, the
per-deployment accumulator, the canary's health from the pod cache, the probe, and what is handed
over to the reconciler (its ``CanaryReport`` in ``Caches.canaries``, controller/canary.py). Scrapes are served by engine stand-ins
(no HTTP, a fake clock); the probe talks HTTP to started stand-ins on loopback."""

from __future__ import annotations

import asyncio
import base64
import copy

import pytest

from specdeploy.api.types import SpeculativeDeploymentSpec
from specdeploy.controller import metrics
from specdeploy.controller import canary as can
from specdeploy.controller import monitor as mon
from specdeploy.controller import plan as pl
from specdeploy.controller import status as st
from specdeploy.controller.canary import canary_health, canary_name
from specdeploy.controller.monitor import ENGINE_POD_LABELS, pod_target
from specdeploy.controller.pods import pod_track
from specdeploy.controller.reports import Admission
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.core.rollout import canary as ro
from specdeploy.core.names import REVISION_ANNOTATION, TRACK_CANARY, TRACK_LABEL
from specdeploy.core.policy import TenancyPolicy
from specdeploy_dev.engine_standin import EngineStandin
from owners import adopt, pod_owner_refs
from test_monitor import reports

NS, NAME = "team", "qwen"
KEY = (NS, NAME)
MODEL = "Qwen/Qwen3.6-27B"
REV = "9b1c0000aaaa1111"


@pytest.fixture(autouse=True)
def _clean_series():
    for g in metrics.ACCEPTANCE_GAUGES:
        g.clear()
    yield
    for g in metrics.ACCEPTANCE_GAUGES:
        g.clear()


@pytest.fixture(autouse=True)
def _rollout_spec_parses(monkeypatch):
    """spec.rollout is read raw by the monitor; until the typed API has the field, the typed view of a body
    is taken without it (with the field, the real path runs)."""
    if "rollout" in SpeculativeDeploymentSpec.model_fields:
        return
    real = mon.read_deployment

    def read(body):
        b = copy.deepcopy(body)
        (b.get("spec") or {}).pop("rollout", None)
        return real(b)

    monkeypatch.setattr(mon, "read_deployment", read)


def cr(*, probe=None, api_key=None) -> dict:
    spec = {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": MODEL},
            "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"}, "gpu": {"type": "b300", "count": 1},
            "rollout": {"strategy": "Canary"}}
    if probe is not None:
        spec["rollout"]["analysis"] = {"probe": probe}
    if api_key is not None:
        spec["engine"]["apiKey"] = {"secretKeyRef": {"name": "engine-key", "key": "key"}}
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": NAME, "namespace": NS, "uid": "uid-cr", "generation": 1}, "spec": spec}


def pod(name: str, *, canary=False, revision=REV, ip="10.0.0.7", port=8000, ready=True, statuses=None,
        init_statuses=None, created="2026-12-01T19:00:00Z") -> dict:
    labels = {**ENGINE_POD_LABELS, "app.kubernetes.io/instance": NAME, "specdeploy.io/engine": "vllm"}
    annotations = {}
    if canary:
        labels[TRACK_LABEL] = TRACK_CANARY
        annotations[REVISION_ANNOTATION] = revision
    status = {"podIP": ip, "phase": "Running",
              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
              "containerStatuses": statuses if statuses is not None else
              [{"name": "engine", "ready": ready, "restartCount": 0, "state": {"running": {}}}]}
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    owners = pod_owner_refs(NS, canary_name(NAME) if canary else NAME)  # its track's ReplicaSet
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels,
                         "annotations": annotations, "creationTimestamp": created, "ownerReferences": owners},
            "spec": {"containers": [{"name": "engine", "command": ["vllm", "serve"], "args": [MODEL, "--port", "8000"],
                                     "ports": [{"name": "http", "containerPort": port}]}]},
            "status": status}


class Kube:
    """Status writes (ignored) and the one read the probe needs: the engine API key Secret."""

    def __init__(self, secrets=None):
        self.secrets = secrets or {}
        self.reads: list[tuple] = []

    async def get(self, kind, ns, name):
        self.reads.append((kind, ns, name))
        assert kind == "Secret"
        return self.secrets.get((ns, name))

    async def patch(self, *a, **k):
        return {}

    async def create(self, obj):
        return obj


# engine-key/key: the Secret and key cr(api_key=True) names, allowed
POLICY = TenancyPolicy(token_secrets=("engine-key",), api_key_secret_keys=("key",))


class Rig:
    """One deployment with its stable Deployment (and, from its first canary pod on, its canary Deployment) as the
    watches show them; admitted by the reconciler unless ``admitted=False``."""

    def __init__(self, body=None, kube=None, policy=POLICY, admitted=True):
        self.c = Controller(Kube(), resolver=None, settings=Settings(workers=0))
        self.c.bodies[KEY] = body = body or cr()
        if admitted:
            self.c.cache.admitted.put(KEY, Admission(body["metadata"]["uid"], body["metadata"]["generation"]))
        self.t = [100.0]
        self.engines: dict[str, EngineStandin] = {}
        self.fetched: list[str] = []
        self.notified: list = []
        self.m = mon.AcceptanceMonitor(self.c.cache, 30, notify=self._notify, fetch=self._fetch,
                                       clock=lambda: self.t[0], kube=kube, probe_timeout=5, policy=policy)
        adopt(self.m, self.c.children, body)

    def delete(self, p: dict) -> None:
        """The pod goes; with the last canary pod, the canary Deployment too (rolled back or promoted)."""
        self.m.observe_pod("DELETED", p)
        if not any(pod_track(q) == TRACK_CANARY for q in self.m.pods.values()):
            self.c.children.pop(("Deployment", NS, canary_name(NAME)), None)

    async def _notify(self, key):
        self.notified.append(key)

    async def _fetch(self, url, timeout):
        self.fetched.append(url)
        return self.engines[url].metrics_text(advance=True)

    def serve(self, p: dict, standin: EngineStandin | None = None) -> EngineStandin | None:
        if pod_track(p) == TRACK_CANARY and ("Deployment", NS, canary_name(NAME)) not in self.c.children:
            adopt(self.m, self.c.children, self.c.bodies[KEY], TRACK_CANARY)
        self.m.observe_pod("ADDED", p)
        if standin is not None:
            self.engines[pod_target(p).url] = standin
        return standin

    async def tick(self) -> list:
        self.t[0] += 30
        self.notified.clear()
        self.fetched.clear()
        await self.m.tick()
        return list(self.notified)

    @property
    def part(self) -> dict:
        return reports(self.c) or {}

    @property
    def rollout(self) -> dict | None:
        return self.part.get("rollout")


def run(coro):
    return asyncio.run(coro)


def test_two_tracks_are_counted_apart_and_the_canary_never_moves_the_acceptance():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-b", ip="10.0.0.2"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-canary-a", canary=True, ip="10.0.0.9"), EngineStandin("vllm", "regressed"))
        assert await r.tick() == [KEY]  # the canary appeared: its (empty) analysis is handed over
        h = r.rollout
        assert h["revision"] == REV and h["since"] == 130.0 and h["probe"] is None
        assert h["health"] == ro.Health(pods=1, ready=1, restarts=0, crash_looping=False)
        assert h["stable"].drafts == 0 and h["canary"].drafts == 0  # first scrapes prime
        assert h["stable"].pods == 2 and h["canary"].pods == 1
        assert len(r.fetched) == 3  # the canary is scraped with the stable pods
        assert await r.tick() == [KEY]
        h = r.rollout
        assert h["stable"].drafts == 200 and h["canary"].drafts == 100
        assert h["stable"].tau() == pytest.approx(3.96, abs=0.01)
        assert h["canary"].tau() == pytest.approx(1.99, abs=0.01)
        # status.acceptance: the stable pods only (the regressed canary would pull it down to ~3.3)
        assert r.part["acceptance"]["length"] == 3.96 and r.part["acceptance"]["podsReporting"] == 2
        assert (r.part["condition"]["status"], r.part["condition"]["reason"]) == ("True", "Healthy")
        assert await r.tick() == [KEY]  # traffic keeps moving the totals: each tick is news for the reconciler
        assert r.rollout["since"] == 130.0 and r.rollout["canary"].drafts == 200

    run(scenario())


def test_baseline_and_guard_read_stable_pods_only():
    """A deployment whose only scraped pod is a canary gets no acceptance at all (nothing stable to judge)."""
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-canary-a", canary=True), EngineStandin("vllm", "collapsed"))
        await r.tick()
        await r.tick()
        assert r.part.get("acceptance") is None and r.part.get("condition") is None
        assert r.rollout["canary"].tau() == pytest.approx(1.05, abs=0.01)
        assert r.rollout["stable"].pods == 0

    run(scenario())


def test_counter_reset_on_a_canary_restart_counts_from_zero():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        c = r.serve(pod("qwen-canary-a", canary=True, ip="10.0.0.9"), EngineStandin("vllm", "regressed"))
        for _ in range(3):
            await r.tick()
        before = r.rollout["canary"]
        assert before.drafts == 200
        c.restart()  # the engine restarted: its counters are back at zero (then one step on the scrape)
        await r.tick()
        after = r.rollout["canary"]
        assert after.drafts == 300 and after.accepted_tokens > before.accepted_tokens
        assert after.tau() == pytest.approx(before.tau(), abs=0.01)

    run(scenario())


def test_a_canary_that_is_not_ready_is_not_scraped_and_its_health_says_so():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-canary-a", canary=True, ip="10.0.0.9", ready=False,
                    statuses=[{"name": "engine", "ready": False, "restartCount": 0,
                               "state": {"waiting": {"reason": "ContainerCreating"}}}]))
        assert await r.tick() == [KEY]
        assert r.fetched == ["http://10.0.0.1:8000/metrics"]
        assert r.rollout["health"] == ro.Health(pods=1, ready=0, restarts=0, crash_looping=False)
        assert r.rollout["canary"].pods == 0
        # it becomes ready: scraped from then on
        r.serve(pod("qwen-canary-a", canary=True, ip="10.0.0.9"), EngineStandin("vllm", "healthy"))
        assert await r.tick() == [KEY]
        assert "http://10.0.0.9:8000/metrics" in r.fetched
        assert r.rollout["health"].ready == 1 and r.rollout["canary"].pods == 1

    run(scenario())


def test_crash_loop_back_off_is_failed_health():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-canary-a", canary=True, ready=False, statuses=[{
            "name": "engine", "ready": False, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                         "message": "Traceback ...\nValueError: drafter layer ids out of range"}}}]))
        await r.tick()
        h = r.rollout["health"]
        assert (h.pods, h.ready, h.restarts, h.crash_looping) == (1, 0, 3, True)
        assert h.failed_to_start == ("qwen-canary-a: container engine exited 1 (Error): Traceback ... "
                                     "ValueError: drafter layer ids out of range")
        v = ro.judge(ro.Params(), r.rollout["stable"], r.rollout["canary"], h, None, 30)
        assert (v.decision, v.reason) == ("Rollback", "CanaryCrashing")

    run(scenario())


@pytest.mark.parametrize("pod_kw,want", [
    ({"ready": False, "init_statuses": [{"name": "preflight", "ready": False, "restartCount": 0,
                                          "state": {"terminated": {"exitCode": 2, "message": "x" * 500 + " no such file"}}}],
      "statuses": [{"name": "engine", "ready": False, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}}]},
     "qwen-canary-a: init container preflight exited 2: " + "x" * (can.MESSAGE_TAIL - 13) + " no such file"),
    ({"ready": False, "statuses": [{"name": "engine", "ready": False, "restartCount": 0,
                                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
     "qwen-canary-a: container engine exited 137 (OOMKilled)"),
    ({"ready": False, "statuses": [{"name": "engine", "ready": False, "restartCount": 0,
                                    "state": {"waiting": {"reason": "ImagePullBackOff",
                                                          "message": "Back-off pulling image \"vllm:nope\""}}}]},
     "qwen-canary-a: container engine ImagePullBackOff: Back-off pulling image \"vllm:nope\""),
    # recovered after one crash (running and ready again): restarts count, but it did start
    ({"ready": True, "statuses": [{"name": "engine", "ready": True, "restartCount": 1, "state": {"running": {}},
                                   "lastState": {"terminated": {"exitCode": 1}}}]}, None),
    # a successful init container is no failure
    ({"ready": True, "init_statuses": [{"name": "preflight", "ready": False, "restartCount": 0,
                                        "state": {"terminated": {"exitCode": 0}}}]}, None),
])
def test_failed_to_start(pod_kw, want):
    h = canary_health([pod("qwen-canary-a", canary=True, **pod_kw)])
    assert h.failed_to_start == want and h.crash_looping is False


def test_health_counts_pods_ready_and_restarts():
    h = canary_health([pod("a", canary=True), pod("b", canary=True, ready=False, statuses=[
        {"name": "engine", "ready": False, "restartCount": 2, "state": {"running": {}}}])])
    assert h == ro.Health(pods=2, ready=1, restarts=2, crash_looping=False)


def test_the_canary_going_drops_its_analysis_and_a_new_revision_starts_over():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        canary = pod("qwen-canary-a", canary=True, ip="10.0.0.9")
        r.serve(canary, EngineStandin("vllm", "regressed"))
        await r.tick()
        await r.tick()
        assert r.rollout["canary"].drafts == 100
        # a second canary revision replaces the first (the spec changed again): a fresh analysis
        r.delete(canary)
        r.serve(pod("qwen-canary-b", canary=True, ip="10.0.0.10", revision="ffff000011112222"),
                EngineStandin("vllm", "healthy"))
        assert await r.tick() == [KEY]
        assert r.rollout["revision"] == "ffff000011112222" and r.rollout["since"] == 190.0
        assert r.rollout["canary"].drafts == 0 and r.rollout["stable"].drafts == 0
        # the canary goes (rolled back or promoted): the hand-over goes, the acceptance stays
        r.delete(pod("qwen-canary-b", canary=True))
        assert await r.tick() == [KEY]
        assert "rollout" not in r.part and r.part["acceptance"]["length"] == 3.96
        assert await r.tick() == []
        assert not r.m.canary.analyses

    run(scenario())


def test_the_canary_deployment_names_the_revision_and_old_canary_pods_are_left_out():
    async def scenario():
        r = Rig()
        adopt(r.m, r.c.children, r.c.bodies[KEY], TRACK_CANARY,
              spec={"template": {"metadata": {"annotations": {REVISION_ANNOTATION: REV}}}})
        assert await r.tick() == [KEY]  # the Deployment is there, its pods not yet
        assert r.rollout["revision"] == REV and r.rollout["health"].pods == 0
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("old-canary", canary=True, revision="0000000000000000", ip="10.0.0.8",
                    created="2026-12-01T19:59:00Z"), EngineStandin("vllm", "collapsed"))
        r.serve(pod("new-canary", canary=True, ip="10.0.0.9"), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        assert "http://10.0.0.8:8000/metrics" not in r.fetched
        assert r.rollout["health"].pods == 1 and r.rollout["canary"].tau() == pytest.approx(3.96, abs=0.01)

    run(scenario())


def test_no_canary_no_hand_over():
    async def scenario():
        r = Rig()
        r.serve(pod("qwen-a"), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        assert "rollout" not in r.part and not r.m.canary.analyses

    run(scenario())


def test_after_a_restart_the_stored_status_is_kept_until_judged():
    """A new process that sees a canary before it judged the stable pods hands the stored acceptance over as it is
    (the reconciler's write would otherwise clear status.acceptance and its learned baseline)."""
    async def scenario():
        body = cr()
        stored = {"length": 3.5, "window": "30s", "podsReporting": 1, "sampledAt": "T0",
                  "baseline": {"length": 3.6, "revision": "r1", "since": "T0", "drafts": 1000}}
        body["status"] = {"acceptance": stored}
        r = Rig(body)
        r.serve(pod("qwen-a", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-canary-a", canary=True, ip="10.0.0.9"), EngineStandin("vllm", "healthy"))
        assert await r.tick() == [KEY]  # first scrapes only prime
        report = r.c.cache.acceptances.get(KEY)  # not judged yet: the monitor reports nothing (or what is stored)
        assert report is None or (report.acceptance == stored and report.condition is None)
        desired = pl.desired_status(NAME, body["status"], st.Observation(generation=1), None, report, "T1")
        assert desired.get("acceptance", stored) == stored  # the reconciler's write keeps it and its baseline

    run(scenario())


# ----------------------------------------------------------------- the probe, over HTTP to stand-ins


def standin(**attrs) -> EngineStandin:
    s = EngineStandin("vllm", "healthy", model_name=MODEL)
    s.sleep_scale = 0
    for k, v in attrs.items():
        setattr(s, k, v)
    return s.start()


async def _two_tracks(r: Rig, stable: EngineStandin, canary: EngineStandin):
    r.serve(pod("qwen-a", ip="127.0.0.1", port=stable.port), stable)
    r.serve(pod("qwen-canary-a", canary=True, ip="127.0.0.1", port=canary.port), canary)


@pytest.mark.parametrize("salt,identical", [("", 4), ("another drafter", 0)])
def test_probe_runs_once_per_revision(salt, identical):
    async def scenario(s, c):
        r = Rig()
        await _two_tracks(r, s, c)
        await r.tick()
        await r.m.canary.settle()
        p = r.rollout["probe"]
        assert (p.prompts, p.identical, p.errors) == (4, identical, 0)
        assert KEY in r.notified  # the result is news at once, not at the next tick
        posted = c.steps
        await r.tick()
        await r.tick()
        await r.m.canary.settle()
        assert r.rollout["probe"] == p
        assert c.steps - posted == 2  # two scrapes, no more completions: it ran once
        v = ro.judge(ro.Params(window_s=0, min_drafts=0), r.rollout["stable"], r.rollout["canary"],
                     r.rollout["health"], p, 60)
        assert v.reason == ("OutputsDiffer" if identical == 0 else "Promoted")

    s, c = standin(), standin(output_salt=salt)
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def test_probe_waits_for_a_ready_pod_of_each_track_and_can_be_disabled():
    async def scenario(s, c):
        r = Rig()
        r.serve(pod("qwen-a", ip="127.0.0.1", port=s.port), s)
        await r.tick()
        await r.m.canary.settle()
        r.serve(pod("qwen-canary-a", canary=True, ip="127.0.0.1", port=c.port, ready=False))
        await r.tick()
        await r.m.canary.settle()
        assert r.rollout["probe"] is None and c.steps == 0
        r.serve(pod("qwen-canary-a", canary=True, ip="127.0.0.1", port=c.port), c)
        await r.tick()
        await r.m.canary.settle()
        assert r.rollout["probe"].identical == 4

        off = Rig(cr(probe={"enabled": False}))
        await _two_tracks(off, s, c)
        steps = c.steps
        for _ in range(2):
            await off.tick()
            await off.m.canary.settle()
        assert off.rollout["probe"] is None and c.steps - steps == 2  # scrapes only

    s, c = standin(), standin()
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def test_probe_max_tokens_from_the_spec():
    async def scenario(s, c):
        r = Rig(cr(probe={"maxTokens": 5}))
        await _two_tracks(r, s, c)
        await r.tick()
        await r.m.canary.settle()
        assert "(5 tokens)" in r.rollout["probe"].message

    s, c = standin(), standin()
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def test_probe_errors_retry_and_then_stop():
    async def scenario(s):
        r = Rig()
        dead = standin()
        port = dead.port
        dead.stop()
        r.serve(pod("qwen-a", ip="127.0.0.1", port=s.port), s)
        c = EngineStandin("vllm", "healthy")  # scraped by the fake fetch, never served over HTTP
        r.serve(pod("qwen-canary-a", canary=True, ip="127.0.0.1", port=port), c)
        runs = []
        for _ in range(5):
            await r.tick()
            await r.m.canary.settle()
            runs.append(r.m.canary.analyses[KEY].probe_runs)
        p = r.rollout["probe"]
        assert runs == [1, 2, 3, 3, 3] and (p.prompts, p.identical, p.errors) == (4, 0, 4)
        assert "canary pod qwen-canary-a" in p.message
        assert p.differ == 0  # an error is no difference

    s = standin()
    try:
        run(scenario(s))
    finally:
        s.stop()


def test_probe_sends_the_engine_api_key_from_its_secret():
    key = "sk-engine-4242"
    secret = {"data": {"key": base64.b64encode(key.encode()).decode()}}

    async def scenario(s, c):
        kube = Kube({(NS, "engine-key"): secret})
        r = Rig(cr(api_key=True), kube=kube)
        await _two_tracks(r, s, c)
        await r.tick()
        await r.m.canary.settle()
        assert kube.reads == [("Secret", NS, "engine-key")]
        assert r.rollout["probe"].identical == 4
        # the Secret is missing, or there is no client: no request, every prompt an error, the key never shown
        for k in (Kube(), None):
            r2 = Rig(cr(api_key=True), kube=k)
            await _two_tracks(r2, s, c)
            await r2.tick()
            await r2.m.canary.settle()
            p = r2.rollout["probe"]
            assert (p.prompts, p.identical, p.errors) == (4, 0, 4) and p.differ == 0
            assert "spec.engine.apiKey" in p.message and key not in p.message

    s, c = standin(api_key=key), standin(api_key=key)
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def test_forget_cancels_the_probe_and_drops_the_analysis():
    async def scenario(s, c):
        r = Rig()
        s.sleep_scale = 50  # slow answers: the probe is still running when the CR goes
        await _two_tracks(r, s, c)
        await r.tick()
        task = r.m.canary.analyses[KEY].probe_task
        assert task is not None and not task.done()
        r.m.forget(KEY)
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()
        assert reports(r.c) is None and not r.m.canary.analyses

    s, c = standin(), standin()
    try:
        run(scenario(s, c))
    finally:
        s.sleep_scale = 0
        s.stop()
        c.stop()


def test_an_idle_canary_is_no_news():
    """Without traffic nothing moves: no hand-over changes, no reconcile asked for (no writes while idle)."""
    async def scenario():
        r = Rig()
        for name, ip in (("qwen-a", "10.0.0.1"), ("qwen-canary-a", "10.0.0.9")):
            idle = EngineStandin("vllm", "healthy", auto_advance=0)
            idle.requests_running = 0  # nothing running: the running-requests integral stays still too
            r.serve(pod(name, canary=name != "qwen-a", ip=ip), idle)
        assert await r.tick() == [KEY]
        await r.tick()
        assert await r.tick() == [] and await r.tick() == []
        assert r.rollout["canary"].drafts == 0 and r.rollout["canary"].pods == 1

    run(scenario())


def test_a_probe_cancelled_by_a_stop_runs_again_after_a_start():
    async def scenario(s, c):
        r = Rig()
        await _two_tracks(r, s, c)
        await r.tick()
        await r.m.close()  # the replica lost the lead: run() ends, probes in flight are cancelled
        await asyncio.sleep(0)
        assert r.m.canary.analyses[KEY].probe is None
        await r.tick()  # leading again
        await r.m.canary.settle()
        assert r.rollout["probe"].identical == 4

    s, c = standin(), standin()
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()
