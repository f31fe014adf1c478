"""The drafter's family and format, read from its config.json alone (pure).

A drafter's family decides which engine method can serve it and which gate applies; the format says
which layout its fields are in (so which copy of a field each engine reads). Both are read from the
fields the engines themselves select on (methods-engines.md s1, s3, s6-s10):

- ``speculators_model_type`` (vllm-project/speculators exports: vLLM
  ``transformers_utils/configs/speculators/base.py`` ``SpeculatorsConfig``; eagle3, peagle, dflash,
  dflash2, dspark);
- ``architectures``: vLLM's speculative registry and SGLang's EntryClasses select the model class by
  name (``DFlash2DraftModel``, ``Qwen3DSparkModel``, ``LlamaForCausalLMEagle3``,
  ``Eagle3DeepseekV2ForCausalLM``, ...);
- ``dflash_config.projector_type`` (``dspark``, ``domino``: SGLang ``speculative/dflash_utils.py``
  ``parse_dflash_draft_config``), ``eagle_config`` (SpecForge/TorchSpec EAGLE-3), the EAGLE-3.1
  switches ``fc_norm``/``norm_output`` (legacy ``use_aux_norm``), MLA fields (``q_lora_rank``,
  ``kv_lora_rank``, ``attention_mode: mla``), a causal block (``dflash_config.causal``, ``is_causal``).

``detect_family`` never raises; a config it cannot place is family ``unknown`` (the method's own gate
then says what is missing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# family -> display name
DISPLAY = {
    "eagle3": "EAGLE-3", "peagle": "P-EAGLE", "eagle": "EAGLE", "dflash": "DFlash", "dflash2": "DFlash2",
    "dspark": "DSpark", "domino": "Domino", "lilicorr": "LiLiCorr", "xpress": "XPress", "mtp": "MTP head",
    "unknown": "unknown",
}

# Our method -> the drafter families it serves (methods without a drafter are absent). Domino is served
# as SGLang's DFLASH (a DFlashDraftModel with projector_type domino, methods-engines.md s9).
METHOD_FAMILIES: dict[str, frozenset[str]] = {
    "dflash": frozenset({"dflash", "domino"}),
    "ddtree": frozenset({"dflash"}),
    "dflash2": frozenset({"dflash2"}),
    "dspark": frozenset({"dspark"}),
    "eagle3": frozenset({"eagle3"}),
    "eagle": frozenset({"eagle"}),
}
# The method that serves each family (for the fix in a mismatch message).
FAMILY_METHOD = {"eagle3": "eagle3", "dflash": "dflash", "domino": "dflash", "dflash2": "dflash2",
                 "dspark": "dspark", "eagle": "eagle", "peagle": "eagle3"}
# Methods that take no drafter: the target serves its own draft (MTP) or none is needed.
DRAFTERLESS_METHODS = frozenset({"mtp", "ngram", "ngram_gpu", "suffix"})


@dataclass(frozen=True)
class Family:
    name: str  # a key of DISPLAY
    format: str  # "speculators" | "specforge" (HF-style config with dflash_config/eagle_config) | "eagle-template" | "hf"
    variants: tuple[str, ...] = ()  # "3.1" (fc_norm/norm_output), "mla", "causal"
    evidence: tuple[str, ...] = ()  # "<JSONPath> = <value>" the family was read from

    @property
    def label(self) -> str:
        base = DISPLAY.get(self.name, self.name)
        if self.name == "eagle3" and "3.1" in self.variants:
            base = "EAGLE-3.1"
        extra = [v.upper() if v == "mla" else v for v in self.variants if v != "3.1"]
        return base + (f" ({', '.join(extra)})" if extra else "")

    @property
    def mla(self) -> bool:
        return "mla" in self.variants

    def to_dict(self) -> dict:
        return {"family": self.name, "label": self.label, "format": self.format, "variants": list(self.variants),
                "evidence": list(self.evidence)}


def _strs(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _truthy(doc: dict, key: str) -> bool:
    return doc.get(key) is True


def detect_family(doc: Any) -> Family:
    """The drafter's family, format and variants from its config.json document."""
    if not isinstance(doc, dict):
        return Family("unknown", "hf")
    dc = _dict(doc.get("dflash_config"))
    ec = _dict(doc.get("eagle_config"))
    tl = _dict(doc.get("transformer_layer_config"))
    archs = _strs(doc.get("architectures")) or _strs(tl.get("architectures"))
    low = [a.lower() for a in archs]
    ev: list[str] = []

    def arch_has(*needles: str) -> int | None:
        for i, a in enumerate(low):
            if any(n in a for n in needles):
                ev.append(f"$.architectures[{i}] = {archs[i]}")
                return i
        return None

    spec_type = doc.get("speculators_model_type")
    fmt = "speculators" if isinstance(spec_type, str) else ("specforge" if (dc or ec) else "hf")
    projector = dc.get("projector_type", doc.get("projector_type"))
    name = "unknown"
    if isinstance(spec_type, str):
        ev.append(f"$.speculators_model_type = {spec_type}")
        name = {"eagle3": "eagle3", "peagle": "peagle", "dflash": "dflash", "dflash2": "dflash2",
                "dspark": "dspark"}.get(spec_type.lower(), "unknown")
    elif arch_has("dflash2") is not None:
        name = "dflash2"
    elif arch_has("lilicorr") is not None:
        name = "lilicorr"
    elif arch_has("xpress") is not None:
        name = "xpress"
    elif projector == "domino" or arch_has("domino") is not None:
        if projector == "domino":
            ev.append("$.dflash_config.projector_type = domino")
        name = "domino"
    elif projector == "dspark" or arch_has("dspark") is not None or any(
            k in doc for k in ("dspark_block_size", "dspark_target_layer_ids", "dspark_markov_rank")):
        if projector == "dspark":
            ev.append("$.dflash_config.projector_type = dspark")
        name = "dspark"
    elif arch_has("dflash") is not None or dc:
        if not ev:
            ev.append("$.dflash_config present")
        name = "dflash"
    elif arch_has("peagle") is not None:
        name = "peagle"
    elif arch_has("eagle3") is not None or ec:
        if not ev:
            ev.append("$.eagle_config present")
        name = "eagle3"
    elif arch_has("eagle") is not None:
        name = "eagle"
    elif arch_has("mtp", "nextn") is not None:
        name = "mtp"
    elif (any(a.endswith("forcausallm") for a in low) and isinstance(doc.get("draft_vocab_size"), int)
          and doc.get("num_hidden_layers") == 1):
        # SafeAILab/EAGLE's EAGLE-3 training template: a plain LlamaForCausalLM head of one layer with a
        # reduced draft vocabulary (vLLM renames it Eagle3LlamaForCausalLM under method eagle3).
        ev.append(f"$.architectures[0] = {archs[0]} with num_hidden_layers 1 and draft_vocab_size")
        name, fmt = "eagle3", "eagle-template"

    variants: list[str] = []
    geo = tl if fmt == "speculators" and tl else doc
    if name in ("eagle3", "peagle"):
        if _truthy(doc, "fc_norm") or _truthy(doc, "norm_output") or _truthy(doc, "use_aux_norm"):
            variants.append("3.1")
            ev.append("$." + next(k for k in ("fc_norm", "norm_output", "use_aux_norm") if _truthy(doc, k)) + " = true")
    if (isinstance(geo.get("q_lora_rank"), int) or isinstance(geo.get("kv_lora_rank"), int)
            or dc.get("attention_mode") == "mla" or any("deepseek" in a for a in low)):
        variants.append("mla")
    if name in ("dflash", "dflash2", "dspark", "domino") and (dc.get("causal") is True or doc.get("is_causal") is True):
        variants.append("causal")
    return Family(name, fmt, tuple(variants), tuple(ev))


