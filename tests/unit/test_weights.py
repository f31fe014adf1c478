"""The weight estimate: real sizes, quantisation, and untrusted ignore patterns."""

from __future__ import annotations

import pytest

from testkit import pair
from specdeploy.core.modelconfig import parse_target
from specdeploy.core.weights import MAX_IGNORE_PATTERNS, _quant, _safe_regex, estimate_target_bytes


@pytest.mark.parametrize("name,lo,hi", [("qwen3-8b", 15e9, 17.5e9), ("qwen3.6-27b", 50e9, 58e9), ("kimi-k2.6", 560e9, 620e9)])
def test_fixture_estimates(name, lo, hi):
    _, target = pair(name)
    t, _ = parse_target(target)
    assert lo <= estimate_target_bytes(t) <= hi


@pytest.mark.parametrize("pattern", ["(.*.*)*y", "(a+)+$", "(x|xx)+{2}", "((a*)*)*", "(.+)+self_attn"])
def test_catastrophic_patterns_are_refused(pattern):
    assert _safe_regex(pattern) is None


@pytest.mark.parametrize("pattern", [".*self_attn.*", r".*mlp\.(gate|up|gate_up|down)_proj.*", "vision_tower.*", "lm_head"])
def test_real_patterns_are_used(pattern):
    assert _safe_regex(pattern) is not None


def test_refused_pattern_counts_as_not_matching():
    q = _quant({"quant_method": "compressed-tensors", "ignore": ["re:(.*.*)*y", "re:.*self_attn.*"],
                "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 32}}}})
    assert q.bytes_for("model.layers.0.self_attn.q_proj", 2.0) == 2.0
    assert q.bytes_for("model.layers.0.mlp.experts.0.gate_proj", 2.0) == pytest.approx(0.5 + 2 / 32)


def test_ignore_list_is_bounded():
    q = _quant({"quant_method": "fp8", "ignore": [f"x{i}" for i in range(5000)]})
    assert len(q.ignore) == MAX_IGNORE_PATTERNS


def test_kimi_int4_keeps_attention_in_bf16():
    _, target = pair("kimi-k2.6")
    t, _ = parse_target(target)
    int4 = estimate_target_bytes(t)
    t.quantization = None
    assert estimate_target_bytes(t) / int4 > 3  # bf16 everywhere is ~3.5x the int4 checkpoint
