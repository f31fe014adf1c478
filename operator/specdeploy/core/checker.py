"""The drafter/target checker: one set of rules for the CLI, webhook, operator and pod preflight.

``check_options`` runs the object-level checks that need no config files (admission's fast
path). ``analyze`` parses both config.json documents, runs every rule of
dflash-engines.md s2 plus the engine and GPU rules, and derives what the renderer needs
(block size, draft window, engine env). It never raises on any JSON input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from . import engines as eng
from . import gpus
from .findings import Finding, Severity, Source, has_errors, sort_findings
from .modelconfig import FULL, SLIDING, DRAFTER_LAYER_TYPES, DrafterConfig, TargetConfig, Val, jpath, parse_drafter, parse_target
from .versions import parse_version
from .weights import estimate_drafter_bytes, estimate_target_bytes

DEFAULT_BLOCK_SIZE = 16  # z-lab DFlash default (dflash-engines.md s1)
MAX_BLOCK_SIZE = 64
WINDOW_OFF = "off"
# Fractions of total GPU memory the weights may take: above HEADROOM a warning (little room
# for KV cache and activations), above FIT an error (the engine will not load).
HEADROOM_FRACTION = 0.80
FIT_FRACTION = 0.95

_MODEL_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.\-]*(/[A-Za-z0-9_.][A-Za-z0-9_.\-]*)*$")


def model_reference_problem(ref: str) -> str | None:
    """Why a model reference (hub repo id or path inside a volume) is unsafe, or None."""
    if not isinstance(ref, str) or not ref:
        return "it is empty; set a hub repo id such as 'Qwen/Qwen3.6-27B' or a path inside the model volume"
    if ref.startswith("-"):
        return "it starts with '-' and would be read as an engine flag; set a hub repo id or a path"
    body = ref[1:] if ref.startswith("/") else ref
    if not _MODEL_REF.fullmatch(body):
        return (
            "it may only hold letters, digits, '.', '_', '-' and '/'-separated segments; "
            "set a hub repo id such as 'Qwen/Qwen3.6-27B' or a path inside the model volume"
        )
    if any(seg in (".", "..") for seg in body.split("/")):
        return "it has a '.' or '..' segment that escapes the model volume; use a path inside the volume"
    return None


@dataclass(frozen=True)
class Options:
    """What the checker needs from a SpeculativeDeployment (or the CLI's flags)."""

    engine: str | None = None
    engine_version: str | None = None
    method: str = "dflash"
    gpu: str | None = None
    gpu_count: int = 1
    nodes: int = 1
    block_size: int | None = None
    draft_window: int | str | None = None
    draft_attention_backend: str | None = None
    extra_args: tuple[str, ...] = ()
    ddtree_budget: int | None = None
    ddtree_topk: int | None = None
    ddtree_set: bool = False
    trust_remote_code: bool = False
    target_model: str | None = None
    drafter_model: str | None = None


@dataclass(frozen=True)
class Derived:
    """What the renderer takes from the checked pair; the check report shows it too."""

    block_size: int
    num_speculative_tokens: int
    draft_window: int | None  # compact draft cache window (SGLang flag), None: no flag
    drafter_window: int | None  # the drafter's trained sliding window
    layer_types: tuple[str, ...]
    has_sliding: bool
    mixed_layers: bool
    target_layer_ids: tuple[int, ...]
    engine_env: dict[str, str] = field(default_factory=dict)
    draft_attention_backend: str | None = None
    ddtree_budget: int | None = None
    ddtree_topk: int | None = None
    target_weight_bytes: float | None = None
    drafter_weight_bytes: float | None = None

    def to_dict(self) -> dict:
        return {
            "blockSize": self.block_size,
            "numSpeculativeTokens": self.num_speculative_tokens,
            "draftWindow": self.draft_window,
            "drafterWindow": self.drafter_window,
            "layerTypes": list(self.layer_types),
            "targetLayerIds": list(self.target_layer_ids),
            "engineEnv": dict(self.engine_env),
            "draftAttentionBackend": self.draft_attention_backend,
            "targetWeightGB": None if self.target_weight_bytes is None else round(self.target_weight_bytes / 1e9, 1),
            "drafterWeightGB": None if self.drafter_weight_bytes is None else round(self.drafter_weight_bytes / 1e9, 1),
        }


@dataclass
class Analysis:
    findings: list[Finding]
    derived: Derived | None
    drafter: DrafterConfig | None = None
    target: TargetConfig | None = None

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)


