"""Every dashboard query against a live, real Prometheus that has data for it.

Scraped (1s) by the real `prometheus` binary (dev/prometheus.py) with our rule file loaded:
- three stand-in engines (dev/engine_standin.py): vLLM healthy (2 DP engines), SGLang
  healthy (2 TP ranks), vLLM collapsed (tau ~1.05);
- a stand-in DCGM exporter (dev/dcgm_standin.py) with one GPU per engine pod, Kubernetes
  mapping on (honor_labels, as the GPU operator's ServiceMonitor), plus a spare GPU;
- the operator's real metrics registry (controller/metrics.py), populated and served by a
  child process: cheaper and steadier than a real `specdeploy operator run` against the
  embedded API server, and exactly the series a running operator exports (a canary under
  analysis on one deployment included, with decisions counted all along for the annotations).

The template variables are resolved the way Grafana does (their label_values() queries,
All = every value as a regex alternation); then every panel query must return a
non-empty result (every annotation query too), and the collapse alert must be pending (or firing) for the collapsed
engine only. Every wait has a deadline; nothing is timed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from obs_helpers import (ROOT, annotation_exprs, grafana_regex, label_values_query, panel_exprs, prometheus_exe, start_operator_exporter,
                         stop_process, substitute, variable_query)
from specdeploy_dev.dcgm_standin import DcgmStandin, gpus_for_pods
from specdeploy_dev.engine_standin import EngineStandin
from specdeploy_dev.prometheus import Prometheus, PrometheusError, scrape_job
from specdeploy.observability import dashboards as D
from specdeploy.observability import rules as R

NS = "demo"
ENGINES = {  # job (namespace/PodMonitor, i.e. the deployment) -> (engine, mode, pod, options)
    f"{NS}/qwen3-vllm": ("vllm", "healthy", "qwen3-vllm-7d9f-0", {"dp": 2}),
    f"{NS}/qwen3-sglang": ("sglang", "healthy", "qwen3-sglang-5c4b-0", {"tp": 2}),
    f"{NS}/qwen3-broken": ("vllm", "collapsed", "qwen3-broken-6f8a-0", {}),
}
COLLAPSED = f"{NS}/qwen3-broken"
OPERATOR_JOB = "specdeploy-operator"  # what the chart's ServiceMonitor gets: matches the rules' regex
RATE_INTERVAL = "1m"  # $__rate_interval: any window holding >= 2 scrapes
TARGETS_DEADLINE_S = 30
DATA_DEADLINE_S = 60


def _rules_file(tmp: Path) -> Path:
    shipped = ROOT / R.RULES_FILE
    if shipped.exists():
        return shipped
    path = tmp / "prometheus-rules.yaml"
    path.write_text(R.render_rules_yaml())
    return path


def _resolve_variables(prom: Prometheus, dash: dict) -> dict[str, str]:
    """namespace, then deployment (which reads $namespace): label_values() via /api/v1/series."""
    values: dict[str, str] = {"datasource": "prometheus"}
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        sel, label = label_values_query(variable_query(var))
        found = sorted({s[label] for s in prom.series(substitute(sel, values)) if label in s})
        if not found:
            return {}
        values[var["name"]] = grafana_regex(found)
    return values


def _empty_queries(prom: Prometheus, dashes: list[dict]) -> list[str]:
    empty = []
    for dash in dashes:
        values = _resolve_variables(prom, dash)
        if len(values) < len(dash["templating"]["list"]):
            empty.append(f"{dash['uid']}: template variables have no values")
            continue
        for p, t in panel_exprs(dash):
            expr = substitute(t["expr"], values, rate_interval=RATE_INTERVAL)
            if not prom.query(expr):
                empty.append(f"{dash['uid']} / {p['title']} / {t['refId']}: {expr}")
        for a in annotation_exprs(dash):
            expr = substitute(a["expr"], values, rate_interval=RATE_INTERVAL)
            if not prom.query(expr):
                empty.append(f"{dash['uid']} / annotation {a['name']}: {expr}")
    return empty


def test_every_dashboard_query_returns_data_from_live_prometheus(tmp_path):
    exe = prometheus_exe()
    with contextlib.ExitStack() as stack:
        engines = {}
        for job, (engine, mode, _pod, opts) in ENGINES.items():
            engines[job] = stack.enter_context(EngineStandin(engine, mode, **opts))
        dcgm = stack.enter_context(DcgmStandin(gpus_for_pods([(NS, pod) for _e, _m, pod, _o in ENGINES.values()],
                                                             spare=1)))
        # the acceptance monitor's view: the collapsed deployment had settled at 3.96 before
        op_proc, op_port = start_operator_exporter(acceptance=[
            (NS, job.split("/", 1)[1], engine, "z-lab/Qwen3-8B-DFlash-b16", 1.05 if mode == "collapsed" else 3.96,
             3.96, 0.25) for job, (engine, mode, _pod, _opts) in ENGINES.items()],
            rollouts=[(NS, "qwen3-vllm")])  # a canary under analysis: the rollout row and its annotations
        stack.callback(stop_process, op_proc)

        jobs = [scrape_job(job, f"127.0.0.1:{engines[job].port}", labels={"namespace": NS, "pod": pod})
                for job, (_e, _m, pod, _o) in ENGINES.items()]
        jobs.append(scrape_job("dcgm-exporter", f"127.0.0.1:{dcgm.port}", honor_labels=True,
                               labels={"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x1"}))
        jobs.append(scrape_job(OPERATOR_JOB, f"127.0.0.1:{op_port}", honor_labels=True,  # as the chart's ServiceMonitor
                               labels={"namespace": "specdeploy-system", "pod": "specdeploy-operator-0"}))
        prom = stack.enter_context(Prometheus(jobs, [_rules_file(tmp_path)], exe=exe))

        # Every target scraped and up.
        want = {j["job_name"] for j in jobs}
        prom.wait_until(lambda: {s["metric"]["job"] for s in prom.query("up == 1")} >= want, TARGETS_DEADLINE_S,
                        "targets up")
        # Every rule group loaded and healthy (a broken rule would leave its series empty).
        groups = prom.rules()
        assert {g["name"] for g in groups} >= {R.G_VLLM, R.G_SGLANG, R.G_ALERTS}
        bad = [(r.get("name"), r.get("lastError")) for g in groups for r in g["rules"] if r.get("health") == "err"]
        assert not bad, bad
        with pytest.raises(PrometheusError, match="bad_data"):
            prom.query("sum(")

        dashes = [D.build_dashboard(n) for n in D.DASHBOARDS]

        def every_deployment_seen() -> bool:
            # the recording rules reach each engine's series at their own pace: wait for all of them
            return all(_resolve_variables(prom, d)["deployment"] == grafana_regex(sorted(ENGINES)) for d in dashes[:2])

        try:
            prom.wait_until(lambda: not _empty_queries(prom, dashes) and every_deployment_seen(), DATA_DEADLINE_S,
                            "data for every panel query, from every deployment")
        except PrometheusError:
            empty = _empty_queries(prom, dashes)
            pytest.fail("dashboard queries without data:\n" + "\n".join(empty) +
                        f"\nvariables: {[_resolve_variables(prom, d) for d in dashes[:2]]}\n{prom.log()}")

        # The variables resolve to exactly our deployments.
        for dash in dashes[:2]:
            values = _resolve_variables(prom, dash)
            assert values["namespace"] == NS
            assert values["deployment"] == grafana_regex(sorted(ENGINES))

        # Per-deployment panels return every deployment of their engine, labelled by job.
        vals = _resolve_variables(prom, dashes[0])
        tau = {s["metric"]["job"]: float(s["value"][1])
               for s in prom.query(substitute(f'{R.LENGTH}{{{D.SEL}}}', vals))}
        assert set(tau) == set(ENGINES)
        assert tau[COLLAPSED] < 1.5 < tau[f"{NS}/qwen3-vllm"] and tau[f"{NS}/qwen3-sglang"] > 1.5
        gpu_util = next(t["expr"] for p, t in panel_exprs(dashes[1]) if p["title"] == "GPU utilisation")
        gpu_jobs = {s["metric"]["job"] for s in prom.query(substitute(gpu_util, vals, RATE_INTERVAL))}
        assert gpu_jobs == set(ENGINES)  # the spare GPU (no pod) and other pods stay out

        # The collapse alert: pending (its `for` is 10m) for the collapsed engine, and only there.
        def collapse_alerts():
            return prom.query(f'ALERTS{{alertname="{R.A_COLLAPSED}"}}')

        got = prom.wait_until(collapse_alerts, DATA_DEADLINE_S, f"{R.A_COLLAPSED} pending")
        assert {s["metric"]["job"] for s in got} == {COLLAPSED}
        assert {s["metric"]["alertstate"] for s in got} <= {"pending", "firing"}
        # ... and the regression alert (the operator's gauges: tau 1.05 against a baseline of 3.96) with it
        got = prom.wait_until(lambda: prom.query(f'ALERTS{{alertname="{R.A_REGRESSED}"}}'), DATA_DEADLINE_S,
                              f"{R.A_REGRESSED} pending")
        assert {s["metric"]["job"] for s in got} == {COLLAPSED}
        assert {a["labels"]["alertname"] for a in prom.alerts() if a["labels"].get("job") == COLLAPSED} == \
            {R.A_COLLAPSED, R.A_REGRESSED}
        assert not prom.query(f'ALERTS{{alertname="{R.A_OPERATOR_DOWN}"}}')
