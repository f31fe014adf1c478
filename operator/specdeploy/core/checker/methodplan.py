"""What the renderer needs for the methods outside the DFlash path (pure): draft tokens per step, steps,
top-k and the n-gram window, from the spec's typed knobs, the target's config and specdeploy's defaults
(core/methods.py). The knob rules that depend on the engine (a knob the release has no flag for is refused
rather than silently dropped) are object-level and live in ``options`` (``check_method_settings``)."""

from __future__ import annotations

from typing import Any

from .. import methods
from ..modelconfig import TargetConfig
from .options import Options
from .results import S, Derived, Out

# Target config fields that count MTP layers (vLLM config/speculative.py SpeculativeConfig.hf_config_override:
# num_nextn_predict_layers for DeepSeek/GLM/Qwen3-Next/MiMo, mtp_num_hidden_layers for Qwen3.5).
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def target_mtp_layers(target_doc: Any) -> int | None:
    """The target's MTP layer count (top level first, then text_config), or None when it declares none."""
    if not isinstance(target_doc, dict):
        return None
    for scope in (target_doc, target_doc.get("text_config")):
        if not isinstance(scope, dict):
            continue
        for key in MTP_LAYER_FIELDS:
            v = scope.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def _block_from_doc(drafter_doc: Any) -> int | None:
    """A DSpark drafter's gamma (draft tokens per step): dspark_block_size, else block_size (top level or
    dflash_config/dspark_config), as SGLang dspark_components/dspark_config.py parse_dspark_draft_config reads it."""
    if not isinstance(drafter_doc, dict):
        return None
    scopes = [drafter_doc] + [drafter_doc.get(k) for k in ("dspark_config", "dflash_config")]
    for key in ("dspark_block_size", "block_size"):
        for scope in scopes:
            v = scope.get(key) if isinstance(scope, dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
                return v
    return None


def derive_method(target_doc: Any, drafter_doc: Any, t: TargetConfig | None, o: Options, info, row, out: Out) -> Derived:
    """The Derived of a method outside the DFlash path. ``block_size`` keeps its meaning (tokens verified
    per step, bonus included) so status and the acceptance bound read the same for every method."""
    m = o.method
    steps = topk = None
    if m in methods.EAGLE_METHODS or m in methods.MTP_METHODS:
        default_steps = methods.DEFAULT_STEPS
        if m in methods.MTP_METHODS:
            layers = target_mtp_layers(target_doc)
            if not layers:
                out.warn("MtpLayersUnknown", S, "spec.speculation.mtp.steps",
                         "the target config declares no MTP layer count (num_nextn_predict_layers, "
                         "mtp_num_hidden_layers): steps default to 1; check that the target has MTP layers")
            default_steps = layers if layers else 1
        steps = o.steps if o.steps is not None else default_steps
        topk = o.topk if o.topk is not None else methods.DEFAULT_TOPK
        tokens = o.draft_tokens if o.draft_tokens is not None else steps + 1
        k = steps
    elif m in methods.NGRAM_METHODS:
        k = o.ngram_tokens if o.ngram_tokens is not None else methods.DEFAULT_NGRAM_TOKENS
        tokens = k + 1
    elif m == "suffix":
        k = methods.DEFAULT_SUFFIX_TOKENS
        tokens = k + 1
    else:  # dspark: gamma draft tokens per step, gamma + 1 verified (SGLang _handle_dspark)
        gamma = (o.block_size - 1) if o.block_size is not None else _block_from_doc(drafter_doc)
        if gamma is None:
            gamma = 7  # SGLang's default gamma (dspark_config.py)
        k, tokens = gamma, gamma + 1
    return Derived(
        block_size=tokens, num_speculative_tokens=k, draft_window=None, drafter_window=None, layer_types=(),
        has_sliding=False, mixed_layers=False, target_layer_ids=(), draft_attention_backend=o.draft_attention_backend,
        max_model_len=o.max_model_len, served_context=o.max_model_len, steps=steps, topk=topk,
        ngram_min=o.ngram_min, ngram_max=o.ngram_max,
    )
