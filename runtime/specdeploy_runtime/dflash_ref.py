"""Reference DFlash drafter (and the Qwen3 target it reads) in plain PyTorch, with the
parameter names and safetensors layout vLLM loads.

The forward pass is the one vLLM 0.32's ``vllm/model_executor/models/qwen3_dflash.py`` and the
z-lab reference (``dflash/model.py``) define:

- **Context features.** The target's hidden states at ``dflash_config.target_layer_ids`` are
  the *outputs* of those layers (Hugging Face ``hidden_states[id + 1]``; vLLM captures the
  input of layer ``id + 1``, ``eagle3_utils.py`` adds the +1), taken before the final norm,
  concatenated in id order: ``[n, len(ids) * H]``. ``fc`` (``Linear(len(ids) * H, H)``, no
  bias) then ``hidden_norm`` (RMSNorm) fuse them into one ``H`` vector per context token
  (vLLM: ``combine_hidden_states`` then ``_project_context_kv``).
- **KV injection.** Every drafter layer computes its own context K/V from the fused feature
  with its ``k_proj``/``v_proj``, ``k_norm`` on K, RoPE at the token's absolute position; the
  context is *not* passed through ``input_layernorm`` (vLLM ``precompute_and_store_context_kv``).
- **One draft step.** The block ``[bonus, MASK x (B-1)]`` is embedded with the *target's*
  embedding table at positions ``S..S+B-1`` and runs through the layers: ``input_layernorm``,
  q/k/v projections, per-head ``q_norm``/``k_norm``, RoPE (neox / rotate-half), attention over
  the context K/V and the block's own K/V, ``o_proj``, residual, ``post_attention_layernorm``,
  SiLU-gated MLP, residual; then ``norm`` and the *target's* ``lm_head``. Full-attention
  layers are non-causal (the block sees itself bidirectionally); sliding layers are causal
  with window ``w`` (key ``k`` visible to query ``q`` iff ``k <= q`` and ``q - k < w``), as
  ``_resolve_layer_attention`` resolves them. Positions ``1..B-1`` are the draft.

Weights (safetensors, names exactly as in the files vLLM reads):

- drafter: ``layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``layers.{i}.self_attn.{q,k}_norm.weight``,
  ``layers.{i}.mlp.{gate,up,down}_proj.weight``, ``layers.{i}.{input,post_attention}_layernorm.weight``,
  ``fc.weight``, ``hidden_norm.weight``, ``norm.weight`` (no ``embed_tokens``/``lm_head``:
  shared from the target);
- target (Hugging Face Qwen3): ``model.embed_tokens.weight``, ``model.layers.{i}....``,
  ``model.norm.weight``, ``lm_head.weight``.

Trainable (``requires_grad``), batched (``[N, T, ...]``). Imports torch at import time: the CLI
imports this module only inside the commands that need it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

SLIDING = "sliding_attention"
FULL = "full_attention"


@dataclass(frozen=True)
class Shape:
    """What the forward needs from a Qwen3 / DFlash config.json."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    causal: bool | None = None  # dflash_config.causal: overrides every layer

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Shape":
        h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        n = int(cfg["num_hidden_layers"])
        rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 1_000_000.0
        dc = cfg.get("dflash_config") or {}
        types = tuple(cfg.get("layer_types") or (FULL,) * n)
        return cls(hidden_size=h, num_layers=n, num_heads=heads,
                   num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or h // heads),
                   intermediate_size=int(cfg["intermediate_size"]), vocab_size=int(cfg["vocab_size"]),
                   rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(rope), layer_types=types,
                   sliding_window=dc.get("swa_window_size", cfg.get("sliding_window")),
                   causal=dc.get("causal"))

    def layer_causal(self, i: int) -> bool:
        """vLLM ``_dflash_layer_causal``: dflash_config.causal wins, else sliding layers are causal."""
        if self.causal is not None:
            return bool(self.causal)
        return self.layer_types[i] == SLIDING if self.layer_types else False


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm: computed in fp32, scaled by the weight in the input dtype."""
    dt = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dt)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin [..., head_dim] at absolute positions (neox / rotate-half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    ang = positions.float()[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, T, d]; cos/sin [N, T, d]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rot * sin[:, None]


def attention(q, k, v, visible: torch.Tensor, scale: float, need_weights: bool = False):
    """Grouped-query attention. q [N, Hq, Q, d], k/v [N, Hkv, K, d], visible bool [N, Q, K].
    Masked keys get -inf before the softmax (weight exactly 0.0). Returns (out [N, Hq, Q, d], weights)."""
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, None], scale=scale), None
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = s.masked_fill(~visible[:, None], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.matmul(w, v), w


class _Layer(nn.Module):
    """One Qwen3 decoder layer's parameters, named as in the checkpoints."""

    def __init__(self, s: Shape):
        super().__init__()
        h, qd, kvd = s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        self.self_attn = nn.Module()
        a = self.self_attn
        a.q_proj, a.k_proj, a.v_proj = nn.Linear(h, qd, bias=False), nn.Linear(h, kvd, bias=False), \
            nn.Linear(h, kvd, bias=False)
        a.o_proj = nn.Linear(qd, h, bias=False)
        a.q_norm, a.k_norm = _Norm(s.head_dim), _Norm(s.head_dim)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, s.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(h, s.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(s.intermediate_size, h, bias=False)
        self.input_layernorm, self.post_attention_layernorm = _Norm(h), _Norm(h)

    def mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mlp
        return m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))


