"""Canary rollouts: revision, analysis and decision (pure: standard library + core only).

Under ``spec.rollout.strategy: Canary`` a change of the engine pod template is not rolled to every
replica at once. The flow, and where each piece lives:

1. **Revision** (``revision``): a digest of the engine pod template's config hash and the resolved
   commits of target and drafter. Scale never reaches it; a drafter retrained under the same repository
   name does (its commit changes). The reconciler compares the desired revision with the one the stable
   Deployment serves.
2. **Canary** (controller): a second Deployment ``NAME-canary`` with ``canary.replicas`` pods of the new
   revision behind the same Service; the stable Deployment keeps its live template (same pod uids).
3. **Measure** (``Accumulator``, fed by the acceptance monitor): per pod uid, each scrape of the engine's
   /metrics against the pod's previous one gives the increase of the engines' own counters (drafts,
   accepted tokens per position, output tokens, requests, failed requests) and the running-requests
   gauge integrated over time; summed per track into ``Totals``. A pod's first scrape only primes it; a
   counter that goes down (the engine restarted) counts from zero. Metric names and the exposition
   parser are core/acceptance.py's.
4. **Judge** (``judge``): one pure function from the two tracks' Totals, the canary pods' ``Health``
   and the operator's greedy ``Probe`` to a ``Verdict``, checked in this order:
   CanaryCrashing -> DeadlineExceeded (not yet decidable at the deadline) -> Wait (window not over,
   too few drafts on a track, no scrape of a track, probe pending) -> OutputsDiffer ->
   AcceptanceBelowStable -> ThroughputBelowStable -> ErrorRateAboveLimit -> Promote.
   Every verdict carries the analysis table (status.rollout.analysis) and a message with the numbers.
5. **Decide** (``step``): the state machine from what the reconciler observes (revisions, the canary
   Deployment, the verdict, a user's ``specdeploy.io/rollout`` request) to what it applies: which
   template the stable Deployment gets (live or desired), whether the canary exists, the phase
   (Stable | Progressing | Analyzing | Promoting | RolledBack), the ``Rollout`` condition, the decision
   to record and the refused revision (not retried until the spec changes again or ``retry``).

Nothing here does I/O; the controller owns the Kubernetes objects, the monitor the scrapes and the probe.
The contract shared by those pieces: ROLLOUT.md of issue 26 (docs/how-to/roll-out-safely.md for users).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, Mapping

from .. import acceptance as acc
from ..acceptance import Sample
from ..names import REVISION_ANNOTATION, TRACK_CANARY, TRACK_LABEL

# ----------------------------------------------------------------- durations

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go-style duration ("30s", "10m", "1h30m", "1.5h", "500ms") in seconds.

    Like Go's time.ParseDuration, except that a sign is refused (a rollout's durations are
    never negative) and a bare number is refused unless it is "0". Raises ValueError with a
    message that says what is accepted."""
    if not isinstance(text, str) or isinstance(text, bool):
        raise ValueError(f"a duration is a string like \"30s\", \"10m\" or \"1h30m\", not {text!r}")
    t = text.strip()
    if t == "0":
        return 0.0
    if not t:
        raise ValueError("a duration is a string like \"30s\", \"10m\" or \"1h30m\", not an empty string")
    total = 0.0
    i = 0
    while i < len(t):
        m = _PART.match(t, i)
        if m is None:
            raise ValueError(f"invalid duration {text!r}: use numbers with a unit (ns, us, ms, s, m, h) "
                             "like \"30s\", \"10m\" or \"1h30m\"")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        i = m.end()
    if not math.isfinite(total):
        raise ValueError(f"invalid duration {text!r}: too large")
    return total


def format_duration(seconds: float) -> str:
    """Seconds as Go prints a duration, to the second: 120 -> "2m0s", 600 -> "10m0s", 5400 -> "1h30m0s"."""
    s = int(max(0.0, seconds) + 1e-9) if math.isfinite(seconds) else 0
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


# ----------------------------------------------------------------- revision


