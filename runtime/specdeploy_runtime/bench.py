"""``bench-window``: draft-step time and KV bytes, compact vs full draft cache.

One draft step = KV injection of B newly accepted context tokens (fc fusion + every
layer's K/V) followed by the block forward through every layer, as the drafter runs it
after each verification. The caches start with S context tokens of random K/V (the values
do not change the cost); each timed step then appends B more. The full cache attends over
every context key with the layer's mask (exact, O(S)); the compact cache keeps the last r
tokens in a ring buffer (O(r)).

The floor is the step's bytes read (weights + the K/V it attends over) divided by a
measured memory bandwidth (a large tensor copy: bytes read + written per second).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class BenchOptions:
    contexts: tuple[int, ...] = (2048, 8192, 32768)
    window: int = 2048
    keep: int | None = None  # compact cache size; default = window (what SGLang keeps)
    block: int = 16
    layers: tuple[str, ...] = ("sliding_attention",) * 4 + ("full_attention",)
    device: str = "cpu"
    dtype: str = "float32"
    repeats: int = 20
    warmup: int = 3
    impl: str = "sdpa"
    hidden_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 0
    seed: int = 0
    bandwidth_mib: int = 256


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def measure_bandwidth(device: str, mib: int = 256, repeats: int = 7) -> float:
    """Copy bandwidth in bytes/s (read + write) of a ``mib`` MiB tensor copy, median."""
    import torch

    n = mib * 1024 * 1024 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - t)
    del src, dst
    return 2 * n * 4 / statistics.median(times[1:])


def step_flops(model, cache) -> float:
    """Multiply-add FLOPs of one draft step: KV injection of B tokens, the block's projections,
    and attention over the keys the step reads (QK and PV)."""
    g = model.geom
    b = g.block_size
    qd, kvd = g.num_heads * g.head_dim, g.num_kv_heads * g.head_dim
    h = g.hidden_size
    inject = 2 * b * (g.num_target_features * h * h + g.num_layers * 2 * kvd * h)
    proj = 2 * b * g.num_layers * ((qd + 2 * kvd) * h + h * qd + 3 * h * g.intermediate_size)
    keys = cache.kept_tokens() + b
    attn = 4 * g.num_layers * g.num_heads * b * keys * g.head_dim
    return float(inject + proj + attn)


def _dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    import torch

    from .draftcache import CompactCache, DFlashDrafter, DrafterGeometry, FullCache

    if opts.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device is available to torch")
    dt = _dtype(opts.dtype)
    dev = opts.device
    geom = DrafterGeometry(hidden_size=opts.hidden_size, num_heads=opts.num_heads, num_kv_heads=opts.num_kv_heads,
                           head_dim=opts.head_dim, layer_types=tuple(opts.layers), sliding_window=opts.window,
                           block_size=opts.block, intermediate_size=opts.intermediate_size)
    keep = opts.keep or opts.window
    model = DFlashDrafter(geom, seed=opts.seed, device=dev, dtype=dt)
    bw = measure_bandwidth(dev, opts.bandwidth_mib)
    gen = torch.Generator().manual_seed(opts.seed + 1)
    steps = opts.warmup + opts.repeats
    feats = torch.randn((steps, opts.block, geom.num_target_features * geom.hidden_size), generator=gen).to(dev, dt)
    blocks = torch.randn((steps, opts.block, geom.hidden_size), generator=gen).to(dev, dt)
    params = model.param_bytes()
    rows = []
    for s in opts.contexts:
        row: dict[str, Any] = {"context": s}
        for kind in ("full", "compact"):
            if kind == "full":
                cache = FullCache(geom, s + (steps + 1) * opts.block, device=dev, dtype=dt)
            else:
                cache = CompactCache(geom, keep, device=dev, dtype=dt)
            cache.fill_random(s, torch.Generator().manual_seed(opts.seed + 2))
            times = []
            read = []
            for i in range(steps):
                pos = torch.arange(cache.length, cache.length + opts.block, device=dev)
                _sync(dev)
                t = time.perf_counter()
                model.inject(cache, feats[i], pos)
                model.draft_step(blocks[i], cache, impl=opts.impl)
                _sync(dev)
                if i >= opts.warmup:
                    times.append(time.perf_counter() - t)
                    read.append(cache.read_bytes_per_step() + params)
            flops = step_flops(model, cache)
            med = statistics.median(times)
            read_b = statistics.median(read)
            row[kind] = {
                "step_ms": med * 1e3,
                "min_ms": min(times) * 1e3,
                "max_ms": max(times) * 1e3,
                "kv_bytes": cache.kv_bytes(),
                "read_bytes_per_step": read_b,
                "floor_ms": read_b / bw * 1e3,
                "x_floor": med / (read_b / bw),
                "kept_tokens": cache.kept_tokens(),
                "gflop_per_step": flops / 1e9,
                "gflop_per_s": flops / med / 1e9,
            }
            del cache
        row["speedup"] = row["full"]["step_ms"] / row["compact"]["step_ms"]
        rows.append(row)
    first, last = rows[0], rows[-1]
    return {
        "device": str(dev),
        "dtype": opts.dtype,
        "threads": torch.get_num_threads(),
        "impl": opts.impl,
        "window": opts.window,
        "keep": keep,
        "block": opts.block,
        "layers": list(opts.layers),
        "geometry": {"hidden_size": geom.hidden_size, "num_heads": geom.num_heads, "num_kv_heads": geom.num_kv_heads,
                     "head_dim": geom.head_dim, "intermediate_size": geom.intermediate_size,
                     "kv_bytes_per_token": geom.kv_bytes_per_token(dt), "weight_bytes": params},
        "repeats": opts.repeats,
        "bandwidth_bytes_per_s": bw,
        "rows": rows,
        "summary": {
            "largest_context": last["context"],
            "speedup_at_largest": last["speedup"],
            "compact_growth": last["compact"]["step_ms"] / first["compact"]["step_ms"],
            "smallest_context": first["context"],
            "aim_speedup_8x": last["speedup"] >= 8.0,
            "aim_flat_1_3x": last["compact"]["step_ms"] / first["compact"]["step_ms"] <= 1.3,
        },
    }


def format_bench(r: dict[str, Any]) -> str:
    g = r["geometry"]
    kinds = "".join("S" if t == "sliding_attention" else "F" for t in r["layers"])
    mib = 1024 * 1024
    out = [
        f"bench-window: window {r['window']}, compact cache r={r['keep']}, block {r['block']}, layers {kinds}, "
        f"hidden {g['hidden_size']}, {g['num_heads']}/{g['num_kv_heads']} heads x {g['head_dim']}; {r['device']} {r['dtype']}, "
        f"{r['threads']} threads, attention {r['impl']}; median of {r['repeats']} draft steps",
        f"memory bandwidth (tensor copy, read+write): {r['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s; "
        f"weights {g['weight_bytes'] / mib:.1f} MiB; KV {g['kv_bytes_per_token']} B/token",
        f"{'context':>8} {'cache':>8} {'step ms':>9} {'min-max ms':>13} {'KV MiB':>8} {'read MiB':>9} {'floor ms':>9} {'x floor':>8} "
        f"{'GFLOP':>6} {'GFLOP/s':>8}",
    ]
    for row in r["rows"]:
        for kind in ("full", "compact"):
            x = row[kind]
            out.append(f"{row['context']:>8} {kind:>8} {x['step_ms']:>9.2f} {x['min_ms']:>6.2f}-{x['max_ms']:<6.2f} "
                       f"{x['kv_bytes'] / mib:>8.1f} {x['read_bytes_per_step'] / mib:>9.1f} {x['floor_ms']:>9.2f} "
                       f"{x['x_floor']:>8.1f} {x['gflop_per_step']:>6.2f} {x['gflop_per_s']:>8.1f}")
        out.append(f"{'':>8} {'speedup':>8} {row['speedup']:>8.1f}x")
    s = r["summary"]
    out.append(f"at {s['largest_context']}: compact {s['speedup_at_largest']:.1f}x faster than full (aim >= 8x: "
               f"{'met' if s['aim_speedup_8x'] else 'NOT met'}); compact step at {s['largest_context']} is "
               f"{s['compact_growth']:.2f}x its time at {s['smallest_context']} (aim <= 1.3x: "
               f"{'met' if s['aim_flat_1_3x'] else 'NOT met'})")
    return "\n".join(out)
