"""The chart's PrometheusRule (files/prometheus-rules.yaml, thresholds from values) and Grafana dashboard ConfigMaps."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from chart_helpers import CHART, NAMESPACE, VALUE_SETS, find, one, render
from specdeploy.observability import dashboards as D
from specdeploy.observability import rules as R

RULES = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
ON = VALUE_SETS["cert-manager"]  # the value set that turns both on


def test_off_by_default():
    objs = render()
    assert not find(objs, "PrometheusRule")
    assert not [o for o in find(objs, "ConfigMap") if "grafana_dashboard" in o["metadata"].get("labels", {})]


def test_prometheus_rule_embeds_the_generated_groups_and_thresholds_from_values():
    rule = one(render(ON), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE and rule["metadata"]["labels"]["release"] == "prometheus"
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == [g["name"] for g in RULES["groups"]]
    assert groups[1:] == RULES["groups"][1:]  # verbatim, Prometheus' own {{ $labels }} templates included
    assert "{{ $labels.namespace }}" in json.dumps(groups)
    (thresholds,) = [g for g in groups if g["name"] == R.G_THRESHOLDS]
    assert {r["record"]: r["expr"] for r in thresholds["rules"]} == {
        R.T_MIN_LENGTH: "vector(2)", R.T_CLIFF_HIGH: "vector(0.25)", R.T_CLIFF_LOW: "vector(0.02)"}


def test_prometheus_rule_defaults_are_the_generated_file():
    rule = one(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    assert rule["spec"]["groups"] == RULES["groups"]


def test_prometheus_rule_groups_pass_promtool(tmp_path):
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    if not shutil.os.access(promtool, shutil.os.X_OK):
        pytest.skip("promtool is not installed (.ci/install-prometheus)")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": one(render(ON), "PrometheusRule")["spec"]["groups"]}))
    p = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_one_dashboard_configmap_per_file_with_the_sidecar_label():
    cms = [o for o in find(render(ON), "ConfigMap") if o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert len(cms) == len(files) == len(D.DASHBOARDS)
    by_key = {k: (o, v) for o in cms for k, v in o["data"].items()}
    assert sorted(by_key) == [f.name for f in files]
    for f in files:
        cm, text = by_key[f.name]
        assert len(cm["data"]) == 1
        assert json.loads(text) == json.loads(f.read_text())  # as shipped: Grafana's ${variables} untouched
        assert cm["metadata"]["name"] == f"specdeploy-dashboard-{f.stem}"
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"]["team"] == "ml"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Speculative decoding"}
    defaults = [o for o in find(render({"dashboards": {"enabled": True}}), "ConfigMap")
                if o["metadata"]["name"].startswith("specdeploy-dashboard-")]
    assert {o["metadata"]["namespace"] for o in defaults} == {NAMESPACE}
