"""Tuned fused-MoE kernel configs (pure, standard library only): the engines' naming, the directory
each engine reads, the tuning command, and the result envelope. Shared by the renderer (the tuning
Job, the tuned-kernels ConfigMap) and the pod runtime (``specdeploy_runtime.tuning``: running the
tuner on the GPU node and installing its files).

Facts (paths relative to each engine's site-packages; ``e2e/flagdrift/ENGINE-FACTS.md``):

SGLang 0.5.23
    Lookup ``sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py``:
    ``get_config_file_name`` (36-51) names the file
    ``E={E},N={N},device_name={name}[,dtype=..][,block_shape=[n, k]][,per_channel_quant=True][_down].json``
    with ``name = torch.cuda.get_device_name().replace(" ", "_")`` and ``block_shape`` written as a
    Python list (``[128, 128]``, with a space); ``get_moe_configs`` (55-135) reads it from
    ``$SGLANG_MOE_CONFIG_DIR/configs/triton_<X_Y_Z>/`` (default: the package directory; the
    triton version of the running process, then other ``triton_*`` folders newest first).
    ``try_get_optimal_moe_config`` (264-301) takes ``E, _, N = w2_shape``: E = experts held by
    this rank (routed experts, plus one fused shared expert for the DeepSeek-V3/GLM-4.5 family
    when shared-expert fusion is on), N = ``w2.shape[2]`` = the expert intermediate size per
    TP shard (``moe_intermediate_size / tp``).
    Tuning: ``benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py`` (repository, not the
    wheel) with ``common_utils.py``: ``shard_intermediate_size = 2 * intermediate_size // tp``
    (gate and up fused) and the file name uses ``N = shard_intermediate_size // 2``
    (``get_config_filename``); it writes into the current directory.

vLLM 0.33.0
    Lookup ``vllm/model_executor/layers/fused_moe/fused_moe.py``: ``get_config_file_name``
    (1095-1106) ``E={E},N={N},device_name={name}[,dtype=..][,block_shape=[n,k]].json`` (no spaces
    in block_shape) with runs of whitespace and ``/`` replaced by ``_``
    (``utils/platform_utils.py:69-74``) and any ``*H200*`` device collapsed to ``NVIDIA_H200``;
    ``get_moe_configs`` (1110-1146) tries ``$VLLM_TUNED_CONFIG_FOLDER/<name>`` first (env at
    ``envs.py:1978``), then the package's ``configs/``; no triton-version folder.
    ``try_get_optimal_moe_config`` (1421-1441): ``E, _, N = w2_shape`` (``N * 2`` for
    int4_w4a16, whose w2 packs two values per byte), i.e. the same E and N as SGLang, without
    shared-expert fusion. Dtype suffixes: ``_get_config_dtype_str``
    (``fused_moe/config.py:42-71``): fp8_w8a8, fp8_w8a16, int8_w8a16, int4_w4a16, float32.
    Tuning: ``benchmarks/kernels/benchmark_moe.py`` (repository): ``shard_intermediate_size =
    2 * intermediate_size // tp`` and ``save_configs`` names the file with
    ``shard_intermediate_size // 2``, written into ``--save-dir``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from .names import TUNED_KERNELS_KIND
from specdeploy.core.errors import Permanent

ENGINES = ("sglang", "vllm")

# The environment variable each engine reads the tuned-config directory from.
CONFIG_DIR_ENV = {"sglang": "SGLANG_MOE_CONFIG_DIR", "vllm": "VLLM_TUNED_CONFIG_FOLDER"}

# Where the runtime images carry the engines' tuning scripts (images/runtime/*/Dockerfile adds
# them from the engine's release tag: they are in the engines' repositories, not in their wheels).
TUNING_SCRIPT_DIR = "/opt/specdeploy/tuning"
TUNING_SCRIPTS = {
    "sglang": f"{TUNING_SCRIPT_DIR}/sglang/tuning_fused_moe_triton.py",
    "vllm": f"{TUNING_SCRIPT_DIR}/vllm/benchmark_moe.py",
}

# Dtype suffixes each engine's tuner can produce (its --dtype choices other than "auto").
TUNER_DTYPES = {
    "sglang": ("fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"),
    "vllm": ("fp8_w8a8", "int8_w8a16"),
}

# SGLang fuses the shared expert into the routed-expert tensor for these architectures
# (benchmark/kernels/fused_moe_triton/common_utils.py get_model_config: E = n_routed_experts + 1).
SGLANG_SHARED_FUSION_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM",
})

ENVELOPE_KIND = TUNED_KERNELS_KIND
MANIFEST_KEY = "manifest.json"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_LIMIT = 4096


class NotMoE(Permanent, ValueError):
    """The target has no routed experts: there is no fused-MoE kernel to tune."""


class UnsupportedShape(Permanent, ValueError):
    """The target's experts do not run on the Triton fused-MoE kernel these files tune."""


