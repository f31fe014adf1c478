"""Status and conditions (pure): what the operator observed -> status.conditions and friends.

Conditions follow metav1.Condition: type, status, reason (CamelCase), message,
lastTransitionTime (kept while the status does not change), observedGeneration.
The status is written only when ``status_changed`` says it differs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..api.types import AcceptedFinding, Acceptance
from ..core import acceptance as acc
from ..core.rollout import baseline as bl
from ..core.rollout import guard as gd
from ..core import names as N
from ..core.findings import Finding, Severity

DRAFTER_COMPATIBLE = N.DRAFTER_COMPATIBLE
PROGRESSING = N.PROGRESSING
READY = N.READY
DEGRADED = N.DEGRADED
CONDITION_TYPES = (DRAFTER_COMPATIBLE, PROGRESSING, READY, DEGRADED)
# Owned by the acceptance monitor (controller/monitor.py), written by the same status path.
SPECULATION_HEALTHY = N.SPECULATION_HEALTHY
NO_READY_PODS = "NoReadyPods"  # Unknown: no ready engine pod to scrape (any more)
SCRAPE_FAILED = "ScrapeFailed"  # Unknown: no engine pod's /metrics answered
# spec.speculation.guard (core/rollout/guard.py): SpeculationGuarded from the reconciler (what was rendered),
# SpeculationProfitable from the acceptance monitor (live load against the guard). Written only while a guard
# is set: a status write without one drops them.
SPECULATION_GUARDED = N.SPECULATION_GUARDED
SPECULATION_PROFITABLE = N.SPECULATION_PROFITABLE
GUARD_TYPES = (SPECULATION_GUARDED, SPECULATION_PROFITABLE)
# spec.rollout Canary (core/rollout/canary.step through controller/plan.plan_rollout): the canary's analysis and decision
ROLLOUT = N.ROLLOUT
MAX_MESSAGE = 4000


@dataclass
class Observation:
    """Everything one reconcile learned; the only input of ``compute_conditions``."""

    generation: int
    resolution_error: tuple[str, str] | None = None  # (reason, message)
    findings: list[Finding] | None = None  # None: not checked (configs not resolved)
    blocked_reason: tuple[str, str] | None = None  # workload kind unavailable etc.
    workload_exists: bool = False
    workload_updated: bool = False  # the workload carries this generation's config
    desired_replicas: int = 0
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    conflicts: list[str] = field(default_factory=list)  # children owned by someone else
    accepted: list[Finding] = field(default_factory=list)  # turned into info by spec.checks.accept
    internal_error: tuple[str, str] | None = None  # (exception type, one-line message): a bug, retried with backoff
    guard: tuple[bool | None, str, str] | None = None  # SpeculationGuarded (status, reason, message); None: no guard
    family: str | None = None  # the drafter's family as the check read it (checker/family.py), e.g. "EAGLE-3.1 (hf)"
    # spec.rollout (controller/plan.plan_rollout): status.rollout and the Rollout condition to write (None: keep
    # what is stored); rollout_off: the spec is not Canary (both are dropped)
    rollout_status: dict | None = None
    rollout_condition: tuple[str, str, str] | None = None
    rollout_off: bool = False
    # a promotion decided now: status.acceptance.baseline of the promoted revision (plan.Plan.promoted_baseline)
    promoted_baseline: dict | None = None


def _findings_message(findings: Iterable[Finding]) -> str:
    lines = [f"{f.severity.value} {f.code} at {f.source.value} {f.path}: {f.message}" for f in findings
             if f.severity is not Severity.INFO]
    msg = "; ".join(lines)
    return msg if len(msg) <= MAX_MESSAGE else msg[: MAX_MESSAGE - 3] + "..."


def _cond(type_: str, status: bool | None, reason: str, message: str) -> dict[str, Any]:
    return {"type": type_, "status": {True: "True", False: "False", None: "Unknown"}[status],
            "reason": reason, "message": message[:MAX_MESSAGE]}


def compute_conditions(o: Observation) -> list[dict[str, Any]]:
    """The four conditions (without times and generation) for an observation."""
    if o.internal_error is not None:
        kind, text = o.internal_error
        msg = (f"the operator failed unexpectedly ({kind}: {text}); it retries with backoff. This is a bug: please "
               "report it with the operator log")
        return [_cond(DRAFTER_COMPATIBLE, None, "InternalError", msg), _cond(PROGRESSING, False, "InternalError", msg),
                _cond(READY, False, "InternalError", msg),
                _cond(DEGRADED, o.workload_exists, "InternalError" if o.workload_exists else "AsExpected",
                      "the last good workload keeps running; " + msg if o.workload_exists else "no workload")]
    errors = [f for f in (o.findings or []) if f.severity is Severity.ERROR]
    warnings = [f for f in (o.findings or []) if f.severity is Severity.WARNING]

    # DrafterCompatible
    if o.findings is None:
        if o.resolution_error:
            compat = _cond(DRAFTER_COMPATIBLE, None, o.resolution_error[0], o.resolution_error[1])
        else:
            compat = _cond(DRAFTER_COMPATIBLE, None, "ConfigsPending", "waiting for both config.json files")
    elif errors:
        compat = _cond(DRAFTER_COMPATIBLE, False, errors[0].code, _findings_message(o.findings))
    else:
        msg = "drafter and target configs passed every check"
        if o.family:
            msg = f"{o.family} drafter: {msg}"
        if o.accepted:
            msg += " (accepted through spec.checks.accept: " + ", ".join(sorted({f.code for f in o.accepted})) + ")"
        if warnings:
            msg += f" with {len(warnings)} warning(s): " + _findings_message(warnings)
        compat = _cond(DRAFTER_COMPATIBLE, True, "Compatible", msg)

    rolled_out = (o.workload_exists and o.workload_updated and o.updated_replicas >= o.desired_replicas
                  and o.ready_replicas >= o.desired_replicas)
    gate_failed = bool(errors) or o.findings is None or o.blocked_reason is not None

    # Progressing
    if o.blocked_reason:
        prog = _cond(PROGRESSING, False, o.blocked_reason[0], o.blocked_reason[1])
    elif errors:
        prog = _cond(PROGRESSING, False, "BlockedByCheck",
                     f"no workload is created or updated while the drafter check fails ({errors[0].code})")
    elif o.findings is None:
        prog = _cond(PROGRESSING, False, compat["reason"], "configs are not resolved yet: " + compat["message"])
    elif rolled_out:
        prog = _cond(PROGRESSING, False, "RolledOut", f"{o.ready_replicas}/{o.desired_replicas} replicas run the current config")
    else:
        prog = _cond(PROGRESSING, True, "RollingOut",
                     f"{o.updated_replicas}/{o.desired_replicas} replicas updated, {o.ready_replicas} ready "
                     "(loading large checkpoints can take many minutes)")

    # Ready
    if not o.workload_exists:
        ready = _cond(READY, False, "NoWorkload" if not gate_failed else "Blocked",
                      "the engine workload does not exist yet" if not gate_failed else prog["message"])
    elif o.desired_replicas == 0:
        ready = _cond(READY, True, "ScaledToZero", "spec.replicas is 0")
    elif o.ready_replicas >= o.desired_replicas:
        ready = _cond(READY, True, "AllReplicasReady", f"{o.ready_replicas}/{o.desired_replicas} replicas ready")
    else:
        ready = _cond(READY, False, "ReplicasNotReady", f"{o.ready_replicas}/{o.desired_replicas} replicas ready")

    # Degraded: something is wrong while a workload exists, or a child is not ours.
    if o.conflicts:
        deg = _cond(DEGRADED, True, "ChildConflict",
                    "objects of these names exist and are not controlled by this SpeculativeDeployment, so none of its "
                    "children is applied, changed or deleted: " + ", ".join(o.conflicts)
                    + "; rename the SpeculativeDeployment or delete or rename those objects")
    elif o.workload_exists and gate_failed:
        deg = _cond(DEGRADED, True, "RunningPreviousConfig",
                    "the last good workload keeps running; the current spec is not applied: " + prog["message"])
    elif o.workload_exists and o.workload_updated and 0 < o.ready_replicas < o.desired_replicas:
        deg = _cond(DEGRADED, True, "ReplicasUnavailable", f"only {o.ready_replicas}/{o.desired_replicas} replicas ready")
    else:
        deg = _cond(DEGRADED, False, "AsExpected", "no known problem")
    out = [compat, prog, ready, deg]
    if o.guard is not None:
        out.append(_cond(SPECULATION_GUARDED, *o.guard))
    if o.rollout_condition is not None:
        status, reason, message = o.rollout_condition
        out.append(_cond(ROLLOUT, {"True": True, "False": False}.get(status), reason, message))
    return out


def now_rfc3339() -> str:
    """The time stamp of a condition or a status field (RFC 3339, UTC, seconds)."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def age_seconds(ts: str | None) -> float:
    """Seconds since an RFC 3339 time stamp (a creationTimestamp, a status time); 0 when absent or unreadable."""
    if not ts:
        return 0.0
    try:
        t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return (dt.datetime.now(dt.timezone.utc) - t).total_seconds()


