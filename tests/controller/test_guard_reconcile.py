"""spec.speculation.guard through the reconciler against the embedded API server (ssa_support.Env): the schedule
in the applied Deployment, SpeculationGuarded and resolved.guardMaxConcurrency in the stored status, fromBenchmark
from the watch-fed benchmark cache (no reads), the guard's removal."""

from __future__ import annotations

import json

import pytest

from ssa_support import Env, engine

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("guard"), "guard")
    yield e
    e.close()


def spec_config(env: Env, name: str) -> dict:
    args = engine(env.get("Deployment", name))["args"]
    return json.loads(args[args.index("--speculative-config") + 1])


def condition(env: Env, name: str, ctype: str) -> dict | None:
    status = env.get("SpeculativeDeployment", name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


def benchmark(env: Env, name: str, phase: str, max_concurrency) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark",
            "metadata": {"name": name, "namespace": env.ns}, "spec": {"deploymentRef": {"name": "fb"}},
            "status": {"phase": phase, "recommendation": {"guard": {"maxConcurrency": max_concurrency}}}}


def test_max_concurrency_is_rendered_and_reported(env: Env):
    env.put_cr("mc", {"speculation": {"guard": {"maxConcurrency": 8}}})
    env.converge("mc")
    sc = spec_config(env, "mc")
    k = sc["num_speculative_tokens"]
    assert sc[SCHEDULE_KEY] == [[1, 7, k], [8, 8, 0]]
    c = condition(env, "mc", "SpeculationGuarded")
    assert (c["status"], c["reason"]) == ("True", "GuardRendered") and "maxConcurrency" in c["message"]
    assert env.get("SpeculativeDeployment", "mc")["status"]["resolved"]["guardMaxConcurrency"] == 8
    assert any(e["reason"] == "GuardRendered" for e in env.events("mc"))
    # the guard goes: the switch and the condition go
    env.put_cr("mc", {})
    env.converge("mc")
    assert SCHEDULE_KEY not in spec_config(env, "mc")
    assert condition(env, "mc", "SpeculationGuarded") is None


def test_from_benchmark_follows_the_benchmark_without_reads(env: Env):
    key = (env.ns, "fb")
    env.put_cr("fb", {"speculation": {"guard": {"fromBenchmark": "sweep"}}})
    env.converge("fb")
    assert SCHEDULE_KEY not in spec_config(env, "fb")  # nothing to render yet: the deployment runs unguarded
    c = condition(env, "fb", "SpeculationGuarded")
    assert (c["status"], c["reason"]) == ("False", "BenchmarkNotFound") and "sweep" in c["message"]

    env.run(env.ctl.observe_benchmark("ADDED", benchmark(env, "sweep", "Running", None)))
    assert len(env.ctl.queue) == 1 and env.run(env.ctl.queue.get()) == key  # the watch queues the reader
    env.run(env.ctl.queue.done(key))
    env.converge("fb")
    assert condition(env, "fb", "SpeculationGuarded")["reason"] == "BenchmarkNotComplete"

    env.run(env.ctl.observe_benchmark("MODIFIED", benchmark(env, "sweep", "Complete", 4)))
    env.converge("fb")
    sc = spec_config(env, "fb")
    assert sc[SCHEDULE_KEY] == [[1, 3, sc["num_speculative_tokens"]], [4, 4, 0]]
    c = condition(env, "fb", "SpeculationGuarded")
    assert (c["status"], c["reason"]) == ("True", "GuardRendered") and "SpeculativeBenchmark sweep" in c["message"]
    # an idle reconcile reads the benchmark from the cache: no write (and no read of it)
    assert env.reconcile("fb") == []

    # rerun with speculation never losing: nothing rendered, said so
    env.run(env.ctl.observe_benchmark("MODIFIED", benchmark(env, "sweep", "Complete", None)))
    env.converge("fb")
    assert SCHEDULE_KEY not in spec_config(env, "fb")
    assert condition(env, "fb", "SpeculationGuarded")["reason"] == "NoCrossover"
