"""Prometheus recording rules and alerts for speculative decoding (one source of truth).

``render_rules_yaml()`` is the plain Prometheus rule file (``groups:``) that
``specdeploy generate`` writes to ``charts/specdeploy/files/prometheus-rules.yaml``:
``promtool check/test rules`` read it as it is, and the chart's PrometheusRule template
embeds its ``groups``. Metric names come from ``specdeploy.core.acceptance``; the cliff
rule is the one ``acceptance.cliff_position`` implements.

One vocabulary for both engines, per deployment (labels ``namespace, job, model_name``
plus ``engine_kind="vllm"|"sglang"``):

- ``specdeploy:acceptance_length:rate5m``       tau = 1 + accepted/drafts (bonus included)
- ``specdeploy:acceptance_rate:rate5m``         accepted / draft tokens
- ``specdeploy:acceptance_per_position:rate5m`` accepted_at_position/drafts, label position (vLLM)
- ``specdeploy:acceptance_cliff:rate5m``        present (value: the lowest position rate)
                                                when the per-position rates have a cliff
- ``specdeploy:spec_drafts:rate5m`` (and ``_draft_tokens``, ``_accepted_tokens``,
  ``_accepted_tokens_per_position``): the vLLM counters' rates, summed over DP engines.

vLLM: rates of the counters over 5m, summed over every label but the aggregation labels
(DP engines, pods), then divided: so pods weigh by their drafts. SGLang: the gauges
averaged over 5m, averaged over tensor/pipeline/expert ranks within one (pod, dp_rank),
then averaged with equal weight over DP ranks and pods (gauges carry no draft counts).

Regression against the learned baseline (core/rollout/baseline.py) reads the operator's own gauges,
so Prometheus and ``status`` compare the same numbers (labels ``namespace, deployment,
engine, drafter``, plus ``job="<namespace>/<deployment>"``, the PodMonitor's job, so the
dashboards select them like the engines' series):

- ``specdeploy:acceptance_baseline:length``             the baseline tau
- ``specdeploy:acceptance_regression_threshold:length`` baseline x (1 - regressionFraction):
                                                        tau below it is ``AcceptanceRegressed``
- ``specdeploy:acceptance_length_over_baseline:ratio``  tau / baseline (1 = as learned)

The speculation guard (``spec.speculation.guard``, core/rollout/guard.py), per deployment:

- ``specdeploy:guard_max_concurrency:max``          the guard's limit (the operator's gauge, with ``job``)
- ``specdeploy:engine_requests_running:max_avg5m``  the most loaded engine's running requests (labels
                                                    ``namespace, job``), averaged over 5m
- alert ``SpecdeployPastCrossover``: the second at or above the first: the deployment runs where its
  benchmark measured speculation losing (vLLM >= 0.24 then drafts nothing; SGLang keeps drafting).

Canary rollouts (``spec.rollout``, core/rollout/canary.py), from the operator's rollout series (labels ``namespace,
deployment`` and ``job="<namespace>/<deployment>"``):

- ``specdeploy:rollout_analysis:max``          the canary analysis per ``track`` (stable | canary) and ``figure``
                                               (tau | tokens_per_second_per_request | error_rate | drafts)
- ``specdeploy:rollout_phase:max``             1 for the current ``phase``, 0 for the others
- ``specdeploy:rollout_decisions:increase2m``  decisions of the last 2m by ``decision`` and ``reason`` (the
                                               dashboard's promote/rollback annotations)
- alert ``SpecdeployRolloutFailed``: a canary rolled back in the last 15m (one alert per reason);
  ``SpecdeployRolloutStuck``: a rollout in Progressing, Analyzing or Promoting for an hour (the deadline,
  30m by default, should have decided long before).

Thresholds are recording rules of their own (group ``specdeploy.thresholds``, each
``vector(<number>)``): the chart renders that group from values, everything else is
embedded verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from ..core import acceptance as acc
from ..core.rollout import canary as ro
from ..core.names import OP_LEADER, OP_ROLLOUT_ANALYSIS, OP_ROLLOUT_DECISIONS, OP_ROLLOUT_PHASE, ROLLOUT_ANNOTATION

RULES_FILE = "charts/specdeploy/files/prometheus-rules.yaml"
RUNBOOK = "docs/how-to/troubleshoot-low-acceptance.md"
ROLLOUT_RUNBOOK = "docs/how-to/roll-out-safely.md"  # the rollout alerts' runbook

# Record names (the vocabulary).
LENGTH = "specdeploy:acceptance_length:rate5m"
RATE = "specdeploy:acceptance_rate:rate5m"
# 1 per SGLang deployment, label `source`: which series its LENGTH came from (sglangVerifyCalls | sglangAcceptLengthGauge)
LENGTH_SOURCE = "specdeploy:acceptance_length_source:info"
PER_POSITION = "specdeploy:acceptance_per_position:rate5m"
CLIFF = "specdeploy:acceptance_cliff:rate5m"
DRAFTS = "specdeploy:spec_drafts:rate5m"
DRAFT_TOKENS = "specdeploy:spec_draft_tokens:rate5m"
ACCEPTED = "specdeploy:spec_accepted_tokens:rate5m"
ACCEPTED_PER_POSITION = "specdeploy:spec_accepted_tokens_per_position:rate5m"
BASELINE = "specdeploy:acceptance_baseline:length"
BASELINE_RATIO = "specdeploy:acceptance_length_over_baseline:ratio"
REGRESSION_THRESHOLD = "specdeploy:acceptance_regression_threshold:length"
GUARD = "specdeploy:guard_max_concurrency:max"
REQUESTS_RUNNING = "specdeploy:engine_requests_running:max_avg5m"
ROLLOUT_ANALYSIS = "specdeploy:rollout_analysis:max"
ROLLOUT_PHASE = "specdeploy:rollout_phase:max"
ROLLOUT_DECISIONS = "specdeploy:rollout_decisions:increase2m"
T_MIN_LENGTH = "specdeploy:threshold:acceptance_min_length"
T_CLIFF_HIGH = "specdeploy:threshold:cliff_high"
T_CLIFF_LOW = "specdeploy:threshold:cliff_low"

# Group names.
G_THRESHOLDS = "specdeploy.thresholds"
G_VLLM = "specdeploy.acceptance.vllm"
G_SGLANG = "specdeploy.acceptance.sglang"
G_CLIFF = "specdeploy.acceptance.cliff"
G_REGRESSION = "specdeploy.acceptance.regression"
G_GUARD = "specdeploy.guard"
G_ROLLOUT = "specdeploy.rollout"
G_ALERTS = "specdeploy.alerts"

# Alert names.
A_COLLAPSED = "SpecdeployAcceptanceCollapsed"
A_CLIFF = "SpecdeployAcceptanceCliff"
A_REGRESSED = "SpecdeployAcceptanceRegressed"
A_MISSING = "SpecdeployMetricsMissing"
A_OPERATOR_DOWN = "SpecdeployOperatorDown"
A_NO_LEADER = "SpecdeployOperatorNoLeader"
A_PAST_CROSSOVER = "SpecdeployPastCrossover"
A_ROLLOUT_FAILED = "SpecdeployRolloutFailed"
A_ROLLOUT_STUCK = "SpecdeployRolloutStuck"
ALERTS = (A_COLLAPSED, A_REGRESSED, A_CLIFF, A_MISSING, A_OPERATOR_DOWN, A_NO_LEADER, A_PAST_CROSSOVER,
          A_ROLLOUT_FAILED, A_ROLLOUT_STUCK)
# Phases in which a rollout waits for a decision (status.rollout.phase): SpecdeployRolloutStuck's.
ROLLOUT_PENDING_PHASES = (ro.PHASE_PROGRESSING, ro.PHASE_ANALYZING, ro.PHASE_PROMOTING)
LEADER_METRIC = OP_LEADER  # controller/metrics.py LEADER


def _no_leader_for() -> str:
    """A healthy takeover takes up to leaseDuration + JitterFactor x retryPeriod (+ one retry): longer is an outage."""
    import math

    from ..core.lease import DEFAULT_TIMING as T, JITTER_FACTOR

    return f"{math.ceil(T.lease_duration + (1 + JITTER_FACTOR) * T.retry_period)}s"

# The job label of the operator's scrape target. The chart's metrics Service carries it as the
# label specdeploy.io/job (charts/) and its ServiceMonitor sets jobLabel: specdeploy.io/job, so
# prometheus-operator writes job="specdeploy-operator" for every release name (its
# generateServiceMonitorConfig: job = the jobLabel's Service label value, else the Service name).
OPERATOR_JOB = "specdeploy-operator"


@dataclass(frozen=True)
class RuleParams:
    min_length: float = acc.DEFAULT_MIN_LENGTH
    cliff_high: float = acc.CLIFF_HIGH
    cliff_low: float = acc.CLIFF_LOW
    window: str = "5m"  # the record names say 5m: change both together
    collapse_for: str = "10m"
    cliff_for: str = "10m"
    regression_for: str = "10m"
    missing_for: str = "15m"
    operator_down_for: str = "5m"
    no_leader_for: str = field(default_factory=_no_leader_for)
    crossover_for: str = "15m"
    rollout_failed_window: str = "15m"  # a rollback this recent fires SpecdeployRolloutFailed
    rollout_stuck_for: str = "1h"  # longer than the default deadline (30m) with room for a slow start
    aggregation: tuple[str, ...] = ("namespace", "job", "model_name")
    # Narrows the engine series the "metrics missing" alert looks at, e.g.
    # 'app_kubernetes_io_managed_by="specdeploy"' once the PodMonitor copies that label.
    engine_selector: str = ""
    operator_job: str = OPERATOR_JOB
    runbook_base: str = ""  # prefix of RUNBOOK in runbook_url (e.g. a repository URL ending in /)
    severity: str = "warning"
    operator_down_severity: str = "critical"
    extra_labels: dict[str, str] = field(default_factory=dict)


def _sel(selector: str, extra: str = "") -> str:
    parts = [p for p in (selector, extra) if p]
    return "{" + ",".join(parts) + "}" if parts else ""


def _by(p: RuleParams, *more: str) -> str:
    return ", ".join(p.aggregation + more)


def threshold_group(p: RuleParams) -> dict:
    return {"name": G_THRESHOLDS, "rules": [
        {"record": T_MIN_LENGTH, "expr": f"vector({p.min_length:g})"},
        {"record": T_CLIFF_HIGH, "expr": f"vector({p.cliff_high:g})"},
        {"record": T_CLIFF_LOW, "expr": f"vector({p.cliff_low:g})"},
    ]}


def vllm_group(p: RuleParams) -> dict:
    w, by = p.window, _by(p)
    kind = {"engine_kind": "vllm"}
    return {"name": G_VLLM, "rules": [
        {"record": DRAFTS, "expr": f"sum by ({by}) (rate({acc.VLLM_DRAFTS}[{w}]))"},
        {"record": DRAFT_TOKENS, "expr": f"sum by ({by}) (rate({acc.VLLM_DRAFT_TOKENS}[{w}]))"},
        {"record": ACCEPTED, "expr": f"sum by ({by}) (rate({acc.VLLM_ACCEPTED}[{w}]))"},
        {"record": ACCEPTED_PER_POSITION,
         "expr": f"sum by ({_by(p, acc.VLLM_POSITION_LABEL)}) (rate({acc.VLLM_ACCEPTED_PER_POS}[{w}]))"},
        {"record": LENGTH, "expr": f"1 + {ACCEPTED} / ({DRAFTS} > 0)", "labels": kind},
        {"record": RATE, "expr": f"{ACCEPTED} / ({DRAFT_TOKENS} > 0)", "labels": kind},
        {"record": PER_POSITION,
         "expr": f"{ACCEPTED_PER_POSITION} / on ({by}) group_left () ({DRAFTS} > 0)", "labels": kind},
    ]}


def sglang_group(p: RuleParams) -> dict:
    w, by = p.window, _by(p)
    inner = _by(p, "pod", acc.SGLANG_DP_LABEL)
    kind = {"engine_kind": "sglang"}

    def mean(metric: str) -> str:
        # 0 = no speculative step logged yet: left out, as in core/acceptance.py.
        return f"avg by ({by}) (avg by ({inner}) (avg_over_time({metric}[{w}]) > 0))"

    # SGLang's own per-request acceptance length (generated tokens per verification pass) from its counters,
    # summed over pods and ranks, where the release exports sglang:spec_verify_calls_total; the
    # spec_accept_length gauge otherwise (PromQL `or`: the left side wins per deployment).
    # LENGTH_SOURCE says which was used (core/acceptance.py SOURCE_*), as status.acceptance.source does.
    calls = f"sum by ({by}) (rate({acc.SGLANG_VERIFY_CALLS}[{w}]))"
    tokens = f"sum by ({by}) (rate({acc.SGLANG_GENERATION_TOKENS}[{w}]))"
    from_counters = f"{tokens}\n/ on ({by}) ({calls} > 0)"
    from_gauge = f"{mean(acc.SGLANG_ACCEPT_LENGTH)}\nunless on ({by}) ({calls} > 0)"
    return {"name": G_SGLANG, "rules": [
        {"record": LENGTH, "expr": f"({from_counters})\nor\n({from_gauge})", "labels": kind},
        {"record": RATE, "expr": mean(acc.SGLANG_ACCEPT_RATE), "labels": kind},
        {"record": LENGTH_SOURCE, "expr": f"({from_counters}) * 0 + 1",
         "labels": {**kind, "source": acc.SOURCE_SGLANG_COUNTERS}},
        {"record": LENGTH_SOURCE, "expr": f"({from_gauge}) * 0 + 1",
         "labels": {**kind, "source": acc.SOURCE_SGLANG_GAUGE}},
    ]}


def cliff_expr(p: RuleParams) -> str:
    """acceptance.cliff_position's rule in PromQL: position 0 >= high, some position < low,
    none in [low, high). Value: the lowest per-position rate."""
    by = _by(p, "engine_kind")
    on = _by(p)
    return (
        f"(min by ({by}) ({PER_POSITION}) < on () group_left () {T_CLIFF_LOW})\n"
        f"and on ({on})\n"
        f"({PER_POSITION}{{{acc.VLLM_POSITION_LABEL}=\"0\"}} >= on () group_left () {T_CLIFF_HIGH})\n"
        f"unless on ({on})\n"
        f"(({PER_POSITION} >= on () group_left () {T_CLIFF_LOW}) < on () group_left () {T_CLIFF_HIGH})"
    )


def cliff_group(p: RuleParams) -> dict:
    return {"name": G_CLIFF, "rules": [{"record": CLIFF, "expr": cliff_expr(p)}]}


OP_KEY = ", ".join(acc.OP_LABELS)


def _op(metric: str) -> str:
    """An operator gauge by deployment (max: one operator exports it; a second scrape of the
    same registry, e.g. two Prometheus jobs, must not double it)."""
    return f"max by ({OP_KEY}) ({metric})"


def _job(expr: str) -> str:
    """``job="<namespace>/<deployment>"`` added: the PodMonitor's job label for the same deployment."""
    return f'label_join({expr}, "job", "/", "namespace", "deployment")'


