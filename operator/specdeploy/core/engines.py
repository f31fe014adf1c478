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
from typing import Mapping

from .versions import in_range, parse_version

RUNTIME_IMAGE_REPO = "ghcr.io/specdeploy/runtime"


@dataclass(frozen=True)
class EngineRelease:
    """Capabilities of one engine over a version range [since, until)."""

    engine: str
    since: str
    until: str | None
    methods: frozenset[str]
    # Logical setting -> flag name in this range (absent: the engine has no such flag).
    flags: Mapping[str, str]
    # Env the engine needs for drafters that mix sliding and full attention layers;
    # None: this range cannot serve such drafters at all.
    mixed_layers_env: Mapping[str, str] | None
    # The engine honours per-layer sliding windows of the drafter.
    sliding_window_layers: bool
    sources: tuple[str, ...]
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
        from ..flagdrift import available_snapshots  # standard library only

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
}

_VLLM_FLAGS = MappingProxyType({
    "revision": "--revision",
    "host": "--host",
    "port": "--port",
    "tensor_parallel": "--tensor-parallel-size",
    "trust_remote_code": "--trust-remote-code",
    "speculative_config": "--speculative-config",
})

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
            "--dist-init-addr", "--trust-remote-code",
            # A config file or JSON override can set any flag: never from extraArgs.
            "--config",
        }
    ),
    releases=(
        EngineRelease(
            engine="sglang",
            since="0.5.8",
            until="0.5.20",
            methods=frozenset({"dflash"}),
            flags=MappingProxyType(
                {**_SGLANG_FLAGS_COMMON, "draft_window": "--speculative-dflash-draft-window-size"}
            ),
            mixed_layers_env=MappingProxyType({}),
            sliding_window_layers=True,
            draft_attention_backends=MappingProxyType({b: b for b in ("flashinfer", "fa3", "fa4", "triton", "trtllm_mha")}),
            sources=(
                "sgl-project/sglang PR #16818 (DFLASH speculative algorithm)",
                "dflash-engines.md s3: window flag first named --speculative-dflash-draft-window-size; "
                "the release that renamed it is unverified (0.5.23 has only the new name)",
            ),
        ),
        EngineRelease(
            engine="sglang",
            since="0.5.20",
            until=None,
            methods=frozenset({"dflash"}),
            flags=MappingProxyType(
                {**_SGLANG_FLAGS_COMMON, "draft_window": "--speculative-draft-window-size"}
            ),
            mixed_layers_env=MappingProxyType({}),
            sliding_window_layers=True,
            drafter_architectures=frozenset({
                "DFlashDraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel", "DFlash2DraftModel",
                "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel",
            }),
            reads_use_swa=False,
            draft_attention_backends=MappingProxyType({b: b for b in ("flashinfer", "fa3", "fa4", "triton", "trtllm_mha")}),
            hidden_acts=frozenset({"silu", "swigluoai"}),
            sources=(
                "sglang 0.5.23 arg_groups/fields/spec.py:165 (--speculative-draft-window-size; no old alias)",
                "sglang 0.5.23 speculative/dflash_utils.py:588 parse_dflash_draft_config (layer_types + sliding_window; "
                "use_swa not read); models/dflash.py EntryClass",
                "flag snapshot specdeploy/data/flags/sglang-0.5.23.json",
            ),
        ),
    ),
)

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
            "--master-port", "--headless",
        }
    ),
    releases=(
        EngineRelease(
            engine="vllm",
            since="0.20.0",
            until="0.30.0",
            methods=frozenset({"dflash"}),
            flags=_VLLM_FLAGS,
            # Before the V2 model runner the DFlash proposer has no sliding-window layers.
            mixed_layers_env=None,
            sliding_window_layers=False,
            draft_attention_backends=MappingProxyType({"flashinfer": "FLASHINFER", "fa3": "FLASH_ATTN", "fa4": "FLASH_ATTN"}),
            sources=(
                "vllm vllm/v1/spec_decode/dflash.py (method dflash)",
                "vllm PR #40727 (layer offset fix); PR #40898 closed unmerged (no SWA)",
            ),
        ),
        EngineRelease(
            engine="vllm",
            since="0.30.0",
            until=None,
            methods=frozenset({"dflash"}),
            flags=_VLLM_FLAGS,
            # V2 is the default runner in 0.33 (config/vllm.py:731); rendered explicitly so a
            # changed default or an inherited VLLM_USE_V2_MODEL_RUNNER=0 cannot break the drafter.
            mixed_layers_env=MappingProxyType({"VLLM_USE_V2_MODEL_RUNNER": "1"}),
            sliding_window_layers=True,
            drafter_architectures=frozenset({
                "DFlashDraftModel", "DFlash2DraftModel", "DFlash2BeamDraftModel", "DFlashMuseGlimmerAssistantModel",
            }),
            prefixes_dflash_architecture=True,
            reads_use_swa=True,
            # Only backends with non-causal attention serve DFlash's bidirectional layers.
            draft_attention_backends=MappingProxyType({"flashinfer": "FLASHINFER", "fa3": "FLASH_ATTN", "fa4": "FLASH_ATTN"}),
            sources=(
                "vllm PR #46104 + V2 model runner (sliding-window DFlash layers)",
                "vllm 0.33.0 models/qwen3_dflash.py:96-157 _resolve_layer_attention; config/vllm.py:3129 (V1 rejects mixed)",
                "vllm 0.33.0 models/registry.py:664-675 (DFlash architectures); transformers_utils/configs/eagle.py:71",
                "flag snapshot specdeploy/data/flags/vllm-0.33.0.json",
            ),
        ),
    ),
)

ENGINES: Mapping[str, EngineInfo] = MappingProxyType({"sglang": SGLANG, "vllm": VLLM})
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)

# DDTree is not in any released engine yet (sglang PR #29907 open). The renderer knows its
# flags so that enabling it is one row change once a release carries it.
DDTREE_SGLANG_FLAGS = MappingProxyType(
    {"budget": "--speculative-ddtree-budget", "topk_env": "SGLANG_DDTREE_MAX_TOPK"}
)
DDTREE_SOURCE = "sgl-project/sglang PR #29907 (open; unreleased); arXiv 2604.12989"


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
