"""The Grafana dashboards (observability/dashboards.py), offline: decoded by Grafana's own
typed models (grafana-foundation-sdk), every query parsed by promql-parser, every series
name traced to what exports it, and the files the chart ships.

tests/observability/test_live_prometheus.py runs the same queries against real Prometheus.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as gdash
from grafana_foundation_sdk.models import prometheus as gprom

from obs_helpers import (GRAFANA_BUILTINS, ROOT, annotation_exprs, label_values_query, panel_exprs, substitute, variable_query,
                         variables_used)
from specdeploy_dev import dcgm_standin
from specdeploy_dev.engine_standin import EngineStandin
from specdeploy.observability import dashboards as D
from specdeploy.observability import rules as R

register_default_plugins()

NAMES = list(D.DASHBOARDS)
# Example values for the offline checks (the live test uses the values Prometheus has).
EXAMPLE = {"namespace": "demo", "deployment": "demo/qwen3-vllm", "datasource": "prometheus"}
# Keys Grafana reads that the SDK's schema does not model. Anything else a decode drops is a typo
# or a key Grafana ignores. A Prometheus annotation query keeps its options on the annotation itself
# (Grafana's Prometheus AnnotationQueryEditor edits them there; grafonnet's annotation helper writes
# them there): the SDK's AnnotationQuery models only `expr` of them.
SDK_UNMODELLED: set[str] = {f"annotations.list[].{k}" for k in ("step", "titleFormat", "textFormat", "tagKeys",
                                                                 "useValueForTime")}


@pytest.fixture(params=NAMES)
def dash(request) -> dict:
    return D.build_dashboard(request.param)


def _lost_keys(original, decoded, path: str = "") -> list[str]:
    """Keys (and values) of `original` that the SDK's decode/encode round trip did not keep."""
    lost = []
    if isinstance(original, dict):
        if not isinstance(decoded, dict):
            return [f"{path}: {type(decoded).__name__}"]
        for k, v in original.items():
            p = f"{path}.{k}" if path else k
            if re.sub(r"\[\d+\]", "[]", p) in SDK_UNMODELLED:
                continue
            if k not in decoded:
                lost.append(p)
            else:
                lost += _lost_keys(v, decoded[k], p)
    elif isinstance(original, list):
        if not isinstance(decoded, list) or len(decoded) != len(original):
            return [f"{path}: list of {len(original)}"]
        for i, (a, b) in enumerate(zip(original, decoded)):
            lost += _lost_keys(a, b, f"{path}[{i}]")
    elif original != decoded:
        lost.append(f"{path}: {original!r} != {decoded!r}")
    return lost


# ----------------------------------------------------------------- decoding


def test_every_dashboard_decodes_with_grafana_foundation_sdk(dash):
    decoded = gdash.Dashboard.from_json(json.loads(json.dumps(dash)))
    assert decoded.uid == dash["uid"] and decoded.title == dash["title"]
    assert decoded.schema_version == dash["schemaVersion"]
    assert len(decoded.panels) == len(dash["panels"])
    for raw, panel in zip(dash["panels"], decoded.panels):
        if raw["type"] == "row":
            assert isinstance(panel, gdash.RowPanel)
            continue
        assert isinstance(panel, gdash.Panel) and panel.type_val == raw["type"]
        # The panel plugin's own typed options (timeseries.Options, heatmap.Options, ...), not a bare dict.
        assert not isinstance(panel.options, dict), f"{raw['title']}: options of {raw['type']} not typed"
        for t in panel.targets:
            assert isinstance(t, gprom.Dataquery), f"{raw['title']}: target not decoded as a Prometheus query"
            assert t.expr and t.ref_id
    for var in decoded.templating.list_val:
        assert isinstance(var, gdash.VariableModel)
    # Round trip: everything we wrote is something Grafana's schema knows, with our value.
    encoded = json.loads(json.dumps(decoded, cls=JSONEncoder))
    assert _lost_keys(dash, encoded) == []


def test_rendering_is_deterministic_json():
    for name in NAMES:
        a, b = D.render_dashboard_json(name), D.render_dashboard_json(name)
        assert a == b and a.endswith("\n")
        assert json.loads(a) == D.build_dashboard(name)
    assert D.render_dashboard_json() == D.render_dashboard_json("speculative-decoding")


