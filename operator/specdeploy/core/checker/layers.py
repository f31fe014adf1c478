"""Config rules on the drafter's and target's layers (pure): the target's required fields, the drafter's
geometry and target layer ids, fields given twice, the layer types and sliding window as each engine
resolves them, and what an engine release does with the layer ids."""

from __future__ import annotations

from typing import Any

from ..modelconfig import HF_SLIDING_RULES, SLIDING, DRAFTER_LAYER_TYPES, DrafterConfig, TargetConfig, jpath
from .options import DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE, Options
from .results import D, S, T, Out


def canonical_layer_ids(num_target_layers: int, count: int) -> list[int] | None:
    """The canonical DFlash layout of ``count`` target layer ids for a target of ``num_target_layers``:
    evenly spaced from 1 to N-3 (one id: N // 2), as the reference trainer and SGLang's
    ``build_target_layer_ids`` (speculative/dflash_utils.py) compute it; None where it is undefined
    (N < 4 with several ids). Tested against the recorded engine facts."""
    if num_target_layers <= 0 or count <= 0:
        return None
    if count == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    if end < start:
        return None
    span = end - start
    return [int(round(start + (i * span) / (count - 1))) for i in range(count)]


def check_target(t: TargetConfig, out: Out) -> None:
    """The target fields every rule reads (layers, hidden size, vocabulary) are present."""
    for name in ("num_hidden_layers", "hidden_size", "vocab_size"):
        if getattr(t, name) is None:
            out.err("TargetFieldMissing", T, jpath(t.root, name),
                    f"the target config has no {name}; point spec.target at the language model's config.json")


def _check_layer_ids(d: DrafterConfig, t: TargetConfig | None, out: Out) -> None:
    """target_layer_ids: present, in range, and not an exact shift of the canonical layout."""
    dc = d.dflash_config_path
    ids = d.target_layer_ids
    if ids is None:
        out.err("TargetLayerIdsMissing", D, jpath(dc, "target_layer_ids"),
                "target_layer_ids is missing: engines then guess the layers, which is wrong for most released "
                "drafters (z-lab/dflash #156); copy the list the drafter was trained with into dflash_config")
        return
    if not ids.value:
        out.err("TargetLayerIdsEmpty", D, ids.path, "target_layer_ids is empty; set the 0-based target layers the drafter was trained on")
        return
    off = d.target_layer_ids_offset
    n_layers = t.num_hidden_layers.value if (t and t.num_hidden_layers) else None
    seen: set[int] = set()
    in_range = True
    for item in ids.value:
        lid = item.value - off
        shown = f"{item.value} (target layer {lid})" if off else str(item.value)
        if n_layers is not None and not 0 <= lid < n_layers:
            in_range = False
            hint = " (aux_hidden_state_layer_ids store id + 1)" if off else ""
            out.err("TargetLayerOutOfRange", D, item.path,
                    f"layer id {shown} is outside the target's {n_layers} layers; valid ids are 0..{n_layers - 1}{hint}. "
                    "An off-by-one list loads cleanly and silently collapses acceptance: use the ids from the drafter's training config")
        elif n_layers is None and lid < 0:
            in_range = False
            out.err("TargetLayerOutOfRange", D, item.path, f"layer id {shown} is negative; ids are 0-based target layer outputs")
        elif n_layers is not None and lid == n_layers - 1:
            out.warn("TargetLayerIsLast", D, item.path,
                     f"layer id {lid} is the target's last layer; some engines crashed on it (sglang #32204). "
                     "Keep it only if the drafter was trained on it")
        if lid in seen:
            out.warn("TargetLayerIdDuplicate", D, item.path, f"layer id {lid} appears twice; check the drafter's training config")
        seen.add(lid)
    if n_layers is None or not in_range:
        return
    got = [i.value - off for i in ids.value]
    canon = canonical_layer_ids(n_layers, len(got))
    if canon is None or got == canon:
        return
    for shift in (1, -1):
        if got == [c + shift for c in canon]:
            want = [c + off for c in canon]
            conv = f" (stored as id + 1: {want})" if off else ""
            out.err("TargetLayerIdsShifted", D, ids.path,
                    f"target_layer_ids {[i.value for i in ids.value]} is the canonical DFlash layout for a {n_layers}-layer "
                    f"target shifted by {shift:+d}; the canonical list is {canon}{conv}. Every id would read the "
                    "neighbouring layer and acceptance collapses to ~1 token per step without an error. Use the ids "
                    "from the drafter's training config; if this list really is what it was trained on, add "
                    "TargetLayerIdsShifted to spec.checks.accept (or --accept)")
            return


