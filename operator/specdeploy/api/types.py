"""SpeculativeDeployment (specdeploy.io/v1alpha1): the API types.

These pydantic models are the single source of the API: the CRD in crds/ is generated from
them (``specdeploy crd``), the reference docs are generated from them, and the operator,
webhook and CLI parse objects with them. JSON is camelCase; every field has a description.
CEL rules for checks local to one object ride along as ``x-kubernetes-validations``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .. import KIND
from ..core import engines, gpus, methods
from ..core.rollout import baseline
from ..core.rollout.canary import DEFAULT_DEADLINE, DEFAULT_WINDOW
from ..core.checker import MAX_BLOCK_SIZE, Options, model_reference_problem
from ..core.names import GROUP_VERSION, ROLLOUT_ANNOTATION
from .loose import loose

EngineName = Literal[engines.ENGINE_NAMES]  # type: ignore[valid-type]
Method = Literal[methods.METHODS]  # type: ignore[valid-type]
GpuType = Literal[gpus.PROFILE_KEYS]  # type: ignore[valid-type]

# RE2-compatible (Kubernetes evaluates OpenAPI patterns with Go regexp): no look-arounds.
MODEL_PATTERN = r"^/?[A-Za-z0-9_.][A-Za-z0-9_./-]*$"
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-]?[A-Za-z0-9.]+)?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?|[mk])?$"
QUANTITY_MAX = 24  # characters: bounded before any arithmetic (a 400-digit memory would overflow a float)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ConfigMapKeyRef(_Model):
    """A key of a ConfigMap in the SpeculativeDeployment's namespace."""

    name: str = Field(description="Name of the ConfigMap.", pattern=NAME_PATTERN, max_length=253)
    key: str = Field(default="config.json", description="Key holding the config.json document.",
                     pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)


class SecretKeyRef(_Model):
    """A key of a Secret in the SpeculativeDeployment's namespace."""

    name: str = Field(description="Name of the Secret.", pattern=NAME_PATTERN, max_length=253)
    key: str = Field(default="token", description="Key holding the value.", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)


class ConfigSource(_Model):
    """Where the model's config.json comes from when not from the model source itself."""

    config_map_key_ref: Optional[ConfigMapKeyRef] = Field(
        default=None, description="Read config.json from this ConfigMap key instead of the model source."
    )


class PvcSource(_Model):
    """A PersistentVolumeClaim holding model files; `model` is then a path inside it."""

    claim_name: str = Field(description="Name of the PersistentVolumeClaim.", pattern=NAME_PATTERN, max_length=253)


class ModelSource(_Model):
    """A model: a hub repository id, or a path inside a PersistentVolumeClaim."""

    model: str = Field(
        description="Hub repository id (e.g. `Qwen/Qwen3.6-27B`) or, with `pvc`, a path inside the claim. "
        "Never starts with '-'; no '.' or '..' segments.",
        pattern=MODEL_PATTERN,
        max_length=512,
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": "!self.matches('(^|/)[.][.]?(/|$)')", "message": "model may not contain '.' or '..' path segments"}
        ]},
    )
    revision: Optional[str] = Field(
        default=None, description="Hub revision (branch, tag or commit) to pin; the resolved commit is recorded in status. "
        "No '.' or '..' segments.",
        pattern=REVISION_PATTERN, max_length=128,
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": "!self.matches('(^|/)[.][.]?(/|$)')", "message": "revision may not contain '.' or '..' path segments"}
        ]},
    )
    config_from: Optional[ConfigSource] = Field(
        default=None, description="Where to read config.json from; default: the model source itself."
    )
    pvc: Optional[PvcSource] = Field(default=None, description="Serve the model from this claim instead of the hub.")
    token_secret_ref: Optional[SecretKeyRef] = Field(
        default=None, description="Hub access token for gated or private repositories (Secret key)."
    )

    @field_validator("model")
    @classmethod
    def _safe_model(cls, v: str) -> str:
        problem = model_reference_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("revision")
    @classmethod
    def _safe_revision(cls, v: str | None) -> str | None:
        if v is not None and any(seg in (".", "..") for seg in v.split("/")):
            raise ValueError("revision may not contain '.' or '..' path segments (a hub URL built from it would "
                             "leave the repository); name a branch, tag or commit")
        return v


class TargetSource(ModelSource):
    """The target model being served."""

    trust_remote_code: bool = Field(
        default=False, description="Allow the engine to run the model repository's own Python code (auto_map)."
    )


class ApiKeySource(_Model):
    """Where the engine's API key comes from: a Secret key, handed to the engine through an environment
    variable (never written into the pod spec or from the spec into argv)."""

    secret_key_ref: SecretKeyRef = Field(
        description="The Secret key holding the API key. The Secret must be one the administrator allows for hub "
        "tokens (chart value hub.tokenSecrets, operator flag --allowed-token-secret).",
    )


class Engine(_Model):
    """The inference engine and its version; flags are derived from the version's capabilities."""

    name: EngineName = Field(description="Inference engine.")
    version: str = Field(description="Engine release, e.g. `0.5.23` (SGLang) or `0.33.0` (vLLM).", pattern=VERSION_PATTERN)
    image: Optional[str] = Field(
        default=None, description="Container image; default: the specdeploy runtime image for this engine version.",
        pattern=IMAGE_PATTERN, max_length=512,
    )
    extra_args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=128,
        description="Additional engine arguments, appended as separate exec-form arguments (no shell). "
        "May not set any flag the operator owns (model, parallelism, speculative-*, metrics, host/port, config files).",
    )
    max_model_len: Optional[StrictInt] = Field(
        default=None, ge=1, le=16 * 1024 * 1024,
        description="Longest context (prompt + output tokens) the engine serves, rendered as the engine's own flag "
        "(vLLM `--max-model-len`, SGLang `--context-length`). Default: the target's limit. Checked against the "
        "target's and the drafter's `max_position_embeddings`; it also sizes the draft-window memory figures.",
    )
    api_key: Optional[ApiKeySource] = Field(
        default=None,
        description="Require this API key (`Authorization: Bearer <key>`) on the engine's inference API, for clusters "
        "without network policies. vLLM reads it from `VLLM_API_KEY`, SGLang from `--api-key` (filled by the kubelet "
        "from the Secret); health and metrics stay open to probes and the operator.",
    )

    @model_validator(mode="after")
    def _one_api_key(self) -> "Engine":
        if self.api_key is not None:
            for i, a in enumerate(self.extra_args):
                if a.split("=", 1)[0].replace("_", "-") == "--api-key":
                    raise ValueError(f"extraArgs[{i}] sets --api-key while spec.engine.apiKey is set: the key comes "
                                     "from the Secret; remove it from extraArgs")
        return self


