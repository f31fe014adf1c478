"""verify-window: passes on the reference, fails on every deliberately broken mask or cache."""

from __future__ import annotations

import json

import pytest
import torch

from runtime_helpers import run_runtime
from specdeploy_runtime.verify import VerifyOptions, run_verify

SMALL = dict(context=700, window=128, block=8)


def test_defaults_pass_on_cpu():
    """The done criterion: `specdeploy-runtime verify-window` with its defaults exits 0."""
    p = run_runtime("verify-window", "-o", "json")
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["ok"] and r["device"] == "cpu" and r["dtype"] == "float32"
    assert (r["window"], r["block"], r["keep"]) == (2048, 16, 2047)
    assert r["geometry"]["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"]
    a, b, c = r["a_window"], r["b_exact"], r["c_full_layers"]
    assert a["ok"] and a["leaked_keys"] == 0 and a["max_leaked_weight"] == 0.0 and a["starved_keys"] == 0
    assert b["ok"] and b["max_abs_diff"] <= 1e-5 and b["sliding_layers"] == [0, 1, 2, 3]
    # (c) is reported, not hidden: the compact cache really does change the full layer
    assert c["full_layers"] == [4] and c["max_abs_diff"] > 1e-3 and c["max_hidden_mass"] > 0.1
    assert r["tightness"]["sliding_max_abs_diff"] > 1e-5
    assert r["kernel_sdpa_vs_eager_max_abs_diff"] <= 1e-5
    assert max(r["checkpoints"]) == 8192 and 2047 in r["checkpoints"] and 2048 in r["checkpoints"]


def test_text_report():
    p = run_runtime("verify-window", "--context", "700", "--window", "128", "--block", "8",
                    "--layers", "sliding,full,sliding")
    assert p.returncode == 0, p.stderr
    assert "(a) window   PASS" in p.stdout and "(b) exact    PASS" in p.stdout and "OK:" in p.stdout
    assert "full-attention layers [1]" in p.stdout


@pytest.mark.parametrize("fault, broken", [
    ("finite-bias", "a"),   # a large finite negative instead of -inf: old keys keep a tiny weight
    ("off-by-one", "a"),    # q - k <= w: one key too many
    ("narrow", "a"),        # q - k < w - 1: one key too few
    ("no-window", "a"),     # sliding layers run as causal full attention
    ("short-cache", "b"),   # r = w - 2 < w - 1
])
def test_verifier_catches_broken_masks_and_caches(fault, broken):
    r = run_verify(VerifyOptions(fault=fault, **SMALL))
    assert not r["ok"]
    if broken == "a":
        assert not r["a_window"]["ok"]
    else:
        assert not r["b_exact"]["ok"]


def test_broken_mask_fails_the_command():
    p = run_runtime("verify-window", "--context", "700", "--window", "128", "--block", "8", "--fault", "off-by-one")
    assert p.returncode == 1
    assert "(a) window   FAIL" in p.stdout and "FAILED" in p.stdout and "must start at" in p.stdout


def test_compact_cache_shorter_than_the_condition_fails():
    r = run_verify(VerifyOptions(keep=126, **SMALL))
    assert not r["ok"] and not r["b_exact"]["ok"] and "cannot be exact" in r["b_exact"]["note"]
    assert run_verify(VerifyOptions(keep=127, **SMALL))["ok"]
    assert run_verify(VerifyOptions(keep=300, **SMALL))["ok"]


def test_all_sliding_and_causal_full_layers():
    r = run_verify(VerifyOptions(layers=("sliding_attention",) * 2, **SMALL))
    assert r["ok"] and r["c_full_layers"]["full_layers"] == []
    r = run_verify(VerifyOptions(causal=True, **SMALL))
    assert r["ok"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda():
    assert run_verify(VerifyOptions(device="cuda"))["ok"]


def test_cuda_requested_without_a_device():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    p = run_runtime("verify-window", "--device", "cuda")
    assert p.returncode != 0 and "no CUDA device" in p.stderr and "Traceback" not in p.stderr
