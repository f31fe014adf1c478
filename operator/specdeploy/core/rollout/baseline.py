"""Acceptance baseline and regression (pure: standard library only).

An absolute floor (``spec.monitoring.minAcceptanceLength``) catches a collapse (tau ~1), not
a regression: a deployment that falls from tau 4.0 to 2.5 after a drafter or engine change
still clears 1.5. So the acceptance monitor keeps, per SpeculativeDeployment, a **baseline**:
the tau the deployment settled at, stored in ``status.acceptance.baseline`` (an operator
restart reads it back), and judges every window against it:

    regressed  <=>  tau < baseline * (1 - spec.monitoring.regressionFraction)

**Revisions.** A baseline belongs to a *speculation revision*: a digest of everything that
changes what speculation accepts (``REVISION_FIELDS``: engine name, version and image, target
and drafter repository, revision, resolved commit and config.json digest (which covers the
drafter's ``target_layer_ids``), the speculation settings, extra engine arguments). It is not
a digest of the whole spec: replicas, pod settings, monitoring thresholds and accepted
findings change nothing that acceptance depends on.

**Learning** (``step``): a revision without a baseline *settles*: its windows with traffic are
kept until the latest of them span at least ``settle_seconds`` and hold ``min_drafts`` drafts
(vLLM; SGLang has no draft counts) and ``MIN_SAMPLES`` windows; their mean is the baseline
(vLLM: weighted by drafts, so it is 1 + accepted/drafts over them; SGLang: equal weight, its
gauges carry no draft counts). Only the latest such run counts, so what the deployment did
earlier in its life (a collapse that was fixed without a spec change) does not linger in it,
and a window below the collapse floor (``minAcceptanceLength``) restarts settling.
Windows taken
while the engine pods do not all run the current config (a rollout, or a spec the gate
refused while the previous workload keeps running) are not averaged: they measure another
revision. Settling progress lives in memory only (it would otherwise be a status write per
window): an operator restart during settling starts it again.

**A new revision carries the old baseline over.** A spec change that lowers acceptance
(target_layer_ids shifted by one, an engine that forgets its +1, a worse drafter revision)
must be flagged, not silently become the new normal. So while a new revision settles, tau is
judged against the previous revision's baseline (the condition message says so), and when it
has settled:
- its mean is within the fraction of the carried baseline (or above it): it becomes the
  baseline (a better drafter raises the bar; a harmless change keeps it);
- it is below: the carried baseline stays and the deployment stays ``AcceptanceRegressed``.

**Accepting a lower baseline** is a person's decision: set (or change) the annotation
``specdeploy.io/reset-acceptance-baseline`` on the SpeculativeDeployment to any new value.
The monitor then drops the baseline and learns the current revision's afresh; the value it
acted on is stored with the new baseline (``resetToken``), so the same value never resets
twice, across operator restarts too.

A baseline is learned once per revision and then fixed: a slow drift within one revision
(e.g. traffic that drafts worse) shows as a regression, as it should; reset to accept it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .. import acceptance as acc
from ..names import RESET_ANNOTATION  # noqa: F401 (bl.RESET_ANNOTATION for its readers)

DEFAULT_REGRESSION_FRACTION = 0.25
DEFAULT_SETTLE_SECONDS = 600
DEFAULT_MIN_DRAFTS = 1000
MIN_SAMPLES = 3  # windows with traffic averaged before a baseline is taken
MAX_TOKEN = 128  # characters of the reset annotation's value kept in status

# What a speculation revision is made of: (where, field path). `spec` paths are read from the
# SpeculativeDeployment's spec, `resolved` paths from status.resolved (what the operator
# resolved for the current generation: hub commits, config.json digests, the image in use).
REVISION_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec", "engine.name"), ("spec", "engine.version"), ("spec", "engine.image"), ("spec", "engine.extraArgs"),
    ("spec", "target.model"), ("spec", "target.revision"),
    ("spec", "drafter.model"), ("spec", "drafter.revision"),
    ("spec", "speculation"),
    ("resolved", "image"), ("resolved", "targetRevision"), ("resolved", "targetConfigDigest"),
    ("resolved", "drafterRevision"), ("resolved", "drafterConfigDigest"),
    ("resolved", "blockSize"), ("resolved", "numSpeculativeTokens"), ("resolved", "draftWindow"),
    ("resolved", "nativeWindow"),
)


def _get(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(part)
    return doc


def speculation_revision(spec: Mapping[str, Any] | None, resolved: Mapping[str, Any] | None) -> str:
    """A 12-hex-digit digest of ``REVISION_FIELDS`` (absent fields count as absent, not as a
    change of anything else). Same inputs, same digest, across processes."""
    facts = {f"{where}.{path}": _get(spec if where == "spec" else resolved, path) for where, path in REVISION_FIELDS}
    facts = {k: v for k, v in facts.items() if v is not None}
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ----------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Params:
    regression_fraction: float = DEFAULT_REGRESSION_FRACTION
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    min_drafts: float = DEFAULT_MIN_DRAFTS


def _number(v: Any, default: float, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        return default
    return float(v)


def params_from_spec(spec: Mapping[str, Any] | None) -> Params:
    """spec.monitoring's baseline settings; a missing or out-of-range value (the CRD schema
    rejects those) falls back to its default."""
    m = _get(spec, "monitoring")
    m = m if isinstance(m, Mapping) else {}
    return Params(
        regression_fraction=_number(m.get("regressionFraction"), DEFAULT_REGRESSION_FRACTION, 0.01, 0.99),
        settle_seconds=_number(m.get("baselineSettleSeconds"), DEFAULT_SETTLE_SECONDS, 0, 7 * 86400),
        min_drafts=_number(m.get("baselineMinDrafts"), DEFAULT_MIN_DRAFTS, 0, 1e12),
    )


# ----------------------------------------------------------------- state


@dataclass(frozen=True)
class Baseline:
    """status.acceptance.baseline."""

    length: float  # tau, bonus token included
    revision: str  # the speculation revision it was learned on
    since: str  # when it was learned (RFC 3339)
    drafts: float | None = None  # drafts averaged (vLLM); None for SGLang
    reset_token: str | None = None  # the reset annotation's value when it was learned

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"length": round(self.length, 2), "revision": self.revision, "since": self.since}
        if self.drafts is not None:
            out["drafts"] = int(self.drafts)
        if self.reset_token is not None:
            out["resetToken"] = self.reset_token
        return out

    @classmethod
    def from_status(cls, doc: Any) -> "Baseline | None":
        """The stored baseline, or None when there is none or it is unusable."""
        if not isinstance(doc, Mapping):
            return None
        length, revision, since = doc.get("length"), doc.get("revision"), doc.get("since")
        if isinstance(length, bool) or not isinstance(length, (int, float)) or not math.isfinite(length) \
                or length < 1.0 or not isinstance(revision, str) or not revision or not isinstance(since, str):
            return None
        drafts = doc.get("drafts")
        token = doc.get("resetToken")
        return cls(float(length), revision, since,
                   float(drafts) if isinstance(drafts, (int, float)) and not isinstance(drafts, bool) else None,
                   token if isinstance(token, str) else None)


Sample = tuple[float, float, float, "float | None"]  # (clock seconds, tau, weight, drafts or None)


@dataclass(frozen=True)
class Settling:
    """A revision's baseline being learned (in memory only): its recent windows with traffic."""

    revision: str
    samples: tuple[Sample, ...] = ()
    MAX_SAMPLES = 10_000  # a bound for deployments with almost no traffic

    def add(self, now: float, length: float, drafts: float | None) -> "Settling":
        sample: Sample = (now, length, drafts if drafts is not None else 1.0, drafts)
        return replace(self, samples=(self.samples + (sample,))[-self.MAX_SAMPLES:])

    def window(self, now: float, p: Params) -> tuple[Sample, ...] | None:
        """The shortest run of the latest samples that spans ``settle_seconds``, holds
        ``MIN_SAMPLES`` samples and ``min_drafts`` drafts (vLLM); None while there is none."""
        drafts = 0.0
        counted = False
        for i in range(len(self.samples) - 1, -1, -1):
            t, _tau, _w, d = self.samples[i]
            if d is not None:
                drafts += d
                counted = True
            n = len(self.samples) - i
            if n >= MIN_SAMPLES and now - t >= p.settle_seconds and (not counted or drafts >= p.min_drafts):
                return self.samples[i:]
        return None