def regression_group(p: RuleParams) -> dict:
    return {"name": G_REGRESSION, "rules": [
        {"record": BASELINE, "expr": _job(_op(acc.OP_BASELINE))},
        {"record": REGRESSION_THRESHOLD,
         "expr": _job(f"{_op(acc.OP_BASELINE)} * (1 - {_op(acc.OP_REGRESSION_FRACTION)})")},
        {"record": BASELINE_RATIO, "expr": _job(f"{_op(acc.OP_LENGTH)} / {_op(acc.OP_BASELINE)}")},
    ]}


def guard_group(p: RuleParams) -> dict:
    running = f'{{__name__=~"{acc.VLLM_REQUESTS_RUNNING}|{acc.SGLANG_REQUESTS_RUNNING}"{"," + p.engine_selector if p.engine_selector else ""}}}'
    return {"name": G_GUARD, "rules": [
        {"record": GUARD, "expr": _job(_op(acc.OP_GUARD_MAX_CONCURRENCY))},
        # the batch is per engine (DP engine, pod): the most loaded one is where speculation loses first
        {"record": REQUESTS_RUNNING, "expr": f"max by (namespace, job) (avg_over_time({running}[{p.window}]))"},
    ]}


def _by_deployment(metric: str, *more: str) -> str:
    """A rollout series by deployment (max: one operator exports it; a second scrape must not double it)."""
    return f"max by ({', '.join(('namespace', 'deployment') + more)}) ({metric})"


