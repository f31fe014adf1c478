"""The memory model (core/memory.py) against hand-computed cases: KV bytes per token of every fixture target and
drafter, the KV pool per engine, capacity, the largest context, and the checker's findings from it."""

from __future__ import annotations

import pytest

from specdeploy.core import memory as mem
from specdeploy.core.checker import Options, analyze
from specdeploy.core.gpus import PROFILES
from specdeploy.core.modelconfig import parse_drafter, parse_target

from testkit import load_fixture, pair

KIB = 1024
GIB = 2**30


def _target(name: str):
    t, _ = parse_target(load_fixture(name))
    assert t is not None
    return t


# (fixture, tensor-parallel size, bytes per token for all layers that keep every token, windowed, per sequence)
# computed by hand from each config.json:
TARGETS = [
    # 36 layers x 2 (K, V) x 8 KV heads x head_dim 128 x 2 bytes
    ("qwen3-8b.target.json", 1, 36 * 2 * 8 * 128 * 2, 0),
    # 32 layers x 2 x 8 KV heads x (4096 / 32 = 128) x 2
    ("llama-3.1-8b-instruct.target.json", 1, 32 * 2 * 8 * 128 * 2, 0),
    # 48 layers x 2 x 4 KV heads x 128 x 2; at tp 8 the 4 KV heads are replicated to one per GPU: 8 in all
    ("qwen3-30b-a3b.target.json", 1, 48 * 2 * 4 * 128 * 2, 0),
    ("qwen3-30b-a3b.target.json", 8, 48 * 2 * 8 * 128 * 2, 0),
    # 16 full layers x 2 x 4 KV heads x 256 x 2; 48 Gated DeltaNet layers x 48 value heads x 128 x 128 x 4 bytes
    ("qwen3.5-27b.target.json", 1, 16 * 2 * 4 * 256 * 2, 48 * 48 * 128 * 128 * 4),
    # tp 2 splits the 4 KV heads: the group total is unchanged
    ("qwen3.5-27b.target.json", 2, 16 * 2 * 4 * 256 * 2, 48 * 48 * 128 * 128 * 4),
    # MLA: 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes, replicated on each of the 8 GPUs
    ("kimi-k2.6.target.json", 8, 61 * (512 + 64) * 2 * 8, 0),
    # 11 DSA layers x (latent 512 x 2 bytes + indexer 128 fp8 + 4 bytes of scale); 34 KDA layers x 64 heads x
    # 128 x 128 x 4 bytes
    ("glm-5.3-flash.target.json", 1, 11 * (512 * 2 + 128 + 4), 34 * 64 * 128 * 128 * 4),
]


@pytest.mark.parametrize("name,tp,per_token,per_seq", TARGETS)
def test_target_kv_by_hand(name, tp, per_token, per_seq):
    k = mem.target_kv(_target(name), tp)
    assert k.per_token == per_token
    assert k.windowed == ()
    assert k.per_sequence == per_seq
    assert k.bytes_for(1000) == per_token * 1000 + per_seq


def test_sliding_target_layers_keep_only_their_window():
    doc = load_fixture("qwen3-8b.target.json")
    doc["layer_types"] = ["sliding_attention", "full_attention"] * 18
    doc["sliding_window"] = 4096
    k = mem.target_kv(parse_target(doc)[0])
    per_layer = 2 * 8 * 128 * 2
    assert k.per_token == 18 * per_layer
    assert k.windowed == ((4096, 18 * per_layer),)
    assert k.bytes_for(1000) == 36 * per_layer * 1000
    assert k.bytes_for(100_000) == 18 * per_layer * 100_000 + 18 * per_layer * 4096


