"""Windowed ("compact") draft cache reference: a DFlash drafter attention stack in pure PyTorch.

What it models (dflash-engines.md s1; z-lab/dflash ``dflash/model.py``):

- The drafter is conditioned on *fused context features*: hidden states of several target
  layers, concatenated and fused by ``fc`` + RMSNorm into one ``hidden_size`` vector per
  context token.
- **KV injection**: every drafter layer computes its own K/V for a context token from that
  fused feature (``k_proj``/``v_proj`` + per-head ``k_norm`` + RoPE at the token's absolute
  position). The draft cache holds these K/V for context positions ``< S``.
- One draft step runs the block ``[bonus, MASK x (B-1)]`` at absolute positions
  ``S..S+B-1`` through the layers once. Each block query attends to the cached context K/V
  and to the block's own K/V (computed from the block hidden states at that layer).
- Per-layer attention kinds (HF semantics): ``sliding_attention`` is causal with window
  ``w``: key ``k`` is visible to query ``q`` iff ``k <= q`` and ``q - k < w``.
  ``full_attention`` sees every context key and is bidirectional inside the block
  (causal when ``causal=True``).
- Masking is boolean (``-inf`` before the softmax), never a large negative bias, and rows
  with no visible key produce zero weights and a zero output instead of NaN.

Two caches with one interface:

- :class:`FullCache`: every context token, contiguous. Attention is "full cache + mask".
- :class:`CompactCache`: a ring buffer keeping the last ``r`` context tokens (slot of
  absolute position ``p`` is ``p % r``). RoPE was applied at injection with absolute
  positions, so compaction never re-rotates anything; the mask is computed from the
  absolute positions stored per slot. Exact for a sliding layer iff ``r >= w - 1``; an
  approximation for full-attention layers.

Both caches reserve ``B`` scratch slots after the context for the block's own K/V, so one
draft step reads one contiguous key range per layer and never concatenates (copies) the cache.

This module imports torch at import time: the CLI imports it only inside the commands that
need it (``specdeploy-runtime --help`` never loads torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch
import torch.nn.functional as F

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_KINDS = (SLIDING, FULL)

# mask_fn(query_pos [Q], key_pos [K], kind, window, causal) -> bool [Q, K]; True = visible.
MaskFn = Callable[["torch.Tensor", "torch.Tensor", str, int, bool], "torch.Tensor"]


@dataclass(frozen=True)
class DrafterGeometry:
    """Shape of the reference drafter. Defaults: a small Qwen3.6-style drafter (4 sliding +
    1 full layer, window 2048, block 16) sized for quick CPU runs."""

    hidden_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    layer_types: tuple[str, ...] = (SLIDING, SLIDING, SLIDING, SLIDING, FULL)
    sliding_window: int = 2048
    block_size: int = 16
    num_target_features: int = 3  # len(target_layer_ids): fc is Linear(n * H, H)
    intermediate_size: int = 0  # 0: attention-only stack (the MLP does not depend on the context)
    causal: bool = False  # full layers causal (dflash_config.causal)
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE rotates pairs)")
        bad = [t for t in self.layer_types if t not in LAYER_KINDS]
        if bad or not self.layer_types:
            raise ValueError(f"layer_types must be a non-empty list of {', '.join(LAYER_KINDS)}; found {bad or '[]'}")
        if self.sliding_window < 1 or self.block_size < 1:
            raise ValueError("sliding_window and block_size must be >= 1")

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    def kv_bytes_per_token(self, dtype: "torch.dtype" = torch.float32) -> int:
        """K and V bytes of one context token over all layers."""
        elem = torch.tensor([], dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem

    def with_(self, **kw) -> "DrafterGeometry":
        return replace(self, **kw)


def hf_visible(q_pos: torch.Tensor, k_pos: torch.Tensor, kind: str, window: int, causal: bool) -> torch.Tensor:
    """Which keys each query sees (HF semantics); keys with position < 0 are empty slots."""
    qp = q_pos[:, None]
    kp = k_pos[None, :]
    valid = kp >= 0
    if kind == SLIDING:
        return valid & (kp <= qp) & (qp - kp < window)
    if causal:
        return valid & (kp <= qp)
    return valid.expand(qp.shape[0], kp.shape[1])


# ----------------------------------------------------------------- building blocks


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension, computed in fp32 (as Qwen3RMSNorm)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype) * weight


class Rope:
    """Rotary embedding at absolute positions (rotate-half convention, as Qwen3/Llama)."""

    def __init__(self, head_dim: int, theta: float, device, dtype):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
        self.dtype = dtype

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ang = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [heads, n, d]; cos/sin: [n, d]."""
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin


def sdpa_bias(visible: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """The boolean mask [B, N] as the fused kernel's additive bias [groups * B, N]: 0 where
    visible, -inf elsewhere (never a large finite negative). Built once per step and kind."""
    bias = torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))
    return bias.repeat(groups, 1)  # rows ordered like the grouped queries (group-major)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float,
           *, need_weights: bool = False, impl: str = "eager", mask_bias: float | None = None):
    """Grouped-query attention of q [Hq, B, d] over k/v [Hkv, N, d] with a boolean mask [B, N].

    ``eager`` materialises the weights (returned as [Hq, B, N] when ``need_weights``):
    masked scores are ``-inf`` so their softmax weight is exactly 0.0; a row with no
    visible key gets zero weights and a zero output. ``sdpa`` calls the fused kernel with
    the same boolean mask (no weights). ``mask_bias`` replaces the boolean mask by a finite
    additive bias: a deliberately wrong implementation the verifier must catch.
    """
    hq, b, d = q.shape
    hkv, n, _ = k.shape
    g = hq // hkv
    qg = q.reshape(hkv, g * b, d)  # query heads h = j * g + i read kv head j (HF repeat_kv)
    if impl == "sdpa" and not need_weights and mask_bias is None:
        bias = visible if visible.dtype != torch.bool else sdpa_bias(visible, g, q.dtype)
        out = F.scaled_dot_product_attention(qg.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                             attn_mask=bias, scale=scale).squeeze(0)
        return out.reshape(hq, b, d), None
    if visible.dtype != torch.bool:
        raise ValueError("the eager path takes the boolean mask")
    scores = torch.matmul(qg, k.transpose(-1, -2)).mul_(scale).view(hkv, g, b, n)
    if mask_bias is None:
        scores = scores.masked_fill(~visible, float("-inf"))
    else:
        scores = scores + torch.where(visible, 0.0, mask_bias).to(scores.dtype)
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(scores - row_max)  # exp(-inf) == 0.0 exactly
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total > 0, total, torch.ones_like(total))
    out = torch.matmul(w.view(hkv, g * b, n), v).view(hq, b, d)
    return out, (w.view(hq, b, n) if need_weights else None)


# ----------------------------------------------------------------- caches


