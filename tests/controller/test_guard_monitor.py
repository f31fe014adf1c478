"""spec.speculation.guard in the controller: SpeculationProfitable from live load (the monitor with stand-in
engines), SpeculationGuarded from the reconcile, fromBenchmark read from the watch-fed benchmark cache."""

from __future__ import annotations

import copy

import pytest

from specdeploy.controller import status as st
from specdeploy.controller.monitor import body_guard_limit
from specdeploy.core import acceptance as acc
from specdeploy.core.rollout import guard as gd
from specdeploy_dev.engine_standin import EngineStandin
from test_monitor import KEY, NS, NAME, Rig, cr, pod, reports, run


def guarded(engine="vllm", **guard) -> dict:
    body = cr(engine)
    body["spec"]["speculation"] = {"guard": guard}
    return body


def benchmark(name="sweep", phase="Complete", max_concurrency=4, deployment=NAME) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark",
            "metadata": {"name": name, "namespace": NS}, "spec": {"deploymentRef": {"name": deployment}},
            "status": {"phase": phase, "recommendation": {"guard": {"maxConcurrency": max_concurrency,
                                                                    "maxContext": None}}}}


def prof(r: Rig):
    return (reports(r.c) or {}).get("profitable")


# ----------------------------------------------------------------- pure


@pytest.mark.parametrize("text, engine, want", [
    ('vllm:num_requests_running{engine="0",model_name="m"} 3.0\n', "vllm", 3.0),
    ('vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 7\n', "vllm", 7.0),
    ('sglang:num_running_reqs{tp_rank="0"} 5\nsglang:num_running_reqs{tp_rank="1"} 5\n', "sglang", 5.0),
    ('vllm:generation_tokens_total 10\n', "vllm", None),
    ('vllm:num_requests_running NaN\n', "vllm", None),
    ('sglang:num_running_reqs 5\n', "vllm", None),
])
def test_running_requests(text, engine, want):
    assert acc.running_requests(engine, text) == want


def test_standin_exposition_parses_to_its_running_gauge():
    for engine in ("vllm", "sglang"):
        s = EngineStandin(engine, "healthy", dp=2)
        s.requests_running = 9.0
        assert acc.running_requests(engine, s.metrics_text()) == 9.0


@pytest.mark.parametrize("body, want", [
    (None, (None, gd.REASON_BENCHMARK_MISSING)),
    (benchmark(phase="Running"), (None, gd.REASON_BENCHMARK_PENDING)),
    ({**benchmark(), "status": {"phase": "Complete"}}, (None, gd.REASON_BENCHMARK_PENDING)),
    (benchmark(max_concurrency="8"), (None, gd.REASON_BENCHMARK_PENDING)),
    (benchmark(max_concurrency=0), (None, gd.REASON_BENCHMARK_PENDING)),
    (benchmark(max_concurrency=True), (None, gd.REASON_BENCHMARK_PENDING)),
    (benchmark(max_concurrency=4), (4, None)),
    (benchmark(max_concurrency=None), (None, None)),  # Complete, speculation never lost: no limit, no problem
])
def test_limit_from_benchmark(body, want):
    limit, problem = gd.limit_from_benchmark("sweep", body, deployment=NAME)
    got = (limit.max_concurrency if limit else None, problem[1] if problem else None)
    assert got == want
    if problem:
        assert problem[0] is False and "sweep" in problem[2]
    if limit:
        assert limit.source == "SpeculativeBenchmark sweep"
    if body is None:
        assert "spec.speculation.guard.maxConcurrency" in problem[2]


def test_a_benchmark_of_another_deployment_says_so():
    limit, _ = gd.limit_from_benchmark("sweep", benchmark(deployment="other"), deployment=NAME)
    assert limit.max_concurrency == 4 and "measured on other" in limit.source


def test_guard_limit_of_a_raw_body():
    assert body_guard_limit(KEY, cr(), {}) is None
    assert body_guard_limit(KEY, guarded(maxConcurrency=8), {}).max_concurrency == 8
    assert body_guard_limit(KEY, guarded(fromBenchmark="sweep"), {}) is None
    assert body_guard_limit(KEY, guarded(fromBenchmark="sweep"), {(NS, "sweep"): benchmark()}).max_concurrency == 4
    assert body_guard_limit(KEY, guarded(fromBenchmark="sweep"), {("elsewhere", "sweep"): benchmark()}) is None


