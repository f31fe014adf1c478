"""The observed state of a SpeculativeDeployment (``status``): conditions, what was resolved, measured
acceptance, accepted findings and the rollout's standing. Unknown fields are ignored (status is written by the
operator, read back by it).

Part of the API types; import them from ``specdeploy.api.types``.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..core.rollout import baseline
from ..core.names import ROLLOUT_ANNOTATION
from .fields import SpecModel


class Condition(SpecModel):
    """A metav1.Condition."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    type: str = Field(description="Condition type, CamelCase.", max_length=316)
    status: Literal["True", "False", "Unknown"] = Field(description="Status of the condition.")
    reason: str = Field(description="CamelCase reason.", max_length=1024)
    message: str = Field(default="", description="Human-readable details.", max_length=32768)
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: Optional[int] = Field(default=None, ge=0, description="The .metadata.generation this condition was set for.")


class MemoryFigures(SpecModel):
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
    largest_context: int = Field(description="Longest context that fits `concurrency` sequences at once, tokens; at "
                                             "most the served context (`atContext`: maxModelLen, else the model's "
                                             "own limit).")


class Resolved(SpecModel):
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


class AcceptanceBaseline(SpecModel):
    """The acceptance length a deployment settled at: what `AcceptanceRegressed` compares with."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    length: float = Field(description="Baseline acceptance length (tokens per step, bonus included).")
    revision: str = Field(description="Speculation revision it was learned on (compare `status.acceptance.revision`).")
    since: str = Field(description="When it was learned (RFC 3339).")
    drafts: Optional[int] = Field(default=None, ge=0, description="Drafts averaged (vLLM).")
    reset_token: Optional[str] = Field(
        default=None, description=f"Value of the `{baseline.RESET_ANNOTATION}` annotation when it was learned.")


class Acceptance(SpecModel):
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


class AcceptedFinding(SpecModel):
    """A finding turned into info by spec.checks.accept, as it was before."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    code: str = Field(description="Finding code.")
    severity: str = Field(description="Severity it had before it was accepted.")
    source: str = Field(description="drafter, target or spec.")
    path: str = Field(description="JSON path (config) or field path (spec).")
    message: str = Field(description="What the check found.")


class _StatusModel(SpecModel):
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
    drafts: Optional[int] = Field(default=None, ge=0, description="Draft steps counted.")
    tau: Optional[float] = Field(default=None, description="Acceptance length (tokens per step, bonus included).")
    tokens_per_second_per_request: Optional[float] = Field(
        default=None, description="Output tokens per second per running request.")
    requests: Optional[int] = Field(default=None, ge=0, description="Requests finished.")
    failed_requests: Optional[int] = Field(default=None, ge=0, description="Requests that failed.")
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


class SpeculativeDeploymentStatus(SpecModel):
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
