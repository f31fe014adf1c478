"""Monitoring as the chart installs it, in a real Prometheus, for the default release name and another.

For each release the chart is rendered (real Helm) with the ServiceMonitor, the PrometheusRule
and the dashboards on. The operator's scrape target is built the way prometheus-operator builds
it from the rendered ServiceMonitor and the Service it selects (promoperator.py: file_sd with
kubernetes_sd's meta labels + prometheus-operator's relabel rules, applied by Prometheus
itself); the engine's from the PodMonitor the running operator created for an example
SpeculativeDeployment. Prometheus 2.42 (Debian) scrapes:

- the real operator, started with the rendered Deployment's own arguments (ports and bind
  addresses made local) against the embedded API server;
- a stand-in vLLM engine (dev/engine_standin.py) as the example's engine pod.

It loads the rendered PrometheusRule's groups (alert `for` shortened to seconds: a test copy
of the same groups) and must show:
- the job labels prometheus-operator would give (operator: "specdeploy-operator" whatever
  the release is called; engine: "<namespace>/<PodMonitor name>");
- SpecdeployOperatorDown inactive while the operator is up, firing once it is stopped;
- the acceptance recording rules per deployment under the engine's job;
- every dashboard variable resolving to what Prometheus has (operator: the release's
  namespace; acceptance and engines: the example's namespace and job), and the operator's
  "up" and the acceptance-length panels returning data.
Every wait has a deadline; nothing is timed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from obs_helpers import grafana_regex, label_values_query, panel_exprs, prometheus_exe, substitute, variable_query
from promoperator import (expected_pod_monitor_labels, expected_service_monitor_labels, pod_monitor_scrape_config,
                          service_for, service_monitor_scrape_config)
from specdeploy_dev.engine_standin import EngineStandin
from specdeploy_dev.harness import BIN, ROOT, Cluster, free_port, kubectl_available, wait_for
from specdeploy_dev.procs import stop_process
from specdeploy_dev.prometheus import Prometheus, PrometheusError
from specdeploy.observability import dashboards as D
from specdeploy.observability import rules as R

sys.path.insert(0, str(ROOT / "tests" / "chart"))
from chart_helpers import one, render  # noqa: E402

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")

RELEASES = [("specdeploy", "specdeploy-system"), ("prod-spec", "ml-serving")]
MODELS = "models"
VALUES = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True},
          "webhook": {"enabled": False}, "watch": {"namespaces": [MODELS]}}
EXAMPLE = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
CR = "qwen36-27b"
DEADLINE_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The embedded API server with the CRDs (PodMonitor's too) and the example applied."""
    with Cluster(workdir=tmp_path_factory.mktemp("cluster")) as c:
        c.apply_crds()
        c.kubectl("apply", "-f", str(ROOT / "e2e" / "crds" / "podmonitor-minimal.yaml"))
        namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                      for ns in [MODELS, *(ns for _r, ns in RELEASES)]]
        c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": namespaces}))
        wait_for(lambda: c.kubectl("get", "podmonitors", "-n", MODELS, check=False).returncode == 0, 30,
                 "the PodMonitor API")
        c.kubectl("apply", "-n", MODELS, "-k", str(EXAMPLE))
        yield c


def _start_operator(objs: list[dict], cluster: Cluster, workdir: Path) -> tuple[subprocess.Popen, int]:
    """The rendered container's command line and SPECDEPLOY_* environment, with the pod's values made local: free
    loopback ports, loopback instead of every interface, the kubeconfig."""
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = list(c["args"])
    port = free_port()
    for i, a in enumerate(args[:-1]):
        if a == "--metrics-port":
            args[i + 1] = str(port)
        elif a == "--health-port":
            args[i + 1] = str(free_port())
        elif a in ("--metrics-bind-address", "--bind-address"):
            assert args[i + 1] == "0.0.0.0"
            args[i + 1] = "127.0.0.1"
    env = {**cluster.env(), **{e["name"]: e["value"] for e in c.get("env") or []
                               if e["name"].startswith("SPECDEPLOY_") and "value" in e},
           "HF_HOME": str(workdir / "hf"), "POD_NAMESPACE": one(objs, "Deployment")["metadata"]["namespace"]}
    log = open(workdir / "operator.log", "a")
    proc = subprocess.Popen([str(BIN / "specdeploy"), *args, "--kubeconfig", cluster.kubeconfig], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=workdir)
    log.close()
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    stop_process(proc, 20)


