"""The EAGLE-3 gate (pure): architectures, aux-layer taps under each engine's convention, fc sizing,
hidden size and vocabularies, read from the vLLM 0.33.0 and SGLang 0.5.23 wheels.

Coordinates. A *capture index* c names the hidden state the target hands the drafter: c = 0 is the
embedding output, c = k is the output of decoder layer k - 1 (vLLM ``models/interfaces.py``
``EagleModelMixin._maybe_add_hidden_state`` called with ``idx + 1`` from e.g. ``models/llama.py``
forward; SGLang captures at the input of layer c, ``models/llama.py`` ``LlamaModel.forward``
``capture_output=... if i in self.layers_to_capture``, which is the same state). vLLM captures
c in 0..N, SGLang c in 0..N-1. Both default to (2, N // 2, N - 3) when no ids are configured
(vLLM ``SupportsEagle3.get_eagle3_default_aux_hidden_state_layers``; SGLang
``set_eagle3_layers_to_capture(None)``): that default is the canonical EAGLE-3 layout.

How configured ids become capture indices (methods-engines.md s2):
- vLLM V1 runner (``v1/worker/gpu_model_runner.py`` ``_get_eagle3_aux_layers_from_config``): top-level
  ``eagle_aux_hidden_state_layer_ids`` as given, else ``eagle_config.eagle_aux_hidden_state_layer_ids``
  as given.
- vLLM V2 runner (``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py``
  ``get_eagle3_aux_layers_from_config``): top-level ids as given, else ``eagle_config.layer_ids``;
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` is not read (the default applies).
- SGLang (``model_executor/model_runner_components/spec_aux_hidden_state.py``
  ``_resolve_eagle_aux_hidden_state``): only ``eagle_config.eagle_aux_hidden_state_layer_ids``; the
  target's ``set_eagle3_layers_to_capture`` adds 1 (``models/llama.py``, ``qwen3.py``, ...), except
  DeepSeek-V2/V3/Kimi (``models/deepseek_v2.py``) and GLM-4.7-Flash (``glm4_moe_lite.py``), which add 1
  only when the first id is 1, and gpt-oss (``gpt_oss.py``), which keeps them when max(ids) == N.
The ids' *writer* meant: top-level ids in vLLM's convention (speculators exports), ``eagle_config`` ids in
SGLang's (SpecForge/TorchSpec train and serve on SGLang).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..modelconfig import TargetConfig
from .capture import CAPTURE_PATH, ENGINE_NAME, RECORDED, is_older, capture_facts, target_capture, target_captures  # noqa: F401
from .family import Family
from .results import D, S, Out

# vLLM model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS (EAGLE-3 rows)
VLLM_EAGLE3_ARCHS = frozenset({
    "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM", "Eagle3Qwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
    "PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM",
})
# SGLang EntryClass of models/llama_eagle3.py and models/kimi_k25_eagle3.py
SGLANG_EAGLE3_ARCHS = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})
# vLLM transformers_utils/configs/speculators/algos.py update_eagle3: eagle3_arch_map
VLLM_SPECULATORS_EAGLE3_MODEL_TYPES = frozenset({"llama", "qwen3"})
# SGLang targets whose set_eagle3_layers_to_capture adds 1 only when ids[0] == 1
SGLANG_FIRST_ID_TARGETS = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
    "Glm4MoeLiteForCausalLM",
})
SGLANG_MAX_TARGETS = frozenset({"GptOssForCausalLM"})  # models/gpt_oss.py: as-is when max(ids) == N


def vllm_architecture(arch: str) -> str:
    """The name vLLM asks its registry for under method eagle3 (``transformers_utils/configs/eagle.py``
    ``EAGLEConfig.__init__``: ``Eagle3`` is prefixed unless the name starts or ends with it)."""
    return arch if (arch.startswith("Eagle3") or arch.endswith("Eagle3")) else f"Eagle3{arch}"


def canonical_taps(n: int) -> list[int]:
    return [2, n // 2, n - 3]


def _ids(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def sglang_reading(ids: list[int], target_arch: str | None, n: int) -> list[int]:
    """Capture indices SGLang's target model makes of ``eagle_config`` ids."""
    if target_arch in SGLANG_FIRST_ID_TARGETS:
        return [i + 1 for i in ids] if ids[0] == 1 else list(ids)
    if target_arch in SGLANG_MAX_TARGETS and max(ids) == n:
        return list(ids)
    return [i + 1 for i in ids]


