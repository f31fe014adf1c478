"""Where speculation pays (pure): a SpeculativeBenchmark's point results -> its recommendation.

Input: every measured point (Contract 3's point documents, each with its ``variant``), the
variants in plan order (``baseline`` first when measured). Output (Contract 4, camelCase):

- ``bands``: per (context, concurrency), the fastest eligible variant, its output tokens/s, the
  baseline's and the speedup. A tie with the baseline goes to the baseline (speculation that does
  not beat it does not pay); a tie between speculation variants to the earlier one in plan order.
- ``crossover``: per context, the lowest measured concurrency from which the best eligible
  speculation variant is no faster than the baseline at that and every higher measured
  concurrency (null: it pays everywhere measured, or cannot be judged: the reason says which).
- ``guard``: ``maxConcurrency`` = the smallest crossover over the contexts (speculation off at or
  above it); ``maxContext`` = the largest measured context below the first context where
  speculation loses already at its lowest concurrency (null when that never happens, or when it
  happens at the smallest context: then ``maxConcurrency`` already says "off").
- ``excluded``: variants never recommended: greedy outputs unequal to the baseline's at any
  point (temperature 0: speculation must not change the text), and variants with no usable point.
- ``best``: the variant winning the most bands; ``summary``: one sentence with the numbers.
- ``costs``: per speculation variant, what it costs against the baseline over its points (KV capacity the
  engine reports, prefix-cache hit rate, peak resident memory: core/bench/costs.py), and whether its prefix cache
  hit nothing while the baseline's hit (named in the summary: a speed-up measured on prompts without shared
  prefixes can hide that loss).

A point is usable when it completed at least one request and none failed, and reported output
tokens/s; unusable points are skipped (and named in the band's or crossover's reason).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .plan import synthetic_tau
from .costs import compare_to_baseline, prefix_cache_lost

BASELINE = "baseline"


def _usable(p: dict | None) -> bool:
    if not p:
        return False
    tps = p.get("outputTokensPerSecond")
    return isinstance(tps, (int, float)) and (p.get("completed") or 0) > 0 and not (p.get("failed") or 0)


def _tps(p: dict) -> float:
    return float(p["outputTokensPerSecond"])


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def equal_to_baseline(points: Iterable[dict]) -> dict[str, Optional[bool]]:
    """Point id -> whether its greedy outputs equal the baseline's at the same (context, concurrency,
    prompts, output tokens); None: no baseline point of that shape, or digests missing/of another count.
    The baseline's own points and synthetic variants' (outputs forced by an assumed acceptance) map to None."""
    pts = list(points)
    base = {(p["context"], p["concurrency"], p.get("numPrompts"), p.get("maxOutputTokens")): p
            for p in pts if p.get("variant") == BASELINE}
    out: dict[str, Optional[bool]] = {}
    for p in pts:
        if p.get("variant") == BASELINE or synthetic_tau(str(p.get("variant"))) is not None:
            out[p["id"]] = None
            continue
        b = base.get((p["context"], p["concurrency"], p.get("numPrompts"), p.get("maxOutputTokens")))
        a_d, b_d = list(p.get("outputDigests") or []), list((b or {}).get("outputDigests") or [])
        out[p["id"]] = None if b is None or not a_d or len(a_d) != len(b_d) else a_d == b_d
    return out


def recommend(points: Iterable[dict], variants: list[str], methods: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The recommendation (Contract 4) from every point result (each with ``variant``) and the plan's variant order.
    Synthetic variants (an assumed acceptance forced by the engine: ``syn2p5``) are never recommended; they give
    ``calibration``: where the crossover would be at each assumed tau."""
    every = list(points)
    synthetic = [v for v in variants if synthetic_tau(v) is not None]
    pts = [p for p in every if synthetic_tau(str(p.get("variant"))) is None]
    variants = [v for v in variants if v not in synthetic]
    reco = _recommend(pts, variants)
    if methods:  # the method of each band's best variant ("off" for the baseline), and per context
        for b in reco["bands"]:
            b["method"] = "off" if b["best"] == BASELINE else methods.get(b["best"])
        named = sorted({b["method"] for b in reco["bands"] if b.get("method")})
        if len(named) > 1 or (named and named != ["off"] and len(set(methods.values())) > 1):
            per = []
            for c in sorted({b["context"] for b in reco["bands"]}):
                row = [b for b in reco["bands"] if b["context"] == c]
                per.append(f"context {c}: " + ", ".join(f"{b['method']} at {b['concurrency']}" for b in row))
            reco["summary"] = reco["summary"][:-1] + "; best method per band: " + "; ".join(per) + "."
    reco["calibration"] = [_calibration(v, pts, every) for v in synthetic]
    if reco["calibration"]:
        def where(c: dict) -> str:
            at = sorted({x["concurrency"] for x in c["crossover"] if x["concurrency"] is not None})
            return f"tau {c['assumedTau']:g}: " + (f"off from concurrency {at[0]}" if at else "no crossover measured")
        reco["summary"] = reco["summary"][:-1] + "; calibration " + ", ".join(map(where, reco["calibration"])) + "."
    return reco