def _test_rules(objs: list[dict], path: Path) -> Path:
    """The rendered PrometheusRule's groups with every alert's `for` in seconds (a test copy)."""
    groups = copy.deepcopy(one(objs, "PrometheusRule")["spec"]["groups"])
    assert [g["name"] for g in groups] == [g["name"] for g in R.build_groups()]
    for g in groups:
        for r in g["rules"]:
            if "alert" in r:
                r["for"] = "2s"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def _labels(sample: dict) -> dict:
    return {k: v for k, v in sample["metric"].items() if k not in ("__name__", "instance")}


def _resolve(prom: Prometheus, dash: dict) -> dict[str, list[str]]:
    """Each query variable's values, as Grafana's label_values() gets them (in order: each may read the one before)."""
    values: dict[str, str] = {"datasource": "prometheus"}
    found_all: dict[str, list[str]] = {}
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        sel, label = label_values_query(variable_query(var))
        found = sorted({s[label] for s in prom.series(substitute(sel, values)) if label in s})
        found_all[var["name"]] = found
        values[var["name"]] = grafana_regex(found) if found else "^$"
    return found_all


def _values(found: dict[str, list[str]]) -> dict[str, str]:
    return {"datasource": "prometheus", **{k: grafana_regex(v) for k, v in found.items()}}


def test_service_monitor_job_without_job_label_would_be_the_service_name():
    """The derivation itself: without jobLabel, prometheus-operator's job is the Service name
    (what the operator-down alert missed before the chart set jobLabel)."""
    objs = render(VALUES)
    sm = copy.deepcopy(one(objs, "ServiceMonitor"))
    svc = service_for(sm, objs)
    assert expected_service_monitor_labels(sm, svc, "p", "c")["job"] == R.OPERATOR_JOB
    del sm["spec"]["jobLabel"]
    assert expected_service_monitor_labels(sm, svc, "p", "c")["job"] == "specdeploy-metrics" != R.OPERATOR_JOB


