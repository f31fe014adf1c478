"""How a SpeculativeDeployment's pod template changes roll out (``spec.rollout``): strategy, canary, analysis.

Part of the API types; import them from ``specdeploy.api.types``. The rollout's status is in ``api/status.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, StrictInt, field_validator, model_validator

from ..core.names import ROLLOUT_ANNOTATION
from ..core.rollout.canary import DEFAULT_DEADLINE, DEFAULT_WINDOW
from .fields import SpecModel


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


class CanarySettings(SpecModel):
    """The canary of a rollout: pods of the new revision beside the stable ones, behind the same Service."""

    replicas: StrictInt = Field(
        default=1, ge=1, le=100,
        description="Pods of the new revision during the analysis. The Service spreads requests over stable and "
        "canary pods by endpoint count: 1 canary beside 3 stable pods takes about a quarter of the traffic.")


class RolloutProbe(SpecModel):
    """The operator's own probe: a fixed prompt set at temperature 0 sent to one stable and one canary pod."""

    enabled: bool = Field(
        default=True,
        description="Send the probe prompts, so a deployment with little traffic is still judged, and compare the "
        "two revisions' greedy outputs (speculation must not change them; a difference fails the canary when the "
        "target and the engine are the same on both revisions).")
    max_tokens: StrictInt = Field(default=32, ge=1, le=256, description="Tokens generated per probe prompt.")


class RolloutAnalysis(SpecModel):
    """What the canary must show before it is promoted: counted from the engines' own counters, per revision, as
    deltas since the canary started."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


class Rollout(SpecModel):
    """How a change of the engine pod template (drafter, revisions, engine version or image, speculation
    settings, extraArgs, resources) reaches the pods; scale changes never start a rollout."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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