def _calibration(variant: str, pts: list[dict], every: list[dict]) -> dict[str, Any]:
    """One synthetic variant against the baseline: its crossover per context (as if it were the only speculation
    variant) and the tau the engine's counters measured (it should be the assumed one)."""
    mine = [p for p in every if p.get("variant") == variant]
    alone = _recommend([p for p in pts if p.get("variant") == BASELINE] + mine, [BASELINE, variant])
    taus = [(p.get("acceptance") or {}).get("length") for p in mine]
    taus = [t for t in taus if isinstance(t, (int, float))]
    best = max((b.get("speedup") or 0 for b in alone["bands"]), default=0) or None
    return {"variant": variant, "assumedTau": synthetic_tau(variant),
            "measuredTau": round(sum(taus) / len(taus), 3) if taus else None,
            "crossover": [{"context": c["context"], "concurrency": c["concurrency"]} for c in alone["crossover"]],
            "bestSpeedup": best}


def _recommend(pts: list[dict], variants: list[str]) -> dict[str, Any]:
    eq = equal_to_baseline(pts)
    has_baseline = BASELINE in variants and any(p.get("variant") == BASELINE for p in pts)
    order = {v: i for i, v in enumerate(variants)}
    excluded: list[dict[str, str]] = []
    for v in variants:
        if v == BASELINE:
            continue
        unequal = [p for p in pts if p.get("variant") == v and eq.get(p["id"]) is False]
        if unequal:
            where = ", ".join(f"context {p['context']} concurrency {p['concurrency']}" for p in unequal[:3])
            excluded.append({"variant": v, "reason": f"greedy outputs differ from the baseline's at {where}"
                             + (f" and {len(unequal) - 3} more points" if len(unequal) > 3 else "")})
        elif not any(_usable(p) for p in pts if p.get("variant") == v):
            excluded.append({"variant": v, "reason": "no point completed without failed requests"})
    out_of = {e["variant"] for e in excluded}
    spec_variants = [v for v in variants if v != BASELINE and v not in out_of]
    by: dict[tuple[str, int, int], dict] = {(p["variant"], p["context"], p["concurrency"]): p for p in pts}
    contexts = sorted({p["context"] for p in pts})
    levels = sorted({p["concurrency"] for p in pts})

    bands: list[dict[str, Any]] = []
    for c in contexts:
        for n in levels:
            base = by.get((BASELINE, c, n))
            base_tps = _tps(base) if _usable(base) else None
            best, best_tps = (BASELINE, base_tps) if base_tps is not None else (None, None)
            for v in spec_variants:
                p = by.get((v, c, n))
                if _usable(p) and (best_tps is None or _tps(p) > best_tps):
                    best, best_tps = v, _tps(p)
            if best is None:
                continue
            band: dict[str, Any] = {"context": c, "concurrency": n, "best": best,
                                    "outputTokensPerSecond": round(best_tps, 3)}
            if base_tps is not None:
                band["baselineTokensPerSecond"] = round(base_tps, 3)
                if base_tps > 0:
                    band["speedup"] = round(best_tps / base_tps, 3)
            bands.append(band)

    crossover: list[dict[str, Any]] = []
    for c in contexts:
        if not has_baseline:
            crossover.append({"context": c, "concurrency": None, "reason": "no baseline measured (spec.matrix.baseline)"})
            continue
        if not spec_variants:
            crossover.append({"context": c, "concurrency": None, "reason": "no speculation variant is eligible"})
            continue
        judged: list[tuple[int, bool, str]] = []  # (concurrency, speculation pays, numbers)
        for n in levels:
            base = by.get((BASELINE, c, n))
            cands = [(v, _tps(by[(v, c, n)])) for v in spec_variants if _usable(by.get((v, c, n)))]
            if not _usable(base) or not cands:
                continue
            v, tps = max(cands, key=lambda t: (t[1], -order.get(t[0], 0)))
            judged.append((n, tps > _tps(base), f"{v} {_fmt(tps)} tok/s vs baseline {_fmt(_tps(base))}"))
        if not judged:
            crossover.append({"context": c, "concurrency": None, "reason": "no usable point pair (baseline and speculation)"})
            continue
        at: Optional[int] = None
        why = ""
        for i, (n, pays, numbers) in enumerate(judged):
            if not pays and all(not later[1] for later in judged[i:]):
                at, why = n, numbers
                break
        if at is None:
            n, _, numbers = judged[-1]
            crossover.append({"context": c, "concurrency": None,
                              "reason": f"speculation pays at every measured concurrency (up to {n}: {numbers})"})
        else:
            crossover.append({"context": c, "concurrency": at,
                              "reason": f"speculation no faster from concurrency {at} ({why})"})

    losing = [x["concurrency"] for x in crossover if x["concurrency"] is not None]
    max_concurrency = min(losing) if losing else None
    max_context: Optional[int] = None
    if levels:
        lowest_lost = [x["context"] for x in crossover if x["concurrency"] is not None and x["concurrency"] == levels[0]]
        if lowest_lost:
            first = min(lowest_lost)
            below = [c for c in contexts if c < first]
            max_context = max(below) if below else None
    wins: dict[str, int] = {}
    for b in bands:
        wins[b["best"]] = wins.get(b["best"], 0) + 1
    best_overall = max(wins, key=lambda v: (wins[v], -order.get(v, 0))) if wins else None
    costs, lost = _costs(pts, variants) if has_baseline else ([], [])
    summary = _summary(bands, crossover, max_concurrency, excluded, has_baseline)
    if lost:
        summary = summary[:-1] + "; prefix cache hit nothing under " + ", ".join(lost) + "."
    return {"bands": bands, "crossover": crossover,
            "guard": {"maxConcurrency": max_concurrency, "maxContext": max_context},
            "excluded": excluded, "best": best_overall, "costs": costs, "summary": summary}