def merge_conditions(previous: list[dict] | None, new: list[dict], generation: int, now: str) -> list[dict]:
    """New conditions with lastTransitionTime kept where the status did not change.

    Conditions of other types (e.g. SpeculationHealthy, owned by the acceptance monitor)
    are kept as they are.
    """
    prev = {c.get("type"): c for c in (previous or []) if isinstance(c, dict)}
    out = []
    for c in new:
        old = prev.pop(c["type"], None)
        t = old.get("lastTransitionTime") if old and old.get("status") == c["status"] and old.get("lastTransitionTime") else now
        out.append({**c, "lastTransitionTime": t, "observedGeneration": generation})
    out.extend(v for k, v in prev.items() if k not in CONDITION_TYPES and k not in GUARD_TYPES)
    return out


def transitions(previous: list[dict] | None, new: list[dict]) -> list[dict]:
    """Conditions whose status or reason changed (each worth an Event)."""
    prev = {c.get("type"): c for c in (previous or []) if isinstance(c, dict)}
    out = []
    for c in new:
        old = prev.get(c["type"])
        if old is None or old.get("status") != c["status"] or old.get("reason") != c["reason"]:
            out.append(c)
    return out


def _strip_times(conds: list[dict] | None) -> list[dict]:
    return sorted(({k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conds or []),
                  key=lambda c: str(c.get("type")))


def status_changed(current: dict | None, desired: dict) -> bool:
    """Whether writing ``desired`` would change the stored status (times aside)."""
    current = current or {}
    for k, v in desired.items():
        if k == "conditions":
            if _strip_times(current.get("conditions")) != _strip_times(v):
                return True
        elif current.get(k) != v:
            return True
    return False


def event_for(cond: dict) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event a condition transition deserves, if any.

    Events mark what a person wants to see in ``kubectl describe``: the check verdict,
    resolution problems, degradation and readiness. Progress steps are in the conditions.
    """
    t, s, reason = cond["type"], cond["status"], cond["reason"]
    if t == DRAFTER_COMPATIBLE:
        if s == "False" or (s == "Unknown" and reason != "ConfigsPending"):
            return "Warning", reason, cond["message"]
        if s == "True":
            return "Normal", reason, cond["message"]
    if t == DEGRADED and s == "True":
        return "Warning", reason, cond["message"]
    if t == READY and s == "True":
        return "Normal", reason, cond["message"]
    if t in GUARD_TYPES:  # the guard not rendered, load past the crossover: worth a Warning; back to normal: Normal
        return ("Warning" if s == "False" else "Normal"), reason, cond["message"]
    if t == ROLLOUT:  # a rollback (False) is worth a Warning; a promotion a Normal; analysing is progress
        if s == "False":
            return "Warning", reason, cond["message"]
        if s == "True" and reason != "Stable":
            return "Normal", reason, cond["message"]
        return None
    if t == SPECULATION_HEALTHY:  # every transition: a person wants to see acceptance change
        if s == "False" or (s == "Unknown" and reason == acc.NO_METRICS):
            return "Warning", reason, cond["message"]
        return "Normal", reason, cond["message"]
    return None


# ----------------------------------------------------------------- SpeculationHealthy (pure)

# Condition status per acceptance.health status.
_HEALTH_STATUS = {acc.OK: True, acc.DEGRADED: False, acc.UNKNOWN: None}
# Verdicts that new evidence (drafts) produced; NoTraffic keeps one of these as it is.
_VERDICTS = (acc.HEALTHY, acc.COLLAPSED, acc.REGRESSED, acc.CLIFF)


def strip_condition(cond: dict | None) -> dict | None:
    if not isinstance(cond, dict):
        return None
    return {k: cond[k] for k in ("type", "status", "reason", "message") if k in cond}


def speculation_condition(acceptance: "acc.Acceptance | None", min_length: float = acc.DEFAULT_MIN_LENGTH,
                          previous: dict | None = None, *, baseline: "bl.Baseline | None" = None,
                          revision: str | None = None,
                          regression_fraction: float = bl.DEFAULT_REGRESSION_FRACTION) -> dict[str, Any]:
    """The SpeculationHealthy condition (without times) for a deployment's combined acceptance.

    - True ``Healthy``; False ``AcceptanceCollapsed`` (tau below ``min_length`` over the window),
      ``AcceptanceRegressed`` (tau more than ``regression_fraction`` below ``baseline``: see
      core/rollout/baseline.py) or ``AcceptanceCliff`` (per-position acceptance drops to near zero after
      healthy positions); Unknown ``NoMetrics`` (the engines export no speculative-decoding series).
    - No traffic (no drafts in the window) is no evidence either way: the previous verdict
      (Healthy, AcceptanceCollapsed, AcceptanceRegressed, AcceptanceCliff) stays as it is, so an
      idle engine neither flaps nor causes writes; without one it is Unknown ``NoTraffic``.
    """
    h, message = bl.judge(acceptance, min_length, baseline, revision=revision, fraction=regression_fraction)
    prev = strip_condition(previous)
    if h.reason == acc.NO_TRAFFIC and prev is not None and prev.get("type") == SPECULATION_HEALTHY \
            and prev.get("reason") in _VERDICTS:
        return prev
    return _cond(SPECULATION_HEALTHY, _HEALTH_STATUS[h.status], h.reason, message)


def speculation_unknown(reason: str, message: str) -> dict[str, Any]:
    """SpeculationHealthy Unknown for what the monitor could not judge (NoReadyPods, ScrapeFailed)."""
    return _cond(SPECULATION_HEALTHY, None, reason, message)


def _round(x: float | None, digits: int = 2) -> float | None:
    if x is None or x != x:  # NaN
        return None
    return round(float(x), digits)


def acceptance_status(acceptance: "acc.Acceptance | None", pods_reporting: int, window: str,
                      previous: dict | None, now: str, *, revision: str | None = None,
                      baseline: "bl.Baseline | None" = None) -> dict[str, Any] | None:
    """status.acceptance for a combined acceptance: figures rounded to 2 decimals (what counts
    as a change), ``sampledAt`` moved only when a figure (or the pods reporting, the window or
    the revision) changed, so unchanged figures cause no status write. Without figures (no
    metrics, no traffic) the previous figures stay. ``baseline`` (core/rollout/baseline.py) is written
    as given: None drops it. None when there is nothing at all."""
    previous = previous if isinstance(previous, dict) else None
    base = {"baseline": baseline.to_status()} if baseline is not None else {}
    if acceptance is None or acceptance.length is None:
        figures = {k: v for k, v in (previous or {}).items() if k != "baseline"}
    else:
        # the API model's names (construct: a figure that is NaN reads as absent instead of failing the tick)
        figures = Acceptance.model_construct(
            length=_round(acceptance.length), rate=_round(acceptance.rate),
            per_position=[_round(x) for x in acceptance.per_position], window=window,
            pods_reporting=int(pods_reporting), revision=revision,
            source=acceptance.source or None).model_dump(by_alias=True, exclude_none=True)
        old = {k: v for k, v in (previous or {}).items() if k not in ("sampledAt", "baseline")}
        if previous is not None and old == figures and previous.get("sampledAt"):
            figures["sampledAt"] = previous["sampledAt"]
        else:
            figures["sampledAt"] = now
    out = {**figures, **base}
    if previous is not None and out == previous:
        return previous
    return out or None


def merge_patch_of(current: Any, desired: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns ``current`` into ``desired`` (one level deep): keys of
    ``current`` that ``desired`` lacks are sent as null (e.g. a reset ``baseline``)."""
    gone = {k: None for k in (current if isinstance(current, dict) else {}) if k not in desired}
    return {**gone, **desired}


def accepted_findings(o: Observation) -> list[AcceptedFinding] | None:
    """status.acceptedFindings: the accepted findings as they were (None: not checked this time)."""
    if o.findings is None:
        return None
    return [AcceptedFinding(code=f.code, severity=f.severity.value, source=f.source.value, path=f.path,
                            message=f.message[:1024]) for f in o.accepted]


# ----------------------------------------------------------------- SpeculationProfitable (pure)


def profitable_condition(running: float | None, limit: "gd.GuardLimit | None", previous: dict | None = None,
                         tau: float | None = None) -> dict[str, Any] | None:
    """SpeculationProfitable (without times) from the live running requests, the live tau and the guard, or None
    without a guard. While status, reason and the guard stay, the previous condition is kept as it is (the live
    figures in its message are the ones at the transition): a busy engine causes no status writes."""
    judged = gd.past_crossover(running, limit, tau)
    if judged is None:
        return None
    new = _cond(SPECULATION_PROFITABLE, *judged)
    prev = strip_condition(previous)
    if prev is not None and prev.get("type") == SPECULATION_PROFITABLE and prev.get("status") == new["status"] \
            and prev.get("reason") == new["reason"] \
            and gd.stable_part(prev.get("message", "")) == gd.stable_part(new["message"]):
        return prev
    return new