# (pair, draft window, native window, per token, windowed)
DRAFTERS = [
    # 5 full layers x 2 x 8 KV heads x 128 x 2
    ("qwen3-8b", None, None, 5 * 2 * 8 * 128 * 2, ()),
    # 4 sliding layers kept at the native 2048 window, 1 full layer
    ("qwen3.6-27b", None, 2048, 1 * 2 * 8 * 128 * 2, ((2048, 4 * 2 * 8 * 128 * 2),)),
    # SGLang's compact draft cache: every layer at the rendered window
    ("qwen3.6-27b", 4096, None, 0, ((4096, 5 * 2 * 8 * 128 * 2),)),
    # 6 full layers x 2 x 8 x 128 x 2
    ("kimi-k2.6", None, None, 6 * 2 * 8 * 128 * 2, ()),
]


@pytest.mark.parametrize("name,draft_window,native,per_token,windowed", DRAFTERS)
def test_drafter_kv_by_hand(name, draft_window, native, per_token, windowed):
    d_doc, _ = pair(name)
    d, _ = parse_drafter(d_doc)
    types = tuple(x.value for x in d.layer_types.value) if d.layer_types else ("full_attention",) * 6
    k = mem.drafter_kv(d, types, draft_window=draft_window, native_window=native)
    assert k.per_token == per_token
    assert k.windowed == windowed


def test_pool_per_engine_by_hand():
    """The pool per engine from the engines' own rules (not this module's constants), GPU memory in MiB as
    SGLang reads it (utils/common.py get_device_memory_capacity)."""
    gb96 = 96e9
    # vLLM 0.33: gpu_memory_utilization 0.92 (config/cache.py CacheConfig) of each GPU, less the activation
    # estimate (2 GiB), times the GPUs, less the weights
    assert mem.kv_pool_bytes("vllm", gb96, 2, 50e9) == pytest.approx(2 * (0.92 * gb96 - 2 * GIB) - 50e9)
    # SGLang 0.5.23 arg_groups/memory_hook.py handle_gpu_memory_settings on 96e9 bytes = 91552.7 MiB (>= 90 GiB,
    # < 160 GiB): chunked_prefill_size 8192, decode graph max_bs 256 (tp < 4); reserved = 512 + 1.5 x 8192
    # + tp/8 x 1024 (128) + reserve_for_graph_mb (256 x 2 + 58 prefill graphs x 8 = 976) = 13904 MiB;
    # mem_fraction_static = round((91552.7 - 13904) / 91552.7, 3) = 0.848
    assert mem.kv_pool_bytes("sglang", gb96, 1, 50e9) == pytest.approx(0.848 * gb96 - 50e9)
    # 40e9 bytes = 38147 MiB (< 60 GiB): chunked 4096, max_bs 160 (tp >= 4); reserved = 512 + 6144 + 8/8 x 1024
    # + (160 x 2 + 50 prefill graphs x 8) = 8400 MiB, no 10 GiB floor under 60 GiB; round(29747 / 38147, 3) = 0.780
    assert mem.kv_pool_bytes("sglang", 40e9, 8, 0) == pytest.approx(8 * 0.780 * 40e9)


def test_largest_context_and_capacity_by_hand():
    shape = mem.KvShape(per_token=1000.0, windowed=((100, 500.0),), per_sequence=10_000.0)
    # 4 sequences of C tokens: 4 x (1000 C + 500 min(C, 100) + 10000) <= 4,000,000 -> C = 940
    assert mem.largest_context(shape, 4_000_000, 4) == 940
    assert mem.largest_context(shape, 4_000_000, 1) == 3940
    assert mem.largest_context(shape, 10_000, 1) == 0  # the fixed state alone fills it
    assert mem.largest_context(shape, 0, 1) == 0
    assert mem.largest_context(mem.KvShape(per_sequence=1.0), 10.0, 1, limit=50) == 50

    p = mem.MemoryPlan("vllm", 1, 96e9, 10e9, 1e9, mem.KvShape(per_token=1000.0), mem.KvShape(per_token=250.0),
                       pool_bytes=1e9, context=1000, concurrency=2)
    assert p.capacity_tokens == 800_000  # 1e9 / 1250
    assert p.capacity_tokens_without_drafter == 2_000_000  # (1e9 + 1e9 of drafter weights) / 1000
    assert p.drafter_capacity_share == pytest.approx(0.6)
    assert mem.largest_context(p.target.plus(p.drafter), p.pool_bytes, 2) == 400_000  # 2 x 1250 C <= 1e9
    assert p.largest_context() == 1000 and p.context_limited()  # ... but it serves 1000 tokens at most
    assert p.to_dict()["largestContext"] == 1000