class DDTree(_Model):
    """DDTree tree drafting (method `ddtree`)."""

    budget: Optional[int] = Field(default=None, ge=1, le=1024, description="Maximum tree nodes; default block size - 1.")
    topk: Optional[int] = Field(default=None, ge=1, le=64, description="Candidates per depth; default: the engine's.")


class DraftSteps(_Model):
    """Chain/tree drafting by steps (methods `eagle3`, `eagle`, `draft_model`; `mtp`). Unset: steps 3 (MTP: the
    target's MTP layer count), top-k 1, draft tokens steps + 1, rendered explicitly for both engines."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.draftTokens) || !has(self.steps) || !has(self.topk) || self.topk != 1 "
                 "|| self.draftTokens == self.steps + 1",
         "message": "with topk 1 draftTokens must be steps + 1 (SGLang forces it)", "fieldPath": ".draftTokens"},
    ]})

    steps: Optional[StrictInt] = Field(
        default=None, ge=1, le=32,
        description="Draft steps (tokens drafted per step along one chain): vLLM `num_speculative_tokens`, SGLang "
        "`--speculative-num-steps`.")
    topk: Optional[StrictInt] = Field(
        default=None, ge=1, le=64,
        description="Branching per step (SGLang `--speculative-eagle-topk`; vLLM drafts a chain: 1 only).")
    draft_tokens: Optional[StrictInt] = Field(
        default=None, ge=2, le=1024,
        description="Tokens verified per step, bonus included (SGLang `--speculative-num-draft-tokens`); with "
        "topk 1 it is steps + 1.")


class NGram(_Model):
    """Prompt-lookup (n-gram) drafting (method `ngram`): no drafter model."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.lookupMin) || !has(self.lookupMax) || self.lookupMin <= self.lookupMax",
         "message": "lookupMin must be <= lookupMax", "fieldPath": ".lookupMin"},
    ]})

    lookup_min: Optional[StrictInt] = Field(
        default=None, ge=1, le=64,
        description="Shortest n-gram matched in the prompt (vLLM `prompt_lookup_min`; default: lookupMax, or 5). "
        "SGLang has no such setting (its NGRAM drafter matches a trie): refused there.")
    lookup_max: Optional[StrictInt] = Field(
        default=None, ge=1, le=64,
        description="Longest n-gram matched in the prompt (vLLM `prompt_lookup_max`; default: lookupMin, or 5). "
        "Refused on SGLang.")
    num_speculative_tokens: Optional[StrictInt] = Field(
        default=None, ge=1, le=64,
        description=f"Draft tokens per step (vLLM `num_speculative_tokens`, default {methods.DEFAULT_NGRAM_TOKENS}; "
        "SGLang `--speculative-num-draft-tokens` = this + 1, SGLang's own default 12 when unset).")

    @model_validator(mode="after")
    def _ordered(self) -> "NGram":
        if self.lookup_min is not None and self.lookup_max is not None and self.lookup_min > self.lookup_max:
            raise ValueError("lookupMin must be <= lookupMax")
        return self


