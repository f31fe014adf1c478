"""preflight: the mounted config.json files against the engine command the operator rendered."""

from __future__ import annotations

import copy
import json

import pytest

from testkit import pair
from runtime_helpers import drop_flag, rendered_pod, run_runtime, set_flag
from specdeploy_runtime.preflight import TERMINATION_LIMIT, PreflightResult, flag_values, termination_text

WINDOW_FLAG = "--speculative-draft-window-size"


def all_full(d: dict) -> dict:
    d = copy.deepcopy(d)
    d["layer_types"] = ["full_attention"] * len(d["layer_types"])
    d.pop("sliding_window", None)
    return d


OLD = "0.5.13"  # an SGLang release without native draft windows: the compact cache flag is rendered by default


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_rendered_pod_passes(tmp_path, engine):
    pod = rendered_pod(tmp_path, engine)
    p = run_runtime(*pod.preflight_argv())
    assert p.returncode == 0, p.stdout + p.stderr
    log = pod.termination_log.read_text()
    assert log.startswith("specdeploy preflight OK")
    assert "target layers [1, 16, 31, 46, 61]" in log
    assert "sliding window 2048 applied by the engine" in log
    if engine == "vllm":
        assert "VLLM_USE_V2_MODEL_RUNNER=1" in log


def test_rendered_pod_on_a_release_without_native_windows(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", OLD)
    p = run_runtime(*pod.preflight_argv())
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"compact draft cache {WINDOW_FLAG} 2048" in pod.termination_log.read_text()


def test_sliding_drafter_without_window_flag_is_rejected(tmp_path):
    """The mounted drafter has sliding layers, the release does not window them, the args lack the flag."""
    pod = rendered_pod(tmp_path, "sglang", OLD)
    pod.edit_args(drop_flag(WINDOW_FLAG))
    p = run_runtime(*pod.preflight_argv())
    assert p.returncode == 1
    log = pod.termination_log.read_text()
    assert log.startswith("specdeploy preflight FAILED")
    assert "DraftWindowFlagMissing" in log and WINDOW_FLAG in log and "derives 2048" in log
    assert log.strip() in p.stderr  # the same one-screen message on stderr
    assert len(log.splitlines()) <= 22 and len(log.encode()) <= TERMINATION_LIMIT
    assert "Traceback" not in p.stderr


def test_window_flag_on_a_native_release_is_rejected(tmp_path):
    """SGLang 0.5.23 windows sliding layers itself: a compact-cache flag nobody asked for truncates the full layer."""
    pod = rendered_pod(tmp_path, "sglang")
    pod.edit_args(lambda a: a + [WINDOW_FLAG, "2048"])
    assert "DraftWindowFlagUnexpected" in pod.codes()


def test_stale_render_from_a_full_attention_drafter(tmp_path):
    """The operator checked an all-full drafter (no flag rendered); the volume holds the sliding one."""
    d, _ = pair("qwen3.6-27b")
    pod = rendered_pod(tmp_path, "sglang", OLD, checked_drafter=all_full(d), mounted_drafter=d)
    assert WINDOW_FLAG not in pod.engine_config["args"]
    errs = pod.codes("error")
    assert {"DraftWindowFlagMissing", "ConfigDigestMismatch", "LayerTypesChanged", "DrafterWindowChanged"} <= errs
    # without the digest rule the window rule alone still rejects it
    assert "DraftWindowFlagMissing" in pod.codes("error", "--allow-digest-mismatch")
    # on a native release the plan still differs from the mounted files
    pod = rendered_pod(tmp_path / "native", "sglang", checked_drafter=all_full(d), mounted_drafter=d)
    assert {"LayerTypesChanged", "DrafterWindowChanged"} <= pod.codes("error", "--allow-digest-mismatch")


def test_window_flag_value_must_match_the_drafter(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", OLD)
    pod.edit_args(set_flag(WINDOW_FLAG, "1024"))
    assert "DraftWindowFlagMismatch" in pod.codes()


def test_deliberate_window_recorded_by_the_operator(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", speculation={"draftWindow": 4096})
    assert pod.engine_config["args"][pod.engine_config["args"].index(WINDOW_FLAG) + 1] == "4096"
    res = pod.preflight()
    assert res.ok, res.message()
    assert "CompactCacheTruncatesFullAttention" in {p.code for p in res.problems if p.severity == "warning"}
    pod.edit_args(set_flag(WINDOW_FLAG, "2048"))
    assert "DraftWindowFlagMismatch" in pod.codes()


def test_window_off_recorded_by_the_operator_is_a_warning(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", OLD, speculation={"draftWindow": "off"})
    assert WINDOW_FLAG not in pod.engine_config["args"]
    res = pod.preflight()
    assert res.ok
    assert "DraftWindowOff" in {p.code for p in res.problems if p.severity == "warning"}


def test_old_window_flag_name_on_a_new_release(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", speculation={"draftWindow": 2048})
    pod.edit_args(lambda a: [("--speculative-dflash-draft-window-size" if x == WINDOW_FLAG else x) for x in a])
    errs = pod.codes()
    assert {"DraftWindowFlagRenamed", "DraftWindowFlagMissing"} <= errs


def test_window_flag_equals_form(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", OLD)
    pod.edit_args(lambda a: [x for x in a if x not in (WINDOW_FLAG, "2048")] + [f"{WINDOW_FLAG}=2048"])
    res = pod.preflight()
    assert not any(p.code.startswith("DraftWindow") and p.severity == "error" for p in res.problems), res.message()


def test_context_length_flag(tmp_path):
    pod = rendered_pod(tmp_path, "sglang", max_model_len=65536)
    assert pod.preflight().ok
    pod.edit_args(set_flag("--context-length", "262144"))
    assert "ContextLengthFlagMismatch" in pod.codes()


def test_block_size_flag(tmp_path):
    pod = rendered_pod(tmp_path, "sglang")
    pod.edit_args(set_flag("--speculative-num-draft-tokens", "8"))
    assert "BlockSizeFlagMismatch" in pod.codes()
    pod.edit_args(drop_flag("--speculative-num-draft-tokens"))
    assert "BlockSizeFlagMissing" in pod.codes()


def test_block_size_above_the_mounted_drafters(tmp_path):
    d, _ = pair("qwen3.6-27b")
    small = copy.deepcopy(d)
    small["block_size"] = 8
    pod = rendered_pod(tmp_path, "sglang", mounted_drafter=small)
    assert "BlockSizeAboveTrained" in pod.codes("error", "--allow-digest-mismatch")


def test_target_layer_ids_changed(tmp_path):
    d, _ = pair("qwen3.6-27b")
    moved = copy.deepcopy(d)
    moved["dflash_config"]["target_layer_ids"] = [i + 1 for i in d["dflash_config"]["target_layer_ids"]]
    pod = rendered_pod(tmp_path, "vllm", mounted_drafter=moved)
    assert "TargetLayerIdsChanged" in pod.codes("error", "--allow-digest-mismatch")


def test_vllm_mixed_layers_need_the_v2_runner_env(tmp_path):
    pod = rendered_pod(tmp_path, "vllm")
    pod.engine_config["env"].pop("VLLM_USE_V2_MODEL_RUNNER")
    pod.write()
    p = run_runtime(*pod.preflight_argv())
    assert p.returncode == 1
    assert "MixedLayersEnvMissing" in pod.termination_log.read_text()


def test_vllm_speculative_config(tmp_path):
    pod = rendered_pod(tmp_path, "vllm")

    def tokens(n):
        def edit(args):
            i = args.index("--speculative-config")
            sc = json.loads(args[i + 1])
            sc["num_speculative_tokens"] = n
            return args[: i + 1] + [json.dumps(sc)] + args[i + 2:]
        return edit

    pod.edit_args(tokens(7))
    assert "BlockSizeFlagMismatch" in pod.codes()
    pod.edit_args(drop_flag("--speculative-config"))
    assert "SpeculativeConfigMissing" in pod.codes()


def test_digest_mismatch_only(tmp_path):
    d, _ = pair("qwen3.6-27b")
    touched = copy.deepcopy(d)
    touched["_name_or_path"] = "somewhere/else"
    pod = rendered_pod(tmp_path, "sglang", mounted_drafter=touched)
    assert pod.codes() == {"ConfigDigestMismatch"}
    res = pod.preflight("--allow-digest-mismatch")
    assert res.ok and "ConfigDigestMismatch" in {p.code for p in res.problems if p.severity == "warning"}
    p = run_runtime(*pod.preflight_argv("--allow-digest-mismatch"))
    assert p.returncode == 0, p.stderr


def test_checker_errors_on_the_mounted_pair(tmp_path):
    pod = rendered_pod(tmp_path, "sglang")
    _, t = pair("qwen3.6-27b")
    bad = copy.deepcopy(t)
    (bad.get("text_config") or bad)["hidden_size"] = 1234
    pod.write(target=bad)
    errs = pod.codes()
    assert "HiddenSizeMismatch" in errs and "ConfigDigestMismatch" in errs


def test_missing_mount_and_bad_engine_config(tmp_path):
    pod = rendered_pod(tmp_path, "sglang")
    (pod.drafter_dir / "config.json").unlink()
    p = run_runtime(*pod.preflight_argv())
    assert p.returncode == 1 and "ConfigNotFound" in pod.termination_log.read_text()
    pod.ec_path.write_text("{not json")
    p = run_runtime(*pod.preflight_argv(), "-o", "json")
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert not doc["ok"] and {"EngineConfigInvalid", "ConfigNotFound"} <= {x["code"] for x in doc["problems"]}


def test_message_fits_one_screen_and_the_termination_log():
    res = PreflightResult()
    for i in range(60):
        res.add("error", f"Code{i}", "engine args", "x" * 300)
    text = res.message()
    assert len(text.splitlines()) <= 22 and "more" in text.splitlines()[-1]
    cut = termination_text(text)
    assert len(cut.encode()) <= TERMINATION_LIMIT and cut.startswith("specdeploy preflight FAILED")
    assert termination_text("short") == "short"


def test_flag_values_forms():
    argv = ["--a", "1", "--b=2", "--c_d", "3", "--a", "4", "--last"]
    assert flag_values(argv, ["--a"]) == [("--a", "1"), ("--a", "4")]
    assert flag_values(argv, ["--b"]) == [("--b", "2")]
    assert flag_values(argv, ["--c-d"]) == [("--c_d", "3")]
    assert flag_values(argv, ["--last"]) == [("--last", None)]


def test_transformers_view_is_compared_where_transformers_is_installed(monkeypatch):
    """The runtime images carry transformers (the engines load drafter configs through it): preflight
    builds the drafter config with it and compares the sliding-window fields with the core's copy."""
    from specdeploy.core import modelconfig
    from specdeploy_runtime.preflight import check_transformers_view

    d, _ = pair("qwen3.6-27b")
    res = PreflightResult()
    check_transformers_view(d, res)
    assert res.problems == []  # transformers 5.19 and the core agree on the example
    # a core copy that drifted from transformers is caught
    real = modelconfig.hf_view
    monkeypatch.setattr(modelconfig, "hf_view", lambda doc, base, mt: real({**doc, "use_sliding_window": False}, base, mt))
    res = PreflightResult()
    check_transformers_view(d, res)
    assert [p.code for p in res.problems] == ["TransformersViewMismatch"]
