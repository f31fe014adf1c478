"""The operator's own Prometheus metrics (served on /metrics by prometheus-client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter("specdeploy_reconcile_total", "Reconciles by result.", ["result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("specdeploy_reconcile_duration_seconds", "Time per reconcile.", registry=REGISTRY,
                              buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
ERRORS = Counter("specdeploy_reconcile_errors_total", "Reconciles that failed, by reason.", ["reason"], registry=REGISTRY)
API_WRITES = Counter("specdeploy_api_writes_total", "API writes by verb and kind.", ["verb", "kind"], registry=REGISTRY)
CHECK_FAILURES = Counter("specdeploy_check_failures_total", "Drafter/target check failures by first error code.",
                         ["code"], registry=REGISTRY)
QUEUE_DEPTH = Gauge("specdeploy_queue_depth", "Keys waiting in the work queue.", registry=REGISTRY)
MANAGED = Gauge("specdeploy_managed_deployments", "SpeculativeDeployments the operator watches.", registry=REGISTRY)


def count_write(verb: str, kind: str) -> None:
    API_WRITES.labels(verb=verb, kind=kind).inc()


def total_writes() -> float:
    return sum(s.value for m in API_WRITES.collect() for s in m.samples if s.name.endswith("_total"))
