"""A field given twice with different values: a warning naming both paths, an error where the engine reads the other copy."""

from __future__ import annotations

from testkit import pair
from specdeploy.core.checker import Options, analyze

SGLANG = Options(engine="sglang", engine_version="0.5.23")
VLLM = Options(engine="vllm", engine_version="0.33.0")


def found(a, code):
    return [(f.severity.value, f.path, f.message) for f in a.findings if f.code == code]


def test_top_level_copy_of_a_dflash_config_field():
    d, t = pair("qwen3-8b")
    d["target_layer_ids"] = [2, 10, 18, 26, 34]
    for opts in (Options(), SGLANG, VLLM):
        [(sev, path, msg)] = found(analyze(d, t, opts), "ConflictingDuplicate")
        assert sev == "warning" and path == "$.target_layer_ids" and "$.dflash_config.target_layer_ids" in msg


def test_eagle_aux_ids_win_on_vllm():
    d, t = pair("qwen3-8b")
    d["eagle_aux_hidden_state_layer_ids"] = [1, 9, 17, 25, 33]  # the ids themselves, not + 1
    [(sev, path, _)] = found(analyze(d, t, VLLM), "EngineReadsOtherCopy")
    assert sev == "error" and path == "$.eagle_aux_hidden_state_layer_ids"
    [(sev, _, _)] = found(analyze(d, t, SGLANG), "ConflictingDuplicate")
    assert sev == "warning"
    d["eagle_aux_hidden_state_layer_ids"] = [2, 10, 18, 26, 34]  # consistent: fine everywhere
    assert not found(analyze(d, t, VLLM), "EngineReadsOtherCopy")


def test_target_hidden_size_is_read_by_vllm_only():
    d, t = pair("qwen3-8b")
    d["hidden_size"], d["target_hidden_size"] = 2048, 4096
    assert analyze(d, t, VLLM).ok
    a = analyze(d, t, SGLANG)
    [(sev, path, msg)] = found(a, "EngineReadsOtherCopy")
    assert sev == "error" and path == "$.hidden_size" and "feature dim mismatch" in msg


def test_wrapper_and_text_config_disagree():
    d, t = pair("qwen3.6-27b")
    t["num_hidden_layers"] = 48
    [(sev, path, msg)] = found(analyze(d, t, VLLM), "ConflictingDuplicate")
    assert sev == "warning" and path == "$.num_hidden_layers" and "$.text_config" in msg
