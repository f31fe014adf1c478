"""The acceptance monitor (controller/monitor.py) and the SpeculationHealthy status logic (status.py).

Pure status logic first, then the monitor with scrapes served by the stand-in engine's
exposition (no HTTP, a fake clock), the reconciler's status path that writes what the
monitor hands it, and one real HTTP scrape of a started stand-in.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from specdeploy.controller import metrics
from specdeploy.controller import status as st
from specdeploy.controller.monitor import AcceptanceMonitor, ENGINE_POD_LABELS, monitor_for, pod_target
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.core import acceptance as acc
from specdeploy.core.rollout import baseline as bl
from specdeploy_dev.engine_standin import EngineStandin
from owners import adopt, pod_owner_refs

NS, NAME = "team", "qwen"
KEY = (NS, NAME)
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"


@pytest.fixture(autouse=True)
def _clean_acceptance_series():
    """The gauges live in the process-wide registry: each test starts and ends without series."""
    gauges = metrics.ACCEPTANCE_GAUGES
    for g in gauges:
        g.clear()
    yield
    for g in gauges:
        g.clear()


# ----------------------------------------------------------------- pure: condition and status.acceptance


def _acc(length, per_position=(), drafts=100.0, rate=0.2):
    return acc.Acceptance(engine="vllm", length=length, rate=rate, per_position=tuple(per_position), drafts=drafts)


@pytest.mark.parametrize("a,status,reason", [
    (_acc(3.96, [0.75, 0.56, 0.42]), "True", "Healthy"),
    (_acc(1.05, [0.05, 0.0]), "False", "AcceptanceCollapsed"),
    (_acc(4.2, [0.9, 0.81, 0.73, 0.66, 0.01, 0.01]), "False", "AcceptanceCliff"),
    (_acc(1.4, [0.9, 0.01]), "False", "AcceptanceCollapsed"),  # collapse wins over cliff
    (None, "Unknown", "NoMetrics"),
    (_acc(None, drafts=0.0), "Unknown", "NoTraffic"),
])
def test_speculation_condition(a, status, reason):
    c = st.speculation_condition(a, 1.5)
    assert (c["type"], c["status"], c["reason"]) == ("SpeculationHealthy", status, reason)
    assert c["message"]


def test_min_acceptance_length_is_the_threshold():
    assert st.speculation_condition(_acc(2.5), 3.0)["reason"] == "AcceptanceCollapsed"
    assert st.speculation_condition(_acc(2.5), 2.0)["reason"] == "Healthy"


def test_no_traffic_keeps_the_previous_verdict():
    prev = {**st.speculation_condition(_acc(1.05), 1.5), "lastTransitionTime": "T0", "observedGeneration": 3}
    kept = st.speculation_condition(_acc(None, drafts=0.0), 1.5, prev)
    assert (kept["status"], kept["reason"], kept["message"]) == ("False", "AcceptanceCollapsed", prev["message"])
    assert set(kept) == {"type", "status", "reason", "message"}
    # but not an Unknown one: NoMetrics -> NoTraffic is news
    nm = st.speculation_condition(None, 1.5)
    assert st.speculation_condition(_acc(None, drafts=0.0), 1.5, nm)["reason"] == "NoTraffic"


def test_acceptance_status_rounds_and_keeps_sampled_at_while_figures_stay():
    a = acc.Acceptance(engine="vllm", length=3.9612, rate=0.19741, per_position=(0.75, 0.5625, 0.421875), drafts=100)
    s1 = st.acceptance_status(a, 1, "30s", None, "T1")
    assert s1 == {"length": 3.96, "rate": 0.2, "perPosition": [0.75, 0.56, 0.42], "window": "30s",
                  "podsReporting": 1, "sampledAt": "T1"}
    b = acc.Acceptance(engine="vllm", length=3.9599, rate=0.1996, per_position=(0.7501, 0.5624, 0.4219), drafts=100)
    assert st.acceptance_status(b, 1, "30s", s1, "T2") is s1  # same to 2 decimals: unchanged, no write
    moved = st.acceptance_status(_acc(1.05, [0.05]), 1, "30s", s1, "T3")
    assert moved["length"] == 1.05 and moved["sampledAt"] == "T3"
    assert st.acceptance_status(_acc(3.96), 2, "30s", {**s1, "perPosition": []}, "T4")["podsReporting"] == 2
    # no figures: the previous ones stay (or none)
    assert st.acceptance_status(None, 0, "30s", s1, "T5") is s1
    assert st.acceptance_status(_acc(None, drafts=0.0), 1, "30s", None, "T5") is None


@pytest.mark.parametrize("status,reason,want", [
    ("False", "AcceptanceCollapsed", "Warning"), ("False", "AcceptanceCliff", "Warning"),
    ("Unknown", "NoMetrics", "Warning"), ("True", "Healthy", "Normal"), ("Unknown", "NoTraffic", "Normal"),
    ("Unknown", "NoReadyPods", "Normal"),
])
def test_every_speculation_transition_has_an_event(status, reason, want):
    ev = st.event_for({"type": "SpeculationHealthy", "status": status, "reason": reason, "message": "m"})
    assert ev == (want, reason, "m")


# ----------------------------------------------------------------- the monitor with fake scrapes


class FakeKube:
    """Records writes; status patches and Events only (what _write_status does)."""

    def __init__(self):
        self.patches: list[dict] = []
        self.events: list[dict] = []

    async def patch(self, kind, ns, name, patch, sub=None):
        assert (kind, sub) == ("SpeculativeDeployment", "status")
        self.patches.append(patch)
        return {}

    async def create(self, obj):
        assert obj["kind"] == "Event"
        self.events.append(obj)
        return obj


def cr(engine="vllm", min_length=None, name=NAME):
    spec = {"engine": {"name": engine, "version": "0.33.0"}, "target": {"model": "Qwen/Qwen3.6-27B"},
            "drafter": {"model": DRAFTER}, "gpu": {"type": "b300", "count": 1}}
    if min_length is not None:
        spec["monitoring"] = {"minAcceptanceLength": min_length}
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1}, "spec": spec}


def pod(name="qwen-0", *, instance=NAME, ip="10.0.0.7", port=8000, ready=True, engine="vllm", uid=None,
        owners=None):
    """An engine pod of ``instance``'s Deployment (its ReplicaSet's ownerReference: tests/controller/owners.py)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "labels": {**ENGINE_POD_LABELS, "app.kubernetes.io/instance": instance,
                                    "specdeploy.io/engine": engine},
                         "ownerReferences": pod_owner_refs(NS, instance) if owners is None else owners},
            "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"podIP": ip, "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def reports(c, key=KEY) -> dict | None:
    """The observers' reports of ``key`` read from a Controller as one dict: the acceptance monitor's parts
    (``acceptance``, ``condition``, ``profitable``) and the canary analysis' fields under ``rollout``; None when
    neither reported."""
    a, k = c.cache.acceptances.get(key), c.cache.canaries.get(key)
    if a is None and k is None:
        return None
    out = {} if a is None else {"acceptance": a.acceptance, "condition": a.condition, "profitable": a.profitable}
    if k is not None:
        out["rollout"] = {f.name: getattr(k, f.name) for f in dataclasses.fields(k)}
    return out


