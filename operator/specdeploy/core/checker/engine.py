"""Engine release rules on the drafter (pure): releases that lose the speed-up or cannot load it, the env
it needs, its hidden activation, and the draft attention backend."""

from __future__ import annotations

from .. import engines as eng
from ..modelconfig import FULL, SLIDING, DrafterConfig
from .options import CPU, Options
from .results import D, S, Out


def check_engine_release(d: DrafterConfig, o: Options, info, row, types: tuple[str, ...], out: Out) -> dict[str, str]:
    """Engine releases that lose the speed-up or cannot load the drafter; the env the drafter needs."""
    env: dict[str, str] = {}
    if info is None or row is None:
        return env
    has_sliding = SLIDING in types
    mixed = has_sliding and FULL in types
    cpu = eng.cpu_build(info.name) if o.gpu == CPU else None
    if cpu is not None and mixed and not cpu.mixed_layers:
        out.err("MixedLayersUnsupported", S, "spec.gpu.type",
                f"the drafter mixes sliding and full attention layers, which {info.display_name} serves only on its V2 "
                f"model runner; the CPU build ({cpu.distribution}) has no Triton and runs V1 only. Use a GPU type, or a "
                "drafter whose layers are all sliding or all full")
        return env
    if info.name == "vllm" and has_sliding:
        if not row.sliding_window_layers:
            fixed = info.first_release(lambda r: r.sliding_window_layers)
            out.err("SlidingWindowUnsupportedByEngine", S, "spec.engine.version",
                    f"vLLM {o.engine_version} runs DFlash sliding-window layers as full attention (models/qwen3_dflash.py "
                    f"has no per-layer window): acceptance drops once the context exceeds the window. Use vLLM >= {fixed}")
        elif mixed and row.mixed_layers_env is None:
            fixed = info.first_release(lambda r: r.sliding_window_layers and r.mixed_layers_env is not None)
            out.err("MixedLayersUnsupported", S, "spec.engine.version",
                    f"vLLM {o.engine_version} raises NotImplementedError for drafters mixing sliding and full layers "
                    f"(models/qwen3_dflash.py _resolve_layer_attention); use vLLM >= {fixed}")
        elif mixed:
            env.update(row.mixed_layers_env or {})
            if env:
                out.info("V2ModelRunnerEnabled", D, d.layer_types.path if d.layer_types else "$.layer_types",
                         "the drafter mixes sliding and full attention layers: rendering "
                         + ", ".join(f"{k}={v}" for k, v in env.items()) + " (vLLM raises NotImplementedError otherwise)")
    if d.format == "dflash":
        for i, arch in enumerate(d.architectures):
            if "dflash" in arch.lower() or row.drafter_architectures is not None:
                if not info.supports_drafter(row, arch):
                    out.err("DrafterArchitectureUnsupported", D, f"$.architectures[{i}]",
                            f"{info.display_name} {o.engine_version} does not serve drafter architecture {arch!r}; "
                            f"it serves {', '.join(sorted(row.drafter_architectures or ()))}. Use another engine or release")
                break
    return env


def check_hidden_act(d: DrafterConfig, o: Options, info, row, out: Out) -> None:
    """The drafter's hidden_act is one the engine release's DFlash model implements."""
    acts = row.hidden_acts if row is not None else frozenset({"silu", "swigluoai"})
    if d.hidden_act is not None and d.hidden_act.value not in acts:
        who = f"{info.display_name} {o.engine_version}'" if row is not None else "the engines'"
        out.err("HiddenActUnsupported", D, d.hidden_act.path,
                f"hidden_act {d.hidden_act.value!r} is not supported by {who} DFlash model; use a drafter with "
                f"hidden_act {' or '.join(sorted(acts))}")


def check_backend(d: DrafterConfig, o: Options, info, row, types: tuple[str, ...], backend: str | None, out: Out) -> None:
    """The draft attention backend (asked for or derived) is one the engine release serves for this drafter."""
    if info is None or row is None:
        return
    if o.draft_attention_backend and o.draft_attention_backend not in row.draft_attention_backends:
        if info.name == "sglang" and o.draft_attention_backend == "trtllm_mha" and row.trtllm_mha_draft == "never":
            out.err("AttentionBackendUnsupportedByEngine", S, "spec.speculation.draftAttentionBackend",
                    f"SGLang {o.engine_version} refuses trtllm_mha as DFLASH draft backend and silently falls back "
                    "(arg_groups/speculative_hook.py); use one of "
                    f"{', '.join(sorted(row.draft_attention_backends))} or SGLang >= 0.5.17")
        else:
            out.err("AttentionBackendUnsupportedByEngine", S, "spec.speculation.draftAttentionBackend",
                    f"{info.display_name} {o.engine_version} has no draft attention backend {o.draft_attention_backend!r} "
                    f"that serves DFlash's bidirectional layers; use one of "
                    f"{', '.join(sorted(row.draft_attention_backends))} or leave it unset")
    if info.name == "sglang" and backend == "trtllm_mha" and row.trtllm_mha_draft == "sliding_or_causal":
        n = d.num_hidden_layers.value if d.num_hidden_layers else None
        all_sliding = bool(types) and len(types) == n and set(types) == {SLIDING}
        if not (all_sliding or d.text_is_causal is True):
            out.err("DraftAttentionBackendNeedsCausal", S, "spec.speculation.draftAttentionBackend",
                    "SGLang keeps trtllm_mha as draft backend only when every draft layer is sliding_attention or the "
                    "drafter's config says is_causal: true (arg_groups/speculative_hook.py; dflash_config.causal is not "
                    "read); otherwise it silently falls back. Use fa4, flashinfer or triton")