class SpeculationGuard(_Model):
    """Where speculation stops paying: from this many running requests per engine on, the engine drafts nothing
    (rendered into the engine's own switch where its code has one; see docs/how-to/tune-speculation.md)."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "has(self.fromBenchmark) != has(self.maxConcurrency)",
         "message": "set exactly one of guard.fromBenchmark (a SpeculativeBenchmark's measured crossover) or "
                    "guard.maxConcurrency (running requests per engine from which speculation is off)"},
    ]})

    from_benchmark: Optional[str] = Field(
        default=None, pattern=NAME_PATTERN, max_length=253,
        description="Name of a SpeculativeBenchmark in the same namespace: its "
        "`status.recommendation.guard.maxConcurrency` (the measured crossover) is the limit. Until it is `Complete` "
        "nothing is rendered and the `SpeculationGuarded` condition says why.")
    max_concurrency: Optional[StrictInt] = Field(
        default=None, ge=1, le=65536,
        description="Running requests per engine from which speculation is off (vLLM >= 0.24: "
        "`num_speculative_tokens_per_batch_size` in `--speculative-config`, no draft tokens from this batch size on).")

    @model_validator(mode="after")
    def _exactly_one(self) -> "SpeculationGuard":
        if (self.from_benchmark is None) == (self.max_concurrency is None):
            raise ValueError("set exactly one of guard.fromBenchmark (a SpeculativeBenchmark's measured crossover) "
                             "or guard.maxConcurrency (running requests per engine from which speculation is off)")
        return self


class Speculation(_Model):
    """Speculative decoding settings; unset fields are derived from the drafter config."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!has(self.ddtree) || self.method == 'ddtree'",
         "message": "ddtree settings apply only to method ddtree", "fieldPath": ".ddtree"},
        {"rule": "!has(self.eagle) || self.method in ['draft_model', 'eagle', 'eagle3']",
         "message": "eagle settings apply only to methods eagle3, eagle and draft_model", "fieldPath": ".eagle"},
        {"rule": "!has(self.mtp) || self.method == 'mtp'",
         "message": "mtp settings apply only to method mtp", "fieldPath": ".mtp"},
        {"rule": "!has(self.ngram) || self.method == 'ngram'",
         "message": "ngram settings apply only to method ngram", "fieldPath": ".ngram"},
        {"rule": "!has(self.blockSize) || self.method in ['ddtree', 'dflash', 'dflash2', 'dspark']",
         "message": "blockSize applies only to the block drafters (dflash, dflash2, dspark, ddtree)",
         "fieldPath": ".blockSize"},
        {"rule": "!has(self.draftWindow) || self.method in ['ddtree', 'dflash', 'dflash2']",
         "message": "draftWindow applies only to DFlash drafters (dflash, dflash2, ddtree)", "fieldPath": ".draftWindow"},
        {"rule": "!has(self.blockSize) || !has(self.draftWindow) || type(self.draftWindow) == string "
                 "|| int(self.draftWindow) >= self.blockSize",
         "message": "draftWindow must be >= blockSize", "fieldPath": ".draftWindow"},
    ]})

    method: Method = Field(
        default=methods.DEFAULT_METHOD,
        description="Speculative decoding method: `dflash`, `dflash2`, `dspark` (block drafters), `eagle3` (EAGLE-3 "
        "and 3.1), `eagle`, `draft_model` (a smaller model of the same vocabulary), `mtp` (the target's own MTP "
        "layers), `ngram` (prompt lookup), `suffix` (vLLM suffix decoding); `ddtree` is refused until an engine "
        "release carries it. `mtp`, `ngram` and `suffix` take no drafter. Each engine release's own name for the "
        "method and its flags come from the capability table (docs/concepts/methods.md).")
    block_size: Optional[int] = Field(
        default=None, ge=2, le=MAX_BLOCK_SIZE,
        description="Draft block size (tokens per draft step, bonus token included); default: the drafter's block_size.",
    )
    draft_window: Optional[Union[StrictInt, Literal["off"]]] = Field(
        default=None,
        description="Compact draft KV cache window in tokens, or `off`. Default: the drafter's sliding window when it "
        "has sliding layers (rendered as SGLang's draft window flag), else none.",
        json_schema_extra={"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
            {"rule": "type(self) == string ? self == 'off' : int(self) >= 1",
             "message": "draftWindow must be a positive integer or 'off'"}
        ]},
    )
    draft_attention_backend: Optional[Literal["flashinfer", "fa3", "fa4", "triton", "trtllm_mha"]] = Field(
        default=None, description="Draft model attention backend (SGLang); default: the GPU profile's."
    )
    ddtree: Optional[DDTree] = Field(default=None, description="DDTree settings; only with method `ddtree`.")
    eagle: Optional[DraftSteps] = Field(
        default=None, description="Draft steps, top-k and draft tokens; only with methods `eagle3`, `eagle`, `draft_model`.")
    mtp: Optional[DraftSteps] = Field(
        default=None, description="MTP steps, top-k and draft tokens; only with method `mtp` (steps default: the "
        "target's MTP layer count).")
    ngram: Optional[NGram] = Field(default=None, description="Prompt-lookup window and draft tokens; only with method `ngram`.")
    guard: Optional[SpeculationGuard] = Field(
        default=None, description="Turn speculation off from a load where it stops paying (measured by a "
        "SpeculativeBenchmark or given). Rendered into the engine's own switch where the release's code has one; "
        "otherwise a `GuardUnsupported` warning says why. The `SpeculationProfitable` condition compares live load "
        "with it either way.")

    @model_validator(mode="after")
    def _knobs_match_method(self) -> "Speculation":
        problems = _speculation_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _speculation_problems(s: "Speculation") -> list[str]:
    out = []
    for knob in ("eagle", "mtp", "ngram"):
        allowed = methods.knob_methods(knob)
        if getattr(s, knob) is not None and s.method not in allowed:
            out.append(f"{knob} settings apply only to method(s) {methods.method_list(allowed)}")
    if s.block_size is not None and s.method not in methods.BLOCK_METHODS:
        out.append("blockSize applies only to the block drafters (dflash, dflash2, dspark, ddtree)")
    if s.draft_window is not None and s.method not in methods.WINDOW_METHODS:
        out.append("draftWindow applies only to DFlash drafters (dflash, dflash2, ddtree)")
    return out



class Gpu(_Model):
    """GPUs of one replica."""

    type: GpuType = Field(description="GPU profile: selects nodes by `nvidia.com/gpu.product`. `cpu`: no accelerator "
                          "(development, CI, GPU-less clusters): the engine's CPU build (vLLM only), no GPU request, "
                          "node selector or GPU flag, KV cache from `spec.pod.memory`.")
    count: int = Field(default=1, ge=1, le=64, description="GPUs per replica (the tensor-parallel size); 1 on the "
                       "CPU pool.")


class Toleration(_Model):
    """An extra pod toleration (the GPU taint is always tolerated)."""

    key: Optional[str] = Field(default=None, description="Taint key.", max_length=316)
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Match operator.")
    value: Optional[str] = Field(default=None, description="Taint value.", max_length=63)
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(default=None, description="Taint effect.")


class Pod(_Model):
    """Pod-level settings of the engine workload."""

    shm_size: str = Field(default="16Gi", pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX,
                          description="Size of the /dev/shm memory volume.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels to select on (the GPU product label is always set)."
    )
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Extra tolerations.")
    priority_class_name: Optional[str] = Field(default=None, pattern=NAME_PATTERN, description="Pod priority class.")
    service_account_name: Optional[str] = Field(default=None, pattern=NAME_PATTERN, description="Engine pods' service account.")
    cpu: Optional[str] = Field(default=None, pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX, description="CPU request and limit of the engine "
                               "container (CPU pool default: 2).")
    memory: Optional[str] = Field(default=None, pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX, description="Memory request and limit of the "
                                  "engine container (CPU pool default: 4Gi; half of it is the KV cache there).")