class _Out:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, sev: Severity, code: str, src: Source, path: str, msg: str) -> None:
        self.items.append(Finding(sev, code, src, path, msg))

    def err(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.ERROR, code, src, path, msg)

    def warn(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.WARNING, code, src, path, msg)

    def info(self, code: str, src: Source, path: str, msg: str) -> None:
        self.add(Severity.INFO, code, src, path, msg)


S, D, T = Source.SPEC, Source.DRAFTER, Source.TARGET


# ----------------------------------------------------------------- object-level checks


def _engine_release(o: Options, out: _Out) -> tuple[eng.EngineInfo | None, eng.EngineRelease | None]:
    if o.engine is None:
        return None, None
    if o.engine not in eng.ENGINES:
        out.err("UnknownEngine", S, "spec.engine.name",
                f"engine {o.engine!r} is not supported; set one of: {', '.join(eng.ENGINE_NAMES)}")
        return None, None
    info = eng.ENGINES[o.engine]
    if o.engine_version is None:
        return info, None
    v = parse_version(o.engine_version)
    if v is None:
        out.err("EngineVersionInvalid", S, "spec.engine.version",
                f"{o.engine_version!r} is not a release version; set one such as {info.newest_verified or info.oldest!r}")
        return info, None
    row = info.release_for(o.engine_version)
    if row is None:
        out.err("EngineVersionUnsupported", S, "spec.engine.version",
                f"{info.display_name} {o.engine_version} has no DFlash support; use {info.display_name} >= {info.oldest}")
        return info, None
    if not info.is_verified(o.engine_version):
        out.warn("EngineVersionUnverified", S, "spec.engine.version",
                 f"{info.display_name} {o.engine_version} flags were not checked against its own parser "
                 f"(capability row from: {'; '.join(row.sources)}); prefer a verified version "
                 f"({', '.join(info.verified_versions()) or 'none recorded'}) or record this one with e2e/flagdrift/run.sh")
    return info, row


def check_options(o: Options) -> list[Finding]:
    """Checks local to one object: no config files, no network. Admission's fast path."""
    out = _Out()
    _check_options(o, out)
    return sort_findings(out.items)


