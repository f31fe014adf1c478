"""specdeploy.core.flagdrift against the real recorded snapshots (data/flags/*.json).

The snapshots come from the engines' own parsers (e2e/flagdrift/run.sh); these
tests pin what the operator relies on and prove drift is caught.
"""

from __future__ import annotations

import json

import pytest

from specdeploy.core import flagdrift
from specdeploy.core.flagdrift import (
    available_snapshots,
    check_against_snapshot,
    check_argv,
    load_snapshot,
)

SGLANG = ("sglang", "0.5.23")
VLLM = ("vllm", "0.33.0")

KIMI_SGLANG = [
    "--model-path", "moonshotai/Kimi-K2.6",
    "--tp-size", "8",
    "--trust-remote-code",
    "--speculative-algorithm", "DFLASH",
    "--speculative-draft-model-path", "z-lab/Kimi-K2.6-DFlash",
    "--speculative-num-draft-tokens", "8",
    "--speculative-draft-window-size", "2048",
    "--mem-fraction-static", "0.75",
    "--enable-metrics",
    "--host", "0.0.0.0",
    "--port", "30000",
]
SPEC = {"method": "dflash", "model": "z-lab/Qwen3.6-27B-DFlash", "num_speculative_tokens": 15}
QWEN_VLLM = [
    "Qwen/Qwen3.6-27B",
    "--tensor-parallel-size", "1",
    "--speculative-config", json.dumps(SPEC),
    "--max-model-len", "32768",
    "--host", "0.0.0.0",
    "--port", "8000",
]
V2_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "1"}


def vllm_with_spec(**changes):
    spec = dict(SPEC, **changes)
    argv = list(QWEN_VLLM)
    argv[argv.index("--speculative-config") + 1] = json.dumps(spec)
    return argv


def one(problems: list[str], *needles: str) -> str:
    hits = [p for p in problems if all(n in p for n in needles)]
    assert hits, f"no problem mentions {needles}: {problems}"
    return hits[0]


# -- loading -----------------------------------------------------------------


def test_snapshots_are_packaged():
    pairs = available_snapshots()
    assert SGLANG in pairs and VLLM in pairs


def test_load_snapshot_shape():
    s = load_snapshot(*SGLANG)
    assert s["engine"] == "sglang" and s["version"] == "0.5.23"
    assert "--speculative-draft-window-size" in s["options"]
    v = load_snapshot("vllm", "v0.33.0")  # a leading v is tolerated
    assert "dflash" in v["speculative_config"]["methods"]
    assert v["env"]["has_VLLM_USE_V2_MODEL_RUNNER"] is True


def test_load_snapshot_unknown_version_is_lookup_error():
    with pytest.raises(LookupError, match="no flag snapshot for vllm 0.0.1"):
        load_snapshot("vllm", "0.0.1")
    with pytest.raises(LookupError):
        check_argv("tgi", "3.0", [], {})


def test_snapshot_is_a_fresh_copy():
    load_snapshot(*VLLM)["options"].clear()
    assert load_snapshot(*VLLM)["options"]


# -- the rendered commands of the examples are clean ---------------------------


def test_kimi_sglang_command_is_clean():
    assert check_argv(*SGLANG, KIMI_SGLANG, {}) == []


def test_qwen_vllm_command_is_clean():
    assert check_argv(*VLLM, QWEN_VLLM, V2_ENV) == []


def test_equals_forms_and_vllm_underscores_are_understood():
    argv = ["Qwen/Qwen3.6-27B", "--tensor_parallel_size=2", f"--speculative-config={json.dumps(SPEC)}"]
    assert check_argv(*VLLM, argv, {}) == []
    assert check_argv(*VLLM, ["m/x", "-tp", "2"], {}) == []
    assert check_argv(*SGLANG, ["--model-path=m/x", "--tp-size=2"], {}) == []


# -- drift is caught ---------------------------------------------------------


def test_renamed_sglang_window_flag_is_caught():
    argv = [a if a != "--speculative-draft-window-size" else "--speculative-dflash-draft-window-size"
            for a in KIMI_SGLANG]
    p = one(check_argv(*SGLANG, argv, {}), "unknown flag --speculative-dflash-draft-window-size")
    assert "--speculative-draft-window-size" in p  # the suggestion names the new flag


def test_removed_cuda_graph_max_bs_is_caught():
    p = one(check_argv(*SGLANG, KIMI_SGLANG + ["--cuda-graph-max-bs", "32"], {}), "--cuda-graph-max-bs")
    assert "unknown flag" in p
    assert check_argv(*SGLANG, KIMI_SGLANG + ["--cuda-graph-max-bs-decode", "32"], {}) == []


def test_vllm_removed_speculative_model_flag_is_caught():
    one(check_argv(*VLLM, QWEN_VLLM + ["--speculative-model", "z/x"], {}), "unknown flag --speculative-model")


def test_bad_choice_is_caught():
    argv = KIMI_SGLANG + ["--attention-backend", "flash_attention_9"]
    one(check_argv(*SGLANG, argv, {}), "--attention-backend", "'flash_attention_9'", "not one of its choices")
    argv = KIMI_SGLANG + ["--speculative-attention-mode", "verify"]
    one(check_argv(*SGLANG, argv, {}), "--speculative-attention-mode", "'verify'")