class Monitoring(_Model):
    """Acceptance monitoring thresholds (docs/concepts/acceptance.md)."""

    min_acceptance_length: float = Field(
        default=1.5, ge=1.0, le=64.0,
        description="Acceptance length (tokens per step, bonus included) below which speculation counts as collapsed.",
    )
    regression_fraction: float = Field(
        default=baseline.DEFAULT_REGRESSION_FRACTION, ge=0.01, le=0.99,
        description="Fraction below the learned baseline acceptance length (`status.acceptance.baseline`) at which "
        "speculation counts as regressed (`AcceptanceRegressed`): 0.25 flags tau 4.0 falling under 3.0.",
    )
    baseline_settle_seconds: int = Field(
        default=baseline.DEFAULT_SETTLE_SECONDS, ge=0, le=7 * 86400,
        description="A speculation revision's (drafter, target, engine, speculation settings) baseline is the mean "
        "acceptance length of its latest windows with traffic that span at least this many seconds (and hold "
        "`baselineMinDrafts` drafts and 3 windows).",
    )
    baseline_min_drafts: int = Field(
        default=baseline.DEFAULT_MIN_DRAFTS, ge=0, le=10**12,
        description="Drafts (speculative steps) a baseline must average at least (vLLM; SGLang exports no draft "
        f"counts and settles on time and {baseline.MIN_SAMPLES} windows alone).",
    )


class Checks(_Model):
    """How the drafter/target check treats this deployment."""

    accept: list[Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{1,63}$")]] = Field(
        default_factory=list, max_length=64,
        description="Finding codes to accept: each listed warning, or error that is a judgement rather than a fact "
        "(e.g. `TargetLayerIdsShifted`, `DrafterContextTooShort`), becomes info and is recorded in "
        "`status.acceptedFindings`. Facts (e.g. `HiddenSizeMismatch`) cannot be accepted; the catalog in "
        "docs/concepts/drafter-compatibility.md says which codes can.",
    )


class Tuning(_Model):
    """Tuned fused-MoE kernels for the target on this GPU product and engine version."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.storage == 'pvc' ? has(self.pvc) : !has(self.pvc)",
         "message": "tuning.pvc is required with storage pvc and only allowed with it", "fieldPath": ".pvc"},
    ]})

    enabled: bool = Field(
        default=False,
        description="Run the engine's own fused-MoE tuning once per (target model, GPU product, engine version) as a Job "
        "on one replica's GPUs, and mount the result into the engine pods (SGLANG_MOE_CONFIG_DIR / "
        "VLLM_TUNED_CONFIG_FOLDER). Only MoE targets whose experts run on the Triton fused-MoE kernel are tuned.",
    )
    storage: Literal["configMap", "pvc"] = Field(
        default="configMap",
        description="Where the tuned files are kept: `configMap` (each file is a few KB; a ConfigMap holds up to ~1 MiB) "
        "or `pvc` (the claim in `pvc`, ReadWriteMany; one subdirectory per tuning key).",
    )
    pvc: Optional[PvcSource] = Field(default=None, description="The claim tuned files are written to (storage `pvc`).")

    @model_validator(mode="after")
    def _storage_matches(self) -> "Tuning":
        if (self.storage == "pvc") != (self.pvc is not None):
            raise ValueError("tuning.pvc is required with storage pvc and only allowed with it")
        return self


class Cache(_Model):
    """Where engine pods keep the hub cache (HF_HOME) that hub models' weights are downloaded into."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.type == 'pvc' ? has(self.pvc) : !has(self.pvc)",
         "message": "cache.pvc is required with type pvc and only allowed with it", "fieldPath": ".pvc"},
        {"rule": "self.type == 'nodePath' ? has(self.nodePath) : !has(self.nodePath)",
         "message": "cache.nodePath is required with type nodePath and only allowed with it", "fieldPath": ".nodePath"},
    ]})

    type: Literal["emptyDir", "pvc", "nodePath"] = Field(
        description="`emptyDir`: a fresh cache per pod (every pod start downloads the weights). `pvc`: an existing "
        "claim (ReadWriteMany: shared by every replica on every node; ReadWriteOnce: by the replicas on the node "
        "that mounts it, so pin one node pool with `pod.nodeSelector`). `nodePath`: a node-local directory an "
        "administrator listed in the chart value `cache.nodePaths` (never an arbitrary host path). With `pvc` and "
        "`nodePath` the preflight init container downloads the weights once, under a file lock, and the engine "
        "starts offline from the cache.")
    pvc: Optional[PvcSource] = Field(default=None, description="The claim (type `pvc`); mounted read-write at the "
                                     "hub cache. Subject to the tenancy policy like model claims.")
    node_path: Optional[str] = Field(default=None, pattern=NAME_PATTERN, max_length=63,
                                     description="Name of a node-local cache path in the chart value "
                                     "`cache.nodePaths` (type `nodePath`).")

    @model_validator(mode="after")
    def _one_source(self) -> "Cache":
        if (self.type == "pvc") != (self.pvc is not None):
            raise ValueError("cache.pvc is required with type pvc and only allowed with it")
        if (self.type == "nodePath") != (self.node_path is not None):
            raise ValueError("cache.nodePath is required with type nodePath and only allowed with it")
        return self


DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"  # Go-style (CEL's duration()): 30s, 10m, 1h30m
MIN_ANALYSIS_WINDOW_S = 10.0


def _duration(v: str, field: str, at_least: float = 0.0) -> str:
    from ..core.rollout.canary import parse_duration

    try:
        seconds = parse_duration(v)
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None
    if seconds < at_least:
        raise ValueError(f"{field} is {v} but must be at least {at_least:g}s")
    return v


