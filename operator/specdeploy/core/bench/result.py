"""The benchmark client's result document and the log line that carries it (pure).

``specdeploy-runtime bench-client`` (runtime/specdeploy_runtime/benchclient.py) runs one variant's
points of a SpeculativeBenchmark and writes, as the LAST line of its stdout::

    SPECDEPLOY_BENCH_RESULT {"variant": "k3", "client": "vllm bench serve", "points": [...]}

The operator reads the client pod's log and calls :func:`parse_result_line`. The log is not
trusted: the line is found within a bounded tail of the log, its size is bounded, the JSON's
nesting and size are bounded (``core.safejson``), and the document is validated by the pydantic
models below, every number finite and inside a physical range, every string short, every list
bounded. A bad document raises :class:`BenchResultError` whose message names the field.

Greedy equality: each point carries the sha256 of every generated text in prompt order (the
client sends temperature 0); :func:`equal_to_baseline` compares a variant's point with the
baseline's point of the same shape.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Iterable, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from ..safejson import loads as safe_loads
from specdeploy.core.errors import Permanent

RESULT_PREFIX = "SPECDEPLOY_BENCH_RESULT "
# The line's size limit. A variant's points x prompts digests dominate: 64 points x 256 prompts
# x 67 bytes = 1.1 MB would not fit a ConfigMap anyway (1 MiB); the planner keeps far below.
MAX_LINE_BYTES = 1024 * 1024
# How much of the log's end is searched for the line (the operator asks the API for this much:
# pods/log ``limitBytes`` counts from the start, so it asks for ``tailLines`` and cuts here).
MAX_LOG_TAIL_BYTES = 4 * MAX_LINE_BYTES
MAX_DEPTH = 8  # the document nests 4 levels (doc > points > point > ttftMs)
MAX_POINTS = 256
MAX_PROMPTS = 4096
MAX_POSITIONS = 64  # speculative positions (vLLM's per-position counter; DFlash blocks are <= 16)
MAX_MS = 1e8  # 27 hours: any larger latency is garbage
MAX_RATE = 1e9  # tokens or requests per second
MAX_COUNT = 1e15  # counters over one point

Name = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
PointId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")]
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ShortText = Annotated[str, StringConstraints(max_length=256)]
Ms = Annotated[float, Field(ge=0, le=MAX_MS, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=0, le=MAX_RATE, allow_inf_nan=False)]
Count = Annotated[float, Field(ge=0, le=MAX_COUNT, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class BenchResultError(Permanent, ValueError):
    """The client's result line is missing, too large or invalid (the message says which)."""


class _Model(BaseModel):
    # extra="ignore": a newer client may add fields an older operator does not know
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class Percentiles(_Model):
    """Latency percentiles in milliseconds (None: the client did not report that one)."""

    p50: Ms | None = None
    p90: Ms | None = None
    p99: Ms | None = None
    mean: Ms | None = None


class PointAcceptance(_Model):
    """The engine's speculative-decoding counters' increase over one point (core/acceptance.py)."""

    length: Annotated[float, Field(ge=1, le=MAX_POSITIONS + 1, allow_inf_nan=False)] | None = None
    per_position: Annotated[list[Fraction], Field(max_length=MAX_POSITIONS)] = []
    drafts: Count | None = None
    draft_tokens: Count | None = None
    accepted_tokens: Count | None = None


class PointCosts(_Model):
    """What the point cost beside its speed, from the engine's /metrics (core/bench/costs.py)."""

    prefix_cache_queries: Count | None = None
    prefix_cache_hits: Count | None = None
    prefix_cache_hit_rate: Fraction | None = None
    prefix_cache_source: Literal["counters", "gauge"] | None = None
    kv_capacity_tokens: Annotated[int, Field(ge=0, le=10**12)] | None = None
    kv_usage_peak: Fraction | None = None
    resident_memory_peak_bytes: Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False)] | None = None