def test_profitable_condition_keeps_its_message_while_the_verdict_holds():
    limit = gd.GuardLimit(4, "spec.speculation.guard.maxConcurrency")
    past = st.profitable_condition(5.0, limit)
    assert (past["type"], past["status"], past["reason"]) == ("SpeculationProfitable", "False", "PastCrossover")
    assert "5 running requests >= 4" in past["message"]
    assert st.profitable_condition(9.0, limit, {**past, "lastTransitionTime": "T"}) == past  # no churn
    below = st.profitable_condition(1.0, limit, past)
    assert (below["status"], below["reason"]) == ("True", "BelowCrossover")
    # a changed limit is news even with the same verdict
    assert "5 running requests >= 2" in st.profitable_condition(5.0, gd.GuardLimit(2, "x"), past)["message"]
    assert st.profitable_condition(5.0, None, past) is None


@pytest.mark.parametrize("ctype, status, want", [
    ("SpeculationProfitable", "False", "Warning"), ("SpeculationProfitable", "True", "Normal"),
    ("SpeculationGuarded", "False", "Warning"), ("SpeculationGuarded", "True", "Normal"),
])
def test_guard_transitions_have_events(ctype, status, want):
    assert st.event_for({"type": ctype, "status": status, "reason": "R", "message": "m"}) == (want, "R", "m")


def test_guard_conditions_are_dropped_when_no_longer_written():
    prev = [{"type": "SpeculationGuarded", "status": "True", "reason": "GuardRendered", "message": "m"},
            {"type": "SpeculationProfitable", "status": "False", "reason": "PastCrossover", "message": "m"},
            {"type": "SpeculationHealthy", "status": "True", "reason": "Healthy", "message": "m"}]
    merged = st.merge_conditions(prev, [], 2, "T")
    assert [c["type"] for c in merged] == ["SpeculationHealthy"]
    obs = st.Observation(generation=1, findings=[], guard=(False, gd.REASON_UNSUPPORTED, "why"))
    conds = {c["type"]: c for c in st.compute_conditions(obs)}
    assert (conds["SpeculationGuarded"]["status"], conds["SpeculationGuarded"]["reason"]) == ("False", "GuardUnsupported")


# ----------------------------------------------------------------- the monitor with stand-in engines


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_live_load_past_the_guard_is_past_crossover(engine):
    async def scenario():
        r = Rig(guarded(engine, maxConcurrency=4))
        s = r.serve(pod(engine=engine), EngineStandin(engine, "healthy"))
        s.requests_running = 2.0
        await r.tick()
        if engine == "vllm":
            assert prof(r) is None  # the first vLLM scrape only primes the counters
            await r.tick()
        assert (prof(r)["status"], prof(r)["reason"]) == ("True", "BelowCrossover")
        s.requests_running = 4.0
        assert await r.tick() == [KEY]
        assert (prof(r)["status"], prof(r)["reason"]) == ("False", "PastCrossover")
        assert "spec.speculation.guard.maxConcurrency" in prof(r)["message"]
        s.requests_running = 11.0
        assert await r.tick() == []  # still past: nothing new, no status write
        # a load that drops between scrapes (requests come and go) keeps the verdict: the peak of the last
        # LOAD_HOLD_SCRAPES samples is judged, so the condition does not flap with every sample
        s.requests_running = 1.0
        for _ in range(gd.LOAD_HOLD_SCRAPES - 1):
            assert await r.tick() == [] and prof(r)["reason"] == "PastCrossover"
        s.requests_running = 5.0
        assert await r.tick() == [] and prof(r)["reason"] == "PastCrossover"
        s.requests_running = 1.0
        for _ in range(gd.LOAD_HOLD_SCRAPES - 1):
            assert await r.tick() == []
        assert await r.tick() == [KEY]  # LOAD_HOLD_SCRAPES samples under the limit: back under it
        assert prof(r)["reason"] == "BelowCrossover"

    run(scenario())


