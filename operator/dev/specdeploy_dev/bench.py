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

from specdeploy.core import names as N


def _median_ms(fn, repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * (len(samples) - 1))]


def _bench_core(repeat: int) -> None:
    from specdeploy.core.render import render
    from .demo import load_examples

    root = Path(__file__).resolve().parents[3] / "examples"
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
    ex = next(e for e in examples if e.cr.spec.drafter is not None)  # the first example with a drafter
    d = root / ex.name
    chk, _ = _median_ms(cmd([str(exe), "check", "--drafter", str(d / "drafter.config.json"),
                             "--target", str(d / "target.config.json"), "--engine", ex.cr.spec.engine.name,
                             "--gpu", ex.cr.spec.gpu.type, "--gpu-count", str(ex.cr.spec.gpu.count)]), runs)
    print(f"`specdeploy check` ({ex.name}) as a process: median {chk:.0f} ms")


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return cpu, peak


def _bench_operator(counts: list[int], resync: float) -> None:
    import urllib.request

    import yaml

    from .harness import Cluster, wait_for

    root = Path(__file__).resolve().parents[3] / "examples" / "qwen3.6-27b-b300-vllm"
    cr_doc = yaml.safe_load((root / "speculativedeployment.yaml").read_text())
    print(f"# specdeploy operator scale benchmark; {os.cpu_count()} CPUs; embedded API server; resync {resync:g}s")
    for n in counts:
        with Cluster() as c:
            c.apply_crds()
            c.kubectl("apply", "-k", str(root))  # the two config ConfigMaps (and one CR, deleted below)
            c.kubectl("delete", "specdeploy", cr_doc["metadata"]["name"])
            c.start_operator(resync_seconds=resync)
            pid = c.operator.pid
            cpu0, _ = _proc_stats(pid)
            base = f"{c.url}/apis/{N.GROUP_VERSION}/namespaces/default/{N.PLURAL}"
            t0 = time.perf_counter()
            for i in range(n):
                doc = json.loads(json.dumps(cr_doc))
                doc["metadata"] = {"name": f"bench-{i:05d}"}
                req = urllib.request.Request(base, data=json.dumps(doc).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
                urllib.request.urlopen(req, timeout=30).read()
            t_created = time.perf_counter() - t0

            def converged() -> bool:
                with urllib.request.urlopen(base, timeout=60) as r:
                    items = json.loads(r.read())["items"]
                done = 0
                for it in items:
                    st = it.get("status") or {}
                    conds = {x["type"]: x["status"] for x in st.get("conditions") or []}
                    if st.get("observedGeneration") == 1 and conds.get(N.PROGRESSING) == "True" and conds.get(N.DRAFTER_COMPATIBLE) == "True":
                        done += 1
                return done == n

            wait_for(converged, 1800, f"{n} SpeculativeDeployments to converge", interval=1.0)
            t_conv = time.perf_counter() - t0
            cpu1, _ = _proc_stats(pid)
            m = c.operator_metrics() or {}
            reconciles = sum(v for k, v in m.items() if k.startswith(N.OP_RECONCILES))
            writes = c.api_writes()
            events = sum(v for k, v in m.items() if k.startswith(N.OP_API_WRITES) and 'kind="Event"' in k)
            # idle: wait for two full resyncs (every key reconciled twice more), count writes
            target = reconciles + 2 * n

            def resynced() -> bool:
                mm = c.operator_metrics() or {}
                return sum(v for k, v in mm.items() if k.startswith(N.OP_RECONCILES)) >= target

            wait_for(resynced, 4 * resync + 600, "two idle resyncs", interval=1.0)
            idle_writes = c.api_writes() - writes
            cpu2, peak = _proc_stats(pid)
            m2 = c.operator_metrics() or {}
            # which writes fell after convergence (e.g. the last Events, posted after their status patch)
            late = {k.split("{", 1)[1].rstrip("}"): v - m.get(k, 0) for k, v in m2.items()
                    if k.startswith(N.OP_API_WRITES) and v - m.get(k, 0) > 0}
            errors = sum(v for k, v in m2.items() if k.startswith(N.OP_ERRORS))
            reconciles2 = sum(v for k, v in m2.items() if k.startswith(N.OP_RECONCILES))
            idle_cpu_per = (cpu2 - cpu1) / max(1.0, reconciles2 - reconciles)
            print(f"{n} CRs: created in {t_created:.1f}s, converged in {t_conv:.1f}s; operator CPU {cpu1 - cpu0:.1f}s "
                  f"for {reconciles:.0f} reconciles ({(cpu1 - cpu0) / max(1.0, reconciles) * 1000:.1f} ms each); "
                  f"API writes at creation {writes / n:.2f} per CR ({(writes - events) / n:.2f} without Events); "
                  f"idle resync: {idle_writes:.0f} writes over {reconciles2 - reconciles:.0f} reconciles, "
                  f"{idle_cpu_per * 1000:.1f} ms CPU each; operator peak RSS {peak / 2**20:.0f} MiB"
                  + (f"; writes after convergence: {late}" if late else "")
                  + (f"; reconcile errors: {errors:.0f}" if errors else ""))


def compare(rev: str, runs: int, argv: list[str]) -> int:
    """``specdeploy dev bench ... --compare REV``: this tree and REV side by side (``argv``: the bench's own
    arguments, without --compare)."""
    from . import compare as cmp

    return cmp.side_by_side(f"specdeploy dev bench {' '.join(argv)}", rev, runs,
                            lambda tree: [sys.executable, "-c", "import sys; from specdeploy.cli import main; "
                                          "sys.exit(main())", "dev", "bench", *argv],
                            cmp.parse_operator)


def run(what: str, repeat: int, counts: list[int] | None = None, resync: float = 30.0) -> int:
    if what == "core":
        _bench_core(repeat)
    elif what == "operator":
        _bench_operator(counts or [200, 1000], resync)
    return 0
