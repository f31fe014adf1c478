"""The SpeculativeBenchmark planner (pure): matrix + resolved deployment -> variants and points.

A *variant* is an engine configuration: the deployment with speculation overridden (``baseline``:
no speculative flags at all; ``k3``: 3 draft tokens per step; ``k3-w2048``: and a 2048-token draft
window; ``k3-fa3``: and the fa3 draft attention backend). Each variant needs an engine of its own
(a new Deployment, a cold start); its points (context x concurrency) only change what the client
sends. The operator measures variants one after another, baseline first, so the speculation
variants' greedy outputs can be compared with it.

Every refusal is a :class:`PlanProblem` naming the field and the fix, like the spec catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from .. import engines as eng
from specdeploy.core.errors import Permanent

BASELINE = "baseline"
GUARDED = "guarded"
MAX_POINTS = 64
PROMPTS_KEY = "prompts.jsonl"


@dataclass(frozen=True)
class PlanProblem:
    path: str
    message: str
    code: str

    def line(self) -> str:
        return f"{self.path}: {self.message} [{self.code}]"


class PlanError(Permanent):
    def __init__(self, problems: list[PlanProblem]):
        self.problems = problems
        super().__init__("; ".join(p.line() for p in problems))


@dataclass(frozen=True)
class Variant:
    """One engine configuration. ``speculation`` False: speculation off (every other field None)."""

    name: str
    speculation: bool
    speculative_tokens: Optional[int] = None  # None: the deployment's own (block size - 1)
    draft_window: Optional[Union[int, str]] = None  # None: the deployment's own; "off": none
    draft_attention_backend: Optional[str] = None  # None: the deployment's own
    synthetic_acceptance: Optional[float] = None  # an assumed tau forced by the engine (calibration only)
    method: Optional[str] = None  # the method measured (None: speculation off)
    method_speculation: Optional[dict] = None  # a method variant's spec.speculation (camelCase); None: the deployment's
    drafter: Optional[dict] = None  # a method variant's spec.drafter (camelCase); None: none or the deployment's
    guarded: bool = False  # the deployment's guard kept (every other variant measures speculation without it)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "speculation": self.speculation}
        for key, value in (("speculativeTokens", self.speculative_tokens), ("draftWindow", self.draft_window),
                           ("draftAttentionBackend", self.draft_attention_backend),
                           ("syntheticAcceptance", self.synthetic_acceptance), ("method", self.method),
                           ("drafter", (self.drafter or {}).get("model")), ("guarded", self.guarded or None)):
            if value is not None:
                doc[key] = value
        return doc


@dataclass(frozen=True)
class Point:
    id: str
    variant: str
    context: int
    concurrency: int
    num_prompts: int
    max_output_tokens: int
    new_engine: bool  # the first point of its variant: needs the variant's engine started; the rest: the client only

    def to_client(self) -> dict[str, Any]:
        return {"id": self.id, "context": self.context, "concurrency": self.concurrency, "numPrompts": self.num_prompts,
                "maxOutputTokens": self.max_output_tokens}


@dataclass(frozen=True)
class BenchPlan:
    variants: tuple[Variant, ...]
    points: tuple[Point, ...]
    block_size: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def points_of(self, variant: str) -> list[Point]:
        return [p for p in self.points if p.variant == variant]

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    @property
    def engine_starts(self) -> int:
        """Points that need a new engine (one per variant); every other point only changes the client."""
        return sum(p.new_engine for p in self.points)


def variant_name(tokens: int, window: Union[int, str, None], backend: Optional[str]) -> str:
    """``k3``, ``k3-w2048``, ``k3-woff``, ``k3-fa3``, ``k3-trtllm-mha``: a DNS label part."""
    name = f"k{tokens}"
    if window is not None:
        name += f"-w{window}"
    if backend is not None:
        name += "-" + backend.replace("_", "-")
    return name


SYNTHETIC_PREFIX = "syn"
_SYNTHETIC_NAME = re.compile(r"syn(\d+)(?:p(\d+))?")


def synthetic_name(tau: float) -> str:
    """``syn3`` for 3.0, ``syn2p5`` for 2.5, ``syn2p25`` for 2.25 (a DNS label part; two decimals at most)."""
    whole, frac = f"{tau:.2f}".split(".")
    frac = frac.rstrip("0")
    return f"{SYNTHETIC_PREFIX}{whole}" + (f"p{frac}" if frac else "")


def synthetic_tau(variant: str) -> Optional[float]:
    """The assumed tau of a synthetic variant's name, None for any other variant."""
    m = _SYNTHETIC_NAME.fullmatch(variant)
    return float(f"{m.group(1)}.{m.group(2) or 0}") if m else None