class CanarySettings(_Model):
    """The canary of a rollout: pods of the new revision beside the stable ones, behind the same Service."""

    replicas: StrictInt = Field(
        default=1, ge=1, le=100,
        description="Pods of the new revision during the analysis. The Service spreads requests over stable and "
        "canary pods by endpoint count: 1 canary beside 3 stable pods takes about a quarter of the traffic.")


class RolloutProbe(_Model):
    """The operator's own probe: a fixed prompt set at temperature 0 sent to one stable and one canary pod."""

    enabled: bool = Field(
        default=True,
        description="Send the probe prompts, so a deployment with little traffic is still judged, and compare the "
        "two revisions' greedy outputs (speculation must not change them; a difference fails the canary when the "
        "target and the engine are the same on both revisions).")
    max_tokens: StrictInt = Field(default=32, ge=1, le=256, description="Tokens generated per probe prompt.")


class RolloutAnalysis(_Model):
    """What the canary must show before it is promoted: counted from the engines' own counters, per revision, as
    deltas since the canary started."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "duration(self.window) >= duration('10s')", "message": "window must be at least 10s",
         "fieldPath": ".window"},
    ]})

    window: str = Field(
        default=DEFAULT_WINDOW, pattern=DURATION_PATTERN, max_length=32,
        description="Shortest analysis: no verdict but a crash before this much time (Go duration: `30s`, `10m`, "
        "`1h30m`; at least 10s).")
    min_drafts: StrictInt = Field(
        default=200, ge=0, le=10**9,
        description="Draft steps each revision (stable and canary) must have made before the canary is judged.")
    min_acceptance_ratio: float = Field(
        default=0.9, ge=0.0, le=1.0,
        description="Least canary acceptance length (tau) over the stable one's; below it the canary is rolled back "
        "(`AcceptanceBelowStable`).")
    min_throughput_ratio: float = Field(
        default=0.9, ge=0.0, le=1.0,
        description="Least canary output tokens per second per running request over the stable one's "
        "(`ThroughputBelowStable`); 0 turns the check off.")
    max_error_rate: float = Field(
        default=0.01, ge=0.0, le=1.0,
        description="Most failed requests per request on the canary (`ErrorRateAboveLimit`).")
    probe: RolloutProbe = Field(default_factory=RolloutProbe, description="The operator's temperature-0 probe.")

    @field_validator("window")
    @classmethod
    def _window(cls, v: str) -> str:
        return _duration(v, "window", MIN_ANALYSIS_WINDOW_S)


class Rollout(_Model):
    """How a change of the engine pod template (drafter, revisions, engine version or image, speculation
    settings, extraArgs, resources) reaches the pods; scale changes never start a rollout."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": f"(has(self.deadline) ? duration(self.deadline) : duration('{DEFAULT_DEADLINE}')) > "
                 "(has(self.analysis) && has(self.analysis.window) ? duration(self.analysis.window) : "
                 f"duration('{DEFAULT_WINDOW}'))",
         "message": "deadline must be longer than analysis.window: raise deadline or shorten analysis.window",
         "fieldPath": ".deadline"},
    ]})

    strategy: Literal["RollingUpdate", "Canary"] = Field(
        default="RollingUpdate",
        description="`RollingUpdate`: the Deployment replaces its pods one at a time (no analysis). `Canary`: the new "
        "revision runs as a second Deployment (`<name>-canary`) beside the untouched stable one, is judged on "
        "measured acceptance, throughput, errors and greedy outputs, then promoted or rolled back (single-node "
        "deployments only: `nodes: 1`).")
    canary: CanarySettings = Field(default_factory=CanarySettings, description="The canary's size.")
    analysis: RolloutAnalysis = Field(default_factory=RolloutAnalysis, description="What the canary must show.")
    deadline: str = Field(
        default=DEFAULT_DEADLINE, pattern=DURATION_PATTERN, max_length=32,
        description="Longest a canary may take (from its Deployment's creation) before it is rolled back "
        "(`DeadlineExceeded`); longer than `analysis.window`.")
    on_failure: Literal["Rollback"] = Field(
        default="Rollback", description="What a failed canary does: `Rollback` (delete the canary, keep the stable "
        "revision, refuse the failed one until the spec changes again or the `" + ROLLOUT_ANNOTATION + ": retry` "
        "annotation is set).")

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, v: str) -> str:
        return _duration(v, "deadline")

    @model_validator(mode="after")
    def _deadline_after_window(self) -> "Rollout":
        from ..core.rollout.canary import parse_duration

        if parse_duration(self.deadline) <= parse_duration(self.analysis.window):
            raise ValueError(f"spec.rollout.deadline is {self.deadline}, not longer than spec.rollout.analysis.window "
                             f"({self.analysis.window}): raise the deadline or shorten the window")
        return self


CANARY_MULTINODE = ("spec.rollout.strategy: Canary needs spec.nodes: 1 (multi-node canaries are not "
                    "supported); use RollingUpdate")