class Rig:
    """A Controller (no workers) with a monitor whose scrapes are served by stand-ins, by URL."""

    def __init__(self, *bodies: dict):
        self.kube = FakeKube()
        self.c = Controller(self.kube, resolver=None, settings=Settings(workers=0))
        for b in bodies or (cr(),):
            m = b["metadata"]
            self.c.bodies[(m["namespace"], m["name"])] = b
        self.t = [0.0]
        self.engines: dict[str, EngineStandin | Exception] = {}
        self.fetched: list[str] = []
        self.m = monitor_for(self.c, 30, fetch=self._fetch, clock=lambda: self.t[0], now=self._now)
        for b in self.c.bodies.values():  # each CR's Deployment and its ReplicaSet, as the watches show them
            adopt(self.m, self.c.children, b)
        self.n = 0

    def _now(self):
        self.n += 1
        return f"T{self.n}"

    async def _fetch(self, url, timeout):
        self.fetched.append(url)
        e = self.engines[url]
        if isinstance(e, Exception):
            raise e
        return e.metrics_text(advance=True)

    def serve(self, p: dict, standin: EngineStandin) -> EngineStandin:
        self.m.observe_pod("ADDED", p)
        self.engines[pod_target(p).url] = standin
        return standin

    async def tick(self) -> list:
        """One monitor tick, then what the queue got (drained)."""
        self.t[0] += 30
        await self.m.tick()
        queued = []
        while len(self.c.queue):
            queued.append(await self.c.queue.get())
            await self.c.queue.done(queued[-1])
        return queued

    def cond(self, key=KEY):
        return (reports(self.c, key) or {}).get("condition")

    def acceptance(self, key=KEY):
        return (reports(self.c, key) or {}).get("acceptance")


