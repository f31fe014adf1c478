"""SpeculativeBenchmark: API validation and the pure planner (variants, points, refusals)."""

from __future__ import annotations

import json

import pytest

from specdeploy.api import benchmark as B
from specdeploy.core.bench.plan import BASELINE, PlanError, build_client_plan, plan_benchmark, variant_name


def bench(matrix: dict | None = None, **spec) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark",
            "metadata": {"name": "sweep", "namespace": "team-a"},
            "spec": {"deploymentRef": {"name": "qwen"},
                     "matrix": {"contexts": [64], "concurrency": [1, 4], **(matrix or {})}, **spec}}


def matrix(**m):
    cr, problems = B.validate(bench(m))
    assert cr is not None, problems
    return cr.spec.matrix


# ----------------------------------------------------------------- API validation

def test_defaults():
    cr, problems = B.validate(bench())
    assert problems == []
    m = cr.spec.matrix
    assert (m.baseline, m.prompts_per_point, m.max_output_tokens, m.speculative_tokens) == (True, 16, 128, [])
    assert cr.spec.prompts.plan() == {"kind": "generated", "seed": 0}
    assert cr.spec.use_serving_deployment is False


@pytest.mark.parametrize("edit,path,words", [
    ({"matrix": {"contexts": [], "concurrency": [1]}}, "spec.matrix.contexts", "at least 1"),
    ({"matrix": {"contexts": [64], "concurrency": [0]}}, "spec.matrix.concurrency[0]", ">= 1"),
    ({"matrix": {"contexts": [64], "concurrency": [1, 1]}}, "spec.matrix", "concurrency lists a value twice"),
    ({"matrix": {"contexts": [64], "concurrency": [1], "speculativeTokens": [0]}}, "spec.matrix.speculativeTokens[0]", ">= 1"),
    ({"matrix": {"contexts": [64], "concurrency": [1], "draftWindow": ["on"]}}, "spec.matrix.draftWindow[0]", "off"),
    ({"matrix": {"contexts": [64], "concurrency": [1], "draftAttentionBackend": ["cuda"]}},
     "spec.matrix.draftAttentionBackend[0]", "flashinfer"),
    ({"matrix": {"contexts": [1, 2, 3, 4, 5, 6, 7, 8], "concurrency": [1, 2, 3, 4, 5], "speculativeTokens": [1, 2]}},
     "spec.matrix", "120 points"),
    ({"prompts": {"bundled": "code", "generated": {"seed": 1}}}, "spec.prompts", "exactly one"),
    ({"prompts": {"bundled": "poetry"}}, "spec.prompts.bundled", "'code'"),
    ({"deploymentRef": {"name": "Bad_Name"}}, "spec.deploymentRef.name", "Kubernetes object name"),
    ({"surprise": 1}, "spec.surprise", "unknown field"),
])
def test_bad_specs_name_the_field_and_the_fix(edit, path, words):
    obj = bench()
    obj["spec"].update(edit)
    cr, problems = B.validate(obj)
    assert cr is None
    hit = [p for p in problems if p.path == path]
    assert hit, problems
    assert words in hit[0].message, hit[0].line()


def test_long_name_is_refused():
    obj = bench()
    obj["metadata"]["name"] = "x" * 31
    cr, problems = B.validate(obj)
    assert cr is None and problems[0].path == "metadata.name" and "at most 30" in problems[0].message


# ----------------------------------------------------------------- planner

def test_baseline_first_then_the_deployments_own_speculation():
    plan = plan_benchmark(matrix(), engine="vllm", engine_version="0.32.0", block_size=16)
    assert [v.name for v in plan.variants] == ["baseline", "k15"]
    assert plan.variants[0].speculation is False and plan.variants[1].speculative_tokens is None
    assert [p.id for p in plan.points] == ["baseline/c64/n1", "baseline/c64/n4", "k15/c64/n1", "k15/c64/n4"]
    assert [p.new_engine for p in plan.points] == [True, False, True, False]
    assert plan.engine_starts == 2