@pytest.mark.parametrize("release,namespace", RELEASES, ids=[r for r, _ in RELEASES])
def test_monitoring_as_installed(cluster, tmp_path, release, namespace):
    objs = render(VALUES, namespace=namespace, release=release)
    # --- the operator's target, from the rendered ServiceMonitor and the Service it selects
    sm = one(objs, "ServiceMonitor")
    svc = service_for(sm, objs)
    dep = one(objs, "Deployment")
    template = dep["spec"]["template"]
    assert all(template["metadata"]["labels"].get(k) == v for k, v in svc["spec"]["selector"].items())
    (ep,) = sm["spec"]["endpoints"]
    (svc_port,) = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]]
    (container,) = [c for c in template["spec"]["containers"]
                    if any(p["name"] == svc_port["targetPort"] for p in c.get("ports") or [])]
    op_pod = f"{dep['metadata']['name']}-5f7c9d8b6-x2x4z"
    op_expected = expected_service_monitor_labels(sm, svc, op_pod, container["name"])
    assert op_expected["job"] == R.OPERATOR_JOB  # whatever the release is called
    assert op_expected["namespace"] == namespace and op_expected["service"] == f"{dep['metadata']['name']}-metrics"

    with contextlib.ExitStack() as stack:
        proc, op_port = _start_operator(objs, cluster, tmp_path)
        stack.callback(_stop, proc)

        def operator_log() -> str:
            return (tmp_path / "operator.log").read_text(errors="replace")[-4000:]

        # --- the engine's target, from the PodMonitor the running operator created
        pm = wait_for(lambda: json.loads(cluster.kubectl("get", "podmonitor", CR, "-n", MODELS, "-o", "json",
                                                         check=False).stdout or "null"), DEADLINE_S,
                      "the example's PodMonitor")
        workload = cluster.get_json("deployment", CR, "-n", MODELS)
        pod_tmpl = workload["spec"]["template"]
        (pm_ep,) = pm["spec"]["podMetricsEndpoints"]
        (engine_c,) = [c for c in pod_tmpl["spec"]["containers"]
                       if any(p.get("name") == pm_ep["port"] for p in c.get("ports") or [])]
        engine_pod = f"{CR}-7d9f8c6b5-abcde"
        engine_expected = expected_pod_monitor_labels(pm, pod_tmpl["metadata"]["labels"], engine_pod, engine_c["name"])
        assert engine_expected["job"] == f"{MODELS}/{CR}"
        engine = stack.enter_context(EngineStandin("vllm", "healthy"))

        sd = tmp_path / "sd"
        jobs = [service_monitor_scrape_config(sm, svc, f"127.0.0.1:{op_port}", op_pod, container["name"], sd),
                pod_monitor_scrape_config(pm, pod_tmpl["metadata"]["labels"], pm_ep["port"],
                                          f"127.0.0.1:{engine.port}", engine_pod, engine_c["name"], sd)]
        prom = stack.enter_context(Prometheus(jobs, [_test_rules(objs, tmp_path / "rules.yaml")],
                                              exe=prometheus_exe()))
        try:
            # Both targets up, with exactly the labels prometheus-operator would give them.
            ups = prom.wait_until(lambda: (lambda up: up if len(up) == 2 else None)(prom.query("up == 1")),
                                  DEADLINE_S, "both targets up")
            got = sorted((_labels(s) for s in ups), key=lambda lab: lab["job"])
            assert got == sorted([op_expected, engine_expected], key=lambda lab: lab["job"])

            # SpecdeployOperatorDown: inactive while the operator is up (after evaluations that saw it up).
            def down_rule() -> dict:
                return next(r for g in prom.rules() for r in g["rules"] if r.get("name") == R.A_OPERATOR_DOWN)

            prom.wait_until(lambda: down_rule()["state"] == "inactive" and not prom.query(
                f'ALERTS{{alertname="{R.A_OPERATOR_DOWN}"}}'), DEADLINE_S, f"{R.A_OPERATOR_DOWN} inactive")
            assert down_rule()["health"] == "ok"

            # The acceptance recording rules, per deployment under the engine's job.
            tau = prom.wait_until(lambda: prom.query(R.LENGTH), DEADLINE_S, R.LENGTH)
            assert [_labels(s) for s in tau] == [{"namespace": MODELS, "job": engine_expected["job"],
                                                  "model_name": "Qwen/Qwen3-8B", "engine_kind": "vllm"}]
            assert float(tau[0]["value"][1]) > 3

            # Dashboard variables resolve to what Prometheus has; their panels return data.
            op_dash = D.build_dashboard("operator")
            found = prom.wait_until(lambda: _resolve(prom, op_dash) or None, DEADLINE_S, "operator variables")
            assert found == {"namespace": [namespace]}
            (up_panel,) = [t for p, t in panel_exprs(op_dash) if p["title"] == "Operator up"]
            got_up = prom.query(substitute(up_panel["expr"], _values(found)))
            assert [(s["metric"]["namespace"], s["metric"]["pod"], s["value"][1]) for s in got_up] == \
                [(namespace, op_pod, "1")]
            for name in ("speculative-decoding", "engines"):
                dash = D.build_dashboard(name)
                found = _resolve(prom, dash)
                assert found == {"namespace": [MODELS], "deployment": [engine_expected["job"]]}, name
            acc = D.build_dashboard("speculative-decoding")
            (tau_panel, _threshold) = [t for p, t in panel_exprs(acc) if p["title"] == "Acceptance length (tau)"]
            assert prom.query(substitute(tau_panel["expr"], _values(_resolve(prom, acc))))

            # Operator stopped: its target goes down and the alert fires, for this release's namespace.
            _stop(proc)
            firing = prom.wait_until(lambda: prom.query(f'ALERTS{{alertname="{R.A_OPERATOR_DOWN}",'
                                                        'alertstate="firing"}'), DEADLINE_S,
                                     f"{R.A_OPERATOR_DOWN} firing")
            assert [(s["metric"]["job"], s["metric"]["namespace"], s["metric"]["severity"]) for s in firing] == \
                [(R.OPERATOR_JOB, namespace, "critical")]
        except (PrometheusError, AssertionError):
            print(operator_log())
            print(prom.log())
            raise