def run(coro):
    return asyncio.run(coro)


def _series(name: str, **labels) -> dict[tuple, float]:
    out = {}
    for fam in metrics.REGISTRY.collect():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_pod_targets_only_ready_pods_with_an_ip_and_http_port():
    assert pod_target(pod()).url == "http://10.0.0.7:8000/metrics"
    assert pod_target(pod(ip="fd00::7")).url == "http://[fd00::7]:8000/metrics"
    assert pod_target(pod(ready=False)) is None
    assert pod_target(pod(ip=None)) is None
    worker = pod()
    worker["spec"]["containers"][0]["ports"] = []  # a multi-node worker: no http port
    assert pod_target(worker) is None
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_target(deleting) is None


def test_vllm_healthy_collapsed_and_back():
    async def scenario():
        r = Rig()
        s = r.serve(pod(), EngineStandin("vllm", "healthy"))
        assert await r.tick() == [] and r.cond() is None  # the first scrape primes the counters
        assert await r.tick() == [KEY]
        c, a = r.cond(), r.acceptance()
        assert (c["status"], c["reason"]) == ("True", "Healthy")
        assert a["length"] == round(s.expected_length(), 2) == 3.96
        assert a["podsReporting"] == 1 and a["window"] == "30s" and len(a["perPosition"]) == 15
        assert a["perPosition"][0] == 0.75 and a["rate"] == round((3.96 - 1) / 15, 2)
        labels = {"namespace": NS, "deployment": NAME, "engine": "vllm", "drafter": DRAFTER}
        assert list(_series("specdeploy_acceptance_length", **labels).values()) == [pytest.approx(3.96)]
        assert len(_series("specdeploy_acceptance_per_position", **labels)) == 15
        # steady: no change, nothing queued (the no-writes-on-idle property)
        assert await r.tick() == [] and await r.tick() == []
        s.set_mode("collapsed")
        assert await r.tick() == [KEY]
        assert (r.cond()["status"], r.cond()["reason"]) == ("False", "AcceptanceCollapsed")
        assert r.acceptance()["length"] == 1.05
        assert list(_series("specdeploy_acceptance_length", **labels).values()) == [pytest.approx(1.05)]
        s.set_mode("healthy")
        assert await r.tick() == [KEY]
        assert (r.cond()["status"], r.cond()["reason"]) == ("True", "Healthy")
        # the CR goes: its series go with it
        r.m.forget(KEY)
        assert not _series("specdeploy_acceptance_length", deployment=NAME, namespace=NS)
        assert not _series("specdeploy_acceptance_per_position", deployment=NAME, namespace=NS)
        assert reports(r.c) is None

    run(scenario())


