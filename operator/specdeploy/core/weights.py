"""Estimate a model's weight bytes from its config.json (no weights needed).

Good to a few percent for the architectures in this field (dense, MoE, MLA, hybrid
linear attention) and honest about quantisation: the quantisation config decides the
bytes per weight of each linear layer, evaluated against representative module names so
that ``ignore`` / ``modules_to_not_convert`` lists (attention kept in bf16, say) count.
Used for a fit check against GPU memory, not for allocation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .memo import by_identity
from .modelconfig import DrafterConfig, TargetConfig

# Bytes per weight as served: the engines load float32 checkpoints in 16-bit (vLLM and
# SGLang dtype "auto"), so float32 counts 2 bytes here on purpose.
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 2.0, "float": 2.0,
                "float8_e4m3fn": 1.0, "fp8": 1.0}
# config.json comes from the hub or a user: its `ignore` regexes are untrusted input.
MAX_IGNORE_PATTERNS = 256
MAX_PATTERN_LENGTH = 256
# A quantified group that itself contains a quantifier ("(a+)+", "(.*.*)*") can backtrack
# exponentially: such patterns are skipped (they count as not matching).
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[*+?}](?:[^()\\]|\\.)*\)\s*[*+?{]")


def _safe_regex(pattern: str) -> "re.Pattern[str] | None":
    if len(pattern) > MAX_PATTERN_LENGTH or _NESTED_QUANTIFIER.search(pattern):
        return None
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def _num(d: dict, *keys: str, default: float = 0) -> float:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
            return float(v)
    return float(default)


@dataclass(frozen=True)
class _Quant:
    bytes_per_weight: float
    ignore: tuple[str, ...]

    def bytes_for(self, module: str, dtype_bytes: float) -> float:
        for pat in self.ignore:
            if pat.startswith("re:"):
                rx = _safe_regex(pat[3:])
                if rx is not None and rx.match(module):
                    return dtype_bytes
            elif pat and pat in module:
                return dtype_bytes
        return self.bytes_per_weight


def _quant(q: dict | None) -> _Quant | None:
    if not q:
        return None
    method = str(q.get("quant_method") or q.get("quant_algo") or "").lower()
    ignore = q.get("ignore") or q.get("modules_to_not_convert") or q.get("exclude_modules") or []
    ignore = tuple(x for x in ignore[:MAX_IGNORE_PATTERNS] if isinstance(x, str)) if isinstance(ignore, list) else ()
    bits = None
    group = None
    groups = q.get("config_groups")
    if isinstance(groups, dict):
        for g in groups.values():
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and isinstance(w.get("num_bits"), int):
                bits = w["num_bits"]
                group = w.get("group_size") if isinstance(w.get("group_size"), int) else None
                break
    if bits is None:
        for k in ("bits", "w_bit", "num_bits", "weight_bits"):
            if isinstance(q.get(k), int) and not isinstance(q.get(k), bool):
                bits = q[k]
                break
        if isinstance(q.get("group_size"), int) and q["group_size"] > 0:
            group = q["group_size"]
    if bits is None:
        if "fp8" in method:
            bits = 8
        elif "mxfp4" in method:
            return _Quant(0.5 + 1.0 / 32, ignore)  # fp4 in 32-element blocks, one 8-bit scale each
        elif "nvfp4" in method or "fp4" in method:
            return _Quant(0.5 + 1.0 / 16, ignore)  # fp4 in 16-element blocks, one fp8 scale each
        elif q.get("load_in_4bit"):
            bits = 4
        elif q.get("load_in_8bit"):
            bits = 8
    if bits is None:
        return None
    b = bits / 8.0
    if group:
        b += 2.0 / group  # one 16-bit scale per group
    return _Quant(b, ignore)


def _linear_bytes(params: float, module: str, quant: _Quant | None, dtype_bytes: float) -> float:
    return params * (quant.bytes_for(module, dtype_bytes) if quant else dtype_bytes)


@by_identity(64, name="weights.target_bytes")  # a read-only TargetConfig (checker/parsed.py): the same estimate (core/memo.py)
def estimate_target_bytes(t: TargetConfig) -> float | None:
    """Weight bytes of the target, or None when the config lacks the geometry to tell."""
    if not (t.hidden_size and t.num_hidden_layers and t.vocab_size):
        return None
    c: dict[str, Any] = t.text
    H = t.hidden_size.value
    L = t.num_hidden_layers.value
    V = t.vocab_size.value
    dt = _DTYPE_BYTES.get((t.dtype or "bfloat16").lower(), 2.0)
    quant = _quant(t.quantization)
    nh = t.num_attention_heads.value if t.num_attention_heads else max(1, H // 128)
    nkv = t.num_key_value_heads.value if t.num_key_value_heads else nh
    hd = t.head_dim.value if t.head_dim else H // nh
    inter = t.intermediate_size.value if t.intermediate_size else 4 * H
    if c.get("block_auto_adjust_ff_dim"):  # LFM2: the SwiGLU width is derived from block_ff_dim
        inter = int(2 * _num(c, "block_ff_dim", default=inter) / 3)
        mult = _num(c, "block_ffn_dim_multiplier")
        if mult:
            inter = int(mult * inter)
        step = int(_num(c, "block_multiple_of", default=1)) or 1
        inter = step * -(-inter // step)
    # LongCat-Flash: each layer has two attention and two dense MLP blocks beside its MoE.
    twin = any("longcat" in a.lower() for a in t.architectures)

    total = V * H * dt  # embeddings
    if not t.tie_word_embeddings:
        total += _linear_bytes(V * H, "lm_head", quant, dt)

    experts = _num(c, "n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
    moe_inter = _num(c, "moe_intermediate_size", "expert_ffn_hidden_size", default=inter)
    shared = _num(c, "n_shared_experts")
    shared_inter = _num(c, "shared_expert_intermediate_size")
    first_dense = int(_num(c, "first_k_dense_replace"))
    freq = max(1, int(_num(c, "moe_layer_freq", "decoder_sparse_step", default=1)))
    mlp_only = {x for x in c.get("mlp_only_layers", []) if isinstance(x, int)} if isinstance(c.get("mlp_only_layers"), list) else set()
    mla_rank = _num(c, "kv_lora_rank")
    gate_mult = 2 if c.get("attn_output_gate") else 1

    for i in range(L):
        kind = t.layer_types[i] if i < len(t.layer_types) else "full_attention"
        prefix = f"model.layers.{i}"
        blocks = 2 if twin else 1
        if kind == "conv":  # LFM2 short-conv block: in_proj (3H) and out_proj (H)
            total += _linear_bytes(4 * H * H, f"{prefix}.conv.in_proj", quant, dt)
        elif kind == "linear_attention":
            kh, kd = _num(c, "linear_num_key_heads", default=nkv), _num(c, "linear_key_head_dim", default=hd)
            vh, vd = _num(c, "linear_num_value_heads", default=nh), _num(c, "linear_value_head_dim", default=hd)
            key_dim, val_dim = kh * kd, vh * vd
            p = H * (2 * key_dim + 2 * val_dim) + H * 2 * vh + val_dim * H
            total += _linear_bytes(p, f"{prefix}.linear_attn.in_proj_qkvz", quant, dt)
        elif mla_rank:
            q_rank = _num(c, "q_lora_rank")
            nope, rope, vdim = _num(c, "qk_nope_head_dim"), _num(c, "qk_rope_head_dim"), _num(c, "v_head_dim", default=hd)
            q = (H * q_rank + q_rank * nh * (nope + rope)) if q_rank else H * nh * (nope + rope)
            kv = H * (mla_rank + rope) + mla_rank * nh * (nope + vdim)
            p = q + kv + nh * vdim * H
            total += blocks * _linear_bytes(p, f"{prefix}.self_attn.kv_a_proj_with_mqa", quant, dt)
        else:
            p = H * nh * hd * gate_mult + 2 * H * nkv * hd + nh * hd * H
            total += blocks * _linear_bytes(p, f"{prefix}.self_attn.q_proj", quant, dt)
        is_moe = experts > 0 and i >= first_dense and i % freq == 0 and i not in mlp_only
        if twin:
            total += 2 * _linear_bytes(3 * H * inter, f"{prefix}.mlps.0.gate_proj", quant, dt)
        if is_moe:
            total += _linear_bytes(experts * 3 * H * moe_inter, f"{prefix}.mlp.experts.0.gate_proj", quant, dt)
            total += H * experts * dt  # router
            if shared:
                total += _linear_bytes(shared * 3 * H * moe_inter, f"{prefix}.mlp.shared_experts.gate_proj", quant, dt)
            if shared_inter:
                total += _linear_bytes(3 * H * shared_inter, f"{prefix}.mlp.shared_expert.gate_proj", quant, dt)
        elif not twin:
            total += _linear_bytes(3 * H * inter, f"{prefix}.mlp.gate_proj", quant, dt)
    return total


def estimate_drafter_bytes(d: DrafterConfig) -> float | None:
    """Drafter weight bytes: its layers plus the context-feature fusion (fc); no embeddings or head."""
    if not (d.hidden_size and d.num_hidden_layers):
        return None
    H = d.hidden_size.value
    L = d.num_hidden_layers.value
    nh = d.num_attention_heads.value if d.num_attention_heads else max(1, H // 128)
    nkv = d.num_key_value_heads.value if d.num_key_value_heads else nh
    hd = d.head_dim.value if d.head_dim else H // nh
    inter = d.intermediate_size.value if d.intermediate_size else 3 * H
    dt = _DTYPE_BYTES.get((d.dtype or "bfloat16").lower(), 2.0)
    n_ids = len(d.target_layer_ids.value) if d.target_layer_ids else L
    per_layer = H * nh * hd + 2 * H * nkv * hd + nh * hd * H + 3 * H * inter
    return (L * per_layer + n_ids * H * H) * dt
