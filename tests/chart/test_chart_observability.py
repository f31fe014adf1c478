"""The chart's PrometheusRule (files/prometheus-rules.yaml, thresholds from values) and Grafana dashboard ConfigMaps."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from chart_helpers import CHART, NAMESPACE, RELEASE, VALUE_SETS, container, find, one, render, run_helm, values_file
from specdeploy.observability import dashboards as D
from specdeploy.observability import rules as R

RULES = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
ON = VALUE_SETS["cert-manager"]  # the value set that turns both on
RUNBOOK_BASE = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["runbookBaseUrl"]


def _with_runbook_base(groups: list[dict], base: str = RUNBOOK_BASE) -> list[dict]:
    """The generated groups as the chart ships them: every runbook_url prefixed with prometheusRule.runbookBaseUrl."""
    out = json.loads(json.dumps(groups))
    for g in out:
        for r in g["rules"]:
            if "runbook_url" in r.get("annotations", {}):
                r["annotations"]["runbook_url"] = base + r["annotations"]["runbook_url"]
    return out


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
    # verbatim (Prometheus' own {{ $labels }} templates included) but for the runbook_url prefix
    assert groups[1:] == _with_runbook_base(RULES["groups"])[1:]
    assert "{{ $labels.namespace }}" in json.dumps(groups)
    (thresholds,) = [g for g in groups if g["name"] == R.G_THRESHOLDS]
    assert {r["record"]: r["expr"] for r in thresholds["rules"]} == {
        R.T_MIN_LENGTH: "vector(2)", R.T_CLIFF_HIGH: "vector(0.25)", R.T_CLIFF_LOW: "vector(0.02)"}


def test_prometheus_rule_defaults_are_the_generated_file():
    rule = one(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    assert rule["spec"]["groups"] == _with_runbook_base(RULES["groups"])


def test_every_runbook_url_is_absolute_under_the_base():
    urls = [r["annotations"]["runbook_url"] for g in one(render({"prometheusRule": {"enabled": True}}),
                                                          "PrometheusRule")["spec"]["groups"]
            for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://") for u in urls), urls
    assert all(not r["annotations"]["runbook_url"].startswith("http") for g in RULES["groups"] for r in g["rules"]
               if "alert" in r)  # the generated file keeps docs paths; the chart prefixes them
    base = "https://wiki.example.com/specdeploy/"
    rule = one(render({"prometheusRule": {"enabled": True, "runbookBaseUrl": base}}), "PrometheusRule")
    got = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert got and all(u.startswith(base + "docs/how-to/") for u in got), got


@pytest.mark.parametrize("which", ["helm3", "helm4"])
@pytest.mark.parametrize("value, kind", [("serviceMonitor", "ServiceMonitor"), ("prometheusRule", "PrometheusRule")])
def test_monitors_without_the_prometheus_operator_api_fail_with_a_clear_message(which, value, kind):
    path = values_file({value: {"enabled": True}})
    p = run_helm(which, "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", path, check=False)
    assert p.returncode != 0
    assert f"{value}.enabled=true needs the prometheus-operator API monitoring.coreos.com/v1 ({kind})" in p.stderr
    assert f"or set {value}.enabled=false" in p.stderr
    # the cluster serves it: rendered; or the check is skipped on purpose
    assert one(render({value: {"enabled": True}}, which), kind)
    assert one(render({value: {"enabled": True}, "monitoring": {"skipCRDCheck": True}}, which, api_versions=()), kind)


def test_extra_labels_reach_every_monitoring_object_the_operator_makes_included():
    objs = render(ON)
    assert one(objs, "ServiceMonitor")["metadata"]["labels"]["release"] == "prometheus"
    assert one(objs, "PrometheusRule")["metadata"]["labels"]["release"] == "prometheus"
    # the operator-made PodMonitors: the label set reaches the operator through its environment
    env = {e["name"]: e.get("value") for e in container(objs)["env"]}
    assert json.loads(env["SPECDEPLOY_POD_MONITOR_LABELS"]) == {"release": "prometheus"}
    assert "SPECDEPLOY_POD_MONITOR_LABELS" not in {e["name"] for e in container(render())["env"]}


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


def test_the_acceptance_dashboard_says_why_it_is_empty_without_the_recording_rules(tmp_path):
    dash = D.build_dashboard("speculative-decoding")
    assert "prometheusRule.enabled=true" in dash["description"]
    (tau,) = [p for p in D.panels_of(dash) if p["title"] == "Acceptance length (tau)"]
    assert "prometheusRule.enabled=true" in tau["description"] and "podMonitor.labels" in tau["description"]

    def notes(*sets: str) -> str:
        args = ["install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client", "--set", "dashboards.enabled=true",
                "--set", "monitoring.skipCRDCheck=true"]
        for s in sets:
            args += ["--set", s]
        return run_helm("helm4", *args, env={"KUBECONFIG": str(tmp_path / "none")}).stdout.split("NOTES:", 1)[1]

    assert "stays empty without them" in notes()
    assert "stays empty without them" not in notes("prometheusRule.enabled=true")


def test_one_alert_naming_scheme():
    alerts = [r["alert"] for g in RULES["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 7 and all(a.startswith("Specdeploy") and a[len("Specdeploy")].isupper() for a in alerts), alerts
    (alerts_panel,) = [p for p in D.panels_of(D.build_dashboard("speculative-decoding"))
                       if p["title"].startswith("Speculation alerts")]
    assert alerts_panel["targets"][0]["expr"] == 'ALERTS{alertname=~"Specdeploy.*"}'