# kube-prometheus-stack's Prometheus selects monitors and rules by its release label
# (serviceMonitorSelector, podMonitorSelector and ruleSelector: matchLabels release=<its release>).
KPS = {"release": "kube-prometheus-stack"}


def _selected(obj: dict) -> bool:
    return all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in KPS.items())


def test_kube_prometheus_stack_selectors_see_tau(cluster, tmp_path):
    """Only what carries the selected label is loaded, as prometheus-operator does for kube-prometheus-stack: the
    chart's ServiceMonitor and PrometheusRule (serviceMonitor.labels, prometheusRule.labels) and the PodMonitor the
    operator makes (podMonitor.labels, through SPECDEPLOY_POD_MONITOR_LABELS); Prometheus then has tau."""
    plain = render(VALUES)
    assert not _selected(one(plain, "ServiceMonitor")) and not _selected(one(plain, "PrometheusRule"))
    values = {**VALUES, "serviceMonitor": {"enabled": True, "labels": KPS},
              "prometheusRule": {"enabled": True, "labels": KPS}, "podMonitor": {"labels": KPS}}
    objs = render(values)
    sm, rule = one(objs, "ServiceMonitor"), one(objs, "PrometheusRule")
    assert _selected(sm) and _selected(rule)
    svc = service_for(sm, objs)
    template = one(objs, "Deployment")["spec"]["template"]
    (ep,) = sm["spec"]["endpoints"]
    (svc_port,) = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]]
    (container,) = [c for c in template["spec"]["containers"]
                    if any(p["name"] == svc_port["targetPort"] for p in c.get("ports") or [])]
    with contextlib.ExitStack() as stack:
        proc, op_port = _start_operator(objs, cluster, tmp_path)
        stack.callback(_stop, proc)
        # the PodMonitor the operator made for the example carries the label the podMonitorSelector selects
        pm = wait_for(lambda: (lambda o: o if o and _selected(o) else None)(json.loads(cluster.kubectl(
            "get", "podmonitor", CR, "-n", MODELS, "-o", "json", check=False).stdout or "null")), DEADLINE_S,
            "the example's PodMonitor with the kube-prometheus-stack release label")
        pod_tmpl = cluster.get_json("deployment", CR, "-n", MODELS)["spec"]["template"]
        (pm_ep,) = pm["spec"]["podMetricsEndpoints"]
        (engine_c,) = [c for c in pod_tmpl["spec"]["containers"]
                       if any(p.get("name") == pm_ep["port"] for p in c.get("ports") or [])]
        engine = stack.enter_context(EngineStandin("vllm", "healthy"))
        sd = tmp_path / "sd"
        monitors = [(m, make) for m, make in (
            (sm, lambda: service_monitor_scrape_config(sm, svc, f"127.0.0.1:{op_port}", "op-0", container["name"], sd)),
            (pm, lambda: pod_monitor_scrape_config(pm, pod_tmpl["metadata"]["labels"], pm_ep["port"],
                                                   f"127.0.0.1:{engine.port}", f"{CR}-0", engine_c["name"], sd)))
            if _selected(m)]
        assert len(monitors) == 2
        rules = [_test_rules(objs, tmp_path / "rules.yaml")] if _selected(rule) else []
        prom = stack.enter_context(Prometheus([make() for _m, make in monitors], rules, exe=prometheus_exe()))
        try:
            tau = prom.wait_until(lambda: prom.query(R.LENGTH), DEADLINE_S, R.LENGTH)
            assert [(s["metric"]["namespace"], s["metric"]["job"]) for s in tau] == [(MODELS, f"{MODELS}/{CR}")]
            assert float(tau[0]["value"][1]) > 3
        except (PrometheusError, AssertionError):
            print((tmp_path / "operator.log").read_text(errors="replace")[-4000:])
            print(prom.log())
            raise
