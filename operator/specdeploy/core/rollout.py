"""Canary rollouts: revision, analysis and decision (pure: standard library + core only).

Work in progress: the names and signatures below are the contract of issue 26 (/work/ROLLOUT.md);
judge, Accumulator and step follow.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

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


def revision(config_hash: str, target_commit: str | None, drafter_commit: str | None) -> str:
    """The rollout revision: sha256 of ``config_hash|target_commit|drafter_commit``, first 16 hex digits.

    ``config_hash`` is the engine pod template's config hash (everything of the engine's command, image and
    resources; scale is not part of it); the resolved commits make a drafter retrained under the same
    repository name a new revision even when the spec's text did not change."""
    text = f"{config_hash}|{target_commit or ''}|{drafter_commit or ''}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------- parameters


@dataclass
class Params:
    """spec.rollout.analysis + deadline, in seconds and plain numbers (params_from_spec)."""

    window_s: float = 600
    min_drafts: int = 200
    min_acceptance_ratio: float = 0.9
    min_throughput_ratio: float = 0.9
    max_error_rate: float = 0.01
    deadline_s: float = 1800
    probe: bool = True


def params_from_spec(rollout: Any) -> Params:
    """Params from spec.rollout, a dict (camelCase keys) or the typed model."""
    raise NotImplementedError


# ----------------------------------------------------------------- totals


@dataclass
class Totals:
    """One track's counters summed over its pods since the analysis started (deltas, reset-safe)."""

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
        raise NotImplementedError

    def tokens_per_second_per_request(self) -> float | None:
        raise NotImplementedError

    def error_rate(self) -> float | None:
        raise NotImplementedError

    def add(self, other: "Totals") -> "Totals":
        raise NotImplementedError


class Accumulator:
    """Per pod uid: previous scrape -> deltas of the engines' counters, summed per track."""

    def __init__(self) -> None:
        pass

    def observe(self, pod_uid: str, track: str, engine: str, text: str, now: float) -> None:
        raise NotImplementedError

    def totals(self, track: str) -> Totals:
        raise NotImplementedError

    def forget_pod(self, uid: str) -> None:
        raise NotImplementedError


# ----------------------------------------------------------------- judgement


@dataclass
class Health:
    """The canary pods as the pod cache shows them."""

    pods: int
    ready: int
    restarts: int
    crash_looping: bool
    failed_to_start: str | None = None


@dataclass
class Probe:
    """The operator's greedy probe: prompts sent to one pod of each track, how many completions were identical."""

    prompts: int
    identical: int
    errors: int
    message: str = ""


@dataclass
class Verdict:
    decision: str  # "Wait" | "Promote" | "Rollback"
    reason: str  # Analyzing | Promoted | AcceptanceBelowStable | ... (the Rollout condition's reasons)
    message: str  # with the numbers
    table: list[dict]  # status.rollout.analysis rows


def judge(p: Params, stable: Totals, canary: Totals, health: Health, probe: Probe | None,
          elapsed_s: float, compare_outputs: bool = True) -> Verdict:
    raise NotImplementedError


# ----------------------------------------------------------------- state machine


@dataclass
class Observed:
    strategy: str
    desired_revision: str
    stable_revision: str | None  # None: no stable Deployment yet
    canary_revision: str | None
    canary_created: float | None  # from the canary Deployment (cache)
    stable_rolled: bool  # stable Deployment updated + ready at desired
    refused_revision: str | None
    request: str | None  # the ROLLOUT_ANNOTATION value
    request_handled: str | None  # status.rollout.requestHandled
    verdict: Verdict | None
    now: float
    replicas: int


@dataclass
class Step:
    phase: str
    stable_template: str  # "live" | "desired"
    canary: bool  # whether the canary Deployment is desired
    condition: tuple[str, str, str]  # (status, reason, message) of Rollout
    decision: dict | None  # status.rollout.decision to record (None: keep)
    refused_revision: str | None


def step(o: Observed) -> Step:
    raise NotImplementedError