def runner(o) -> str:
    """The vLLM model runner the deployment gets: V1 on the CPU build (no Triton: ``config/vllm.py``
    ``VllmConfig.use_v2_model_runner``), V2 on GPUs."""
    return "v1" if o.gpu == "cpu" else "v2"


def taps(doc: dict, engine: str, o, target_arch: str | None, n: int) -> tuple[list[int], str, str]:
    """(capture indices the engine uses, the JSONPath they come from or "default", the reading in words)."""
    ec = doc.get("eagle_config") if isinstance(doc.get("eagle_config"), dict) else {}
    top = _ids(doc.get("eagle_aux_hidden_state_layer_ids"))
    nested = _ids(ec.get("eagle_aux_hidden_state_layer_ids"))
    if engine == "vllm":
        if top:
            return top, "$.eagle_aux_hidden_state_layer_ids", "as given"
        if runner(o) == "v1":
            if nested:
                return nested, "$.eagle_config.eagle_aux_hidden_state_layer_ids", "as given (V1 runner)"
        elif _ids(ec.get("layer_ids")):
            return _ids(ec.get("layer_ids")), "$.eagle_config.layer_ids", "as given (V2 runner)"
        return canonical_taps(n), "default", "default (2, N//2, N-3)"
    if nested:
        return sglang_reading(nested, target_arch, n), "$.eagle_config.eagle_aux_hidden_state_layer_ids", \
            f"SGLang's {target_arch or 'target'} convention"
    return canonical_taps(n), "default", "default (2, N//2, N-3)"


def intended(doc: dict, target_arch: str | None, n: int) -> tuple[list[int], str] | None:
    """Capture indices the ids' writer meant (top level: vLLM's convention; eagle_config: SGLang's)."""
    ec = doc.get("eagle_config") if isinstance(doc.get("eagle_config"), dict) else {}
    top = _ids(doc.get("eagle_aux_hidden_state_layer_ids"))
    nested = _ids(ec.get("eagle_aux_hidden_state_layer_ids"))
    if top:
        return top, "$.eagle_aux_hidden_state_layer_ids"
    if nested:
        return sglang_reading(nested, target_arch, n), "$.eagle_config.eagle_aux_hidden_state_layer_ids"
    return None


def _num_aux(doc: dict) -> tuple[int, str]:
    """fc's number of aux chunks: num_aux_hidden_states, else len(eagle_config ids), else 3 (vLLM
    ``models/llama_eagle3.py`` ``LlamaModel.__init__``; SGLang ``models/llama_eagle3.py``)."""
    v = doc.get("num_aux_hidden_states")
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v, "$.num_aux_hidden_states"
    ec = doc.get("eagle_config") if isinstance(doc.get("eagle_config"), dict) else {}
    nested = _ids(ec.get("eagle_aux_hidden_state_layer_ids"))
    if nested:
        return len(nested), "len($.eagle_config.eagle_aux_hidden_state_layer_ids)"
    return 3, "the default 3"


def uses_aux_hidden_states(doc: dict) -> bool:
    """Both engines capture aux hidden states for eagle3 unless ``eagle_config.use_aux_hidden_state`` is false
    (vLLM ``v1/spec_decode/llm_base_proposer.py`` ``_get_eagle3_use_aux_hidden_state_from_config``; SGLang
    ``spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``): such heads read the last layer like EAGLE-1."""
    ec = doc.get("eagle_config") if isinstance(doc.get("eagle_config"), dict) else {}
    return ec.get("use_aux_hidden_state", True) is not False


def _check_target_capture(doc: dict, t: TargetConfig | None, o, out: Out) -> dict:
    """The target must hand aux hidden states to the drafter: vLLM's model runners raise unless the target class
    is SupportsEagle3, SGLang's unless it has set_eagle3_layers_to_capture (recorded per release: facts key
    ``eagle3_capture``; the rule is ``capture.target_capture``, shared with the DFlash family)."""
    if not uses_aux_hidden_states(doc):
        return {}
    derived, problem = target_capture("eagle3", "an EAGLE-3 drafter", t, o)
    if problem is not None and problem.newer:
        out.warn("Eagle3TargetCaptureUnsupported", *CAPTURE_PATH, problem.message)
    elif problem is not None:
        out.err("Eagle3TargetCaptureUnsupported", *CAPTURE_PATH, problem.message)
    return derived