def template_digest(template: Mapping[str, Any]) -> str:
    """16 hex digits of an engine pod template (canonical JSON) without what the rollout itself writes on it
    (REVISION_ANNOTATION, TRACK_LABEL): the ``config_hash`` to give ``revision`` so that every change of the
    template starts a rollout. The render's own config hash (CONFIG_HASH_ANNOTATION) covers the engine's
    command only: the image, the pod's cpu/memory/shm, tolerations and node selector are not in it
    (tests/unit/test_rollout.py, the trigger table)."""
    doc = json.loads(json.dumps(template, default=str))
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if isinstance(meta, dict):
        for key, drop in (("annotations", REVISION_ANNOTATION), ("labels", TRACK_LABEL)):
            if isinstance(meta.get(key), dict):
                meta[key].pop(drop, None)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def revision(config_hash: str, target_commit: str | None, drafter_commit: str | None) -> str:
    """The rollout revision: sha256 of ``config_hash|target_commit|drafter_commit``, first 16 hex digits.

    ``config_hash`` stands for the engine pod template: give ``template_digest(template)`` (the engine's
    command, image, resources, pod settings; scale is not part of a template, so it never starts a rollout).
    The resolved commits make a drafter retrained under the same repository name a new revision even when
    the spec's text did not change."""
    text = f"{config_hash}|{target_commit or ''}|{drafter_commit or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------- parameters

DEFAULT_WINDOW = "10m"  # spec.rollout.analysis.window and spec.rollout.deadline as the API writes them
DEFAULT_DEADLINE = "30m"


@dataclass
class Params:
    """spec.rollout.analysis + deadline, in seconds and plain numbers (``params_from_spec``)."""

    window_s: float = 600
    min_drafts: int = 200
    min_acceptance_ratio: float = 0.9
    min_throughput_ratio: float = 0.9  # 0: the throughput check is off
    max_error_rate: float = 0.01
    deadline_s: float = 1800
    probe: bool = True
    probe_max_tokens: int = 32  # spec.rollout.analysis.probe.maxTokens (the monitor's probe client reads it)