def _mean(samples: tuple[Sample, ...]) -> tuple[float, float | None]:
    """(weighted mean tau, drafts or None) of samples: vLLM weighs by drafts (so the mean is
    1 + accepted / drafts over them), SGLang gives each window one vote."""
    weight = sum(w for _t, _tau, w, _d in samples)
    drafts = [d for _t, _tau, _w, d in samples if d is not None]
    return sum(tau * w for _t, tau, w, _d in samples) / weight, (sum(drafts) if drafts else None)


def reset_token(annotations: Mapping[str, Any] | None) -> str | None:
    """The reset annotation's value (trimmed to ``MAX_TOKEN`` characters), or None."""
    v = (annotations or {}).get(RESET_ANNOTATION) if isinstance(annotations, Mapping) else None
    return v[:MAX_TOKEN] if isinstance(v, str) and v else None


def apply_reset(baseline: Baseline | None, token: str | None, handled: str | None) -> tuple[Baseline | None, bool]:
    """(the baseline that still stands, whether the reset is news) for the reset annotation's
    value ``token``: a baseline stands unless a token is set that it was not learned under; the
    reset is news (settling starts over) unless this process already acted on that value
    (``handled``): the status may not have been written since."""
    if token is None or (baseline is not None and baseline.reset_token == token):
        return baseline, False
    return None, token != handled