def variant_costs(points: Iterable[dict]) -> dict | None:
    """One variant's costs over its points: the last KV capacity reported, the prefix-cache hit rate over every
    token looked up (counters) or the mean of the gauge readings, the peak KV use and resident memory."""
    cs = [p["costs"] for p in points if isinstance(p.get("costs"), dict)]
    if not cs:
        return None
    caps = [c["kvCapacityTokens"] for c in cs if c.get("kvCapacityTokens")]
    q = sum(c.get("prefixCacheQueries") or 0 for c in cs if c.get("prefixCacheSource") == "counters")
    h = sum(c.get("prefixCacheHits") or 0 for c in cs if c.get("prefixCacheSource") == "counters")
    gauge = [c["prefixCacheHitRate"] for c in cs if c.get("prefixCacheSource") == "gauge"
             and c.get("prefixCacheHitRate") is not None]
    rate = h / q if q > 0 else (sum(gauge) / len(gauge) if gauge else None)
    usage = [c["kvUsagePeak"] for c in cs if c.get("kvUsagePeak") is not None]
    mem = [c["residentMemoryPeakBytes"] for c in cs if c.get("residentMemoryPeakBytes")]
    return {"kvCapacityTokens": caps[-1] if caps else None, "prefixCacheHitRate": rate,
            "kvUsagePeak": max(usage) if usage else None, "residentMemoryPeakBytes": max(mem) if mem else None}


def _costs(pts: list[dict], variants: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(each variant's cost line, "k3 (0% vs baseline 61%)" for each variant that lost the prefix cache)."""
    base = variant_costs(p for p in pts if p.get("variant") == BASELINE)
    out, lost = [], []
    for v in variants:
        if v == BASELINE:
            continue
        mine = variant_costs(p for p in pts if p.get("variant") == v)
        line = compare_to_baseline(mine, base)
        if line:
            gone = prefix_cache_lost(mine, base)
            out.append({"variant": v, "vsBaseline": line, "prefixCacheLost": gone})
            if gone:
                lost.append(f"{v} ({mine['prefixCacheHitRate']:.0%} vs baseline {base['prefixCacheHitRate']:.0%})")
    return out, lost


def _summary(bands: list[dict], crossover: list[dict], max_concurrency: Optional[int], excluded: list[dict],
             has_baseline: bool) -> str:
    if not bands:
        return "no usable point: nothing to recommend"
    spec_bands = [b for b in bands if b["best"] != BASELINE]
    parts: list[str] = []
    if not has_baseline:
        best = max(bands, key=lambda b: b["outputTokensPerSecond"])
        parts.append(f"no baseline measured: fastest {best['best']} ({_fmt(best['outputTokensPerSecond'])} tok/s at "
                     f"context {best['context']}, concurrency {best['concurrency']})")
    elif spec_bands:
        top = max(spec_bands, key=lambda b: b.get("speedup") or 0)
        speedup = f" up to {top['speedup']:.2f}x" if top.get("speedup") else ""
        winners = sorted({b["best"] for b in spec_bands})
        parts.append(f"{', '.join(winners)} beat the baseline in {len(spec_bands)} of {len(bands)} bands,{speedup} "
                     f"at context {top['context']}, concurrency {top['concurrency']}")
    else:
        parts.append("speculation never beat the baseline")
    if max_concurrency is not None:
        parts.append(f"speculation off from concurrency {max_concurrency}")
    elif has_baseline and spec_bands:
        parts.append("no crossover within the measured concurrency")
    if excluded:
        parts.append("excluded: " + ", ".join(e["variant"] for e in excluded))
    return "; ".join(parts) + "."
