"""The drafter/target checker: one set of rules for the CLI, webhook, operator and pod preflight.

``check_options`` runs the object-level checks that need no config files (admission's fast
path). ``analyze`` parses both config.json documents, runs every rule of
dflash-engines.md s2 plus the engine and GPU rules, and derives what the renderer needs
(block size, draft window, engine env). It never raises on any JSON input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from . import engines as eng
from . import gpus
from .findings import Finding, Severity, Source, has_errors, sort_findings
from .modelconfig import (FULL, HF_SLIDING_RULES, SLIDING, DRAFTER_LAYER_TYPES, DrafterConfig, TargetConfig, context_limit, jpath,
                          parse_drafter, parse_target)
from .versions import parse_version
from .weights import estimate_drafter_bytes, estimate_target_bytes

DEFAULT_BLOCK_SIZE = 16  # z-lab DFlash default (dflash-engines.md s1)
MAX_BLOCK_SIZE = 64
WINDOW_OFF = "off"
CPU = "cpu"  # spec.gpu.type of the CPU pool (gpus.PROFILES["cpu"])
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
    # spec.engine.maxModelLen: the context the engine serves (None: the target's own limit)
    max_model_len: int | None = None
    # spec.checks.accept: overridable finding codes the user accepts (they become info)
    accept: tuple[str, ...] = ()


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
    # the window the engine applies to the drafter's sliding layers by itself (no compact cache)
    native_window: int | None = None
    # the context the engine serves: spec.engine.maxModelLen, else the target's limit
    served_context: int | None = None
    max_model_len: int | None = None

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
            "nativeWindow": self.native_window,
            "servedContext": self.served_context,
            "maxModelLen": self.max_model_len,
        }


@dataclass
class Analysis:
    findings: list[Finding]
    derived: Derived | None
    drafter: DrafterConfig | None = None
    target: TargetConfig | None = None
    # findings turned into info by spec.checks.accept (as they were before)
    accepted: list[Finding] = field(default_factory=list)

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
    cpu = o.gpu == CPU and eng.cpu_build(info.name) is not None
    verified = eng.cpu_verified_versions(info.name) if cpu else info.verified_versions()
    if not any(parse_version(x) == v for x in verified):
        from . import enginedata

        hit = enginedata.nearest_facts(info.name, o.engine_version, row.since, row.until)
        behaviour = (f"its DFlash behaviour is from the recorded facts of {info.display_name} {hit[0]}" if hit else
                     "its DFlash behaviour is from release notes only (no recorded facts in its row)")
        build = f" ({eng.cpu_build(info.name).distribution})" if cpu else ""
        out.warn("EngineVersionUnverified", S, "spec.engine.version",
                 f"{info.display_name}{build} {o.engine_version} flags were not checked against its own parser and "
                 f"{behaviour} (capability row from: {'; '.join(row.sources[:2])}); prefer a verified version "
                 f"({', '.join(verified) or 'none recorded'}) or record this one with e2e/flagdrift/run.sh")
    return info, row


def _check_cpu_pool(o: Options, info, prof, out: _Out) -> None:
    """spec.gpu.type: cpu: only engines with a CPU build, one process per replica, the engine's own attention."""
    build = eng.cpu_build(info.name)
    if build is None:
        out.err("EngineNoCpuBuild", S, "spec.gpu.type",
                f"{info.display_name} has no CPU build: the CPU pool serves vLLM only ("
                f"{', '.join(b.distribution for b in eng.CPU_BUILDS.values())}); set spec.engine.name: vllm or a GPU type")
        return
    if o.engine_version and parse_version(o.engine_version) and not build.covers(o.engine_version):
        newest = (eng.cpu_verified_versions(info.name) or [build.since])[-1]
        out.err("EngineNoCpuBuild", S, "spec.engine.version",
                f"no CPU build of {info.display_name} {o.engine_version} is published ({build.distribution} "
                f"{build.since} to before {build.until}); set spec.engine.version: {newest}")
    if o.gpu_count != 1:
        out.err("CpuPoolGpuCount", S, "spec.gpu.count",
                f"the CPU pool runs one engine process per replica (no tensor parallelism on CPU), found gpu.count "
                f"{o.gpu_count}; set gpu.count: 1 and size the pod with spec.pod.cpu and spec.pod.memory")
    if o.draft_attention_backend:
        out.err("AttentionBackendUnsupportedByEngine", S, "spec.speculation.draftAttentionBackend",
                f"the CPU build picks its own attention backend ({build.attention_backend}); leave "
                "draftAttentionBackend unset")


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
    elif prof is not None and not prof.accelerator:
        if o.nodes != 1:
            out.err("CpuPoolGpuCount", S, "spec.nodes", "the CPU pool serves single-node replicas; set nodes: 1")
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

    if o.max_model_len is not None and o.max_model_len < 1:
        out.err("MaxModelLenInvalid", S, "spec.engine.maxModelLen", f"maxModelLen must be >= 1, found {o.max_model_len}")
    _check_accept(o, out)

    if info is not None and prof is not None and not prof.accelerator:
        _check_cpu_pool(o, info, prof, out)
    if info is not None:
        _check_extra_args(o, info, row, out)

    if info is not None and prof is not None:
        gap = prof.known_gaps.get(info.name)
        if gap:
            out.warn("GpuKernelGap", S, "spec.gpu.type", gap)
        if info.name == "sglang" and o.draft_attention_backend in prof.sglang_unavailable_backends:
            out.err("AttentionBackendUnavailable", S, "spec.speculation.draftAttentionBackend",
                    f"{o.draft_attention_backend} kernels do not exist on {prof.display_name} ({prof.sm}); "
                    f"leave draftAttentionBackend unset to use {prof.sglang_draft_attention_backend}")
    return info, row, prof