def test_the_most_loaded_pod_counts():
    async def scenario():
        r = Rig(guarded("sglang", maxConcurrency=4))
        a = r.serve(pod("qwen-0", ip="10.0.0.7", engine="sglang"), EngineStandin("sglang", "healthy"))
        b = r.serve(pod("qwen-1", ip="10.0.0.8", engine="sglang"), EngineStandin("sglang", "healthy"))
        a.requests_running, b.requests_running = 1.0, 6.0
        await r.tick()
        assert prof(r)["reason"] == "PastCrossover" and "6 running requests" in prof(r)["message"]

    run(scenario())


def test_no_guard_no_condition_and_from_benchmark_follows_the_cache():
    async def scenario():
        r = Rig(cr("sglang"))
        r.serve(pod(engine="sglang"), EngineStandin("sglang", "healthy"))
        await r.tick()
        assert prof(r) is None and r.cond() is not None
        r.c.bodies[KEY] = guarded("sglang", fromBenchmark="sweep")
        await r.tick()
        assert prof(r) is None  # the benchmark is not there: nothing to compare with
        r.c.benchmarks[(NS, "sweep")] = benchmark(max_concurrency=2)
        assert await r.tick() == [KEY]
        assert prof(r)["reason"] == "PastCrossover" and "SpeculativeBenchmark sweep" in prof(r)["message"]

    run(scenario())


def test_write_status_carries_speculation_profitable_and_drops_it_with_the_guard():
    async def scenario():
        r = Rig(guarded("sglang", maxConcurrency=2))
        body = r.c.bodies[KEY]
        r.serve(pod(engine="sglang"), EngineStandin("sglang", "healthy"))
        await r.tick()
        obs = st.Observation(generation=1, findings=[], workload_exists=True, workload_updated=True,
                             desired_replicas=1, replicas=1, ready_replicas=1, updated_replicas=1,
                             guard=(False, gd.REASON_UNSUPPORTED, "SGLang has no switch"))
        await r.c._write_status(KEY, body, obs, resolved=None)
        conds = {c["type"]: c for c in r.kube.patches[-1]["status"]["conditions"]}
        assert (conds["SpeculationProfitable"]["status"], conds["SpeculationProfitable"]["reason"]) == \
            ("False", "PastCrossover")
        assert conds["SpeculationGuarded"]["reason"] == "GuardUnsupported"
        assert {(e["type"], e["reason"]) for e in r.kube.events} >= {("Warning", "PastCrossover"),
                                                                    ("Warning", "GuardUnsupported")}
        # the guard goes: both conditions go
        r.c.bodies[KEY] = cr("sglang")
        await r.tick()
        obs2 = copy.copy(obs)
        obs2.guard = None
        await r.c._write_status(KEY, body, obs2, resolved=None)
        types = {c["type"] for c in r.kube.patches[-1]["status"]["conditions"]}
        assert "SpeculationProfitable" not in types and "SpeculationGuarded" not in types

    run(scenario())


def test_benchmark_events_queue_only_the_deployments_that_read_it():
    async def scenario():
        other = cr(name="other")
        r = Rig(guarded(fromBenchmark="sweep"), other)
        c = r.c

        async def drained():
            out = []
            while len(c.queue):
                out.append(await c.queue.get())
                await c.queue.done(out[-1])
            return out

        await c.observe_benchmark("ADDED", benchmark(phase="Running"))
        assert await drained() == [KEY]
        running = benchmark(phase="Running")
        running["status"]["progress"] = "3/8"
        await c.observe_benchmark("MODIFIED", running)
        assert await drained() == []  # progress is not what the guard reads
        await c.observe_benchmark("MODIFIED", benchmark())
        assert await drained() == [KEY] and c.benchmarks[(NS, "sweep")]["status"]["phase"] == "Complete"
        await c.observe_benchmark("DELETED", benchmark())
        assert await drained() == [KEY] and (NS, "sweep") not in c.benchmarks

    run(scenario())


def test_the_guard_limit_is_exported_while_a_guard_is_set():
    from test_monitor import _series

    async def scenario():
        r = Rig(guarded("sglang", maxConcurrency=6))
        r.serve(pod(engine="sglang"), EngineStandin("sglang", "healthy"))
        await r.tick()
        labels = {"namespace": NS, "deployment": NAME, "engine": "sglang"}
        assert list(_series("specdeploy_guard_max_concurrency", **labels).values()) == [6.0]
        r.c.bodies[KEY] = guarded("sglang", maxConcurrency=3)
        await r.tick()
        assert list(_series("specdeploy_guard_max_concurrency", **labels).values()) == [3.0]
        r.c.bodies[KEY] = cr("sglang")
        await r.tick()
        assert _series("specdeploy_guard_max_concurrency", **labels) == {}
        r.c.bodies[KEY] = guarded("sglang", maxConcurrency=3)
        await r.tick()
        r.m.forget(KEY)
        assert _series("specdeploy_guard_max_concurrency", **labels) == {}

    run(scenario())


