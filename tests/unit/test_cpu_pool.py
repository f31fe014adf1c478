"""The CPU pool (spec.gpu.type: cpu): vLLM's CPU build, no GPU anywhere in the pod, clear refusals."""

from __future__ import annotations

import json

import pytest
import yaml

from testkit import pair
from specdeploy.core import flagdrift
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core import engines as eng
from specdeploy.core.checker import Options, analyze
from specdeploy.core.render import RenderError, cpu_kv_cache_gib, render
from specdeploy_dev import tinymodels
from specdeploy_dev.harness import ROOT

TINY = tinymodels.build_tiny_models()
TARGET = json.loads(TINY["tiny/target/config.json"])
TARGET_FLAT = json.loads(TINY["tiny/target-flat/config.json"])
DRAFTER = json.loads(TINY["tiny/dflash-accept-all/config.json"])
GPU_WORDS = ("nvidia.com", "--tensor-parallel-size", "--gpu-memory-utilization", "CUDA", "NCCL", "gpu.product",
             "--attention-backend")


EXAMPLE = ROOT / "examples" / "dev" / "tiny-cpu.yaml"


def cpu_cr(**spec) -> SpeculativeDeployment:
    """examples/dev/tiny-cpu.yaml (validated here) with these spec changes (dicts merge one level)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    s = doc["spec"]
    s["engine"].pop("extraArgs")
    s.pop("pod")
    for k, v in spec.items():
        s[k] = {**s[k], **v} if isinstance(v, dict) and isinstance(s.get(k), dict) else v
    return SpeculativeDeployment.model_validate(doc)


def test_the_documented_example_renders_for_the_cpu_pool():
    cr = SpeculativeDeployment.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    c = engine(render(cr, TARGET_FLAT, DRAFTER))
    assert c["args"][0] == "tiny/target-flat" and "--enforce-eager" in c["args"]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in c["env"]


def engine(r) -> dict:
    [dep] = [o for o in r.objects if o["kind"] == "Deployment"]
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")


def template(r) -> dict:
    [dep] = [o for o in r.objects if o["kind"] == "Deployment"]
    return dep["spec"]["template"]


def codes(findings, severity: str = "error") -> set[str]:
    return {f.code for f in findings if f.severity.value == severity}


def test_cpu_pod_has_nothing_of_a_gpu():
    r = render(cpu_cr(), TARGET, DRAFTER)
    text = json.dumps(r.objects)
    assert not [w for w in GPU_WORDS if w in text]
    spec = template(r)["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec
    c = engine(r)
    assert c["command"] == ["vllm", "serve"]
    assert c["image"] == "ghcr.io/specdeploy/runtime:vllm-cpu-0.32.0"
    assert all(init["image"] == c["image"] for init in spec["initContainers"])
    assert c["args"][:1] == ["tiny/target-flat"]
    cfg = json.loads(c["args"][c["args"].index("--speculative-config") + 1])
    assert cfg == {"method": "dflash", "model": "tiny/dflash-accept-all", "num_speculative_tokens": 3}


def test_cpu_resources_default_and_kv_cache_from_memory():
    c = engine(render(cpu_cr(), TARGET, DRAFTER))
    assert c["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in c["env"]
    c = engine(render(cpu_cr(pod={"memory": "32Gi", "cpu": "8"}), TARGET, DRAFTER))
    assert c["resources"]["limits"] == {"cpu": "8", "memory": "32Gi"}
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "16"} in c["env"]


@pytest.mark.parametrize("memory,gib", [(None, 1), ("", 1), ("1Gi", 1), ("3Gi", 1), ("4Gi", 2), ("8G", 3),
                                        ("64Gi", 32), ("1.5Ti", 768), ("512Mi", 1), ("2000000000", 1), ("junk", 1)])
def test_cpu_kv_cache_gib(memory, gib):
    assert cpu_kv_cache_gib(memory) == gib


def test_gpu_pool_still_gets_gpu_everything():
    cr = cpu_cr(gpu={"type": "b300", "count": 1}, engine={"version": "0.33.0"})
    c = engine(render(cr, TARGET, DRAFTER))
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "--tensor-parallel-size" in c["args"]
    assert not [e for e in c["env"] if e["name"] == "VLLM_CPU_KVCACHE_SPACE"]


def test_rendered_cpu_command_matches_the_vllm_cpu_snapshot():
    r = render(cpu_cr(engine={"extraArgs": ["--enforce-eager"]}), TARGET, DRAFTER)
    ec = r.engine_config
    assert flagdrift.check_argv("vllm-cpu", "0.32.0", ec.args, ec.env) == []
    # the check can fail: a flag the CPU build's parser does not know
    assert flagdrift.check_argv("vllm-cpu", "0.32.0", [*ec.args, "--no-such-flag"], ec.env)


def test_sglang_has_no_cpu_build():
    with pytest.raises(RenderError) as e:
        render(cpu_cr(engine={"name": "sglang", "version": "0.5.23"}), TARGET, DRAFTER)
    [f] = [f for f in e.value.findings if f.code == "EngineNoCpuBuild"]
    assert f.path == "spec.gpu.type" and "vLLM only" in f.message and "spec.engine.name: vllm" in f.message


def test_vllm_version_without_a_cpu_build_is_refused():
    with pytest.raises(RenderError) as e:
        render(cpu_cr(engine={"version": "0.33.0"}), TARGET, DRAFTER)
    [f] = [f for f in e.value.findings if f.code == "EngineNoCpuBuild"]
    assert f.path == "spec.engine.version" and "set spec.engine.version: 0.32.0" in f.message


@pytest.mark.parametrize("field,value,code", [
    ("gpu_count", 2, "CpuPoolGpuCount"),
    ("draft_attention_backend", "FLASH_ATTN", "AttentionBackendUnsupportedByEngine"),
])
def test_cpu_pool_refusals(field, value, code):
    o = Options(**{"engine": "vllm", "engine_version": "0.32.0", "gpu": "cpu", "gpu_count": 1, field: value})
    r = analyze(DRAFTER, TARGET, o)
    assert code in codes(r.findings)


def test_mixed_layer_drafter_cannot_run_on_cpu():
    d, t = pair("qwen3.6-27b")  # five sliding layers and one full: the V2 runner only
    r = analyze(d, t, Options(engine="vllm", engine_version="0.32.0", gpu="cpu", gpu_count=1))
    [f] = [f for f in r.findings if f.code == "MixedLayersUnsupported"]
    assert f.path == "spec.gpu.type" and "V1 only" in f.message
    r = analyze(d, t, Options(engine="vllm", engine_version="0.32.0", gpu="b300", gpu_count=1))
    assert "MixedLayersUnsupported" not in codes(r.findings)


def test_cpu_version_is_verified_by_the_cpu_snapshot():
    assert eng.cpu_verified_versions("vllm")[-1] == "0.32.0"
    assert eng.cpu_verified_versions("sglang") == []
    r = analyze(DRAFTER, TARGET, Options(engine="vllm", engine_version="0.32.0", gpu="cpu", gpu_count=1))
    assert "EngineVersionUnverified" not in {f.code for f in r.findings}
    assert not codes(r.findings)


def test_no_weights_fit_check_on_cpu():
    d, t = pair("qwen3.6-27b")
    d = {**d, "layer_types": ["full_attention"] * len(d.get("layer_types") or [1])}
    d.pop("use_sliding_window", None)
    r = analyze(d, t, Options(engine="vllm", engine_version="0.32.0", gpu="cpu", gpu_count=1))
    assert not {"WeightsExceedGpuMemory", "LowKvCacheHeadroom"} & {f.code for f in r.findings}
