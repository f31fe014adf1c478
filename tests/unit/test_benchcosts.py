"""Hidden costs of a benchmark point from the engines' own /metrics (core/bench/costs.py) and their place in the
recommendation (core/bench/reco.py): hand-written exposition texts in each engine's series names."""

from __future__ import annotations

import pytest

from specdeploy.core.bench import costs as bc
from specdeploy.core.bench.reco import recommend, variant_costs
from specdeploy.core.bench.result import PointResult

VLLM_BEFORE = """
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2048"} 1.0
process_resident_memory_bytes 1.5e9
"""
VLLM_AFTER = """
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 3000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1600.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.05
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="2048"} 1.0
process_resident_memory_bytes 1.6e9
"""
SGLANG_BEFORE = """
sglang:realtime_tokens_total{mode="prefill_cache",model_name="m"} 100.0
sglang:realtime_tokens_total{mode="prefill_compute",model_name="m"} 900.0
sglang:realtime_tokens_total{mode="decode",model_name="m"} 5000.0
sglang:max_total_num_tokens{model_name="m"} 500000.0
sglang:token_usage{model_name="m"} 0.1
sglang:cache_hit_rate{model_name="m"} 0.3
"""
SGLANG_AFTER = """
sglang:realtime_tokens_total{mode="prefill_cache",model_name="m"} 700.0
sglang:realtime_tokens_total{mode="prefill_compute",model_name="m"} 2300.0
sglang:realtime_tokens_total{mode="decode",model_name="m"} 9000.0
sglang:max_total_num_tokens{model_name="m"} 500000.0
sglang:token_usage{model_name="m"} 0.2
sglang:cache_hit_rate{model_name="m"} 0.3
"""


def test_vllm_costs_over_a_point():
    mid = bc.gauges("vllm", VLLM_AFTER.replace("0.05", "0.75").replace("1.6e9", "2.5e9"))
    c = bc.point_costs("vllm", VLLM_BEFORE, VLLM_AFTER, [mid])
    # (1600 - 400) hits of (3000 - 1000) queries; 2048 blocks x 16 tokens; the peak seen while it ran
    assert c == {"prefixCacheQueries": 2000.0, "prefixCacheHits": 1200.0, "prefixCacheHitRate": 0.6,
                 "prefixCacheSource": "counters", "kvCapacityTokens": 32768, "kvUsagePeak": 0.75,
                 "residentMemoryPeakBytes": 2.5e9}
    assert PointResult.model_validate({"id": "p", "context": 1, "concurrency": 1, "completed": 1,
                                       "outputTokensPerSecond": 1, "costs": c}).costs.kv_capacity_tokens == 32768


def test_vllm_needs_both_scrapes_for_the_hit_rate():
    c = bc.point_costs("vllm", None, VLLM_AFTER)
    assert c["prefixCacheHitRate"] is None and c["kvCapacityTokens"] == 32768


def test_vllm_capacity_before_profiling_and_over_data_parallel_cores():
    assert bc.gauges("vllm", 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1').kv_capacity_tokens is None
    two = ('vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1\n'
           'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="100"} 1\n')
    assert bc.gauges("vllm", two).kv_capacity_tokens == 3200


def test_a_counter_reset_counts_from_zero():
    restarted = VLLM_AFTER.replace("3000.0", "500.0").replace("1600.0", "100.0")
    c = bc.point_costs("vllm", VLLM_BEFORE, restarted)
    assert c["prefixCacheQueries"] == 500.0 and c["prefixCacheHits"] == 100.0


def test_sglang_costs_from_the_realtime_token_counters():
    c = bc.point_costs("sglang", SGLANG_BEFORE, SGLANG_AFTER)
    # 600 cached of 600 + 1400 prefilled tokens; decode tokens do not count
    assert c["prefixCacheHitRate"] == pytest.approx(0.3) and c["prefixCacheQueries"] == 2000.0
    assert c["prefixCacheSource"] == "counters" and c["kvCapacityTokens"] == 500000 and c["kvUsagePeak"] == 0.2


def test_sglang_falls_back_to_the_hit_rate_gauge():
    old = "\n".join(x for x in SGLANG_AFTER.splitlines() if "realtime" not in x)
    c = bc.point_costs("sglang", SGLANG_BEFORE, old)
    assert c["prefixCacheHitRate"] == 0.3 and c["prefixCacheSource"] == "gauge" and c["prefixCacheQueries"] is None


def test_nothing_exported_is_none():
    assert bc.point_costs("vllm", "other_metric 1\n", "other_metric 2\n") is None
    assert bc.point_costs("sglang", None, None) is None


def test_comparison_line_and_prefix_cache_loss():
    base = {"kvCapacityTokens": 100_000, "prefixCacheHitRate": 0.61, "residentMemoryPeakBytes": 1e9}
    k3 = {"kvCapacityTokens": 62_000, "prefixCacheHitRate": 0.0, "residentMemoryPeakBytes": 1.2e9}
    assert bc.compare_to_baseline(k3, base) == ("KV capacity -38% (62,000 vs 100,000 tokens), prefix cache 0% vs 61%, "
                                                "peak memory +20%")
    assert bc.prefix_cache_lost(k3, base)
    assert not bc.prefix_cache_lost({**k3, "prefixCacheHitRate": 0.5}, base)
    assert not bc.prefix_cache_lost(k3, {**base, "prefixCacheHitRate": 0.0})  # nothing to lose
    assert not bc.prefix_cache_lost(k3, None) and bc.compare_to_baseline(None, base) == ""


def _pt(variant, conc, tps, costs):
    return {"id": f"{variant}/{conc}", "variant": variant, "context": 1024, "concurrency": conc, "completed": 4,
            "failed": 0, "outputTokensPerSecond": tps, "costs": costs}


def test_the_recommendation_names_each_variants_costs_and_a_lost_prefix_cache():
    base_c = {"prefixCacheQueries": 1000, "prefixCacheHits": 610, "prefixCacheSource": "counters",
              "kvCapacityTokens": 100_000, "kvUsagePeak": 0.2}
    k3_c = {"prefixCacheQueries": 1000, "prefixCacheHits": 0, "prefixCacheSource": "counters",
            "kvCapacityTokens": 62_000, "kvUsagePeak": 0.4}
    pts = [_pt("baseline", 1, 10, base_c), _pt("baseline", 8, 50, base_c), _pt("k3", 1, 20, k3_c), _pt("k3", 8, 40, k3_c)]
    r = recommend(pts, ["baseline", "k3"])
    assert r["costs"] == [{"variant": "k3", "vsBaseline": "KV capacity -38% (62,000 vs 100,000 tokens), "
                           "prefix cache 0% vs 61%", "prefixCacheLost": True}]
    assert "prefix cache hit nothing under k3 (0% vs baseline 61%)" in r["summary"]
    # the hit rate is over every token looked up, not a mean of the points' rates
    agg = variant_costs([_pt("b", 1, 1, {**base_c, "prefixCacheQueries": 3000, "prefixCacheHits": 0}),
                         _pt("b", 2, 1, base_c)])
    assert agg["prefixCacheHitRate"] == pytest.approx(610 / 4000)
    # no costs exported: no cost lines, the summary as before
    plain = recommend([{**p, "costs": None} for p in pts], ["baseline", "k3"])
    assert plain["costs"] == [] and "prefix" not in plain["summary"]
