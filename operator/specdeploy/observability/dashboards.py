"""The Grafana dashboard "specdeploy / Speculative decoding", built on the recording rules.

``render_dashboard_json()`` is what ``specdeploy generate`` writes to
``charts/specdeploy/files/grafana-dashboard.json`` (the chart ships it in a ConfigMap with
the ``grafana_dashboard`` label). Panels read only the ``specdeploy:*`` vocabulary of
``rules.py``, so one dashboard serves vLLM and SGLang deployments.
"""

from __future__ import annotations

import json
from typing import Any

from ..core import acceptance as acc
from . import rules as R

DASHBOARD_FILE = "charts/specdeploy/files/grafana-dashboard.json"
UID = "specdeploy-acceptance"
SEL = 'namespace=~"$namespace", job=~"$job"'


def _target(expr: str, legend: str, ref: str = "A") -> dict:
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "legendFormat": legend,
            "refId": ref}


def _panel(pid: int, title: str, description: str, targets: list[dict], x: int, y: int, w: int = 12, h: int = 8,
           kind: str = "timeseries", unit: str = "short", thresholds: list[tuple[str, float | None]] | None = None,
           extra: dict | None = None) -> dict:
    steps = [{"color": c, "value": v} for c, v in (thresholds or [("green", None)])]
    p: dict[str, Any] = {
        "id": pid, "type": kind, "title": title, "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": []},
        "options": {},
    }
    if extra:
        p.update(extra)
    return p


def build_dashboard() -> dict:
    lo = acc.DEFAULT_MIN_LENGTH
    who = "{{namespace}}/{{job}} ({{engine_kind}})"
    panels = [
        _panel(1, "Acceptance length (tau)",
               "1 + accepted/drafts, bonus token included (1 <= tau <= block size). Healthy DFlash: ~4 (chat) to ~6 "
               f"(math). Below {lo:g} for 10m fires {R.A_COLLAPSED}.",
               [_target(f"{R.LENGTH}{{{SEL}}}", who), _target(R.T_MIN_LENGTH, "collapse threshold", "B")],
               0, 0, thresholds=[("red", None), ("orange", lo), ("green", 2.5)]),
        _panel(2, "Acceptance rate", "Accepted / draft tokens (vLLM counters; SGLang's spec_accept_rate gauge).",
               [_target(f"{R.RATE}{{{SEL}}}", who)], 12, 0, unit="percentunit"),
        _panel(3, "Per-position acceptance (vLLM)",
               "accepted_at_position_k / drafts. Cumulative, so it falls with k. Smooth decay is normal; a drop from "
               f">= {acc.CLIFF_HIGH:g} straight to < {acc.CLIFF_LOW:g} is a cliff ({R.A_CLIFF}).",
               [_target(f"{R.PER_POSITION}{{{SEL}}}", "{{namespace}}/{{job}} pos {{position}}")], 0, 8,
               unit="percentunit"),
        _panel(4, "Per-position acceptance now (vLLM)", "The latest per-position rates as bars, by position.",
               [_target(f"avg by (position) ({R.PER_POSITION}{{{SEL}}})", "{{position}}")], 12, 8, kind="barchart",
               unit="percentunit", extra={"options": {"xField": "position", "orientation": "vertical"}}),
        _panel(5, "Drafts per second (vLLM)", "Speculative steps per second: zero means no traffic, not a problem.",
               [_target(f"{R.DRAFTS}{{{SEL}}}", "{{namespace}}/{{job}}")], 0, 16, unit="ops"),
        _panel(6, "Raw SGLang gauges by rank",
               "sglang:spec_accept_length per rank. TP ranks of one DP rank agree; a rank that differs points at one "
               "replica.",
               [_target(f"{acc.SGLANG_ACCEPT_LENGTH}{{{SEL}}}", "{{pod}} dp{{dp_rank}} tp{{tp_rank}}")], 12, 16),
        _panel(7, "Speculation alerts", "Firing specdeploy alerts.",
               [_target('ALERTS{alertstate="firing", alertname=~"Speculative.*|Specdeploy.*"}',
                        "{{alertname}} {{namespace}}/{{job}}")], 0, 24, w=24, h=6, kind="table"),
    ]
    var = {"type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"}, "refresh": 2,
           "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}}
    return {
        "uid": UID, "title": "specdeploy / Speculative decoding", "tags": ["specdeploy", "speculative-decoding"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "timezone": "",
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"},
            {**var, "name": "namespace", "label": "Namespace", "definition": f"label_values({R.LENGTH}, namespace)",
             "query": {"query": f"label_values({R.LENGTH}, namespace)", "refId": "ns"}},
            {**var, "name": "job", "label": "Deployment (job)",
             "definition": f'label_values({R.LENGTH}{{namespace=~"$namespace"}}, job)',
             "query": {"query": f'label_values({R.LENGTH}{{namespace=~"$namespace"}}, job)', "refId": "job"}},
        ]},
        "panels": panels,
    }


def render_dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_dashboard_json())
