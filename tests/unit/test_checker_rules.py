"""The drafter/target rules (dflash-engines.md s2-3), table-driven on real released pairs.

Every case mutates a real pair (tests/fixtures/models) and asserts the exact finding code,
severity, source and path. Clean pairs must stay clean: a finding that should not be there
fails as surely as one that is missing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from testkit import DELETE, PAIRS, pair, set_path
from specdeploy.core import engines as eng
from specdeploy.core.checker import Options, analyze
from specdeploy.core.modelconfig import FULL, SLIDING

SGLANG = dict(engine="sglang", engine_version="0.5.23")
VLLM = dict(engine="vllm", engine_version="0.33.0")
DEL = DELETE  # marker: delete the key


def edit(doc: Any, changes: dict[tuple, Any]) -> Any:
    """Apply {path tuple: value or DEL} to a JSON document in place; returns it."""
    for path, value in changes.items():
        set_path(doc, path, value)
    return doc


def triples(findings, with_source: bool = True) -> set[tuple]:
    if with_source:
        return {(f.severity.value, f.code, f.source.value, f.path) for f in findings}
    return {(f.severity.value, f.code, f.path) for f in findings}


def errors(findings) -> list:
    return [f for f in findings if f.severity.value == "error"]


# ----------------------------------------------------------------- building blocks


def top_level_only(d: dict) -> dict:
    """DFlash fields moved from dflash_config to the top level."""
    dc = d.pop("dflash_config")
    d.update(dc)
    return d


def use_swa_drafter(d: dict, window: int | None = 2048) -> dict:
    """layer_types/sliding_window replaced by dflash_config.use_swa + swa_window_size."""
    d.pop("layer_types")
    d.pop("sliding_window")
    d["use_sliding_window"] = False  # MiMo-style: the window lives in dflash_config only
    d["dflash_config"]["use_swa"] = True
    if window is not None:
        d["dflash_config"]["swa_window_size"] = window
    return d


_GEOMETRY = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "intermediate_size", "hidden_act", "layer_types", "sliding_window", "rms_norm_eps",
             "max_position_embeddings", "rope_theta", "vocab_size", "attention_bias")


def speculators_drafter(d: dict, with_architectures: bool = True) -> dict:
    """The same drafter in the speculators layout (vLLM `update_dflash`)."""
    tl = {k: d[k] for k in _GEOMETRY if k in d}
    tl["architectures"] = ["Qwen3ForCausalLM"]
    tl["model_type"] = "qwen3"
    out: dict[str, Any] = {
        "speculators_model_type": "dflash",
        "speculators_version": "0.3.0",
        "aux_hidden_state_layer_ids": [i + 1 for i in d["dflash_config"]["target_layer_ids"]],
        "block_size": d["block_size"],
        "mask_token_id": d["dflash_config"]["mask_token_id"],
        "draft_vocab_size": d["vocab_size"],
        "target_hidden_size": d["hidden_size"],
        "transformer_layer_config": tl,
        "dtype": "bfloat16",
    }
    if with_architectures:
        out["architectures"] = ["DFlashSpeculator"]
    return out


def wrap_target(t: dict, chain: tuple[str, ...]) -> dict:
    inner = t
    for key in reversed(chain):
        inner = {key: inner}
    # a wrapper class both engines register and that hands hidden states over (DFlashTargetCaptureUnsupported)
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "wrapper", **inner}


# ----------------------------------------------------------------- clean pairs


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("opts", [
    {},
    {"engine": "sglang"},
    {"engine": "vllm"},
    SGLANG,
    VLLM,
], ids=["no-engine", "sglang-no-release", "vllm-no-release", "sglang-0.5.23", "vllm-0.33.0"])
def test_real_pairs_have_no_errors(name, opts):
    d, t = pair(name)
    a = analyze(d, t, Options(**opts))
    assert a.ok, [f.one_line() for f in errors(a.findings)]
    assert a.derived is not None
    assert a.drafter is not None and a.drafter.is_dflash


@pytest.mark.parametrize("name, block, ids, window, types", [
    ("qwen3.6-27b", 16, (1, 16, 31, 46, 61), 2048, (SLIDING,) * 4 + (FULL,)),
    ("qwen3-8b", 16, (1, 9, 17, 25, 33), None, (FULL,) * 5),
    ("kimi-k2.6", 8, (1, 12, 24, 35, 47, 58), None, (FULL,) * 6),
])
def test_real_pairs_derive_their_trained_settings(name, block, ids, window, types):
    d, t = pair(name)
    der = analyze(d, t, Options(**SGLANG)).derived
    assert der.block_size == block
    assert der.num_speculative_tokens == block - 1
    assert der.target_layer_ids == ids
    assert der.drafter_window == window
    # SGLang >= 0.5.14 windows sliding layers itself: no compact-cache flag, the window is applied natively
    assert der.draft_window is None
    assert der.native_window == window
    assert der.layer_types == types
    # a release without native windows gets the compact cache at the trained window
    old = analyze(d, t, Options(engine="sglang", engine_version="0.5.13")).derived
    assert old.draft_window == window and old.native_window is None


def test_real_pairs_clean_without_engine_have_no_findings_at_all():
    for name in ("qwen3.6-27b", "qwen3-8b", "kimi-k2.6"):
        d, t = pair(name)
        assert analyze(d, t, Options()).findings == [], name


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("where", ["drafter-top", "drafter-dflash_config", "target-top", "target-nested", "both"])
def test_unknown_extra_fields_never_cause_errors(name, where):
    d, t = pair(name)
    base = triples(analyze(d, t, Options(**SGLANG)).findings)
    junk = {"zz_unknown": {"nested": [1, "x", None, {"deep": True}]}, "another_field_": "value",
            "target_layer_ids_v2": "not-read", "sliding_window_size": None}
    if where in ("drafter-top", "both"):
        d.update(junk)
    if where == "drafter-dflash_config":
        d["dflash_config"].update(junk)
    if where in ("target-top", "both"):
        t.update(junk)
    if where == "target-nested":
        (t.get("text_config") or t).update(junk)
    a = analyze(d, t, Options(**SGLANG))
    assert a.ok
    assert triples(a.findings) == base


# ----------------------------------------------------------------- the mutation table


@dataclass
class Case:
    id: str
    pair: str
    drafter: dict | Callable | None = None  # {path: value|DEL} or a function (d) -> d
    target: dict | Callable | None = None
    opts: dict = field(default_factory=dict)
    expect: tuple = ()  # (severity, code, source, path) that must be present
    ok: bool | None = None  # expected Analysis.ok (None: errors iff an expected error)
    absent: tuple = ()  # codes that must not appear


def _apply(doc, change):
    if change is None:
        return doc
    if callable(change):
        return change(doc)
    return edit(doc, change)


E, W, I = "error", "warning", "info"
DC_IDS = ("dflash_config", "target_layer_ids")

CASES = [
    # ---- the definition of done
    Case("drop-target-layer-ids", "qwen3.6-27b", {DC_IDS: DEL},
         expect=((E, "TargetLayerIdsMissing", "drafter", "$.dflash_config.target_layer_ids"),)),
    Case("drop-target-layer-ids-8b", "qwen3-8b", {DC_IDS: DEL},
         expect=((E, "TargetLayerIdsMissing", "drafter", "$.dflash_config.target_layer_ids"),)),
    Case("empty-target-layer-ids", "qwen3-8b", {DC_IDS: []},
         expect=((E, "TargetLayerIdsEmpty", "drafter", "$.dflash_config.target_layer_ids"),)),
    Case("layer-id-equals-layer-count", "qwen3.6-27b", {DC_IDS + (4,): 64},
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[4]"),)),
    Case("layer-id-above-layer-count", "qwen3-8b", {DC_IDS + (2,): 99},
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[2]"),)),
    Case("layer-id-negative", "kimi-k2.6", {DC_IDS + (0,): -1},
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[0]"),)),
    Case("layer-id-kimi-61", "kimi-k2.6", {DC_IDS + (5,): 61},
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[5]"),)),
    Case("hidden-size-changed", "qwen3.6-27b", {("hidden_size",): 4096},
         expect=((E, "HiddenSizeMismatch", "drafter", "$.hidden_size"),)),
    Case("hidden-size-changed-kimi", "kimi-k2.6", {("hidden_size",): 5120},
         expect=((E, "HiddenSizeMismatch", "drafter", "$.hidden_size"),)),
    Case("target-hidden-size-changed", "qwen3-8b", None, {("hidden_size",): 5120},
         expect=((E, "HiddenSizeMismatch", "drafter", "$.hidden_size"),)),
    Case("mask-token-equals-vocab", "qwen3.6-27b", {("dflash_config", "mask_token_id"): 248320},
         expect=((E, "MaskTokenOutOfRange", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("mask-token-above-vocab-kimi", "kimi-k2.6", {("dflash_config", "mask_token_id"): 200000},
         expect=((E, "MaskTokenOutOfRange", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("mask-token-negative", "qwen3-8b", {("dflash_config", "mask_token_id"): -5},
         expect=((E, "MaskTokenOutOfRange", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("mask-token-missing", "qwen3-8b", {("dflash_config", "mask_token_id"): DEL},
         expect=((E, "MaskTokenMissing", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("layer-types-short", "qwen3.6-27b", {("layer_types",): [SLIDING] * 4},
         expect=((E, "LayerTypesLengthMismatch", "drafter", "$.layer_types"),)),
    Case("layer-types-long", "qwen3-8b", {("layer_types",): [FULL] * 6},
         expect=((E, "LayerTypesLengthMismatch", "drafter", "$.layer_types"),)),
    Case("layer-types-num-layers-changed", "qwen3.6-27b", {("num_hidden_layers",): 6},
         expect=((E, "LayerTypesLengthMismatch", "drafter", "$.layer_types"),)),
    Case("layer-type-unknown", "qwen3.6-27b", {("layer_types", 2): "linear_attention"},
         expect=((E, "LayerTypeUnknown", "drafter", "$.layer_types[2]"),)),
    Case("sliding-layer-no-window-null", "qwen3.6-27b", {("sliding_window",): None},
         expect=((E, "SlidingWindowMissing", "drafter", "$.sliding_window"),)),
    # Qwen3Config fills a missing sliding_window with its default 4096 when use_sliding_window is true
    Case("sliding-layer-no-window-deleted", "qwen3.6-27b", {("sliding_window",): DEL}, opts=SGLANG,
         expect=((W, "SlidingWindowDefaulted", "drafter", "$.sliding_window"),), ok=True),
    Case("sliding-layer-window-null", "qwen3.6-27b", {("sliding_window",): None},
         expect=((E, "SlidingWindowMissing", "drafter", "$.sliding_window"),)),
    # transformers' Qwen3Config drops sliding_window when use_sliding_window is false: both engines raise
    Case("use-sliding-window-false-with-sliding-layers", "qwen3.6-27b", {("use_sliding_window",): False},
         expect=((E, "SlidingWindowDisabled", "drafter", "$.use_sliding_window"),)),
    Case("use-sliding-window-absent-with-sliding-layers", "qwen3.6-27b", {("use_sliding_window",): DEL}, opts=SGLANG,
         expect=((E, "SlidingWindowDisabled", "drafter", "$.use_sliding_window"),)),
    Case("sliding-layer-window-zero", "qwen3.6-27b", {("sliding_window",): 0},
         expect=((E, "SlidingWindowMissing", "drafter", "$.sliding_window"),)),
    Case("sliding-layer-added-to-8b", "qwen3-8b", {("layer_types", 0): SLIDING},
         expect=((E, "SlidingWindowMissing", "drafter", "$.sliding_window"),)),
    Case("drafter-window-below-block", "qwen3.6-27b", {("sliding_window",): 8},
         expect=((E, "DraftWindowBelowBlockSize", "drafter", "$.sliding_window"),)),
    Case("drafter-window-equals-block", "qwen3.6-27b", {("sliding_window",): 16}, ok=True,
         absent=("DraftWindowBelowBlockSize",)),
    Case("option-window-below-block", "qwen3.6-27b", opts={"draft_window": 8},
         expect=((E, "DraftWindowBelowBlockSize", "spec", "spec.speculation.draftWindow"),)),
    Case("option-window-below-block-sglang", "qwen3.6-27b", opts={**SGLANG, "draft_window": 8},
         expect=((E, "DraftWindowBelowBlockSize", "spec", "spec.speculation.draftWindow"),)),
    Case("option-window-below-option-block", "qwen3-8b", opts={"draft_window": 4, "block_size": 8},
         expect=((E, "DraftWindowBelowBlockSize", "spec", "spec.speculation.draftWindow"),)),

    # ---- drafter shapes
    Case("dflash-fields-top-level-only", "qwen3.6-27b", top_level_only, ok=True),
    Case("dflash-fields-top-level-only-kimi", "kimi-k2.6", top_level_only, ok=True),
    Case("top-level-only-ids-missing", "qwen3-8b", lambda d: edit(top_level_only(d), {("target_layer_ids",): DEL}),
         expect=((E, "TargetLayerIdsMissing", "drafter", "$.dflash_config.target_layer_ids"),)),
    Case("top-level-only-id-out-of-range", "qwen3-8b", lambda d: edit(top_level_only(d), {("target_layer_ids", 1): 36}),
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.target_layer_ids[1]"),)),
    Case("dflash_config-block-overrides-top", "qwen3.6-27b", {("dflash_config", "block_size"): 8},
         expect=((W, "BlockSizeConflict", "drafter", "$.block_size"),), ok=True),
    Case("dflash_config-ids-override-top", "qwen3-8b", {("target_layer_ids",): [0, 1, 2, 3, 99]}, ok=True,
         absent=("TargetLayerOutOfRange",)),
    Case("dflash_config-mask-overrides-top", "kimi-k2.6", {("mask_token_id",): 999999}, ok=True,
         absent=("MaskTokenOutOfRange",)),
    Case("dflash_config-bad-mask-wins-over-good-top", "kimi-k2.6", {("dflash_config", "mask_token_id"): 999999},
         expect=((E, "MaskTokenOutOfRange", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("use-swa", "qwen3.6-27b", use_swa_drafter, ok=True),
    Case("use-swa-vllm", "qwen3.6-27b", use_swa_drafter, opts=VLLM, ok=True),
    # SGLang 0.5.23 reads layer_types + sliding_window only: a use_swa-only drafter would run full attention.
    Case("use-swa-sglang", "qwen3.6-27b", use_swa_drafter, opts=SGLANG,
         expect=((E, "SlidingLayersIgnoredByEngine", "drafter", "$.dflash_config.use_swa"),)),
    Case("use-swa-no-window", "qwen3.6-27b", lambda d: use_swa_drafter(d, None),
         expect=((E, "SlidingWindowMissing", "drafter", "$.dflash_config.swa_window_size"),)),
    Case("use-swa-window-below-block", "qwen3.6-27b", lambda d: use_swa_drafter(d, 8),
         expect=((E, "DraftWindowBelowBlockSize", "drafter", "$.dflash_config.swa_window_size"),)),
    Case("use-swa-but-layer-types-all-full", "qwen3-8b",
         {("dflash_config", "use_swa"): True, ("dflash_config", "swa_window_size"): 2048},
         expect=((W, "SlidingConfigConflict", "drafter", "$.dflash_config.use_swa"),), ok=True),
    # no layer_types: Qwen3Config builds them (sliding where i >= max_window_layers, 5 here: none)
    Case("qwen3-use-sliding-window-without-layer-types", "qwen3-8b",
         {("layer_types",): DEL, ("use_sliding_window",): True, ("sliding_window",): 4096}, ok=True,
         absent=("LayerTypesDerived", "SlidingWindowMissing")),
    Case("qwen3-use-sliding-window-max-window-layers-0", "qwen3-8b",
         {("layer_types",): DEL, ("use_sliding_window",): True, ("sliding_window",): 4096, ("max_window_layers",): 0},
         opts=SGLANG, expect=((I, "LayerTypesDerived", "drafter", "$.layer_types"),
                              (I, "DraftWindowNative", "drafter", "$.sliding_window")), ok=True),
    Case("speculators", "qwen3.6-27b", speculators_drafter, ok=True),
    Case("speculators-no-architectures", "qwen3.6-27b", lambda d: speculators_drafter(d, False), ok=True,
         absent=("NotADFlashDrafter",)),
    Case("speculators-aux-id-zero", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("aux_hidden_state_layer_ids", 0): 0}),
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.aux_hidden_state_layer_ids[0]"),)),
    Case("speculators-aux-id-L-plus-1", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("aux_hidden_state_layer_ids", 4): 65}),
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.aux_hidden_state_layer_ids[4]"),)),
    Case("speculators-aux-id-L-is-last-layer", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("aux_hidden_state_layer_ids", 4): 64}),
         expect=((W, "TargetLayerIsLast", "drafter", "$.aux_hidden_state_layer_ids[4]"),), ok=True),
    Case("speculators-target-hidden-size", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("target_hidden_size",): 4096}),
         expect=((E, "HiddenSizeMismatch", "drafter", "$.target_hidden_size"),)),
    Case("speculators-geometry-layer-types", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("transformer_layer_config", "layer_types"): [SLIDING] * 3}),
         expect=((E, "LayerTypesLengthMismatch", "drafter", "$.transformer_layer_config.layer_types"),)),
    Case("speculators-window-missing", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("transformer_layer_config", "sliding_window"): DEL}),
         expect=((E, "SlidingWindowMissing", "drafter", "$.transformer_layer_config.sliding_window"),)),
    # draft_vocab_size is the reduced draft head (by design); the embedding vocab is compared.
    Case("speculators-reduced-draft-vocab", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("draft_vocab_size",): 32000}), ok=True,
         absent=("VocabSizeDiffers",)),
    Case("speculators-embedding-vocab-differs", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("transformer_layer_config", "vocab_size"): 151936}),
         expect=((W, "VocabSizeDiffers", "drafter", "$.transformer_layer_config.vocab_size"),), ok=True),
    Case("speculators-only-draft-vocab", "qwen3.6-27b",
         lambda d: edit(speculators_drafter(d), {("transformer_layer_config", "vocab_size"): DEL,
                                                 ("draft_vocab_size",): 151936}),
         expect=((W, "VocabSizeDiffers", "drafter", "$.draft_vocab_size"),), ok=True),
    Case("dflash2-architecture", "qwen3.6-27b",
         {("architectures",): ["DFlash2DraftModel"], ("conv_kernel_size",): 4, ("conv_group_size",): 2,
          ("selector_rank",): 64, ("selector_top_k",): 4}, opts={"method": "dflash2"}, ok=True),
    Case("dflash2-architecture-under-dflash", "qwen3.6-27b",
         {("architectures",): ["DFlash2DraftModel"], ("conv_kernel_size",): 4, ("conv_group_size",): 2,
          ("selector_rank",): 64, ("selector_top_k",): 4},
         expect=((E, "MethodFamilyMismatch", "spec", "spec.speculation.method"),)),
    Case("vendor-alias-architecture", "kimi-k2.6", {("architectures",): ["KimiK2DFlashDraftModel"]}, ok=True),
    Case("vendor-alias-top-level-fields", "qwen3-8b",
         lambda d: edit(top_level_only(d), {("architectures",): ["Qwen3DFlashForCausalLM"]}), ok=True,
         absent=("NotADFlashDrafter",)),
    Case("not-a-drafter", "qwen3-8b",
         lambda d: edit(d, {("architectures",): ["Qwen3ForCausalLM"], ("dflash_config",): DEL}),
         expect=((E, "NotADFlashDrafter", "drafter", "$.architectures"),
                 (E, "TargetLayerIdsMissing", "drafter", "$.dflash_config.target_layer_ids"))),
    Case("not-a-drafter-target-as-drafter", "qwen3-8b", lambda d: pair("qwen3-8b")[1],
         expect=((E, "NotADFlashDrafter", "drafter", "$.architectures"),)),

    # ---- targets
    Case("target-layer-is-last", "qwen3-8b", {DC_IDS + (4,): 35},
         expect=((W, "TargetLayerIsLast", "drafter", "$.dflash_config.target_layer_ids[4]"),), ok=True),
    Case("target-layer-is-last-qwen36", "qwen3.6-27b", {DC_IDS + (4,): 63},
         expect=((W, "TargetLayerIsLast", "drafter", "$.dflash_config.target_layer_ids[4]"),), ok=True),
    Case("target-layer-duplicate", "qwen3-8b", {DC_IDS + (1,): 1},
         expect=((W, "TargetLayerIdDuplicate", "drafter", "$.dflash_config.target_layer_ids[1]"),), ok=True),
    Case("num-target-layers-mismatch", "qwen3-8b", {("num_target_layers",): 48},
         expect=((E, "NumTargetLayersMismatch", "drafter", "$.num_target_layers"),)),
    Case("num-target-layers-mismatch-in-dflash_config", "kimi-k2.6", {("dflash_config", "num_target_layers"): 60},
         expect=((E, "NumTargetLayersMismatch", "drafter", "$.dflash_config.num_target_layers"),)),
    Case("target-fewer-layers", "qwen3-8b", None, {("num_hidden_layers",): 28},
         expect=((E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[4]"),
                 (E, "NumTargetLayersMismatch", "drafter", "$.num_target_layers"))),
    Case("vocab-differs", "qwen3-8b", {("vocab_size",): 151680},
         expect=((W, "VocabSizeDiffers", "drafter", "$.vocab_size"),), ok=True),
    Case("target-vocab-padded", "qwen3.6-27b", None, {("text_config", "vocab_size"): 248448},
         expect=((W, "VocabSizeDiffers", "drafter", "$.vocab_size"),), ok=True),
    Case("hidden-act-gelu", "qwen3-8b", {("hidden_act",): "gelu"},
         expect=((E, "HiddenActUnsupported", "drafter", "$.hidden_act"),)),
    Case("target-missing-layers", "qwen3-8b", None, {("num_hidden_layers",): DEL},
         expect=((E, "TargetFieldMissing", "target", "$.num_hidden_layers"),)),
    Case("wrapped-target-missing-hidden", "qwen3.6-27b", None, {("text_config", "hidden_size"): DEL},
         expect=((E, "TargetFieldMissing", "target", "$.text_config.hidden_size"),)),
    Case("block-size-default", "qwen3-8b", {("block_size",): DEL},
         expect=((W, "BlockSizeDefaulted", "drafter", "$.dflash_config.block_size"),), ok=True),
    Case("block-size-invalid", "qwen3-8b", {("block_size",): 1},
         expect=((E, "BlockSizeInvalid", "drafter", "$.block_size"),)),

    # ---- context length (spec.engine.maxModelLen)
    Case("max-model-len-above-target", "qwen3-8b", opts={**VLLM, "max_model_len": 65536},
         expect=((E, "MaxModelLenAboveTarget", "spec", "spec.engine.maxModelLen"),)),
    Case("max-model-len-at-target", "qwen3-8b", opts={**VLLM, "max_model_len": 40960}, ok=True,
         absent=("MaxModelLenAboveTarget", "DrafterContextTooShort")),
    Case("max-model-len-below-block", "qwen3-8b", opts={**VLLM, "max_model_len": 8},
         expect=((E, "MaxModelLenInvalid", "spec", "spec.engine.maxModelLen"),)),
    Case("drafter-context-short-vllm-0.26", "qwen3-8b", {("max_position_embeddings",): 8192},
         opts={"engine": "vllm", "engine_version": "0.26.0", "max_model_len": 16384},
         expect=((E, "DrafterContextTooShort", "drafter", "$.max_position_embeddings"),)),
    Case("drafter-context-short-target-default", "qwen3-8b", {("max_position_embeddings",): 8192}, opts=SGLANG,
         expect=((E, "DrafterContextTooShort", "drafter", "$.max_position_embeddings"),)),
    Case("drafter-context-short-accepted", "qwen3-8b", {("max_position_embeddings",): 8192},
         opts={**SGLANG, "accept": ("DrafterContextTooShort",)}, ok=True,
         expect=((I, "DrafterContextTooShort", "drafter", "$.max_position_embeddings"),)),
    Case("drafter-context-raised-by-vllm-0.33", "qwen3-8b", {("max_position_embeddings",): 8192},
         opts={**VLLM, "max_model_len": 16384}, ok=True,
         expect=((I, "DrafterContextRaisedByEngine", "drafter", "$.max_position_embeddings"),)),
    Case("drafter-context-yarn-not-raised-by-vllm-0.33", "qwen3-8b",
         {("max_position_embeddings",): 8192, ("rope_scaling",): {"rope_type": "yarn", "factor": 4.0}},
         opts={**VLLM, "max_model_len": 16384},
         expect=((E, "DrafterContextTooShort", "drafter", "$.max_position_embeddings"),)),

    # ---- accepted findings
    Case("accept-a-fact-refused", "qwen3-8b", opts={**VLLM, "accept": ("HiddenSizeMismatch",)},
         expect=((E, "AcceptNotAllowed", "spec", "spec.checks.accept[0]"),)),
    Case("accept-unknown-code", "qwen3-8b", opts={**VLLM, "accept": ("NoSuchCode",)},
         expect=((E, "AcceptUnknownCode", "spec", "spec.checks.accept[0]"),)),
    Case("accept-a-warning", "qwen3-8b", {("vocab_size",): 151680}, opts={**VLLM, "accept": ("VocabSizeDiffers",)},
         ok=True, expect=((I, "VocabSizeDiffers", "drafter", "$.vocab_size"),)),

    # ---- tensor parallelism and memory
    Case("tp3-drafter-heads", "qwen3-8b", opts={"gpu_count": 3},
         expect=((E, "TensorParallelHeadsIndivisible", "drafter", "$.num_attention_heads"),
                 (E, "TensorParallelHeadsIndivisible", "drafter", "$.num_key_value_heads"),
                 (E, "TensorParallelHeadsIndivisible", "target", "$.num_attention_heads"))),
    Case("tp3-qwen36", "qwen3.6-27b", opts={"gpu_count": 3},
         expect=((E, "TensorParallelHeadsIndivisible", "drafter", "$.num_attention_heads"),
                 (E, "TensorParallelHeadsIndivisible", "target", "$.text_config.num_key_value_heads"))),
    Case("tp8-target-kv-replicated", "qwen3.6-27b", opts={**SGLANG, "gpu": "b300", "gpu_count": 8}, ok=True,
         absent=("TensorParallelHeadsIndivisible",)),
    Case("tp16-drafter-kv-not-replicated", "qwen3.6-27b", {("num_key_value_heads",): 4},
         opts={"gpu_count": 8},
         expect=((E, "TensorParallelHeadsIndivisible", "drafter", "$.num_key_value_heads"),),
         absent=()),
    Case("kimi-1-rtx", "kimi-k2.6", opts={**SGLANG, "gpu": "rtx-pro-6000", "gpu_count": 1},
         expect=((E, "WeightsExceedGpuMemory", "spec", "spec.gpu.count"),)),
    Case("kimi-8-rtx", "kimi-k2.6", opts={**SGLANG, "gpu": "rtx-pro-6000", "gpu_count": 8}, ok=True,
         expect=((W, "GpuKernelGap", "spec", "spec.gpu.type"),),
         absent=("WeightsExceedGpuMemory", "LowKvCacheHeadroom", "TensorParallelHeadsIndivisible")),
    Case("qwen36-1-b300", "qwen3.6-27b", opts={**VLLM, "gpu": "b300"}, ok=True,
         absent=("WeightsExceedGpuMemory", "LowKvCacheHeadroom")),

    # ---- engines
    Case("vllm-0.24-sliding", "qwen3.6-27b", opts={"engine": "vllm", "engine_version": "0.24.0"},
         expect=((E, "SlidingWindowUnsupportedByEngine", "spec", "spec.engine.version"),
                 (W, "EngineVersionUnverified", "spec", "spec.engine.version"))),
    Case("vllm-0.25-mixed", "qwen3.6-27b", opts={"engine": "vllm", "engine_version": "0.25.0"},
         expect=((E, "MixedLayersUnsupported", "spec", "spec.engine.version"),)),
    Case("vllm-0.25-all-sliding", "qwen3.6-27b", {("layer_types", 4): SLIDING},
         opts={"engine": "vllm", "engine_version": "0.25.0"}, ok=True,
         absent=("MixedLayersUnsupported", "SlidingWindowUnsupportedByEngine")),
    Case("vllm-0.21-offset", "qwen3-8b", opts={"engine": "vllm", "engine_version": "0.21.0"},
         expect=((E, "EngineLayerOffsetBroken", "spec", "spec.engine.version"),)),
    Case("vllm-0.21-offset-accepted", "qwen3-8b",
         opts={"engine": "vllm", "engine_version": "0.21.0", "accept": ("EngineLayerOffsetBroken",)}, ok=True,
         expect=((I, "EngineLayerOffsetBroken", "spec", "spec.engine.version"),)),
    # speculators ids are converted by vLLM < 0.22 the same (wrong) way back, so they read the right layer
    Case("vllm-0.21-speculators", "qwen3-8b", speculators_drafter, opts={"engine": "vllm", "engine_version": "0.21.0"},
         ok=True, absent=("EngineLayerOffsetBroken",)),
    Case("vllm-0.25-full-only", "qwen3-8b", opts={"engine": "vllm", "engine_version": "0.25.0"}, ok=True,
         expect=((W, "EngineVersionUnverified", "spec", "spec.engine.version"),),
         absent=("SlidingWindowUnsupportedByEngine",)),
    Case("vllm-too-old", "qwen3-8b", opts={"engine": "vllm", "engine_version": "0.10.0"},
         expect=((E, "EngineVersionUnsupported", "spec", "spec.engine.version"),)),
    Case("engine-version-garbage", "qwen3-8b", opts={"engine": "sglang", "engine_version": "latest"},
         expect=((E, "EngineVersionInvalid", "spec", "spec.engine.version"),)),
    Case("engine-unknown", "qwen3-8b", opts={"engine": "tgi", "engine_version": "1.0.0"},
         expect=((E, "UnknownEngine", "spec", "spec.engine.name"),)),
    Case("sglang-0.5.10", "qwen3.6-27b", opts={"engine": "sglang", "engine_version": "0.5.10"},
         expect=((E, "EngineVersionUnsupported", "spec", "spec.engine.version"),)),
    Case("sglang-0.5.13-mixed", "qwen3.6-27b", opts={"engine": "sglang", "engine_version": "0.5.13"}, ok=True,
         expect=((W, "EngineVersionUnverified", "spec", "spec.engine.version"),
                 (W, "CompactCacheTruncatesFullAttention", "spec", "spec.speculation.draftWindow"))),
    Case("sglang-0.5.13-all-sliding", "qwen3.6-27b", {("layer_types", 4): SLIDING},
         opts={"engine": "sglang", "engine_version": "0.5.13"}, ok=True,
         expect=((I, "DraftWindowDerived", "spec", "spec.speculation.draftWindow"),)),
    Case("method-ddtree-sglang", "qwen3-8b", opts={**SGLANG, "method": "ddtree"},
         expect=((E, "MethodUnsupported", "spec", "spec.speculation.method"),)),
    Case("method-ddtree-vllm", "qwen3-8b", opts={**VLLM, "method": "ddtree"},
         expect=((E, "MethodUnsupported", "spec", "spec.speculation.method"),)),
    Case("method-unknown", "qwen3-8b", opts={"method": "medusa"},
         expect=((E, "MethodUnknown", "spec", "spec.speculation.method"),)),
    Case("ddtree-fields-with-dflash", "qwen3-8b", opts={**SGLANG, "ddtree_set": True, "ddtree_budget": 15},
         expect=((E, "DDTreeFieldsWithoutDDTree", "spec", "spec.speculation.ddtree"),)),
    Case("unknown-gpu", "qwen3-8b", opts={"gpu": "a100"},
         expect=((E, "UnknownGpuType", "spec", "spec.gpu.type"),)),
    Case("gpu-count-not-divisible-by-nodes", "qwen3-8b", opts={"gpu_count": 3, "nodes": 2},
         expect=((E, "GpuCountNotDivisibleByNodes", "spec", "spec.gpu.count"),)),
    Case("too-many-gpus-per-node", "qwen3-8b", opts={"gpu": "b300", "gpu_count": 16},
         expect=((E, "TooManyGpusPerNode", "spec", "spec.gpu.count"),)),

    # ---- user overrides
    Case("block-size-above-trained", "qwen3.6-27b", opts={"block_size": 32},
         expect=((E, "BlockSizeAboveTrained", "spec", "spec.speculation.blockSize"),)),
    Case("block-size-above-trained-kimi", "kimi-k2.6", opts={"block_size": 16},
         expect=((E, "BlockSizeAboveTrained", "spec", "spec.speculation.blockSize"),)),
    Case("block-size-below-trained", "qwen3.6-27b", opts={"block_size": 8},
         expect=((W, "BlockSizeBelowTrained", "spec", "spec.speculation.blockSize"),), ok=True),
    Case("block-size-option-invalid", "qwen3.6-27b", opts={"block_size": 1},
         expect=((E, "BlockSizeInvalid", "spec", "spec.speculation.blockSize"),)),
    Case("draft-window-off-sliding-old-sglang", "qwen3.6-27b",
         opts={"engine": "sglang", "engine_version": "0.5.13", "draft_window": "off"},
         expect=((W, "DraftWindowOff", "spec", "spec.speculation.draftWindow"),), ok=True),
    Case("draft-window-off-sliding-native", "qwen3.6-27b", opts={**SGLANG, "draft_window": "off"}, ok=True,
         absent=("DraftWindowOff", "CompactCacheTruncatesFullAttention")),
    Case("draft-window-off-full-only", "qwen3-8b", opts={**SGLANG, "draft_window": "off"}, ok=True,
         absent=("DraftWindowOff",)),
    Case("draft-window-below-trained", "qwen3.6-27b", opts={**SGLANG, "draft_window": 1024},
         expect=((W, "DraftWindowBelowTrained", "spec", "spec.speculation.draftWindow"),), ok=True),
    Case("draft-window-trained-minus-one-exact", "qwen3.6-27b", opts={**SGLANG, "draft_window": 2047}, ok=True,
         absent=("DraftWindowBelowTrained",)),
    Case("draft-window-on-full-attention", "qwen3-8b", opts={**SGLANG, "draft_window": 4096},
         expect=((W, "CompactCacheTruncatesFullAttention", "spec", "spec.speculation.draftWindow"),), ok=True),
    Case("draft-window-string", "qwen3-8b", opts={"draft_window": "auto"},
         expect=((E, "DraftWindowInvalid", "spec", "spec.speculation.draftWindow"),)),
    Case("draft-window-zero", "qwen3-8b", opts={"draft_window": 0},
         expect=((E, "DraftWindowInvalid", "spec", "spec.speculation.draftWindow"),)),
    Case("draft-window-ignored-by-vllm", "qwen3.6-27b", opts={**VLLM, "draft_window": 4096},
         expect=((W, "DraftWindowIgnoredByEngine", "spec", "spec.speculation.draftWindow"),), ok=True),
    Case("fa4-on-rtx", "qwen3.6-27b", opts={**SGLANG, "gpu": "rtx-pro-6000", "draft_attention_backend": "fa4"},
         expect=((E, "AttentionBackendUnavailable", "spec", "spec.speculation.draftAttentionBackend"),)),
    Case("trtllm-on-rtx", "qwen3-8b", opts={**SGLANG, "gpu": "rtx-pro-6000", "draft_attention_backend": "trtllm_mha"},
         expect=((E, "AttentionBackendUnavailable", "spec", "spec.speculation.draftAttentionBackend"),)),
    Case("fa4-on-b300", "qwen3.6-27b", opts={**SGLANG, "gpu": "b300", "draft_attention_backend": "fa4"}, ok=True,
         absent=("AttentionBackendUnavailable",)),
    Case("trtllm-bidirectional-full-layer", "qwen3.6-27b",
         opts={**SGLANG, "gpu": "b300", "draft_attention_backend": "trtllm_mha"},
         expect=((E, "DraftAttentionBackendNeedsCausal", "spec", "spec.speculation.draftAttentionBackend"),)),
    Case("trtllm-all-full-bidirectional", "qwen3-8b",
         opts={**SGLANG, "gpu": "b200", "draft_attention_backend": "trtllm_mha"},
         expect=((E, "DraftAttentionBackendNeedsCausal", "spec", "spec.speculation.draftAttentionBackend"),)),
    # SGLang reads (text_)config.is_causal for trtllm_mha, never dflash_config.causal
    Case("trtllm-dflash-config-causal-not-read", "qwen3.6-27b", {("dflash_config", "causal"): True},
         opts={**SGLANG, "gpu": "b300", "draft_attention_backend": "trtllm_mha"},
         expect=((E, "DraftAttentionBackendNeedsCausal", "spec", "spec.speculation.draftAttentionBackend"),)),
    Case("trtllm-causal-drafter", "qwen3.6-27b", {("is_causal",): True},
         opts={**SGLANG, "gpu": "b300", "draft_attention_backend": "trtllm_mha"}, ok=True,
         absent=("DraftAttentionBackendNeedsCausal",)),
    Case("trtllm-before-0.5.17", "qwen3-8b",
         opts={"engine": "sglang", "engine_version": "0.5.16", "gpu": "b300", "draft_attention_backend": "trtllm_mha"},
         expect=((E, "AttentionBackendUnsupportedByEngine", "spec", "spec.speculation.draftAttentionBackend"),)),
    Case("vllm-triton-draft-backend", "qwen3-8b", opts={**VLLM, "draft_attention_backend": "triton"}, ok=True,
         absent=("AttentionBackendUnsupportedByEngine",)),
    Case("trtllm-all-sliding-drafter", "qwen3.6-27b", {("layer_types", 4): SLIDING},
         opts={**SGLANG, "gpu": "b300", "draft_attention_backend": "trtllm_mha"}, ok=True,
         absent=("DraftAttentionBackendNeedsCausal",)),

    # ---- wrong types: a finding at the right path, never an exception
    Case("type-drafter-num-layers-str", "qwen3-8b", {("num_hidden_layers",): "5"},
         expect=((E, "InvalidFieldType", "drafter", "$.num_hidden_layers"),)),
    Case("type-target-num-layers-str", "qwen3-8b", None, {("num_hidden_layers",): "36"},
         expect=((E, "InvalidFieldType", "target", "$.num_hidden_layers"),)),
    Case("type-wrapped-target-hidden-str", "qwen3.6-27b", None, {("text_config", "hidden_size"): "5120"},
         expect=((E, "InvalidFieldType", "target", "$.text_config.hidden_size"),)),
    Case("type-ids-string", "qwen3-8b", {DC_IDS: "1,2"},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.target_layer_ids"),)),
    Case("type-ids-bool-item", "qwen3-8b", {DC_IDS + (1,): True},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.target_layer_ids[1]"),)),
    Case("type-ids-float-item", "qwen3-8b", {DC_IDS + (2,): 17.5},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.target_layer_ids[2]"),)),
    Case("type-block-size-true", "qwen3-8b", {("block_size",): True},
         expect=((E, "InvalidFieldType", "drafter", "$.block_size"),)),
    Case("type-hidden-size-true", "qwen3.6-27b", {("hidden_size",): True},
         expect=((E, "InvalidFieldType", "drafter", "$.hidden_size"),)),
    Case("type-mask-float", "qwen3-8b", {("dflash_config", "mask_token_id"): 1.5},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("type-mask-str", "qwen3-8b", {("dflash_config", "mask_token_id"): "151669"},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.mask_token_id"),)),
    Case("type-dflash_config-list", "qwen3-8b", {("dflash_config",): [1, 9]},
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config"),)),
    Case("type-layer-types-string", "qwen3.6-27b", {("layer_types",): "sliding_attention"},
         expect=((E, "InvalidFieldType", "drafter", "$.layer_types"),)),
    Case("type-layer-types-int-item", "qwen3.6-27b", {("layer_types", 3): 1},
         expect=((E, "InvalidFieldType", "drafter", "$.layer_types[3]"),)),
    Case("type-sliding-window-str", "qwen3.6-27b", {("sliding_window",): "2048"},
         expect=((E, "InvalidFieldType", "drafter", "$.sliding_window"),)),
    Case("type-use-swa-str", "qwen3.6-27b", lambda d: edit(use_swa_drafter(d), {("dflash_config", "use_swa"): "yes"}),
         expect=((E, "InvalidFieldType", "drafter", "$.dflash_config.use_swa"),)),
    Case("type-architectures-str", "qwen3-8b", {("architectures",): "DFlashDraftModel"},
         expect=((E, "InvalidFieldType", "drafter", "$.architectures"),)),
    Case("type-hidden-act-int", "qwen3-8b", {("hidden_act",): 1},
         expect=((E, "InvalidFieldType", "drafter", "$.hidden_act"),)),
    Case("type-target-vocab-bool", "qwen3-8b", None, {("vocab_size",): False},
         expect=((E, "InvalidFieldType", "target", "$.vocab_size"),)),
    Case("type-heads-integral-float-ok", "qwen3-8b", {("num_attention_heads",): 32.0}, ok=True,
         absent=("InvalidFieldType",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule(case: Case):
    d, t = pair(case.pair)
    d = _apply(d, case.drafter)
    t = _apply(t, case.target)
    a = analyze(d, t, Options(**case.opts))
    got = triples(a.findings)
    for exp in case.expect:
        assert exp in got, f"missing {exp}; got {sorted(got)}"
    ok = case.ok if case.ok is not None else not any(e[0] == E for e in case.expect)
    assert a.ok is ok, sorted(got)
    present = {f.code for f in a.findings}
    for code in case.absent:
        assert code not in present, sorted(got)
    for f in a.findings:
        assert f.message and f.message.strip() == f.message


def test_every_case_id_is_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# ----------------------------------------------------------------- derived values of the shapes


def test_dflash_config_block_size_wins():
    d, t = pair("qwen3.6-27b")
    d["dflash_config"]["block_size"] = 8
    der = analyze(d, t, Options(**SGLANG)).derived
    assert der.block_size == 8
    assert der.num_speculative_tokens == 7


def test_top_level_block_used_when_dflash_config_has_none():
    d, t = pair("kimi-k2.6")
    der = analyze(d, t, Options()).derived
    assert der.block_size == 8


def test_use_swa_derives_all_sliding_and_window():
    d, t = pair("qwen3.6-27b")
    a = analyze(use_swa_drafter(d, 4096), t, Options(**VLLM))
    assert a.ok
    assert a.derived.layer_types == (SLIDING,) * 5
    assert a.derived.has_sliding and not a.derived.mixed_layers
    assert a.derived.drafter_window == 4096
    assert a.derived.native_window == 4096 and a.derived.draft_window is None


def test_use_swa_all_sliding_needs_no_v2_runner_on_vllm():
    d, t = pair("qwen3.6-27b")
    a = analyze(use_swa_drafter(d), t, Options(**VLLM))
    assert a.ok
    assert a.derived.engine_env == {}


def test_speculators_ids_are_shifted_back():
    d, t = pair("qwen3.6-27b")
    a = analyze(speculators_drafter(d), t, Options(**VLLM))
    assert a.ok, [f.one_line() for f in errors(a.findings)]
    assert a.drafter.format == "speculators"
    assert a.drafter.target_layer_ids_offset == 1
    assert a.derived.target_layer_ids == (1, 16, 31, 46, 61)
    assert a.derived.layer_types == (SLIDING,) * 4 + (FULL,)
    assert a.derived.drafter_window == 2048
    assert a.derived.engine_env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}


def test_dflash2_variant():
    d, t = pair("qwen3.6-27b")
    d["architectures"] = ["DFlash2DraftModel"]
    a = analyze(d, t, Options(**SGLANG, method="dflash2"))
    assert a.ok and a.drafter.variant == "dflash2" and a.family.name == "dflash2"


def test_not_a_drafter_is_not_dflash():
    d, _ = pair("qwen3-8b")
    _, t = pair("qwen3-8b")
    a = analyze(copy.deepcopy(t), t, Options())
    assert not a.drafter.is_dflash
    assert "NotADFlashDrafter" in {f.code for f in errors(a.findings)}


@pytest.mark.parametrize("chain", [("text_config",), ("language_config",), ("llm_config",),
                                   ("thinker_config", "text_config")], ids=lambda c: ".".join(c))
def test_wrapped_target_same_result_as_plain(chain):
    d, t = pair("qwen3-8b")
    plain = analyze(d, t, Options(**SGLANG))
    wrapped_t = wrap_target(t, chain)
    a = analyze(d, wrapped_t, Options(**SGLANG))
    assert a.ok and plain.ok
    assert a.target.root == "$." + ".".join(chain)
    assert a.derived.target_layer_ids == plain.derived.target_layer_ids
    assert {f.code for f in a.findings} == {f.code for f in plain.findings}


@pytest.mark.parametrize("chain", [("text_config",), ("language_config",), ("llm_config",),
                                   ("thinker_config", "text_config")], ids=lambda c: ".".join(c))
def test_wrapped_target_rules_still_apply(chain):
    d, t = pair("qwen3-8b")
    t["num_hidden_layers"] = 30
    t["hidden_size"] = 2048
    a = analyze(d, wrap_target(t, chain), Options())
    got = triples(a.findings)
    assert (E, "TargetLayerOutOfRange", "drafter", "$.dflash_config.target_layer_ids[4]") in got
    assert (E, "HiddenSizeMismatch", "drafter", "$.hidden_size") in got
    assert (E, "NumTargetLayersMismatch", "drafter", "$.num_target_layers") in got
    del t["vocab_size"]
    a = analyze(d, wrap_target(t, chain), Options())
    root = "$." + ".".join(chain)
    assert (E, "TargetFieldMissing", "target", f"{root}.vocab_size") in triples(a.findings)


def test_wrapper_vocab_outside_text_config_is_used():
    d, t = pair("qwen3.6-27b")
    t["vocab_size"] = t["text_config"].pop("vocab_size")
    a = analyze(d, t, Options())
    assert a.ok
    assert a.target.vocab_size.path == "$.vocab_size"


def test_target_plain_qwen3_use_sliding_window_is_not_a_drafter_field():
    # Qwen3-8B ships use_sliding_window false; Qwen3.6 drafter ships true with layer_types: neither warns.
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options())
    assert "SlidingWindowAmbiguous" not in {f.code for f in a.findings}


# ----------------------------------------------------------------- engines


def test_vllm_mixed_layers_get_v2_runner_env():
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options(**VLLM))
    assert a.ok
    assert a.derived.mixed_layers
    assert a.derived.engine_env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert a.derived.draft_window is None  # vLLM has no compact-cache flag


@pytest.mark.parametrize("name", ["qwen3-8b", "kimi-k2.6"])
def test_vllm_full_only_needs_no_env(name):
    d, t = pair(name)
    assert analyze(d, t, Options(**VLLM)).derived.engine_env == {}


def test_sglang_never_gets_vllm_env():
    d, t = pair("qwen3.6-27b")
    assert analyze(d, t, Options(**SGLANG)).derived.engine_env == {}


@pytest.mark.parametrize("version, flag, other", [
    ("0.5.11", "--speculative-dflash-draft-window-size", "--speculative-draft-window-size"),
    ("0.5.13", "--speculative-draft-window-size", "--speculative-dflash-draft-window-size"),
])
def test_sglang_window_flag_by_version(version, flag, other):
    # releases without native draft windows get the compact cache at the trained window, under their flag name
    d, t = pair("qwen3.6-27b")
    d["layer_types"][4] = SLIDING  # all sliding: the compact cache is exact
    a = analyze(d, t, Options(engine="sglang", engine_version=version))
    assert a.ok
    assert eng.SGLANG.release_for(version).flags["draft_window"] == flag
    [info] = [f for f in a.findings if f.code == "DraftWindowDerived"]
    assert f"{flag} 2048" in info.message
    assert f"{other} " not in info.message
    assert "EngineVersionUnverified" in {f.code for f in a.findings}


def test_sglang_native_window_renders_no_flag_and_says_why():
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options(**SGLANG, gpu="b300"))
    assert a.ok and a.derived.draft_window is None and a.derived.native_window == 2048
    [info] = [f for f in a.findings if f.code == "DraftWindowNative"]
    assert "_get_dflash_layer_attention_params" in info.message and "fa4" in info.message
    assert not any("does not infer" in f.message for f in a.findings)


# ----------------------------------------------------------------- extraArgs and model references


OWNED_SGLANG = [
    ["--speculative-algorithm", "EAGLE"],
    ["--speculative-algorithm=EAGLE"],
    ["--speculative-alg", "EAGLE"],
    ["--speculative-draft-window-size", "64"],
    ["--tp", "4"],
    ["--tp-size=4"],
    ["--config", "/tmp/x.yaml"],
    ["--config=/tmp/x.yaml"],
    ["--model-path", "other/model"],
    ["--model", "other/model"],
    ["--model-pa", "other/model"],
    ["--port", "1"],
    ["--host=0.0.0.0"],
    ["--enable-metrics"],
    ["--trust-remote-code"],
    ["--nnodes", "2"],
    ["--dist-init-addr", "1.2.3.4:5"],
]
OWNED_VLLM = [
    ["--speculative-config", "{}"],
    ["--speculative_config", "{}"],
    ["--speculative_config={}"],
    ["--speculative-conf", "{}"],
    ["--tensor-parallel-size", "2"],
    ["--tensor_parallel_size=2"],
    ["--tensor-parallel", "2"],
    ["-tp", "2"],
    ["--config", "x.yaml"],
    ["--model", "x"],
    ["--revision", "main"],
    ["--headless"],
    ["--master-addr", "x"],
    ["--max-model-len", "4096"],
    ["--max_model_len=4096"],
]
HARMLESS = [
    "--mem-fraction-static", "0.8", "--max-running-requests=32", "--served-model-name", "qwen",
    "--enable-metrics-for-all-schedulers", "--chunked-prefill-size", "-1",
]
HARMLESS_VLLM = ["--max-num-batched-tokens", "32768", "--gpu-memory-utilization=0.9", "--max-num-seqs", "64",
                 "--served-model-name", "qwen"]


@pytest.mark.parametrize("engine, owned", [("sglang", o) for o in OWNED_SGLANG] + [("vllm", o) for o in OWNED_VLLM],
                         ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_extra_args_owned_flags(engine, owned):
    d, t = pair("qwen3-8b")
    version = "0.5.23" if engine == "sglang" else "0.33.0"
    harmless = ["--mem-fraction-static", "0.8"] if engine == "sglang" else ["--max-num-seqs", "4"]
    a = analyze(d, t, Options(engine=engine, engine_version=version, extra_args=tuple(harmless + owned)))
    got = [(f.severity.value, f.path) for f in a.findings
           if f.code in ("ExtraArgSetsOwnedFlag", "ExtraArgChangesModelConfig")]  # config files: the latter
    assert got == [("error", f"spec.engine.extraArgs[{len(harmless)}]")]
    assert not a.ok


@pytest.mark.parametrize("engine, args", [("sglang", HARMLESS), ("vllm", HARMLESS_VLLM)])
def test_extra_args_harmless(engine, args):
    d, t = pair("qwen3-8b")
    version = "0.5.23" if engine == "sglang" else "0.33.0"
    a = analyze(d, t, Options(engine=engine, engine_version=version, extra_args=tuple(args)))
    assert a.ok, [f.one_line() for f in a.findings]
    assert not [f for f in a.findings if f.code.startswith("ExtraArg")]


@pytest.mark.parametrize("arg", ["--served-model-name\nx", "a\x00b", "x\r"])
def test_extra_args_control_characters(arg):
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(**SGLANG, extra_args=("--served-model-name", arg)))
    assert (E, "ExtraArgInvalid", "spec", "spec.engine.extraArgs[1]") in triples(a.findings)


BAD_REFS = ["-rf", "--model-path", "../etc/passwd", "a/../b", "a/./b", "./model", "Qwen/Qwen3 8B", " Qwen/Qwen3-8B",
            "Qwen/Qwen3-8B ", "a//b", "a;rm -rf", "$(whoami)", "", "/..", "models/..", "Qwen/Qwen3-8B\n"]
GOOD_REFS = ["Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash", "moonshotai/Kimi-K2.6", "qwen3-8b", "/models/target",
             "checkpoints/v1.0/model_a", ".hidden/model", "a..b/c"]


@pytest.mark.parametrize("field_name, path", [("target_model", "spec.target.model"), ("drafter_model", "spec.drafter.model")])
@pytest.mark.parametrize("ref", BAD_REFS)
def test_model_reference_invalid(field_name, path, ref):
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(**SGLANG, **{field_name: ref}))
    assert (E, "ModelReferenceInvalid", "spec", path) in triples(a.findings)


@pytest.mark.parametrize("ref", GOOD_REFS)
def test_model_reference_valid(ref):
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(**SGLANG, target_model=ref, drafter_model=ref))
    assert "ModelReferenceInvalid" not in {f.code for f in a.findings}


# ----------------------------------------------------------------- overrides: derived values


def test_block_size_below_trained_is_used():
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options(**SGLANG, block_size=8))
    assert a.ok
    assert (a.derived.block_size, a.derived.num_speculative_tokens) == (8, 7)


def test_draft_window_off_renders_no_window():
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options(**SGLANG, draft_window="off"))
    assert a.derived.draft_window is None
    assert a.derived.drafter_window == 2048


def test_draft_window_override_is_used_on_sglang():
    d, t = pair("qwen3.6-27b")
    a = analyze(d, t, Options(**SGLANG, draft_window=4096))
    assert a.ok
    assert a.derived.draft_window == 4096
    [f] = [f for f in a.findings if f.code == "CompactCacheTruncatesFullAttention"]
    # the trade in numbers: 5 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes per token, at 262144 tokens vs 4096
    assert "at 262144 tokens: 5.0 GiB without the compact cache, 80 MiB with it" in f.message, f.message
    assert "full-attention layer(s) [4]" in f.message
    # all layers sliding: exact, an info with the same numbers
    d["layer_types"][4] = SLIDING
    a = analyze(d, t, Options(**SGLANG, draft_window=4096, max_model_len=32768))
    [f] = [f for f in a.findings if f.code == "DraftWindowSet"]
    assert "at 32768 tokens: 640 MiB without the compact cache, 80 MiB with it" in f.message, f.message


@pytest.mark.parametrize("gpu, backend", [("b300", "fa4"), ("b200", "fa4"), ("rtx-pro-6000", "flashinfer"),
                                          ("h200", "fa3"), ("h100", "fa3")])
def test_default_draft_backend_per_gpu(gpu, backend):
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(**SGLANG, gpu=gpu, gpu_count=1))
    assert a.derived.draft_attention_backend == backend