@dataclass
class Eagle3Pair:
    """What every EAGLE-3 rule reads: the drafter's document and its views, the target, the options and the findings
    collector; ``derived`` gathers what the rules derive (check_eagle3 returns it)."""

    doc: dict
    fam: Family
    t: TargetConfig | None
    o: Any
    out: Out
    derived: dict
    speculators: bool  # a speculators-format export (its geometry in transformer_layer_config)
    tl: dict  # transformer_layer_config, or {}
    geo: dict  # where the drafter's geometry is: transformer_layer_config for speculators, else the document
    archs: list[str]

    @property
    def engine(self) -> str | None:
        return self.o.engine

    @classmethod
    def of(cls, doc: dict, fam: Family, t: TargetConfig | None, o, out: Out) -> "Eagle3Pair":
        speculators = fam.format == "speculators"
        tl = doc.get("transformer_layer_config") if isinstance(doc.get("transformer_layer_config"), dict) else {}
        archs = [a for a in doc.get("architectures") or [] if isinstance(a, str)] \
            if isinstance(doc.get("architectures"), list) else []
        return cls(doc, fam, t, o, out, {"family": fam.to_dict()}, speculators, tl, tl if speculators and tl else doc,
                   archs)


STOP = True  # a rule's answer when the rules after it do not apply


def speculators_on_sglang(c: Eagle3Pair) -> bool | None:
    """SGLang reads no speculators export: nothing else is checked."""
    if c.engine == "sglang" and c.speculators:
        c.out.err("SpeculatorsUnsupportedByEngine", D, "$.speculators_model_type",
                  "SGLang 0.5.23 has no speculators support (no reader of speculators_config in the wheel): it would "
                  "load transformer_layer_config's model as a plain model. Serve this drafter on vLLM, or convert it "
                  "to a SpecForge config (architectures LlamaForCausalLMEagle3, ids in eagle_config)")
        return STOP
    return None


def speculators_on_vllm(c: Eagle3Pair) -> None:
    """vLLM builds a speculators drafter from a llama/qwen3 layer config and needs the proposal and verifier fields."""
    if not (c.engine == "vllm" and c.speculators):
        return
    mt = c.tl.get("model_type")
    if mt not in VLLM_SPECULATORS_EAGLE3_MODEL_TYPES:
        c.out.err("Eagle3ArchitectureUnsupported", D, "$.transformer_layer_config.model_type",
                  f"vLLM builds a speculators EAGLE-3 drafter only from a llama or qwen3 transformer_layer_config "
                  f"(transformers_utils/configs/speculators/algos.py update_eagle3), found {mt!r}; it raises at load")
    sc = c.doc.get("speculators_config") if isinstance(c.doc.get("speculators_config"), dict) else {}
    pm = sc.get("proposal_methods")
    ver = sc.get("verifier") if isinstance(sc.get("verifier"), dict) else {}
    if not (isinstance(pm, list) and pm and isinstance(pm[0], dict) and isinstance(pm[0].get("speculative_tokens"), int)):
        c.out.err("SpeculatorsConfigIncomplete", D, "$.speculators_config.proposal_methods[0].speculative_tokens",
                  "vLLM requires speculators_config.proposal_methods[0].speculative_tokens "
                  "(transformers_utils/configs/speculators/base.py); set the number of tokens the drafter proposes")
    if not isinstance(ver.get("name_or_path"), str):
        c.out.err("SpeculatorsConfigIncomplete", D, "$.speculators_config.verifier.name_or_path",
                  "vLLM requires speculators_config.verifier.name_or_path (transformers_utils/configs/speculators/"
                  "base.py); set the target's repo id")


