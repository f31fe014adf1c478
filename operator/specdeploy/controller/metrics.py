"""The operator's own Prometheus metrics (served on /metrics by prometheus-client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..core import acceptance as acc
from ..core import names as N
from ..core.rollout import canary as ro

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(N.OP_RECONCILES, "Reconciles by result.", ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram(N.OP_RECONCILE_SECONDS, "Time per reconcile.", registry=REGISTRY,
                              buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
ERRORS = Counter(N.OP_ERRORS, "Reconciles that failed, by reason.", ["reason"], registry=REGISTRY)
API_WRITES = Counter(N.OP_API_WRITES, "API writes by verb and kind.", ["verb", "kind"], registry=REGISTRY)
CHECK_FAILURES = Counter(N.OP_CHECK_FAILURES, "Drafter/target check failures by first error code.",
                         ["code"], registry=REGISTRY)
QUEUE_DEPTH = Gauge(N.OP_QUEUE_DEPTH, "Keys waiting in the work queue.", registry=REGISTRY)
MANAGED = Gauge(N.OP_MANAGED, "SpeculativeDeployments the operator watches.", registry=REGISTRY)
# Leader election (controller/leader.py): 1 on the replica that holds the Lease and may write;
# every replica counts the holder changes it observes (its own acquisitions included).
LEADER = Gauge(N.OP_LEADER, "1 when this replica holds the leader Lease (reconciles, runs the acceptance monitor).",
               registry=REGISTRY)
LEADER_TRANSITIONS = Counter(N.OP_LEADER_TRANSITIONS,
                             "Changes of the leader Lease's holder observed by this replica.", registry=REGISTRY)
FENCED_WRITES = Counter(N.OP_FENCED_WRITES,
                        "Writes refused by this replica's fence (it was not the leader, or its renew deadline passed).",
                        registry=REGISTRY)

# Acceptance measured by the acceptance monitor (controller/monitor.py), per SpeculativeDeployment:
# the engines' figures combined over the ready engine pods of the last scrape window. A series
# exists only while there is a figure (no traffic, no metrics: no series); removed with the CR.
ACCEPTANCE_LABELS = acc.OP_LABELS
ACCEPTANCE_LENGTH = Gauge(acc.OP_LENGTH,
                          "Speculative acceptance length (tokens per step, bonus token included) over the last window.",
                          ACCEPTANCE_LABELS, registry=REGISTRY)
ACCEPTANCE_RATE = Gauge(acc.OP_RATE, "Accepted / drafted tokens over the last window.",
                        ACCEPTANCE_LABELS, registry=REGISTRY)
ACCEPTANCE_PER_POSITION = Gauge(acc.OP_PER_POSITION,
                                "Acceptance rate per draft position over the last window (vLLM).",
                                ACCEPTANCE_LABELS + ("position",), registry=REGISTRY)
# The baseline the monitor judges regressions against (core/rollout/baseline.py; status.acceptance.baseline)
# and the deployment's spec.monitoring.regressionFraction: the SpecdeployAcceptanceRegressed alert
# compares specdeploy_acceptance_length with them. Exported beside the length, while a baseline exists.
ACCEPTANCE_BASELINE = Gauge(acc.OP_BASELINE,
                            "Baseline acceptance length the deployment settled at (status.acceptance.baseline).",
                            ACCEPTANCE_LABELS, registry=REGISTRY)
ACCEPTANCE_REGRESSION_FRACTION = Gauge(acc.OP_REGRESSION_FRACTION,
                                       "spec.monitoring.regressionFraction: tau below baseline x (1 - this) "
                                       "is a regression.", ACCEPTANCE_LABELS, registry=REGISTRY)
# spec.speculation.guard's limit (maxConcurrency, or the SpeculativeBenchmark's crossover), while one is set:
# the SpecdeployPastCrossover alert compares the engines' running requests with it.
GUARD_MAX_CONCURRENCY = Gauge(acc.OP_GUARD_MAX_CONCURRENCY,
                              "Running requests per engine from which speculation stops paying (spec.speculation.guard).",
                              ACCEPTANCE_LABELS, registry=REGISTRY)
ACCEPTANCE_GAUGES = (ACCEPTANCE_LENGTH, ACCEPTANCE_RATE, ACCEPTANCE_PER_POSITION, ACCEPTANCE_BASELINE,
                     ACCEPTANCE_REGRESSION_FRACTION)


def count_write(verb: str, kind: str) -> None:
    API_WRITES.labels(verb=verb, kind=kind).inc()


# Canary rollouts (spec.rollout Canary, core/rollout/canary.py), per SpeculativeDeployment. The reconciler
# calls export_rollout with status.rollout on every status write (None: no rollout, or the CR is gone)
# and count_rollout_decision once per decision it records.
ROLLOUT_LABELS = ("namespace", "deployment")
ROLLOUT_PHASES = ro.PHASES
ROLLOUT_TRACKS = (ro.TRACK_STABLE, ro.TRACK_CANARY)
# figure label -> the status.rollout.analysis row key it comes from
ROLLOUT_FIGURES = {"tau": "tau", "tokens_per_second_per_request": "tokensPerSecondPerRequest",
                   "error_rate": "errorRate", "drafts": "drafts"}
# decision label -> the reasons core/rollout/canary.py records with it: their series exist at 0 from the first
# export, so `increase()` (the SpecdeployRolloutFailed alert, the dashboard's annotations) sees the first
# decision of each kind too (a counter series born at 1 shows no increase).
ROLLOUT_REASONS = {ro.PROMOTE.lower(): (ro.PROMOTED,), ro.ROLLBACK.lower(): ro.ROLLBACK_REASONS}
ROLLOUT_DECISIONS = Counter(N.OP_ROLLOUT_DECISIONS,
                            "Canary rollout decisions (promote | rollback) by reason (the Rollout condition's).",
                            ROLLOUT_LABELS + ("decision", "reason"), registry=REGISTRY)
ROLLOUT_PHASE = Gauge(N.OP_ROLLOUT_PHASE, "1 for the rollout's current phase (status.rollout.phase), 0 for the others.",
                      ROLLOUT_LABELS + ("phase",), registry=REGISTRY)
ROLLOUT_ANALYSIS = Gauge(N.OP_ROLLOUT_ANALYSIS,
                         "The canary analysis behind the last verdict (status.rollout.analysis), per track and figure: "
                         "tau, tokens_per_second_per_request, error_rate, drafts.",
                         ROLLOUT_LABELS + ("track", "figure"), registry=REGISTRY)
# (namespace, name) -> the label tuples each family holds for it, so a deployment's series can be removed
_rollout_series: dict[tuple[str, str], dict[str, set[tuple[str, ...]]]] = {}


def _decision_label(decision: str) -> str:
    """status.rollout.decision.result (Promote | Rollback) or the label itself -> promote | rollback."""
    return str(decision).strip().lower()


def export_rollout(namespace: str, name: str, rollout_status: dict | None) -> None:
    """The rollout gauges of one SpeculativeDeployment from its status.rollout (ROLLOUT.md's shape).

    Phase: 1 for status.rollout.phase, 0 for every other phase. Analysis: one series per track and
    figure of the status.rollout.analysis rows that have a number (a figure the row lacks, or a track
    that is gone, loses its series). The decision counters of the known reasons are created at 0.
    ``None`` removes every rollout series of the deployment (no rollout configured, or the CR is gone).
    A pydantic model (api/types.py's RolloutStatus) is read as its camelCase dict."""
    if rollout_status is not None and hasattr(rollout_status, "model_dump"):  # the typed RolloutStatus
        rollout_status = rollout_status.model_dump(by_alias=True, exclude_none=True)
    key = (namespace, name)
    held = _rollout_series.setdefault(key, {"phase": set(), "analysis": set(), "decisions": set()})
    if rollout_status is None:
        for labels in held["phase"]:
            _remove(ROLLOUT_PHASE, labels)
        for labels in held["analysis"]:
            _remove(ROLLOUT_ANALYSIS, labels)
        for labels in held["decisions"]:
            _remove(ROLLOUT_DECISIONS, labels)
        _rollout_series.pop(key, None)
        return
    phase = rollout_status.get("phase")
    for p in ROLLOUT_PHASES + ((phase,) if phase and phase not in ROLLOUT_PHASES else ()):
        labels = (namespace, name, p)
        ROLLOUT_PHASE.labels(*labels).set(1 if p == phase else 0)
        held["phase"].add(labels)
    now: set[tuple[str, ...]] = set()
    for row in rollout_status.get("analysis") or []:
        track = row.get("track") if isinstance(row, dict) else None
        if not track:
            continue
        for figure, field in ROLLOUT_FIGURES.items():
            value = row.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            labels = (namespace, name, str(track), figure)
            ROLLOUT_ANALYSIS.labels(*labels).set(float(value))
            now.add(labels)
    for labels in held["analysis"] - now:
        _remove(ROLLOUT_ANALYSIS, labels)
    held["analysis"] = now
    for decision, reasons in ROLLOUT_REASONS.items():
        for reason in reasons:
            labels = (namespace, name, decision, reason)
            ROLLOUT_DECISIONS.labels(*labels)
            held["decisions"].add(labels)


def count_rollout_decision(namespace: str, name: str, decision: str, reason: str) -> None:
    """One recorded decision (``Promote``/``promote`` or ``Rollback``/``rollback``) with its reason."""
    labels = (namespace, name, _decision_label(decision), str(reason))
    ROLLOUT_DECISIONS.labels(*labels).inc()
    _rollout_series.setdefault((namespace, name), {"phase": set(), "analysis": set(), "decisions": set()}
                               )["decisions"].add(labels)


def _remove(metric, labels: tuple[str, ...]) -> None:
    try:
        metric.remove(*labels)
    except KeyError:  # never set
        pass