class SpeculativeDeploymentSpec(_Model):
    """Desired state: a target model served with speculative decoding (a drafter model, the target's own MTP
    layers or prompt lookup) on a GPU pool."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self.gpu.count % self.nodes == 0",
         "message": "gpu.count (GPUs per replica) must be a multiple of nodes", "fieldPath": ".gpu.count"},
        {"rule": "self.gpu.count / self.nodes <= 8",
         "message": "at most 8 GPUs per node: raise nodes or lower gpu.count", "fieldPath": ".gpu.count"},
        {"rule": "(has(self.speculation) && has(self.speculation.method) && self.speculation.method in "
                 "['mtp', 'ngram', 'suffix']) ? !has(self.drafter) : has(self.drafter)",
         "message": "spec.drafter is required for drafter methods and refused for mtp, ngram and suffix (the target "
                    "drafts for itself or nothing does)", "fieldPath": ".drafter"},
        {"rule": "!has(self.rollout) || !has(self.rollout.strategy) || self.rollout.strategy != 'Canary' "
                 "|| self.nodes == 1",
         "message": CANARY_MULTINODE, "fieldPath": ".rollout.strategy"},
    ]})

    engine: Engine = Field(description="Inference engine.")
    target: TargetSource = Field(description="The model being served.")
    drafter: Optional[ModelSource] = Field(
        default=None, description="The drafter model (DFlash, DFlash2, DSpark, EAGLE-3, EAGLE or draft model). "
        "Required for those methods; refused for `mtp`, `ngram` and `suffix`.")
    speculation: Speculation = Field(default_factory=Speculation, description="Speculative decoding settings.")
    gpu: Gpu = Field(description="GPUs per replica.")
    nodes: int = Field(default=1, ge=1, le=16, description="Nodes per replica; more than 1 renders a LeaderWorkerSet.")
    replicas: int = Field(default=1, ge=0, le=1000, description="Number of replicas.")
    pod: Pod = Field(default_factory=Pod, description="Pod-level settings.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="Acceptance monitoring.")
    tuning: Tuning = Field(default_factory=Tuning, description="Tuned fused-MoE kernels (MoE targets).")
    checks: Checks = Field(default_factory=Checks, description="Findings the author accepts.")
    cache: Optional[Cache] = Field(
        default=None, description="Hub cache of the engine pods (where hub weights are downloaded to). Default: the "
        "chart value `cache.default` (an `emptyDir` unless the administrator set one). Models served from a claim "
        "(`pvc`) and a drafter baked into the image are never downloaded.")
    rollout: Optional[Rollout] = Field(
        default=None, description="How changes of the engine pod template roll out (absent: `RollingUpdate`). "
        "docs/concepts/reconcile.md, \"Rollouts\".")

    @model_validator(mode="after")
    def _canary_single_node(self) -> "SpeculativeDeploymentSpec":
        if self.rollout is not None and self.rollout.strategy == "Canary" and self.nodes > 1:
            raise ValueError(CANARY_MULTINODE)
        return self

    def canary(self) -> bool:
        """Whether changes roll out through a canary (spec.rollout.strategy Canary)."""
        return self.rollout is not None and self.rollout.strategy == "Canary"

    @model_validator(mode="after")
    def _drafter_matches_method(self) -> "SpeculativeDeploymentSpec":
        m = self.speculation.method
        if methods.needs_drafter(m) and self.drafter is None:
            raise ValueError(f"spec.drafter is required for method {m}: set the drafter model")
        if not methods.needs_drafter(m) and self.drafter is not None:
            raise ValueError(f"spec.drafter is refused for method {m} (the target drafts for itself or nothing does): "
                             "remove spec.drafter")
        return self

    def model_sources(self) -> list[tuple[str, ModelSource]]:
        """(role, source) of every model the deployment serves: the target, and the drafter when the method has one."""
        return [("target", self.target)] + ([("drafter", self.drafter)] if self.drafter is not None else [])

    def options(self) -> Options:
        """The checker's view of this spec (``checker_options``)."""
        return checker_options(self)


def checker_options(spec: SpeculativeDeploymentSpec | Any, *, lenient: bool = False) -> Options | None:
    """The spec -> checker mapping, written once: the admission webhook (its lenient path too), the reconciler,
    the renderer and the pod's preflight (it re-runs the check with the options the renderer wrote into the
    engine config) all take the checker's options from here.

    ``lenient``: ``spec`` is a raw spec that pydantic refused (a dict; anything else: None); every well-typed
    field is read as it is, defaults stand for the rest (``api/loose.py``), so that the checker can describe
    a refused value in its own words alongside the schema's."""
    if lenient:
        if not isinstance(spec, dict):
            return None
        spec = loose(SpeculativeDeploymentSpec, spec)
    s = spec.speculation
    knobs = s.eagle or s.mtp
    return Options(
        engine=spec.engine.name,
        engine_version=spec.engine.version,
        method=s.method,
        gpu=spec.gpu.type,
        gpu_count=spec.gpu.count,
        nodes=spec.nodes,
        block_size=s.block_size,
        draft_window=s.draft_window,
        draft_attention_backend=s.draft_attention_backend,
        extra_args=tuple(spec.engine.extra_args),
        ddtree_budget=s.ddtree.budget if s.ddtree else None,
        ddtree_topk=s.ddtree.topk if s.ddtree else None,
        ddtree_set=s.ddtree is not None,
        trust_remote_code=spec.target.trust_remote_code,
        target_model=spec.target.model,
        drafter_model=spec.drafter.model if spec.drafter is not None else None,
        steps=knobs.steps if knobs is not None else None,
        topk=knobs.topk if knobs is not None else None,
        draft_tokens=knobs.draft_tokens if knobs is not None else None,
        ngram_min=s.ngram.lookup_min if s.ngram else None,
        ngram_max=s.ngram.lookup_max if s.ngram else None,
        ngram_tokens=s.ngram.num_speculative_tokens if s.ngram else None,
        max_model_len=spec.engine.max_model_len,
        concurrency=spec.speculation.guard.max_concurrency if spec.speculation.guard else None,
        accept=tuple(spec.checks.accept),
    )


