"""Rules for the DFlash family beyond DFlash itself (pure): DFlash2, DSpark, Domino, causality as each
engine reads it, and ``sample_from_anchor``. They run after the DFlash rules (layers, window, engine),
which apply to these drafters too (target_layer_ids, mask token, hidden size, layer types). Read from
the vLLM 0.33.0 and SGLang 0.5.23 wheels (methods-engines.md s6-s9, s11).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..modelconfig import TargetConfig
from .capture import CAPTURE_PATH, target_capture
from .family import DISPLAY, Family
from .results import D, S, Out

# vLLM: architectures whose DSpark model reads markov_rank from the top level (models/qwen3_dspark.py
# Qwen3DSparkModel.__init__ reads config.markov_rank). DSparkDraftModel + model_type qwen3 is rewritten to
# Qwen3DSparkModel (config/speculative.py SpeculativeConfig.__post_init__).
VLLM_TOP_LEVEL_MARKOV = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})
# DSpark architectures each engine loads: vLLM model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS;
# SGLang models/dspark.py and models/deepseek_v4_dspark.py EntryClass.
DSPARK_ARCHS = {
    "vllm": frozenset({"DSparkDraftModel", "DSparkV41DraftModel", "Qwen3DSparkModel", "Qwen3OmniDSparkModel",
                       "K3DSparkModel", "MuseSparkDSparkModel", "Gemma4DSparkModel"}),
    "sglang": frozenset({"Qwen3DSparkModel", "LingDSparkModel", "DSparkDraftModel", "DeepseekV4ForCausalLMDSpark"}),
}
SGLANG_MARKOV_HEADS = frozenset({"vanilla", "gated", "rnn"})  # dspark_components/dspark_config.py


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _archs(doc: dict) -> list[str]:
    a = doc.get("architectures")
    return [x for x in a if isinstance(x, str)] if isinstance(a, list) else []


def check_dflash_capture(fam: Family, t: TargetConfig | None, o, out: Out) -> dict:
    """The target must hand its hidden states to the drafter at the taps (``capture.target_capture``): vLLM
    asks for them through the EAGLE-3 interface under dflash (DFlash2 included) and dspark, SGLang through
    set_dflash_layers_to_capture (DSPARK: set_dspark_layers_to_capture first). Domino on vLLM is refused apart
    (DominoUnsupportedByEngine)."""
    if o.method not in ("dflash", "dflash2", "dspark") or (fam.name == "domino" and o.engine == "vllm"):
        return {}
    kind = "dspark" if o.method == "dspark" else "dflash"
    engines = ("sglang",) if fam.name == "domino" else ("vllm", "sglang")
    derived, problem = target_capture(kind, f"a {DISPLAY.get(fam.name, fam.name)} drafter", t, o, engines=engines,
                                      method=kind)
    if problem is not None and problem.newer:
        out.warn("DFlashTargetCaptureUnsupported", *CAPTURE_PATH, problem.message)
    elif problem is not None:
        out.err("DFlashTargetCaptureUnsupported", *CAPTURE_PATH, problem.message)
    return derived


@dataclass(frozen=True)
class DraftFamily:
    """What every DFlash-family rule reads: the drafter's document, its family, the options, its target layer ids
    and the findings collector, with the views the rules share (``dflash_config``, the architectures)."""

    doc: dict
    fam: Family
    o: Any
    n_target: int | None
    ids: list[int] | None
    out: Out
    dc: dict
    archs: list[str]

    @property
    def engine(self) -> str | None:
        return self.o.engine


def run_on_their_runner(c: DraftFamily) -> None:
    """DFlash2, DSpark and the other V2-only families need a GPU (vLLM's V2 runner)."""
    fam, o, out = c.fam, c.o, c.out
    # ---- runners and devices: DFlash2 and DSpark run on vLLM's V2 runner only (config/vllm.py
    # _get_v1_model_runner_unsupported_features), and the CPU build has V1 only; SGLang's DSPARK/DFLASH
    # reject CPU devices (arg_groups/speculative_hook.py _handle_dspark/_handle_dflash).
    if o.gpu == "cpu" and fam.name in ("dflash2", "dspark", "lilicorr", "xpress"):
        out.err("MethodNeedsV2Runner", S, "spec.gpu.type",
                f"{fam.label} drafters run on vLLM's V2 model runner only (config/vllm.py "
                "_validate_v1_model_runner rejects them on V1), and the CPU build has no Triton, so V1 only. Use a "
                "GPU type")


def taps_increasing(c: DraftFamily) -> None:
    """DFlash2 and DSpark taps are strictly increasing."""
    fam, out, ids = c.fam, c.out, c.ids
    # ---- taps strictly increasing (fusion order; SGLang models/beam.py and qwen3_5_text.py raise)
    if fam.name in ("dflash2", "dspark") and ids and any(b <= a for a, b in zip(ids, ids[1:])):
        out.err("TargetLayerIdsNotIncreasing", D, "$.dflash_config.target_layer_ids",
                f"{fam.label} taps {ids} are not strictly increasing: SGLang's DFlash2 beam and Qwen3.5 targets raise "
                "('target_layer_ids must be unique, strictly increasing', models/beam.py, models/qwen3_5_text.py "
                "set_dflash_layers_to_capture) and the fusion layer's chunk order follows the list. Use the trained, "
                "sorted list")


def sample_from_anchor_on_vllm(c: DraftFamily) -> None:
    """vLLM's DFlash speculator refuses sample_from_anchor."""
    fam, out, engine, dc = c.fam, c.out, c.engine, c.dc
    # ---- sample_from_anchor: vLLM's DFlash speculator refuses true (DSpark defaults it to true)
    if engine == "vllm" and fam.name in ("dflash", "dflash2") and dc.get("sample_from_anchor") is True:
        out.err("SampleFromAnchorUnsupported", D, "$.dflash_config.sample_from_anchor",
                "vLLM 0.33's DFlash speculator raises 'sample_from_anchor=True is not supported for DFlash' "
                "(v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.__init__): DFlash uses the 1+N query "
                "layout with the anchor as bonus token. Remove it, or serve a DSpark drafter with method dspark")


def dflash2_fields_paired(c: DraftFamily) -> None:
    """DFlash2's paired fields come together."""
    doc, fam, out, dc = c.doc, c.fam, c.out, c.dc
    # ---- DFlash2 fields come in pairs (SGLang speculative/dflash_utils.py parse_dflash_draft_config)
    if fam.name == "dflash2":
        for a, b in (("conv_kernel_size", "conv_group_size"), ("selector_rank", "selector_top_k")):
            va, vb = dc.get(a, doc.get(a)), dc.get(b, doc.get(b))
            if (va is None) != (vb is None):
                missing = b if vb is None else a
                out.err("DFlash2FieldsUnpaired", D, f"$.dflash_config.{missing}",
                        f"DFlash2 sets {a} and {b} together; {missing} is missing (SGLang dflash_utils.py "
                        "parse_dflash_draft_config raises; vLLM's candidate head is sized from both). Copy both from the "
                        "drafter's training config")


def dspark_config(c: DraftFamily) -> None:
    """A DSpark drafter: architecture, block (gamma) and Markov head as each engine reads them."""
    doc, fam, o, out, engine, dc, archs = c.doc, c.fam, c.o, c.out, c.engine, c.dc, c.archs
    # ---- DSpark
    if fam.name == "dspark":
        dsc = _dict(doc.get("dspark_config"))
        if engine in DSPARK_ARCHS and archs and fam.format != "speculators" and archs[0] not in DSPARK_ARCHS[engine]:
            where = ("model_executor/models/registry.py _SPECULATIVE_DECODING_MODELS" if engine == "vllm"
                     else "models/dspark.py, models/deepseek_v4_dspark.py EntryClass")
            out.err("DrafterArchitectureUnsupported", D, "$.architectures[0]",
                    f"{engine} {o.engine_version or ''} does not load DSpark architecture {archs[0]!r} ({where}); it loads "
                    f"{', '.join(sorted(DSPARK_ARCHS[engine]))}")
        gamma = next((v for v in (_int(doc.get("dspark_block_size")), _int(dsc.get("block_size")),
                                  _int(dc.get("block_size")), _int(doc.get("block_size"))) if v is not None), None)
        if gamma is not None and gamma < 1:
            out.err("BlockSizeInvalid", D, "$.block_size",
                    f"a DSpark block (gamma, draft tokens per step) must be >= 1, found {gamma} (SGLang _handle_dspark: "
                    "speculative_num_draft_tokens = gamma + 1 >= 2)")
        want = getattr(o, "block_size", None)
        if isinstance(want, int) and gamma is not None and want - 1 > gamma:
            out.err("BlockSizeAboveTrained", S, "spec.speculation.blockSize",
                    f"blockSize {want} verifies {want - 1} DSpark draft tokens per step, but the drafter was trained "
                    f"for gamma {gamma} (SGLang dspark_config.py parse_dspark_draft_config; vLLM K defaults to "
                    f"block_size); set blockSize <= {gamma + 1} or leave it unset")
        nested = _int(dc.get("markov_rank"))
        top = _int(doc.get("markov_rank"))
        prefixed = _int(doc.get("dspark_markov_rank"))
        vllm_arch = ("Qwen3DSparkModel" if ("DSparkDraftModel" in archs and doc.get("model_type") == "qwen3")
                     else (archs[0] if archs else None))
        if engine == "vllm" and vllm_arch in VLLM_TOP_LEVEL_MARKOV and top is None and nested is not None:
            out.err("DSparkMarkovRankNested", D, "$.dflash_config.markov_rank",
                    f"vLLM's {vllm_arch} reads markov_rank only at the top level (models/qwen3_dspark.py "
                    "Qwen3DSparkForCausalLM.__init__: config.markov_rank), but this SpecForge config nests it in "
                    "dflash_config: AttributeError at load. Copy markov_rank, markov_head_type and the confidence-head "
                    "fields to the top level")
        if engine == "sglang":
            rank = prefixed if prefixed is not None else next(
                (v for v in (_int(dsc.get("markov_rank")), nested, top) if v is not None), 0)
            if rank <= 0:
                out.err("DSparkMarkovConfigInvalid", D, "$.dflash_config.markov_rank",
                        f"SGLang's DSpark requires markov_rank > 0 (found {rank}; dspark_components/dspark_config.py "
                        "resolve_runtime_config, read from dflash_config, dspark_config, then the top level). Set the "
                        "trained markov_rank")
            else:
                head = doc.get("dspark_markov_head_type", dsc.get("markov_head_type", dc.get("markov_head_type",
                                                                                              doc.get("markov_head_type"))))
                if head is None and prefixed is None:
                    out.err("DSparkMarkovConfigInvalid", D, "$.dflash_config.markov_head_type",
                            "SGLang's DSpark requires markov_head_type when markov_rank > 0 (dspark_config.py "
                            "parse_dspark_draft_config); set vanilla, gated or rnn as trained")
                elif head is not None and head not in SGLANG_MARKOV_HEADS:
                    out.err("DSparkMarkovConfigInvalid", D, "$.dflash_config.markov_head_type",
                            f"markov_head_type {head!r} is not one of {', '.join(sorted(SGLANG_MARKOV_HEADS))} "
                            "(SGLang dspark_config.py)")


def domino_config(c: DraftFamily) -> None:
    """A Domino drafter: SGLang only, as DFlashDraftModel with its projector fields."""
    doc, fam, out, engine, dc, archs = c.doc, c.fam, c.out, c.engine, c.dc, c.archs
    # ---- Domino: SGLang only, as DFlashDraftModel + projector_type domino
    if fam.name == "domino":
        if engine == "vllm":
            out.err("DominoUnsupportedByEngine", S, "spec.engine.name",
                    "vLLM 0.33 has no Domino code: a Domino draft served as dflash is renamed DFlashDominoDraftModel "
                    "(transformers_utils/configs/eagle.py) and is not registered (model_executor/models/registry.py). "
                    "Serve Domino on SGLang")
        elif engine == "sglang" and archs and archs[0] != "DFlashDraftModel":
            out.err("DominoArchitectureUnsupported", D, "$.architectures[0]",
                    f"SGLang runs Domino as DFlashDraftModel with dflash_config.projector_type: domino; {archs[0]!r} is "
                    "not an EntryClass (models/dflash.py EntryClass). Set architectures to ['DFlashDraftModel']")
        if engine != "vllm":
            def val(k):
                return dc.get(k, doc.get(k))
            problems = []
            if dc.get("projector_type", doc.get("projector_type")) != "domino":
                problems.append(("projector_type", "must be 'domino' in dflash_config"))
            if not isinstance(val("shift_label"), bool):
                problems.append(("shift_label", "must be true or false"))
            if val("pure_draft_prefix_len") != 1:
                problems.append(("pure_draft_prefix_len", f"must be 1, found {val('pure_draft_prefix_len')!r}"))
            if _int(val("gru_hidden_dim")) is None:
                problems.append(("gru_hidden_dim", "is required"))
            ne, te = _int(dc.get("emb_dim")), _int(doc.get("emb_dim"))
            if ne is None and te is None:
                problems.append(("emb_dim", "is required"))
            elif ne is not None and te is not None and ne != te:
                problems.append(("emb_dim", f"differs between dflash_config ({ne}) and the top level ({te})"))
            block = _int(dc.get("block_size", doc.get("block_size")))
            if block is not None and block <= 1:
                problems.append(("block_size", f"must be > 1, found {block}"))
            for key, why in problems:
                out.err("DominoConfigInvalid", D, f"$.dflash_config.{key}",
                        f"Domino {key} {why} (SGLang speculative/dflash_utils.py parse_dflash_draft_config raises at "
                        "start-up)")


def causality_read_alike(c: DraftFamily) -> None:
    """Both engines read the drafter's causality alike."""
    doc, out, engine, dc = c.doc, c.out, c.engine, c.dc
    # ---- causality: vLLM reads is_causal, then dflash_config.causal, then sliding layers
    # (models/qwen3_dflash.py _dflash_layer_causal); SGLang only text_config.is_causal, default sliding =
    # causal and full = non-causal (models/dflash.py _get_dflash_attention_type).
    text = _dict(doc.get("text_config")) or doc
    top_causal = text.get("is_causal") if isinstance(text.get("is_causal"), bool) else None
    dc_causal = dc.get("causal") if isinstance(dc.get("causal"), bool) else None
    types = doc.get("layer_types") if isinstance(doc.get("layer_types"), list) else None
    if engine == "sglang" and dc_causal is not None and top_causal is None and types:
        sglang_view = [t == "sliding_attention" for t in types]
        if any(causal != dc_causal for causal in sglang_view):
            out.err("CausalityIgnoredByEngine", D, "$.dflash_config.causal",
                    f"dflash_config.causal is {str(dc_causal).lower()}, which vLLM reads, but SGLang reads only "
                    "text_config.is_causal (models/dflash.py _get_dflash_attention_type) and makes full layers "
                    "non-causal and sliding layers causal: some layers would attend differently than trained. Add "
                    f"is_causal: {str(dc_causal).lower()} at the top level so both engines agree")
    if "causal_head" in dc and dc_causal is None and top_causal is None:
        out.warn("CausalHeadIgnored", D, "$.dflash_config.causal_head",
                 "dflash_config.causal_head (JetSpec) is read by neither engine (vLLM reads is_causal / "
                 "dflash_config.causal, SGLang text_config.is_causal): the block would run non-causally. Add "
                 "is_causal matching the trained head")


# The DFlash family's rules (DFlash2, DSpark, Domino and their kin), in the order their findings are reported.
DFLASH_FAMILY_RULES = (run_on_their_runner, taps_increasing, sample_from_anchor_on_vllm, dflash2_fields_paired,
                       dspark_config, domino_config, causality_read_alike)


def check_dflash_family(doc: dict, fam: Family, o, n_target: int | None, ids: list[int] | None, out: Out) -> None:
    """Every rule of ``DFLASH_FAMILY_RULES`` for this drafter under ``o``."""
    draft = DraftFamily(doc, fam, o, n_target, ids, out, _dict(doc.get("dflash_config")), _archs(doc))
    for rule in DFLASH_FAMILY_RULES:
        rule(draft)