def _get(doc: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(part)
    return doc


def _num(v: Any, default: float, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        return default
    return float(v)


def _dur(v: Any, default: float) -> float:
    try:
        return parse_duration(v) if v is not None else default
    except ValueError:
        return default


def params_from_spec(rollout: Any) -> Params:
    """Params from spec.rollout: a dict with the spec's camelCase keys, or the typed model (dumped by alias).
    A missing or out-of-range value (the CRD schema and the webhook refuse those) falls back to its default."""
    if rollout is not None and hasattr(rollout, "model_dump"):
        rollout = rollout.model_dump(by_alias=True, exclude_none=True)
    d = Params()
    a = _get(rollout, "analysis")
    probe = _get(a, "probe", "enabled")
    return Params(
        window_s=_dur(_get(a, "window"), d.window_s),
        min_drafts=int(_num(_get(a, "minDrafts"), d.min_drafts, 0, 1e15)),
        min_acceptance_ratio=_num(_get(a, "minAcceptanceRatio"), d.min_acceptance_ratio, 0, 1),
        min_throughput_ratio=_num(_get(a, "minThroughputRatio"), d.min_throughput_ratio, 0, 1),
        max_error_rate=_num(_get(a, "maxErrorRate"), d.max_error_rate, 0, 1),
        deadline_s=_dur(_get(rollout, "deadline"), d.deadline_s),
        probe=probe if isinstance(probe, bool) else d.probe,
        probe_max_tokens=int(_num(_get(a, "probe", "maxTokens"), d.probe_max_tokens, 1, 256)),
    )


# ----------------------------------------------------------------- totals


@dataclass
class Totals:
    """One track's counters summed over its pods since the analysis started (deltas, reset-safe).

    ``drafts`` are draft steps: vLLM's ``spec_decode_num_drafts``; SGLang's verification passes
    (``spec_verify_calls``), with ``accepted_tokens`` = generated tokens - passes, so that ``tau`` is the
    same engine-normalised figure as core/acceptance's (1 + accepted / drafts; SGLang: tokens per pass)."""

    pods: int = 0
    drafts: float = 0
    draft_tokens: float = 0
    accepted_tokens: float = 0
    per_position_accepted: list[float] = field(default_factory=list)
    output_tokens: float = 0
    running_request_seconds: float = 0  # integral of the running-requests gauge over time
    requests: float = 0
    failed_requests: float = 0

    def tau(self) -> float | None:
        """Acceptance length, the bonus token included; None without drafts."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    def per_position(self) -> list[float]:
        """Per-position acceptance rates (vLLM): accepted at position i / drafts."""
        return [a / self.drafts for a in self.per_position_accepted] if self.drafts > 0 else []

    def tokens_per_second_per_request(self) -> float | None:
        """Output tokens per second of one running request: output tokens / integral of the running-requests
        gauge (the decode speed a request sees, whatever the traffic); None when nothing ran."""
        if self.running_request_seconds <= 0:
            return None
        return self.output_tokens / self.running_request_seconds

    def error_rate(self) -> float | None:
        """Failed requests / requests (at most 1); None without requests."""
        total = max(self.requests, self.failed_requests)
        return self.failed_requests / total if total > 0 else None

    def speculates(self) -> bool | None:
        """True with drafts; False when it produced output tokens but drafted nothing (speculation off, or
        an engine that silently does not speculate); None when nothing is known yet."""
        if self.drafts > 0:
            return True
        return False if self.output_tokens > 0 else None

    def add(self, other: "Totals") -> "Totals":
        n = max(len(self.per_position_accepted), len(other.per_position_accepted))
        pos = [(self.per_position_accepted[i] if i < len(self.per_position_accepted) else 0.0)
               + (other.per_position_accepted[i] if i < len(other.per_position_accepted) else 0.0) for i in range(n)]
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name)
                  for f in fields(self) if f.name != "per_position_accepted"}
        return Totals(per_position_accepted=pos, **summed)


def _inc(prev: list[Sample] | None, cur: list[Sample], name: str) -> dict[tuple, float]:
    """Per-series increase of one counter from ``prev`` to ``cur`` (core/acceptance's Prometheus semantics:
    a lower value is a reset and counts from zero; a series new in ``cur`` counts from zero)."""
    c = acc.series_by_labels(cur, name)
    inc, _resets = acc.counter_increase(acc.series_by_labels(prev, name) if prev is not None else {}, c)
    return inc


def _deltas(engine: str, prev: list[Sample] | None, cur: list[Sample]) -> Totals:
    """Counter increases of one pod between two scrapes (``prev`` None: the engine restarted in between,
    every counter counts from zero)."""
    t = Totals()
    if engine == "vllm":
        t.drafts = sum(_inc(prev, cur, acc.VLLM_DRAFTS).values())
        t.draft_tokens = sum(_inc(prev, cur, acc.VLLM_DRAFT_TOKENS).values())
        t.accepted_tokens = sum(_inc(prev, cur, acc.VLLM_ACCEPTED).values())
        per_pos: dict[int, float] = {}
        for labels, v in _inc(prev, cur, acc.VLLM_ACCEPTED_PER_POS).items():
            pos = dict(labels).get(acc.VLLM_POSITION_LABEL, "")
            if pos.isdigit() and len(pos) < 4:
                per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + v
        t.per_position_accepted = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
        t.output_tokens = sum(_inc(prev, cur, acc.VLLM_GENERATION_TOKENS).values())
        finished = _inc(prev, cur, acc.VLLM_REQUEST_SUCCESS)
        errors = sum(v for labels, v in finished.items()
                     if dict(labels).get(acc.VLLM_FINISHED_REASON_LABEL) == acc.VLLM_FINISHED_ERROR)
        rejected = sum(_inc(prev, cur, acc.VLLM_ADMISSION_REJECTIONS).values())
        # Failed: finished with an internal error (a 500) or refused at admission; a client that went away
        # ("abort") is the client's choice, not the revision's.
        t.requests = sum(finished.values()) + rejected
        t.failed_requests = errors + rejected
    elif engine == "sglang":
        calls = sum(_inc(prev, cur, acc.SGLANG_VERIFY_CALLS).values())
        generated = sum(_inc(prev, cur, acc.SGLANG_GENERATION_TOKENS).values())
        t.drafts = calls
        t.accepted_tokens = max(generated - calls, 0.0) if calls > 0 else 0.0
        t.output_tokens = generated
        # SGLang counts aborts, not errors: its aborted requests (client gone or failed) are the failures.
        t.requests = sum(_inc(prev, cur, acc.SGLANG_REQUESTS).values())
        t.failed_requests = sum(_inc(prev, cur, acc.SGLANG_ABORTED_REQUESTS).values())
    return t


_START_TIME = "process_start_time_seconds"


def _start_time(samples: list[Sample]) -> float | None:
    values = [s.value for s in samples if s.name == _START_TIME and math.isfinite(s.value)]
    return max(values) if values else None


@dataclass
class _Pod:
    track: str
    engine: str
    samples: list[Sample]
    at: float
    running: float | None
    totals: Totals = field(default_factory=Totals)


class Accumulator:
    """Per pod uid: previous scrape -> deltas of the engines' counters, summed per track.

    A pod's first scrape only primes it (what it counted before belongs to no window). A counter lower than
    in the previous scrape, or a changed ``process_start_time_seconds``, means the engine restarted: the
    counters count from zero. The running-requests gauge (core/acceptance.running_requests) is integrated
    with the trapezoid rule between two scrapes. A failed scrape (``text`` not a string) is skipped: the
    next good one is compared with the last good one. A pod that goes away (``forget_pod``) keeps what it
    measured in its track's totals but no longer counts as a pod."""

    def __init__(self) -> None:
        self._pods: dict[str, _Pod] = {}
        self._gone: dict[str, Totals] = {}  # track -> totals of forgotten pods

    def observe(self, pod_uid: str, track: str, engine: str, text: str, now: float) -> None:
        if not isinstance(text, str) or not isinstance(now, (int, float)) or not math.isfinite(now):
            return
        samples = acc.parse_exposition(text)
        running = acc.running_requests(engine, text) if engine in acc.ENGINES else None
        pod = self._pods.get(pod_uid)
        if pod is None:
            self._pods[pod_uid] = _Pod(track, engine, samples, now, running)
            return
        restarted = None not in (_start_time(pod.samples), _start_time(samples)) \
            and _start_time(pod.samples) != _start_time(samples)
        if pod.engine == engine:
            pod.totals = pod.totals.add(_deltas(engine, None if restarted else pod.samples, samples))
        dt = now - pod.at
        if running is not None and pod.running is not None and dt > 0 and not restarted:
            pod.totals.running_request_seconds += (running + pod.running) / 2 * dt
        pod.track, pod.engine, pod.samples, pod.at, pod.running = track, engine, samples, now, running

    def totals(self, track: str) -> Totals:
        out = Totals().add(self._gone.get(track, Totals()))
        live = [p for p in self._pods.values() if p.track == track]
        for p in live:
            out = out.add(p.totals)
        out.pods = len(live)
        return out

    def forget_pod(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        if pod is not None:
            t = pod.totals.add(Totals())
            t.pods = 0
            self._gone[pod.track] = self._gone.get(pod.track, Totals()).add(t)

    def pods(self) -> set[str]:
        """The uids observed and not forgotten (the monitor forgets those no longer in its pod list)."""
        return set(self._pods)


# ----------------------------------------------------------------- judgement

# Verdict decisions.
WAIT, PROMOTE, ROLLBACK = "Wait", "Promote", "Rollback"
# Verdict and Rollout-condition reasons.
ANALYZING = "Analyzing"
PROGRESSING = "Progressing"  # a Wait while the canary's pods are not all ready (phase Progressing)
PROMOTED = "Promoted"
STABLE = "Stable"
ACCEPTANCE_BELOW_STABLE = "AcceptanceBelowStable"
THROUGHPUT_BELOW_STABLE = "ThroughputBelowStable"
OUTPUTS_DIFFER = "OutputsDiffer"
CANARY_CRASHING = "CanaryCrashing"
DEADLINE_EXCEEDED = "DeadlineExceeded"
ERROR_RATE_ABOVE_LIMIT = "ErrorRateAboveLimit"
ABORTED = "Aborted"
ROLLBACK_REASONS = (ACCEPTANCE_BELOW_STABLE, THROUGHPUT_BELOW_STABLE, OUTPUTS_DIFFER, CANARY_CRASHING,
                    DEADLINE_EXCEEDED, ERROR_RATE_ABOVE_LIMIT, ABORTED)
TRACK_STABLE = "stable"
_EPS = 1e-9  # a ratio exactly at its limit passes, whatever the float rounding


@dataclass
class Health:
    """The canary pods as the pod cache shows them."""

    pods: int
    ready: int
    restarts: int
    crash_looping: bool
    failed_to_start: str | None = None  # e.g. "ImagePullBackOff: ..." / "CreateContainerConfigError: ..."


@dataclass
class Probe:
    """The operator's greedy probe: prompts sent to one pod of each track at temperature 0; ``identical``
    completions were the same on both, ``errors`` got no answer from one of them."""

    prompts: int
    identical: int
    errors: int
    message: str = ""

    @property
    def differ(self) -> int:
        return max(self.prompts - self.identical - self.errors, 0)


@dataclass
class Verdict:
    decision: str  # "Wait" | "Promote" | "Rollback"
    reason: str  # Analyzing | Progressing | Promoted | AcceptanceBelowStable | ... (the Rollout condition's reasons)
    message: str  # with the numbers
    table: list[dict]  # status.rollout.analysis rows


def _f(x: float) -> str:
    return f"{x:.2f}"


def _cmp(value: float, op: str, limit: float) -> str:
    """'0.39 < 0.90', with more digits where two decimals would print the same number on both sides."""
    for digits in (2, 3, 4):
        a, b = f"{value:.{digits}f}", f"{limit:.{digits}f}"
        if a != b:
            break
    return f"{a} {op} {b}"


def _row(track: str, t: Totals, revision: str | None) -> dict:
    """One status.rollout.analysis row: camelCase keys, figures rounded to 2 decimals (the error rate to 4:
    its limit is 0.01), counts as integers; an unknown figure is left out (the CRD has no nulls)."""
    row: dict[str, Any] = {"track": track}
    if revision:
        row["revision"] = revision
    row.update(pods=int(t.pods), drafts=int(round(t.drafts)))
    tau, tps, err = t.tau(), t.tokens_per_second_per_request(), t.error_rate()
    if tau is not None:
        row["tau"] = round(tau, 2)
    if tps is not None:
        row["tokensPerSecondPerRequest"] = round(tps, 2)
    row.update(requests=int(round(t.requests)), failedRequests=int(round(t.failed_requests)))
    if err is not None:
        row["errorRate"] = round(err, 4)
    return row


def analysis_table(stable: Totals, canary: Totals, stable_revision: str | None = None,
                   canary_revision: str | None = None) -> list[dict]:
    return [_row(TRACK_STABLE, stable, stable_revision), _row(TRACK_CANARY, canary, canary_revision)]


def _drafts_short(p: Params, t: Totals, elapsed_s: float) -> bool:
    """Whether a track still lacks drafts: fewer than minDrafts, unless, once the window is over, it has
    produced tokens without drafting at all (it does not speculate: waiting would not help)."""
    if t.drafts >= p.min_drafts:
        return False
    return not (elapsed_s >= p.window_s and t.speculates() is False)


def _below_floor(what: str, ratio: float, floor: float, reason: str, table: list, notes: list[str]) -> Verdict | None:
    """A canary-to-stable ratio against its floor: the rollback verdict when below it, else a note."""
    if ratio < floor - _EPS:
        return Verdict(ROLLBACK, reason, f"{what}: {_cmp(ratio, '<', floor)}", table)
    notes.append(f"{what}: {_cmp(ratio, '>=', floor)}")
    return None


def _progress(p: Params, elapsed_s: float) -> str:
    """Where the canary stands in time: inside the analysis window, or past it and bounded by the deadline
    (never "7m13s of 30s": a canary still booting past the window waits for the deadline, not the window)."""
    e, w, d = format_duration(elapsed_s), format_duration(p.window_s), format_duration(p.deadline_s)
    if elapsed_s < p.window_s:
        return f"{e} of the {w} analysis window"
    return f"{e} since the canary started (analysis window {w} over; deadline {d})"


def judge(p: Params, stable: Totals, canary: Totals, health: Health, probe: Probe | None,
          elapsed_s: float, compare_outputs: bool = True, *, stable_revision: str | None = None,
          canary_revision: str | None = None) -> Verdict:
    """The verdict on a canary after ``elapsed_s`` seconds (see the module docstring for the order).

    ``compare_outputs``: whether greedy outputs must be identical between the revisions (the caller says
    False when the target model's revision or the engine changed: outputs may then differ legitimately).
    The revisions only label the table's rows."""
    table = analysis_table(stable, canary, stable_revision, canary_revision)
    progress = _progress(p, elapsed_s)

    # 1. The canary cannot serve.
    if health.failed_to_start:
        return Verdict(ROLLBACK, CANARY_CRASHING, f"canary failed to start: {health.failed_to_start}", table)
    if health.crash_looping or (health.restarts > 0 and health.ready < health.pods):
        state = "crash-looping, " if health.crash_looping else ""
        return Verdict(ROLLBACK, CANARY_CRASHING,
                       f"canary {state}{health.restarts} restart(s), {health.ready}/{health.pods} pods ready", table)

    # 2./3. Not decidable yet: say why; at the deadline that is the verdict.
    waiting: list[str] = []
    starting = health.pods == 0 or health.ready < health.pods
    if starting:
        waiting.append(f"canary pods starting: {health.ready}/{health.pods} ready")
    else:
        if canary.pods == 0:
            waiting.append("no scrape of the canary pods yet")
        if stable.pods == 0:
            waiting.append("no scrape of the stable pods")
        if _drafts_short(p, canary, elapsed_s):
            waiting.append(f"{int(canary.drafts)}/{p.min_drafts} drafts on the canary")
        if _drafts_short(p, stable, elapsed_s):
            waiting.append(f"{int(stable.drafts)}/{p.min_drafts} drafts on the stable")
        if p.probe and compare_outputs and probe is None:
            waiting.append("probe not run yet")
    if waiting or elapsed_s < p.window_s:
        if not waiting:  # only the window is still open: show the canary's progress
            waiting.append(f"{int(canary.drafts)}/{p.min_drafts} drafts on the canary")
        if elapsed_s >= p.deadline_s:
            return Verdict(ROLLBACK, DEADLINE_EXCEEDED,
                           f"deadline {format_duration(p.deadline_s)} passed undecided: {', '.join(waiting)}, "
                           f"{progress}", table)
        return Verdict(WAIT, PROGRESSING if starting else ANALYZING, f"{', '.join(waiting)}, {progress}", table)

    notes: list[str] = []
    # 4. Greedy outputs must not change.
    if p.probe and compare_outputs and probe is not None:
        if probe.differ > 0:
            msg = (f"{probe.differ} of {probe.prompts} probe prompts gave different outputs on the canary "
                   f"at temperature 0")
            return Verdict(ROLLBACK, OUTPUTS_DIFFER, msg + (f": {probe.message}" if probe.message else ""), table)
        if probe.errors:
            notes.append(f"probe: {probe.errors} of {probe.prompts} prompts got no answer")
        else:
            notes.append(f"probe: {probe.identical}/{probe.prompts} outputs identical")
    elif p.probe and not compare_outputs:
        notes.append("outputs not compared (the target or the engine changed)")

    # 5. Acceptance length.
    s_spec, c_spec = stable.speculates(), canary.speculates()
    s_tau, c_tau = stable.tau(), canary.tau()
    if s_spec is False or s_tau is None:
        notes.append("the stable track does not speculate: tau not compared" if s_spec is False
                     else "no drafts on the stable track: tau not compared")
    else:
        if c_spec is False:
            c_tau = 1.0  # no speculation: one token per forward pass
        if c_tau is not None:
            what = f"canary tau {_f(c_tau)}{' (it does not speculate)' if c_spec is False else ''} vs stable {_f(s_tau)}"
            below = _below_floor(what, c_tau / s_tau, p.min_acceptance_ratio, ACCEPTANCE_BELOW_STABLE, table, notes)
            if below is not None:
                return below
        else:
            notes.append("no drafts on the canary: tau not compared")

    # 6. Decode speed per running request.
    s_tps, c_tps = stable.tokens_per_second_per_request(), canary.tokens_per_second_per_request()
    if p.min_throughput_ratio > 0:
        if s_tps and c_tps is not None:
            what = f"canary {_f(c_tps)} vs stable {_f(s_tps)} tokens/s per running request"
            below = _below_floor(what, c_tps / s_tps, p.min_throughput_ratio, THROUGHPUT_BELOW_STABLE, table, notes)
            if below is not None:
                return below
        else:
            notes.append("no running requests measured on a track: throughput not compared")

    # 7. Errors.
    err = canary.error_rate()
    if err is not None:
        what = f"canary error rate {_cmp(err, '>' if err > p.max_error_rate + _EPS else '<=', p.max_error_rate)}"
        counts = f"{int(canary.failed_requests)} of {int(max(canary.requests, canary.failed_requests))} requests failed"
        if err > p.max_error_rate + _EPS:
            return Verdict(ROLLBACK, ERROR_RATE_ABOVE_LIMIT, f"{what} ({counts})", table)
        notes.append(f"{what} ({counts})")
    else:
        notes.append("no finished requests on the canary: error rate unknown")

    return Verdict(PROMOTE, PROMOTED, "; ".join(notes), table)


# ----------------------------------------------------------------- state machine

# Phases (status.rollout.phase).
PHASE_STABLE, PHASE_PROGRESSING, PHASE_ANALYZING = "Stable", "Progressing", "Analyzing"
PHASE_PROMOTING, PHASE_ROLLED_BACK = "Promoting", "RolledBack"
PHASES = (PHASE_STABLE, PHASE_PROGRESSING, PHASE_ANALYZING, PHASE_PROMOTING, PHASE_ROLLED_BACK)
CANARY = "Canary"
ROLLING_UPDATE = "RollingUpdate"
# User requests (core.names.ROLLOUT_ANNOTATION), optionally with a unique suffix: "promote@1764620000000".
REQUEST_PROMOTE, REQUEST_ABORT, REQUEST_RETRY = "promote", "abort", "retry"
REQUESTS = (REQUEST_PROMOTE, REQUEST_ABORT, REQUEST_RETRY)
LIVE, DESIRED = "live", "desired"


@dataclass
class Observed:
    strategy: str
    desired_revision: str
    stable_revision: str | None  # the stable Deployment's pod-template revision; None: no stable Deployment yet
    canary_revision: str | None  # the canary Deployment's pod-template revision; None: no canary Deployment
    canary_created: float | None  # from the canary Deployment (cache)
    stable_rolled: bool  # stable Deployment updated + ready at desired
    refused_revision: str | None
    request: str | None  # the ROLLOUT_ANNOTATION value
    request_handled: str | None  # status.rollout.requestHandled
    verdict: Verdict | None  # judge() on the canary_revision's analysis (None: none yet)
    now: float
    replicas: int
    last_phase: str | None = None  # status.rollout.phase as last written
    last_decision: dict | None = None  # status.rollout.decision as last written


@dataclass
class Step:
    phase: str
    stable_template: str  # "live" | "desired"
    canary: bool  # whether the canary Deployment is desired
    condition: tuple[str, str, str]  # (status, reason, message) of Rollout
    decision: dict | None  # status.rollout.decision to record (None: keep)
    refused_revision: str | None
    request_handled: str | None = None  # status.rollout.requestHandled to record (the value acted on)


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def request_action(value: str | None) -> str | None:
    """'promote@1764620000000' -> 'promote'; None for no or an unknown request."""
    if not isinstance(value, str):
        return None
    action = value.split("@", 1)[0].strip().lower()
    return action if action in REQUESTS else None


def _decision(result: str, reason: str, message: str, now: float) -> dict:
    return {"result": result, "reason": reason, "message": message, "at": rfc3339(now)}


def _short(rev: str | None) -> str:
    return (rev or "none")[:8]


def step(o: Observed) -> Step:
    """What to apply for one observation (rules of ROLLOUT.md, in order):

    - RollingUpdate, no stable Deployment yet, or zero replicas: the stable Deployment takes the desired
      template, no canary (today's behaviour).
    - desired == stable: Stable, no canary; but while the canary of that revision still runs and the stable
      Deployment is not yet rolled, Promoting (the canary keeps serving until the stable pods are ready).
    - Promoting already decided for the canary's revision (status.rollout.phase): keep promoting.
    - desired == refused and no pending ``retry``: RolledBack, stable live, no canary, the condition False
      with the rollback's reason and numbers (status.rollout.decision).
    - otherwise a canary of desired: a pending ``abort`` rolls back (Aborted), a pending ``promote`` or a
      Promote verdict promotes (stable desired, canary kept until the stable is rolled), a Rollback verdict
      rolls back (canary deleted, stable live, refused = desired); else Progressing while the canary is
      not there or not ready, Analyzing after.

    A request (``specdeploy.io/rollout``) is acted on once: when its value differs from ``request_handled``;
    the step returns the value to record. One that finds nothing to act on is recorded too, so that a stale
    ``promote`` never promotes a later canary."""
    pending = o.request if o.request and o.request != o.request_handled and request_action(o.request) else None
    action = request_action(pending)
    handled = pending or o.request_handled
    desired, stable = o.desired_revision, o.stable_revision

    def out(phase: str, stable_template: str, canary: bool, condition: tuple[str, str, str],
            decision: dict | None = None, refused: str | None = o.refused_revision) -> Step:
        return Step(phase, stable_template, canary, condition, decision, refused, handled)

    if o.strategy != CANARY or stable is None or o.replicas <= 0:
        why = ("strategy RollingUpdate" if o.strategy != CANARY else
               "no stable Deployment yet" if stable is None else "zero replicas")
        return out(PHASE_STABLE, DESIRED, False, ("True", STABLE, f"{why}: changes roll to every replica"))

    promote_msg = f"promoting revision {_short(desired)}: rolling the stable Deployment, the canary serves until it is ready"
    if desired == stable:
        if not o.stable_rolled and (o.canary_revision == desired or o.last_phase == PHASE_PROMOTING):
            return out(PHASE_PROMOTING, DESIRED, o.canary_revision == desired, ("True", PROMOTED, promote_msg))
        last = o.last_decision if isinstance(o.last_decision, Mapping) else {}
        if o.last_phase == PHASE_PROMOTING or (last.get("result") == PROMOTE and o.canary_revision is None):
            msg = str(last.get("message") or "") if last.get("result") == PROMOTE else ""
            return out(PHASE_STABLE, DESIRED, False,
                       ("True", PROMOTED, f"revision {_short(desired)} promoted" + (f": {msg}" if msg else "")))
        return out(PHASE_STABLE, DESIRED, False, ("True", STABLE, f"serving revision {_short(desired)}"))

    if o.last_phase == PHASE_PROMOTING and o.canary_revision == desired:
        return out(PHASE_PROMOTING, DESIRED, True, ("True", PROMOTED, promote_msg))

    refused = o.refused_revision
    if desired == refused:
        if action == REQUEST_RETRY:
            refused = None
        else:
            last = o.last_decision if isinstance(o.last_decision, Mapping) else {}
            kept = last.get("result") == ROLLBACK and last.get("reason")
            reason = str(last["reason"]) if kept else PHASE_ROLLED_BACK
            message = str(last.get("message") or "") if kept else f"revision {_short(desired)} was rolled back"
            refused_note = f"revision {_short(desired)} refused until the spec changes or a retry is requested"
            return out(PHASE_ROLLED_BACK, LIVE, False, ("False", reason, f"{message} ({refused_note})"))

    def rollback(reason: str, message: str) -> Step:
        return out(PHASE_ROLLED_BACK, LIVE, False, ("False", reason, message),
                   _decision(ROLLBACK, reason, message, o.now), refused=desired)

    def promote(message: str) -> Step:
        return out(PHASE_PROMOTING, DESIRED, o.canary_revision == desired, ("True", PROMOTED, promote_msg),
                   _decision(PROMOTE, PROMOTED, message, o.now), refused=refused)

    if action == REQUEST_ABORT:
        return rollback(ABORTED, f"aborted on request ({pending}): revision {_short(desired)} rolled back")
    if action == REQUEST_PROMOTE:
        return promote(f"promoted on request ({pending})")
    v = o.verdict if o.canary_revision == desired else None  # a verdict on another revision does not count
    if v is not None and v.decision == ROLLBACK:
        return rollback(v.reason, v.message)
    if v is not None and v.decision == PROMOTE:
        return promote(v.message)
    if o.canary_revision != desired:
        return out(PHASE_PROGRESSING, LIVE, True,
                   ("Unknown", ANALYZING, f"starting the canary of revision {_short(desired)}"), refused=refused)
    if v is None or v.reason == PROGRESSING:
        msg = v.message if v is not None else f"canary of revision {_short(desired)} starting"
        return out(PHASE_PROGRESSING, LIVE, True, ("Unknown", ANALYZING, msg), refused=refused)
    return out(PHASE_ANALYZING, LIVE, True, ("Unknown", ANALYZING, v.message), refused=refused)
