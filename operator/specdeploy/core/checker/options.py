"""The object-level checks (pure): what the checker needs from a SpeculativeDeployment (``Options``) and
the rules that need no config files (admission's fast path: ``check_options``): engine and release, GPU
type and count, method, extraArgs, accepted codes, model references."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import engines as eng
from .. import gpus, methods
from ..findings import Finding, Severity, findings_bytes, sort_findings
from ..memo import MiB, approx_size, bounded
from ..versions import parse_version
from .results import S, Out

DEFAULT_BLOCK_SIZE = 16  # z-lab DFlash default (dflash-engines.md s1)
MAX_BLOCK_SIZE = 64
WINDOW_OFF = "off"
CPU = "cpu"  # spec.gpu.type of the CPU pool (gpus.PROFILES["cpu"])

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
    # running requests the memory figures are taken at (spec.speculation.guard.maxConcurrency, CLI --concurrency)
    concurrency: int | None = None
    # spec.checks.accept: overridable finding codes the user accepts (they become info)
    accept: tuple[str, ...] = ()
    # spec.speculation.eagle / .mtp (DraftSteps): steps, top-k, draft tokens (None: specdeploy's defaults)
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    # spec.speculation.ngram: lookup window and draft tokens per step
    ngram_min: int | None = None
    ngram_max: int | None = None
    ngram_tokens: int | None = None


def options_bytes(o: Any) -> int:
    """What an Options value holds, estimated without walking it (a memo key: core/memo.py): the object and its
    fields, each string and tuple of strings (extraArgs: up to 128 x 4 KiB) at its length; anything else walked."""
    if not isinstance(o, Options):
        return approx_size(o)
    last = _last_sized
    if last[0] is o:  # one review sizes its Options for four memos
        return last[1]
    n = 1024
    for v in vars(o).values():
        if isinstance(v, str):
            n += len(v) + 64
        elif isinstance(v, tuple):
            n += 64 + sum(len(x) + 72 if isinstance(x, str) else approx_size(x) for x in v)
    globals()["_last_sized"] = (o, n)
    return n


_last_sized: tuple[Any, int] = (None, 0)  # the last Options sized (one entry)


def _engine_release(o: Options, out: Out) -> tuple[eng.EngineInfo | None, eng.EngineRelease | None]:
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
        from .. import enginedata

        hit = enginedata.nearest_facts(info.name, o.engine_version, row.since, row.until)
        behaviour = (f"its DFlash behaviour is from the recorded facts of {info.display_name} {hit[0]}" if hit else
                     "its DFlash behaviour is from release notes only (no recorded facts in its row)")
        build = f" ({eng.cpu_build(info.name).distribution})" if cpu else ""
        out.warn("EngineVersionUnverified", S, "spec.engine.version",
                 f"{info.display_name}{build} {o.engine_version} flags were not checked against its own parser and "
                 f"{behaviour} (capability row from: {'; '.join(row.sources[:2])}); prefer a verified version "
                 f"({', '.join(verified) or 'none recorded'}) or record this one with e2e/flagdrift/run.sh")
    return info, row


def _check_cpu_pool(o: Options, info, prof, out: Out) -> None:
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
    if o.method in methods.METHODS and o.method not in build.methods and o.method not in methods.REFUSED:
        out.err("MethodUnsupported", S, "spec.speculation.method",
                f"the CPU build ({build.distribution}) runs vLLM's V1 model runner only, which rejects method "
                f"{o.method!r} (config/vllm.py _validate_v1_model_runner: DSpark and DFlash2 drafts need the V2 "
                f"runner); use one of: {methods.method_list(build.methods)}, or a GPU type")
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
    return sort_findings(list(_options_checked(o)[3]))


def check_options_into(o: Options, out: Out) -> tuple[eng.EngineInfo | None, eng.EngineRelease | None, gpus.GpuProfile | None]:
    """The object-level checks into ``out``; (engine, release row, GPU profile) as the other rules need them."""
    info, row, prof, items = _options_checked(o)
    out.items.extend(items)
    return info, row, prof


_Checked = tuple[eng.EngineInfo | None, eng.EngineRelease | None, gpus.GpuProfile | None, tuple[Finding, ...]]


def _options_checked(o: Options) -> _Checked:
    """What ``_run_checks`` finds for these options. Admission checks the options, then analyze checks them again
    for the pair: one run per Options value, remembered exactly (every field equal and of the same type: 1 is not
    True) in a bounded cache (the values come from specs); options with an unhashable value are not remembered."""
    try:
        return _options_checked_exact(o, tuple(map(type, vars(o).values())))
    except TypeError:
        return _options_checked_now(o)


# an Options value holds up to 128 x 4 KiB extraArgs; the engine, release and GPU rows are the tables' own
@bounded("checker.options", 256, 8 * MiB, sizeof=lambda args, r: options_bytes(args[0]) + 256 + findings_bytes(r[3]))
def _options_checked_exact(o: Options, _types: tuple[type, ...]) -> _Checked:
    return _options_checked_now(o)


def _options_checked_now(o: Options) -> _Checked:
    out = Out()
    info, row, prof = _run_checks(o, out)
    return info, row, prof, tuple(out.limited())


def _run_checks(o: Options, out: Out) -> tuple[eng.EngineInfo | None, eng.EngineRelease | None, gpus.GpuProfile | None]:
    info, row = _engine_release(o, out)

    for field_path, ref in (("spec.target.model", o.target_model), ("spec.drafter.model", o.drafter_model)):
        if ref is not None:
            problem = model_reference_problem(ref)
            if problem:
                out.err("ModelReferenceInvalid", S, field_path, f"{ref!r}: {problem}")

    if o.method not in methods.METHODS:
        out.err("MethodUnknown", S, "spec.speculation.method",
                f"method {o.method!r} is unknown; set one of: {', '.join(methods.METHODS)}")
    elif o.method in methods.REFUSED and (row is None or o.method not in row.methods):
        out.err("MethodUnsupported", S, "spec.speculation.method",
                f"method {o.method!r} is in no engine release ({methods.REFUSED[o.method]}); "
                f"use one of: {methods.method_list(row.methods) if row is not None else 'dflash'}")
    elif row is not None and o.method not in row.methods:
        out.err("MethodUnsupported", S, "spec.speculation.method",
                f"{info.display_name} {o.engine_version} does not serve method {o.method!r} (no such name in the "
                f"release's code: {'; '.join(row.sources[:1])}); use one of: {methods.method_list(row.methods)}, "
                "or another engine")
    check_method_settings(o, info, row, out)
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


def check_method_settings(o: Options, info, row, out: Out) -> None:
    """Knobs the engine has no flag for (admission's fast path: no config files needed)."""
    if info is None:
        return
    knob = "eagle" if o.method in methods.EAGLE_METHODS else "mtp" if o.method in methods.MTP_METHODS else None
    if knob and info.name == "vllm":
        if o.topk is not None and o.topk != 1:
            out.err("MethodSettingUnsupported", S, f"spec.speculation.{knob}.topk",
                    f"vLLM drafts one chain per step for {o.method} (config/speculative.py SpeculativeConfig has no "
                    f"top-k); set topk: 1 or leave it unset, or use SGLang for tree drafting")
        if o.draft_tokens is not None and o.steps is not None and o.draft_tokens != o.steps + 1:
            out.err("MethodSettingUnsupported", S, f"spec.speculation.{knob}.draftTokens",
                    f"vLLM verifies steps + 1 tokens per step (num_speculative_tokens = steps); set draftTokens: "
                    f"{o.steps + 1} or leave it unset")
    if knob and o.topk == 1 and o.steps is not None and o.draft_tokens is not None and o.draft_tokens != o.steps + 1:
        out.err("MethodSettingUnsupported", S, f"spec.speculation.{knob}.draftTokens",
                "with topk 1 SGLang forces draft tokens to steps + 1 (arg_groups/speculative_hook.py); set draftTokens: "
                f"{o.steps + 1} or leave it unset")
    if o.method in methods.NGRAM_METHODS and info.name == "sglang":
        for name, val in (("lookupMin", o.ngram_min), ("lookupMax", o.ngram_max)):
            if val is not None:
                out.err("MethodSettingUnsupported", S, f"spec.speculation.ngram.{name}",
                        "SGLang's NGRAM drafter has no prompt-lookup window (it matches a trie: server_args.py "
                        "--speculative-ngram-*; no min/max window flag); remove it or use vLLM")


def _check_extra_args(o: Options, info, row, out: Out) -> None:
    """extraArgs resolved with the release's own parser (core/extraargs.py): every problem names its index."""
    from ..extraargs import check_extra_args

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


def _check_accept(o: Options, out: Out) -> None:
    from ..catalog import CATALOG

    for i, code in enumerate(o.accept):
        doc = CATALOG.get(code)
        if doc is None:
            out.err("AcceptUnknownCode", S, f"spec.checks.accept[{i}]",
                    f"{code!r} is not a finding code; codes are listed in docs/concepts/drafter-compatibility.md")
        elif not doc.overridable:
            out.err("AcceptNotAllowed", S, f"spec.checks.accept[{i}]",
                    f"{code} states a fact about the configs or the engine, not a judgement, and cannot be accepted; "
                    f"fix the cause instead ({doc.fix})")