def test_vllm_cliff():
    async def scenario():
        r = Rig()
        r.serve(pod(), EngineStandin("vllm", "cliff"))
        await r.tick()
        assert await r.tick() == [KEY]
        assert (r.cond()["status"], r.cond()["reason"]) == ("False", "AcceptanceCliff")
        assert "position 4" in r.cond()["message"]
        assert r.acceptance()["perPosition"][3:5] == [0.66, 0.01]

    run(scenario())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_no_metrics(engine):
    async def scenario():
        r = Rig(cr(engine))
        r.serve(pod(engine=engine), EngineStandin(engine, "none"))
        assert await r.tick() == [KEY]  # no speculative series: judged at once
        assert (r.cond()["status"], r.cond()["reason"]) == ("Unknown", "NoMetrics")
        assert r.acceptance() is None
        assert not _series("specdeploy_acceptance_length", deployment=NAME, namespace=NS)
        assert await r.tick() == []

    run(scenario())


def test_sglang_gauges_count_from_the_first_scrape_and_collapse():
    async def scenario():
        r = Rig(cr("sglang"))
        s = r.serve(pod(engine="sglang", port=30000), EngineStandin("sglang", "healthy", tp=2))
        assert await r.tick() == [KEY]
        assert r.cond()["reason"] == "Healthy" and r.acceptance()["window"] == "instant"
        assert r.acceptance()["perPosition"] == []
        s.set_mode("collapsed")
        await r.tick()
        assert r.cond()["reason"] == "AcceptanceCollapsed"

    run(scenario())


