"""SpeculativeBenchmark (specdeploy.io/v1alpha1): the API types of a speculation sweep.

A SpeculativeBenchmark measures one SpeculativeDeployment under a matrix of speculation
settings (speculative tokens, draft window, draft attention backend, speculation off as the
baseline), contexts and concurrency levels, on temporary variant Deployments it owns, and
recommends where speculation pays (docs/concepts/benchmarks.md). Like api/types.py these
models are the single source: the CRD in crds/, the chart's template and the reference docs
are generated from them. JSON is camelCase; every field has a description.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator
from pydantic.alias_generators import to_camel

from ..core.checker import MAX_BLOCK_SIZE
from ..core.names import BENCH_KIND, GROUP_VERSION, PROMPTS_LABEL, PROMPTS_LABEL_VALUE
from ..core import methods as M
from .types import NAME_PATTERN, Condition, DraftSteps, Method, ModelSource, NGram, ObjectMeta

BENCH_PLURAL = "speculativebenchmarks"
BENCH_SINGULAR = "speculativebenchmark"
BENCH_SHORT_NAMES = ("specbench",)
# Variant children are named <bench>-<variant>[-client|-plan|-engine]: the longest variant name
# (k15-w1048576-trtllm_mha is not possible: backends are short) plus suffixes stays within 63.
MAX_BENCH_NAME_LENGTH = 30
MAX_CONTEXT = 1024 * 1024
MAX_CONCURRENCY = 1024
MAX_POINTS = 64  # points over every variant: each is a client run on a live engine
DRAFT_ATTENTION_BACKENDS = ("flashinfer", "fa3", "fa4", "triton", "trtllm_mha")
BUNDLED_PROMPT_SETS = ("code", "chat")
BUNDLED_REQUEST_SETS = ("tool-call", "structured-output")  # core/bench/prompts.BUNDLED_REQUESTS

SpecTokens = Annotated[StrictInt, Field(ge=1, le=MAX_BLOCK_SIZE - 1)]
ContextLength = Annotated[StrictInt, Field(ge=1, le=MAX_CONTEXT)]
ConcurrencyLevel = Annotated[StrictInt, Field(ge=1, le=MAX_CONCURRENCY)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class DeploymentRef(_Model):
    """The SpeculativeDeployment to measure (same namespace)."""

    name: str = Field(description="Name of the SpeculativeDeployment.", pattern=NAME_PATTERN, max_length=253)


class BenchMethod(_Model):
    """Another speculative method measured beside the deployment's own (its target, engine and GPUs; this method's
    speculation): one variant, named after the method (`ngram`, `eagle3`; `eagle3-2` for a second one)."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "(self.method in " + str(sorted(M.DRAFTERLESS)) + ") == !has(self.drafter)",
         "message": "drafter methods need drafter; mtp, ngram and suffix take none", "fieldPath": ".drafter"},
        {"rule": "self.method != 'ddtree'", "message": "ddtree is in no engine release", "fieldPath": ".method"},
    ]})

    method: Method = Field(description="The method, as `spec.speculation.method` takes it.")
    drafter: Optional[ModelSource] = Field(
        default=None, description="The drafter for a drafter method (as `spec.drafter`); none for mtp, ngram, suffix.")
    eagle: Optional[DraftSteps] = Field(default=None, description="As `spec.speculation.eagle`.")
    mtp: Optional[DraftSteps] = Field(default=None, description="As `spec.speculation.mtp`.")
    ngram: Optional[NGram] = Field(default=None, description="As `spec.speculation.ngram`.")

    @model_validator(mode="after")
    def _drafter_for_the_method(self) -> "BenchMethod":
        if self.method in M.REFUSED:
            raise ValueError(f"method {self.method} is in no engine release ({M.REFUSED[self.method]})")
        if M.needs_drafter(self.method) and self.drafter is None:
            raise ValueError(f"method {self.method} needs a drafter: set drafter (a model as in spec.drafter)")
        if not M.needs_drafter(self.method) and self.drafter is not None:
            raise ValueError(f"method {self.method} takes no drafter: remove drafter")
        for knob in ("eagle", "mtp", "ngram"):
            if getattr(self, knob) is not None and self.method not in M.knob_methods(knob):
                raise ValueError(f"{knob} settings apply only to method(s) {M.method_list(M.knob_methods(knob))}")
        return self

    def speculation(self) -> dict[str, Any]:
        """``spec.speculation`` of the variant (camelCase, as the SpeculativeDeployment takes it)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude={"drafter"})


class Matrix(_Model):
    """What to sweep: every speculation variant is measured at every (context, concurrency) point."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "size(self.contexts) * size(self.concurrency) * "
                 "((has(self.baseline) && !self.baseline ? 0 : 1) + "
                 "(!has(self.speculativeTokens) || size(self.speculativeTokens) == 0 ? 1 : size(self.speculativeTokens)) * "
                 "(!has(self.draftWindow) || size(self.draftWindow) == 0 ? 1 : size(self.draftWindow)) * "
                 "(!has(self.draftAttentionBackend) || size(self.draftAttentionBackend) == 0 ? 1 : "
                 "size(self.draftAttentionBackend)) + "
                 "(has(self.syntheticAcceptance) ? size(self.syntheticAcceptance) : 0) + "
                 "(has(self.methods) ? size(self.methods) : 0) + "
                 f"(has(self.guarded) && self.guarded ? 1 : 0)) <= {MAX_POINTS}",
         "message": f"the matrix has more than {MAX_POINTS} points (variants x contexts x concurrency levels): "
                    "measure fewer values per axis or split it into several benchmarks"},
    ]})

    speculative_tokens: list[SpecTokens] = Field(
        default_factory=list, max_length=16,
        description="Draft tokens per step to measure, each at most the drafter's block size - 1 (checked against "
        "the resolved drafter). Empty: the deployment's own (block size - 1).",
    )
    draft_window: list[Union[StrictInt, Literal["off"]]] = Field(
        default_factory=list, max_length=8,
        description="Compact draft KV cache windows to measure (tokens, or `off`). Empty: the deployment's own "
        "setting. SGLang only: vLLM has no draft window switch.",
        json_schema_extra={"items": {"x-kubernetes-int-or-string": True, "x-kubernetes-validations": [
            {"rule": "type(self) == string ? self == 'off' : int(self) >= 1",
             "message": "each draftWindow must be a positive integer or 'off'"}]}},
    )
    draft_attention_backend: list[Literal[DRAFT_ATTENTION_BACKENDS]] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=5,
        description="Draft attention backends to measure. Empty: the deployment's own setting.",
    )
    synthetic_acceptance: list[Annotated[float, Field(ge=1, le=MAX_BLOCK_SIZE, allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=8,
        description="Assumed acceptance lengths (tau, tokens per step with the bonus) to sweep with the engine's own "
        "synthetic acceptance (vLLM >= 0.32 `rejection_sample_method: synthetic`, SGLang >= 0.5.23 "
        "`SGLANG_SIMULATE_ACC_LEN`): one variant each (`syn2p5` for 2.5) at the first `speculativeTokens` value (else "
        "the deployment's own draft tokens), showing "
        "where the crossover would move if acceptance rose or fell. Their outputs are not the target's: they are "
        "never recommended nor compared for greedy equality. Each at most draft tokens + 1.",
    )
    methods: list[BenchMethod] = Field(
        default_factory=list, max_length=4,
        description="Other speculative methods to measure beside the deployment's own (n-gram, EAGLE-3, MTP, ...), "
        "each as one variant on the same target, engine and GPUs; the recommendation names the best method per "
        "band. Empty: the deployment's method only.",
    )
    guarded: bool = Field(
        default=False, description="Also measure the deployment as configured with its guard "
        "(`spec.speculation.guard.maxConcurrency`: speculation off from that many running requests), variant "
        "`guarded`, so the guard's effect is measured, not assumed. The other variants run without the guard.",
    )
    baseline: bool = Field(
        default=True, description="Also measure with speculation off (no speculative flags at all): the baseline "
        "the speedup, the crossover and the greedy-output equality are computed against.",
    )
    contexts: list[ContextLength] = Field(
        min_length=1, max_length=8, description="Prompt lengths in tokens.")
    concurrency: list[ConcurrencyLevel] = Field(
        min_length=1, max_length=8, description="Concurrent requests (client concurrency levels).")
    prompts_per_point: int = Field(default=16, ge=1, le=1024, description="Requests sent at each point.")
    max_output_tokens: int = Field(default=128, ge=1, le=16384, description="Output tokens per request (the client "
                                   "asks the engine to ignore end-of-sequence, so every request generates this many).")

    @model_validator(mode="after")
    def _checks(self) -> "Matrix":
        for axis in ("speculative_tokens", "contexts", "concurrency"):
            values = getattr(self, axis)
            if len(set(values)) != len(values):
                raise ValueError(f"{to_camel(axis)} lists a value twice: list each value once")
        if len({str(w) for w in self.draft_window}) != len(self.draft_window):
            raise ValueError("draftWindow lists a value twice: list each value once")
        for w in self.draft_window:
            if isinstance(w, int) and not 1 <= w <= MAX_CONTEXT:
                raise ValueError(f"draftWindow {w} must be between 1 and {MAX_CONTEXT} tokens, or 'off'")
        if len(set(self.synthetic_acceptance)) != len(self.synthetic_acceptance):
            raise ValueError("syntheticAcceptance lists a value twice: list each value once")
        n = len(self.contexts) * len(self.concurrency) * (int(self.baseline) + (
            max(1, len(self.speculative_tokens)) * max(1, len(self.draft_window)) * max(1, len(self.draft_attention_backend)))
            + len(self.synthetic_acceptance) + len(self.methods) + int(self.guarded))
        if n > MAX_POINTS:
            raise ValueError(f"the matrix has {n} points (variants x contexts x concurrency levels), more than "
                             f"{MAX_POINTS}: measure fewer values per axis or split it into several benchmarks")
        return self


class PromptConfigMapRef(_Model):
    """A ConfigMap key of JSON lines: one ``{"prompt": "..."}`` object per line, or (``format: requests``) one
    OpenAI chat-completion request per line (captured traffic)."""

    name: str = Field(description="Name of the ConfigMap (same namespace).", pattern=NAME_PATTERN, max_length=253)
    key: str = Field(default="prompts.jsonl", description="Key holding the JSON lines.", pattern=r"^[-._a-zA-Z0-9]+$",
                     max_length=253)
    format: Literal["prompts", "requests"] = Field(
        default="prompts", description="`prompts`: `{\"prompt\": ...}` lines, cut or repeated to each context. "
        "`requests`: chat-completion requests as captured (messages, tools, tool_choice, response_format, "
        "chat_template_kwargs.enable_thinking), replayed through /v1/chat/completions as they are; "
        "`matrix.contexts` then holds one value, the label of the points (docs/concepts/benchmarks.md).")


class GeneratedPrompts(_Model):
    """Random-token prompts of exactly `context` tokens (the target's tokenizer), reproducible by seed."""

    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Random seed.")


class Prompts(_Model):
    """The prompt set: exactly one of `bundled`, `configMapRef`, `generated` (default: generated, seed 0)."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "(has(self.bundled) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) + (has(self.generated) ? 1 : 0) <= 1",
         "message": "set exactly one of prompts.bundled, prompts.configMapRef and prompts.generated"},
    ]})

    bundled: Optional[Literal[BUNDLED_PROMPT_SETS + BUNDLED_REQUEST_SETS]] = Field(  # type: ignore[valid-type]
        default=None, description="A small set shipped with specdeploy (our own text, Apache-2.0): `code` or `chat` "
        "(prompts cut or repeated to each context length), or the request sets `tool-call` (function tools, "
        "multi-turn tool results) and `structured-output` (JSON schema and JSON object response formats), replayed as "
        "they are like `configMapRef.format: requests`.")
    config_map_ref: Optional[PromptConfigMapRef] = Field(
        default=None, description=f"Your own prompts from a ConfigMap labelled `{PROMPTS_LABEL}: \"{PROMPTS_LABEL_VALUE}\"` "
        "(any other fails the benchmark: PromptsNotFound; docs/concepts/security.md, \"Benchmark prompt sets\").")
    generated: Optional[GeneratedPrompts] = Field(default=None, description="Random-token prompts (the default).")

    @model_validator(mode="after")
    def _one(self) -> "Prompts":
        if sum(x is not None for x in (self.bundled, self.config_map_ref, self.generated)) > 1:
            raise ValueError("set exactly one of prompts.bundled, prompts.configMapRef and prompts.generated")
        return self

    @property
    def requests(self) -> bool:
        """A request set (replayed as captured), not prompts fitted to each context."""
        return self.bundled in BUNDLED_REQUEST_SETS or (
            self.config_map_ref is not None and self.config_map_ref.format == "requests")

    def plan(self) -> dict[str, Any]:
        """The client plan's prompts entry (Contract 2)."""
        if self.bundled is not None:
            return {"kind": "requests" if self.requests else "bundled", "name": self.bundled}
        if self.config_map_ref is not None:
            return {"kind": "requests" if self.requests else "file", "path": "/etc/specdeploy/bench/prompts.jsonl"}
        return {"kind": "generated", "seed": self.generated.seed if self.generated else 0}


class SpeculativeBenchmarkSpec(_Model):
    """What to measure: a SpeculativeDeployment under a matrix of speculation settings and loads."""

    model_config = ConfigDict(**_Model.model_config, json_schema_extra={"x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "spec is immutable: create a new SpeculativeBenchmark to measure again"},
        {"rule": "size(self.matrix.contexts) == 1 || !has(self.prompts) || !("
                 "(has(self.prompts.bundled) && self.prompts.bundled in " + str(list(BUNDLED_REQUEST_SETS)) + ") || "
                 "(has(self.prompts.configMapRef) && has(self.prompts.configMapRef.format) && "
                 "self.prompts.configMapRef.format == 'requests'))",
         "message": "a request set is replayed as captured: matrix.contexts must hold exactly one value (the label "
                    "of its points)", "fieldPath": ".matrix.contexts"},
    ]})

    deployment_ref: DeploymentRef = Field(description="The SpeculativeDeployment to measure (same namespace). It is "
                                          "never modified: each variant runs on a temporary Deployment of its own.")
    matrix: Matrix = Field(description="The sweep.")
    prompts: Prompts = Field(default_factory=Prompts, description="The prompt set (default: generated, seed 0).")
    use_serving_deployment: bool = Field(
        default=False, description="Also measure the serving Deployment as it runs (never modified; its live traffic "
        "mixes into the figures).")
    ttl_seconds_after_finished: Optional[int] = Field(
        default=None, ge=0, le=365 * 86400,
        description="Delete the benchmark (and its results ConfigMap) this many seconds after it finished. Default: "
        "kept.")

    @model_validator(mode="after")
    def _request_sets_have_one_context(self) -> "SpeculativeBenchmarkSpec":
        if self.prompts.requests and len(self.matrix.contexts) != 1:
            raise ValueError("a request set is replayed as captured: matrix.contexts must hold exactly one value "
                             "(the label of its points)")
        return self


class PointSummary(_Model):
    """One measured point, compact (the results ConfigMap has every figure)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    variant: str = Field(description="Variant name: `baseline`, `k3`, `k3-w2048`, `k3-fa3`...")
    context: int = Field(description="Prompt length in tokens.")
    concurrency: int = Field(description="Concurrent requests.")
    output_tokens_per_second: Optional[float] = Field(default=None, description="Output tokens per second.")
    tau: Optional[float] = Field(default=None, description="Acceptance length (tokens per step, bonus included) from "
                                 "the engine's counters over the point; none for the baseline.")
    ttft_p50_ms: Optional[float] = Field(default=None, description="Median time to first token (ms).")
    itl_p50_ms: Optional[float] = Field(default=None, description="Median inter-token latency (ms): the gap between "
                                        "streamed chunks, as the engines' own clients measure it. Chunks that arrive "
                                        "together (several tokens of one speculative step, or a stream the client "
                                        "reads behind) count as gaps near 0: read `tpotP50Ms` for the per-token cost.")
    tpot_p50_ms: Optional[float] = Field(default=None, description="Median time per output token after the first "
                                         "(ms): (latency - TTFT) / (output tokens - 1) per request.")
    ttft_p99_ms: Optional[float] = Field(default=None, description="99th percentile time to first token (ms).")
    prefix_cache_hit_rate: Optional[float] = Field(default=None, description="Prefix-cache hit rate over the point "
                                                   "(0-1, from the engine's counters: docs/concepts/benchmarks.md).")
    kv_capacity_tokens: Optional[int] = Field(default=None, description="KV cache capacity the engine reports, tokens.")
    kv_usage_peak: Optional[float] = Field(default=None, description="Peak KV cache use over the point (0-1).")
    failed: Optional[int] = Field(default=None, description="Requests that failed.")
    equal_to_baseline: Optional[bool] = Field(default=None, description="Greedy outputs equal the baseline's at the "
                                              "same point (none without a baseline).")


class Band(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    context: int = Field(description="Prompt length in tokens.")
    concurrency: int = Field(description="Concurrent requests.")
    best: str = Field(description="Fastest variant at this point whose outputs equal the baseline's.")
    method: Optional[str] = Field(default=None, description="Its method (`off` for the baseline).")
    output_tokens_per_second: Optional[float] = Field(default=None, description="Its output tokens per second.")
    baseline_tokens_per_second: Optional[float] = Field(default=None, description="The baseline's.")
    speedup: Optional[float] = Field(default=None, description="Best over baseline.")


class Crossover(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    context: int = Field(description="Prompt length in tokens.")
    concurrency: Optional[int] = Field(default=None, description="Lowest measured concurrency from which speculation "
                                       "is slower than the baseline; none: it never loses here.")
    reason: str = Field(default="", description="The numbers behind it.")


class Guard(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    max_concurrency: Optional[int] = Field(default=None, description="Speculation should be off at or above this "
                                           "concurrency (the smallest crossover); none: it never lost.")
    max_context: Optional[int] = Field(default=None, description="Speculation should be off above this context.")


class Excluded(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    variant: str = Field(description="Variant never recommended.")
    reason: str = Field(description="Why (e.g. greedy outputs differ from the baseline).")


class VariantCost(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    variant: str = Field(description="Variant name.")
    vs_baseline: str = Field(default="", description="What it costs against speculation off, e.g. `KV capacity -38% "
                             "(...), prefix cache 0% vs 61%`.")
    prefix_cache_lost: bool = Field(default=False, description="Its prefix cache hit nothing while the baseline's hit.")


class CalibrationCrossover(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    context: int = Field(description="Prompt length in tokens.")
    concurrency: Optional[int] = Field(default=None, description="Where speculation would stop paying at this "
                                       "assumed tau; none: it never lost within the measured concurrency.")


class Calibration(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    variant: str = Field(description="The synthetic variant (`syn2p5`).")
    assumed_tau: float = Field(description="The acceptance length the engine was told to give.")
    measured_tau: Optional[float] = Field(default=None, description="What the engine's counters measured.")
    crossover: list[CalibrationCrossover] = Field(default_factory=list, description="Per context.")
    best_speedup: Optional[float] = Field(default=None, description="Its best speedup over the baseline.")


class Recommendation(_Model):
    """Best configuration per load band, crossover and guard (docs/concepts/benchmarks.md)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    bands: list[Band] = Field(default_factory=list, description="Best variant per (context, concurrency).")
    crossover: list[Crossover] = Field(default_factory=list, description="Where speculation stops paying, per context.")
    guard: Guard = Field(default_factory=Guard, description="Limits for `spec.speculation.guard.fromBenchmark`.")
    excluded: list[Excluded] = Field(default_factory=list, description="Variants never recommended, with the reason.")
    best: Optional[str] = Field(default=None, description="The variant that wins most bands (printer column).")
    calibration: list[Calibration] = Field(default_factory=list, description="Synthetic-acceptance variants "
                                           "(`spec.matrix.syntheticAcceptance`): where the crossover would be at "
                                           "each assumed tau. Never recommended.")
    costs: list[VariantCost] = Field(default_factory=list, description="Each variant's hidden costs against the "
                                     "baseline (KV capacity, prefix-cache hit rate, peak memory).")
    summary: str = Field(default="", description="One sentence.")


class SpeculativeBenchmarkStatus(_Model):
    """Observed state."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    phase: Optional[Literal["Pending", "Running", "Complete", "Failed"]] = Field(default=None, description="Where "
                                                                                  "the benchmark is.")
    conditions: list[Condition] = Field(
        default_factory=list, description="Running (True while measuring; False with the reason it waits, failed "
        "or finished: the STATUS printer column), Complete, Failed.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]})
    observed_generation: Optional[int] = Field(default=None, description="Last generation the operator acted on.")
    progress: Optional[str] = Field(default=None, description="Variants measured / planned, e.g. `1/2`.")
    current: Optional[str] = Field(default=None, description="The variant being measured and its stage.")
    variants: list[str] = Field(default_factory=list, description="The planned variants, in order.")
    started_at: Optional[str] = Field(default=None, description="When the current stage started (RFC 3339).")
    finished_at: Optional[str] = Field(default=None, description="When the benchmark finished (RFC 3339).")
    points: list[PointSummary] = Field(default_factory=list, description="Compact table of the measured points.")
    recommendation: Optional[Recommendation] = Field(default=None, description="Where speculation pays.")
    results_config_map: Optional[str] = Field(default=None, description="ConfigMap holding every figure "
                                              "(key results.json).")
    crossover_concurrency: Optional[int] = Field(default=None, description="recommendation.guard.maxConcurrency "
                                                 "(printer column).")


class SpeculativeBenchmark(BaseModel):
    """A sweep of a SpeculativeDeployment's speculation settings: the operator's second custom resource."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal[GROUP_VERSION] = Field(alias="apiVersion", description="API version.")  # type: ignore[valid-type]
    kind: Literal[BENCH_KIND] = Field(description="Kind.")  # type: ignore[valid-type]
    metadata: ObjectMeta = Field(description="Standard object metadata.")
    spec: SpeculativeBenchmarkSpec = Field(description="Desired state.")
    status: Optional[SpeculativeBenchmarkStatus] = Field(default=None, description="Observed state.")


def parse(obj: Any) -> SpeculativeBenchmark:
    return SpeculativeBenchmark.model_validate(obj)


def validate(obj: Any) -> tuple[SpeculativeBenchmark | None, list]:
    """(parsed, []) or (None, problems) in the spec message catalog's words (api/validation.py)."""
    from .validation import SpecProblem, loc_path, schema_message

    try:
        cr = SpeculativeBenchmark.model_validate(obj)
    except pydantic.ValidationError as e:
        out: list[SpecProblem] = []
        for err in e.errors():
            path = loc_path(tuple(err.get("loc", ())))
            if any(x.path == path for x in out):
                continue
            msg, code = schema_message(err)
            if err.get("type") == "too_short":
                msg, code = f"must list at least {(err.get('ctx') or {}).get('min_length', 1)} value", "FieldValueInvalid"
            elif ".draftWindow[" in path:  # the int-or-'off' union reports each alternative: say it once
                msg, code = f"must be a positive number of tokens or 'off' (found {err.get('input')!r})", "FieldValueInvalid"
            out.append(SpecProblem(path, msg, code))
        return None, out
    except (RecursionError, ValueError, TypeError) as e:
        from .validation import SpecProblem

        return None, [SpecProblem("(object)", f"cannot be read as a {BENCH_KIND}: {str(e)[:200]}", "InvalidObject")]
    name = cr.metadata.name
    if len(name) > MAX_BENCH_NAME_LENGTH:
        from .validation import SpecProblem

        return None, [SpecProblem("metadata.name", f"is {len(name)} characters; at most {MAX_BENCH_NAME_LENGTH} (the "
                                  "variant Deployments, Services and Jobs are named <name>-<variant>-...)",
                                  "FieldValueTooLong")]
    return cr, []