def test_axes_multiply_in_order():
    m = matrix(speculativeTokens=[3, 7], draftWindow=[2048, "off"], draftAttentionBackend=["fa3", "trtllm_mha"],
               contexts=[64, 512], concurrency=[1])
    plan = plan_benchmark(m, engine="sglang", engine_version="0.5.23", block_size=16)
    names = [v.name for v in plan.variants]
    assert names[:3] == ["baseline", "k3-w2048-fa3", "k3-w2048-trtllm-mha"]
    assert len(names) == 1 + 2 * 2 * 2 and "k7-woff-fa3" in names
    assert plan.variant("k7-woff-fa3").draft_window == "off"
    assert len(plan.points) == 9 * 2
    assert all(len(f"{'x' * 30}-{n}-client") <= 63 for n in names)


@pytest.mark.parametrize("m,kw,code,words", [
    (dict(speculativeTokens=[3, 16]), dict(block_size=16), "SpeculativeTokensTooMany", "at most block size - 1 = 15"),
    (dict(draftWindow=[2048]), dict(engine="vllm", engine_version="0.32.0"), "DraftWindowUnsupported", "remove"),
    (dict(draftWindow=[8]), dict(), "DraftWindowBelowBlock", "set it to 16 or more"),
    (dict(draftAttentionBackend=["trtllm_mha"]), dict(engine="vllm", engine_version="0.32.0"),
     "DraftAttentionBackendUnsupported", "it has: fa3, fa4, flashinfer, triton"),
    (dict(contexts=[2000]), dict(served_context=2048), "ContextTooLong", "lower it to 1920"),
])
def test_planner_refusals(m, kw, code, words):
    args = {**dict(engine="sglang", engine_version="0.5.23", block_size=16), **kw}
    with pytest.raises(PlanError) as e:
        plan_benchmark(matrix(**m), **args)
    hit = [p for p in e.value.problems if p.code == code]
    assert hit and words in hit[0].message, e.value


def test_without_baseline_a_note_says_what_is_lost():
    plan = plan_benchmark(matrix(baseline=False), engine="vllm", engine_version="0.32.0", block_size=4)
    assert [v.name for v in plan.variants] == ["k3"] and "crossover" in plan.notes[0]


def test_variant_names():
    assert variant_name(3, None, None) == "k3"
    assert variant_name(3, 2048, "fa3") == "k3-w2048-fa3"
    assert variant_name(3, "off", "trtllm_mha") == "k3-woff-trtllm-mha"


def test_client_plan_is_contract_2():
    plan = plan_benchmark(matrix(speculativeTokens=[3]), engine="vllm", engine_version="0.32.0", block_size=4)
    doc = build_client_plan(benchmark="sweep", variant="k3", engine="vllm", engine_version="0.32.0",
                            base_url="http://sweep-k3.team-a.svc:8000", metrics_url="http://sweep-k3.team-a.svc:8000/metrics",
                            model="m", tokenizer="m", prompts={"kind": "generated", "seed": 0}, points=plan.points_of("k3"))
    assert doc["points"] == [{"id": "k3/c64/n1", "context": 64, "concurrency": 1, "numPrompts": 16, "maxOutputTokens": 128},
                             {"id": "k3/c64/n4", "context": 64, "concurrency": 4, "numPrompts": 16, "maxOutputTokens": 128}]
    assert doc["temperature"] == 0 and doc["client"] == "auto"
    json.dumps(doc)
    assert BASELINE == "baseline"


