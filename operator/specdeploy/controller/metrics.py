"""The operator's own Prometheus metrics (served on /metrics by prometheus-client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..core import acceptance as acc
from ..core import names as N

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
# The baseline the monitor judges regressions against (core/baseline.py; status.acceptance.baseline)
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