def rollout_group(p: RuleParams) -> dict:
    # Decisions: summed over operator replicas (only the leader counts; a new leader counts from 0).
    decisions = f"sum by (namespace, deployment, decision, reason) (increase({OP_ROLLOUT_DECISIONS}[2m]))"
    return {"name": G_ROLLOUT, "rules": [
        {"record": ROLLOUT_ANALYSIS, "expr": _job(_by_deployment(OP_ROLLOUT_ANALYSIS, "track", "figure"))},
        {"record": ROLLOUT_PHASE, "expr": _job(_by_deployment(OP_ROLLOUT_PHASE, "phase"))},
        {"record": ROLLOUT_DECISIONS, "expr": _job(decisions)},
    ]}


def rollout_failed_expr(p: RuleParams) -> str:
    """A rollback decision in the last ``rollout_failed_window``, per deployment and reason. The operator
    creates the counters of the known reasons at 0 (controller/metrics.py), so increase() sees their first
    rollback; a series born above 0 (a reason it did not pre-create) counts while it is newer than the window."""
    w = p.rollout_failed_window
    d = f'{OP_ROLLOUT_DECISIONS}{{decision="rollback"}}'
    return _job(f"max by (namespace, deployment, reason) (\n"
                f"  increase({d}[{w}]) > 0\n"
                f"  or\n"
                f"  ({d} > 0 unless {d} offset {w})\n"
                f")")


