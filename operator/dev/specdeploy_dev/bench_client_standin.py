"""A stand-in benchmark client for tests of the operator's SpeculativeBenchmark loop.

``python -m specdeploy_dev.bench_client_standin --plan PLAN`` does what the client Job's program
does (Contract 2/3 in docs/concepts/benchmarks.md), simply: per point, scrape ``metricsUrl``, send
``numPrompts`` greedy completions (``concurrency`` at a time) of a prompt of ``context`` words,
scrape again; the acceptance is the counters' increase (``core.acceptance``, the one parser), the
output digests are those of the texts (``core.bench.result``); the result document is printed as
the last line (``SPECDEPLOY_BENCH_RESULT {json}``). Latencies are whole-request times (no streaming).
The real program is ``specdeploy-runtime bench-client``; this one lets the operator's loop be
tested without it and without a tokenizer. Dev/test infrastructure only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from specdeploy.core.acceptance import acceptance_from_scrapes
from specdeploy.core.bench.result import format_result_line, text_digest


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


def _complete(base: str, model: str, prompt: str, max_tokens: int) -> tuple[str, float]:
    req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps({
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}).encode(),
        headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        doc = json.loads(r.read())
    return doc["choices"][0]["text"], time.perf_counter() - t0


def _pct(xs: list[float]) -> dict[str, float]:
    xs = sorted(x * 1000 for x in xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "mean": statistics.fmean(xs)}


def run(plan: dict) -> dict:
    points = []
    for pt in plan["points"]:
        prompts = [" ".join(f"w{(i * 7 + j) % 97}" for j in range(pt["context"])) for i in range(pt["numPrompts"])]
        before = _get(plan["metricsUrl"])
        t0 = time.perf_counter()
        with ThreadPoolExecutor(pt["concurrency"]) as pool:
            outs = list(pool.map(lambda p: _complete(plan["baseUrl"], plan["model"], p, pt["maxOutputTokens"]), prompts))
        duration = time.perf_counter() - t0
        after = _get(plan["metricsUrl"])
        acc = acceptance_from_scrapes(plan["engine"], before, after, duration)
        lat = _pct([s for _, s in outs])
        points.append({
            "id": pt["id"], "context": pt["context"], "concurrency": pt["concurrency"], "numPrompts": pt["numPrompts"],
            "maxOutputTokens": pt["maxOutputTokens"], "completed": len(outs), "failed": 0,
            "outputTokens": len(outs) * pt["maxOutputTokens"],
            "outputTokensPerSecond": len(outs) * pt["maxOutputTokens"] / duration,
            "requestsPerSecond": len(outs) / duration, "durationS": duration,
            "ttftMs": lat, "itlMs": {k: v / pt["maxOutputTokens"] for k, v in lat.items()},
            "acceptance": None if acc is None or acc.length is None else {
                "length": acc.length, "perPosition": list(acc.per_position), "drafts": acc.drafts,
                "draftTokens": acc.draft_tokens, "acceptedTokens": acc.accepted},
            "outputDigests": [text_digest(t) for t, _ in outs]})
    return {"variant": plan["variant"], "client": "specdeploy-standin", "clientVersion": "0", "points": points}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench-client (stand-in)")
    p.add_argument("command", nargs="?", default="bench-client")
    p.add_argument("--plan", required=True)
    a = p.parse_args(argv)
    with open(a.plan) as f:
        plan = json.load(f)
    print(f"stand-in client: {len(plan['points'])} points against {plan['baseUrl']}", flush=True)
    print(format_result_line(run(plan)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
