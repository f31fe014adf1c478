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
    16 x 167936 x C <= pool: C = 19715; one sequence: 315444 tokens fit (the capacity), but the largest context is
    at most the served context, Qwen3-8B's max_position_embeddings 40960 (the engine refuses a longer request)."""
    _, m = _memory("vllm", concurrency=16)
    assert m.pool_bytes == 0.92 * 80e9 - 2 * 2**30 - WEIGHTS == 52_974_510_080
    assert m.largest_context() == 19715 and m.capacity_tokens == 315444 and m.largest_context(1) == 40960
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


# ----------------------------------------------------------------- the survivors of tools/mutation.sh -g memory

@pytest.mark.parametrize("gpu_mib,tp,want", [
    # handle_gpu_memory_settings' tiers: (chunked_prefill_size, decode cuda graph max_bs), strict "<" bounds in MiB
    (20 * 1024 - 1, 1, (2048, 8)), (20 * 1024, 1, (4096, 48)), (20 * 1024, 3, (4096, 48)), (20 * 1024, 4, (4096, 160)),
    (35 * 1024 - 1, 3, (4096, 48)), (35 * 1024, 1, (4096, 32)), (35 * 1024, 3, (4096, 32)), (35 * 1024, 4, (4096, 160)),
    (60 * 1024 - 1, 1, (4096, 32)), (60 * 1024, 1, (8192, 256)), (60 * 1024, 3, (8192, 256)), (60 * 1024, 4, (8192, 512)),
    (160 * 1024 - 1, 3, (8192, 256)), (160 * 1024 - 1, 4, (8192, 512)), (160 * 1024, 1, (16384, 512)),
])
def test_sglang_capacity_defaults_by_gpu_memory(gpu_mib, tp, want):
    assert mem._sglang_defaults(gpu_mib, tp) == want


def test_sglang_floor_applies_strictly_over_60_gib_and_chunked_sizes_count():
    # `gpu_mem > 60 * 1024`: at exactly 61440 MiB no floor (512 + 3072 + 128 + 512 + 42 x 8 = 4560), above it 10 GiB
    assert mem.sglang_reserved_mib(60 * 1024, 1, chunked_prefill_size=2048) == 4560
    assert mem.sglang_reserved_mib(60 * 1024 + 1, 1, chunked_prefill_size=2048) == 10240
    # a one-token chunk still counts 2048 tokens of activation (max(chunk, 2048)) and no prefill graph;
    # on 40e9 bytes (max_bs 32): 512 + 3072 + 128 + 64 = 3776
    assert mem.sglang_reserved_mib(40e9 / 2**20, 1, chunked_prefill_size=1) == 3776
    assert mem.sglang_reserved_mib(H100_MIB, 1) == 13904  # mla defaults to False


@pytest.mark.parametrize("max_bs,count", [(3, 0), (4, 1), (32, 8), (256, 22), (512, 30), (1024, 38), (4096, 50),
                                          (4607, 50), (4608, 51), (5119, 51), (5120, 52), (8192, 58), (16384, 74)])
def test_prefill_capture_sizes(max_bs, count):
    """cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes: 4..32 by 4, 48..256 by 16, 288..512 by 32,
    576..1024 by 64, 1280..4096 by 256, 4608.. by 512, up to max_bs."""
    assert mem._prefill_capture_sizes(max_bs) == count


def _doc(**kw) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4000,
            "vocab_size": 32000, **kw}


def _tkv(doc, tp=None):
    from specdeploy.core.modelconfig import parse_target

    t, _ = parse_target(doc)
    return mem.target_kv(t) if tp is None else mem.target_kv(t, tp)


def test_target_kv_geometry_defaults_by_hand():
    # no head counts: heads = hidden // 128 = 31, KV heads = heads, head_dim = 4000 // 31 = 129 (integer division,
    # as transformers' LlamaConfig head_dim = hidden_size // num_attention_heads)
    assert _tkv(_doc()).per_token == 2 * 2 * 31 * 129 * 2
    assert _tkv(_doc(num_attention_heads=32)).per_token == 2 * 2 * 32 * 125 * 2
    assert _tkv(_doc(num_attention_heads=32, num_key_value_heads=8)).per_token == 2 * 2 * 8 * 125 * 2
    assert _tkv(_doc(hidden_size=64)).per_token == 2 * 2 * 1 * 64 * 2  # at least one head
    assert _tkv({"num_hidden_layers": 2}) is None and _tkv({"hidden_size": 4096}) is None