class _Norm(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))


def _heads(x: torch.Tensor, n: int, d: int) -> torch.Tensor:
    return x.view(*x.shape[:-1], n, d).transpose(-2, -3)  # [N, T, n*d] -> [N, n, T, d]


def init_weights(module: nn.Module, std: float, generator: torch.Generator) -> None:
    """Deterministic init: every Linear/Embedding ~ N(0, std), norms 1."""
    for name, p in sorted(module.named_parameters()):
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * std)


class Qwen3Target(nn.Module):
    """A dense Qwen3ForCausalLM (Hugging Face names), causal, with the layer outputs the drafter reads."""

    def __init__(self, s: Shape):
        super().__init__()
        self.shape = s
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.model.layers = nn.ModuleList([_Layer(s) for _ in range(s.num_layers)])
        self.model.norm = _Norm(s.hidden_size)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor, past: list | None = None, start: int = 0):
        """ids [N, T] at positions start..start+T-1; ``past`` a list of (k, v) per layer (or None).
        Returns (logits [N, T, V], layer outputs [num_layers] x [N, T, H] before the final norm, new past)."""
        s = self.shape
        n, t = ids.shape
        x = self.model.embed_tokens(ids)
        pos = torch.arange(start, start + t, device=ids.device).expand(n, t)
        cos, sin = rope_cos_sin(pos, s.head_dim, s.rope_theta, x.dtype)
        outs, new_past = [], []
        total = start + t
        q_pos = pos[0][:, None]
        k_pos = torch.arange(total, device=ids.device)[None, :]
        visible = (k_pos <= q_pos).expand(n, t, total)
        for i, layer in enumerate(self.model.layers):
            a = layer.self_attn
            y = rms_norm(x, layer.input_layernorm.weight, s.rms_norm_eps)
            q = apply_rope(rms_norm(_heads(a.q_proj(y), s.num_heads, s.head_dim), a.q_norm.weight, s.rms_norm_eps), cos, sin)
            k = apply_rope(rms_norm(_heads(a.k_proj(y), s.num_kv_heads, s.head_dim), a.k_norm.weight, s.rms_norm_eps), cos, sin)
            v = _heads(a.v_proj(y), s.num_kv_heads, s.head_dim)
            if past is not None and past[i] is not None:
                k, v = torch.cat([past[i][0], k], dim=2), torch.cat([past[i][1], v], dim=2)
            new_past.append((k, v))
            o, _ = attention(q, k, v, visible, s.head_dim ** -0.5)
            x = x + a.o_proj(o.transpose(1, 2).reshape(n, t, -1))
            x = x + layer.mlp_forward(rms_norm(x, layer.post_attention_layernorm.weight, s.rms_norm_eps))
            outs.append(x)
        logits = self.lm_head(rms_norm(x, self.model.norm.weight, s.rms_norm_eps))
        return logits, outs, new_past

    def features(self, layer_outputs: list[torch.Tensor], target_layer_ids) -> torch.Tensor:
        """The drafter's context features: the outputs of ``target_layer_ids`` concatenated ([N, T, k*H])."""
        return torch.cat([layer_outputs[i] for i in target_layer_ids], dim=-1)

    @torch.no_grad()
    def greedy(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy continuation of prompt [N, P] by ``new_tokens`` tokens (KV cache): [N, P + new]."""
        logits, _, past = self.forward(prompt)
        out = [prompt]
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        pos = prompt.shape[1]
        for _ in range(new_tokens):
            out.append(nxt)
            if len(out) - 1 == new_tokens:
                break
            logits, _, past = self.forward(nxt, past, start=pos)
            pos += 1
            nxt = logits[:, -1].argmax(-1, keepdim=True)
        return torch.cat(out, dim=1)


class DFlashDrafterRef(nn.Module):
    """The DFlash drafter (vLLM ``DFlashQwen3ForCausalLM`` names, without the ``model.`` prefix)."""

    def __init__(self, s: Shape, num_target_features: int):
        super().__init__()
        self.shape = s
        self.layers = nn.ModuleList([_Layer(s) for _ in range(s.num_layers)])
        self.fc = nn.Linear(num_target_features * s.hidden_size, s.hidden_size, bias=False)
        self.hidden_norm = _Norm(s.hidden_size)
        self.norm = _Norm(s.hidden_size)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """[N, T, k*H] target layer outputs -> [N, T, H] (fc, then hidden_norm)."""
        return rms_norm(self.fc(features), self.hidden_norm.weight, self.shape.rms_norm_eps)

    def forward(self, block: torch.Tensor, q_pos: torch.Tensor, ctx: torch.Tensor, ctx_pos: torch.Tensor,
                ctx_visible: torch.Tensor | None = None, block_visible: torch.Tensor | None = None,
                need_weights: bool = False):
        """One (or several packed) draft block(s).

        block [N, Q, H]: embeddings of [bonus, MASK x (B-1)] (several blocks may be packed along Q);
        q_pos [N, Q] absolute positions; ctx [N, C, H] fused context features; ctx_pos [N, C]
        (negative: an empty slot). ``ctx_visible`` [N, Q, C] and ``block_visible`` [N, Q, Q] are
        extra restrictions ANDed with each layer's rule (packing several blocks: a block sees only
        its own context prefix and itself). Returns (hidden [N, Q, H] after ``norm``, per-layer
        attention weights [N, Hq, Q, C+Q] when ``need_weights``)."""
        s = self.shape
        n, qn, _ = block.shape
        qc, qs = rope_cos_sin(q_pos, s.head_dim, s.rope_theta, block.dtype)
        cc, cs = rope_cos_sin(ctx_pos.clamp(min=0), s.head_dim, s.rope_theta, block.dtype)
        key_pos = torch.cat([ctx_pos, q_pos], dim=1)
        weights = []
        h = block
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            vis = self.visible(i, q_pos, key_pos)
            extra = torch.cat([ctx_visible if ctx_visible is not None else torch.ones(n, qn, ctx.shape[1], dtype=torch.bool, device=block.device),
                               block_visible if block_visible is not None else torch.ones(n, qn, qn, dtype=torch.bool, device=block.device)], dim=2)
            vis = vis & extra
            kc = apply_rope(rms_norm(_heads(a.k_proj(ctx), s.num_kv_heads, s.head_dim), a.k_norm.weight, s.rms_norm_eps), cc, cs)
            vc = _heads(a.v_proj(ctx), s.num_kv_heads, s.head_dim)
            y = rms_norm(h, layer.input_layernorm.weight, s.rms_norm_eps)
            q = apply_rope(rms_norm(_heads(a.q_proj(y), s.num_heads, s.head_dim), a.q_norm.weight, s.rms_norm_eps), qc, qs)
            kb = apply_rope(rms_norm(_heads(a.k_proj(y), s.num_kv_heads, s.head_dim), a.k_norm.weight, s.rms_norm_eps), qc, qs)
            vb = _heads(a.v_proj(y), s.num_kv_heads, s.head_dim)
            o, w = attention(q, torch.cat([kc, kb], dim=2), torch.cat([vc, vb], dim=2), vis, s.head_dim ** -0.5,
                             need_weights=need_weights)
            if need_weights:
                weights.append(w)
            h = h + a.o_proj(o.transpose(1, 2).reshape(n, qn, -1))
            h = h + layer.mlp_forward(rms_norm(h, layer.post_attention_layernorm.weight, s.rms_norm_eps))
        return rms_norm(h, self.norm.weight, s.rms_norm_eps), weights

    def visible(self, i: int, q_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """Layer ``i``'s rule, [N, Q, K] (the engine's: sliding causal with window w, full non-causal
        unless dflash_config.causal). Keys with a negative position are empty slots."""
        s = self.shape
        qp, kp = q_pos[:, :, None], key_pos[:, None, :]
        vis = kp >= 0
        if self.shape.layer_causal(i):
            vis = vis & (kp <= qp)
        if s.layer_types and s.layer_types[i] == SLIDING:
            vis = vis & (qp - kp < int(s.sliding_window))
        return vis

    @torch.no_grad()
    def draft_logits(self, target: "Qwen3Target | None", features: torch.Tensor, bonus: int, mask_id: int,
                     block_size: int, embed: torch.Tensor | None = None, lm_head: torch.Tensor | None = None
                     ) -> torch.Tensor:
        """One engine draft step for one sequence: ``features`` [S, k*H] are the target layer outputs
        at positions 0..S-1, the bonus token sits at position S. Returns the logits of block
        positions 1..B-1 ([B-1, V]) through the target's lm_head."""
        emb = embed if embed is not None else target.model.embed_tokens.weight
        head = lm_head if lm_head is not None else target.lm_head.weight
        s_len = features.shape[0]
        ids = torch.tensor([bonus] + [mask_id] * (block_size - 1), device=features.device)
        block = F.embedding(ids, emb)[None].to(features.dtype)
        q_pos = torch.arange(s_len, s_len + block_size, device=features.device)[None]
        ctx = self.fuse(features[None])
        ctx_pos = torch.arange(s_len, device=features.device)[None]
        hidden, _ = self.forward(block, q_pos, ctx, ctx_pos)
        return F.linear(hidden[0, 1:], head.to(hidden.dtype))