def _check_options(o: Options, out: _Out) -> tuple[eng.EngineInfo | None, eng.EngineRelease | None, gpus.GpuProfile | None]:
    info, row = _engine_release(o, out)

    for field_path, ref in (("spec.target.model", o.target_model), ("spec.drafter.model", o.drafter_model)):
        if ref is not None:
            problem = model_reference_problem(ref)
            if problem:
                out.err("ModelReferenceInvalid", S, field_path, f"{ref!r}: {problem}")

    if o.method not in ("dflash", "ddtree"):
        out.err("MethodUnknown", S, "spec.speculation.method", f"method {o.method!r} is unknown; set 'dflash' or 'ddtree'")
    elif row is not None and o.method not in row.methods:
        why = f" ({eng.DDTREE_SOURCE})" if o.method == "ddtree" else ""
        out.err("MethodUnsupported", S, "spec.speculation.method",
                f"{info.display_name} {o.engine_version} does not support method {o.method!r}{why}; "
                f"use one of: {', '.join(sorted(row.methods))}")
    if o.ddtree_set and o.method != "ddtree":
        out.err("DDTreeFieldsWithoutDDTree", S, "spec.speculation.ddtree",
                "ddtree settings apply only to method 'ddtree'; remove spec.speculation.ddtree or set method: ddtree")
    for name, val in (("budget", o.ddtree_budget), ("topk", o.ddtree_topk)):
        if val is not None and val < 1:
            out.err("DDTreeValueInvalid", S, f"spec.speculation.ddtree.{name}", f"{name} must be >= 1, found {val}")

    prof = None
    if o.gpu is not None:
        if o.gpu not in gpus.PROFILES:
            out.err("UnknownGpuType", S, "spec.gpu.type",
                    f"GPU type {o.gpu!r} has no profile; set one of: {', '.join(gpus.PROFILE_KEYS)}")
        else:
            prof = gpus.PROFILES[o.gpu]
    if o.gpu_count < 1:
        out.err("GpuCountInvalid", S, "spec.gpu.count", f"gpu.count must be >= 1, found {o.gpu_count}")
    elif o.nodes < 1:
        out.err("NodesInvalid", S, "spec.nodes", f"nodes must be >= 1, found {o.nodes}")
    elif o.gpu_count % o.nodes:
        out.err("GpuCountNotDivisibleByNodes", S, "spec.gpu.count",
                f"gpu.count {o.gpu_count} (GPUs per replica) must split evenly over spec.nodes={o.nodes}; "
                f"set gpu.count to a multiple of {o.nodes}")
    elif prof is not None and o.gpu_count // o.nodes > prof.gpus_per_node:
        out.err("TooManyGpusPerNode", S, "spec.gpu.count",
                f"{o.gpu_count // o.nodes} GPUs per node exceed the {prof.gpus_per_node} of a {prof.display_name} node; "
                f"raise spec.nodes to {-(-o.gpu_count // prof.gpus_per_node)} or lower gpu.count")

    if o.block_size is not None and not 2 <= o.block_size <= MAX_BLOCK_SIZE:
        out.err("BlockSizeInvalid", S, "spec.speculation.blockSize",
                f"blockSize must be between 2 and {MAX_BLOCK_SIZE}, found {o.block_size}; leave it unset to use the drafter's")
    if isinstance(o.draft_window, str) and o.draft_window != WINDOW_OFF:
        out.err("DraftWindowInvalid", S, "spec.speculation.draftWindow",
                f"draftWindow must be a positive integer or 'off', found {o.draft_window!r}")
    elif isinstance(o.draft_window, int) and not isinstance(o.draft_window, bool):
        if o.draft_window < 1:
            out.err("DraftWindowInvalid", S, "spec.speculation.draftWindow",
                    f"draftWindow must be a positive integer or 'off', found {o.draft_window}")
        elif o.block_size is not None and o.draft_window < o.block_size:
            out.err("DraftWindowBelowBlockSize", S, "spec.speculation.draftWindow",
                    f"draftWindow {o.draft_window} is below blockSize {o.block_size}: the draft block would not fit "
                    f"its own window; set draftWindow >= {o.block_size} or leave it unset to derive it")

    if info is not None:
        for i, arg in enumerate(o.extra_args):
            if any(ch in arg for ch in "\x00\n\r"):
                out.err("ExtraArgInvalid", S, f"spec.engine.extraArgs[{i}]",
                        "extra arguments may not contain NUL or line breaks; remove them")
        for i, flag in eng.owned_flag_violations(info, list(o.extra_args)):
            out.err("ExtraArgSetsOwnedFlag", S, f"spec.engine.extraArgs[{i}]",
                    f"{flag} is set by the operator from the spec and the configs; remove it from extraArgs "
                    f"and use the spec field instead (spec.speculation, spec.gpu, spec.target, spec.drafter)")

    if info is not None and prof is not None:
        gap = prof.known_gaps.get(info.name)
        if gap:
            out.warn("GpuKernelGap", S, "spec.gpu.type", gap)
        if info.name == "sglang" and o.draft_attention_backend in prof.sglang_unavailable_backends:
            out.err("AttentionBackendUnavailable", S, "spec.speculation.draftAttentionBackend",
                    f"{o.draft_attention_backend} kernels do not exist on {prof.display_name} ({prof.sm}); "
                    f"leave draftAttentionBackend unset to use {prof.sglang_draft_attention_backend}")
    return info, row, prof


# ----------------------------------------------------------------- config rules


