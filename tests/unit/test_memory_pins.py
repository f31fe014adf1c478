"""The memory model pinned to the engines' rules with hand-computed figures (issue 43).

One real config throughout: Qwen3-8B (tests/fixtures/models/qwen3-8b.target.json) with its DFlash drafter, on
one H100 (the profile's 80e9 bytes = 76293.9 MiB). Weights by hand from the configs (bf16):
target 2 x (2 x 151936 x 4096 [embeddings, untied lm_head] + 36 x (2 x 4096^2 + 2 x 4096 x 1024 [q, o, k, v]
+ 3 x 4096 x 12288 [MLP])) = 16,380,854,272 B; drafter 2 x 5 x (192,937,984 + 4096^2 [its share of fc])
= 2,097,152,000 B. KV per token: target 36 x 2 x 8 x 128 x 2 = 147456, drafter 5 x 2 x 8 x 128 x 2 = 20480:
167936 B."""

from __future__ import annotations

import pytest

from specdeploy.core import memory as mem
from specdeploy.core.checker import Options, analyze

from testkit import pair

H100_MIB = 80e9 / 2**20
WEIGHTS = 16_380_854_272 + 2_097_152_000
PER_TOKEN = 147456 + 20480


@pytest.mark.parametrize("gpu_bytes,tp,chunked,mla,reserved", [
    # memory_hook.py handle_gpu_memory_settings (SGLang 0.5.23): 60-90 GiB -> chunked 8192, decode max_bs 256;
    # 512 + 1.5 x 8192 + 1/8 x 1024 + (256 x 2 + 58 prefill graphs x 8) = 13904 MiB: above the 10 GiB floor
    (80e9, 1, None, False, 13904),
    # --chunked-prefill-size 2048 on the same GPU: 512 + 3072 + 128 + (512 + 42 x 8) = 4560 -> the floor, 10240
    (80e9, 1, 2048, False, 10240),
    # the same on a 40e9-byte GPU (< 60 GiB: no floor; max_bs 32 at tp < 4): 512 + 3072 + 128 + (64 + 336) = 4112
    (40e9, 1, 2048, False, 4112),
    # >= 160 GiB (B300's 288e9): chunked 16384, max_bs 512; 512 + 24576 + 128 + (1024 + 74 x 8) = 26832
    (288e9, 1, None, False, 26832),
    # an MLA backend's prefill graphs are 1.5 GiB (reserve_for_graph_mb): 512 + 24576 + 128 + 1024 + 1536
    (288e9, 1, None, True, 27776),
])
def test_sglang_reserve_by_hand(gpu_bytes, tp, chunked, mla, reserved):
    assert mem.sglang_reserved_mib(gpu_bytes / 2**20, tp, chunked_prefill_size=chunked, mla=mla) == reserved


def _memory(engine: str, **kw):
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(engine=engine, gpu="h100", gpu_count=1, **kw))
    return a, a.derived.memory


def test_sglang_pool_of_a_real_config_by_hand():
    """mem_fraction_static = round((76293.9 - reserved) / 76293.9, 3): 0.818 at the defaults (13904 MiB), 0.866
    with --chunked-prefill-size 2048 in extraArgs (the 10 GiB floor); the pool is that share less the weights."""
    _, m = _memory("sglang", concurrency=16)
    assert m.pool_bytes == pytest.approx(0.818 * 80e9 - WEIGHTS)  # 46,961,993,728
    assert m.largest_context() == 46_961_993_728 // (16 * PER_TOKEN) == 17477
    _, m = _memory("sglang", concurrency=16, extra_args=("--chunked-prefill-size", "2048"))
    assert m.pool_bytes == pytest.approx(0.866 * 80e9 - WEIGHTS)  # 50,801,993,728
    _, m = _memory("sglang", concurrency=16, extra_args=("--chunked-prefill-size=2048",))
    assert m.pool_bytes == pytest.approx(0.866 * 80e9 - WEIGHTS)


def test_vllm_pool_capacity_and_largest_context_by_hand():
    """vLLM: 0.92 x 80e9 - 2 GiB - weights = 52,974,510,080 B; 16 running sequences of C tokens fit while
    16 x 167936 x C <= pool: C = 19715; one sequence: 315444 (the capacity at the served context, too)."""
    _, m = _memory("vllm", concurrency=16)
    assert m.pool_bytes == 0.92 * 80e9 - 2 * 2**30 - WEIGHTS == 52_974_510_080
    assert m.largest_context() == 19715 and m.largest_context(1) == 315444 == m.capacity_tokens
    assert m.to_dict()["largestContext"] == 19715


@pytest.mark.parametrize("context,fires", [(315444, False), (315445, True), (400000, True)])
def test_kv_cache_too_small_for_context_at_one_sequence(context, fires):
    """vLLM refuses to start when one sequence of max_model_len does not fit the KV pool
    (v1/core/kv_cache_planning.py _check_enough_kv_cache_memory: needed = max_model_len x bytes per token >
    available): 315444 x 167936 = 52,974,403,584 <= 52,974,510,080 fits, 315445 tokens do not."""
    a, _ = _memory("vllm", max_model_len=context)
    f = [f for f in a.findings if f.code == "KvCacheTooSmallForContext"]
    assert bool(f) is fires
    if fires:
        assert f[0].severity.value == "error" and "set spec.engine.maxModelLen <= 315444" in f[0].message
