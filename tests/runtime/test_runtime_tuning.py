"""Tuned fused-MoE kernels: the engines' file naming and directory layout, the tuning command, the
result envelope, and `specdeploy-runtime tune` on a machine without a GPU (exit 2, nothing written)."""

from __future__ import annotations

import json

import pytest

from testkit import pair
from runtime_helpers import run_runtime
from specdeploy.core import gpus
from specdeploy_runtime import tuning as tn

KIMI = pair("kimi-k2.6")[1]  # DeepseekV3 text config: 384 routed + 1 shared, moe_intermediate_size 2048, int4 w4a16


def qwen3_moe(**extra) -> dict:
    """A Qwen3-30B-A3B-shaped config (128 experts, moe_intermediate_size 768)."""
    return {"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 768, "intermediate_size": 6144, "hidden_size": 2048, "torch_dtype": "bfloat16",
            **extra}


def deepseek_fp8() -> dict:
    return {"architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 256, "n_shared_experts": 1,
            "moe_intermediate_size": 2048, "intermediate_size": 18432, "hidden_size": 7168,
            "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}


# ---------------------------------------------------------------- E and N


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_n_is_the_expert_intermediate_size_per_tp_shard(tp):
    for engine in tn.ENGINES:
        s = tn.moe_shape(qwen3_moe(), engine, tp)
        assert (s.E, s.N, s.dtype, s.block_shape) == (128, 768 // tp, None, None)


def test_moe_intermediate_size_wins_over_the_dense_intermediate_size():
    assert tn.moe_shape(qwen3_moe(), "vllm", 1).N == 768
    mixtral = {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "intermediate_size": 14336}
    assert tn.moe_shape(mixtral, "vllm", 2) == tn.MoeShape(E=8, N=7168)  # vLLM's README: Mixtral TP2 -> N=7168


def test_sglang_fuses_the_shared_expert_for_deepseek_v3():
    assert tn.moe_shape(deepseek_fp8(), "sglang", 8).E == 257
    assert tn.moe_shape(deepseek_fp8(), "sglang", 8, shared_expert_fusion=False).E == 256
    assert tn.moe_shape(deepseek_fp8(), "vllm", 8).E == 256


def test_text_config_and_quantization_of_a_real_target():
    s = tn.moe_shape(KIMI, "sglang", 8)
    assert (s.E, s.N, s.dtype, s.block_shape) == (385, 256, "int4_w4a16", None)
    assert tn.moe_shape(KIMI, "vllm", 8) == tn.MoeShape(E=384, N=256, dtype="int4_w4a16")


def test_fp8_block_quantization():
    s = tn.moe_shape(deepseek_fp8(), "vllm", 8)
    assert (s.dtype, s.block_shape, s.N) == ("fp8_w8a8", (128, 128), 256)


def test_dense_and_untunable_targets():
    _, dense = pair("qwen3-8b")
    with pytest.raises(tn.NotMoE):
        tn.moe_shape(dense, "sglang", 1)
    with pytest.raises(tn.UnsupportedShape, match="not divisible"):
        tn.moe_shape(qwen3_moe(), "vllm", 5)
    with pytest.raises(tn.UnsupportedShape, match="mxfp4"):
        tn.moe_shape(qwen3_moe(quantization_config={"quant_method": "mxfp4"}), "vllm", 1)


# ---------------------------------------------------------------- naming and layout, every GPU profile


SHAPES = {
    "bf16": (tn.MoeShape(E=128, N=768), "", ""),
    "fp8-block": (tn.MoeShape(E=256, N=256, dtype="fp8_w8a8", block_shape=(128, 128)),
                  ",dtype=fp8_w8a8,block_shape=[128, 128]", ",dtype=fp8_w8a8,block_shape=[128,128]"),
    "int4": (tn.MoeShape(E=384, N=256, dtype="int4_w4a16"), ",dtype=int4_w4a16", ",dtype=int4_w4a16"),
}


@pytest.mark.parametrize("profile", sorted(k for k, p in gpus.PROFILES.items() if p.accelerator))  # tuning is GPU-only
@pytest.mark.parametrize("shape_id", sorted(SHAPES))
def test_file_names_for_every_profile(profile, shape_id):
    prof = gpus.PROFILES[profile]
    shape, sg_suffix, vl_suffix = SHAPES[shape_id]
    head = f"E={shape.E},N={shape.N},device_name={prof.device_name}"
    assert tn.config_file_name("sglang", shape, prof.device_name) == f"{head}{sg_suffix}.json"
    assert tn.config_file_name("vllm", shape, prof.device_name) == f"{head}{vl_suffix}.json"
    # torch's device name (spaces) gives the same file name as the profile's
    assert tn.config_file_name("sglang", shape, prof.display_name) == tn.config_file_name("sglang", shape, prof.device_name)
    assert tn.config_file_name("vllm", shape, prof.display_name) == tn.config_file_name("vllm", shape, prof.device_name)
    # SGLang: below $SGLANG_MOE_CONFIG_DIR/configs/triton_<X_Y_Z>/; vLLM: flat in $VLLM_TUNED_CONFIG_FOLDER
    name = tn.config_file_name("sglang", shape, prof.device_name)
    assert tn.relative_path("sglang", name, "3.5.1") == f"configs/triton_3_5_1/{name}"
    assert tn.relative_path("vllm", name) == name


def test_the_brief_example_and_device_name_rules():
    assert tn.config_file_name("vllm", tn.MoeShape(E=128, N=768, dtype="fp8_w8a8"), "NVIDIA B300 SXM6 AC") == \
        "E=128,N=768,device_name=NVIDIA_B300_SXM6_AC,dtype=fp8_w8a8.json"
    # vLLM: runs of spaces and '/' -> '_', any H200 variant -> NVIDIA_H200; SGLang: spaces only
    assert tn.device_file_name("vllm", "NVIDIA H200 NVL") == "NVIDIA_H200"
    assert tn.device_file_name("sglang", "NVIDIA H200 NVL") == "NVIDIA_H200_NVL"
    assert tn.device_file_name("vllm", "NVIDIA A100-SXM4-80GB / x") == "NVIDIA_A100-SXM4-80GB_x"
    assert tn.CONFIG_DIR_ENV == {"sglang": "SGLANG_MOE_CONFIG_DIR", "vllm": "VLLM_TUNED_CONFIG_FOLDER"}
    with pytest.raises(ValueError):
        tn.relative_path("sglang", "x.json")  # SGLang needs the triton version
    assert tn.triton_dir("3.4.0+git123") == "triton_3_4_0"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_names_match_the_engines_own_naming(engine):
    """Every file name the engines' own get_config_file_name produced (recorded into the flag snapshot
    by e2e/flagdrift/run.sh from the real packages: tuning_names.py) equals ours."""
    from specdeploy.core.engines import get_engine
    from specdeploy.core.flagdrift import load_snapshot

    recorded = load_snapshot(engine, get_engine(engine).newest_verified).get("tuning_file_names") or []
    assert len(recorded) >= 12, "no tuned-file names recorded: run e2e/flagdrift/run.sh"
    for case in recorded:
        shape = tn.MoeShape(E=case["E"], N=case["N"], dtype=case["dtype"],
                            block_shape=tuple(case["block_shape"]) if case["block_shape"] else None)
        assert tn.config_file_name(engine, shape, case["device"]) == case["file"], case


# ---------------------------------------------------------------- the tuning command


def test_tuning_commands_are_exec_form():
    sg = tn.tuning_command("sglang", "/tmp/m", 8, "/tmp/out", dtype="fp8_w8a8")
    assert sg == ["python3", "/opt/specdeploy/tuning/sglang/tuning_fused_moe_triton.py", "--model", "/tmp/m",
                  "--tp-size", "8", "--tune", "--dtype", "fp8_w8a8"]
    vl = tn.tuning_command("vllm", "/tmp/m", 2, "/tmp/out", batch_sizes=(1, 64))
    assert vl == ["python3", "/opt/specdeploy/tuning/vllm/benchmark_moe.py", "--model", "/tmp/m", "--tp-size", "2",
                  "--tune", "--batch-size", "1", "64", "--save-dir", "/tmp/out"]
    with pytest.raises(tn.UnsupportedShape, match="cannot tune dtype int4_w4a16"):
        tn.tuning_command("vllm", "/tmp/m", 8, "/tmp/out", dtype="int4_w4a16")


def test_collect_refuses_a_differently_named_file(tmp_path):
    (tmp_path / "E=256,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8.json").write_text("{}")
    with pytest.raises(RuntimeError, match="will look up E=257"):
        tn.collect_results("sglang", str(tmp_path), "E=257,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8.json")
    assert tn.collect_results("sglang", str(tmp_path), "E=256,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8.json") == b"{}"


# ---------------------------------------------------------------- results: envelope, ConfigMap, install


def tuned_file() -> bytes:
    cfg = {str(m): {"BLOCK_SIZE_M": 16 if m < 64 else 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                    "num_warps": 4, "num_stages": 3}
           for m in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)}
    return (json.dumps(cfg, indent=4) + "\n").encode()


def test_envelope_fits_the_termination_message_and_round_trips(tmp_path):
    rel = "configs/triton_3_5_1/E=257,N=256,device_name=NVIDIA_B300_SXM6_AC,dtype=fp8_w8a8,block_shape=[128, 128].json"
    content = tuned_file()
    assert 2000 < len(content) < 6000  # a tuned file is a few KB
    env = tn.encode_envelope("sglang", "NVIDIA_B300_SXM6_AC", "3.5.1", {rel: content}, key="k" * 64)
    assert len(env.encode()) < tn.TERMINATION_LIMIT
    meta, files = tn.decode_envelope(env)
    assert files == {rel: content} and meta["tritonVersion"] == "3.5.1"
    data = tn.configmap_data(files, meta)
    assert all(__import__("re").fullmatch(r"[-._a-zA-Z0-9]+", k) for k in data)  # ConfigMap key syntax
    src = tmp_path / "src"
    src.mkdir()
    for k, v in data.items():
        (src / k).write_text(v)
    assert tn.install_from_configmap(str(src), str(tmp_path / "dest")) == [rel]
    assert (tmp_path / "dest" / rel).read_bytes() == content
    # not created yet (optional ConfigMap volume): nothing installed, no error
    (tmp_path / "empty").mkdir()
    assert tn.install_from_configmap(str(tmp_path / "empty"), str(tmp_path / "dest2")) == []


@pytest.mark.parametrize("bad", ["../escape.json", "/abs.json", "a/../../b.json"])
def test_envelope_rejects_unsafe_paths(bad):
    with pytest.raises(ValueError, match="unsafe"):
        tn.encode_envelope("vllm", "NVIDIA_B200", None, {bad: b"{}"})


def test_install_tuned_cli(tmp_path):
    rel = "E=128,N=768,device_name=NVIDIA_B200.json"
    data = tn.configmap_data({rel: tuned_file()}, {"engine": "vllm"})
    src = tmp_path / "src"
    src.mkdir()
    for k, v in data.items():
        (src / k).write_text(v)
    p = run_runtime("install-tuned", "--src", str(src), "--dest", str(tmp_path / "d"), "--termination-log", str(tmp_path / "tl"))
    assert p.returncode == 0 and rel in p.stdout
    assert (tmp_path / "d" / rel).exists()


# ---------------------------------------------------------------- tune without a GPU


def test_tune_without_a_gpu_exits_2_and_writes_nothing(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(qwen3_moe()))
    out = tmp_path / "out"
    p = run_runtime("tune", "--engine", "sglang", "--tp", "2", "--target-dir", str(tmp_path / "m"), "--out-dir", str(out),
                    "--work-dir", str(tmp_path), "--termination-log", str(tmp_path / "tl"),
                    env={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no GPU" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()
    assert (tmp_path / "tl").read_text().startswith("no GPU")


def test_tune_dense_target_exits_3(tmp_path):
    _, dense = pair("qwen3-8b")
    (tmp_path / "config.json").write_text(json.dumps(dense))
    p = run_runtime("tune", "--engine", "vllm", "--tp", "1", "--target-dir", str(tmp_path), "--termination-log", str(tmp_path / "tl"))
    assert p.returncode == 3 and "no routed experts" in p.stderr