def _check_target(t: TargetConfig, out: _Out) -> None:
    for name in ("num_hidden_layers", "hidden_size", "vocab_size"):
        if getattr(t, name) is None:
            out.err("TargetFieldMissing", T, jpath(t.root, name),
                    f"the target config has no {name}; point spec.target at the language model's config.json")


def _check_drafter(d: DrafterConfig, t: TargetConfig | None, out: _Out) -> None:
    dc = d.dflash_config_path
    if not d.is_dflash:
        out.err("NotADFlashDrafter", D, "$.architectures",
                f"architectures {d.architectures or '[]'} name no DFlash model and there is no dflash_config; "
                "point spec.drafter at a DFlash drafter (DFlashDraftModel, DFlash2DraftModel or speculators dflash)")

    # target_layer_ids
    ids = d.target_layer_ids
    if ids is None:
        out.err("TargetLayerIdsMissing", D, jpath(dc, "target_layer_ids"),
                "target_layer_ids is missing: engines then guess the layers, which is wrong for most released "
                "drafters (z-lab/dflash #156); copy the list the drafter was trained with into dflash_config")
    elif not ids.value:
        out.err("TargetLayerIdsEmpty", D, ids.path, "target_layer_ids is empty; set the 0-based target layers the drafter was trained on")
    else:
        n_layers = t.num_hidden_layers.value if (t and t.num_hidden_layers) else None
        seen: set[int] = set()
        for item in ids.value:
            lid = item.value - d.target_layer_ids_offset
            shown = f"{item.value} (target layer {lid})" if d.target_layer_ids_offset else str(item.value)
            if n_layers is not None and not 0 <= lid < n_layers:
                hint = " (aux_hidden_state_layer_ids store id + 1)" if d.target_layer_ids_offset else ""
                out.err("TargetLayerOutOfRange", D, item.path,
                        f"layer id {shown} is outside the target's {n_layers} layers; valid ids are 0..{n_layers - 1}{hint}. "
                        "An off-by-one list loads cleanly and silently collapses acceptance: use the ids from the drafter's training config")
            elif n_layers is None and lid < 0:
                out.err("TargetLayerOutOfRange", D, item.path, f"layer id {shown} is negative; ids are 0-based target layer outputs")
            elif n_layers is not None and lid == n_layers - 1:
                out.warn("TargetLayerIsLast", D, item.path,
                         f"layer id {lid} is the target's last layer; some engines crashed on it (sglang #32204). "
                         "Keep it only if the drafter was trained on it")
            if lid in seen:
                out.warn("TargetLayerIdDuplicate", D, item.path, f"layer id {lid} appears twice; check the drafter's training config")
            seen.add(lid)

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

    # layer types and windows
    n = d.num_hidden_layers.value if d.num_hidden_layers else None
    if n is None:
        out.err("DrafterFieldMissing", D, "$.num_hidden_layers", "the drafter config has no num_hidden_layers")
    if d.layer_types is not None:
        if n is not None and len(d.layer_types.value) != n:
            out.err("LayerTypesLengthMismatch", D, d.layer_types.path,
                    f"layer_types has {len(d.layer_types.value)} entries but num_hidden_layers is {n}; give one entry per layer")
        for item in d.layer_types.value:
            if item.value not in DRAFTER_LAYER_TYPES:
                out.err("LayerTypeUnknown", D, item.path,
                        f"layer type {item.value!r} is not one of {', '.join(DRAFTER_LAYER_TYPES)}")
        if d.use_swa is not None and d.use_swa.value and SLIDING not in [x.value for x in d.layer_types.value]:
            out.warn("SlidingConfigConflict", D, d.use_swa.path,
                     "use_swa is true but layer_types lists no sliding_attention layer: vLLM then runs every layer "
                     "as sliding attention. List the sliding layers in layer_types so every reader agrees")
    elif d.use_swa is None and d.use_sliding_window is not None and d.use_sliding_window.value:
        out.warn("SlidingWindowAmbiguous", D, d.use_sliding_window.path,
                 "use_sliding_window/max_window_layers are Qwen3Config fields the engines' DFlash readers do not consult: "
                 "without layer_types every drafter layer runs as full attention. Add an explicit layer_types list")

    types = d.resolved_layer_types() or []
    has_sliding = SLIDING in types
    win = d.window()
    if has_sliding and (win is None or win.value <= 0):
        where = jpath(dc, "swa_window_size") if (d.use_swa and d.use_swa.value) else "$.sliding_window"
        out.err("SlidingWindowMissing", D, win.path if win else where,
                "the drafter has sliding_attention layers but no positive window; set sliding_window (or "
                "dflash_config.swa_window_size) to the window the drafter was trained with")
    elif has_sliding and win is not None and d.block_size is not None and win.value < d.block_size.value:
        out.err("DraftWindowBelowBlockSize", D, win.path,
                f"the sliding window {win.value} is below block_size {d.block_size.value}: a draft block would not fit "
                "its own window; fix the drafter config (window >= block size)")