# ----------------------------------------------------------------- live tau against the benchmark's


def measured(max_concurrency=8) -> dict:
    """A Complete benchmark: k7 paid at (512, 1) with tau 3.2 and at (512, 4) with tau 2.5; the baseline won at
    (512, 8); a band whose tau is garbage, and one whose speedup is not above 1, do not count."""
    b = benchmark(max_concurrency=max_concurrency)
    b["status"]["points"] = [
        {"variant": "k7", "context": 512, "concurrency": 1, "tau": 3.2},
        {"variant": "k7", "context": 512, "concurrency": 4, "tau": 2.5},
        {"variant": "k7", "context": 512, "concurrency": 8, "tau": 1.4},
        {"variant": "k3", "context": 4096, "concurrency": 1, "tau": "lots"},
        {"variant": "k3", "context": 4096, "concurrency": 4, "tau": 1.1},
        {"variant": "baseline", "context": 512, "concurrency": 8, "tau": None},
    ]
    b["status"]["recommendation"]["bands"] = [
        {"context": 512, "concurrency": 1, "best": "k7", "speedup": 1.9},
        {"context": 512, "concurrency": 4, "best": "k7", "speedup": 1.2},
        {"context": 512, "concurrency": 8, "best": "baseline", "speedup": 1.0},
        {"context": 4096, "concurrency": 1, "best": "k3", "speedup": 1.3},
        {"context": 4096, "concurrency": 4, "best": "k3", "speedup": 0.9},
    ]
    return b


def test_the_lowest_paying_tau_comes_from_bands_and_points():
    limit, _ = gd.limit_from_benchmark("sweep", measured(), deployment=NAME)
    assert limit.min_paying_tau == 2.5 and limit.max_concurrency == 8
    no_points = benchmark()
    assert gd.limit_from_benchmark("sweep", no_points, deployment=NAME)[0].min_paying_tau is None


@pytest.mark.parametrize("running, tau, want", [
    (1.0, 3.0, (True, gd.REASON_BELOW)),
    (1.0, 2.0, (False, gd.REASON_TAU)),
    (9.0, 2.0, (False, gd.REASON_PAST)),  # load past the crossover says more
    (1.0, None, (True, gd.REASON_BELOW)),  # no drafts in the window: no tau evidence
])
def test_past_crossover_with_tau(running, tau, want):
    limit = gd.GuardLimit(8, "SpeculativeBenchmark sweep", 2.5)
    got = gd.past_crossover(running, limit, tau)
    assert got[:2] == want
    if want[1] == gd.REASON_TAU:
        assert "live tau 2.00 is below 2.50" in got[2] and "SpeculativeBenchmark sweep" in got[2]
    # never lost, but paid with tau 2.5 at best: tau is still judged
    no_cross = gd.GuardLimit(None, "SpeculativeBenchmark sweep", 2.5)
    assert gd.past_crossover(running, no_cross, 2.0)[1] == gd.REASON_TAU
    assert gd.past_crossover(running, no_cross, 3.0)[1] == gd.REASON_BELOW


def test_live_tau_below_the_benchmarks_is_not_profitable():
    async def scenario():
        r = Rig(guarded("sglang", fromBenchmark="sweep"))
        r.c.benchmarks[(NS, "sweep")] = measured()
        s = r.serve(pod(engine="sglang"), EngineStandin("sglang", "healthy"))
        s.requests_running = 2.0
        await r.tick()
        assert prof(r)["reason"] == gd.REASON_BELOW  # tau 3.96 >= 2.5
        s.set_mode("collapsed")
        assert await r.tick() == [KEY]
        assert prof(r)["reason"] == gd.REASON_TAU and "live tau 1.05 is below 2.50" in prof(r)["message"]
        s.set_mode("healthy")
        s.requests_running = 8.0
        assert await r.tick() == [KEY]
        assert prof(r)["reason"] == gd.REASON_PAST

    run(scenario())