def check_drafter(d: DrafterConfig, t: TargetConfig | None, out: Out) -> None:
    """The drafter is a DFlash model whose geometry and target layer ids fit the target."""
    dc = d.dflash_config_path
    if not d.is_dflash:
        out.err("NotADFlashDrafter", D, "$.architectures",
                f"architectures {d.architectures or '[]'} name no DFlash model and there is no dflash_config; "
                "point spec.drafter at a DFlash drafter (DFlashDraftModel, DFlash2DraftModel or speculators dflash)")
    _check_layer_ids(d, t, out)

    if t is not None and d.num_target_layers and t.num_hidden_layers and d.num_target_layers.value != t.num_hidden_layers.value:
        out.err("NumTargetLayersMismatch", D, d.num_target_layers.path,
                f"the drafter was built for a {d.num_target_layers.value}-layer target but the target has "
                f"{t.num_hidden_layers.value} layers ({t.num_hidden_layers.path}); pair the drafter with the target it was trained for")

    hs = d.target_hidden_size or d.hidden_size
    if hs is None:
        out.err("DrafterFieldMissing", D, "$.hidden_size", "the drafter config has no hidden_size; point spec.drafter at the drafter's config.json")
    elif t is not None and t.hidden_size and hs.value != t.hidden_size.value:
        out.err("HiddenSizeMismatch", D, hs.path,
                f"drafter {hs.path.removeprefix('$.')} {hs.value} differs from the target hidden_size "
                f"{t.hidden_size.value} ({t.hidden_size.path}): the fusion layer cannot take the target's hidden states "
                "(a cryptic matmul error at the first decode); use the drafter trained for this target")

    if d.mask_token_id is None:
        out.err("MaskTokenMissing", D, jpath(dc, "mask_token_id"),
                "mask_token_id is missing; set the mask token id the drafter was trained with in dflash_config")
    elif d.mask_token_id.value < 0:
        out.err("MaskTokenOutOfRange", D, d.mask_token_id.path, f"mask_token_id {d.mask_token_id.value} is negative")
    elif t is not None and t.vocab_size and d.mask_token_id.value >= t.vocab_size.value:
        out.err("MaskTokenOutOfRange", D, d.mask_token_id.path,
                f"mask_token_id {d.mask_token_id.value} is outside the target vocabulary of {t.vocab_size.value} "
                f"({t.vocab_size.path}); the drafter embeds the mask with the target's table, so use the target's mask id")

    if t is not None and d.vocab_size and t.vocab_size and d.vocab_size.value != t.vocab_size.value:
        out.warn("VocabSizeDiffers", D, d.vocab_size.path,
                 f"drafter vocab_size {d.vocab_size.value} differs from the target's {t.vocab_size.value}; real pairs differ "
                 "by padding (vllm #10913), but check the drafter was trained for this tokenizer")

    # block size
    if d.block_size is None:
        out.warn("BlockSizeDefaulted", D, jpath(dc, "block_size"),
                 f"the drafter config names no block_size; assuming the DFlash default {DEFAULT_BLOCK_SIZE}. "
                 "Set spec.speculation.blockSize if the drafter was trained with another")
    elif not 2 <= d.block_size.value <= MAX_BLOCK_SIZE:
        out.err("BlockSizeInvalid", D, d.block_size.path, f"block_size {d.block_size.value} must be between 2 and {MAX_BLOCK_SIZE}")
    if d.block_size_other is not None and d.block_size is not None:
        out.warn("BlockSizeConflict", D, d.block_size_other.path,
                 f"block_size is {d.block_size_other.value} here but {d.block_size.value} in {d.block_size.path}; "
                 "engines use the dflash_config value; make both agree")

    n = d.num_hidden_layers.value if d.num_hidden_layers else None
    if n is None:
        out.err("DrafterFieldMissing", D, "$.num_hidden_layers", "the drafter config has no num_hidden_layers")
    if d.layer_types is not None:
        if n is not None and len(d.layer_types.value) != n:
            out.err("LayerTypesLengthMismatch", D, d.layer_types.path,
                    f"layer_types has {len(d.layer_types.value)} entries but num_hidden_layers is {n}; give one entry per layer")
        for item in d.layer_types.value:
            if item.value not in DRAFTER_LAYER_TYPES and item.value != "attention":
                out.err("LayerTypeUnknown", D, item.path,
                        f"layer type {item.value!r} is not one of {', '.join(DRAFTER_LAYER_TYPES)}")
        if d.use_swa is not None and d.use_swa.value and SLIDING not in [x.value for x in d.layer_types.value]:
            out.warn("SlidingConfigConflict", D, d.use_swa.path,
                     "use_swa is true but layer_types lists no sliding_attention layer: vLLM then runs every layer "
                     "as sliding attention. List the sliding layers in layer_types so every reader agrees")
    if d.format == "speculators" and d.geometry_path != "$":
        top = d.raw_top_layer_types
        if top and SLIDING in top and not (d.layer_types and SLIDING in [x.value for x in d.layer_types.value]):
            out.err("SlidingLayersIgnoredByEngine", D, "$.layer_types",
                    "a speculators config lists sliding layers at the top level, but vLLM builds the drafter from "
                    "transformer_layer_config alone (transformers_utils/configs/speculators/base.py "
                    "extract_transformers_pre_trained_config): every layer would run as full attention. Move "
                    "layer_types and sliding_window into transformer_layer_config")
    hf = d.hf
    if hf is not None and hf.layer_types_derived and hf.layer_types and SLIDING in hf.layer_types:
        mwl = d.max_window_layers.value if d.max_window_layers else HF_SLIDING_RULES[d.model_type or "qwen3"][1]
        out.info("LayerTypesDerived", D, jpath(d.geometry_path, "layer_types"),
                 f"the config has no layer_types; transformers' {d.model_type} config builds "
                 f"{','.join('S' if x == SLIDING else 'F' for x in hf.layer_types)} (sliding where layer >= "
                 f"max_window_layers {mwl}, since use_sliding_window is true), and the engines read that list. "
                 "Write layer_types out to make it explicit")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def check_duplicates(d: DrafterConfig, t: TargetConfig | None, info, out: Out) -> None:
    """A field given twice with different values: which copy each engine reads, and whether the checker agrees."""
    doc, dc = d.raw, d.raw.get("dflash_config")
    engine = info.name if info is not None else None
    if isinstance(dc, dict) and d.format == "dflash":
        # SGLang parse_dflash_draft_config and vLLM qwen3_dflash.py both prefer dflash_config
        for key in ("target_layer_ids", "mask_token_id", "num_target_layers", "target_hidden_size"):
            if key in dc and key in doc and dc[key] is not None and doc[key] is not None and not _same(dc[key], doc[key]):
                out.warn("ConflictingDuplicate", D, f"$.{key}",
                         f"$.{key} ({_short(doc[key])}) differs from $.dflash_config.{key} ({_short(dc[key])}); both "
                         "engines read $.dflash_config and so does this check. Remove the stale copy")
    aux = doc.get("eagle_aux_hidden_state_layer_ids") if d.format == "dflash" else None
    if isinstance(aux, list) and d.target_layer_ids is not None:
        want = [i.value + 1 for i in d.target_layer_ids.value]
        if aux != want:
            sev = out.err if engine == "vllm" else out.warn
            code = "EngineReadsOtherCopy" if engine == "vllm" else "ConflictingDuplicate"
            sev(code, D, "$.eagle_aux_hidden_state_layer_ids",
                f"$.eagle_aux_hidden_state_layer_ids {_short(aux)} is not {d.target_layer_ids.path} + 1 ({want}): vLLM "
                "reads eagle_aux_hidden_state_layer_ids first (v1/worker/gpu_model_runner.py, eagle3_utils.py) and "
                "ignores target_layer_ids, SGLang reads only target_layer_ids. Remove one copy or make them agree")
    if d.format == "speculators" and d.geometry_path != "$":
        tl = doc.get("transformer_layer_config") or {}
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                    "sliding_window", "vocab_size"):
            if key in doc and key in tl and doc[key] is not None and not _same(doc[key], tl[key]):
                out.warn("ConflictingDuplicate", D, f"$.{key}",
                         f"$.{key} ({_short(doc[key])}) differs from $.transformer_layer_config.{key} ({_short(tl[key])}); "
                         "vLLM builds the drafter from transformer_layer_config only, and so does this check")
    hs, ths = d.hidden_size, d.target_hidden_size
    if engine == "sglang" and hs is not None and ths is not None and t is not None and t.hidden_size \
            and hs.value != t.hidden_size.value:
        out.err("EngineReadsOtherCopy", D, hs.path,
                f"SGLang sizes the fusion layer from the drafter's hidden_size {hs.value} and ignores target_hidden_size "
                f"{ths.value} (models/dflash.py: fc = Linear(len(ids) x hidden_size)); the target's hidden states are "
                f"{t.hidden_size.value} wide, so SGLang stops with 'feature dim mismatch'. Serve it on vLLM, which reads "
                "target_hidden_size")
    if t is not None and t.root != "$":
        for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
            inner, outer = t.text.get(key), t.wrapper.get(key)
            if inner is not None and outer is not None and not _same(inner, outer):
                out.warn("ConflictingDuplicate", T, f"$.{key}",
                         f"$.{key} ({_short(outer)}) differs from {t.root}.{key} ({_short(inner)}); the engines read "
                         f"the language-model config ({t.root}) and so does this check")