def rollout_stuck_expr(p: RuleParams) -> str:
    phases = "|".join(ROLLOUT_PENDING_PHASES)
    return _job(_by_deployment(f'{OP_ROLLOUT_PHASE}{{phase=~"{phases}"}}', "phase") + " == 1")


def crossover_expr(p: RuleParams) -> str:
    """Running requests (5m average of the most loaded engine) at or above the guard: core/rollout/guard.past_crossover."""
    return f"{REQUESTS_RUNNING} >= on (namespace, job) group_left (deployment, engine, drafter) {GUARD}"


def regression_expr(p: RuleParams) -> str:
    """tau / baseline < 1 - regressionFraction: core/rollout/baseline.regressed, per deployment."""
    return f"{BASELINE_RATIO} < on ({OP_KEY}) group_left () (1 - {_op(acc.OP_REGRESSION_FRACTION)})"


def missing_expr(p: RuleParams) -> str:
    """Engine pods that export their ordinary metrics but no speculative-decoding signal:
    vLLM without the drafts counter, or generating tokens while not drafting; SGLang
    generating tokens without a non-zero spec_accept_length."""
    key = "namespace, job, pod"
    s = p.engine_selector
    w = p.window
    return (
        f"(group by ({key}) ({acc.VLLM_GENERATION_TOKENS}{_sel(s)})\n"
        f"  unless on ({key}) group by ({key}) ({acc.VLLM_DRAFTS}{_sel(s)}))\n"
        f"or\n"
        f"(group by ({key}) (rate({acc.VLLM_GENERATION_TOKENS}{_sel(s)}[{w}]) > 0)\n"
        f"  unless on ({key}) group by ({key}) (rate({acc.VLLM_DRAFTS}{_sel(s)}[{w}]) > 0))\n"
        f"or\n"
        f"(group by ({key}) (rate({acc.SGLANG_GENERATION_TOKENS}{_sel(s)}[{w}]) > 0)\n"
        f"  unless on ({key}) group by ({key}) ({acc.SGLANG_ACCEPT_LENGTH}{_sel(s)} > 0))"
    )