class PointResult(_Model):
    """One point: one concurrency and one context, ``completed`` requests."""

    id: PointId
    context: Annotated[int, Field(ge=1, le=10_000_000)]
    concurrency: Annotated[int, Field(ge=1, le=100_000)]
    num_prompts: Annotated[int, Field(ge=1, le=MAX_PROMPTS)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    completed: Annotated[int, Field(ge=0, le=MAX_PROMPTS)]
    failed: Annotated[int, Field(ge=0, le=MAX_PROMPTS)] = 0
    input_tokens: Count | None = None  # prompt tokens over the completed requests
    output_tokens: Count | None = None
    output_tokens_per_second: Rate
    requests_per_second: Rate | None = None
    duration_s: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] | None = None
    ttft_ms: Percentiles = Percentiles()
    itl_ms: Percentiles = Percentiles()
    tpot_ms: Percentiles | None = None
    acceptance: PointAcceptance | None = None
    costs: PointCosts | None = None
    output_digests: Annotated[list[Digest], Field(max_length=MAX_PROMPTS)] = []
    errors: Annotated[list[ShortText], Field(max_length=8)] = []  # the first few request errors

    @property
    def shape(self) -> tuple[int, int, int | None, int | None]:
        """What must match for two points to be compared (the variant differs, the load not)."""
        return (self.context, self.concurrency, self.num_prompts, self.max_output_tokens)