def _short(v: Any) -> str:
    try:
        text = repr(v)
    except (ValueError, RecursionError):
        text = type(v).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def layer_view(d: DrafterConfig, info, row, out: Out) -> tuple[tuple[str, ...], int | None]:
    """(layer types, sliding window) as this engine resolves them, with the errors the engine raises."""
    engine = info.name if info is not None else None
    types_l, win = d.engine_layers(engine)
    types = tuple(types_l or ())
    has_sliding = SLIDING in types
    hf = d.hf

    who = f"{info.display_name} raises" if info else "vLLM and SGLang raise"
    if has_sliding and (win is None or win.value <= 0):
        if hf is not None and hf.sliding_window_dropped is not None:
            uw = d.use_sliding_window.path if d.use_sliding_window else jpath(d.geometry_path, "use_sliding_window")
            out.err("SlidingWindowDisabled", D, uw,
                    f"layer_types lists sliding_attention layers and {hf.sliding_window_dropped.path} is "
                    f"{hf.sliding_window_dropped.value}, but {uw} is false (or absent): transformers' {d.model_type} "
                    f"config then sets sliding_window to None, and {who} at start-up (vLLM "
                    "qwen3_dflash.py _resolve_layer_attention; SGLang dflash_utils.py "
                    "get_dflash_attention_sliding_window_size). Set use_sliding_window: true")
        elif engine == "sglang" and d.use_swa is not None and d.use_swa.value and not (
                d.layer_types and SLIDING in [x.value for x in d.layer_types.value]):
            pass  # reported as SlidingLayersIgnoredByEngine below
        else:
            use_swa = bool(d.use_swa and d.use_swa.value)
            where = jpath(d.dflash_config_path, "swa_window_size") if (engine != "sglang" and (d.swa_window_key or use_swa)) \
                else jpath(d.geometry_path, "sliding_window")
            out.err("SlidingWindowMissing", D, where,
                    "the drafter has sliding_attention layers but no positive window; set sliding_window (or "
                    "dflash_config.swa_window_size for vLLM) to the window the drafter was trained with")
    elif has_sliding and win is not None and d.block_size is not None and win.value < d.block_size.value:
        out.err("DraftWindowBelowBlockSize", D, win.path,
                f"the sliding window {win.value} is below block_size {d.block_size.value}: a draft block would not fit "
                "its own window; fix the drafter config (window >= block size)")
    if engine == "sglang" and d.use_swa is not None and d.use_swa.value:
        listed = [x.value for x in d.layer_types.value] if d.layer_types else []
        if SLIDING not in listed:
            out.err("SlidingLayersIgnoredByEngine", D, d.use_swa.path,
                    "the drafter declares its sliding layers only through dflash_config.use_swa, which SGLang does not "
                    "read (speculative/dflash_utils.py get_dflash_layer_types): every layer would run as full attention "
                    "and acceptance falls past the window. Serve it on vLLM, or use a drafter config with layer_types "
                    "and sliding_window")
    if has_sliding and win is not None and hf is not None and hf.sliding_window_defaulted and win is hf.sliding_window:
        out.warn("SlidingWindowDefaulted", D, jpath(d.geometry_path, "sliding_window"),
                 f"use_sliding_window is true but the config has no sliding_window: transformers' {d.model_type} config "
                 f"uses its default {win.value}, which the engines apply to the sliding layers; that is rarely the "
                 "window the drafter was trained with. Set sliding_window")
    window = win.value if (has_sliding and win is not None and win.value > 0) else None
    return types, window