def _check_extra_args(o: Options, info, row, out: _Out) -> None:
    """extraArgs resolved with the release's own parser (core/extraargs.py): every problem names its index."""
    from .extraargs import check_extra_args

    bad_chars = False
    for i, arg in enumerate(o.extra_args):
        if any(ch in arg for ch in "\x00\n\r"):
            bad_chars = True
            out.err("ExtraArgInvalid", S, f"spec.engine.extraArgs[{i}]",
                    "extra arguments may not contain NUL or line breaks; remove them")
    if not o.extra_args or bad_chars:
        return
    version = o.engine_version if (o.engine_version and row is not None) else info.newest_verified
    if version is None:
        return
    build = eng.cpu_build(info.name) if o.gpu == CPU else None
    problems, known = check_extra_args(info.name, version, o.extra_args, snapshot=build.snapshot if build else None)
    for p in problems:
        out.add(Severity(p.severity), p.code, S, f"spec.engine.extraArgs[{p.index}]", p.message)
    if not known:
        out.warn("ExtraArgsUnchecked", S, "spec.engine.extraArgs",
                 f"no argument parser of {info.display_name} {version} is recorded: extraArgs were checked for owned "
                 "flags only, not for unknown flags or missing values; prefer a verified release "
                 f"({', '.join(info.verified_versions()) or 'none recorded'})")


def _check_accept(o: Options, out: _Out) -> None:
    from .catalog import CATALOG

    for i, code in enumerate(o.accept):
        doc = CATALOG.get(code)
        if doc is None:
            out.err("AcceptUnknownCode", S, f"spec.checks.accept[{i}]",
                    f"{code!r} is not a finding code; codes are listed in docs/concepts/drafter-compatibility.md")
        elif not doc.overridable:
            out.err("AcceptNotAllowed", S, f"spec.checks.accept[{i}]",
                    f"{code} states a fact about the configs or the engine, not a judgement, and cannot be accepted; "
                    f"fix the cause instead ({doc.fix})")


# ----------------------------------------------------------------- config rules


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


def _check_target(t: TargetConfig, out: _Out) -> None:
    for name in ("num_hidden_layers", "hidden_size", "vocab_size"):
        if getattr(t, name) is None:
            out.err("TargetFieldMissing", T, jpath(t.root, name),
                    f"the target config has no {name}; point spec.target at the language model's config.json")