class Condition(_Model):
    """A metav1.Condition."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    type: str = Field(description="Condition type, CamelCase.", max_length=316)
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition.")
    reason: str = Field(description="CamelCase reason.", max_length=1024)
    message: str = Field(default="", description="Human-readable details.", max_length=32768)
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: Optional[int] = Field(default=None, ge=0, description="The .metadata.generation this condition was set for.")


class MemoryFigures(_Model):
    """The KV cache the GPUs hold after the weights, from the configs (core/memory.py; estimates for planning)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    gpu_count: int = Field(description="GPUs of one replica (the pool is their sum).")
    kv_pool_gi_b: float = Field(alias="kvPoolGiB", description="KV cache pool after weights and the engine's reserve, GiB.")
    target_kv_ki_b_per_token: float = Field(alias="targetKvKiBPerToken", description="Target KV cache per context token, KiB.")
    drafter_kv_ki_b_per_token: float = Field(alias="drafterKvKiBPerToken",
                                             description="Drafter KV cache per context token (windows applied), KiB.")
    drafter_weight_gi_b: float = Field(alias="drafterWeightGiB", description="Drafter weights, GiB.")
    capacity_tokens: int = Field(description="Context tokens the pool holds (target and drafter) at `atContext`.")
    capacity_tokens_without_drafter: int = Field(description="The same without the drafter (weights and KV).")
    drafter_capacity_share: float = Field(description="Share of the capacity the drafter takes (0-1).")
    at_context: int = Field(description="Context the figures are taken at (the served context).")
    concurrency: int = Field(description="Running requests `largestContext` is taken at (the guard's limit, else 1).")
    largest_context: int = Field(description="Longest context that fits `concurrency` sequences at once, tokens.")


class Resolved(_Model):
    """What the operator resolved and derived for the current generation."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    target_config_digest: Optional[str] = Field(default=None, description="sha256 of the target config.json checked.")
    drafter_config_digest: Optional[str] = Field(default=None, description="sha256 of the drafter config.json checked.")
    target_revision: Optional[str] = Field(default=None, description="Resolved commit of the target.")
    drafter_revision: Optional[str] = Field(default=None, description="Resolved commit of the drafter.")
    method: Optional[str] = Field(default=None, description="Speculative method rendered (spec.speculation.method).")
    engine_method: Optional[str] = Field(
        default=None, description="The engine release's own name for it (SGLang `--speculative-algorithm`, vLLM "
        "`speculative_config.method`), from the capability table.")
    block_size: Optional[int] = Field(default=None, description="Tokens verified per step, bonus included (DFlash: "
                                      "the draft block size).")
    num_speculative_tokens: Optional[int] = Field(default=None, description="Draft tokens per step.")
    draft_window: Optional[int] = Field(default=None, description="Compact draft cache window in use, if any.")
    native_window: Optional[int] = Field(
        default=None, description="Window the engine applies to the drafter's sliding layers itself (no compact cache).")
    served_context: Optional[int] = Field(
        default=None, description="Context the engine serves: spec.engine.maxModelLen, else the target's limit.")
    profile: Optional[str] = Field(default=None, description="GPU profile key.")
    gpu_product: Optional[str] = Field(default=None, description="`nvidia.com/gpu.product` selected on.")
    image: Optional[str] = Field(default=None, description="Engine image in use.")
    config_hash: Optional[str] = Field(default=None, description="Hash of the rendered engine config (rolls pods on change).")
    cache: Optional[str] = Field(default=None, description="Hub cache of the engine pods: `emptyDir`, `pvc/<claim>` "
                                 "or `nodePath/<name>`.")
    target_weights: Optional[str] = Field(default=None, description="Where the target's weights come from.")
    drafter_weights: Optional[str] = Field(default=None, description="Where the drafter's weights come from.")
    guard_max_concurrency: Optional[int] = Field(
        default=None, description="Running requests per engine from which speculation is off (spec.speculation.guard, "
        "resolved; a benchmark's crossover for fromBenchmark).")
    memory: Optional[MemoryFigures] = Field(
        default=None, description="KV cache figures of the GPU profile: pool, bytes per token, capacity, largest context.")


class AcceptanceBaseline(_Model):
    """The acceptance length a deployment settled at: what `AcceptanceRegressed` compares with."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    length: float = Field(description="Baseline acceptance length (tokens per step, bonus included).")
    revision: str = Field(description="Speculation revision it was learned on (compare `status.acceptance.revision`).")
    since: str = Field(description="When it was learned (RFC 3339).")
    drafts: Optional[int] = Field(default=None, ge=0, description="Drafts averaged (vLLM).")
    reset_token: Optional[str] = Field(
        default=None, description=f"Value of the `{baseline.RESET_ANNOTATION}` annotation when it was learned.")


class Acceptance(_Model):
    """Speculative acceptance measured from the engines' metrics."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    length: Optional[float] = Field(default=None, description="Mean acceptance length (tokens per step, bonus included).")
    rate: Optional[float] = Field(default=None, description="Accepted / drafted tokens.")
    per_position: list[float] = Field(
        default_factory=list, description="Acceptance rate per draft position (vLLM): accepted at position k / drafts, "
        "non-increasing in k; SGLang exports none.")
    window: Optional[str] = Field(default=None, description="Window the figures cover, e.g. `5m`.")
    sampled_at: Optional[str] = Field(default=None, description="When the figures were computed (RFC 3339).")
    pods_reporting: Optional[int] = Field(default=None, ge=0, description="Engine pods whose metrics were used.")
    source: Optional[str] = Field(
        default=None, description="Series the length was computed from: `vllmCounters` (vLLM's spec_decode "
        "counters), `sglangVerifyCalls` (SGLang's generation tokens per `sglang:spec_verify_calls_total`, where the "
        "release exports it) or `sglangAcceptLengthGauge` (the `sglang:spec_accept_length` gauge, older releases or "
        "no request finished in the window).")
    revision: Optional[str] = Field(
        default=None, description="Speculation revision the figures were measured on: a digest of the drafter, "
        "target, engine and speculation settings.")
    baseline: Optional[AcceptanceBaseline] = Field(
        default=None, description="Learned baseline; kept across revisions until a new revision settles within "
        "`spec.monitoring.regressionFraction` of it or the reset annotation asks for a new one.")


class AcceptedFinding(_Model):
    """A finding turned into info by spec.checks.accept, as it was before."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    code: str = Field(description="Finding code.")
    severity: str = Field(description="Severity it had before it was accepted.")
    source: str = Field(description="drafter, target or spec.")
    path: str = Field(description="JSON path (config) or field path (spec).")
    message: str = Field(description="What the check found.")


