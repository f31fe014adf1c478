"""What a benchmark point cost beside its speed (pure): prefix-cache hit rate, KV cache capacity and its peak use,
and the engine's peak resident memory, from the engine's own ``/metrics`` scraped before, during and after the
point (the bench client scrapes; this module reads the text).

| cost | vLLM (0.33: ``vllm/v1/metrics/loggers.py``) | SGLang (0.5.23: ``sglang/srt/observability/metrics_collector.py``) |
|---|---|---|
| prefix-cache hit rate over the point | increase of ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total`` (tokens) | increase of ``sglang:realtime_tokens_total{mode="prefill_cache"}`` / (``prefill_cache`` + ``prefill_compute``); else the ``sglang:cache_hit_rate`` gauge after the point |
| KV capacity (tokens) | ``vllm:cache_config_info`` labels ``num_gpu_blocks`` x ``block_size`` | ``sglang:max_total_num_tokens`` |
| KV usage, peak over the point | ``vllm:kv_cache_usage_perc`` (0-1) | ``sglang:token_usage`` (0-1) |
| peak resident memory | ``process_resident_memory_bytes`` where the engine's registry exports it | same |

Each figure is None when the engine does not export its series (an older release, a multiprocess registry
without the process collector); the report says "-" and never invents one.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

from ..acceptance import Sample, series_by_labels, parse_exposition


class Gauges(NamedTuple):
    """What one scrape says about memory (None: not exported)."""

    kv_usage: float | None = None
    kv_capacity_tokens: int | None = None
    resident_bytes: float | None = None


def _first(samples: Iterable[Sample], name: str) -> Sample | None:
    for s in samples:
        if s.name == name and math.isfinite(s.value):
            return s
    return None


def _max(samples: Iterable[Sample], name: str) -> float | None:
    vals = [s.value for s in samples if s.name == name and math.isfinite(s.value)]
    return max(vals) if vals else None


def _vllm_capacity(samples: list[Sample]) -> int | None:
    total = 0
    for s in samples:
        if s.name != "vllm:cache_config_info":
            continue
        try:
            blocks, size = int(s.label("num_gpu_blocks")), int(s.label("block_size"))
        except ValueError:  # "None" before the engine profiled, or absent
            continue
        if blocks > 0 and size > 0:
            total += blocks * size  # one series per engine core (data parallel ranks)
    return total or None


def gauges(engine: str, text: str | None) -> Gauges:
    """The memory gauges of one scrape."""
    if not text:
        return Gauges()
    samples = parse_exposition(text)
    resident = _max(samples, "process_resident_memory_bytes")
    if engine == "sglang":
        cap = _max(samples, "sglang:max_total_num_tokens")
        return Gauges(_max(samples, "sglang:token_usage"), int(cap) if cap and cap > 0 else None, resident)
    return Gauges(_max(samples, "vllm:kv_cache_usage_perc"), _vllm_capacity(samples), resident)


def _increase(before: list[Sample] | None, after: list[Sample], name: str, **labels: str) -> float | None:
    """Increase of a counter summed over its series (those with the given labels); None: not exported.
    A series that went down (engine restarted) counts from zero."""
    def pick(samples: list[Sample]) -> dict[tuple, float]:
        return {k: v for k, v in series_by_labels(samples, name).items()
                if all(dict(k).get(lk) == lv for lk, lv in labels.items())}
    cur = pick(after)
    if not cur:
        return None
    prev = pick(before) if before is not None else {}
    return sum(v - prev.get(k, 0.0) if v >= prev.get(k, 0.0) else v for k, v in cur.items())


class PrefixCache(NamedTuple):
    queries: float | None  # tokens looked up (vLLM) / prompt tokens prefilled (SGLang)
    hits: float | None
    hit_rate: float | None
    source: str | None  # "counters" | "gauge"


def prefix_cache(engine: str, before: str | None, after: str | None) -> PrefixCache:
    """The prefix-cache hit rate over one point (the counters' increase between the two scrapes)."""
    if not after:
        return PrefixCache(None, None, None, None)
    a = parse_exposition(after)
    b = parse_exposition(before) if before else None
    if engine == "sglang":
        hit = _increase(b, a, "sglang:realtime_tokens_total", mode="prefill_cache") if b is not None else None
        miss = _increase(b, a, "sglang:realtime_tokens_total", mode="prefill_compute") if b is not None else None
        if hit is not None and miss is not None:
            q = hit + miss
            return PrefixCache(q, hit, hit / q if q > 0 else None, "counters")
        g = _first(a, "sglang:cache_hit_rate")
        rate = min(1.0, max(0.0, g.value)) if g is not None else None
        return PrefixCache(None, None, rate, "gauge" if rate is not None else None)
    if b is None:
        return PrefixCache(None, None, None, None)  # one scrape alone is an average since the engine started
    q = _increase(b, a, "vllm:prefix_cache_queries_total")
    h = _increase(b, a, "vllm:prefix_cache_hits_total")
    if q is None or h is None:
        return PrefixCache(None, None, None, None)
    return PrefixCache(q, h, min(1.0, h / q) if q > 0 else None, "counters")


def point_costs(engine: str, before: str | None, after: str | None, during: Iterable[Gauges] = ()) -> dict | None:
    """The point's ``costs`` document (bench.result.PointCosts, camelCase), or None when nothing was exported."""
    g = [x for x in (gauges(engine, before), *during, gauges(engine, after))]
    usage = [x.kv_usage for x in g if x.kv_usage is not None]
    caps = [x.kv_capacity_tokens for x in g if x.kv_capacity_tokens is not None]
    res = [x.resident_bytes for x in g if x.resident_bytes is not None]
    pc = prefix_cache(engine, before, after)
    doc = {
        "prefixCacheQueries": pc.queries, "prefixCacheHits": pc.hits, "prefixCacheHitRate": pc.hit_rate,
        "prefixCacheSource": pc.source,
        "kvCapacityTokens": caps[-1] if caps else None,
        "kvUsagePeak": min(1.0, max(0.0, max(usage))) if usage else None,
        "residentMemoryPeakBytes": max(res) if res else None,
    }
    return doc if any(v is not None for v in doc.values()) else None


def compare_to_baseline(costs: dict | None, base: dict | None) -> str:
    """One line: what a variant costs against speculation off ("KV capacity -38%, prefix cache 0% vs 61%")."""
    if not costs or not base:
        return ""
    parts = []
    c, b = costs.get("kvCapacityTokens"), base.get("kvCapacityTokens")
    if c and b:
        parts.append(f"KV capacity {(c - b) / b:+.0%} ({c:,} vs {b:,} tokens)")
    hr, hb = costs.get("prefixCacheHitRate"), base.get("prefixCacheHitRate")
    if hr is not None and hb is not None:
        parts.append(f"prefix cache {hr:.0%} vs {hb:.0%}")
    m, mb = costs.get("residentMemoryPeakBytes"), base.get("residentMemoryPeakBytes")
    if m and mb:
        parts.append(f"peak memory {(m - mb) / mb:+.0%}")
    return ", ".join(parts)


def prefix_cache_lost(costs: dict | None, base: dict | None, threshold: float = 0.01) -> bool:
    """The variant's prefix cache hit nothing while the baseline's hit (speculation turned prefix caching off:
    vllm 50457, a mixed sliding/full drafter; vllm 57032, a drafter on a hybrid Mamba target)."""
    if not costs or not base:
        return False
    hr, hb = costs.get("prefixCacheHitRate"), base.get("prefixCacheHitRate")
    return hr is not None and hb is not None and hb > threshold and hr <= threshold
