"""What one load client measured over one point's prompts (``ClientRun``), and the readers of the engines'
own clients' results (``vllm bench serve``, ``sglang.bench_serving``) into it. Pure: no I/O.

Part of ``specdeploy-runtime bench-client`` (benchclient.py runs the clients; this module reads them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specdeploy.core.errors import Permanent

PERCENTILES = (50, 90, 99)


class BenchError(Permanent, RuntimeError):
    """A fatal error (no result line): bad plan, unreachable engine, missing client."""


# ----------------------------------------------------------------- figures (pure)


def percentile(values: list[float], p: float) -> float:
    """numpy.percentile's default (linear interpolation), as the engines' clients compute it."""
    xs = sorted(values)
    if not xs:
        return 0.0
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary_ms(values_s: list[float]) -> dict[str, float] | None:
    if not values_s:
        return None
    ms = [v * 1000.0 for v in values_s]
    out = {f"p{p}": percentile(ms, p) for p in PERCENTILES}
    out["mean"] = sum(ms) / len(ms)
    return out


@dataclass
class ClientRun:
    """One client run over one point's prompts (the client-independent figures)."""

    completed: int
    failed: int
    duration_s: float
    output_tokens: float
    output_tokens_per_second: float
    requests_per_second: float
    input_tokens: float | None
    ttft_ms: dict[str, float] | None
    itl_ms: dict[str, float] | None
    tpot_ms: dict[str, float] | None
    texts: list[str] | None  # prompt order; None when the client does not report them
    errors: list[str] = field(default_factory=list)


def _pct(doc: dict, metric: str) -> dict[str, float] | None:
    out = {}
    for p in PERCENTILES:
        v = doc.get(f"p{p}_{metric}_ms")
        if isinstance(v, (int, float)):
            out[f"p{p}"] = float(v)
    mean = doc.get(f"mean_{metric}_ms")
    if isinstance(mean, (int, float)):
        out["mean"] = float(mean)
    return out or None


def _num(doc: dict, key: str, default: float = 0.0) -> float:
    v = doc.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else default


def parse_vllm_result(doc: dict) -> ClientRun:
    """``vllm bench serve --save-result --save-detailed`` JSON (vLLM 0.32.0,
    vllm/benchmarks/serve.py: ``benchmark()`` builds ``duration``, ``completed``, ``failed``,
    ``total_output_tokens``, ``request_throughput``, ``output_throughput``, ``generated_texts``,
    ``errors`` (detailed); ``process_one_metric()`` adds ``mean_<m>_ms`` and ``p<P>_<m>_ms`` for
    ``--percentile-metrics`` x ``--metric-percentiles``)."""
    if not isinstance(doc, dict) or "completed" not in doc or "output_throughput" not in doc:
        raise BenchError("vllm bench serve's result has no 'completed'/'output_throughput' (not its JSON?)")
    texts = doc.get("generated_texts")
    errs = [e for e in (doc.get("errors") or []) if isinstance(e, str) and e]
    return ClientRun(
        completed=int(_num(doc, "completed")), failed=int(_num(doc, "failed")), duration_s=_num(doc, "duration"),
        output_tokens=_num(doc, "total_output_tokens"), output_tokens_per_second=_num(doc, "output_throughput"),
        requests_per_second=_num(doc, "request_throughput"), input_tokens=_num(doc, "total_input_tokens"),
        ttft_ms=_pct(doc, "ttft"), itl_ms=_pct(doc, "itl"),
        tpot_ms=_pct(doc, "tpot"),
        texts=[t if isinstance(t, str) else "" for t in texts] if isinstance(texts, list) else None,
        errors=[e[:256] for e in errs[:8]])


def parse_sglang_result(line_doc: dict, details: dict | None = None, *, expected: int | None = None) -> ClientRun:
    """One line of ``python -m sglang.bench_serving --output-file`` (JSON lines, appended; SGLang 0.5.23,
    python/sglang/benchmark/serving.py ``benchmark()``: ``duration``, ``completed``,
    ``total_output_tokens``, ``request_throughput``, ``output_throughput``, ``mean/median/p90/p99
    _ttft_ms``, ``..._itl_ms``, ``..._tpot_ms``; with ``--output-details`` also
    ``generated_texts`` and ``errors``)."""
    if not isinstance(line_doc, dict) or "completed" not in line_doc:
        raise BenchError("sglang.bench_serving's result has no 'completed' (not its JSON?)")
    doc = {**line_doc, **(details or {})}

    def pct(metric: str) -> dict[str, float] | None:
        out = {}
        for key, name in (("p50", f"median_{metric}_ms"), ("p90", f"p90_{metric}_ms"), ("p99", f"p99_{metric}_ms"),
                          ("mean", f"mean_{metric}_ms")):
            v = doc.get(name)
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[key] = float(v)
        return out or None

    texts = doc.get("generated_texts")
    errs = [e for e in (doc.get("errors") or []) if isinstance(e, str) and e]
    completed = int(_num(doc, "completed"))
    n = expected if expected is not None else completed  # the line has no prompt count
    return ClientRun(
        completed=completed, failed=max(0, n - completed), duration_s=_num(doc, "duration"),
        output_tokens=_num(doc, "total_output_tokens"), output_tokens_per_second=_num(doc, "output_throughput"),
        requests_per_second=_num(doc, "request_throughput"), input_tokens=_num(doc, "total_input_tokens"),
        ttft_ms=pct("ttft"), itl_ms=pct("itl"),
        tpot_ms=pct("tpot"),
        texts=[t if isinstance(t, str) else "" for t in texts] if isinstance(texts, list) else None,
        errors=[e[:256] for e in errs[:8]])