def test_sglang_speculative_algorithm_is_checked_case_insensitively():
    argv = list(KIMI_SGLANG)
    argv[argv.index("DFLASH")] = "dflash"
    assert check_argv(*SGLANG, argv, {}) == []
    argv[argv.index("dflash")] = "DFLASH2"
    one(check_argv(*SGLANG, argv, {}), "speculative algorithm 'DFLASH2'")


def test_sglang_draft_attention_backend_is_checked():
    ok = KIMI_SGLANG + ["--speculative-draft-attention-backend", "fa4"]
    assert check_argv(*SGLANG, ok, {}) == []
    bad = KIMI_SGLANG + ["--speculative-draft-attention-backend", "flashmla"]
    one(check_argv(*SGLANG, bad, {}), "draft attention backend 'flashmla'")


def test_missing_value_is_caught():
    one(check_argv(*SGLANG, ["--model-path", "m/x", "--tp-size"], {}), "--tp-size needs a value")
    one(
        check_argv(*SGLANG, ["--model-path", "m/x", "--speculative-num-draft-tokens", "--enable-metrics"], {}),
        "--speculative-num-draft-tokens needs a value",
    )


def test_value_given_to_a_switch_is_caught():
    one(check_argv(*SGLANG, ["--model-path", "m/x", "--enable-metrics=yes"], {}), "takes no value")


def test_negative_numbers_are_values_not_flags():
    assert check_argv(*SGLANG, ["--model-path", "m/x", "--random-seed", "-1"], {}) == []


def test_deprecated_and_hidden_flags_are_caught():
    one(check_argv(*SGLANG, ["--model-path", "m/x", "--enable-dp-attention"], {}), "deprecated")
    snap = load_snapshot(*VLLM)
    hidden = sorted(k for k, v in snap["options"].items() if v["hidden"] and not v["deprecated"])
    assert hidden, "vllm records hidden negations such as --no-enable-*"
    one(check_against_snapshot(snap, ["m/x", hidden[0]], {}), "hidden")


def test_unexpected_positional_is_caught():
    one(check_argv(*SGLANG, ["moonshotai/Kimi-K2.6", "--tp-size", "8"], {}), "unexpected positional")
    one(check_argv(*VLLM, ["a/b", "c/d"], {}), "unexpected positional argument 'c/d'")


# -- vLLM speculative config and env -----------------------------------------


def test_vllm_speculative_method_not_allowed_is_caught():
    one(check_argv(*VLLM, vllm_with_spec(method="dflash2"), V2_ENV), "speculative method 'dflash2'")


def test_vllm_speculative_unknown_key_is_caught():
    p = one(check_argv(*VLLM, vllm_with_spec(num_spec_tokens=3), V2_ENV), "unknown speculative-config key 'num_spec_tokens'")
    assert "num_speculative_tokens" in p


def test_vllm_speculative_num_tokens_must_be_positive_int():
    one(check_argv(*VLLM, vllm_with_spec(num_speculative_tokens=0), {}), "num_speculative_tokens must be > 0")
    one(check_argv(*VLLM, vllm_with_spec(num_speculative_tokens="15"), {}), "must be an integer")


def test_vllm_speculative_config_json_errors():
    argv = ["m/x", "--speculative-config", "{method: dflash}"]
    one(check_argv(*VLLM, argv, {}), "not valid JSON")
    argv = ["m/x", "--speculative-config", "[1, 2]"]
    one(check_argv(*VLLM, argv, {}), "must be an object")


def test_vllm_dotted_speculative_config_keys():
    argv = ["m/x", "--speculative-config.method", "dflash", "--speculative-config.num_speculative_tokens", "7"]
    assert check_argv(*VLLM, argv, {}) == []
    one(check_argv(*VLLM, ["m/x", "--speculative-config.methd", "dflash"], {}), "unknown speculative-config key 'methd'")


def test_vllm_unknown_env_var_is_caught():
    p = one(check_argv(*VLLM, QWEN_VLLM, {"VLLM_USE_V3_MODEL_RUNNER": "1"}), "VLLM_USE_V3_MODEL_RUNNER")
    assert "VLLM_USE_V2_MODEL_RUNNER" in p
    # Non-vLLM variables are none of its business.
    assert check_argv(*VLLM, QWEN_VLLM, {"HF_HOME": "/cache", "CUDA_VISIBLE_DEVICES": "0"}) == []


def test_problems_name_engine_and_version():
    for p in check_argv(*SGLANG, ["--model-path", "m/x", "--no-such-flag"], {}):
        assert p.startswith("sglang 0.5.23: ")


def test_snapshot_records_defaults_only_for_relevant_flags():
    opts = load_snapshot(*SGLANG)["options"]
    assert opts["--tp-size"]["default"] == 1
    assert opts["--enable-metrics"]["default"] is False
    assert "default" not in opts["--host"]


def test_module_is_stdlib_only():
    import ast
    import sys

    tree = ast.parse(open(flagdrift.__file__, encoding="utf-8").read())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert mods <= set(sys.stdlib_module_names) | {"__future__"}, mods


def test_vllm_speculative_tensor_parallel_size_is_rejected():
    p = one(check_argv(*VLLM, vllm_with_spec(tensor_parallel_size=2), {}), "'tensor_parallel_size'")
    assert "rejected" in p
    assert check_argv(*VLLM, vllm_with_spec(draft_tensor_parallel_size=1), {}) == []