def _runbook(p: RuleParams, anchor: str, doc: str = RUNBOOK) -> str:
    return f"{p.runbook_base}{doc}#{anchor}"


def operator_up(p: RuleParams | None = None) -> str:
    """up of the operator's scrape targets: the alert's and the operator dashboard's selector."""
    return f'up{{job="{(p or RuleParams()).operator_job}"}}'


def alert_group(p: RuleParams) -> dict:
    labels = {"severity": p.severity, **p.extra_labels}
    where = "{{ $labels.namespace }}/{{ $labels.job }}"
    op_sel = operator_up(p)
    return {"name": G_ALERTS, "rules": [
        {"alert": A_COLLAPSED,
         "expr": f"{LENGTH} < on () group_left () {T_MIN_LENGTH}",
         "for": p.collapse_for, "labels": dict(labels),
         "annotations": {
             "summary": f"Speculative decoding acceptance collapsed on {where}",
             "description": ("Acceptance length (tau, bonus token included) is {{ $value | printf \"%.2f\" }} on "
                             f"{where} ({{{{ $labels.engine_kind }}}}), below the minimum ({T_MIN_LENGTH}) for "
                             f"{p.collapse_for}: the drafter's tokens are almost never accepted. Output is "
                             "still correct, only the speed-up is lost."),
             "runbook_url": _runbook(p, "acceptance-collapsed")}},
        {"alert": A_REGRESSED,
         "expr": regression_expr(p),
         "for": p.regression_for, "labels": dict(labels),
         "annotations": {
             "summary": ("Speculative acceptance regressed on {{ $labels.namespace }}/{{ $labels.deployment }}"),
             "description": ("Acceptance length on {{ $labels.namespace }}/{{ $labels.deployment }} "
                             "({{ $labels.engine }}, drafter {{ $labels.drafter }}) is {{ $value | printf \"%.2f\" }} "
                             "times the baseline it settled at (status.acceptance.baseline), below 1 - "
                             f"spec.monitoring.regressionFraction for {p.regression_for}. Likely causes: a drafter, engine or "
                             "speculation change (e.g. target_layer_ids shifted by one), or traffic that drafts worse; "
                             "output is still correct, only speed is lost. SpeculationHealthy says "
                             "AcceptanceRegressed with both numbers."),
             "runbook_url": _runbook(p, "acceptance-regressed")}},
        {"alert": A_CLIFF,
         "expr": CLIFF,
         "for": p.cliff_for, "labels": dict(labels),
         "annotations": {
             "summary": f"Speculative acceptance falls off a cliff after some draft position on {where}",
             "description": (f"Per-position acceptance on {where} drops from at least {T_CLIFF_HIGH} to "
                             f"below {T_CLIFF_LOW} (lowest {{{{ $value | printf \"%.3f\" }}}}) from one "
                             "draft position to the next, with no position in between."),
             "runbook_url": _runbook(p, "acceptance-cliff")}},
        {"alert": A_MISSING,
         "expr": missing_expr(p),
         "for": p.missing_for, "labels": dict(labels),
         "annotations": {
             "summary": "Engine pod {{ $labels.namespace }}/{{ $labels.pod }} exports no speculative-decoding metrics",
             "description": ("{{ $labels.pod }} ({{ $labels.job }}) is up and exports engine metrics but no "
                             "speculative-decoding acceptance: speculation is off, misconfigured, or its "
                             "metrics are not enabled (SGLang needs --enable-metrics)."),
             "runbook_url": _runbook(p, "metrics-missing")}},
        {"alert": A_OPERATOR_DOWN,
         "expr": f"{op_sel} == 0 or absent({op_sel})",
         "for": p.operator_down_for,
         "labels": {**labels, "severity": p.operator_down_severity},
         "annotations": {
             "summary": "The specdeploy operator is down or not scraped",
             "description": (f"No specdeploy operator target is up (job=\"{p.operator_job}\") "
                             f"for {p.operator_down_for}: SpeculativeDeployments are not reconciled and "
                             "acceptance is not watched."),
             "runbook_url": _runbook(p, "operator-down")}},
        {"alert": A_NO_LEADER,
         "expr": f'max by (namespace) ({LEADER_METRIC}{{job="{p.operator_job}"}}) < 1',
         "for": p.no_leader_for,
         "labels": {**labels, "severity": p.operator_down_severity},
         "annotations": {
             "summary": "No specdeploy operator replica holds the leader Lease in {{ $labels.namespace }}",
             "description": (f"Operator replicas are up but none has led for {p.no_leader_for} (longer than a "
                             "takeover takes: leaseDuration plus retries): nothing reconciles, admission still "
                             "answers. A replica that cannot reach the API server, or Lease RBAC, is the usual "
                             "cause (docs/concepts/high-availability.md)."),
             "runbook_url": _runbook(p, "operator-no-leader")}},
        {"alert": A_PAST_CROSSOVER,
         "expr": crossover_expr(p),
         "for": p.crossover_for, "labels": dict(labels),
         "annotations": {
             "summary": "{{ $labels.namespace }}/{{ $labels.deployment }} runs past its speculation crossover",
             "description": ("The most loaded engine of {{ $labels.namespace }}/{{ $labels.deployment }} "
                             "({{ $labels.engine }}) averages {{ $value | printf \"%.1f\" }} running requests, at or "
                             "above spec.speculation.guard's limit, for " + p.crossover_for + ": where its benchmark "
                             "measured speculation losing throughput. vLLM >= 0.24 drafts nothing at that batch size "
                             "(num_speculative_tokens_per_batch_size); SGLang keeps drafting. SpeculationProfitable "
                             "says PastCrossover. Scale out, or rerun the SpeculativeBenchmark if the load is the new "
                             "normal (docs/how-to/tune-speculation.md)."),
             "runbook_url": _runbook(p, "past-the-crossover")}},
        {"alert": A_ROLLOUT_FAILED,
         "expr": rollout_failed_expr(p),
         "labels": dict(labels),
         "annotations": {
             "summary": ("Canary of {{ $labels.namespace }}/{{ $labels.deployment }} rolled back: "
                         "{{ $labels.reason }}"),
             "description": ("The canary revision of {{ $labels.namespace }}/{{ $labels.deployment }} was rolled "
                             "back (reason {{ $labels.reason }}) in the last " + p.rollout_failed_window + ": the "
                             "stable revision keeps serving, the refused revision is not retried until the spec "
                             "changes or the " + ROLLOUT_ANNOTATION + " annotation says retry. The Rollout condition's "
                             "message has the numbers; `specdeploy rollout status {{ $labels.deployment }} -n "
                             "{{ $labels.namespace }}` prints the analysis table."),
             "runbook_url": _runbook(p, "when-a-canary-is-rolled-back", ROLLOUT_RUNBOOK)}},
        {"alert": A_ROLLOUT_STUCK,
         "expr": rollout_stuck_expr(p),
         "for": p.rollout_stuck_for, "labels": dict(labels),
         "annotations": {
             "summary": ("Rollout of {{ $labels.namespace }}/{{ $labels.deployment }} stuck in "
                         "{{ $labels.phase }}"),
             "description": ("The rollout of {{ $labels.namespace }}/{{ $labels.deployment }} has been in phase "
                             "{{ $labels.phase }} for " + p.rollout_stuck_for + " without a decision. "
                             "spec.rollout.deadline (30m by default) should have decided: canary pods that never "
                             "become ready, a stable Deployment that does not finish rolling, or an operator that "
                             "does not reconcile. A deadline set longer than " + p.rollout_stuck_for + " also "
                             "fires this."),
             "runbook_url": _runbook(p, "when-a-rollout-is-stuck", ROLLOUT_RUNBOOK)}},
    ]}


def build_groups(params: RuleParams | None = None) -> list[dict[str, Any]]:
    p = params or RuleParams()
    return [threshold_group(p), vllm_group(p), sglang_group(p), cliff_group(p), regression_group(p), guard_group(p),
            rollout_group(p), alert_group(p)]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, s: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)

HEADER = ("# Generated by `specdeploy generate` from operator/specdeploy/observability/rules.py. Do not edit.\n"
          "# Plain Prometheus rule file: `promtool check rules` reads it as it is; the chart's\n"
          "# PrometheusRule embeds its groups (the thresholds group is rendered from values).\n")


def render_rules_yaml(params: RuleParams | None = None) -> str:
    body = yaml.dump({"groups": build_groups(params)}, Dumper=_Dumper, sort_keys=False, width=1000,
                     default_flow_style=False)
    return HEADER + body


def write(path: str = RULES_FILE) -> None:
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(render_rules_yaml())


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_rules_yaml())