def _check_layer_ids(d: DrafterConfig, t: TargetConfig | None, out: _Out) -> None:
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


def _check_drafter(d: DrafterConfig, t: TargetConfig | None, out: _Out) -> None:
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


def _check_duplicates(d: DrafterConfig, t: TargetConfig | None, info, out: _Out) -> None:
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


def _layer_view(d: DrafterConfig, info, row, out: _Out) -> tuple[tuple[str, ...], int | None]:
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


def _block(d: DrafterConfig, o: Options, out: _Out) -> int:
    trained = d.block_size.value if d.block_size else DEFAULT_BLOCK_SIZE
    if o.block_size is None:
        return trained
    if o.block_size > trained:
        out.err("BlockSizeAboveTrained", S, "spec.speculation.blockSize",
                f"blockSize {o.block_size} exceeds the drafter's trained block size {trained}; "
                f"set blockSize <= {trained} or leave it unset")
    elif o.block_size < trained:
        out.warn("BlockSizeBelowTrained", S, "spec.speculation.blockSize",
                 f"blockSize {o.block_size} is below the drafter's trained {trained}: fewer draft tokens per step "
                 "and a lower speed-up ceiling")
    return o.block_size


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def draft_kv_bytes_per_token(d: DrafterConfig) -> int | None:
    """Draft KV cache bytes per token of one sequence (every draft layer, K and V, 16-bit)."""
    n = d.num_hidden_layers.value if d.num_hidden_layers else None
    kv = (d.num_key_value_heads or d.num_attention_heads)
    hd = d.head_dim.value if d.head_dim else (
        d.hidden_size.value // d.num_attention_heads.value if d.hidden_size and d.num_attention_heads else None)
    if n is None or kv is None or hd is None:
        return None
    return n * 2 * kv.value * hd * 2


def _window_trade(d: DrafterConfig, window: int, context: int | None) -> str:
    per_tok = draft_kv_bytes_per_token(d)
    if per_tok is None or context is None:
        return ""
    without, with_ = per_tok * context, per_tok * min(window, context)
    return (f"; draft KV cache per sequence at {context} tokens: {_gb(without)} without the compact cache, "
            f"{_gb(with_)} with it ({d.num_hidden_layers.value} layers x {(d.num_key_value_heads or d.num_attention_heads).value} "
            f"KV heads, 16-bit)")


def _plan_window(d: DrafterConfig, o: Options, info, row, prof, types: tuple[str, ...], drafter_window: int | None,
                 block: int, context: int | None, out: _Out) -> tuple[int | None, int | None, str | None]:
    """(compact-cache window to render, window the engine applies natively, draft attention backend)."""
    has_sliding = drafter_window is not None
    full = [i for i, x in enumerate(types) if x == FULL]
    explicit = o.draft_window if isinstance(o.draft_window, int) and not isinstance(o.draft_window, bool) \
        and o.draft_window >= 1 else None
    if explicit is not None and explicit < block:
        out.err("DraftWindowBelowBlockSize", S, "spec.speculation.draftWindow",
                f"draftWindow {explicit} is below the block size {block}; set draftWindow >= {block} or leave it unset")
    if explicit is not None and has_sliding and explicit < drafter_window - 1:
        out.warn("DraftWindowBelowTrained", S, "spec.speculation.draftWindow",
                 f"draftWindow {explicit} keeps fewer context tokens than the trained window {drafter_window} needs "
                 f"(>= {drafter_window - 1}); sliding layers lose context. Leave it unset")
    if info is None:
        return None, None, None
    if info.name == "vllm":
        if explicit is not None:
            out.warn("DraftWindowIgnoredByEngine", S, "spec.speculation.draftWindow",
                     "vLLM has no compact draft cache: it windows sliding layers from the drafter's config.json itself "
                     "and keeps the full context for full-attention layers; this setting has no effect. Remove it")
        native = drafter_window if (has_sliding and row is not None and row.sliding_window_layers) else None
        if native is not None:
            out.info("DraftWindowNative", D, "$.sliding_window",
                     f"vLLM {o.engine_version} applies window {native} to the drafter's sliding layers "
                     f"{[i for i, x in enumerate(types) if x == SLIDING]} itself (models/qwen3_dflash.py "
                     "_resolve_layer_attention); full-attention layers see the whole context")
        return None, native, None
    # SGLang
    backend = o.draft_attention_backend or (prof.sglang_draft_attention_backend if prof else "flashinfer")
    flag = row.flags.get("draft_window") if row is not None else "the draft-window flag"
    native_ok = row is not None and row.native_draft_window and backend in row.native_window_backends
    full_note = (f"; the compact cache limits every draft layer to the last N tokens, so the full-attention "
                 f"layer(s) {full} lose the context they were trained to see (speculative/dflash_worker*.py "
                 "alloc_memory_pool)") if full else ""
    if explicit is not None:
        trade = _window_trade(d, explicit, context)
        if full:
            out.warn("CompactCacheTruncatesFullAttention", S, "spec.speculation.draftWindow",
                     f"rendering {flag} {explicit}: memory O(window) instead of O(context){trade}{full_note}. "
                     "Leave draftWindow unset for exact drafting")
        else:
            out.info("DraftWindowSet", S, "spec.speculation.draftWindow",
                     f"rendering {flag} {explicit}: memory O(window) instead of O(context){trade}; every draft layer "
                     "is sliding, so the compact cache is exact while it keeps >= window - 1 tokens")
        return explicit, None, backend
    if not has_sliding:
        return None, None, backend
    if native_ok:
        if o.draft_window != WINDOW_OFF:
            out.info("DraftWindowNative", D, "$.sliding_window",
                     f"SGLang {o.engine_version} applies window {drafter_window} to the drafter's sliding layers itself "
                     f"(models/dflash.py _get_dflash_layer_attention_params; the {backend} backend reads the per-layer "
                     f"window): no compact cache is rendered and the full-attention layers keep the whole context. "
                     f"Set draftWindow: N to trade that for O(N) draft memory{_window_trade(d, drafter_window, context)}")
        return None, drafter_window, backend
    why = (f"SGLang {o.engine_version} does not window DFlash draft layers itself (native windows since 0.5.14)"
           if row is not None and not row.native_draft_window else
           f"the {backend} draft backend does not read per-layer windows in SGLang {o.engine_version}")
    if o.draft_window == WINDOW_OFF:
        out.warn("DraftWindowOff", S, "spec.speculation.draftWindow",
                 f"draftWindow is 'off' and {why}: the drafter's sliding layers (trained with window {drafter_window}) "
                 "run as full attention and acceptance falls once the context exceeds it. Remove the override")
        return None, None, backend
    if full:
        out.warn("CompactCacheTruncatesFullAttention", S, "spec.speculation.draftWindow",
                 f"{why}: rendering {flag} {drafter_window} so the sliding layers keep their trained window{full_note}. "
                 "Use an SGLang release >= 0.5.14 for exact drafting")
    else:
        out.info("DraftWindowDerived", S, "spec.speculation.draftWindow",
                 f"{why}: rendering {flag} {drafter_window}; every draft layer is sliding, so the compact cache is exact")
    return drafter_window, None, backend


def _check_context(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, block: int, out: _Out) -> int | None:
    """The served context (maxModelLen, else the target's limit), checked against target and drafter."""
    limit = context_limit(t) if t is not None else None
    if o.max_model_len is not None:
        if o.max_model_len < block:
            out.err("MaxModelLenInvalid", S, "spec.engine.maxModelLen",
                    f"maxModelLen {o.max_model_len} is below the block size {block}; raise it")
        if limit is not None and o.max_model_len > limit.value:
            how = ("vLLM raises at start-up (config/model.py _get_and_verify_max_len) unless "
                   "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" if info is None or info.name == "vllm" else
                   "SGLang refuses it at start-up unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
            out.err("MaxModelLenAboveTarget", S, "spec.engine.maxModelLen",
                    f"maxModelLen {o.max_model_len} exceeds the target's context {limit.value} ({limit.path}): {how}, "
                    f"and positions past it are outside what the model was trained on. Set maxModelLen <= {limit.value}")
    served = o.max_model_len if o.max_model_len is not None else (limit.value if limit else None)
    mpe = d.max_position_embeddings
    if served is None or mpe is None or served <= mpe.value:
        return served
    where = "spec.engine.maxModelLen" if o.max_model_len is not None else "the target's context"
    raises = row.raises_draft_context if (info is not None and info.name == "vllm" and row is not None) else None
    if raises is not None and d.rope_type in raises:
        out.info("DrafterContextRaisedByEngine", D, mpe.path,
                 f"the drafter's max_position_embeddings {mpe.value} is below the served context {served} ({where}); "
                 f"vLLM {o.engine_version} raises it to the served context for RoPE type {d.rope_type!r} "
                 "(config/speculative.py _maybe_override_draft_max_position_embeddings)")
        return served
    out.err("DrafterContextTooShort", D, mpe.path,
            f"the drafter's max_position_embeddings {mpe.value} is below the served context {served} ({where}): the "
            "drafter gets the target's absolute positions, its RoPE cache is sized from its own limit, and the first "
            "longer request reads past it (vLLM: CUDA illegal memory access that takes the engine down, vllm #57941 / "
            f"PR #57964). Set spec.engine.maxModelLen <= {mpe.value}, or use a drafter trained for this context")
    return served


def _check_engine_layer_rules(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, out: _Out) -> None:
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
    from . import enginedata

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


def _check_engine_release(d: DrafterConfig, o: Options, info, row, types: tuple[str, ...], out: _Out) -> dict[str, str]:
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


def _check_hidden_act(d: DrafterConfig, o: Options, info, row, out: _Out) -> None:
    acts = row.hidden_acts if row is not None else frozenset({"silu", "swigluoai"})
    if d.hidden_act is not None and d.hidden_act.value not in acts:
        who = f"{info.display_name} {o.engine_version}'" if row is not None else "the engines'"
        out.err("HiddenActUnsupported", D, d.hidden_act.path,
                f"hidden_act {d.hidden_act.value!r} is not supported by {who} DFlash model; use a drafter with "
                f"hidden_act {' or '.join(sorted(acts))}")


def _check_backend(d: DrafterConfig, o: Options, info, row, types: tuple[str, ...], backend: str | None, out: _Out) -> None:
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


def _check_tp(d: DrafterConfig, t: TargetConfig | None, o: Options, out: _Out) -> None:
    tp = o.gpu_count
    if tp <= 1:
        return
    for src, heads, kv in (
        (D, d.num_attention_heads, d.num_key_value_heads),
        (T, t.num_attention_heads if t else None, t.num_key_value_heads if t else None),
    ):
        if heads is not None and heads.value % tp:
            out.err("TensorParallelHeadsIndivisible", src, heads.path,
                    f"{heads.value} attention heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                    f"use a gpu.count that divides {heads.value}")
        if kv is not None and kv.value % tp and (src is D or tp % kv.value):
            out.err("TensorParallelHeadsIndivisible", src, kv.path,
                    f"{kv.value} KV heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                    f"use a gpu.count that divides {kv.value}")


def _check_fit(d: DrafterConfig, t: TargetConfig | None, o: Options, prof, out: _Out) -> tuple[float | None, float | None]:
    tb = _estimate(estimate_target_bytes, t) if t is not None else None
    db = _estimate(estimate_drafter_bytes, d)
    if prof is not None and prof.accelerator and tb is not None:
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
    return tb, db


def _derive(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, prof, out: _Out) -> Derived:
    _check_duplicates(d, t, info, out)
    types, drafter_window = _layer_view(d, info, row, out)
    block = _block(d, o, out)
    _check_engine_layer_rules(d, t, o, info, row, out)
    env = _check_engine_release(d, o, info, row, types, out)
    _check_hidden_act(d, o, info, row, out)
    served = _check_context(d, t, o, info, row, block, out)
    window, native, backend = _plan_window(d, o, info, row, prof, types, drafter_window, block, served, out)
    _check_backend(d, o, info, row, types, backend, out)
    _check_tp(d, t, o, out)
    tb, db = _check_fit(d, t, o, prof, out)
    if t is not None and t.has_auto_map and not o.trust_remote_code and info is not None:
        out.warn("RemoteCodeNotTrusted", S, "spec.target.trustRemoteCode",
                 "the target config has an auto_map (custom code); if the engine does not support the architecture "
                 "natively it will refuse to load it. Set spec.target.trustRemoteCode: true if you trust that code")
    ddb = (o.ddtree_budget if o.ddtree_budget is not None else block - 1) if o.method == "ddtree" else None
    return Derived(
        block_size=block,
        num_speculative_tokens=block - 1,
        draft_window=window,
        drafter_window=drafter_window,
        layer_types=types,
        has_sliding=drafter_window is not None or SLIDING in types,
        mixed_layers=SLIDING in types and FULL in types,
        target_layer_ids=tuple(i.value - d.target_layer_ids_offset for i in (d.target_layer_ids.value if d.target_layer_ids else [])),
        engine_env=env,
        draft_attention_backend=backend,
        ddtree_budget=ddb,
        ddtree_topk=o.ddtree_topk if o.method == "ddtree" else None,
        target_weight_bytes=tb,
        drafter_weight_bytes=db,
        native_window=native,
        served_context=served,
        max_model_len=o.max_model_len,
    )


def _estimate(fn, cfg) -> float | None:
    """A weight estimate, or None when the config's numbers defeat it (inf, nan, values past float
    range in fields read untyped): the fit check is advisory and analyze never raises."""
    try:
        v = fn(cfg)
    except (ArithmeticError, ValueError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None


# ----------------------------------------------------------------- accepted findings


def apply_accept(findings: list[Finding], accept: tuple[str, ...]) -> tuple[list[Finding], list[Finding]]:
    """(findings with every accepted overridable one turned into info, the accepted ones as they were)."""
    from .catalog import CATALOG

    if not accept:
        return findings, []
    wanted = {c for c in accept if c in CATALOG and CATALOG[c].overridable}
    out, accepted = [], []
    for f in findings:
        if f.code in wanted and f.severity is not Severity.INFO:
            accepted.append(f)
            f = replace(f, severity=Severity.INFO,
                        message=f"accepted ({f.severity.value}) through spec.checks.accept: {f.message}")
        out.append(f)
    return out, accepted


# Findings that say a field is absent (and what is assumed instead). A field present with the wrong
# type is parsed as absent, so each of these would repeat its InvalidFieldType: the wrong type is
# the root cause and the only finding kept for that field.
ABSENCE_CODES = frozenset({"BlockSizeDefaulted", "SlidingWindowDefaulted", "SlidingWindowMissing", "TargetFieldMissing",
                           "TargetLayerIdsMissing", "DrafterFieldMissing", "MaskTokenMissing"})


def _field_name(path: str) -> str:
    return re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])


def one_per_root_cause(findings: list[Finding]) -> list[Finding]:
    """Drop an absence finding for a field that has an InvalidFieldType finding in the same config
    (e.g. ``block_size: NaN`` is InvalidFieldType, not also BlockSizeDefaulted)."""
    invalid = {(f.source, _field_name(f.path)) for f in findings if f.code == "InvalidFieldType"}
    return [f for f in findings if not (f.code in ABSENCE_CODES and (f.source, _field_name(f.path)) in invalid)]


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
    findings, accepted = apply_accept(one_per_root_cause(out.items), o.accept)
    return Analysis(findings=sort_findings(findings), derived=derived, drafter=d, target=t, accepted=accepted)


def check(drafter_doc: Any, target_doc: Any, options: Options | None = None) -> list[Finding]:
    return analyze(drafter_doc, target_doc, options).findings