def architecture_served(c: Eagle3Pair) -> None:
    """The drafter's architecture is one the engine's speculative registry (vLLM) or EntryClass (SGLang) serves."""
    if c.speculators or c.engine not in ("vllm", "sglang") or not c.archs:
        return
    arch, o = c.archs[0], c.o
    if c.engine == "vllm":
        name = vllm_architecture(arch)
        if name not in VLLM_EAGLE3_ARCHS:
            c.out.err("Eagle3ArchitectureUnsupported", D, "$.architectures[0]",
                      f"vLLM {o.engine_version or RECORDED['vllm']} asks its speculative registry for {name!r} "
                      f"(transformers_utils/configs/eagle.py EAGLEConfig prefixes Eagle3), which is not registered "
                      f"(model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS); it fails at load. It serves "
                      f"{', '.join(sorted(VLLM_EAGLE3_ARCHS))}")
    elif arch not in SGLANG_EAGLE3_ARCHS:
        plain = arch.endswith("ForCausalLM") and "eagle" not in arch.lower()
        why = (f"SGLang does not rename architectures, so it would load {arch} itself, the plain target model "
               "class, as the draft" if plain else
               "it is not an SGLang EntryClass (model_loader/utils.py resolve_transformers_arch: 'Cannot find model module')")
        c.out.err("Eagle3ArchitectureUnsupported", D, "$.architectures[0]",
                  f"SGLang {o.engine_version or RECORDED['sglang']} serves EAGLE-3 drafters only as "
                  f"{' or '.join(sorted(SGLANG_EAGLE3_ARCHS))} (models/llama_eagle3.py, models/kimi_k25_eagle3.py "
                  f"EntryClass); {why}. Set architectures to LlamaForCausalLMEagle3 (Eagle3DeepseekV2ForCausalLM for "
                  "an MLA head)")


def facts_from_other_release(c: Eagle3Pair) -> None:
    """The gate's facts were read from one release per engine: say so when another is checked against them."""
    engine, o = c.engine, c.o
    if engine in RECORDED and o.engine_version and o.engine_version != RECORDED[engine]:
        c.out.info("MethodFactsFromOtherRelease", S, "spec.engine.version",
                   f"the EAGLE-3 gate's engine facts were read from {engine} {RECORDED[engine]}; {engine} "
                   f"{o.engine_version} is checked against them")


def target_hands_hidden_states(c: Eagle3Pair) -> None:
    """The target hands its hidden states to the drafter at all (``_check_target_capture``)."""
    c.derived.update(_check_target_capture(c.doc, c.t, c.o, c.out))


def variant_release(c: Eagle3Pair) -> None:
    """EAGLE-3.1 switches and MLA heads are read by the recorded releases; an older one may drop them."""
    fam, engine, o = c.fam, c.engine, c.o
    if not ("3.1" in fam.variants or fam.mla):
        return
    what = ("EAGLE-3.1 (fc_norm/norm_output)" if "3.1" in fam.variants else "") + \
        (" and " if "3.1" in fam.variants and fam.mla else "") + ("an MLA draft layer" if fam.mla else "")
    if engine in RECORDED and o.engine_version and is_older(o.engine_version, RECORDED[engine]):
        c.out.warn("Eagle3VariantUnverified", S, "spec.engine.version",
                   f"{what} is read by {engine} {RECORDED[engine]} (models/llama_eagle3.py fc_norm/norm_output; "
                   f"deepseek_eagle3.py / kimi_k25_eagle3.py for MLA); {engine} {o.engine_version} predates the "
                   "recorded release, and a release without them drops the norms or fails on their weights. Use "
                   f"{engine} >= {RECORDED[engine]}")


def aux_norm_on_vllm(c: Eagle3Pair) -> None:
    """vLLM reads the per-chunk fc norms from fc_norm only, never from the legacy use_aux_norm."""
    if c.engine == "vllm" and c.doc.get("use_aux_norm") is True and c.doc.get("fc_norm") is not True:
        c.out.err("Eagle3VariantUnsupported", D, "$.use_aux_norm",
                  "vLLM builds the per-chunk fc norms only from fc_norm (models/llama_eagle3.py LlamaModel.__init__); "
                  "the legacy use_aux_norm is read by SGLang only, so vLLM would run this EAGLE-3.1 head without them. "
                  "Set fc_norm: true as well")


