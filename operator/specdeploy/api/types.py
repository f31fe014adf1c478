"""SpeculativeDeployment (specdeploy.io/v1alpha1): the API types.

These pydantic models are the single source of the API: the CRD in crds/ is generated from
them (``specdeploy crd``), the reference docs are generated from them, and the operator,
webhook and CLI parse objects with them. JSON is camelCase; every field has a description.
CEL rules for checks local to one object ride along as ``x-kubernetes-validations``.

The models live in four parts beside this module (``fields.py``: base model, patterns and model sources;
``speculation.py``: engine and speculation; ``rollout.py``: spec.rollout; ``status.py``: observed state);
this module assembles the spec and the resource and is the one import path: ``specdeploy.api.types``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import KIND
from ..core import methods
from ..core.rollout import baseline
from ..core.checker import Options
from ..core.names import GROUP_VERSION
from .fields import (  # noqa: F401  (re-exported: the API's one import path)
    IMAGE_PATTERN, MODEL_PATTERN, NAME_PATTERN, QUANTITY_MAX, QUANTITY_PATTERN, REVISION_PATTERN, VERSION_PATTERN,
    ApiKeySource, ConfigMapKeyRef, ConfigSource, EngineName, GpuType, Method, ModelSource, PvcSource, SecretKeyRef,
    TargetSource, SpecModel,
)
from .loose import loose
from .rollout import (  # noqa: F401
    DURATION_PATTERN, MIN_ANALYSIS_WINDOW_S, CanarySettings, Rollout, RolloutAnalysis, RolloutProbe,
)
from .speculation import DDTree, DraftSteps, Engine, NGram, Speculation, SpeculationGuard  # noqa: F401
from .status import (  # noqa: F401
    Acceptance, AcceptanceBaseline, AcceptedFinding, Condition, MemoryFigures, Resolved, RolloutDecision,
    RolloutProbeResult, RolloutStatus, RolloutTrack, SpeculativeDeploymentStatus,
)


class Gpu(SpecModel):
    """GPUs of one replica."""

    type: GpuType = Field(description="GPU profile: selects nodes by `nvidia.com/gpu.product`. `cpu`: no accelerator "
                          "(development, CI, GPU-less clusters): the engine's CPU build (vLLM only), no GPU request, "
                          "node selector or GPU flag, KV cache from `spec.pod.memory`.")
    count: int = Field(default=1, ge=1, le=64, description="GPUs per replica (the tensor-parallel size); 1 on the "
                       "CPU pool.")


class Toleration(SpecModel):
    """An extra pod toleration (the GPU taint is always tolerated)."""

    key: Optional[str] = Field(default=None, description="Taint key.", max_length=316)
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Match operator.")
    value: Optional[str] = Field(default=None, description="Taint value.", max_length=63)
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(default=None, description="Taint effect.")


class Pod(SpecModel):
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


class Monitoring(SpecModel):
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


class Checks(SpecModel):
    """How the drafter/target check treats this deployment."""

    accept: list[Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{1,63}$")]] = Field(
        default_factory=list, max_length=64,
        description="Finding codes to accept: each listed warning, or error that is a judgement rather than a fact "
        "(e.g. `TargetLayerIdsShifted`, `DrafterContextTooShort`), becomes info and is recorded in "
        "`status.acceptedFindings`. Facts (e.g. `HiddenSizeMismatch`) cannot be accepted; the catalog in "
        "docs/concepts/drafter-compatibility.md says which codes can.",
    )


class Tuning(SpecModel):
    """Tuned fused-MoE kernels for the target on this GPU product and engine version."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


class Cache(SpecModel):
    """Where engine pods keep the hub cache (HF_HOME) that hub models' weights are downloaded into."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


CANARY_MULTINODE = ("spec.rollout.strategy: Canary needs spec.nodes: 1 (multi-node canaries are not "
                    "supported); use RollingUpdate")


class SpeculativeDeploymentSpec(SpecModel):
    """Desired state: a target model served with speculative decoding (a drafter model, the target's own MTP
    layers or prompt lookup) on a GPU pool."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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
