"""The speculation guard (pure): where speculation stops paying, as the engine's own switch.

``spec.speculation.guard`` names a concurrency from which speculation loses (measured by a
SpeculativeBenchmark, ``fromBenchmark``, or given, ``maxConcurrency``). This module turns the
resolved limit into the engine's switch when the release's code has one, and says why not
otherwise. What each release can do is a row field of the engine table
(``EngineRelease.batch_size_guard`` / ``guard_source``), recorded from the release's code
(facts ``speculation_guard``).

vLLM (>= 0.24): ``num_speculative_tokens_per_batch_size`` in ``--speculative-config``, a list of
inclusive batch-size ranges ``[start, end, K]``; the scheduler asks the drafter for K tokens at
each batch size (``build_dynamic_sd_schedule_lookup``: the last range's K carries to
``max_num_seqs``) and K = 0 drafts nothing (the drafter still runs its context pass to keep its KV
cache in step). The V0 key ``disable_by_batch_size`` is no SpeculativeConfig field in any release
the table covers: vLLM refuses to start with it (extra fields are forbidden), so it is never
rendered. SGLang: no DFLASH switch (``--speculative-adaptive`` is EAGLE/EAGLE3 only).

The monitor half: :func:`past_crossover` compares the engine's live running-requests gauge with the
limit (``SpeculationProfitable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .. import engines as eng
from .. import names as N
from ..findings import Finding, Severity, Source

GUARD_PATH = "spec.speculation.guard"
# Condition types and reasons (docs/concepts/status-conditions.md).
GUARD_CONDITION = N.SPECULATION_GUARDED
PROFITABLE_CONDITION = N.SPECULATION_PROFITABLE
REASON_RENDERED = "GuardRendered"
REASON_UNSUPPORTED = "GuardUnsupported"
REASON_BENCHMARK_MISSING = "BenchmarkNotFound"
REASON_BENCHMARK_PENDING = "BenchmarkNotComplete"
REASON_NO_CROSSOVER = "NoCrossover"
REASON_PAST = "PastCrossover"
REASON_BELOW = "BelowCrossover"
REASON_NO_LOAD = "LoadUnknown"
REASON_TAU = "TauBelowBenchmark"
MAX_CONCURRENCY = 65536


@dataclass(frozen=True)
class GuardLimit:
    """A resolved guard: speculation should be off from ``max_concurrency`` running requests on (None: it never
    loses in what was measured). ``source`` names where the figure comes from, for messages."""

    max_concurrency: int | None
    source: str
    # The lowest tau at which the benchmark measured speculation paying (a band whose best variant beat the
    # baseline); None: not from a benchmark, or no such band. Live tau below it: no evidence speculation pays.
    min_paying_tau: float | None = None


@dataclass(frozen=True)
class GuardPlan:
    """What the renderer does with a resolved guard for one engine release."""

    limit: GuardLimit
    config: dict[str, Any]  # keys merged into the engine's speculative config ({} when nothing is rendered)
    condition: tuple[bool, str, str]  # (status, reason, message) of SpeculationGuarded
    finding: Finding | None = None  # GuardUnsupported (warning) when the engine has no switch


def vllm_schedule(max_concurrency: int, num_speculative_tokens: int) -> list[list[int]]:
    """The ``num_speculative_tokens_per_batch_size`` schedule that keeps K draft tokens below ``max_concurrency``
    running requests and none from it on (vllm v1/spec_decode/dynamic/utils.py validate_and_normalize_dynamic_sd_schedule:
    ranges start at 1, do not overlap, K >= 0; the last range carries to max_num_seqs)."""
    if max_concurrency < 1 or num_speculative_tokens < 1:
        raise ValueError("max_concurrency and num_speculative_tokens must be >= 1")
    if max_concurrency == 1:
        return [[1, 1, 0]]
    return [[1, max_concurrency - 1, num_speculative_tokens], [max_concurrency, max_concurrency, 0]]


def schedule_tokens(schedule: list[list[int]], batch_size: int, num_speculative_tokens: int) -> int:
    """Draft tokens a schedule gives a batch size, as vLLM's lookup computes it (the last K carries forward,
    capped at ``num_speculative_tokens``). For tests and docs; the engine's own function is the truth."""
    k = None
    for start, end, n in sorted(schedule):
        if start > batch_size:
            break
        k = n
        if batch_size <= end:
            break
    return min(num_speculative_tokens, k if k is not None else num_speculative_tokens)