@dataclass(frozen=True)
class MoeShape:
    """What the engines key a tuned fused-MoE config on."""

    E: int  # experts held by one rank (routed, + fused shared expert on SGLang where applicable)
    N: int  # expert intermediate size per tensor-parallel shard (w2.shape[2])
    dtype: str | None = None  # fp8_w8a8, int4_w4a16, ...; None: the model's bf16/fp16 weights
    block_shape: tuple[int, int] | None = None  # block quantization [n, k]
    per_channel_quant: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["block_shape"] = list(self.block_shape) if self.block_shape else None
        return d


def _text_config(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    tc = doc.get("text_config")
    return tc if isinstance(tc, Mapping) else doc


def _architecture(doc: Mapping[str, Any]) -> str:
    for d in (_text_config(doc), doc):
        arch = d.get("architectures")
        if isinstance(arch, list) and arch and isinstance(arch[0], str):
            return arch[0]
    return ""


def routed_experts(doc: Mapping[str, Any]) -> int | None:
    """Routed experts of a config.json (text_config first), or None for a dense model."""
    tc = _text_config(doc)
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        v = tc.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 1:
            return v
    ffn = tc.get("ffn_config")
    if isinstance(ffn, Mapping) and isinstance(ffn.get("moe_num_experts"), int):
        return ffn["moe_num_experts"]
    return None


def expert_intermediate_size(doc: Mapping[str, Any]) -> int | None:
    tc = _text_config(doc)
    for key in ("moe_intermediate_size", "intermediate_size"):
        v = tc.get(key)
        if isinstance(v, list) and v:  # HunYuan: per-layer list
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    ffn = tc.get("ffn_config")
    if isinstance(ffn, Mapping) and isinstance(ffn.get("ffn_hidden_size"), int):
        return ffn["ffn_hidden_size"]
    return None


def quantization(doc: Mapping[str, Any]) -> tuple[str | None, tuple[int, int] | None]:
    """(dtype suffix, block shape) the Triton fused-MoE path uses for this checkpoint."""
    q = doc.get("quantization_config") or _text_config(doc).get("quantization_config")
    if not q:
        dt = _text_config(doc).get("torch_dtype") or doc.get("torch_dtype")
        return ("float32" if dt == "float32" else None), None
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        bs = q.get("weight_block_size")
        if bs is not None:
            if not (isinstance(bs, list) and len(bs) == 2 and all(isinstance(x, int) for x in bs)):
                raise UnsupportedShape(f"quantization_config.weight_block_size {bs!r} is not [n, k]")
            return "fp8_w8a8", (bs[0], bs[1])
        return "fp8_w8a8", None
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        first = next(iter(groups.values()), {}) if isinstance(groups, Mapping) else {}
        w = (first or {}).get("weights") or {}
        a = (first or {}).get("input_activations")
        if w.get("type") == "int" and w.get("num_bits") == 4 and not a:
            # the engines drop a block_shape with a zero entry from the name ([0, group_size])
            return "int4_w4a16", None
        if w.get("type") == "int" and w.get("num_bits") == 8 and not a:
            return "int8_w8a16", None
        if w.get("type") == "float" and w.get("num_bits") == 8:
            return "fp8_w8a8", None
    raise UnsupportedShape(
        f"quantization {method or '(unnamed)'} does not run on the Triton fused-MoE kernel these files tune "
        "(its experts use another kernel): nothing to tune")


def moe_shape(target_doc: Mapping[str, Any], engine: str, tp: int, *, dtype: str | None = None,
              shared_expert_fusion: bool = True) -> MoeShape:
    """E and N as ``engine`` computes them for ``target_doc`` at tensor-parallel size ``tp`` (no EP)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    e = routed_experts(target_doc)
    if e is None:
        raise NotMoE(f"{_architecture(target_doc) or 'the target'} has no routed experts: there is no fused-MoE kernel to tune")
    inter = expert_intermediate_size(target_doc)
    if inter is None:
        raise UnsupportedShape("config.json names no moe_intermediate_size / intermediate_size")
    if tp < 1 or inter % tp:
        raise UnsupportedShape(f"expert intermediate size {inter} is not divisible by the tensor-parallel size {tp}")
    q_dtype, block = quantization(target_doc)
    if dtype is not None:
        q_dtype = dtype
    if engine == "sglang" and shared_expert_fusion and _architecture(target_doc) in SGLANG_SHARED_FUSION_ARCHITECTURES:
        tc = _text_config(target_doc)
        if int(tc.get("n_shared_experts") or 0) > 0:
            e += 1
    return MoeShape(E=e, N=inter // tp, dtype=q_dtype, block_shape=block)


def device_file_name(engine: str, device_name: str) -> str:
    """The ``device_name=`` part of the file name from ``torch.cuda.get_device_name()``."""
    if engine == "sglang":
        return device_name.replace(" ", "_")
    name = re.sub(r"[\s/]+", "_", device_name)
    if "H200" in name.split("_"):
        name = "NVIDIA_H200"
    return name


def config_file_name(engine: str, shape: MoeShape, device_name: str) -> str:
    """The file name ``engine`` looks up; ``device_name`` as torch reports it (spaces allowed) or
    already in file form (``NVIDIA_B300_SXM6_AC``, as the GPU profiles carry it)."""
    dev = device_file_name(engine, device_name)
    dtype = f",dtype={shape.dtype}" if shape.dtype else ""
    block = ""
    if shape.block_shape and all(shape.block_shape):
        n, k = shape.block_shape
        block = f",block_shape=[{n}, {k}]" if engine == "sglang" else f",block_shape=[{n},{k}]"
    pcq = ",per_channel_quant=True" if (engine == "sglang" and shape.per_channel_quant) else ""
    return f"E={shape.E},N={shape.N},device_name={dev}{dtype}{block}{pcq}.json"


def triton_dir(triton_version: str) -> str:
    """SGLang's per-triton folder: ``3.5.1`` -> ``triton_3_5_1``."""
    v = triton_version.split("+", 1)[0]
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", v):
        raise ValueError(f"triton version {triton_version!r} is not X.Y.Z")
    return "triton_" + v.replace(".", "_")


def relative_path(engine: str, file_name: str, triton_version: str | None = None) -> str:
    """Where the file goes below the directory the engine's env var names."""
    if engine == "sglang":
        if not triton_version:
            raise ValueError("SGLang keys tuned configs by triton version: give the engine image's triton version")
        return f"configs/{triton_dir(triton_version)}/{file_name}"
    return file_name


# ----------------------------------------------------------------- the tuning command


def tuning_command(engine: str, model_dir: str, tp: int, out_dir: str, *, dtype: str | None = None,
                   python: str = "python3", script: str | None = None, batch_sizes: Sequence[int] = (),
                   trust_remote_code: bool = False, disable_shared_experts_fusion: bool = False) -> list[str]:
    """Exec-form argv of the engine's own tuner. SGLang's writes into its working directory
    (run it with cwd=out_dir); vLLM's into ``--save-dir``."""
    script = script or TUNING_SCRIPTS[engine]
    argv = [python, script, "--model", model_dir, "--tp-size", str(tp), "--tune"]
    if dtype:
        if dtype not in TUNER_DTYPES[engine]:
            raise UnsupportedShape(f"{engine}'s tuner cannot tune dtype {dtype} (it tunes {', '.join(TUNER_DTYPES[engine])} "
                                   "and unquantized weights)")
        argv += ["--dtype", dtype]
    if batch_sizes:
        argv += ["--batch-sizes" if engine == "sglang" else "--batch-size", *map(str, batch_sizes)]
    if engine == "vllm":
        argv += ["--save-dir", out_dir]
        if trust_remote_code:
            argv.append("--trust-remote-code")
    elif disable_shared_experts_fusion:
        argv.append("--disable-shared-experts-fusion")
    return argv


# ----------------------------------------------------------------- results: envelope and layout


def _safe_relpath(rel: str) -> str:
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise ValueError(f"unsafe path in tuned-kernel manifest: {rel!r}")
    return rel


def configmap_key(rel: str) -> str:
    """A ConfigMap key for a tuned file (keys allow only [-._a-zA-Z0-9]; the names have '=' and ',')."""
    return "kernel-" + hashlib.sha256(rel.encode()).hexdigest()[:16] + ".json"


def encode_envelope(engine: str, device_name: str, triton_version: str | None, files: Mapping[str, bytes],
                    key: str | None = None) -> str:
    """The Job's result for its termination message: relative path -> gzip+base64 content."""
    doc = {"kind": ENVELOPE_KIND, "engine": engine, "deviceName": device_name, "tritonVersion": triton_version,
           "key": key, "files": {_safe_relpath(r): base64.b64encode(gzip.compress(c, 9)).decode() for r, c in sorted(files.items())}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def decode_envelope(text: str) -> tuple[dict, dict[str, bytes]]:
    """(metadata, relative path -> content) from :func:`encode_envelope`; ValueError if malformed."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not a tuned-kernels result: {e}") from None
    if not isinstance(doc, dict) or doc.get("kind") != ENVELOPE_KIND or not isinstance(doc.get("files"), dict):
        raise ValueError("not a tuned-kernels result")
    files = {}
    for rel, blob in doc["files"].items():
        content = gzip.decompress(base64.b64decode(blob))
        json.loads(content)  # every tuned file is a JSON object M -> kernel config
        files[_safe_relpath(rel)] = content
    meta = {k: v for k, v in doc.items() if k != "files"}
    return meta, files


def configmap_data(files: Mapping[str, bytes], meta: Mapping[str, Any]) -> dict[str, str]:
    """ConfigMap ``data`` holding tuned files under safe keys plus ``manifest.json`` (key -> path)."""
    data = {configmap_key(rel): content.decode() for rel, content in files.items()}
    manifest = {**{k: v for k, v in meta.items() if k != "kind"}, "kind": ENVELOPE_KIND,
                "files": {configmap_key(rel): rel for rel in files}}
    data[MANIFEST_KEY] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    return data
