"""Placement (pure): attention heads split over the tensor-parallel size, and the weights' fit in the GPU
memory of the requested profile and count."""

from __future__ import annotations

import math

from ..modelconfig import DrafterConfig, TargetConfig
from ..weights import estimate_drafter_bytes, estimate_target_bytes
from .options import Options
from .results import D, S, T, _Out

# Fractions of total GPU memory the weights may take: above HEADROOM a warning (little room
# for KV cache and activations), above FIT an error (the engine will not load).
HEADROOM_FRACTION = 0.80
FIT_FRACTION = 0.95


def _check_tp(d: DrafterConfig, t: TargetConfig | None, o: Options, out: _Out) -> None:
    tp = o.gpu_count
    if tp <= 1:
        return
    for src, heads, kv in (
        (D, d.num_attention_heads, d.num_key_value_heads),
        (T, t.num_attention_heads if t else None, t.num_key_value_heads if t else None),
    ):
        if heads is not None and heads.value % tp:
            out.err("TensorParallelHeadsIndivisible", src, heads.path,
                    f"{heads.value} attention heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                    f"use a gpu.count that divides {heads.value}")
        if kv is not None and kv.value % tp and (src is D or tp % kv.value):
            out.err("TensorParallelHeadsIndivisible", src, kv.path,
                    f"{kv.value} KV heads do not split over tensor-parallel size {tp} (spec.gpu.count); "
                    f"use a gpu.count that divides {kv.value}")


def _check_fit(d: DrafterConfig, t: TargetConfig | None, o: Options, prof, out: _Out) -> tuple[float | None, float | None]:
    tb = _estimate(estimate_target_bytes, t) if t is not None else None
    db = _estimate(estimate_drafter_bytes, d)
    if prof is not None and prof.accelerator and tb is not None:
        need = tb + (db or 0)
        cap = prof.memory_bytes * o.gpu_count
        detail = (f"estimated weights {need / 1e9:.0f} GB (target {tb / 1e9:.0f} GB + drafter {(db or 0) / 1e9:.0f} GB) "
                  f"on {o.gpu_count} x {prof.memory_gb:g} GB {prof.display_name} = {cap / 1e9:.0f} GB")
        if need > FIT_FRACTION * cap:
            want = -(-need // (HEADROOM_FRACTION * prof.memory_bytes))
            out.err("WeightsExceedGpuMemory", S, "spec.gpu.count",
                    f"{detail}: the model does not fit; raise gpu.count to at least {int(want)} or use a larger GPU")
        elif need > HEADROOM_FRACTION * cap:
            out.warn("LowKvCacheHeadroom", S, "spec.gpu.count",
                     f"{detail}: under {int((1 - HEADROOM_FRACTION) * 100)}% is left for KV cache and activations; "
                     "expect few concurrent requests, or raise gpu.count")
    return tb, db


def _estimate(fn, cfg) -> float | None:
    """A weight estimate, or None when the config's numbers defeat it (inf, nan, values past float
    range in fields read untyped): the fit check is advisory and analyze never raises."""
    try:
        v = fn(cfg)
    except (ArithmeticError, ValueError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None