def test_pods_are_combined_and_the_cr_threshold_applies():
    async def scenario():
        r = Rig(cr(min_length=4.0))
        r.serve(pod("qwen-0", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        r.serve(pod("qwen-1", ip="10.0.0.2"), EngineStandin("vllm", "healthy"))
        r.m.observe_pod("ADDED", pod("other-0", instance="unknown-cr", ip="10.0.0.3"))  # no such CR: never scraped
        await r.tick()
        await r.tick()
        assert r.acceptance()["podsReporting"] == 2
        assert (r.cond()["status"], r.cond()["reason"]) == ("False", "AcceptanceCollapsed")  # 3.96 < 4.0
        assert not [u for u in r.fetched if "10.0.0.3" in u]

    run(scenario())


def test_no_traffic_keeps_verdict_and_writes_nothing():
    async def scenario():
        r = Rig()
        s = r.serve(pod(), EngineStandin("vllm", "healthy", auto_advance=0))
        s.advance(1)
        await r.tick()
        s.advance(1)
        assert await r.tick() == [KEY] and r.cond()["reason"] == "Healthy"
        before = r.acceptance()
        assert await r.tick() == []  # no drafts in the window
        assert r.cond()["reason"] == "Healthy" and r.acceptance() is before

    run(scenario())


def test_without_pods_nothing_is_judged_and_nothing_queued():
    async def scenario():
        r = Rig()
        for _ in range(3):
            assert await r.tick() == []
        assert not r.c.cache.acceptances and not r.c.cache.canaries and r.fetched == []
        r.m.observe_pod("ADDED", pod(ready=False))
        assert await r.tick() == [] and r.fetched == []

    run(scenario())


def test_pods_gone_after_judging_is_no_ready_pods_once():
    async def scenario():
        r = Rig()
        p = pod()
        r.serve(p, EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        assert r.cond()["reason"] == "Healthy"
        r.m.observe_pod("DELETED", p)
        assert await r.tick() == [KEY]
        assert (r.cond()["status"], r.cond()["reason"]) == ("Unknown", "NoReadyPods")
        assert r.acceptance() is None
        assert not _series("specdeploy_acceptance_length", deployment=NAME, namespace=NS)
        assert await r.tick() == []

    run(scenario())


def test_scrape_failures_turn_unknown_only_when_they_persist():
    async def scenario():
        r = Rig()
        p = pod()
        s = r.serve(p, EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        url = pod_target(p).url
        r.engines[url] = ConnectionRefusedError("connection refused")
        assert await r.tick() == [] and await r.tick() == []
        assert await r.tick() == [KEY]
        assert (r.cond()["status"], r.cond()["reason"]) == ("Unknown", "ScrapeFailed")
        assert "connection refused" in r.cond()["message"]
        r.engines[url] = s
        assert await r.tick() == [KEY] and r.cond()["reason"] == "Healthy"

    run(scenario())


def test_restart_resumes_from_the_stored_status_without_writing():
    """A new operator process: the monitor's previous state is what the stored status says."""
    async def scenario():
        r = Rig()
        s = r.serve(pod(), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        stored = {"conditions": [{**r.cond(), "lastTransitionTime": "T0", "observedGeneration": 1}],
                  "acceptance": r.acceptance()}
        r2 = Rig({**cr(), "status": stored})
        r2.serve(pod(), s)
        await r2.tick()
        assert await r2.tick() == []  # same figures, same verdict: nothing to write

    run(scenario())


# ----------------------------------------------------------------- baseline and regression (core/rollout/baseline.py)

FAST = {"baselineSettleSeconds": 60, "baselineMinDrafts": 200}  # 30s ticks, 100 drafts each: 3 windows
RESOLVED = {"drafterConfigDigest": "sha256:ids-0-2", "targetConfigDigest": "sha256:t", "configHash": "h1"}


def cr_b(engine="vllm", resolved=RESOLVED, annotations=None, **monitoring):
    body = cr(engine)
    body["spec"]["monitoring"] = {**FAST, **monitoring}
    body["status"] = {"resolved": dict(resolved)}
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def pod_h(config_hash="h1", **kw):
    p = pod(**kw)
    p["metadata"]["annotations"] = {"specdeploy.io/config-hash": config_hash}
    return p


def _labels(engine="vllm"):
    return {"namespace": NS, "deployment": NAME, "engine": engine, "drafter": DRAFTER}


async def _settle(r: Rig, n: int = 4) -> None:
    for _ in range(n):  # vLLM: a priming scrape, then 3 windows
        await r.tick()


def test_baseline_is_learned_then_a_drop_is_a_regression():
    async def scenario():
        r = Rig(cr_b())
        s = r.serve(pod_h(), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        await r.tick()
        assert r.cond()["reason"] == "Healthy" and "baseline" not in r.acceptance()  # still settling
        assert await r.tick() == [KEY]  # the third window: the baseline is learned (a status write)
        b = r.acceptance()["baseline"]
        rev = r.acceptance()["revision"]
        assert b["length"] == 3.96 and b["revision"] == rev and b["drafts"] == 300 and b["since"]
        assert "baseline 3.96 (this revision" in r.cond()["message"]
        assert list(_series("specdeploy_acceptance_baseline_length", **_labels()).values()) == [pytest.approx(3.96)]
        assert list(_series("specdeploy_acceptance_regression_fraction", **_labels()).values()) == [0.25]
        assert await r.tick() == []  # steady: no writes

        s.set_mode("regressed")  # tau 1.99: above the 1.5 floor, half the baseline
        assert await r.tick() == [KEY]
        c = r.cond()
        assert (c["status"], c["reason"]) == ("False", "AcceptanceRegressed")
        assert "1.99" in c["message"] and "3.96" in c["message"] and "50% below" in c["message"]
        assert r.acceptance()["baseline"] == b  # the same revision's baseline never moves
        for _ in range(5):
            await r.tick()
        assert r.acceptance()["baseline"] == b and r.cond()["reason"] == "AcceptanceRegressed"

        s.set_mode("collapsed")  # a collapse is the stronger statement
        await r.tick()
        assert r.cond()["reason"] == "AcceptanceCollapsed" and "baseline 3.96" in r.cond()["message"]
        s.set_mode("healthy")
        await r.tick()
        assert r.cond()["reason"] == "Healthy"

    run(scenario())


def test_a_spec_change_that_lowers_tau_is_a_regression_against_the_carried_baseline():
    """The shifted-ids case: a new drafter config.json (target_layer_ids + 1), accepted through
    spec.checks.accept, rolls out; tau falls; the previous revision's baseline stays the bar."""
    async def scenario():
        r = Rig(cr_b())
        s = r.serve(pod_h(), EngineStandin("vllm", "healthy"))
        await _settle(r)
        old = r.acceptance()["baseline"]
        body = r.c.bodies[KEY]
        body["spec"]["checks"] = {"accept": ["TargetLayerIdsShifted"]}
        body["status"]["resolved"] = {**RESOLVED, "drafterConfigDigest": "sha256:ids-1-3", "configHash": "h2"}
        # the rollout: the old pod goes, a new one (new config hash) comes
        r.m.observe_pod("DELETED", pod_h())
        s2 = r.serve(pod_h("h2", name="qwen-1", ip="10.0.0.8"), EngineStandin("vllm", "regressed"))
        await r.tick()  # primes the new pod
        await r.tick()
        c, a = r.cond(), r.acceptance()
        assert a["revision"] != old["revision"] and a["baseline"] == old
        assert (c["status"], c["reason"]) == ("False", "AcceptanceRegressed")
        assert f"learned on revision {old['revision']}" in c["message"] and f"now runs revision {a['revision']}" \
            in c["message"]
        for _ in range(6):  # settled long ago, but 1.99 is no baseline for a deployment that did 3.96
            await r.tick()
        assert r.acceptance()["baseline"] == old and r.cond()["reason"] == "AcceptanceRegressed"

        # the person accepts the lower acceptance: the annotation resets the baseline
        body["metadata"]["annotations"] = {"specdeploy.io/reset-acceptance-baseline": "accept-1"}
        assert await r.tick() == [KEY]
        assert "baseline" not in r.acceptance() and r.cond()["reason"] == "Healthy"  # 1.99 > 1.5, no baseline
        await r.tick()
        await r.tick()
        b = r.acceptance()["baseline"]
        assert (b["length"], b["revision"], b["resetToken"]) == (1.99, r.acceptance()["revision"], "accept-1")
        assert r.cond()["reason"] == "Healthy"
        assert await r.tick() == []  # the same annotation value never resets twice
        assert r.acceptance()["baseline"] == b

        # an operator restart reads it back: same value, no reset, no write
        stored = {"conditions": [{**r.cond(), "lastTransitionTime": "T0", "observedGeneration": 1}],
                  "acceptance": r.acceptance(), "resolved": body["status"]["resolved"]}
        r2 = Rig({**body, "status": stored})
        r2.serve(pod_h("h2", name="qwen-1", ip="10.0.0.8"), s2)
        await r2.tick()
        assert await r2.tick() == [] and r2.acceptance()["baseline"] == b

    run(scenario())


def test_a_new_revision_within_the_fraction_becomes_the_baseline():
    async def scenario():
        r = Rig(cr_b(regressionFraction=0.6))
        s = r.serve(pod_h(), EngineStandin("vllm", "healthy"))
        await _settle(r)
        old = r.acceptance()["baseline"]
        r.c.bodies[KEY]["spec"]["drafter"]["revision"] = "v2"
        s.set_mode("regressed")  # 1.99 is 50% below 3.96: within 60%
        await r.tick()
        assert r.cond()["reason"] == "Healthy" and "carried over from revision" in r.cond()["message"]
        await r.tick()
        await r.tick()
        new = r.acceptance()["baseline"]
        assert new["length"] == 1.99 and new["revision"] != old["revision"]
        assert "this revision" in r.cond()["message"]

    run(scenario())


def test_rollout_windows_are_judged_but_never_learned_from():
    async def scenario():
        r = Rig(cr_b())
        r.serve(pod_h("old-hash"), EngineStandin("vllm", "healthy"))  # the pod runs another config
        for _ in range(6):
            await r.tick()
        assert r.cond()["reason"] == "Healthy" and "baseline" not in r.acceptance()
        # a spec the gate refused (no configHash resolved) while the previous workload runs: same
        r2 = Rig(cr_b(resolved={"drafterConfigDigest": "sha256:x"}))
        r2.serve(pod_h("h1"), EngineStandin("vllm", "healthy"))
        for _ in range(6):
            await r2.tick()
        assert "baseline" not in r2.acceptance()

    run(scenario())


def test_baseline_is_restored_after_a_restart_and_kept_without_pods():
    async def scenario():
        stored_b = {"length": 3.96, "revision": bl.speculation_revision(cr_b()["spec"], RESOLVED), "since": "T0",
                    "drafts": 300}
        body = cr_b()
        body["status"]["acceptance"] = {"baseline": stored_b}
        r = Rig(body)
        p = pod_h()
        r.serve(p, EngineStandin("vllm", "regressed"))
        await r.tick()
        await r.tick()  # the first window: regressed at once, no relearning
        assert r.cond()["reason"] == "AcceptanceRegressed" and r.acceptance()["baseline"] == stored_b
        r.m.observe_pod("DELETED", p)
        await r.tick()
        assert r.cond()["reason"] == "NoReadyPods" and r.acceptance() == {"baseline": stored_b}
        assert not _series("specdeploy_acceptance_baseline_length", deployment=NAME, namespace=NS)

    run(scenario())


def test_sglang_regression():
    async def scenario():
        r = Rig(cr_b("sglang"))
        s = r.serve(pod_h(engine="sglang", port=30000), EngineStandin("sglang", "healthy"))
        for _ in range(3):  # gauges count from the first scrape: 3 windows
            await r.tick()
        b = r.acceptance()["baseline"]
        assert b["length"] == 3.96 and "drafts" not in b
        s.set_mode("regressed")
        await r.tick()
        assert r.cond()["reason"] == "AcceptanceRegressed"

    run(scenario())


# ----------------------------------------------------------------- the reconciler's status path


def test_write_status_carries_the_monitor_part_and_posts_transition_events():
    async def scenario():
        r = Rig()
        body = r.c.bodies[KEY]
        obs = st.Observation(generation=1, findings=[], workload_exists=True, workload_updated=True,
                             desired_replicas=1, replicas=1, ready_replicas=1, updated_replicas=1)
        await r.c._write_status(KEY, body, obs, resolved=None)
        assert "acceptance" not in r.kube.patches[-1]["status"]
        assert "SpeculationHealthy" not in {c["type"] for c in body["status"]["conditions"]}
        n_events = len(r.kube.events)

        s = r.serve(pod(), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        await r.c._write_status(KEY, body, obs, resolved=None)
        status = r.kube.patches[-1]["status"]
        conds = {c["type"]: c for c in status["conditions"]}
        assert set(conds) == {"DrafterCompatible", "Progressing", "Ready", "Degraded", "SpeculationHealthy"}
        assert conds["SpeculationHealthy"]["reason"] == "Healthy"
        sh = conds["SpeculationHealthy"]
        assert sh["lastTransitionTime"] and sh["observedGeneration"] == 1
        assert status["acceptance"]["length"] == 3.96
        assert [(e["type"], e["reason"]) for e in r.kube.events[n_events:]] == [("Normal", "Healthy")]

        writes = len(r.kube.patches)
        await r.c._write_status(KEY, body, obs, resolved=None)  # nothing changed: no write
        assert len(r.kube.patches) == writes

        s.set_mode("collapsed")
        await r.tick()
        await r.c._write_status(KEY, body, obs, resolved=None)
        conds = {c["type"]: c for c in r.kube.patches[-1]["status"]["conditions"]}
        assert (conds["SpeculationHealthy"]["status"], conds["SpeculationHealthy"]["reason"]) == \
            ("False", "AcceptanceCollapsed")
        assert conds["Ready"]["status"] == "True"  # the reconciler's conditions stay
        assert r.kube.events[-1]["type"] == "Warning" and r.kube.events[-1]["reason"] == "AcceptanceCollapsed"

        # without the monitor's part (a restarted operator), the stored SpeculationHealthy is kept
        r.c.cache.acceptances.drop(KEY)
        obs2 = st.Observation(generation=1, findings=[], workload_exists=True, workload_updated=True,
                              desired_replicas=1, replicas=1, ready_replicas=0, updated_replicas=1)
        await r.c._write_status(KEY, body, obs2, resolved=None)
        conds = {c["type"]: c for c in r.kube.patches[-1]["status"]["conditions"]}
        assert conds["SpeculationHealthy"]["reason"] == "AcceptanceCollapsed"
        assert "acceptance" not in r.kube.patches[-1]["status"]  # untouched, not cleared

        # pods gone: acceptance cleared with a merge-patch null
        r.m.targets.clear()
        await r.tick()
        await r.c._write_status(KEY, body, obs2, resolved=None)
        assert r.kube.patches[-1]["status"]["acceptance"] is None

    run(scenario())


def test_a_reset_baseline_is_removed_from_the_stored_status():
    """status is written with a JSON merge patch: a key left out is kept, so a dropped
    baseline must be sent as null."""
    async def scenario():
        stored_b = {"length": 3.96, "revision": "old-revision", "since": "T0", "drafts": 300}
        body = cr_b(annotations={"specdeploy.io/reset-acceptance-baseline": "accept-1"})
        body["status"]["acceptance"] = {"length": 1.99, "baseline": stored_b}
        r = Rig(body)
        r.serve(pod_h(), EngineStandin("vllm", "regressed"))
        await r.tick()
        await r.tick()
        assert "baseline" not in r.acceptance() and r.cond()["reason"] == "Healthy"
        obs = st.Observation(generation=1, findings=[], workload_exists=True, workload_updated=True,
                             desired_replicas=1, replicas=1, ready_replicas=1, updated_replicas=1)
        await r.c._write_status(KEY, body, obs, resolved=None)
        sent = r.kube.patches[-1]["status"]["acceptance"]
        assert sent["baseline"] is None and sent["length"] == 1.99 and sent["revision"]
        assert "baseline" not in body["status"]["acceptance"]
        assert st.merge_patch_of({"a": 1, "b": 2}, {"a": 3}) == {"a": 3, "b": None}
        assert st.merge_patch_of(None, {"a": 3}) == {"a": 3}

    run(scenario())


def test_deleting_the_cr_drops_the_monitor_state():
    async def scenario():
        r = Rig()
        r.serve(pod(), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        assert _series("specdeploy_acceptance_length", deployment=NAME, namespace=NS)
        await r.c.observe_cr("DELETED", r.c.bodies[KEY])
        assert reports(r.c) is None
        assert not _series("specdeploy_acceptance_length", deployment=NAME, namespace=NS)

    run(scenario())


# ----------------------------------------------------------------- one real scrape over HTTP


def test_default_fetch_scrapes_a_served_standin():
    async def scenario(port):
        c = Controller(FakeKube(), resolver=None, settings=Settings(workers=0))
        c.bodies[KEY] = cr()
        m = AcceptanceMonitor(c.cache, 30, timeout=5)
        adopt(m, c.children, c.bodies[KEY])
        m.observe_pod("ADDED", pod(ip="127.0.0.1", port=port))
        try:
            await m.tick()
            await m.tick()
        finally:
            await m.close()
        return reports(c)

    with EngineStandin("vllm", "healthy") as s:
        got = run(scenario(s.port))
        assert s.requests == 2
    assert got["condition"]["reason"] == "Healthy" and got["acceptance"]["length"] == 3.96
