"""target_layer_ids: the canonical layout, exact shifts of it, and what each engine's target class refuses."""

from __future__ import annotations

import copy

import pytest

from testkit import pair
from specdeploy.core.checker import Options, analyze, canonical_layer_ids

SGLANG = dict(engine="sglang", engine_version="0.5.23")
VLLM = dict(engine="vllm", engine_version="0.33.0")


def shifted(d: dict, by: int) -> dict:
    d = copy.deepcopy(d)
    d["dflash_config"]["target_layer_ids"] = [i + by for i in d["dflash_config"]["target_layer_ids"]]
    return d


def codes(a, severity=None):
    return [f.code for f in a.findings if severity is None or f.severity.value == severity]


@pytest.mark.parametrize("name, n, k, want", [
    ("qwen3-8b", 36, 5, [1, 9, 17, 25, 33]),
    ("qwen3.6-27b", 64, 5, [1, 16, 31, 46, 61]),
    ("kimi-k2.6", 61, 6, [1, 12, 24, 35, 47, 58]),
])
def test_released_drafters_use_the_canonical_layout(name, n, k, want):
    d, t = pair(name)
    assert canonical_layer_ids(n, k) == want == d["dflash_config"]["target_layer_ids"]


@pytest.mark.parametrize("name", ["qwen3.6-27b", "kimi-k2.6", "qwen3-8b"])
@pytest.mark.parametrize("by", [1, -1])
@pytest.mark.parametrize("opts", [{}, SGLANG, VLLM], ids=["no-engine", "sglang", "vllm"])
def test_exact_shift_is_an_error_at_the_ids_path(name, by, opts):
    d, t = pair(name)
    canon = list(d["dflash_config"]["target_layer_ids"])
    a = analyze(shifted(d, by), t, Options(**opts))
    assert not a.ok
    [f] = [f for f in a.findings if f.code == "TargetLayerIdsShifted"]
    assert f.severity.value == "error" and f.path == "$.dflash_config.target_layer_ids"
    assert f"shifted by {by:+d}" in f.message and str(canon) in f.message


def test_accepted_shift_becomes_info_and_is_recorded():
    d, t = pair("qwen3.6-27b")
    a = analyze(shifted(d, 1), t, Options(**VLLM, accept=("TargetLayerIdsShifted",)))
    assert a.ok
    [f] = [f for f in a.findings if f.code == "TargetLayerIdsShifted"]
    assert f.severity.value == "info" and f.message.startswith("accepted (error) through spec.checks.accept")
    assert [x.code for x in a.accepted] == ["TargetLayerIdsShifted"] and a.accepted[0].severity.value == "error"


@pytest.mark.parametrize("ids", [
    [1, 16, 31, 46, 62],          # one id off: not an exact shift (a real, odd list)
    [3, 20, 33, 50, 60],          # hand-picked
    [58, 59, 60, 61, 62],         # MiMo-style trailing layers
    [2, 17, 32, 47],              # a shift of a 4-id layout is compared with the 4-id layout, not the 5-id one
])
def test_non_canonical_lists_that_are_not_a_shift_are_fine(ids):
    d, t = pair("qwen3.6-27b")
    d["dflash_config"]["target_layer_ids"] = ids
    a = analyze(d, t, Options(**VLLM))
    assert "TargetLayerIdsShifted" not in codes(a), codes(a)


def test_speculators_ids_are_compared_after_the_plus_one():
    d, t = pair("qwen3-8b")
    spec = {"speculators_model_type": "dflash", "block_size": 16, "mask_token_id": 151669,
            "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34],  # = canonical + 1: correct
            "transformer_layer_config": {k: d[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                           "num_key_value_heads", "head_dim", "vocab_size")}}
    assert "TargetLayerIdsShifted" not in codes(analyze(spec, t, Options(**VLLM)))
    spec["aux_hidden_state_layer_ids"] = [3, 11, 19, 27, 35]
    a = analyze(spec, t, Options(**VLLM))
    [f] = [f for f in a.findings if f.code == "TargetLayerIdsShifted"]
    assert f.path == "$.aux_hidden_state_layer_ids" and "[2, 10, 18, 26, 34]" in f.message


def test_single_id_layout_is_the_middle_layer():
    assert canonical_layer_ids(36, 1) == [18]
    assert canonical_layer_ids(3, 2) is None and canonical_layer_ids(4, 2) == [1, 1]


# ----------------------------------------------------------------- the target class of the chosen engine


def text_target(t: dict) -> dict:
    """The Qwen3.6 target as its text-only architecture (SGLang qwen3_5_text.Qwen3_5ForCausalLM)."""
    out = dict(t["text_config"])
    out["architectures"] = ["Qwen3_5ForCausalLM"]
    return out


@pytest.mark.parametrize("ids, arch_rejects, problem", [
    ([1, 16, 31, 46, 63], {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}, "last"),
    ([1, 16, 16, 46, 61], {"Qwen3_5ForCausalLM"}, "duplicate"),
    ([16, 1, 31, 46, 61], {"Qwen3_5ForCausalLM"}, "order"),
])
@pytest.mark.parametrize("arch", ["Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"])
def test_sglang_target_class_rules(ids, arch_rejects, problem, arch):
    d, t = pair("qwen3.6-27b")
    d["dflash_config"]["target_layer_ids"] = ids
    target = text_target(t) if arch == "Qwen3_5ForCausalLM" else t
    a = analyze(d, target, Options(**SGLANG))
    rejected = [f for f in a.findings if f.code == "TargetLayerIdsRejectedByEngine"]
    assert bool(rejected) == (arch in arch_rejects), [f.one_line() for f in a.findings]
    if rejected:
        assert rejected[0].path == "$.dflash_config.target_layer_ids" and arch in rejected[0].message
    # vLLM's target classes do not validate the list: only the generic rules apply
    b = analyze(d, target, Options(**VLLM))
    assert "TargetLayerIdsRejectedByEngine" not in codes(b)


def test_kimi_target_accepts_the_last_layer_on_sglang():
    d, t = pair("kimi-k2.6")
    d["dflash_config"]["target_layer_ids"] = [1, 12, 24, 35, 47, 60]
    a = analyze(d, t, Options(**SGLANG))
    assert "TargetLayerIdsRejectedByEngine" not in codes(a) and "TargetLayerIsLast" in codes(a, "warning")
