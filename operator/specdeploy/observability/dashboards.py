"""The Grafana dashboards the chart ships (one source of truth: Python dicts, rendered to JSON).

``DASHBOARDS`` lists them; ``specdeploy generate`` writes each to
``charts/specdeploy/files/dashboards/<name>.json`` (``dashboard_files()``), and the chart
ships every file there in a ConfigMap labelled ``grafana_dashboard: "1"`` (what Grafana's
dashboard sidecar watches for).

- ``speculative-decoding`` (uid ``specdeploy-acceptance``): acceptance length over time per
  deployment, acceptance rate, the per-position acceptance heatmap and bars, draft vs
  accepted tokens per second, drafts per second, SGLang's raw gauges by rank, speculation
  alerts (pending and firing), tau against the learned baseline and its regression threshold,
  and the operator's tau / baseline ratio; a *Rollout* row (``spec.rollout`` Canary): stable vs canary
  tau and output tokens/s per running request from the canary analysis, the rollout phase over time,
  and dashboard annotations at each promote and rollback. Reads only the ``specdeploy:*`` vocabulary
  of ``rules.py``, so one dashboard serves vLLM and SGLang deployments.
- ``engines`` (uid ``specdeploy-engines``): generation throughput, time to first token and
  inter-token latency (p50/p95 from the engines' histograms), running and waiting
  requests, GPU utilisation and framebuffer memory (DCGM exporter series joined to the
  deployment's pods on ``namespace, pod``).
- ``operator`` (uid ``specdeploy-operator``): the operator's health: up, managed
  deployments, work-queue depth, reconciles by result, reconcile latency quantiles,
  errors by reason, API writes, drafter/target check failures. Every query selects
  ``job="specdeploy-operator"`` (the chart's ServiceMonitor jobLabel, ``rules.OPERATOR_JOB``)
  and ``$namespace`` (where the operator runs).

Every query filters by the template variables ``$namespace`` and ``$deployment`` (the
``job`` label: ``<namespace>/<PodMonitor name>`` with a PodMonitor, i.e. the
SpeculativeDeployment) where the series carry them; ``$datasource`` picks the Prometheus.
Rates over raw counters use ``$__rate_interval``; the recording rules are already 5m rates.
Rendering is deterministic (same input, same bytes): ``render_dashboard_json(name)``.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..core import acceptance as acc
from ..core.rollout import baseline as bl
from ..core.rollout import canary as ro
from ..core.acceptance import (SGLANG_ITL, SGLANG_THROUGHPUT, SGLANG_TTFT, SGLANG_WAITING, VLLM_ITL, VLLM_TTFT,
                               VLLM_WAITING)
from ..core.names import (OP_API_WRITES, OP_CHECK_FAILURES, OP_ERRORS, OP_LEADER,  # noqa: F401 (D.OP_* in tests)
                          OP_LEADER_TRANSITIONS, OP_MANAGED, OP_QUEUE_DEPTH, OP_RECONCILE_SECONDS, OP_RECONCILES)
from . import rules as R

DASHBOARDS_DIR = "charts/specdeploy/files/dashboards"
DASHBOARD_FILE = f"{DASHBOARDS_DIR}/speculative-decoding.json"  # the acceptance dashboard (kept for callers)
UID = "specdeploy-acceptance"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace", job=~"$deployment"'
RI = "$__rate_interval"
# The job label of the operator's ServiceMonitor target (the one the operator-down alert selects).
OPERATOR_JOB = R.OPERATOR_JOB

# Engine series: core/acceptance.py (names as vLLM 0.33 / SGLang 0.5 export them; see
# docs/reference/metrics.md); the operator's own series: core/names.py.
# DCGM exporter (default counters): gauges, labels gpu, UUID, device, modelName, Hostname,
# pci_bus_id, DCGM_FI_DRIVER_VERSION, plus container/namespace/pod with Kubernetes mapping.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
# Engine pods of a deployment: every engine pod exports one of these (scraped by the PodMonitor).
ENGINE_UP = f'{{__name__=~"{acc.VLLM_REQUESTS_RUNNING}|{acc.SGLANG_REQUESTS_RUNNING}"}}'
ENGINE_PODS = (f'group by (namespace, pod, job) ({{__name__=~"{acc.VLLM_REQUESTS_RUNNING}|'
               f'{acc.SGLANG_REQUESTS_RUNNING}", {SEL}}})')


# Why the acceptance dashboard can be empty (its panels and variables read the recording rules only).
NEEDS_RULES = (f"Empty? Its series ({R.LENGTH} and the other specdeploy:* series) are recording rules: they exist "
               "only when the chart's PrometheusRule is installed (prometheusRule.enabled=true) and your Prometheus "
               "loads it (prometheusRule.labels matching its ruleSelector), and the engines are scraped (the "
               "operator's PodMonitor, podMonitor.labels matching its podMonitorSelector).")


def _target(expr: str, legend: str, ref: str = "A", **extra: Any) -> dict:
    return {"datasource": dict(DS), "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def _panel(pid: int, title: str, description: str, targets: list[dict], x: int, y: int, w: int = 12, h: int = 8,
           kind: str = "timeseries", unit: str = "short", thresholds: list[tuple[str, float | None]] | None = None,
           extra: dict | None = None, minmax: tuple[float | None, float | None] = (None, None)) -> dict:
    steps = [{"color": c, "value": v} for c, v in (thresholds or [("green", None)])]
    defaults: dict[str, Any] = {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}}
    if minmax[0] is not None:
        defaults["min"] = minmax[0]
    if minmax[1] is not None:
        defaults["max"] = minmax[1]
    p: dict[str, Any] = {
        "id": pid, "type": kind, "title": title, "description": description,
        "datasource": dict(DS),
        "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
    }
    if extra:
        p.update(extra)
    return p


def _row(pid: int, title: str, y: int) -> dict:
    return {"id": pid, "type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}


def _datasource_var() -> dict:
    return {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source",
            "current": {}, "hide": 0, "includeAll": False, "multi": False, "refresh": 1}


def _query_var(name: str, label: str, query: str) -> dict:
    """A multi-value Prometheus query variable; All means every value the query returns."""
    return {"name": name, "label": label, "type": "query", "datasource": dict(DS), "refresh": 2,
            "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}, "hide": 0,
            "sort": 1, "query": {"query": query, "refId": f"{name}-variable"}}


def _scope_vars(series: str) -> list[dict]:
    """datasource, namespace, deployment: read from `series` (a metric name or a selector)."""
    inner = series[1:-1] if series.startswith("{") else ""
    ns_sel = f"{{{inner}, namespace=~\"$namespace\"}}" if inner else f'{series}{{namespace=~"$namespace"}}'
    return [_datasource_var(),
            _query_var("namespace", "Namespace", f"label_values({series}, namespace)"),
            _query_var("deployment", "Deployment", f"label_values({ns_sel}, job)")]


def _dashboard(uid: str, title: str, description: str, tags: list[str], variables: list[dict],
               panels: list[dict], annotations: list[dict] | None = None) -> dict:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["specdeploy", *tags],
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "timezone": "",
        "annotations": {"list": annotations or []},  # Grafana adds its built-in "Annotations & Alerts" itself
        "links": [{"title": "specdeploy dashboards", "type": "dashboards", "tags": ["specdeploy"], "asDropdown": True,
                   "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": panels,
    }


# ----------------------------------------------------------------- speculative decoding


def build_acceptance_dashboard() -> dict:
    lo = acc.DEFAULT_MIN_LENGTH
    who = "{{namespace}}/{{job}} ({{engine_kind}})"
    padded = (f'label_replace({R.PER_POSITION}{{{SEL}}}, "position", "0$1", "position", "([0-9])")')
    panels = [
        _panel(1, "Acceptance length (tau)",
               "Tokens per speculative step, bonus token included (1 <= tau <= block size), per deployment: vLLM "
               "1 + accepted/drafts; SGLang generated tokens per verification pass (sglang:spec_verify_calls_total, "
               "source sglangVerifyCalls) or, on releases without that counter, its spec_accept_length gauge (source "
               f"sglangAcceptLengthGauge): {R.LENGTH_SOURCE} says which. Healthy DFlash: ~4 (chat) to ~6 (math). "
               f"Below {lo:g} for 10m fires {R.A_COLLAPSED}. {NEEDS_RULES}",
               [_target(f"{R.LENGTH}{{{SEL}}}", who), _target(R.T_MIN_LENGTH, "collapse threshold", "B")],
               0, 0, thresholds=[("red", None), ("orange", lo), ("green", 2.5)]),
        _panel(2, "Acceptance rate", "Accepted / draft tokens (vLLM counters; SGLang's spec_accept_rate gauge).",
               [_target(f"{R.RATE}{{{SEL}}}", who)], 12, 0, unit="percentunit", minmax=(0, 1)),
        _panel(3, "Per-position acceptance heatmap (vLLM)",
               "accepted_at_position_k / drafts over time, one row per draft position (00 = the first draft token). "
               "Cumulative, so it darkens with k. Smooth decay is normal; a row going from "
               f">= {acc.CLIFF_HIGH:g} straight to < {acc.CLIFF_LOW:g} below it is a cliff ({R.A_CLIFF}).",
               [_target(f"avg by (position) ({padded})", "{{position}}")], 0, 8, kind="heatmap",
               unit="percentunit",
               extra={"options": {"calculate": False, "rowsFrame": {"layout": "auto", "value": "acceptance"},
                                  "yAxis": {"axisPlacement": "left", "axisLabel": "draft position"},
                                  "color": {"mode": "scheme", "scheme": "RdYlGn", "steps": 64, "min": 0, "max": 1,
                                            "exponent": 0.5, "fill": "dark-orange", "reverse": False},
                                  "cellGap": 1, "showValue": "never", "legend": {"show": True}}}),
        _panel(4, "Per-position acceptance now (vLLM)", "The latest per-position rates as bars, by position.",
               [_target(f"avg by (position) ({padded})", "{{position}}", format="table", instant=True)], 12, 8,
               kind="barchart", unit="percentunit", minmax=(0, 1),
               extra={"options": {"xField": "position", "orientation": "vertical"}}),
        _panel(5, "Draft vs accepted tokens per second (vLLM)",
               "Draft tokens proposed and accepted per second (5m rates, summed over the deployment's engines). "
               "The gap is the drafter's wasted work; accepted/draft is the acceptance rate.",
               [_target(f"{R.DRAFT_TOKENS}{{{SEL}}}", "{{namespace}}/{{job}} draft"),
                _target(f"{R.ACCEPTED}{{{SEL}}}", "{{namespace}}/{{job}} accepted", "B")], 0, 16, unit="tps"),
        _panel(6, "Drafts per second (vLLM)", "Speculative steps per second: zero means no traffic, not a problem.",
               [_target(f"{R.DRAFTS}{{{SEL}}}", "{{namespace}}/{{job}}")], 12, 16, unit="ops"),
        _panel(7, "Raw SGLang gauges by rank",
               "sglang:spec_accept_length per rank. TP ranks of one DP rank agree; a rank that differs points at one "
               "replica.",
               [_target(f"{acc.SGLANG_ACCEPT_LENGTH}{{{SEL}}}", "{{pod}} dp{{dp_rank}} tp{{tp_rank}}")], 0, 24),
        _panel(8, "Speculation alerts", "specdeploy alerts, pending and firing (alertstate column).",
               [_target('ALERTS{alertname=~"Specdeploy.*"}',
                        "{{alertname}} {{alertstate}} {{namespace}}/{{job}}", format="table", instant=True)],
               12, 24, kind="table"),
        _panel(9, "Acceptance length vs baseline",
               "tau (engines, 5m) against the baseline the deployment settled at (status.acceptance.baseline, "
               "exported by the operator) and the regression threshold, baseline x (1 - "
               f"spec.monitoring.regressionFraction). tau under the threshold for 10m fires {R.A_REGRESSED}; "
               "after a drafter, engine or speculation change the baseline of the previous revision stays until the "
               "new one settles within the fraction, so a change that costs acceptance shows here as a gap.",
               [_target(f"{R.LENGTH}{{{SEL}}}", "{{namespace}}/{{job}} tau"),
                _target(f"{R.BASELINE}{{{SEL}}}", "{{namespace}}/{{job}} baseline", "B"),
                _target(f"{R.REGRESSION_THRESHOLD}{{{SEL}}}", "{{namespace}}/{{job}} regression threshold", "C")],
               0, 32),
        _panel(10, "Acceptance length / baseline (operator)",
               "The operator's tau over its baseline, what the regression alert compares with 1 - "
               "spec.monitoring.regressionFraction (0.75 by default): 1 = as learned.",
               [_target(f"{R.BASELINE_RATIO}{{{SEL}}}", "{{namespace}}/{{job}}")], 12, 32, unit="percentunit",
               thresholds=[("red", None), ("orange", 1 - bl.DEFAULT_REGRESSION_FRACTION), ("green", 0.9)]),
        *rollout_panels(40),
    ]
    return _dashboard(UID, "specdeploy / Speculative decoding",
                      "Speculative-decoding acceptance of SpeculativeDeployments (vLLM and SGLang), from the "
                      f"specdeploy recording rules. {NEEDS_RULES}", ["speculative-decoding"], _scope_vars(R.LENGTH),
                      panels, rollout_annotations())


# Rollout phases (status.rollout.phase) as the numbers of the phase timeline, in order.
ROLLOUT_PHASES = ro.PHASES
ROLLOUT_PHASE_COLORS = ("green", "blue", "yellow", "purple", "red")


def rollout_phase_expr() -> str:
    """One number per deployment: the index of its current phase in ROLLOUT_PHASES (the timeline maps it back)."""
    parts = [f'({R.ROLLOUT_PHASE}{{{SEL}, phase="{p}"}} == 1) * {i}' for i, p in enumerate(ROLLOUT_PHASES)]
    return "max by (namespace, job) (\n  " + "\nor\n  ".join(parts) + "\n)"


def _annotation(name: str, decision: str, color: str, title: str) -> dict:
    """A Prometheus annotation query: an event where the deployment's decisions of this kind increased."""
    return {"name": name, "datasource": dict(DS), "enable": True, "hide": False, "iconColor": color,
            "expr": f'{R.ROLLOUT_DECISIONS}{{{SEL}, decision="{decision}"}} > 0', "step": "1m",
            "titleFormat": title, "textFormat": "{{reason}}", "tagKeys": "job,decision,reason",
            "useValueForTime": False}