def _derive(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, prof, out: _Out) -> Derived | None:
    types = tuple(d.resolved_layer_types() or ())
    has_sliding = SLIDING in types
    mixed = has_sliding and FULL in types
    trained_block = d.block_size.value if d.block_size else DEFAULT_BLOCK_SIZE
    block = trained_block
    if o.block_size is not None:
        if o.block_size > trained_block:
            out.err("BlockSizeAboveTrained", S, "spec.speculation.blockSize",
                    f"blockSize {o.block_size} exceeds the drafter's trained block size {trained_block}; "
                    f"set blockSize <= {trained_block} or leave it unset")
        elif o.block_size < trained_block:
            out.warn("BlockSizeBelowTrained", S, "spec.speculation.blockSize",
                     f"blockSize {o.block_size} is below the drafter's trained {trained_block}: fewer draft tokens per step "
                     "and a lower speed-up ceiling")
        block = o.block_size

    trained_win = d.window()
    drafter_window = trained_win.value if (has_sliding and trained_win and trained_win.value > 0) else None
    window: int | None = None
    if o.draft_window == WINDOW_OFF:
        if has_sliding:
            out.warn("DraftWindowOff", S, "spec.speculation.draftWindow",
                     f"draftWindow is 'off' although the drafter's sliding layers were trained with window "
                     f"{drafter_window}; acceptance falls once the context exceeds it. Remove the override")
    elif isinstance(o.draft_window, int) and not isinstance(o.draft_window, bool) and o.draft_window >= 1:
        window = o.draft_window
        if window < block:
            out.err("DraftWindowBelowBlockSize", S, "spec.speculation.draftWindow",
                    f"draftWindow {window} is below the block size {block}; set draftWindow >= {block} or leave it unset")
        elif drafter_window is not None and window < drafter_window - 1:
            out.warn("DraftWindowBelowTrained", S, "spec.speculation.draftWindow",
                     f"draftWindow {window} keeps fewer context tokens than the trained window {drafter_window} needs "
                     f"(>= {drafter_window - 1}); sliding layers lose context. Leave it unset to derive {drafter_window}")
        elif drafter_window is None:
            out.warn("CompactCacheOnFullAttention", S, "spec.speculation.draftWindow",
                     f"the drafter has no sliding layers: a compact draft cache of {window} tokens hides context the "
                     "full-attention layers were trained to see (an approximation). Leave draftWindow unset for exact drafting")
    elif drafter_window is not None:
        window = drafter_window

    acts = row.hidden_acts if row is not None else frozenset({"silu", "swigluoai"})
    if d.hidden_act is not None and d.hidden_act.value not in acts:
        who = f"{info.display_name} {o.engine_version}" if row is not None else "the engines"
        out.err("HiddenActUnsupported", D, d.hidden_act.path,
                f"hidden_act {d.hidden_act.value!r} is not supported by {who}' DFlash model; use a drafter with "
                f"hidden_act {' or '.join(sorted(acts))}")

    if row is not None and d.format == "dflash":
        for i, arch in enumerate(d.architectures):
            if "dflash" in arch.lower() or row.drafter_architectures is not None:
                if not info.supports_drafter(row, arch):
                    out.err("DrafterArchitectureUnsupported", D, f"$.architectures[{i}]",
                            f"{info.display_name} {o.engine_version} does not serve drafter architecture {arch!r}; "
                            f"it serves {', '.join(sorted(row.drafter_architectures or ()))}. Use another engine or release")
                break

    if row is not None and has_sliding and not row.reads_use_swa:
        listed = [x.value for x in d.layer_types.value] if d.layer_types else []
        if SLIDING not in listed:
            out.err("SlidingLayersIgnoredByEngine", D, d.use_swa.path if d.use_swa else "$.layer_types",
                    f"the drafter declares its sliding layers only through dflash_config.use_swa, which "
                    f"{info.display_name} {o.engine_version} does not read: every layer would run as full attention "
                    "and acceptance falls past the window. Serve it on vLLM, or use a drafter config with "
                    "layer_types and sliding_window")
        elif d.sliding_window is None or d.sliding_window.value <= 0:
            out.err("SlidingLayersIgnoredByEngine", D, "$.sliding_window",
                    f"{info.display_name} {o.engine_version} reads the window from sliding_window only "
                    "(not dflash_config.swa_window_size) and refuses sliding layers without it; add sliding_window")

    if row is not None and o.draft_attention_backend and o.draft_attention_backend not in row.draft_attention_backends:
        out.err("AttentionBackendUnsupportedByEngine", S, "spec.speculation.draftAttentionBackend",
                f"{info.display_name} has no draft attention backend {o.draft_attention_backend!r} that serves DFlash's "
                f"bidirectional layers; use one of {', '.join(sorted(row.draft_attention_backends))} or leave it unset")

    env: dict[str, str] = {}
    backend = None
    if info is not None and info.name == "vllm":
        if isinstance(o.draft_window, int) and not isinstance(o.draft_window, bool) and o.draft_window != drafter_window:
            out.warn("DraftWindowIgnoredByEngine", S, "spec.speculation.draftWindow",
                     "vLLM reads the sliding window from the drafter's config.json and has no draft-window flag; "
                     "this override has no effect. Remove it")
        window = None  # vLLM has no compact-cache flag
        if row is not None and has_sliding:
            if not row.sliding_window_layers:
                out.err("SlidingWindowUnsupportedByEngine", S, "spec.engine.version",
                        f"vLLM {o.engine_version} runs DFlash sliding-window layers as full attention (acceptance "
                        "drops past the window); use vLLM >= 0.30.0")
            elif mixed and row.mixed_layers_env is None:
                out.err("MixedLayersUnsupported", S, "spec.engine.version",
                        f"vLLM {o.engine_version} cannot serve drafters mixing sliding and full layers; upgrade vLLM")
            elif mixed:
                env.update(row.mixed_layers_env or {})
                if env:
                    out.info("V2ModelRunnerEnabled", D, d.layer_types.path if d.layer_types else "$.layer_types",
                             "the drafter mixes sliding and full attention layers: rendering "
                             + ", ".join(f"{k}={v}" for k, v in env.items()) + " (vLLM raises NotImplementedError otherwise)")
    if info is not None and info.name == "sglang":
        if window is not None and row is not None:
            out.info("DraftWindowDerived" if o.draft_window is None else "DraftWindowSet", S, "spec.speculation.draftWindow",
                     f"rendering {row.flags['draft_window']} {window} (SGLang does not infer the window from config.json)")
        causal_ok = (d.causal is not None and d.causal.value) or (bool(types) and all(x == SLIDING for x in types))
        backend = o.draft_attention_backend or (prof.sglang_draft_attention_backend if prof else None)
        if backend == "trtllm_mha" and not causal_ok:
            out.err("DraftAttentionBackendNeedsCausal", S, "spec.speculation.draftAttentionBackend",
                    "trtllm_mha only serves drafters whose layers are all sliding or causal; this drafter has "
                    "bidirectional full-attention layers. Use fa4, flashinfer or triton")

    # tensor parallelism
    tp = o.gpu_count
    if tp > 1:
        for cfg, src, heads, kv in (
            (d, D, d.num_attention_heads, d.num_key_value_heads),
            (t, T, t.num_attention_heads if t else None, t.num_key_value_heads if t else None),
        ):
            if heads is not None and heads.value % tp:
                out.err("TensorParallelHeadsIndivisible", src, heads.path,
                        f"{heads.value} attention heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                        f"use a gpu.count that divides {heads.value}")
            if kv is not None and kv.value % tp and (src is D or tp % kv.value):
                out.err("TensorParallelHeadsIndivisible", src, kv.path,
                        f"{kv.value} KV heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                        f"use a gpu.count that divides {kv.value}")

    # memory fit
    tb = _estimate(estimate_target_bytes, t) if t is not None else None
    db = _estimate(estimate_drafter_bytes, d)
    if prof is not None and tb is not None:
        need = tb + (db or 0)
        cap = prof.memory_bytes * o.gpu_count
        detail = (f"estimated weights {need / 1e9:.0f} GB (target {tb / 1e9:.0f} GB + drafter {(db or 0) / 1e9:.0f} GB) "
                  f"on {o.gpu_count} x {prof.memory_gb:g} GB {prof.display_name} = {cap / 1e9:.0f} GB")
        if need > FIT_FRACTION * cap:
            want = -(-need // (HEADROOM_FRACTION * prof.memory_bytes))
            out.err("WeightsExceedGpuMemory", S, "spec.gpu.count",
                    f"{detail}: the model does not fit; raise gpu.count to at least {int(want)} or use a larger GPU")
        elif need > HEADROOM_FRACTION * cap:
            out.warn("LowKvCacheHeadroom", S, "spec.gpu.count",
                     f"{detail}: under {int((1 - HEADROOM_FRACTION) * 100)}% is left for KV cache and activations; "
                     "expect few concurrent requests, or raise gpu.count")

    if t is not None and t.has_auto_map and not o.trust_remote_code and info is not None:
        out.warn("RemoteCodeNotTrusted", S, "spec.target.trustRemoteCode",
                 "the target config has an auto_map (custom code); if the engine does not support the architecture "
                 "natively it will refuse to load it. Set spec.target.trustRemoteCode: true if you trust that code")

    ddb, ddk = None, None
    if o.method == "ddtree":
        ddb = o.ddtree_budget if o.ddtree_budget is not None else block - 1
        ddk = o.ddtree_topk
    return Derived(
        block_size=block,
        num_speculative_tokens=block - 1,
        draft_window=window,
        drafter_window=drafter_window,
        layer_types=types,
        has_sliding=has_sliding,
        mixed_layers=mixed,
        target_layer_ids=tuple(i.value - d.target_layer_ids_offset for i in (d.target_layer_ids.value if d.target_layer_ids else [])),
        engine_env=env,
        draft_attention_backend=backend,
        ddtree_budget=ddb,
        ddtree_topk=ddk,
        target_weight_bytes=tb,
        drafter_weight_bytes=db,
    )


def _estimate(fn, cfg) -> float | None:
    """A weight estimate, or None when the config's numbers defeat it (inf, nan, values past float
    range in fields read untyped): the fit check is advisory and analyze never raises."""
    try:
        v = fn(cfg)
    except (ArithmeticError, ValueError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None


def analyze(drafter_doc: Any, target_doc: Any, options: Options | None = None) -> Analysis:
    """Every check for a drafter/target pair under the given options, and the derived settings."""
    o = options or Options()
    out = _Out()
    info, row, prof = _check_options(o, out)
    t, tf = parse_target(target_doc)
    out.items.extend(tf)
    d, df = parse_drafter(drafter_doc)
    out.items.extend(df)
    if t is not None:
        _check_target(t, out)
    derived = None
    if d is not None:
        _check_drafter(d, t, out)
        derived = _derive(d, t, o, info, row, prof, out)
    return Analysis(findings=sort_findings(out.items), derived=derived, drafter=d, target=t)


def check(drafter_doc: Any, target_doc: Any, options: Options | None = None) -> list[Finding]:
    return analyze(drafter_doc, target_doc, options).findings
