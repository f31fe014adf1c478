"""What the KV cache holds (pure): bytes per token of the target and the drafter, the KV pool left after the
weights on ``gpu.count`` GPUs, its capacity in tokens, and the longest context that fits at a concurrency.

Read from the two config.json documents only (layers, KV heads, head dim, MLA latent, sliding windows,
linear-attention state) and the GPU profile. Estimates for a fit check, not an allocator: the engines measure
activation memory at start-up; the constants below are what their code reserves by default.

Per token, for the whole tensor-parallel group (the pool is the sum over ``gpu.count`` GPUs):
- full attention layer: ``2 (K, V) x KV heads x head_dim x bytes``; KV heads are split over the group, and a
  group larger than the KV heads replicates them (``ceil(kv / tp) x tp`` heads in all);
- sliding-window layer: the same per token, but only the last ``window`` tokens are kept;
- MLA (DeepSeek, Kimi, GLM-5): one latent of ``kv_lora_rank + qk_rope_head_dim`` per layer, replicated on
  every GPU of the group (vLLM and SGLang do not shard it);
- DeepSeek sparse attention (V3.2, GLM-5): the MLA latent plus the indexer's fp8 keys;
- linear attention (Gated DeltaNet, KDA) / Mamba: a fixed float32 state per sequence (no per-token cost);
- the drafter: each draft layer keeps K and V of the context it attends to (DFlash drafters attend to every
  context token), capped at the draft window when one is rendered (SGLang's compact draft cache) or at the
  drafter's own window for its sliding layers when the engine applies it natively.

The KV pool per GPU:
- vLLM: ``gpu_memory_utilization`` (0.92 in 0.33: ``vllm/config/cache.py`` ``CacheConfig``) of the GPU for
  weights, activations and KV; the activation peak is profiled at start-up, estimated here as
  ``VLLM_ACTIVATION_RESERVE``;
- SGLang: ``mem_fraction_static = round((GPU - reserved) / GPU, 3)`` of the GPU for weights and KV, with
  ``reserved`` from ``sglang/srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` (0.5.23, its default
  path; ``sglang_reserved_mib``): 512 MiB + 1.5 MiB per chunked-prefill token + tp/8 GiB + the CUDA-graph
  buffers (``reserve_for_graph_mb``), at least 10 GiB on a GPU over 60 GiB. The chunked-prefill size and the
  decode graph's batch size default by GPU memory; at those defaults a GPU over 60 GiB reserves 12.5 GiB or more,
  so the floor binds only when ``--chunked-prefill-size`` is lowered (extraArgs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .modelconfig import FULL, SLIDING, DrafterConfig, TargetConfig

KV_BYTES = 2  # kv_cache_dtype "auto" = the model dtype (16-bit); fp8 KV is an explicit engine flag
LINEAR_STATE_BYTES = 4  # linear-attention recurrent state is kept in float32
VLLM_GPU_MEMORY_UTILIZATION = 0.92  # vllm/config/cache.py CacheConfig.gpu_memory_utilization (0.33)
VLLM_ACTIVATION_RESERVE = 2 * 2**30  # per GPU: profiled activation peak + CUDA graphs (estimate)
SGLANG_FLOOR_MIB = 10 * 1024  # handle_gpu_memory_settings: reserved >= 10 GiB on a GPU over 60 GiB
# A drafter that takes more than this share of the KV capacity (tokens the pool holds without it) warns.
DRAFTER_CAPACITY_SHARE_WARN = 0.25
MAX_CONTEXT_SEARCH = 1 << 26  # the largest context the search reports (64 Mi tokens)
DSA = "deepseek_sparse_attention"


@dataclass(frozen=True)
class KvShape:
    """Bytes one sequence keeps in the KV pool, for the whole tensor-parallel group."""

    per_token: float = 0.0  # layers that keep every context token
    windowed: tuple[tuple[int, float], ...] = ()  # (window, bytes per token) of layers that keep the last window
    per_sequence: float = 0.0  # fixed state (linear attention, Mamba)

    def bytes_for(self, context: int) -> float:
        return (self.per_token * context + sum(b * min(w, context) for w, b in self.windowed)
                + self.per_sequence)

    def plus(self, other: "KvShape") -> "KvShape":
        return KvShape(self.per_token + other.per_token, self.windowed + other.windowed,
                       self.per_sequence + other.per_sequence)

    @property
    def empty(self) -> bool:
        return not (self.per_token or self.windowed or self.per_sequence)


def _num(d: dict, *keys: str) -> int | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _group_heads(kv: int, tp: int) -> int:
    """KV heads held by the whole group: split when they divide, replicated when the group is larger."""
    return -(-kv // tp) * tp if tp > 1 else kv


def target_kv(t: TargetConfig, tp: int = 1) -> KvShape | None:
    """The target's KV per sequence, or None when the config lacks the geometry to tell."""
    if not (t.num_hidden_layers and t.hidden_size):
        return None
    c: dict[str, Any] = t.text
    L = t.num_hidden_layers.value
    nh = t.num_attention_heads.value if t.num_attention_heads else max(1, t.hidden_size.value // 128)
    nkv = t.num_key_value_heads.value if t.num_key_value_heads else nh
    hd = t.head_dim.value if t.head_dim else t.hidden_size.value // nh
    window = _num(c, "sliding_window", "attention_window_size")
    mla = _num(c, "kv_lora_rank")
    attn = 2 * _group_heads(nkv, tp) * hd * KV_BYTES
    latent = ((mla + (_num(c, "qk_rope_head_dim") or 0)) * KV_BYTES * max(tp, 1)) if mla else 0
    # DeepSeek sparse attention's indexer keys: fp8 with a float32 scale per 128 elements, replicated
    # (vllm/model_executor/models/deepseek_v2.py Indexer: DeepseekV32IndexerCache)
    idx = _num(c, "index_head_dim") if (mla and (c.get("index_topk") or DSA in t.layer_types)) else None
    index = (idx + idx // 128 * 4) * max(tp, 1) if idx else 0
    lac = c.get("linear_attn_config") if isinstance(c.get("linear_attn_config"), dict) else {}
    full = 0.0
    slid: dict[int, float] = {}
    state = 0.0
    for i in range(L):
        kind = t.layer_types[i] if i < len(t.layer_types) else FULL
        if kind == "linear_attention":
            vh = _num(c, "linear_num_value_heads") or _num(lac, "num_heads") or nh
            kd = _num(c, "linear_key_head_dim") or _num(lac, "head_dim") or hd
            vd = _num(c, "linear_value_head_dim") or _num(lac, "head_dim") or hd
            state += vh * kd * vd * LINEAR_STATE_BYTES
        elif kind in ("conv", "mamba", "mamba2"):
            continue  # a few KiB of convolution state per sequence
        elif mla:
            full += latent + index
        elif kind == SLIDING and window:
            slid[window] = slid.get(window, 0.0) + attn
        else:
            full += attn
    return KvShape(full, tuple(sorted(slid.items())), state)


def drafter_kv(d: DrafterConfig, layer_types: tuple[str, ...], *, draft_window: int | None,
               native_window: int | None, tp: int = 1) -> KvShape | None:
    """The drafter's KV per sequence: every draft layer, capped by the rendered draft window (all layers) or the
    window the engine applies natively (sliding layers only)."""
    L = d.num_hidden_layers.value if d.num_hidden_layers else None
    kvh = d.num_key_value_heads or d.num_attention_heads
    hd = d.head_dim.value if d.head_dim else (
        d.hidden_size.value // d.num_attention_heads.value if d.hidden_size and d.num_attention_heads else None)
    if L is None or kvh is None or not hd:
        return None
    per_layer = 2 * _group_heads(kvh.value, tp) * hd * KV_BYTES
    if draft_window:
        return KvShape(0.0, ((draft_window, per_layer * L),), 0.0)
    sliding = sum(1 for x in layer_types[:L] if x == SLIDING) if native_window else 0
    windowed = ((native_window, per_layer * sliding),) if sliding and native_window else ()
    return KvShape(per_layer * (L - sliding), windowed, 0.0)


def _sglang_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max_bs) SGLang picks by GPU memory (handle_gpu_memory_settings)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def _prefill_capture_sizes(max_bs: int) -> int:
    """How many prefill CUDA graphs SGLang captures (cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return sum(1 for x in sizes if x <= max_bs)


def sglang_reserved_mib(gpu_mib: float, tp: int, *, chunked_prefill_size: int | None = None,
                        mla: bool = False) -> float:
    """MiB per GPU SGLang leaves out of mem_fraction_static (memory_hook.py handle_gpu_memory_settings, its
    default path: no post-capture KV sizing, pp 1, no DP attention or DeepEP): the activation slack of the
    chunked prefill, the tp slack and the CUDA graphs (reserve_for_graph_mb: decode max_bs x 2 MiB; prefill
    graphs 8 MiB each, 1.5 GiB with an MLA backend), at least SGLANG_FLOOR_MIB on a GPU over 60 GiB."""
    chunk, max_bs = _sglang_defaults(gpu_mib, tp)
    if chunked_prefill_size is not None and chunked_prefill_size > 0:
        chunk = chunked_prefill_size
    graphs = max_bs * 2 + (1.5 * 1024 if mla else 8 * _prefill_capture_sizes(chunk))
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + graphs
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, SGLANG_FLOOR_MIB)
    return reserved


def kv_pool_bytes(engine: str | None, gpu_memory_bytes: float, gpu_count: int, weight_bytes: float, *,
                  chunked_prefill_size: int | None = None, mla: bool = False) -> float:
    """KV pool over the whole group after the weights (negative: the weights alone do not fit)."""
    if engine == "sglang":
        gpu_mib = gpu_memory_bytes / 2**20
        reserved = sglang_reserved_mib(gpu_mib, gpu_count, chunked_prefill_size=chunked_prefill_size, mla=mla)
        per_gpu = round((gpu_mib - reserved) / gpu_mib, 3) * gpu_memory_bytes  # mem_fraction_static
    else:
        per_gpu = gpu_memory_bytes * VLLM_GPU_MEMORY_UTILIZATION - VLLM_ACTIVATION_RESERVE
    return per_gpu * gpu_count - weight_bytes


def largest_context(shape: KvShape, pool: float, concurrency: int, limit: int = MAX_CONTEXT_SEARCH) -> int:
    """The longest context (tokens, <= limit) of which ``concurrency`` sequences fit in the pool; 0 if none."""
    if pool <= 0 or concurrency < 1 or concurrency * shape.bytes_for(1) > pool:
        return 0
    lo, hi = 1, max(1, limit)
    if concurrency * shape.bytes_for(hi) <= pool:
        return hi
    while lo < hi:  # bytes_for is non-decreasing in the context
        mid = (lo + hi + 1) // 2
        if concurrency * shape.bytes_for(mid) <= pool:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class MemoryPlan:
    """The KV figures `specdeploy check` and the status report (all bytes for the whole group)."""

    engine: str
    gpu_count: int
    gpu_memory_bytes: float
    target_weight_bytes: float
    drafter_weight_bytes: float
    target: KvShape
    drafter: KvShape
    pool_bytes: float
    context: int  # the context the figures are taken at (the served context)
    concurrency: int

    def _per_token(self, shape: KvShape) -> float:
        return shape.bytes_for(self.context) / self.context if self.context else 0.0

    @property
    def capacity_tokens(self) -> int:
        """Context tokens the pool holds with sequences at the served context (target and drafter)."""
        per = self._per_token(self.target.plus(self.drafter))
        return int(self.pool_bytes // per) if per > 0 and self.pool_bytes > 0 else 0

    @property
    def capacity_tokens_without_drafter(self) -> int:
        per = self._per_token(self.target)
        pool = self.pool_bytes + self.drafter_weight_bytes
        return int(pool // per) if per > 0 and pool > 0 else 0

    @property
    def drafter_capacity_share(self) -> float:
        """Share of the no-drafter capacity the drafter takes (weights and KV)."""
        base = self.capacity_tokens_without_drafter
        return 1.0 - self.capacity_tokens / base if base else 0.0

    def largest_context(self, concurrency: int | None = None) -> int:
        """The longest context of which ``concurrency`` sequences fit in the pool, at most the served context
        (the model's own limit, or maxModelLen): a pool that would hold more serves no longer a context."""
        return largest_context(self.target.plus(self.drafter), self.pool_bytes, concurrency or self.concurrency,
                               limit=min(self.context, MAX_CONTEXT_SEARCH))

    def context_limited(self, concurrency: int | None = None) -> bool:
        """Whether the served context, not the pool, bounds ``largest_context``."""
        return self.largest_context(concurrency) >= self.context

    def to_dict(self) -> dict:
        def kib(shape: KvShape) -> float:
            return round(self._per_token(shape) / 1024, 1)
        return {
            "gpuCount": self.gpu_count,
            "kvPoolGiB": round(max(self.pool_bytes, 0) / 2**30, 1),
            "targetKvKiBPerToken": kib(self.target),
            "drafterKvKiBPerToken": kib(self.drafter),
            "drafterWeightGiB": round(self.drafter_weight_bytes / 2**30, 2),
            "capacityTokens": self.capacity_tokens,
            "capacityTokensWithoutDrafter": self.capacity_tokens_without_drafter,
            "drafterCapacityShare": round(self.drafter_capacity_share, 3),
            "atContext": self.context,
            "concurrency": self.concurrency,
            "largestContext": self.largest_context(),
        }


def plan(engine: str | None, gpu_memory_bytes: float, gpu_count: int, target_weight_bytes: float,
         drafter_weight_bytes: float, target: KvShape, drafter: KvShape | None, context: int,
         concurrency: int = 1, *, chunked_prefill_size: int | None = None, mla: bool = False) -> MemoryPlan | None:
    if not (gpu_memory_bytes > 0 and gpu_count >= 1 and 1 <= context <= MAX_CONTEXT_SEARCH
            and math.isfinite(target_weight_bytes) and math.isfinite(drafter_weight_bytes)):
        return None  # a context past 64 Mi tokens (a config's own claim) gets no figures, never an overflow
    pool = kv_pool_bytes(engine, gpu_memory_bytes, gpu_count, target_weight_bytes + drafter_weight_bytes,
                         chunked_prefill_size=chunked_prefill_size, mla=mla)
    return MemoryPlan(engine or "vllm", gpu_count, gpu_memory_bytes, target_weight_bytes, drafter_weight_bytes,
                      target, drafter or KvShape(), pool, context, max(1, concurrency))


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else (f"{n / 1e3:.0f}K" if n >= 10_000 else str(n))