def test_every_example_benchmark_validates():
    import yaml

    from testkit import EXAMPLES

    found = [d for p in sorted(EXAMPLES.rglob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
             if isinstance(d, dict) and d.get("kind") == "SpeculativeBenchmark"]
    assert found, "no SpeculativeBenchmark example"
    for doc in found:
        cr, problems = B.validate(doc)
        assert cr is not None, problems
        plan = plan_benchmark(cr.spec.matrix, engine="vllm", engine_version="0.32.0", block_size=4, served_context=2048)
        assert plan.variants[0].name == "baseline" and len(plan.points) <= 64


def test_the_drafters_block_bounds_the_sweep_and_the_deployments_own_tokens_are_the_default():
    plan = plan_benchmark(matrix(), engine="vllm", engine_version="0.32.0", block_size=16, deployment_tokens=3)
    assert [v.name for v in plan.variants] == ["baseline", "k3"] and plan.variants[1].speculative_tokens is None
    plan = plan_benchmark(matrix(speculativeTokens=[3, 15]), engine="vllm", engine_version="0.32.0", block_size=16,
                          deployment_tokens=3)
    assert [v.name for v in plan.variants] == ["baseline", "k3", "k15"]


def test_methods_and_guarded_variants():
    m = matrix(methods=[{"method": "ngram"}, {"method": "eagle3", "drafter": {"model": "a/eagle"}},
                        {"method": "eagle3", "drafter": {"model": "b/eagle"}, "eagle": {"steps": 4}}], guarded=True)
    p = plan_benchmark(m, engine="vllm", engine_version="0.33.0", block_size=16, deployment_method="dflash")
    assert [v.name for v in p.variants] == ["baseline", "k15", "guarded", "ngram", "eagle3", "eagle3-2"]
    assert [v.method for v in p.variants] == [None, "dflash", "dflash", "ngram", "eagle3", "eagle3"]
    assert p.variant("guarded").guarded and not p.variant("k15").guarded
    assert p.variant("ngram").method_speculation == {"method": "ngram"} and p.variant("ngram").drafter is None
    assert p.variant("eagle3-2").method_speculation == {"method": "eagle3", "eagle": {"steps": 4}}
    assert p.variant("eagle3-2").drafter == {"model": "b/eagle"} and p.variant("eagle3").to_doc()["drafter"] == "a/eagle"


def test_a_method_the_release_lacks_is_refused():
    with pytest.raises(PlanError) as e:
        plan_benchmark(matrix(methods=[{"method": "suffix"}]), engine="sglang", engine_version="0.5.23", block_size=16)
    assert "spec.matrix.methods[0].method" in str(e.value) and "MethodUnsupported" in str(e.value)


@pytest.mark.parametrize("bad,words", [
    ({"method": "eagle3"}, "needs a drafter"),
    ({"method": "ngram", "drafter": {"model": "a/b"}}, "takes no drafter"),
    ({"method": "ngram", "eagle": {"steps": 2}}, "eagle settings apply only"),
    ({"method": "ddtree", "drafter": {"model": "a/b"}}, "no engine release"),
])
def test_bad_method_entries_name_the_fix(bad, words):
    cr, problems = B.validate(bench({"methods": [bad]}))
    assert cr is None and words in str(problems), problems


def test_methods_count_in_the_point_limit_in_cel():
    from specdeploy_dev.apiserver import cel

    rule = B.Matrix.model_json_schema()["x-kubernetes-validations"][0]["rule"]
    m = {"contexts": list(range(1, 9)), "concurrency": [1, 2, 3, 4], "methods": [{"method": "ngram"}]}
    assert cel.evaluate(rule, m) is False  # 32 x (1 + 1 + 1) = 96
    assert cel.evaluate(rule, {**m, "contexts": [1, 2, 3, 4, 5]}) is True  # 20 x 3 = 60
    assert cel.evaluate(rule, {**m, "contexts": [1, 2, 3, 4, 5, 6], "guarded": True}) is False  # 24 x 4 = 96
    drafter_rule = B.BenchMethod.model_json_schema()["x-kubernetes-validations"][0]["rule"]
    assert cel.evaluate(drafter_rule, {"method": "ngram"}) is True
    assert cel.evaluate(drafter_rule, {"method": "eagle3"}) is False
