"""Placement (pure): attention heads split over the tensor-parallel size, and the weights' fit in the GPU
memory of the requested profile and count."""

from __future__ import annotations

import math

from .. import memory as mem
from ..memo import by_identity
from ..modelconfig import DrafterConfig, TargetConfig
from ..weights import estimate_drafter_bytes, estimate_target_bytes
from .options import Options
from .results import D, S, T, Out

# Fractions of total GPU memory the weights may take: above HEADROOM a warning (little room
# for KV cache and activations), above FIT an error (the engine will not load).
HEADROOM_FRACTION = 0.80
FIT_FRACTION = 0.95


def check_tp(d: DrafterConfig, t: TargetConfig | None, o: Options, out: Out) -> None:
    """The attention and KV heads of drafter and target split evenly over ``spec.gpu.count`` (tensor parallel)."""
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


def check_fit(d: DrafterConfig, t: TargetConfig | None, o: Options, prof, out: Out) -> tuple[float | None, float | None]:
    """The weights of target and drafter fit the GPUs' memory; returns the (target, drafter) weight estimates in bytes."""
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


def _int_flag(args: tuple[str, ...], flag: str) -> int | None:
    """The last integer value of ``flag`` in extraArgs (``--flag N`` or ``--flag=N``); None when absent."""
    value = None
    for i, a in enumerate(args):
        v = a[len(flag) + 1:] if a.startswith(flag + "=") else (args[i + 1] if a == flag and i + 1 < len(args) else None)
        if v is not None and v.lstrip("-").isdigit():
            value = int(v)
    return value


# a read-only TargetConfig (checker/parsed.py) and tensor-parallel size: the same KV shape (core/memo.py)
_target_kv = by_identity(64, name="checker.target_kv")(mem.target_kv)


def check_memory(d: DrafterConfig, t: TargetConfig | None, o: Options, prof, types: tuple[str, ...],
                  draft_window: int | None, native_window: int | None, served: int | None,
                  tb: float | None, db: float | None, out: Out) -> "mem.MemoryPlan | None":
    """The KV pool after the weights (core/memory.py): one sequence of the served context must fit (vLLM refuses
    to start otherwise: vllm/v1/core/kv_cache_planning.py _check_enough_kv_cache_memory; SGLang starts and caps
    requests at the pool: sglang/srt/managers/tp_worker.py get_worker_info), and the drafter's share of the
    capacity is reported, with a warning above DRAFTER_CAPACITY_SHARE_WARN."""
    if prof is None or not prof.accelerator or t is None or tb is None or not served:
        return None
    tp = max(1, o.gpu_count)
    tk = _target_kv(t, tp)
    if tk is None or tk.empty:
        return None
    dk = mem.drafter_kv(d, types, draft_window=draft_window, native_window=native_window, tp=tp)
    p = mem.plan(o.engine, prof.memory_bytes, o.gpu_count, tb, db or 0.0, tk, dk, served, o.concurrency or 1,
                 chunked_prefill_size=_int_flag(o.extra_args, "--chunked-prefill-size"),
                 mla=isinstance(t.text.get("kv_lora_rank"), int))
    if p is None:
        return None
    if o.engine is None or any(f.code == "WeightsExceedGpuMemory" for f in out.items):
        return p  # the pool is the engine's: figures without an engine are vLLM's defaults, no verdict
    path = "spec.engine.maxModelLen" if o.max_model_len is not None else "spec.gpu.count"
    where = f"{o.gpu_count} x {prof.memory_gb:g} GB {prof.display_name}"
    if p.pool_bytes <= 0:
        out.err("KvCacheTooSmallForContext", S, "spec.gpu.count",
                f"no KV cache is left on {where} after the weights ({(tb + (db or 0)) / 1e9:.0f} GB) and the engine's "
                "activation reserve; raise gpu.count or use a larger GPU")
        return p
    one = p.target.plus(p.drafter).bytes_for(served)
    if one > p.pool_bytes:
        fits = p.largest_context(1)
        detail = (f"one sequence of {served} tokens needs {mem.gib(one)} of KV cache (target "
                  f"{mem.gib(p.target.bytes_for(served))} + drafter {mem.gib(p.drafter.bytes_for(served))}); "
                  f"{mem.gib(p.pool_bytes)} is left for it on {where} after the weights")
        fix = f"set spec.engine.maxModelLen <= {fits} or raise gpu.count" if fits else "raise gpu.count"
        if o.engine == "sglang":
            out.warn("KvCacheTooSmallForContext", S, path,
                     f"{detail}: SGLang starts and refuses or truncates longer requests; {fix}")
        else:
            out.err("KvCacheTooSmallForContext", S, path, f"{detail}: the engine refuses to start; {fix}")
    share = p.drafter_capacity_share
    if share > mem.DRAFTER_CAPACITY_SHARE_WARN:
        out.warn("DrafterKvCapacityHigh", S, "spec.drafter",
                 f"the drafter takes {share:.0%} of the KV capacity at {served} tokens of context: "
                 f"{mem.tokens(p.capacity_tokens)} tokens with it vs {mem.tokens(p.capacity_tokens_without_drafter)} "
                 f"without (drafter weights {mem.gib(p.drafter_weight_bytes)}, KV "
                 f"{p.drafter.bytes_for(served) / served / 1024:.0f} KiB/token vs target "
                 f"{p.target.bytes_for(served) / served / 1024:.0f} KiB/token); fewer requests fit at once. "
                 "A draft window (spec.speculation.draftWindow) or a smaller maxModelLen lowers it")
    return p