def rollout_annotations() -> list[dict]:
    return [_annotation("Rollout promoted", "promote", "green", "{{job}}: canary promoted"),
            _annotation("Rollout rolled back", "rollback", "red", "{{job}}: canary rolled back ({{reason}})")]


def rollout_panels(y: int) -> list[dict]:
    who = "{{job}} {{track}}"
    analysis = ("From the operator's canary analysis (status.rollout.analysis, specdeploy_rollout_analysis), "
                "counted over each track's pods since the analysis started, as judged; exists only while a "
                "SpeculativeDeployment with spec.rollout.strategy Canary has an analysis.")
    mappings = [{"type": "value", "options": {str(i): {"text": p, "color": c, "index": i}
                                              for i, (p, c) in enumerate(zip(ROLLOUT_PHASES, ROLLOUT_PHASE_COLORS))}}]
    return [
        _row(102, "Rollout (canary analysis)", y),
        _panel(11, "Rollout: tau, stable vs canary",
               f"Acceptance length of the stable and canary revisions during a canary. {analysis} The canary is "
               "rolled back when its tau falls below spec.rollout.analysis.minAcceptanceRatio of the stable's "
               f"(AcceptanceBelowStable, {R.A_ROLLOUT_FAILED}).",
               [_target(f'{R.ROLLOUT_ANALYSIS}{{{SEL}, figure="tau"}}', who)], 0, y + 1),
        _panel(12, "Rollout: output tokens/s per running request, stable vs canary",
               f"Output tokens per second per running request of each revision. {analysis} Judged against "
               "spec.rollout.analysis.minThroughputRatio (ThroughputBelowStable).",
               [_target(f'{R.ROLLOUT_ANALYSIS}{{{SEL}, figure="tokens_per_second_per_request"}}', who)],
               12, y + 1),
        _panel(13, "Rollout phase",
               "status.rollout.phase over time, per deployment: Stable, Progressing (canary pods starting), "
               "Analyzing, Promoting, RolledBack. The dashboard's annotations mark each promote and rollback "
               f"(from specdeploy_rollout_decisions_total); {R.A_ROLLOUT_STUCK} fires after an hour without a "
               "decision.",
               [_target(rollout_phase_expr(), "{{job}}")], 0, y + 9, w=24, h=5,
               kind="state-timeline", extra={"fieldConfig": {"defaults": {
                   "unit": "short", "mappings": mappings, "color": {"mode": "thresholds"},
                   "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]}},
                   "overrides": []}}),
    ]


# ----------------------------------------------------------------- engines and GPUs


def _quantiles(metric: str, engine: str, ref: str) -> list[dict]:
    out = []
    for i, q in enumerate((0.5, 0.95)):
        expr = f"histogram_quantile({q:g}, sum by (namespace, job, le) (rate({metric}_bucket{{{SEL}}}[{RI}])))"
        out.append(_target(expr, f"{{{{job}}}} p{int(q * 100)} ({engine})", chr(ord(ref) + i)))
    return out


def _per_gpu(expr: str) -> str:
    """A DCGM expression per GPU, joined to the deployment's engine pods (label job from them)."""
    return (f"avg by (namespace, pod, gpu, modelName) ({expr})\n"
            f"* on (namespace, pod) group_left (job)\n{ENGINE_PODS}")


def build_engines_dashboard() -> dict:
    dsel = 'namespace=~"$namespace"'
    gpu_legend = "{{job}} {{pod}} GPU {{gpu}}"
    gpu_note = (" DCGM exporter series, joined to the deployment's engine pods on namespace and pod: needs the "
                "exporter's Kubernetes pod mapping (on by default in the GPU operator) and honorLabels on its "
                "ServiceMonitor so pod/namespace are the workload's. Multi-node deployments show the leader pod.")
    panels = [
        _row(100, "Throughput and latency", 0),
        _panel(1, "Generation throughput",
               "Output tokens per second per deployment (vLLM: rate of vllm:generation_tokens_total; SGLang: its "
               "gen_throughput gauge, one per data-parallel rank (tensor-parallel ranks repeat it), summed).",
               [_target(f"sum by (namespace, job) (rate({acc.VLLM_GENERATION_TOKENS}{{{SEL}}}[{RI}]))",
                        "{{namespace}}/{{job}} (vLLM)"),
                _target(f"sum by (namespace, job) (max by (namespace, job, pod, dp_rank) "
                        f"({SGLANG_THROUGHPUT}{{{SEL}}}))", "{{namespace}}/{{job}} (SGLang)", "B")],
               0, 1, unit="tps"),
        _panel(2, "Running and waiting requests",
               "Requests in the running batch and in the waiting queue, per deployment. A growing queue with a "
               "full batch means the deployment is saturated.",
               [_target(f"sum by (namespace, job) ({acc.VLLM_REQUESTS_RUNNING}{{{SEL}}})",
                        "{{job}} running (vLLM)"),
                _target(f"sum by (namespace, job) ({VLLM_WAITING}{{{SEL}}})", "{{job}} waiting (vLLM)", "B"),
                _target(f"sum by (namespace, job) (max by (namespace, job, pod, dp_rank) "
                        f"({acc.SGLANG_REQUESTS_RUNNING}{{{SEL}}}))", "{{job}} running (SGLang)", "C"),
                _target(f"sum by (namespace, job) (max by (namespace, job, pod, dp_rank) "
                        f"({SGLANG_WAITING}{{{SEL}}}))", "{{job}} waiting (SGLang)", "D")],
               12, 1),
        _panel(3, "Time to first token",
               "p50 and p95 of the time from request arrival to the first output token (engine histograms).",
               _quantiles(VLLM_TTFT, "vLLM", "A") + _quantiles(SGLANG_TTFT, "SGLang", "C"), 0, 9, unit="s"),
        _panel(4, "Inter-token latency",
               "p50 and p95 of the time between output tokens. Speculative decoding lowers it by about the "
               "acceptance length; a collapse shows up here as a jump.",
               _quantiles(VLLM_ITL, "vLLM", "A") + _quantiles(SGLANG_ITL, "SGLang", "C"), 12, 9, unit="s"),
        _row(101, "GPUs (DCGM exporter)", 17),
        _panel(5, "GPU utilisation", "DCGM_FI_DEV_GPU_UTIL per GPU of the deployment's pods." + gpu_note,
               [_target(_per_gpu(f"{DCGM_GPU_UTIL}{{{dsel}}}"), gpu_legend)], 0, 18, unit="percent",
               minmax=(0, 100)),
        _panel(6, "GPU memory used", "Framebuffer used / (used + free) per GPU of the deployment's pods. The "
               "engines preallocate the KV cache, so this sits near the configured memory fraction." + gpu_note,
               [_target(_per_gpu(f"{DCGM_FB_USED}{{{dsel}}} / ({DCGM_FB_USED}{{{dsel}}} + "
                                 f"{DCGM_FB_FREE}{{{dsel}}})"), gpu_legend)],
               12, 18, unit="percentunit", minmax=(0, 1),
               thresholds=[("green", None), ("orange", 0.95), ("red", 0.99)]),
    ]
    return _dashboard("specdeploy-engines", "specdeploy / Engines and GPUs",
                      "Throughput, latency, queues and GPUs of SpeculativeDeployments (vLLM and SGLang engines, "
                      "DCGM exporter).", ["engines", "gpu"], _scope_vars(ENGINE_UP), panels)


# ----------------------------------------------------------------- operator


def build_operator_dashboard() -> dict:
    """Every query selects the chart's scrape job (rules.OPERATOR_JOB) and the $namespace the
    operator runs in (one value per installed release)."""
    osel = f'job="{OPERATOR_JOB}", namespace=~"$namespace"'
    up = f"up{{{osel}}}"
    rec, dur, err = (f"{m}{{{osel}}}" for m in (OP_RECONCILES, OP_RECONCILE_SECONDS + "_bucket", OP_ERRORS))
    writes, checks, queue, managed = (f"{m}{{{osel}}}" for m in (OP_API_WRITES, OP_CHECK_FAILURES, OP_QUEUE_DEPTH,
                                                                   OP_MANAGED))
    stat = {"options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "none", "textMode": "value_and_name"}}
    quantiles = [_target(f"histogram_quantile({q:g}, sum by (le) (rate({dur}[{RI}])))", f"p{int(q * 100)}",
                         chr(ord("A") + i)) for i, q in enumerate((0.5, 0.95, 0.99))]
    panels = [
        _panel(1, "Operator up", f"up of the operator's scrape targets (job=\"{OPERATOR_JOB}\", the chart's "
               f"ServiceMonitor jobLabel): 1 = scraped. {R.A_OPERATOR_DOWN} fires after 5m at 0 or absent.",
               [_target(up, "{{namespace}}/{{pod}}", instant=True)], 0, 0, w=6, h=5, kind="stat",
               thresholds=[("red", None), ("green", 1)], extra=stat),
        _panel(2, "Managed SpeculativeDeployments", "SpeculativeDeployments the operator watches.",
               [_target(f"max({managed})", "managed", instant=True)], 6, 0, w=6, h=5, kind="stat", extra=stat),
        _panel(3, "Work queue depth", "Keys waiting in the operator's work queue: a queue that keeps growing "
               "means reconciles are slower than changes.",
               [_target(f"sum({queue})", "queued")], 12, 0, h=5),
        _panel(4, "Reconciles per second by result", f"rate of {OP_RECONCILES}, by result.",
               [_target(f"sum by (result) (rate({rec}[{RI}]))", "{{result}}")], 0, 5, unit="ops"),
        _panel(5, "Reconcile duration", f"p50, p95 and p99 of {OP_RECONCILE_SECONDS}.", quantiles, 12, 5, unit="s"),
        _panel(6, "Reconcile errors by reason", f"rate of {OP_ERRORS}, by reason: anything above 0 for long needs a "
               "look at the SpeculativeDeployment's conditions and the operator log.",
               [_target(f"sum by (reason) (rate({err}[{RI}]))", "{{reason}}")], 0, 13, w=8, unit="ops",
               thresholds=[("green", None), ("red", 0.001)]),
        _panel(7, "API writes per second", f"rate of {OP_API_WRITES} by verb and kind: steady writes with no spec "
               "changes point at a reconcile loop that never converges.",
               [_target(f"sum by (verb, kind) (rate({writes}[{RI}]))", "{{verb}} {{kind}}")], 8, 13, w=8,
               unit="ops"),
        _panel(8, "Drafter/target check failures",
               f"rate of {OP_CHECK_FAILURES} by first error code (see the check catalog).",
               [_target(f"sum by (code) (rate({checks}[{RI}]))", "{{code}}")], 16, 13, w=8, unit="ops"),
        _panel(9, "Leader", f"{OP_LEADER} per replica: 1 = holds the leader Lease (reconciles, runs the acceptance "
               f"monitor); every replica serves the admission webhooks. {R.A_NO_LEADER} fires when replicas are up "
               "and none leads for longer than a takeover takes.",
               [_target(f'max by (namespace, pod) ({OP_LEADER}{{{osel}}})', "{{namespace}}/{{pod}}",
                        instant=True)], 0, 21, w=12, h=5, kind="stat",
               thresholds=[("text", None), ("green", 1)], extra=stat),
        _panel(10, "Leader changes", f"increase of {OP_LEADER_TRANSITIONS} (holder changes each replica observed): "
               "a steady stream means replicas keep losing the Lease (API server latency above the renew deadline).",
               [_target(f'max by (namespace) (increase({OP_LEADER_TRANSITIONS}{{{osel}}}[{RI}]))',
                        "{{namespace}}")], 12, 21, w=12, h=5),
    ]
    variables = [_datasource_var(),
                 _query_var("namespace", "Namespace", f'label_values({R.operator_up()}, namespace)')]
    return _dashboard("specdeploy-operator", "specdeploy / Operator",
                      "Health of the specdeploy operator: scrape status, reconciles, errors, API writes, leader election.",
                      ["operator"], variables, panels)


# ----------------------------------------------------------------- rendering

DASHBOARDS: dict[str, Callable[[], dict]] = {
    "speculative-decoding": build_acceptance_dashboard,
    "engines": build_engines_dashboard,
    "operator": build_operator_dashboard,
}


def build_dashboard(name: str = "speculative-decoding") -> dict:
    return DASHBOARDS[name]()


def render_dashboard_json(name: str = "speculative-decoding") -> str:
    return json.dumps(build_dashboard(name), indent=2, sort_keys=False) + "\n"


def dashboard_files() -> dict[str, Callable[[], str]]:
    """Repository-relative path -> renderer, for `specdeploy generate`."""
    return {f"{DASHBOARDS_DIR}/{name}.json": (lambda name=name: render_dashboard_json(name)) for name in DASHBOARDS}


def panels_of(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows included (rows themselves left out)."""
    out = []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_dashboard_json(sys.argv[1] if len(sys.argv) > 1 else "speculative-decoding"))