def serving_method(fam: Family) -> str | None:
    """The method that serves a drafter of this family (what `specdeploy check` uses without --method), or None."""
    return FAMILY_METHOD.get(fam.name)


def method_family_problem(method: str, fam: Family) -> str | None:
    """Why ``method`` cannot serve a drafter of family ``fam``, or None (also None where either is unknown)."""
    if fam.name == "unknown":
        return None
    if method in DRAFTERLESS_METHODS:
        return None  # a drafter given to a drafterless method is the API's refusal, not a family question
    want = METHOD_FAMILIES.get(method)
    if want is None or fam.name in want:
        return None
    serve = FAMILY_METHOD.get(fam.name)
    how = f"serve it with method {serve!r}" if serve else "no method of this operator serves it yet"
    why = {
        ("eagle3", "eagle"): " (an EAGLE-3 head run as EAGLE drafts from the wrong features: tau ~1.0, sglang #21272)",
        ("eagle3", "dflash"): " (a DFlash engine path would load it as a DFlash drafter and fail or collapse)",
        ("dflash2", "dflash"): " (DFlash2 adds a candidate head that DFlash's path does not run; vLLM selects "
                               "DFlash2Speculator by architecture, SGLang by the dflash2 fields)",
        ("dspark", "dflash"): " (DSpark's Markov head and block layout differ from DFlash's: use dspark)",
    }.get((fam.name, method), "")
    return (f"the drafter is a {fam.label} drafter ({'; '.join(fam.evidence) or fam.format}) but "
            f"spec.speculation.method is {method!r}{why}; {how}")