def _opts(**kw) -> Options:
    base = dict(engine="vllm", gpu="rtx-pro-6000", gpu_count=1)
    base.update(kw)
    return Options(**base)


def test_check_reports_memory_for_a_real_pair():
    d, t = pair("qwen3-8b")
    a = analyze(d, t, _opts(concurrency=16))
    m = a.derived.memory
    assert m is not None and m.concurrency == 16 and m.context == 40960
    assert m.target.per_token == 36 * 2 * 8 * 128 * 2 and m.drafter.per_token == 5 * 2 * 8 * 128 * 2
    dd = a.derived.to_dict()["memory"]
    assert dd["targetKvKiBPerToken"] == 144.0 and dd["drafterKvKiBPerToken"] == 20.0
    # by hand (vLLM on 1 x 96e9 bytes): pool = 0.92 x 96e9 - 2 GiB - weights (target 2 x (2 x 151936 x 4096 +
    # 36 x (2 x 4096 x 4096 + 2 x 4096 x 1024 + 3 x 4096 x 12288)) = 16,380,854,272; drafter 2 x 5 x (192,937,984 +
    # 4096 x 4096) = 2,097,152,000) = 67,694,510,080; 16 sequences of C tokens at 147456 + 20480 = 167936 B/token:
    # C = floor(67,694,510,080 / (16 x 167936)) = 25193; the capacity at 40960 tokens: floor(pool / 167936) = 403097
    assert m.pool_bytes == 0.92 * 96e9 - 2 * GIB - 16_380_854_272 - 2_097_152_000
    assert dd["largestContext"] == 25193 and dd["capacityTokens"] == 403097
    assert not any(f.code in ("KvCacheTooSmallForContext", "DrafterKvCapacityHigh") for f in a.findings)


def test_no_memory_figures_without_a_gpu_profile():
    d, t = pair("qwen3-8b")
    assert analyze(d, t, Options(engine="vllm")).derived.memory is None


def test_context_that_cannot_fit_one_sequence_is_an_error_on_vllm_and_a_warning_on_sglang():
    # Kimi K2.6 at 262144 tokens on 8 x 96 GB: ~600 GB of int4 weights leave no room for one sequence's MLA cache
    d, t = pair("kimi-k2.6")
    t["text_config"]["max_position_embeddings"] = 4 * 1024 * 1024
    a = analyze(d, t, _opts(gpu_count=8, max_model_len=4 * 1024 * 1024))
    f = [f for f in a.findings if f.code == "KvCacheTooSmallForContext"]
    assert f and f[0].severity.value == "error" and f[0].path == "spec.engine.maxModelLen"
    assert "set spec.engine.maxModelLen <= " in f[0].message and "refuses to start" in f[0].message
    fits = a.derived.memory.largest_context(1) if a.derived else None
    assert fits is None or str(fits) in f[0].message
    s = analyze(d, t, _opts(engine="sglang", gpu_count=8, max_model_len=4 * 1024 * 1024))
    g = [f for f in s.findings if f.code == "KvCacheTooSmallForContext"]
    assert g and g[0].severity.value == "warning"


def test_a_drafter_that_takes_a_large_share_of_the_capacity_warns_with_the_numbers():
    d, t = pair("qwen3-8b")
    d["num_hidden_layers"] = 20  # 20 draft layers of full KV: 80 KiB per token beside the target's 144
    d["layer_types"] = ["full_attention"] * 20
    a = analyze(d, t, _opts())
    w = [f for f in a.findings if f.code == "DrafterKvCapacityHigh"]
    assert w and w[0].severity.value == "warning" and w[0].path == "spec.drafter"
    assert "KiB/token" in w[0].message and "without" in w[0].message
    share = a.derived.memory.drafter_capacity_share
    assert share > mem.DRAFTER_CAPACITY_SHARE_WARN and f"{share:.0%}" in w[0].message