# ----------------------------------------------------------------- structure


def test_ids_datasources_and_layout(dash):
    ids = [p["id"] for p in dash["panels"]] + [q["id"] for p in dash["panels"] for q in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique within a dashboard"
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] >= 1, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
    for p in D.panels_of(dash):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        assert p["title"] and p["description"], p["id"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]


def test_dashboard_uids_and_titles_are_unique():
    dashes = [D.build_dashboard(n) for n in NAMES]
    assert len({d["uid"] for d in dashes}) == len(dashes)
    assert len({d["title"] for d in dashes}) == len(dashes)
    for d in dashes:
        assert len(d["uid"]) <= 40 and re.fullmatch(r"[a-zA-Z0-9_-]+", d["uid"])
        assert "specdeploy" in d["tags"]
    assert D.build_dashboard("speculative-decoding")["uid"] == D.UID


def test_template_variables(dash):
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    used = set()
    for _p, t in panel_exprs(dash):
        used |= variables_used(t["expr"])
    for v in variables.values():
        if v["type"] == "query":
            used |= variables_used(variable_query(v))
    undefined = used - set(variables) - GRAFANA_BUILTINS
    assert not undefined, f"undefined variables {undefined}"
    if dash["uid"] == "specdeploy-operator":
        # The operator's namespace, read from the chart's scrape job; every query selects both.
        assert list(variables) == ["datasource", "namespace"]
        sel, label = label_values_query(variable_query(variables["namespace"]))
        assert (sel, label) == (f'up{{job="{R.OPERATOR_JOB}"}}', "namespace")
        for p, t in panel_exprs(dash):
            assert f'job="{R.OPERATOR_JOB}"' in t["expr"] and '$namespace' in t["expr"], p["title"]
        return
    assert list(variables) == ["datasource", "namespace", "deployment"]  # order: each reads the one before
    for name in ("namespace", "deployment"):
        v = variables[name]
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert v["multi"] and v["includeAll"] and v["refresh"] == 2
        sel, label = label_values_query(variable_query(v))
        assert label == {"namespace": "namespace", "deployment": "job"}[name]
        promql_parser.parse(substitute(sel, EXAMPLE))
    assert "$namespace" in variable_query(variables["deployment"])
    # Every per-deployment panel filters by both.
    for p, t in panel_exprs(dash):
        names = _metric_names(promql_parser.parse(substitute(t["expr"], EXAMPLE)))
        if any(n.startswith(("specdeploy:spec", "specdeploy:acceptance", "specdeploy:rollout", "vllm:", "sglang:"))
               for n in names):
            assert '$namespace' in t["expr"] and '$deployment' in t["expr"], p["title"]
    for a in annotation_exprs(dash):
        assert '$namespace' in a["expr"] and '$deployment' in a["expr"], a["name"]
        assert variables_used(a["expr"]) <= set(variables) | GRAFANA_BUILTINS, a["name"]
        assert variables_used(a["titleFormat"] + a["textFormat"]) == set(), a["name"]  # {{label}}, not $var


# ----------------------------------------------------------------- queries


def _metric_names(expr) -> set[str]:
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.update(m.value.split("|"))
        return True

    promql_parser.walk(expr, visit)
    return names


def _exported_names() -> set[str]:
    """Every series something we test against exports: the recording rules, the stand-in
    engines and DCGM exporter, the operator's registry, Prometheus' own up/ALERTS."""
    from prometheus_client.parser import text_string_to_metric_families

    from specdeploy.controller import metrics as M

    names = {g["record"] for grp in R.build_groups() for g in grp["rules"] if "record" in g}
    names |= {"up", "ALERTS"}
    texts = []
    for engine in ("vllm", "sglang"):
        s = EngineStandin(engine, "healthy")
        s.advance(1)
        texts.append(s.metrics_text())
    texts.append(dcgm_standin.render(dcgm_standin.gpus_for_pods([("demo", "p")])))
    from prometheus_client import generate_latest

    texts.append(generate_latest(M.REGISTRY).decode())
    for text in texts:
        for fam in text_string_to_metric_families(text):
            names |= {s.name for s in fam.samples}
            # A labelled family with no child yet has no samples: its names by type.
            names |= {"counter": {fam.name + "_total"}, "gauge": {fam.name},
                      "histogram": {fam.name + x for x in ("_bucket", "_sum", "_count")}}.get(fam.type, set())
    return names