def plan_guard(engine: str, version: str, limit: GuardLimit, num_speculative_tokens: int) -> GuardPlan:
    """The engine switch for a resolved limit on one engine release, or the reason there is none."""
    if limit.max_concurrency is None:
        return GuardPlan(limit, {}, (True, REASON_NO_CROSSOVER,
                                     f"{limit.source} found no concurrency where speculation loses; speculation "
                                     "stays on at every load"))
    row = eng.get_engine(engine).release_for(version)
    key = row.batch_size_guard if row is not None else None
    if key is None:
        why = row.guard_source if row is not None else f"{engine} {version} is not in the engine table"
        msg = (f"speculation should be off from {limit.max_concurrency} running requests ({limit.source}), but "
               f"{why}. Nothing is rendered; the SpeculationProfitable condition reports when live load is past it")
        return GuardPlan(limit, {}, (False, REASON_UNSUPPORTED, msg),
                         Finding(Severity.WARNING, REASON_UNSUPPORTED, Source.SPEC, GUARD_PATH, msg))
    if key == eng.VLLM_SCHEDULE_KEY:
        sched = vllm_schedule(limit.max_concurrency, num_speculative_tokens)
        return GuardPlan(limit, {key: sched}, (True, REASON_RENDERED,
                         f"speculation off from {limit.max_concurrency} running requests ({limit.source}): "
                         f"{key}={sched} in --speculative-config"))
    raise AssertionError(f"no renderer for guard switch {key!r}")  # a new row key needs a branch here


# The running-requests gauge is one sample per scrape, and requests come and go between scrapes: judged
# sample by sample, a load around the limit flips SpeculationProfitable (and posts an Event) on every tick
# (measured on the real engine: 15 of 25 scrapes under a steady 4-client load read 0). The monitor judges
# the peak of the last LOAD_HOLD_SCRAPES samples instead: past the limit from the first sample at or
# above it, back under it only after that many samples below (2 minutes at the default 30 s interval).
LOAD_HOLD_SCRAPES = 4


def peak_load(samples: Iterable[float | None]) -> float | None:
    """The highest running-requests sample of the recent scrapes (None: no sample had the gauge)."""
    vals = [s for s in samples if s is not None]
    return max(vals) if vals else None


def past_crossover(running: float | None, limit: GuardLimit | None, tau: float | None = None
                   ) -> tuple[bool | None, str, str] | None:
    """SpeculationProfitable (status, reason, message) from the live running requests of the most loaded engine pod
    (the batch is per engine), the live tau (None: no drafts in the window) and the guard; None without a guard to
    compare with. Load past the limit wins over tau. Messages are ``<live figures>; <the guard>``: the part after
    ``; `` changes only with the guard (``status.profitable_condition`` keeps a verdict's message while it holds)."""
    if limit is None or (limit.max_concurrency is None and limit.min_paying_tau is None):
        return None
    n = limit.max_concurrency
    where = f"speculation stops paying at {n} running requests per engine ({limit.source})" if n is not None \
        else f"no load where speculation stops paying ({limit.source})"
    if n is not None and running is not None and running >= n:
        return (False, REASON_PAST, f"{running:g} running requests >= {n}; {where}")
    if tau is not None and limit.min_paying_tau is not None and tau < limit.min_paying_tau:
        return (False, REASON_TAU, f"live tau {tau:.2f} is below {limit.min_paying_tau:.2f}; the lowest tau at which "
                f"{limit.source} measured speculation paying")
    if n is not None and running is None:
        return (None, REASON_NO_LOAD, f"no running-requests gauge from the engine yet; {where}")
    live = f"{running:g} running requests < {n}" if n is not None and running is not None else "below the crossover"
    return (True, REASON_BELOW, f"{live}; {where}")