def hidden_size(c: Eagle3Pair) -> None:
    """The fc layer's input width matches the target's hidden states."""
    doc, geo, tl, t = c.doc, c.geo, c.tl, c.t
    hs_key = "target_hidden_size" if isinstance(doc.get("target_hidden_size"), int) else None
    hs = doc.get("target_hidden_size") if hs_key else geo.get("hidden_size")
    hs_path = "$.target_hidden_size" if hs_key else ("$.transformer_layer_config.hidden_size" if geo is tl and tl else "$.hidden_size")
    if not isinstance(hs, int):
        c.out.err("DrafterFieldMissing", D, "$.hidden_size", "the drafter config has no hidden_size; point spec.drafter at the drafter's config.json")
    elif t is not None and t.hidden_size and hs != t.hidden_size.value:
        c.out.err("HiddenSizeMismatch", D, hs_path,
                  f"the EAGLE-3 fc layer takes num_aux x {hs_path.removeprefix('$.')} ({hs}) features, but the target's "
                  f"hidden states are {t.hidden_size.value} wide ({t.hidden_size.path}) (vLLM/SGLang models/llama_eagle3.py "
                  "fc_input_size); use the drafter trained for this target")


def vocabularies(c: Eagle3Pair) -> None:
    """The drafter's embedding table covers the target's vocabulary; a smaller draft head maps through d2t."""
    doc, geo, tl, t = c.doc, c.geo, c.tl, c.t
    vocab = geo.get("vocab_size")
    dvocab = doc.get("draft_vocab_size")
    tv = t.vocab_size.value if (t is not None and t.vocab_size) else None
    vpath = "$.transformer_layer_config.vocab_size" if geo is tl and tl else "$.vocab_size"
    if isinstance(vocab, int) and tv is not None and vocab != tv:
        if vocab < tv:
            c.out.err("Eagle3VocabTooSmall", D, vpath,
                      f"the drafter embeds the target's tokens with its own table of {vocab} rows, but the target "
                      f"vocabulary has {tv} ids ({t.vocab_size.path}); ids past {vocab - 1} index out of range at run "
                      "time (neither engine checks this for eagle3: config/speculative.py "
                      "verify_equal_vocab_size_if_draft_model is for draft_model only). Use the drafter trained for "
                      "this tokenizer")
        else:
            c.out.warn("VocabSizeDiffers", D, vpath,
                       f"drafter vocab_size {vocab} differs from the target's {tv}; real pairs differ by padding, but "
                       "check the drafter was trained for this tokenizer")
    if isinstance(dvocab, int) and not isinstance(dvocab, bool) and tv is not None:
        if dvocab > tv:
            c.out.err("DraftVocabSizeInvalid", D, "$.draft_vocab_size",
                      f"draft_vocab_size {dvocab} exceeds the target vocabulary {tv}: draft ids map into the target's "
                      "through d2t (target id = draft id + d2t[draft id]); a larger draft head cannot come from this "
                      "target")
        elif dvocab < tv:
            c.out.info("DraftVocabMapped", D, "$.draft_vocab_size",
                       f"draft_vocab_size {dvocab} < target vocab {tv}: the checkpoint must carry the d2t tensor; vLLM "
                       "loads it into draft_id_to_target_id (models/llama_eagle3.py Eagle3LlamaForCausalLM.load_weights, "
                       "zeros without it: every draft id maps to itself and acceptance collapses), SGLang turns it into "
                       "hot_token_id (models/llama_eagle3.py load_weights). t2d is not read by either")
        c.derived["draftVocabSize"] = dvocab


def aux_layer_taps(c: Eagle3Pair) -> None:
    """Per engine: the layers it taps are in range, as many as the fc takes, not the canonical layout shifted by
    one, and the ones the ids' writer meant (``engine_taps``)."""
    t = c.t
    if t is None or not t.num_hidden_layers:
        return
    n = t.num_hidden_layers.value
    target_arch = t.architectures[0] if t.architectures else None
    meant = intended(c.doc, target_arch, n)
    engines = [c.engine] if c.engine in ("vllm", "sglang") else ["vllm", "sglang"]
    c.derived["auxLayers"] = {}
    for eng in engines:
        if eng == "sglang" and c.speculators:
            continue
        engine_taps(c, eng, n, target_arch, meant)