def test_every_fixture_target_has_a_kv_shape():
    for name, *_ in TARGETS:
        assert not mem.target_kv(_target(name)).empty, name


def test_profiles_have_memory():
    assert PROFILES["rtx-pro-6000"].memory_bytes > 0


def test_status_resolved_carries_the_memory_figures():
    from types import SimpleNamespace

    from specdeploy.controller.plan import build_resolved
    from specdeploy.core.render import render
    from specdeploy_dev.demo import load_examples
    from testkit import EXAMPLES

    ex = next(e for e in load_examples(EXAMPLES) if e.name == "kimi-k2.6-rtx-pro-6000-sglang")
    cr = ex.cr.model_copy(deep=True)
    cr.metadata.namespace, cr.metadata.uid = "models", "0d6f1f3c-2f6e-4a53-9b8e-4a0f7f0d3a11"
    r = render(cr, ex.target, ex.drafter)
    ref = SimpleNamespace(digest="sha256:x", commit="")
    got = build_resolved(ref, ref, r, cr).model_dump(by_alias=True, exclude_none=True)["memory"]
    want = r.analysis.derived.memory
    assert got["gpuCount"] == 8 and got["atContext"] == 49152  # the example's maxModelLen
    assert got["targetKvKiBPerToken"] == round(61 * 576 * 2 * 8 / 1024, 1)
    # by hand: SGLang on 8 x 96e9 bytes (91552.7 MiB: chunked 8192, decode max_bs 512 at tp 8, an MLA target so
    # 1.5 GiB of prefill graphs): reserved = 512 + 12288 + 1024 + 1024 + 1536 = 16384 MiB, mem_fraction_static
    # round(75168.7 / 91552.7, 3) = 0.821; pool = 8 x 0.821 x 96e9 - weights (the estimates, bounded by hand in
    # test_weights.py: target 594,203,246,592 + drafter 6,958,350,336) = 29,366,403,072 bytes; one sequence
    # (concurrency 1) at 562176 (MLA) + 24576 (6 draft layers x 2 x 8 x 128 x 2) = 586752 B/token:
    # floor(29,366,403,072 / 586752) = 50049 tokens of capacity; the largest context is at most the served context
    # (the example's maxModelLen 49152: a longer request is refused by the engine whatever the pool holds)
    assert want.target_weight_bytes == 594_203_246_592 and want.drafter_weight_bytes == 6_958_350_336
    assert got["kvPoolGiB"] == round(29_366_403_072 / GIB, 1)
    assert got["capacityTokens"] == 50049 and got["largestContext"] == 49152


def test_absurd_contexts_get_no_figures_and_never_overflow():
    d, t = pair("qwen3-8b")
    for v in (10**400, 2**70, mem.MAX_CONTEXT_SEARCH + 1):
        t["max_position_embeddings"] = v
        a = analyze(d, t, _opts())
        assert a.derived is None or a.derived.memory is None, v
    t["max_position_embeddings"] = mem.MAX_CONTEXT_SEARCH
    assert analyze(d, t, _opts()).derived.memory.context == mem.MAX_CONTEXT_SEARCH


def test_the_largest_context_is_at_most_the_served_context():
    """A pool that would hold 1.4M tokens of one sequence serves no longer a context than the model's own limit."""
    from specdeploy.core import memory as mem

    shape = mem.KvShape(per_token=1024.0)
    p = mem.plan("vllm", 200e9, 1, 16e9, 2e9, shape, None, context=40960)
    assert p.largest_context() == 40960 and p.context_limited()
    assert mem.largest_context(shape, p.pool_bytes, 1) > 40960  # the pool alone would say more
    small = mem.plan("vllm", 96e9, 1, 16e9, 2e9, mem.KvShape(per_token=4e6), None, context=40960)
    assert 0 < small.largest_context() < 40960 and not small.context_limited()
    assert small.to_dict()["largestContext"] == small.largest_context()