def point_id(variant: str, context: int, concurrency: int) -> str:
    return f"{variant}/c{context}/n{concurrency}"


def plan_benchmark(matrix: Any, *, engine: str, engine_version: str, block_size: int,
                   served_context: Optional[int] = None, deployment_tokens: Optional[int] = None,
                   cpu_pool: bool = False, deployment_method: str = "dflash") -> BenchPlan:
    """The ordered variants (baseline first) and points of a benchmark's matrix.

    ``matrix`` is the parsed ``spec.matrix`` (api/benchmark.Matrix); ``block_size`` the drafter's
    trained draft block size (bonus token included: speculative tokens go up to block_size - 1);
    ``deployment_tokens`` the deployment's own speculative tokens (its blockSize - 1; default
    block_size - 1), measured when the matrix names none; ``served_context`` the longest context the
    engine serves, when known. Raises PlanError with every problem found."""
    problems: list[PlanProblem] = []
    P = "spec.matrix"
    limit = block_size - 1
    tokens = list(matrix.speculative_tokens) or [deployment_tokens or limit]
    for i, k in enumerate(matrix.speculative_tokens):
        if k > limit:
            problems.append(PlanProblem(
                f"{P}.speculativeTokens[{i}]", f"{k} draft tokens do not fit the drafter's block size {block_size} "
                f"(at most block size - 1 = {limit}); remove it or lower it to {limit} or less", "SpeculativeTokensTooMany"))
    row = eng.get_engine(engine).release_for(engine_version) if engine in eng.ENGINES else None
    windows: list[Union[int, str, None]] = list(matrix.draft_window) or [None]
    if matrix.draft_window:
        if row is None or "draft_window" not in row.flags:
            problems.append(PlanProblem(
                f"{P}.draftWindow", f"{engine} {engine_version} has no draft window switch (no compact draft cache "
                "flag in its capability row, docs/reference/engines.md): remove spec.matrix.draftWindow", "DraftWindowUnsupported"))
        for i, w in enumerate(matrix.draft_window):
            if isinstance(w, int) and w < max(tokens) + 1:
                problems.append(PlanProblem(
                    f"{P}.draftWindow[{i}]", f"a draft window of {w} tokens is below the draft block ({max(tokens) + 1} "
                    f"tokens with {max(tokens)} speculative tokens): set it to {max(tokens) + 1} or more, or 'off'",
                    "DraftWindowBelowBlock"))
    backends: list[Optional[str]] = list(matrix.draft_attention_backend) or [None]
    for i, b in enumerate(matrix.draft_attention_backend):
        if row is not None and b not in row.draft_attention_backends:
            known = ", ".join(sorted(row.draft_attention_backends)) or "none"
            problems.append(PlanProblem(
                f"{P}.draftAttentionBackend[{i}]", f"{engine} {engine_version} has no draft attention backend {b!r} "
                f"(it has: {known}); remove it", "DraftAttentionBackendUnsupported"))
    synthetic = list(getattr(matrix, "synthetic_acceptance", []) or [])
    own = tokens[0]  # synthetic variants run at the first speculative tokens measured (else the deployment's own)
    syn_row = eng.synthetic_acceptance(engine, engine_version)
    if synthetic and syn_row is not None and cpu_pool and syn_row.cpu_refusal:
        problems.append(PlanProblem(
            f"{P}.syntheticAcceptance", f"{engine}'s CPU build refuses synthetic acceptance ({syn_row.cpu_refusal}): "
            "remove spec.matrix.syntheticAcceptance or benchmark on a GPU pool", "SyntheticAcceptanceUnsupported"))
    if synthetic and syn_row is None:
        since = eng.SYNTHETIC_ACCEPTANCE.get(engine)
        problems.append(PlanProblem(
            f"{P}.syntheticAcceptance", f"{engine} {engine_version} has no synthetic acceptance the project has read "
            f"in its code" + (f" (verified from {since.engine} {since.since}: {since.source.split(' (')[0]})" if since else "")
            + "; remove spec.matrix.syntheticAcceptance or benchmark a newer release", "SyntheticAcceptanceUnsupported"))
    for i, tau in enumerate(synthetic):
        if tau > own + 1:
            problems.append(PlanProblem(
                f"{P}.syntheticAcceptance[{i}]", f"an acceptance length of {tau:g} is above what {own} draft tokens "
                f"can give ({own + 1} with the bonus token); lower it to {own + 1} or less", "SyntheticAcceptanceTooHigh"))
    if len({synthetic_name(t) for t in synthetic}) != len(synthetic):
        problems.append(PlanProblem(f"{P}.syntheticAcceptance", "two values round to the same two decimals: list "
                                    "each value once", "SyntheticAcceptanceDuplicate"))
    bench_methods = list(getattr(matrix, "methods", []) or [])
    for i, bm in enumerate(bench_methods):
        if row is not None and row.engine_method(bm.method) is None:
            serves = ", ".join(sorted(row.method_names)) or "none"
            problems.append(PlanProblem(
                f"{P}.methods[{i}].method", f"{engine} {engine_version} has no method {bm.method} (it serves: {serves}); "
                "remove it or benchmark a release that has it", "MethodUnsupported"))
    if served_context is not None:
        for i, c in enumerate(matrix.contexts):
            if c + matrix.max_output_tokens > served_context:
                problems.append(PlanProblem(
                    f"{P}.contexts[{i}]", f"context {c} + maxOutputTokens {matrix.max_output_tokens} exceeds the "
                    f"{served_context} tokens the deployment serves; lower it to {max(1, served_context - matrix.max_output_tokens)} "
                    "or less", "ContextTooLong"))
    variants: list[Variant] = [Variant(BASELINE, False)] if matrix.baseline else []
    for k in tokens:
        for w in windows:
            for b in backends:
                variants.append(Variant(variant_name(k, w, b), True, k if matrix.speculative_tokens else None, w, b,
                                        method=deployment_method))
    if getattr(matrix, "guarded", False):
        variants.append(Variant(GUARDED, True, method=deployment_method, guarded=True))
    seen: dict[str, int] = {}
    for bm in bench_methods:
        base = bm.method.replace("_", "-")
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}-{seen[base]}"
        variants.append(Variant(name, True, method=bm.method, method_speculation=bm.speculation(),
                                drafter=bm.drafter.model_dump(by_alias=True, exclude_none=True) if bm.drafter else None))
    for tau in synthetic:
        variants.append(Variant(synthetic_name(tau), True, own if matrix.speculative_tokens else None, None, None, tau,
                                method=deployment_method))
    n = len(variants) * len(matrix.contexts) * len(matrix.concurrency)
    if n > MAX_POINTS:
        problems.append(PlanProblem(P, f"the matrix has {n} points (variants x contexts x concurrency levels), more "
                                    f"than {MAX_POINTS}: measure fewer values per axis or split it into several "
                                    "benchmarks", "MatrixTooLarge"))
    if problems:
        raise PlanError(problems)
    points: list[Point] = []
    for v in variants:
        first = True
        for c in matrix.contexts:
            for n_ in matrix.concurrency:
                points.append(Point(point_id(v.name, c, n_), v.name, c, n_, matrix.prompts_per_point,
                                    matrix.max_output_tokens, first))
                first = False
    notes = () if matrix.baseline else (
        "spec.matrix.baseline is false: no speedup, crossover or greedy-output equality can be computed",)
    return BenchPlan(tuple(variants), tuple(points), block_size, notes)


def build_client_plan(*, benchmark: str, variant: str, engine: str, engine_version: str, base_url: str,
                      metrics_url: str, model: str, tokenizer: str, prompts: dict[str, Any], points: list[Point],
                      client: str = "auto") -> dict[str, Any]:
    """The client Job's plan.json (Contract 2)."""
    return {"benchmark": benchmark, "variant": variant, "engine": engine, "engineVersion": engine_version,
            "baseUrl": base_url, "metricsUrl": metrics_url, "model": model, "tokenizer": tokenizer,
            "prompts": prompts, "points": [p.to_client() for p in points], "temperature": 0, "client": client}