# ----------------------------------------------------------------------------- files


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from .safetensors_io import decode_safetensors

    return {k: torch.from_numpy(v.copy()) for k, v in decode_safetensors(path.read_bytes()).items()}


def _load(module: nn.Module, tensors: Mapping[str, torch.Tensor], what: str) -> None:
    own = dict(module.named_parameters())
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own) - {"embed_tokens.weight", "lm_head.weight"})
    if missing or extra:
        raise ValueError(f"{what}: weights do not match the reference layout: missing {missing[:5]}, unexpected {extra[:5]}")
    with torch.no_grad():
        for name, p in own.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{what}: {name} has shape {tuple(t.shape)}, the config says {tuple(p.shape)}")
            p.copy_(t)


def load_target(directory: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Qwen3Target, dict]:
    d = Path(directory)
    cfg = json.loads((d / "config.json").read_text())
    m = Qwen3Target(Shape.from_config(cfg))
    _load(m, _read_safetensors(d / "model.safetensors"), str(d))
    return m.to(dtype).eval(), cfg


def load_drafter(directory: str | Path, dtype: torch.dtype = torch.float32, config_override: Mapping | None = None
                 ) -> tuple[DFlashDrafterRef, dict]:
    d = Path(directory)
    cfg = json.loads((d / "config.json").read_text())
    if config_override:
        cfg = {**cfg, **config_override}
    ids = cfg["dflash_config"]["target_layer_ids"]
    m = DFlashDrafterRef(Shape.from_config(cfg), len(ids))
    _load(m, _read_safetensors(d / "model.safetensors"), str(d))
    return m.to(dtype).eval(), cfg


def state_arrays(module: nn.Module) -> dict[str, Any]:
    """Parameters as float32 numpy arrays keyed by checkpoint name (for ``encode_safetensors``)."""
    return {k: v.detach().float().cpu().numpy() for k, v in module.state_dict().items()}

