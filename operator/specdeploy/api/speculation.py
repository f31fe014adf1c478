"""The engine and the speculation settings of a SpeculativeDeployment (``spec.engine``, ``spec.speculation``).

Part of the API types; import them from ``specdeploy.api.types``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import ConfigDict, Field, StrictInt, model_validator

from ..core import methods
from ..core.checker import MAX_BLOCK_SIZE
from .fields import IMAGE_PATTERN, NAME_PATTERN, VERSION_PATTERN, ApiKeySource, EngineName, Method, SpecModel


class Engine(SpecModel):
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


class DDTree(SpecModel):
    """DDTree tree drafting (method `ddtree`)."""

    budget: Optional[int] = Field(default=None, ge=1, le=1024, description="Maximum tree nodes; default block size - 1.")
    topk: Optional[int] = Field(default=None, ge=1, le=64, description="Candidates per depth; default: the engine's.")


class DraftSteps(SpecModel):
    """Chain/tree drafting by steps (methods `eagle3`, `eagle`, `draft_model`; `mtp`). Unset: steps 3 (MTP: the
    target's MTP layer count), top-k 1, draft tokens steps + 1, rendered explicitly for both engines."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


class NGram(SpecModel):
    """Prompt-lookup (n-gram) drafting (method `ngram`): no drafter model."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


class SpeculationGuard(SpecModel):
    """Where speculation stops paying: from this many running requests per engine on, the engine drafts nothing
    (rendered into the engine's own switch where its code has one; see docs/how-to/tune-speculation.md)."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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


class Speculation(SpecModel):
    """Speculative decoding settings; unset fields are derived from the drafter config."""

    model_config = ConfigDict(**SpecModel.model_config, json_schema_extra={"x-kubernetes-validations": [
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