def stable_part(message: str) -> str:
    """The part of a SpeculationProfitable message that changes only with the guard."""
    return message.split("; ", 1)[1] if "; " in message else message


def _min_paying_tau(status: dict) -> float | None:
    """The lowest tau of a band's best variant that beat the baseline (status.recommendation.bands joined with
    status.points); None when no band paid or no tau was measured. Values are bounded, never trusted."""
    reco = status.get("recommendation") if isinstance(status.get("recommendation"), dict) else {}
    bands = reco.get("bands") if isinstance(reco.get("bands"), list) else []
    points = status.get("points") if isinstance(status.get("points"), list) else []
    taus = {}
    for p in points[:4096]:
        if isinstance(p, dict) and isinstance(p.get("tau"), (int, float)) and not isinstance(p.get("tau"), bool) \
                and 1.0 <= p["tau"] <= 1024:
            taus[(p.get("variant"), p.get("context"), p.get("concurrency"))] = float(p["tau"])
    paid = [taus.get((b.get("best"), b.get("context"), b.get("concurrency"))) for b in bands[:4096]
            if isinstance(b, dict) and b.get("best") not in (None, "baseline")
            and isinstance(b.get("speedup"), (int, float)) and not isinstance(b.get("speedup"), bool)
            and b["speedup"] > 1.0]
    paid = [t for t in paid if t is not None]
    return min(paid) if paid else None


def limit_from_benchmark(name: str, body: Any, deployment: str | None = None
                         ) -> tuple[GuardLimit | None, tuple[bool | None, str, str] | None]:
    """(limit, None) from a Complete SpeculativeBenchmark's ``status.recommendation.guard.maxConcurrency``
    (Contract 4; null: speculation never lost in its matrix), else (None, the SpeculationGuarded condition saying
    why nothing is rendered). The object is read, never trusted: a value that is no integer in [1, 65536] is
    refused."""
    how = ("create it (docs/how-to/tune-speculation.md) or set spec.speculation.guard.maxConcurrency instead")
    if not isinstance(body, dict):
        return None, (False, REASON_BENCHMARK_MISSING,
                      f"SpeculativeBenchmark {name} does not exist in this namespace; nothing is rendered: {how}")
    status = body.get("status") if isinstance(body.get("status"), dict) else {}
    phase = status.get("phase") if isinstance(status.get("phase"), str) else "Pending"
    if phase != "Complete":
        return None, (False, REASON_BENCHMARK_PENDING,
                      f"SpeculativeBenchmark {name} is {phase[:40]}, not Complete; nothing is rendered until it "
                      "completes (the deployment is re-read every resync)")
    reco = status.get("recommendation") if isinstance(status.get("recommendation"), dict) else None
    guard = reco.get("guard") if reco is not None and isinstance(reco.get("guard"), dict) else None
    if guard is None:
        return None, (False, REASON_BENCHMARK_PENDING,
                      f"SpeculativeBenchmark {name} is Complete but has no status.recommendation.guard; nothing is "
                      "rendered")
    mc = guard.get("maxConcurrency")
    if mc is not None and (not isinstance(mc, int) or isinstance(mc, bool) or not 1 <= mc <= MAX_CONCURRENCY):
        return None, (False, REASON_BENCHMARK_PENDING,
                      f"SpeculativeBenchmark {name}: status.recommendation.guard.maxConcurrency is not an integer in "
                      f"[1, {MAX_CONCURRENCY}]; nothing is rendered")
    ref = ((body.get("spec") or {}).get("deploymentRef") or {}) if isinstance(body.get("spec"), dict) else {}
    measured = ref.get("name") if isinstance(ref, dict) and isinstance(ref.get("name"), str) else None
    source = f"SpeculativeBenchmark {name}"
    if measured and deployment and measured != deployment:
        source += f", measured on {measured[:63]}"
    return GuardLimit(mc, source, _min_paying_tau(status)), None