class _Cache:
    """K/V per layer in [Hkv, slots, d] buffers plus one absolute position per slot (-1: empty).
    The last ``block_size`` slots of the active range hold the current block's K/V."""

    def __init__(self, geom: DrafterGeometry, ctx_slots: int, device, dtype):
        self.geom = geom
        self.ctx_slots = ctx_slots
        self.device = torch.device(device)
        self.dtype = dtype
        slots = ctx_slots + geom.block_size
        shape = (geom.num_kv_heads, slots, geom.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(geom.num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(geom.num_layers)]
        self.pos = torch.full((slots,), -1, dtype=torch.long, device=device)
        self.length = 0  # context tokens seen (absolute position of the next one)

    # subclasses: where context tokens go, and which slot range one step reads
    def _ctx_slots_for(self, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _block_start(self) -> int:
        raise NotImplementedError

    def _active(self) -> int:
        """Slots one draft step reads: [0, active)."""
        raise NotImplementedError

    def kept_tokens(self) -> int:
        raise NotImplementedError

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """Store one layer's K/V [Hkv, n, d] for context tokens at ``positions`` (consecutive)."""
        keep = self._keep(positions.shape[0])
        if keep < positions.shape[0]:
            k, v, positions = k[:, -keep:], v[:, -keep:], positions[-keep:]
        slots = self._ctx_slots_for(positions)
        self.k[layer][:, slots] = k
        self.v[layer][:, slots] = v

    def commit(self, positions: torch.Tensor) -> None:
        """Record the positions of context tokens whose K/V every layer has appended."""
        if positions.numel() and int(positions[0]) != self.length:
            raise ValueError(f"context positions must continue at {self.length}, got {int(positions[0])}")
        keep = self._keep(positions.shape[0])
        kept = positions[-keep:] if keep else positions[:0]
        self.pos[self._ctx_slots_for(kept)] = kept
        self.length += positions.shape[0]

    def _keep(self, n: int) -> int:
        return n

    def begin_block(self, q_pos: torch.Tensor) -> None:
        s = self._block_start()
        self.pos[s:s + q_pos.shape[0]] = q_pos

    def write_block(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        s = self._block_start()
        self.k[layer][:, s:s + k.shape[1]] = k
        self.v[layer][:, s:s + v.shape[1]] = v

    def view(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        a = self._active()
        return self.k[layer][:, :a], self.v[layer][:, :a]

    def key_positions(self) -> torch.Tensor:
        return self.pos[: self._active()]

    def kv_bytes(self) -> int:
        """Bytes of context K/V held (all layers), excluding the block scratch slots."""
        return self.kept_tokens() * self.geom.kv_bytes_per_token(self.dtype)

    def read_bytes_per_step(self) -> int:
        """K/V bytes one draft step reads: kept context plus the block, every layer."""
        return (self.kept_tokens() + self.geom.block_size) * self.geom.kv_bytes_per_token(self.dtype)

    def fill_random(self, length: int, generator: torch.Generator | None = None) -> None:
        """Pretend ``length`` context tokens were injected (random K/V): for benchmarks only."""
        if self.length:
            raise ValueError("fill_random needs an empty cache")
        positions = torch.arange(length, device=self.device)
        keep = self._keep(length)
        kept = positions[length - keep:]
        g = self.geom
        for layer in range(g.num_layers):
            for buf in (self.k[layer], self.v[layer]):
                src = torch.randn((g.num_kv_heads, keep, g.head_dim), generator=generator, dtype=torch.float32)
                buf[:, self._ctx_slots_for(kept)] = src.to(device=self.device, dtype=self.dtype)
        self.commit(positions)


class FullCache(_Cache):
    """Every context token, in order: slots [0, S) context, [S, S+B) the block."""

    def __init__(self, geom: DrafterGeometry, capacity: int, device="cpu", dtype=torch.float32):
        super().__init__(geom, capacity, device, dtype)

    def _ctx_slots_for(self, positions: torch.Tensor) -> torch.Tensor:
        if positions.numel() and int(positions[-1]) >= self.ctx_slots:
            raise ValueError(f"full cache capacity {self.ctx_slots} exceeded")
        return positions

    def _block_start(self) -> int:
        return self.length

    def _active(self) -> int:
        return self.length + self.geom.block_size

    def kept_tokens(self) -> int:
        return self.length

    def begin_block(self, q_pos: torch.Tensor) -> None:
        # Slots past the context may hold an older block's positions: clear them first.
        self.pos[self.length:] = -1
        super().begin_block(q_pos)


class CompactCache(_Cache):
    """Ring buffer of the last ``keep`` context tokens (slot = position % keep), then the block."""

    def __init__(self, geom: DrafterGeometry, keep: int, device="cpu", dtype=torch.float32):
        if keep < 1:
            raise ValueError("a compact cache keeps at least one token")
        super().__init__(geom, keep, device, dtype)
        self.keep = keep

    def _keep(self, n: int) -> int:
        return min(n, self.keep)

    def _ctx_slots_for(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.remainder(positions, self.keep)

    def _block_start(self) -> int:
        return self.keep

    def _active(self) -> int:
        return self.keep + self.geom.block_size

    def kept_tokens(self) -> int:
        return min(self.length, self.keep)


# ----------------------------------------------------------------- the drafter


@dataclass
class LayerTrace:
    """What one layer did in one draft step (for verification)."""

    index: int
    kind: str
    input: torch.Tensor  # [B, H] hidden state entering the layer
    attn_out: torch.Tensor  # [B, H] o_proj output (before the residual add)
    output: torch.Tensor  # [B, H]
    query_pos: torch.Tensor  # [B]
    key_pos: torch.Tensor  # [N] absolute position per key slot (-1: empty)
    weights: Optional[torch.Tensor] = None  # [Hq, B, N]


@dataclass
class StepResult:
    hidden: torch.Tensor  # [B, H] after the final norm
    traces: list[LayerTrace] = field(default_factory=list)


class DFlashDrafter(torch.nn.Module):
    """The attention stack of a DFlash drafter with KV injection from fused context features."""

    def __init__(self, geom: DrafterGeometry, *, seed: int = 0, device="cpu", dtype=torch.float32,
                 mask_fn: MaskFn | None = None, mask_bias: float | None = None):
        super().__init__()
        self.geom = geom
        self.mask_fn: MaskFn = mask_fn or hf_visible
        self.mask_bias = mask_bias
        g = geom
        gen = torch.Generator().manual_seed(seed)

        def lin(out_f: int, in_f: int) -> torch.nn.Parameter:
            w = torch.randn((out_f, in_f), generator=gen) / math.sqrt(in_f)
            return torch.nn.Parameter(w, requires_grad=False)

        def norm(n: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(1.0 + 0.1 * torch.randn((n,), generator=gen), requires_grad=False)

        h, qd, kvd = g.hidden_size, g.num_heads * g.head_dim, g.num_kv_heads * g.head_dim
        self.fc = lin(h, g.num_target_features * h)
        self.hidden_norm = norm(h)
        self.layers = torch.nn.ModuleList()
        for _ in range(g.num_layers):
            m = torch.nn.Module()
            m.input_norm, m.post_norm = norm(h), norm(h)
            # q, k and v projections in one weight (rows: q | k | v): one GEMM per use
            m.qkv_proj, m.o_proj = lin(qd + 2 * kvd, h), lin(h, qd)
            m.q_norm, m.k_norm = norm(g.head_dim), norm(g.head_dim)
            if g.intermediate_size:
                m.gate, m.up, m.down = lin(g.intermediate_size, h), lin(g.intermediate_size, h), lin(h, g.intermediate_size)
            self.layers.append(m)
        self.final_norm = norm(h)
        self.to(device=device, dtype=dtype)
        self.rope = Rope(g.head_dim, g.rope_theta, device, dtype)
        self.scale = 1.0 / math.sqrt(g.head_dim)

    @property
    def device(self) -> torch.device:
        return self.fc.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.dtype

    def param_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.reshape(x.shape[0], heads, self.geom.head_dim).transpose(0, 1)  # [heads, n, d]

    # --- KV injection
    def fuse(self, target_features: torch.Tensor) -> torch.Tensor:
        """[n, num_target_features * H] target hidden states -> [n, H] fused context feature."""
        return rms_norm(F.linear(target_features, self.fc), self.hidden_norm, self.geom.rms_norm_eps)

    @torch.no_grad()
    def inject(self, caches, target_features: torch.Tensor, positions: torch.Tensor) -> None:
        """Compute every layer's context K/V from the fused features and append it to each cache."""
        if not isinstance(caches, (list, tuple)):
            caches = [caches]
        g = self.geom
        ctx = self.fuse(target_features)
        cos, sin = self.rope.cos_sin(positions)
        qd, kvd = g.num_heads * g.head_dim, g.num_kv_heads * g.head_dim
        for i, m in enumerate(self.layers):
            kv = F.linear(ctx, m.qkv_proj[qd:])  # the layer's own k_proj/v_proj on the context feature
            k = self._heads(kv[:, :kvd], g.num_kv_heads)
            k = Rope.apply(rms_norm(k, m.k_norm, g.rms_norm_eps), cos, sin)
            v = self._heads(kv[:, kvd:], g.num_kv_heads)
            for c in caches:
                c.append(i, k, v, positions)
        for c in caches:
            c.commit(positions)

    # --- one draft step
    def masks(self, cache: _Cache, q_pos: torch.Tensor) -> dict[str, torch.Tensor]:
        k_pos = cache.key_positions()
        return {kind: self.mask_fn(q_pos, k_pos, kind, self.geom.sliding_window, self.geom.causal)
                for kind in set(self.geom.layer_types)}

    @torch.no_grad()
    def layer_forward(self, i: int, h: torch.Tensor, cache: _Cache, q_pos: torch.Tensor, cos, sin,
                      masks: dict[str, torch.Tensor], *, need_weights: bool = False, impl: str = "eager"):
        g = self.geom
        m = self.layers[i]
        x = rms_norm(h, m.input_norm, g.rms_norm_eps)
        qd, kvd = g.num_heads * g.head_dim, g.num_kv_heads * g.head_dim
        qkv = F.linear(x, m.qkv_proj)
        q = Rope.apply(rms_norm(self._heads(qkv[:, :qd], g.num_heads), m.q_norm, g.rms_norm_eps), cos, sin)
        k = Rope.apply(rms_norm(self._heads(qkv[:, qd:qd + kvd], g.num_kv_heads), m.k_norm, g.rms_norm_eps), cos, sin)
        v = self._heads(qkv[:, qd + kvd:], g.num_kv_heads)
        cache.write_block(i, k, v)
        keys, values = cache.view(i)
        out, w = attend(q, keys, values, masks[g.layer_types[i]], self.scale, need_weights=need_weights,
                        impl=impl, mask_bias=self.mask_bias)
        attn_out = F.linear(out.transpose(0, 1).reshape(h.shape[0], -1), m.o_proj)
        y = h + attn_out
        if g.intermediate_size:
            z = rms_norm(y, m.post_norm, g.rms_norm_eps)
            y = y + F.linear(F.silu(F.linear(z, m.gate)) * F.linear(z, m.up), m.down)
        return y, attn_out, w

    @torch.no_grad()
    def draft_step(self, block_hidden: torch.Tensor, cache: _Cache, *, trace: bool = False,
                   need_weights: bool = False, impl: str = "eager") -> StepResult:
        """Run the block (embeddings of [bonus, MASK x (B-1)], [B, H]) at positions S..S+B-1,
        S = the cache's context length."""
        b = block_hidden.shape[0]
        if b != self.geom.block_size:
            raise ValueError(f"block has {b} rows, block_size is {self.geom.block_size}")
        q_pos = torch.arange(cache.length, cache.length + b, device=block_hidden.device)
        cache.begin_block(q_pos)
        cos, sin = self.rope.cos_sin(q_pos)
        masks = self.masks(cache, q_pos)
        if impl == "sdpa" and not need_weights and self.mask_bias is None:
            masks = {kind: sdpa_bias(m, self.geom.groups, self.dtype) for kind, m in masks.items()}
        h = block_hidden
        traces = []
        for i in range(self.geom.num_layers):
            y, attn_out, w = self.layer_forward(i, h, cache, q_pos, cos, sin, masks, need_weights=need_weights, impl=impl)
            if trace:
                traces.append(LayerTrace(i, self.geom.layer_types[i], h, attn_out, y, q_pos,
                                         cache.key_positions().clone(), w))
            h = y
        return StepResult(rms_norm(h, self.final_norm, self.geom.rms_norm_eps), traces)