def test_target_kv_layer_kinds_by_hand():
    per_layer = 2 * 8 * 128 * 2
    base = _doc(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=4)
    # 3 sliding : 1 full (gpt-oss / Gemma style), the window under attention_window_size
    k = _tkv({**base, "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "attention_window_size": 1024})
    assert k.per_token == per_layer and k.windowed == ((1024, 3 * per_layer),)
    # sliding layers without a window (sliding_window 0 is no window) keep every token
    k = _tkv({**base, "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "sliding_window": 0})
    assert k.per_token == 4 * per_layer and k.windowed == ()
    # convolution and Mamba layers keep a few KiB per sequence, nothing per token; the layers after them count
    for kind in ("conv", "mamba", "mamba2"):
        k = _tkv({**base, "layer_types": [kind, "full_attention", kind, "full_attention"]})
        assert (k.per_token, k.per_sequence) == (2 * per_layer, 0.0), kind
    # Kimi Linear's linear_attn_config: 32 heads x 128 x 128 float32 per linear layer and sequence
    k = _tkv({**base, "layer_types": ["linear_attention", "full_attention"] * 2,
              "linear_attn_config": {"num_heads": 32, "head_dim": 128}})
    assert k.per_sequence == 2 * 32 * 128 * 128 * 4 and k.per_token == 2 * per_layer
    assert _tkv({**base, "linear_attn_config": "x", "layer_types": ["linear_attention"] * 4}).per_sequence > 0


def test_target_kv_mla_and_indexer_by_hand():
    """MLA keeps kv_lora_rank + qk_rope_head_dim per layer on every GPU; DeepSeek V3.2's indexer keys add
    index_head_dim fp8 bytes + 4 bytes of scale per 128 (vLLM models/deepseek_v2.py: ``head_dim + head_dim //
    quant_block_size * 4``), also on every GPU; the indexer is there when index_topk is set."""
    mla = _doc(hidden_size=7168, num_attention_heads=128, num_hidden_layers=3, kv_lora_rank=512, qk_rope_head_dim=64)
    assert _tkv(mla).per_token == 3 * 576 * 2  # tp defaults to 1
    assert _tkv(mla, 4).per_token == 3 * 576 * 2 * 4
    v32 = {**mla, "index_topk": 2048, "index_head_dim": 192}
    assert _tkv(v32).per_token == 3 * (576 * 2 + 192 + 4)
    assert _tkv(v32, 2).per_token == 3 * (576 * 2 + 192 + 4) * 2


def test_kv_heads_are_replicated_when_the_group_is_larger():
    """vLLM config/model.py get_num_kv_heads: max(1, total // tp) per GPU: 1 KV head on 2 GPUs is 2 in all."""
    one = _doc(hidden_size=4096, num_attention_heads=32, num_key_value_heads=1)
    assert _tkv(one, 2).per_token == 2 * 2 * 2 * 128 * 2 and _tkv(one, 1).per_token == 2 * 2 * 1 * 128 * 2
    assert _tkv(one).per_token == 2 * 2 * 1 * 128 * 2


def _dkv(changes: dict, types=("full_attention",) * 5, **kw):
    from specdeploy.core.modelconfig import parse_drafter

    d_doc, _ = pair("qwen3-8b")
    d_doc = {**d_doc, **changes}
    d, _ = parse_drafter({k: v for k, v in d_doc.items() if v is not None})
    return mem.drafter_kv(d, types, **kw)


def test_drafter_kv_edges_by_hand():
    per_layer = 2 * 8 * 128 * 2
    # head_dim absent: hidden // heads = 128
    assert _dkv({"head_dim": None}, draft_window=None, native_window=None).per_token == 5 * per_layer
    # no layer count: no figure
    assert _dkv({"num_hidden_layers": None}, draft_window=None, native_window=None) is None
    # a draft window keeps every layer's last window, nothing per sequence
    assert _dkv({}, draft_window=4096, native_window=None) == mem.KvShape(0.0, ((4096, 5 * per_layer),), 0.0)
    # sliding layers without a native window keep every token; a native window without sliding layers adds nothing
    mixed = ("sliding_attention",) * 4 + ("full_attention",)
    assert _dkv({}, mixed, draft_window=None, native_window=None) == mem.KvShape(5 * per_layer, (), 0.0)
    assert _dkv({}, draft_window=None, native_window=2048) == mem.KvShape(5 * per_layer, (), 0.0)
    # one KV head, default tp 1: not replicated
    assert _dkv({"num_key_value_heads": 1}, draft_window=None, native_window=None).per_token == 5 * 2 * 128 * 2


@pytest.mark.parametrize("shape,pool,conc,limit,want", [
    (mem.KvShape(per_token=1000.0), 2500, 1, 10, 2),  # the search stays on whole tokens
    (mem.KvShape(per_token=1.0), 1, 1, 100, 1),  # exactly one token fits
    (mem.KvShape(per_token=1.0), 2, 1, 100, 2),
    (mem.KvShape(per_token=1.0), 1e9, 1, 1, 1),  # never past the limit
    (mem.KvShape(), 0, 1, 100, 0),  # no pool, nothing fits, whatever the shape
    (mem.KvShape(per_token=1.0), 100, 0, 100, 0),  # no sequence
    (mem.KvShape(per_token=10.0), 30, 1, 100, 3),  # exactly at the pool
    (mem.KvShape(per_token=10.0), 29, 3, 100, 0),  # 3 sequences of one token do not fit
])
def test_largest_context_edges(shape, pool, conc, limit, want):
    assert mem.largest_context(shape, pool, conc, limit=limit) == want


def test_plan_guards_and_defaults():
    s = mem.KvShape(per_token=1000.0)
    assert mem.plan("vllm", 0, 1, 0, 0, s, None, 10) is None
    assert mem.plan("vllm", 1, 1, 0, 0, s, None, 10) is not None  # any positive GPU memory
    assert mem.plan("vllm", 96e9, 0, 0, 0, s, None, 10) is None
    assert mem.plan("vllm", 96e9, 1, 0, 0, s, None, 0) is None
    assert mem.plan("vllm", 96e9, 1, 0, 0, s, None, 1).context == 1
    assert mem.plan("vllm", 96e9, 1, 0, 0, s, None, mem.MAX_CONTEXT_SEARCH + 1) is None
    assert mem.plan("vllm", 96e9, 1, float("inf"), 0, s, None, 10) is None
    assert mem.plan("vllm", 96e9, 1, 0, float("nan"), s, None, 10) is None
    p = mem.plan(None, 96e9, 1, 0, 0, s, None, 10)
    assert (p.engine, p.concurrency, p.drafter) == ("vllm", 1, mem.KvShape())
    assert mem.plan("sglang", 80e9, 1, 0, 0, s, None, 10).pool_bytes == pytest.approx(0.818 * 80e9)  # mla False
    assert mem.plan("vllm", 96e9, 1, 0, 0, s, None, 10, 0).concurrency == 1


def test_to_dict_of_a_real_config_by_hand():
    """The status/JSON figures of the vLLM case above, rounded as documented (docs/reference/api.md)."""
    _, m = _memory("vllm", concurrency=16)
    without = (52_974_510_080 + 2_097_152_000) // 147456  # the drafter's weights back, its KV gone: 373478
    assert m.to_dict() == {
        "gpuCount": 1, "kvPoolGiB": 49.3, "targetKvKiBPerToken": 144.0, "drafterKvKiBPerToken": 20.0,
        "drafterWeightGiB": 1.95, "capacityTokens": 315444, "capacityTokensWithoutDrafter": without,
        "drafterCapacityShare": round(1 - 315444 / without, 3), "atContext": 40960, "concurrency": 16,
        "largestContext": 19715}
    assert without == 373478 and round(1 - 315444 / without, 3) == 0.155
    # per-token KiB to one decimal: 5 layers x 2 x 8 x 100 x 2 = 16000 B = 15.625 KiB -> 15.6
    p = mem.MemoryPlan("vllm", 1, 96e9, 0, 123_456_789, mem.KvShape(per_token=16000.0), mem.KvShape(per_token=1000.0),
                       pool_bytes=-5.0, context=7, concurrency=1)
    d = p.to_dict()
    assert d["targetKvKiBPerToken"] == 15.6 and d["drafterKvKiBPerToken"] == 1.0 and d["kvPoolGiB"] == 0.0
    assert d["drafterWeightGiB"] == 0.11 and d["drafterCapacityShare"] == 1.0  # no pool left with it


def test_per_token_at_context_zero_is_zero():
    p = mem.MemoryPlan("vllm", 1, 96e9, 0, 0, mem.KvShape(per_token=1.0), mem.KvShape(), pool_bytes=10.0, context=0,
                       concurrency=1)
    assert p._per_token(p.target) == 0.0 and p.capacity_tokens == 0


def test_shapes_add_their_per_sequence_state():
    a, b = mem.KvShape(1.0, ((5, 2.0),), 3.0), mem.KvShape(4.0, (), 7.0)
    assert a.plus(b) == mem.KvShape(5.0, ((5, 2.0),), 10.0)


def test_num_takes_positive_integers_only():
    assert mem._num({"a": 1}, "a") == 1 and mem._num({"a": 0, "b": 2}, "a", "b") == 2
    assert mem._num({"a": True}, "a") is None and mem._num({"a": -1}, "a") is None


@pytest.mark.parametrize("n,text", [(1.5 * 2**30, "1.5 GiB"), (2**30, "1.0 GiB"), (-2 * 2**30, "-2.0 GiB"),
                                    (2**30 - 2**20, "1023 MiB"), (5 * 2**20, "5 MiB"), (-5 * 2**20, "-5 MiB")])
def test_gib_text(n, text):
    assert mem.gib(n) == text


@pytest.mark.parametrize("n,text", [(1_234_567, "1.23M"), (1_000_000, "1.00M"), (999_999, "1000K"), (12_345, "12K"),
                                    (10_000, "10K"), (9_999, "9999"), (0, "0")])
def test_tokens_text(n, text):
    assert mem.tokens(n) == text


def test_second_run_survivors():
    """The non-equivalent survivors of the second memory run (docs/concepts/testing.md)."""
    # default head count hidden // 128 with the KV heads given: 1280 // 128 = 10 heads of 128 (not 9 of 142)
    assert _tkv(_doc(hidden_size=1280, num_key_value_heads=8)).per_token == 2 * 2 * 8 * 128 * 2
    assert _tkv(_doc(hidden_size=64, num_key_value_heads=1)).per_token == 2 * 2 * 1 * 64 * 2  # one head of 64
    # an index_head_dim without index_topk is no indexer (vLLM deepseek_v2.py: is_v32 = hasattr(config, "index_topk"))
    mla = _doc(hidden_size=7168, num_attention_heads=128, num_hidden_layers=3, kv_lora_rank=512, qk_rope_head_dim=64)
    assert _tkv({**mla, "index_head_dim": 128}).per_token == 3 * 576 * 2
    # linear_attn_config's head count, not the attention heads (32)
    base = _doc(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=2)
    k = _tkv({**base, "layer_types": ["linear_attention", "full_attention"],
              "linear_attn_config": {"num_heads": 16, "head_dim": 128}})
    assert k.per_sequence == 16 * 128 * 128 * 4
    # the drafter's head_dim from hidden // heads (integer): 4096 // 24 = 170
    assert _dkv({"head_dim": None, "num_attention_heads": 24}, draft_window=None,
                native_window=None).per_token == 5 * 2 * 8 * 170 * 2
    assert _dkv({"head_dim": None, "num_attention_heads": None}, draft_window=None, native_window=None) is None
    assert _dkv({"num_key_value_heads": None, "num_attention_heads": None}, draft_window=None,
                native_window=None) is None
    # the plan keeps the GPU memory it was given
    assert mem.plan("vllm", 96e9, 1, 0, 0, mem.KvShape(per_token=1.0), None, 10).gpu_memory_bytes == 96e9
    assert mem.tokens(1_235_000) == "1.24M"
    # --chunked-prefill-size <= 0 (chunking off: SGLang then sizes activations from max_prefill_tokens) is not
    # modelled: the GPU's default chunk stays (docs/concepts/memory.md "Not modelled")
    assert mem.sglang_reserved_mib(H100_MIB, 1, chunked_prefill_size=0) == 13904
    assert mem.sglang_reserved_mib(H100_MIB, 1, chunked_prefill_size=-1) == 13904
