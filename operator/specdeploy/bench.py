"""Benchmarks that print figures (never timed assertions). Latest figures: docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _median_ms(fn, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * (len(samples) - 1))]


def _bench_core(repeat: int) -> None:
    from .core.render import render
    from .demo import load_examples

    root = Path(__file__).resolve().parents[2] / "examples"
    examples = load_examples(root)
    print(f"# specdeploy core benchmark; python {platform.python_version()}, {os.cpu_count()} CPUs, repeat {repeat}")
    for ex in examples:
        render(ex.cr, ex.target, ex.drafter)  # warm-up
        med, p99 = _median_ms(lambda: render(ex.cr, ex.target, ex.drafter), repeat)
        print(f"check+render {ex.name}: median {med:.2f} ms, p99 {p99:.2f} ms")

    exe = Path(sys.executable).parent / "specdeploy"
    runs = max(5, min(20, repeat // 10))

    def cmd(args):
        return lambda: subprocess.run(args, capture_output=True, check=True)

    base, _ = _median_ms(cmd([sys.executable, "-c", "pass"]), runs)
    helpm, _ = _median_ms(cmd([str(exe), "--help"]), runs)
    print(f"`specdeploy --help` start-up: median {helpm:.0f} ms (bare `python -c pass`: {base:.0f} ms), {runs} runs")
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, specdeploy.cli as c; c.build_parser(); "
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic','yaml','kopf','kubernetes','torch','aiohttp'})))"
         .replace("json.dumps", "__import__('json').dumps")],
        capture_output=True, text=True, check=True)
    print(f"heavy modules imported on the --help path: {json.loads(probe.stdout)}")
    ex = examples[0]
    d = root / ex.name
    chk, _ = _median_ms(cmd([str(exe), "check", "--drafter", str(d / "drafter.config.json"),
                             "--target", str(d / "target.config.json"), "--engine", ex.cr.spec.engine.name,
                             "--gpu", ex.cr.spec.gpu.type, "--gpu-count", str(ex.cr.spec.gpu.count)]), runs)
    print(f"`specdeploy check` ({ex.name}) as a process: median {chk:.0f} ms")


def run(what: str, repeat: int) -> int:
    if what == "core":
        _bench_core(repeat)
    return 0