def check_engine_layer_rules(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, out: Out) -> None:
    """What the chosen engine release does with the layer ids: the +1 (vLLM) and the target class's rules (SGLang)."""
    if info is None or row is None or d.target_layer_ids is None or not d.target_layer_ids.value:
        return
    ids = d.target_layer_ids
    if info.name == "vllm" and row.layer_ids_offset != 1 and d.target_layer_ids_offset == 0:
        fixed = info.first_release(lambda r: r.layer_ids_offset == 1)
        out.err("EngineLayerOffsetBroken", S, "spec.engine.version",
                f"vLLM {o.engine_version} reads the hidden state *before* each target_layer_ids entry (no +1: "
                "v1/worker/gpu_model_runner.py, fixed by vllm PR #40727): every id reads the wrong layer and acceptance "
                f"collapses to ~1 token per step. Use vLLM >= {fixed}")
    if info.name != "sglang" or t is None or not t.architectures or not t.num_hidden_layers:
        return
    from .. import enginedata

    arch = t.architectures[0]
    hit = enginedata.nearest_facts("sglang", o.engine_version or "", row.since, row.until)
    if hit is None:
        return
    rec_version, doc = hit
    rec = enginedata.fact(doc, "target_capture", arch)
    if not isinstance(rec, dict):
        return
    probes = rec.get("probes", {})
    chain = " -> ".join(rec.get("chain", [])) or "set_dflash_layers_to_capture"
    n = t.num_hidden_layers.value
    got = [i.value - d.target_layer_ids_offset for i in ids.value]
    src = f"SGLang {rec_version} {arch} ({chain})"
    if any(x == n - 1 for x in got) and str(probes.get("last", "")).startswith("raises"):
        out.err("TargetLayerIdsRejectedByEngine", D, ids.path,
                f"{src} raises at start-up ({probes['last'].removeprefix('raises ')}) for the last layer id {n - 1}: it "
                f"captures hidden states before layer id + 1, and there is no layer {n}. Use ids in 0..{n - 2}")
    if len(set(got)) != len(got) and str(probes.get("duplicate", "")).startswith("raises"):
        out.err("TargetLayerIdsRejectedByEngine", D, ids.path,
                f"{src} raises at start-up for repeated ids ({sorted(x for x in set(got) if got.count(x) > 1)}); "
                "target_layer_ids must be unique")
    if got != sorted(got) and str(probes.get("unsorted", "")).startswith("raises"):
        out.err("TargetLayerIdsRejectedByEngine", D, ids.path,
                f"{src} raises at start-up for ids that are not strictly increasing ({got}); sort them only if the "
                "drafter was trained in that order (the fusion layer's input order follows the list)")