def test_every_panel_query_parses_with_promql_parser(dash):
    exported = _exported_names()
    for p, t in panel_exprs(dash):
        expr = substitute(t["expr"], EXAMPLE, rate_interval="5m")
        assert "$" not in expr.replace("$1", ""), expr
        try:
            ast = promql_parser.parse(expr)
        except ValueError as e:  # promql-parser raises ValueError with the parser's message
            pytest.fail(f"{dash['uid']} / {p['title']} / {t['refId']}: {e}\n{expr}")
        names = _metric_names(ast)
        assert names, f"{p['title']}: reads no series"
        unknown = names - exported
        assert not unknown, f"{p['title']}: {unknown} is exported by nothing we know"
    for a in annotation_exprs(dash):
        expr = substitute(a["expr"], EXAMPLE, rate_interval="5m")
        try:
            ast = promql_parser.parse(expr)
        except ValueError as e:
            pytest.fail(f"{dash['uid']} / annotation {a['name']}: {e}\n{expr}")
        names = _metric_names(ast)
        assert names and not names - exported, (a["name"], names - exported)
        assert a["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and a["enable"], a["name"]
        for key in re.findall(r"\{\{(\w+)\}\}", a["titleFormat"] + a["textFormat"] + "{{" + "}}{{".join(
                a["tagKeys"].split(",")) + "}}"):
            assert key in ("job", "namespace", "deployment", "decision", "reason"), (a["name"], key)


def test_operator_series_names_are_the_controllers():
    from specdeploy.controller import metrics as M

    def base(c) -> str:
        return next(iter(c.collect())).name

    assert D.OP_RECONCILES == base(M.RECONCILES) + "_total"
    assert D.OP_ERRORS == base(M.ERRORS) + "_total"
    assert D.OP_API_WRITES == base(M.API_WRITES) + "_total"
    assert D.OP_CHECK_FAILURES == base(M.CHECK_FAILURES) + "_total"
    assert D.OP_RECONCILE_SECONDS == base(M.RECONCILE_SECONDS)
    assert (D.OP_QUEUE_DEPTH, D.OP_MANAGED) == (base(M.QUEUE_DEPTH), base(M.MANAGED))
    assert (D.OP_LEADER, D.OP_LEADER_TRANSITIONS) == (base(M.LEADER), base(M.LEADER_TRANSITIONS) + "_total")
    assert D.OPERATOR_JOB == R.RuleParams().operator_job == R.OPERATOR_JOB


def test_panels_cover_the_issue():
    titles = {D.build_dashboard(n)["uid"]: {p["title"] for p in D.panels_of(D.build_dashboard(n))} for n in NAMES}
    exprs = " ".join(t["expr"] for n in NAMES for _p, t in panel_exprs(D.build_dashboard(n)))
    kinds = {p["type"] for n in NAMES for p in D.panels_of(D.build_dashboard(n))}
    assert "heatmap" in kinds
    for record in (R.LENGTH, R.RATE, R.PER_POSITION, R.DRAFTS, R.DRAFT_TOKENS, R.ACCEPTED):
        assert record in exprs
    for series in ("vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_running",
                   "vllm:num_requests_waiting", "sglang:gen_throughput", "sglang:time_to_first_token_seconds_bucket",
                   "sglang:inter_token_latency_seconds_bucket", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                   "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                   "specdeploy_reconcile_total", "specdeploy_reconcile_duration_seconds_bucket",
                   "specdeploy_reconcile_errors_total", "specdeploy_queue_depth", "up{"):
        assert series in exprs, series
    assert "Acceptance length (tau)" in titles["specdeploy-acceptance"]
    # issue 26: stable vs canary tau and tokens/s, the phase, promote/rollback annotations
    acceptance = D.build_dashboard("speculative-decoding")
    rollout = {p["title"]: p for p in D.panels_of(acceptance) if p["title"].startswith("Rollout")}
    assert set(rollout) == {"Rollout: tau, stable vs canary",
                            "Rollout: output tokens/s per running request, stable vs canary", "Rollout phase"}
    for title, figure in (("Rollout: tau, stable vs canary", "tau"),
                          ("Rollout: output tokens/s per running request, stable vs canary",
                           "tokens_per_second_per_request")):
        (t,) = rollout[title]["targets"]
        assert R.ROLLOUT_ANALYSIS in t["expr"] and f'figure="{figure}"' in t["expr"] and "{{track}}" in t["legendFormat"]
    phase = rollout["Rollout phase"]
    assert phase["type"] == "state-timeline" and R.ROLLOUT_PHASE in phase["targets"][0]["expr"]
    texts = {int(k): v["text"] for k, v in phase["fieldConfig"]["defaults"]["mappings"][0]["options"].items()}
    assert texts == dict(enumerate(D.ROLLOUT_PHASES))
    annotations = {a["expr"].split('decision="')[1].split('"')[0]: a for a in annotation_exprs(acceptance)}
    assert set(annotations) == {"promote", "rollback"}
    assert all(R.ROLLOUT_DECISIONS in a["expr"] for a in annotations.values())
    assert annotations["rollback"]["iconColor"] == "red" and "{{reason}}" in annotations["rollback"]["titleFormat"]
    assert {"Time to first token", "Inter-token latency", "GPU utilisation", "GPU memory used"} <= \
        titles["specdeploy-engines"]


def test_rollout_phases_are_the_operators():
    """The phase timeline's numbers map back to the phases the operator exports (and the stuck alert's are among them)."""
    from specdeploy.controller import metrics as M

    assert D.ROLLOUT_PHASES == M.ROLLOUT_PHASES
    assert set(R.ROLLOUT_PENDING_PHASES) < set(M.ROLLOUT_PHASES)


@pytest.mark.parametrize("engine,names", [
    ("vllm", ["vllm:generation_tokens", "vllm:num_requests_running", "vllm:num_requests_waiting",
              "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
              "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos"]),
    ("sglang", ["sglang:gen_throughput", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                "sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                "sglang:spec_accept_length", "sglang:spec_accept_rate"]),
])
def test_engine_series_names_match_the_recorded_engines(engine, names):
    """The series the dashboards and rules read exist in the engines' own source, as recorded
    in the flag snapshots by e2e/flagdrift/run.sh (metric_names.py) from the real packages."""
    from specdeploy.core.engines import get_engine
    from specdeploy.core.flagdrift import load_snapshot

    version = get_engine(engine).newest_verified
    recorded = set(load_snapshot(engine, version).get("metrics") or [])
    assert len(recorded) > 20, f"no metric names recorded for {engine} {version}: run e2e/flagdrift/run.sh"
    for n in names:
        assert n in recorded or n.removesuffix("_total") in recorded, f"{n} is not exported by {engine} {version}"


# ----------------------------------------------------------------- files the chart ships


def test_generate_writes_every_dashboard_for_the_chart(tmp_path):
    """The chart templates one ConfigMap labelled grafana_dashboard: "1" per file in
    files/dashboards/: `specdeploy generate` must write each dashboard there."""
    from specdeploy.cli import build_parser
    from specdeploy.generate import targets

    files = D.dashboard_files()
    assert set(files) == {f"{D.DASHBOARDS_DIR}/{n}.json" for n in NAMES}
    assert D.DASHBOARD_FILE in files
    written = {p.relative_to(tmp_path).as_posix(): make for p, make in targets(tmp_path, build_parser()).items()}
    missing = sorted(set(files) - set(written))
    assert not missing, f"specdeploy generate does not write {missing} (generate.py targets)"
    for rel, render in files.items():
        assert written[rel](None) == render()
        name = Path(rel).name
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", name), f"{name}: not a valid ConfigMap key"
        # A ConfigMap holds 1 MiB; kubectl's client-side apply annotation 256 KiB: stay well below.
        assert len(render().encode()) < 200 * 1024


def test_generated_dashboard_files_are_current():
    stale, missing = [], []
    for rel, render in D.dashboard_files().items():
        path = ROOT / rel
        if not path.exists():
            missing.append(rel)
        elif path.read_text() != render():
            stale.append(rel)
    assert not missing and not stale, f"run `specdeploy generate`: missing {missing}, stale {stale}"


def test_chart_ships_dashboards_with_the_sidecar_label():
    """Where the chart has a template for files/dashboards, it carries grafana_dashboard: "1"."""
    templates = ROOT / "charts" / "specdeploy" / "templates"
    users = [p for p in templates.glob("*.yaml") if "dashboards/" in p.read_text()] if templates.exists() else []
    if not users:
        pytest.skip("no chart template reads files/dashboards/ yet (the chart's owner adds it)")
    for p in users:
        text = p.read_text()
        assert "grafana_dashboard" in text and re.search(r"grafana_dashboard:\s*[\"']1[\"']", text), p.name
        assert "ConfigMap" in text, p.name


def test_metrics_reference_lists_every_dashboard_and_panel():
    ref = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    section = ref.split("## Grafana dashboards", 1)[1]
    for name in NAMES:
        d = D.build_dashboard(name)
        assert f"`{name}.json`" in section and f"`{d['uid']}`" in section
        for p in D.panels_of(d):
            assert p["title"] in section, f"{p['title']} missing from docs/reference/metrics.md"


# ----------------------------------------------------------------- the stand-ins' dashboard series


def test_engine_standin_serves_throughput_latency_and_queue_series():
    from prometheus_client.parser import text_string_to_metric_families

    from specdeploy_dev import engine_standin as E

    for engine, ttft, itl, buckets in (("vllm", E.VLLM_TTFT, E.VLLM_ITL, (E.VLLM_TTFT_BUCKETS, E.VLLM_ITL_BUCKETS)),
                                       ("sglang", E.SGLANG_TTFT, E.SGLANG_ITL,
                                        (E.SGLANG_TTFT_BUCKETS, E.SGLANG_ITL_BUCKETS))):
        for mode in ("healthy", "collapsed"):
            s = EngineStandin(engine, mode, requests_per_step=4)
            s.advance(3)
            fams = {f.name: f for f in text_string_to_metric_families(s.metrics_text())}
            for name, bounds in ((ttft, buckets[0]), (itl, buckets[1])):
                assert fams[name].type == "histogram", name
                les = [x.labels["le"] for x in fams[name].samples if x.name == name + "_bucket"]
                assert les == [str(float(b)) for b in bounds] + ["+Inf"]
                count = next(x.value for x in fams[name].samples if x.name == name + "_count")
                assert count == (12 if name == ttft else s.generation_tokens), name
            assert fams[E.VLLM_WAITING if engine == "vllm" else E.SGLANG_WAITING].type == "gauge"
            if engine == "sglang":
                assert fams[E.SGLANG_THROUGHPUT].samples[0].value == s.throughput() > 0
            assert s.inter_token_latency() == round(E.BASE_ITL_SECONDS / (s.expected_length() or 1), 6)
        # Deterministic: the same steps give the same exposition (but for _created times).
        a, b = EngineStandin(engine, "healthy"), EngineStandin(engine, "healthy")
        a.advance(5)
        b.advance(5)
        strip = lambda t: [x for x in t.splitlines() if "_created" not in x]  # noqa: E731
        assert strip(a.metrics_text()) == strip(b.metrics_text())
    # A collapse makes tokens slower.
    assert EngineStandin("vllm", "collapsed").inter_token_latency() > EngineStandin("vllm", "healthy").inter_token_latency()


def test_dcgm_standin_format():
    from prometheus_client.parser import text_string_to_metric_families

    gpus = dcgm_standin.gpus_for_pods([("demo", "a-0"), ("demo", "b-0")], gpus_per_pod=2, spare=1)
    fams = {f.name: f for f in text_string_to_metric_families(dcgm_standin.render(gpus))}
    assert {D.DCGM_GPU_UTIL, D.DCGM_FB_USED, D.DCGM_FB_FREE} <= set(fams)
    util = fams[D.DCGM_GPU_UTIL].samples
    assert fams[D.DCGM_GPU_UTIL].type == "gauge" and len(util) == 5
    assert [x.labels["gpu"] for x in util] == ["0", "1", "2", "3", "4"]
    held = [x for x in util if "pod" in x.labels]
    assert [x.labels["pod"] for x in held] == ["a-0", "a-0", "b-0", "b-0"]
    assert set(held[0].labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                                   "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"}
    assert len({x.labels["UUID"] for x in util}) == 5
    used = {x.labels["gpu"]: x.value for x in fams[D.DCGM_FB_USED].samples}
    free = {x.labels["gpu"]: x.value for x in fams[D.DCGM_FB_FREE].samples}
    assert all(used[g] + free[g] == gpus[0].fb_total for g in used)