class _StatusModel(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class RolloutDecision(_StatusModel):
    """The last decision on a canary, with the numbers it was taken on."""

    result: Literal["Promote", "Rollback"] = Field(description="`Promote` or `Rollback`.")
    reason: str = Field(max_length=128, description="CamelCase reason: `Promoted`, `AcceptanceBelowStable`, "
                        "`ThroughputBelowStable`, `OutputsDiffer`, `CanaryCrashing`, `DeadlineExceeded`, "
                        "`ErrorRateAboveLimit`, `Aborted`.")
    message: str = Field(default="", max_length=4096, description="What was measured, e.g. `canary tau 1.45 vs "
                         "stable 3.72: 0.39 < 0.90`.")
    at: str = Field(description="When it was taken (RFC 3339).")


class RolloutTrack(_StatusModel):
    """One revision's figures over the analysis (deltas of its pods' counters since the canary started)."""

    track: Literal["stable", "canary"] = Field(description="`stable` or `canary`.")
    revision: Optional[str] = Field(default=None, description="The rollout revision the track's pods serve.")
    pods: Optional[int] = Field(default=None, ge=0, description="Pods counted.")
    drafts: Optional[float] = Field(default=None, ge=0, description="Draft steps counted.")
    tau: Optional[float] = Field(default=None, description="Acceptance length (tokens per step, bonus included).")
    tokens_per_second_per_request: Optional[float] = Field(
        default=None, description="Output tokens per second per running request.")
    requests: Optional[float] = Field(default=None, ge=0, description="Requests finished.")
    failed_requests: Optional[float] = Field(default=None, ge=0, description="Requests that failed.")
    error_rate: Optional[float] = Field(default=None, description="Failed requests / requests.")


class RolloutProbeResult(_StatusModel):
    """The operator's temperature-0 probe of one stable and one canary pod."""

    prompts: int = Field(ge=0, description="Prompts sent to both revisions.")
    identical: int = Field(ge=0, description="Prompts whose completions were identical.")
    message: str = Field(default="", max_length=4096, description="The first difference, or why the probe failed.")


class RolloutStatus(_StatusModel):
    """Where a rollout stands (spec.rollout Canary; `specdeploy rollout status NAME` prints it)."""

    phase: Literal["Stable", "Progressing", "Analyzing", "Promoting", "RolledBack"] = Field(
        description="`Stable`: one revision serves. `Progressing`: canary pods are starting. `Analyzing`: the canary "
        "is judged. `Promoting`: the stable Deployment rolls to the canary's revision. `RolledBack`: the last canary "
        "failed; its revision is refused until the spec changes or `" + ROLLOUT_ANNOTATION + ": retry` is set.")
    stable_revision: Optional[str] = Field(default=None, description="Revision the stable Deployment serves.")
    canary_revision: Optional[str] = Field(default=None, description="Revision under analysis (absent when none).")
    refused_revision: Optional[str] = Field(
        default=None, description="Last revision rolled back: not tried again until the spec changes or a retry.")
    started_at: Optional[str] = Field(
        default=None, description="When the canary Deployment was created (RFC 3339); the deadline counts from it.")
    decision: Optional[RolloutDecision] = Field(default=None, description="The last decision.")
    analysis: list[RolloutTrack] = Field(default_factory=list, description="The figures behind the last verdict.")
    probe: Optional[RolloutProbeResult] = Field(default=None, description="The probe's result (absent: disabled "
                                                "or not run yet).")
    request_handled: Optional[str] = Field(
        default=None, max_length=256,
        description=f"The last `{ROLLOUT_ANNOTATION}` annotation value acted on (each request is acted on once).")


class SpeculativeDeploymentStatus(_Model):
    """Observed state."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    conditions: list[Condition] = Field(
        default_factory=list, description="DrafterCompatible, Progressing, Ready, Degraded, SpeculationHealthy, SpeculationGuarded, "
        "SpeculationProfitable, Rollout.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: Optional[int] = Field(default=None, description="Last generation the operator acted on.")
    replicas: Optional[int] = Field(default=None, description="Replicas of the engine workload.")
    ready_replicas: Optional[int] = Field(default=None, description="Ready replicas of the engine workload.")
    ready: Optional[str] = Field(default=None, description="Ready replicas / desired replicas (spec.replicas), e.g. "
                                 "`1/2` (printer column READY).")
    selector: Optional[str] = Field(default=None, description="Label selector of the engine pods (scale subresource).")
    resolved: Optional[Resolved] = Field(default=None, description="Resolved configs and derived settings.")
    acceptance: Optional[Acceptance] = Field(default=None, description="Measured speculative acceptance.")
    accepted_findings: list[AcceptedFinding] = Field(
        default_factory=list, description="Findings accepted through spec.checks.accept for the current generation.")
    rollout: Optional[RolloutStatus] = Field(default=None, description="The canary rollout (spec.rollout Canary).")


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(description="Object name.")
    namespace: Optional[str] = Field(default=None, description="Object namespace.")
    uid: Optional[str] = Field(default=None, description="Object UID.")
    generation: Optional[int] = Field(default=None, description="Spec generation.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")


class SpeculativeDeployment(BaseModel):
    """A target model served with speculative decoding: the operator's custom resource."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal[GROUP_VERSION] = Field(alias="apiVersion", description="API version.")  # type: ignore[valid-type]
    kind: Literal[KIND] = Field(description="Kind.")
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: SpeculativeDeploymentSpec = Field(description="Desired state.")
    status: Optional[SpeculativeDeploymentStatus] = Field(default=None, description="Observed state.")


def parse(obj: Any) -> SpeculativeDeployment:
    """Parse a SpeculativeDeployment object (dict); raises pydantic.ValidationError."""
    return SpeculativeDeployment.model_validate(obj)