def engine_taps(c: Eagle3Pair, eng: str, n: int, target_arch: str | None, meant: tuple[list[int], str] | None) -> None:
    """One engine's aux-layer taps (recorded in ``derived["auxLayers"]``) against the target and the fc; the first
    problem found is the one reported."""
    doc, o, out = c.doc, c.o, c.out
    canon = canonical_taps(n)
    want, fc_from = _num_aux(doc)
    got, src, how = taps(doc, eng, o, target_arch, n)
    where = "vLLM" + (f" ({runner(o).upper()} runner)" if src != "$.eagle_aux_hidden_state_layer_ids" else "") \
        if eng == "vllm" else "SGLang"
    c.derived["auxLayers"][eng] = got
    hi = n if eng == "vllm" else n - 1
    path = src if src != "default" else (meant[1] if meant else "$.eagle_config.eagle_aux_hidden_state_layer_ids")
    bad = [x for x in got if not 0 <= x <= hi]
    if bad:
        out.err("Eagle3AuxLayerOutOfRange", D, path,
                f"{where} taps capture indices {got} ({how}) for a {n}-layer target, but it captures only 0..{hi} "
                f"(index k = output of layer k-1); {bad} capture nothing and the fc input comes up short at the "
                "first decode. Use the ids from the drafter's training config")
        return
    if len(got) != want:
        out.err("Eagle3AuxCountMismatch", D, path,
                f"{where} taps {len(got)} layers {got} but the drafter's fc takes {want} chunks ({fc_from}: "
                "models/llama_eagle3.py num_aux_hidden_states): a shape error at the first decode. Set "
                "num_aux_hidden_states or list as many ids as the drafter was trained with")
        return
    shifted = next((s for s in (1, -1) if got == [x + s for x in canon]), None)
    if shifted is not None:
        out.err("Eagle3AuxLayerIdsShifted", D, path,
                f"{where} taps capture indices {got} ({how}) on a {n}-layer target: the canonical EAGLE-3 layout "
                f"{canon} (2, N//2, N-3) shifted by {shifted:+d}. Every tap reads the neighbouring layer and "
                "acceptance collapses without an error (sglang #25454, vllm #43671). Use the ids in this engine's "
                f"convention; if the drafter really was trained on these layers, add Eagle3AuxLayerIdsShifted to "
                "spec.checks.accept (or --accept)")
        return
    if meant is not None and got != meant[0]:
        ignored = src == "default"
        what = (f"ignores {meant[1]} and taps its default {got}" if ignored else
                f"reads {src} as {got} ({how})")
        cite = {"vllm": "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config"
                if runner(o) == "v2" else "v1/worker/gpu_model_runner.py _get_eagle3_aux_layers_from_config",
                "sglang": "spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state, set_eagle3_layers_to_capture"}[eng]
        out.err("Eagle3AuxLayersReadDifferently", D, meant[1],
                f"{where} {what}, but the config's writer meant capture indices {meant[0]} ({cite}): the drafter "
                "is fed other layers than it was trained on and acceptance collapses. "
                + ("Copy the ids to the top-level eagle_aux_hidden_state_layer_ids in vLLM's convention"
                   if eng == "vllm" else "Put the ids in eagle_config.eagle_aux_hidden_state_layer_ids in SGLang's convention")
                + "; accept the code if the drafter was trained on the engine's layers")


# The EAGLE-3 gate, in the order its findings are reported: engine support (format, architecture), the target's
# capture, the variant's release, widths and vocabularies, then the aux-layer taps. A rule that answers STOP ends it.
EAGLE3_RULES = (speculators_on_sglang, speculators_on_vllm, architecture_served, facts_from_other_release,
                target_hands_hidden_states, variant_release, aux_norm_on_vllm, hidden_size, vocabularies,
                aux_layer_taps)


def check_eagle3(doc: dict, fam: Family, t: TargetConfig | None, o, out: Out) -> dict:
    """Every EAGLE-3 rule (``EAGLE3_RULES``) for this drafter/target under ``o``; returns what the check derived."""
    pair = Eagle3Pair.of(doc, fam, t, o, out)
    for rule in EAGLE3_RULES:
        if rule(pair) is STOP:
            break
    return pair.derived