class VariantResult(_Model):
    """One client Job's document: one variant, its points in plan order."""

    variant: Name
    client: ShortText
    client_version: ShortText | None = None
    engine: ShortText | None = None
    points: Annotated[list[PointResult], Field(max_length=MAX_POINTS)]

    def to_doc(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


# ----------------------------------------------------------------- the plan (Contract 2)
# The operator writes plan.json (a ConfigMap mounted in the client Job); the client reads it.
# Both sides use these models: the operator builds ``BenchPlan(...).to_doc()``.

CLIENTS = ("auto", "vllm", "sglang", "specdeploy")


class PlanPoint(_Model):
    id: PointId
    context: Annotated[int, Field(ge=1, le=10_000_000)]
    concurrency: Annotated[int, Field(ge=1, le=100_000)]
    num_prompts: Annotated[int, Field(ge=1, le=MAX_PROMPTS)]
    max_output_tokens: Annotated[int, Field(ge=1, le=1_000_000)]


class PlanPrompts(_Model):
    """``generated`` (seeded prompts of exactly ``context`` tokens), ``bundled`` (``code`` or ``chat``, shipped with
    specdeploy), ``file`` (JSON lines ``{"prompt": ...}``, a mounted ConfigMap key) or ``requests`` (chat-completion
    requests replayed as captured: a bundled request set by ``name`` or a mounted key by ``path``)."""

    kind: Literal["generated", "bundled", "file", "requests"] = "generated"
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    name: Literal["code", "chat", "tool-call", "structured-output"] | None = None
    path: Annotated[str, StringConstraints(max_length=1024)] | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if self.kind == "bundled" and self.name is None:
            raise ValueError("prompts.kind bundled needs prompts.name (code or chat)")
        if self.kind == "file" and not self.path:
            raise ValueError("prompts.kind file needs prompts.path")
        if self.kind == "requests" and (self.name is None) == (self.path is None):
            raise ValueError("prompts.kind requests needs prompts.name (a bundled request set) or prompts.path")
        return self


class BenchPlan(_Model):
    """What one client Job runs: one variant's points against one engine Service."""

    benchmark: Name
    variant: Name
    engine: Literal["vllm", "sglang"]
    engine_version: ShortText | None = None
    base_url: Annotated[str, StringConstraints(max_length=512, pattern=r"^https?://[^\s]+$")]
    metrics_url: Annotated[str, StringConstraints(max_length=512, pattern=r"^https?://[^\s]+$")] | None = None
    model: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    tokenizer: Annotated[str, StringConstraints(max_length=512)] | None = None
    prompts: PlanPrompts = PlanPrompts()
    points: Annotated[list[PlanPoint], Field(min_length=1, max_length=MAX_POINTS)]
    temperature: Annotated[float, Field(ge=0, le=0)] = 0  # greedy: outputs are compared
    client: Literal[CLIENTS] = "auto"  # type: ignore[valid-type]
    point_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 3600

    def to_doc(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


def _validate(model: type, doc: Any, what: str) -> Any:
    """``doc`` (parsed JSON) as ``model``; BenchResultError names the first invalid field."""
    if not isinstance(doc, dict):
        raise BenchResultError(f"the {what} must be a JSON object, not {type(doc).__name__}")
    try:
        return model.model_validate(doc)
    except pydantic.ValidationError as e:
        errs = e.errors()
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise BenchResultError(f"invalid {what} at {_where(errs[0])}: {errs[0].get('msg')}{more}") from None


def validate_plan(doc: Any) -> BenchPlan:
    """plan.json as a BenchPlan; BenchResultError names the field."""
    return _validate(BenchPlan, doc, "plan")


def _where(err: dict) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    out = ""
    for p in loc:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "(document)"


def validate_result(doc: Any) -> VariantResult:
    """The document (already parsed JSON) as a VariantResult; BenchResultError names the field."""
    return _validate(VariantResult, doc, "result")


def format_result_line(result: VariantResult | dict) -> str:
    """The line the client prints last (compact JSON, no newline inside)."""
    import json

    doc = result.to_doc() if isinstance(result, VariantResult) else validate_result(result).to_doc()
    line = RESULT_PREFIX + json.dumps(doc, separators=(",", ":"), allow_nan=False)
    if len(line.encode()) > MAX_LINE_BYTES:
        raise BenchResultError(f"the result line has {len(line.encode())} bytes, over the limit of {MAX_LINE_BYTES}: "
                               "fewer prompts per point or fewer points per variant")
    return line


def find_result_line(log_text: str) -> str:
    """The JSON after the LAST line that starts with ``RESULT_PREFIX`` (within the log's last
    ``MAX_LOG_TAIL_BYTES``). Raises BenchResultError when there is none or it is too long."""
    if isinstance(log_text, (bytes, bytearray)):
        log_text = bytes(log_text[-MAX_LOG_TAIL_BYTES:]).decode("utf-8", errors="replace")
    if not isinstance(log_text, str):
        raise BenchResultError("the log is not text")
    text = log_text[-MAX_LOG_TAIL_BYTES:]
    at = text.rfind("\n" + RESULT_PREFIX)
    if at >= 0:
        at += 1
    elif text.startswith(RESULT_PREFIX) and len(text) == len(log_text):
        at = 0
    else:
        raise BenchResultError("the client's log has no SPECDEPLOY_BENCH_RESULT line (it failed before the end: "
                               "see the pod's log)")
    end = text.find("\n", at)
    line = text[at:] if end < 0 else text[at:end]
    line = line.rstrip("\r")
    if len(line.encode()) > MAX_LINE_BYTES:
        raise BenchResultError(f"the result line has {len(line.encode())} bytes, over the limit of {MAX_LINE_BYTES}")
    return line[len(RESULT_PREFIX):]


def parse_result_line(log_text: str) -> VariantResult:
    """The client's result from its log (the last ``SPECDEPLOY_BENCH_RESULT`` line), validated."""
    body = find_result_line(log_text)
    try:
        doc = safe_loads(body, max_depth=MAX_DEPTH, max_bytes=MAX_LINE_BYTES)
    except ValueError as e:
        raise BenchResultError(f"the result line is not valid JSON ({e}); was the log cut?") from None
    return validate_result(doc)


# ----------------------------------------------------------------- greedy equality


def text_digest(text: str) -> str:
    """sha256 hex of a generated text (UTF-8): what ``outputDigests`` holds."""
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def digests(texts: Iterable[str]) -> list[str]:
    return [text_digest(t) for t in texts]


def differing_prompts(point: PointResult, baseline: PointResult) -> list[int] | None:
    """Indexes (prompt order) whose output differs from the baseline's; None when the two points
    cannot be compared (different shape, or digests missing or of a different count)."""
    if point.shape != baseline.shape:
        return None
    a, b = point.output_digests, baseline.output_digests
    if not a or not b or len(a) != len(b):
        return None
    return [i for i, (x, y) in enumerate(zip(a, b)) if x != y]


def equal_to_baseline(point: PointResult, baseline: PointResult) -> bool | None:
    """True when every greedy output equals the baseline's at the same point shape; None when
    they cannot be compared (see :func:`differing_prompts`)."""
    diff = differing_prompts(point, baseline)
    return None if diff is None else not diff


__all__ = ["BenchPlan", "PlanPoint", "PlanPrompts", "validate_plan", "CLIENTS", "RESULT_PREFIX", "MAX_LINE_BYTES", "MAX_LOG_TAIL_BYTES", "BenchResultError", "Percentiles",
           "PointAcceptance", "PointResult", "VariantResult", "validate_result", "format_result_line",
           "find_result_line", "parse_result_line", "text_digest", "digests", "differing_prompts", "equal_to_baseline"]