def regressed(length: float | None, baseline: Baseline | None, fraction: float) -> bool:
    return length is not None and baseline is not None and length < baseline.length * (1.0 - fraction)


def step(baseline: Baseline | None, settling: Settling | None, acceptance: "acc.Acceptance | None", *,
         revision: str, now: float, now_text: str, params: Params, current_config: bool = True,
         token: str | None = None, min_length: float | None = None) -> tuple[Baseline | None, Settling | None]:
    """One window's effect on (baseline, settling); see the module docstring.

    ``current_config``: every reporting pod runs the deployment's current config (False during
    a rollout: the window is judged, never averaged into a baseline).
    ``min_length``: the collapse floor (``spec.monitoring.minAcceptanceLength``); a collapsed
    window is never learned: settling starts again after it."""
    if acceptance is None or acceptance.length is None or (acceptance.drafts is not None and acceptance.drafts <= 0):
        return baseline, settling  # no evidence
    if baseline is not None and baseline.revision == revision:
        return baseline, None  # this revision has its baseline
    if not current_config:
        return baseline, None  # another revision's pods are in the window: start over later
    if min_length is not None and acceptance.length < min_length:
        return baseline, None  # a collapse is never a baseline: start over once it ends
    if settling is None or settling.revision != revision:
        settling = Settling(revision)
    settling = settling.add(now, acceptance.length, acceptance.drafts)
    window = settling.window(now, params)
    if window is None:
        return baseline, settling
    settling = replace(settling, samples=window)  # older windows are of no further use
    mean, drafts = _mean(window)
    if baseline is not None and regressed(mean, baseline, params.regression_fraction):
        return baseline, settling  # a worse revision does not lower the bar; keep measuring
    return Baseline(mean, revision, now_text, drafts, token), None


# ----------------------------------------------------------------- verdict


def judge(acceptance: "acc.Acceptance | None", min_length: float, baseline: Baseline | None, *,
          revision: str | None, fraction: float = DEFAULT_REGRESSION_FRACTION) -> tuple[acc.Health, str]:
    """(health, message): ``acceptance.health`` with ``AcceptanceRegressed`` between a collapse
    (which wins: it is the stronger statement) and a cliff."""
    h = acc.health(acceptance, min_length)
    msg = acc.health_message(acceptance, min_length)
    if acceptance is None or acceptance.length is None or h.reason in (acc.NO_METRICS, acc.NO_TRAFFIC):
        return h, msg
    if baseline is not None and h.reason != acc.COLLAPSED and regressed(acceptance.length, baseline, fraction):
        return acc.Health(acc.DEGRADED, acc.REGRESSED), regression_message(acceptance.length, baseline, fraction,
                                                                           revision)
    if baseline is not None:
        msg += f"; {_baseline_text(baseline, revision)}"
    return h, msg


def _baseline_text(b: Baseline, revision: str | None) -> str:
    if not b.revision:  # given by hand (`specdeploy acceptance --baseline`)
        return f"baseline {b.length:.2f}"
    if revision is None or b.revision == revision:
        return f"baseline {b.length:.2f} (this revision {b.revision}, since {b.since})"
    return f"baseline {b.length:.2f} carried over from revision {b.revision} (now {revision}, since {b.since})"


def regression_message(length: float, b: Baseline, fraction: float, revision: str | None) -> str:
    drop = 1.0 - length / b.length
    head = (f"acceptance length {length:.2f} is {drop:.0%} below the baseline {b.length:.2f} "
            f"(more than the {fraction:.0%} allowed by spec.monitoring.regressionFraction)")
    if not b.revision:  # given by hand (`specdeploy acceptance --baseline`)
        return head
    if revision is not None and b.revision != revision:
        why = (f"; the baseline was learned on revision {b.revision} (since {b.since}) and the deployment now runs "
               f"revision {revision}: the drafter, target, engine or speculation settings changed since")
    else:
        why = f"; the baseline was learned on this revision ({b.revision}) since {b.since}"
    return (head + why + f". If the lower acceptance is expected, accept it as the new baseline by setting the "
            f"annotation {RESET_ANNOTATION} to a new value")
