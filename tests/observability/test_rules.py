"""Prometheus rules (observability/rules.py) under the real `promtool check rules` and `promtool test rules`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from obs_helpers import ROOT, expected_alert, run_promtool, write_yaml
from specdeploy.core import acceptance as acc
from specdeploy.core.names import OP_ROLLOUT_ANALYSIS, OP_ROLLOUT_DECISIONS, OP_ROLLOUT_PHASE
from specdeploy.observability import rules as R

NS, JOB, MODEL = "llm", "llm/qwen3-8b", "Qwen/Qwen3-8B"
DEPLOY = {"namespace": NS, "job": JOB, "model_name": MODEL}
MINUTES = 40  # input length; alerts are checked at 25m (rates need 5m, alerts `for` 10-15m)
CHECK_AT = "25m"
GROUPS = R.build_groups()


def _lab(d: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def vllm_series(per_min_drafts: int, per_pos_per_min: list[int], pod: str = "qwen3-8b-0", engines=("0",),
                spec_decode: bool = True) -> list[dict]:
    """vLLM counters growing linearly each minute, as one pod with DP engines exports them."""
    out = []
    accepted = sum(per_pos_per_min)
    for e in engines:
        base = {"namespace": NS, "job": JOB, "pod": pod, "engine": e, "model_name": MODEL}
        out.append({"series": f"{acc.VLLM_GENERATION_TOKENS}{_lab(base)}",
                    "values": f"0+{per_min_drafts + accepted}x{MINUTES}"})
        if not spec_decode:
            continue
        out += [
            {"series": f"{acc.VLLM_DRAFTS}{_lab(base)}", "values": f"0+{per_min_drafts}x{MINUTES}"},
            {"series": f"{acc.VLLM_DRAFT_TOKENS}{_lab(base)}", "values": f"0+{per_min_drafts * 15}x{MINUTES}"},
            {"series": f"{acc.VLLM_ACCEPTED}{_lab(base)}", "values": f"0+{accepted}x{MINUTES}"},
        ]
        for k, n in enumerate(per_pos_per_min):
            out.append({"series": f"{acc.VLLM_ACCEPTED_PER_POS}{_lab({**base, 'position': str(k)})}",
                        "values": f"0+{n}x{MINUTES}"})
    return out


def sglang_series(tau: float | None, tp: int = 2, pod: str = "qwen3-8b-0") -> list[dict]:
    out = [{"series": f"{acc.SGLANG_GENERATION_TOKENS}{_lab({'namespace': NS, 'job': JOB, 'pod': pod, 'model_name': MODEL})}",
            "values": f"0+500x{MINUTES}"}]
    if tau is None:
        return out
    for t in range(tp):
        lab = {"namespace": NS, "job": JOB, "pod": pod, "engine_type": "unified", "model_name": MODEL,
               "tp_rank": str(t), "pp_rank": "0", "moe_ep_rank": "0"}
        out += [{"series": f"{acc.SGLANG_ACCEPT_LENGTH}{_lab(lab)}", "values": f"{tau}x{MINUTES}"},
                {"series": f"{acc.SGLANG_ACCEPT_RATE}{_lab(lab)}", "values": f"{(tau - 1) / 15:.4f}x{MINUTES}"}]
    return out


def operator_up(value: int | None) -> list[dict]:
    if value is None:
        return []
    return [{"series": 'up{job="specdeploy-operator",namespace="specdeploy-system",instance="10.0.0.5:8080"}',
             "values": f"{value}x{MINUTES}"}]


OP_KEY = {"namespace": NS, "deployment": "qwen3-8b", "engine": "vllm", "drafter": "z-lab/Qwen3-8B-DFlash-b16"}
OP_JOB = {"job": f"{NS}/qwen3-8b"}  # added by the rules: the PodMonitor's job of the same deployment
OP_SCRAPE = {"job": "specdeploy-operator", "instance": "10.0.0.5:8080", "pod": "specdeploy-operator-0"}


def operator_acceptance(tau: str, baseline: float | None, fraction: float = 0.25, key: dict = OP_KEY) -> list[dict]:
    """The acceptance monitor's gauges as the operator's /metrics has them (values: a promtool
    series expression for tau, e.g. "3.96x10 2.5x30")."""
    lab = {**key, **OP_SCRAPE}
    out = [{"series": f"{acc.OP_LENGTH}{_lab(lab)}", "values": tau}]
    if baseline is not None:
        out += [{"series": f"{acc.OP_BASELINE}{_lab(lab)}", "values": f"{baseline}x{MINUTES}"},
                {"series": f"{acc.OP_REGRESSION_FRACTION}{_lab(lab)}", "values": f"{fraction}x{MINUTES}"}]
    return out


def leader_gauges(*values: int) -> list[dict]:
    """One specdeploy_leader series per operator replica (the chart's pods)."""
    return [{"series": f'{R.LEADER_METRIC}{{job="specdeploy-operator",namespace="specdeploy-system",'
                       f'pod="specdeploy-{i}",instance="10.0.0.{5 + i}:8080"}}',
             "values": f"{v}x{MINUTES}"} for i, v in enumerate(values)]


HEALTHY_POS = [75, 56, 42, 32, 24, 18, 13, 10, 8, 6, 4, 3, 2, 2, 1]  # 0.75^(k+1) x 100 drafts: tau 3.96
COLLAPSED_POS = [5]  # tau 1.05
CLIFF_POS = [90, 81, 73, 66, 1, 1, 1]  # tau 4.13, a cliff after position 3
GRADUAL_POS = [50, 25, 12, 6, 3, 1]  # no cliff: it decays through the band


def _alerts(name: str, firing: list[dict] | None) -> dict:
    return {"eval_time": CHECK_AT, "alertname": name, "exp_alerts": firing or []}


def _case(name: str, series: list[dict], alerts: list[dict], exprs: list[dict] | None = None) -> dict:
    return {"name": name, "interval": "1m", "input_series": series, "alert_rule_test": alerts,
            "promql_expr_test": exprs or []}


VLLM_KEY = {**DEPLOY, "engine_kind": "vllm"}
SGLANG_KEY = {**DEPLOY, "engine_kind": "sglang"}


def build_cases() -> list[dict]:
    return [
        _case("healthy vLLM: nothing fires", vllm_series(100, HEALTHY_POS, engines=("0", "1")) + operator_up(1)
              + operator_acceptance(f"3.96x{MINUTES}", 3.96),
              [_alerts(a, None) for a in R.ALERTS],
              [{"expr": R.LENGTH, "eval_time": "10m", "exp_samples": [{"labels": R.LENGTH + _lab(VLLM_KEY), "value": 3.96}]},
               {"expr": R.RATE, "eval_time": "10m", "exp_samples": [{"labels": R.RATE + _lab(VLLM_KEY), "value": 2.96 / 15}]},
               {"expr": f'{R.PER_POSITION}{{position="0"}}', "eval_time": "10m",
                "exp_samples": [{"labels": R.PER_POSITION + _lab({**VLLM_KEY, 'position': '0'}), "value": 0.75}]},
               {"expr": R.CLIFF, "eval_time": "10m", "exp_samples": []}]),
        _case("collapsed vLLM: collapse fires", vllm_series(100, COLLAPSED_POS) + operator_up(1),
              [_alerts(R.A_COLLAPSED, [expected_alert(GROUPS, R.A_COLLAPSED, VLLM_KEY, 1.05)]),
               _alerts(R.A_CLIFF, None), _alerts(R.A_MISSING, None), _alerts(R.A_OPERATOR_DOWN, None)],
              [{"expr": R.LENGTH, "eval_time": "10m", "exp_samples": [{"labels": R.LENGTH + _lab(VLLM_KEY), "value": 1.05}]}]),
        _case("collapse needs 10m: not yet at 8m", vllm_series(100, COLLAPSED_POS),
              [{"eval_time": "8m", "alertname": R.A_COLLAPSED, "exp_alerts": []}]),
        _case("healthy SGLang: nothing fires", sglang_series(3.96) + operator_up(1)
              + operator_acceptance(f"3.1x{MINUTES}", 3.96, key={**OP_KEY, "engine": "sglang"}),  # 22% below: within
              [_alerts(a, None) for a in R.ALERTS],
              [{"expr": R.LENGTH, "eval_time": "10m", "exp_samples": [{"labels": R.LENGTH + _lab(SGLANG_KEY), "value": 3.96}]}]),
        _case("collapsed SGLang: collapse fires (TP ranks averaged, not summed)", sglang_series(1.05, tp=4) + operator_up(1),
              [_alerts(R.A_COLLAPSED, [expected_alert(GROUPS, R.A_COLLAPSED, SGLANG_KEY, 1.05)]),
               _alerts(R.A_MISSING, None), _alerts(R.A_OPERATOR_DOWN, None)],
              [{"expr": R.LENGTH, "eval_time": "10m", "exp_samples": [{"labels": R.LENGTH + _lab(SGLANG_KEY), "value": 1.05}]}]),
        _case("cliff vLLM: cliff fires, collapse does not", vllm_series(100, CLIFF_POS) + operator_up(1),
              [_alerts(R.A_CLIFF, [expected_alert(GROUPS, R.A_CLIFF, VLLM_KEY, 0.01)]),
               _alerts(R.A_COLLAPSED, None), _alerts(R.A_MISSING, None)],
              [{"expr": R.CLIFF, "eval_time": "10m", "exp_samples": [{"labels": R.CLIFF + _lab(VLLM_KEY), "value": 0.01}]}]),
        _case("regressed: tau 2.5 against a baseline of 3.96 fires (0.63 < 1 - 0.25), collapse does not",
              vllm_series(100, HEALTHY_POS) + operator_up(1) + operator_acceptance(f"3.96x5 2.5x{MINUTES - 5}", 3.96),
              [_alerts(R.A_REGRESSED, [expected_alert(GROUPS, R.A_REGRESSED, {**OP_KEY, **OP_JOB}, 2.5 / 3.96)]),
               _alerts(R.A_COLLAPSED, None), _alerts(R.A_CLIFF, None), _alerts(R.A_OPERATOR_DOWN, None)],
              [{"expr": R.BASELINE_RATIO, "eval_time": "10m",
                "exp_samples": [{"labels": R.BASELINE_RATIO + _lab({**OP_KEY, **OP_JOB}), "value": 2.5 / 3.96}]},
               {"expr": R.REGRESSION_THRESHOLD, "eval_time": "10m",
                "exp_samples": [{"labels": R.REGRESSION_THRESHOLD + _lab({**OP_KEY, **OP_JOB}),
                                 "value": 3.96 * 0.75}]},
               {"expr": R.BASELINE, "eval_time": "10m",
                "exp_samples": [{"labels": R.BASELINE + _lab({**OP_KEY, **OP_JOB}), "value": 3.96}]}]),
        # the drop is at 6m; the alert reads a recording rule of another group, which promtool may
        # evaluate after the alert's group at the same instant (one interval late): 11m after the drop,
        # not exactly 10m, so the case does not depend on group order
        _case("regression needs 10m: not firing 7m after the drop, firing 11m after",
              operator_acceptance(f"3.96x5 2.5x{MINUTES - 5}", 3.96),
              [{"eval_time": "13m", "alertname": R.A_REGRESSED, "exp_alerts": []},
               {"eval_time": "17m", "alertname": R.A_REGRESSED,
                "exp_alerts": [expected_alert(GROUPS, R.A_REGRESSED, {**OP_KEY, **OP_JOB}, 2.5 / 3.96)]}]),
        _case("the deployment's own fraction: 3.5 of 3.96 regresses at 0.1, not at 0.25",
              operator_acceptance(f"3.5x{MINUTES}", 3.96, 0.1)
              + operator_acceptance(f"3.5x{MINUTES}", 3.96, 0.25, key={**OP_KEY, "deployment": "other"}),
              [_alerts(R.A_REGRESSED, [expected_alert(GROUPS, R.A_REGRESSED, {**OP_KEY, **OP_JOB}, 3.5 / 3.96)])]),
        _case("no baseline learned yet: no regression, however low", operator_acceptance(f"1.6x{MINUTES}", None),
              [_alerts(R.A_REGRESSED, None)],
              [{"expr": R.BASELINE_RATIO, "eval_time": "10m", "exp_samples": []}]),
        _case("gradual decay is no cliff", vllm_series(100, GRADUAL_POS),
              [_alerts(R.A_CLIFF, None), _alerts(R.A_COLLAPSED, None)]),
        _case("missing metrics: vLLM without spec counters, SGLang without gauges",
              vllm_series(100, [], pod="plain-vllm-0", spec_decode=False) + sglang_series(None, pod="plain-sglang-0")
              + vllm_series(100, HEALTHY_POS, pod="qwen3-8b-1") + operator_up(1),
              [_alerts(R.A_MISSING, [
                  expected_alert(GROUPS, R.A_MISSING, {"namespace": NS, "job": JOB, "pod": "plain-sglang-0"}),
                  expected_alert(GROUPS, R.A_MISSING, {"namespace": NS, "job": JOB, "pod": "plain-vllm-0"}),
              ]), _alerts(R.A_COLLAPSED, None)]),
        _case("operator down: up == 0", operator_up(0),
              [_alerts(R.A_OPERATOR_DOWN, [expected_alert(GROUPS, R.A_OPERATOR_DOWN, {
                  "job": "specdeploy-operator", "namespace": "specdeploy-system", "instance": "10.0.0.5:8080"})])]),
        _case("operator down: not scraped at all", vllm_series(100, HEALTHY_POS),
              [_alerts(R.A_OPERATOR_DOWN, [expected_alert(GROUPS, R.A_OPERATOR_DOWN, {"job": R.OPERATOR_JOB})]),
               _alerts(R.A_NO_LEADER, None)]),  # absence is OperatorDown's, not a second alert
        # The job is the chart's jobLabel value, not the Service name: a target under another job is no operator.
        _case("operator down: scraped under the Service name", [
              {"series": 'up{job="specdeploy-metrics",namespace="specdeploy-system",instance="10.0.0.5:8080"}',
               "values": f"1x{MINUTES}"}],
              [_alerts(R.A_OPERATOR_DOWN, [expected_alert(GROUPS, R.A_OPERATOR_DOWN, {"job": R.OPERATOR_JOB})])]),
        _case("two replicas, one leads: no alert", operator_up(1) + leader_gauges(1, 0),
              [_alerts(R.A_NO_LEADER, None), _alerts(R.A_OPERATOR_DOWN, None)]),
        _case("two replicas up, none leads: no-leader fires", operator_up(1) + leader_gauges(0, 0),
              [_alerts(R.A_NO_LEADER, [expected_alert(GROUPS, R.A_NO_LEADER, {"namespace": "specdeploy-system"})]),
               _alerts(R.A_OPERATOR_DOWN, None)]),
    ] + guard_cases() + rollout_cases()


def running(values: str, pod: str = "qwen3-8b-0", engine: str = "vllm", dp: str = "0") -> list[dict]:
    """The engine's running-requests gauge as one pod exports it (vLLM: per DP engine)."""
    if engine == "vllm":
        return [{"series": f"{acc.VLLM_REQUESTS_RUNNING}"
                           f"{_lab({'namespace': NS, 'job': JOB, 'pod': pod, 'engine': dp, 'model_name': MODEL})}",
                 "values": values}]
    return [{"series": f"{acc.SGLANG_REQUESTS_RUNNING}{_lab({'namespace': NS, 'job': JOB, 'pod': pod, 'tp_rank': '0'})}",
             "values": values}]


def guard_gauge(limit: int, key: dict = OP_KEY) -> list[dict]:
    return [{"series": f"{acc.OP_GUARD_MAX_CONCURRENCY}{_lab({**key, **OP_SCRAPE})}", "values": f"{limit}x{MINUTES}"}]


def guard_cases() -> list[dict]:
    past = {**OP_KEY, **OP_JOB}
    return [
        _case("past the crossover: the busiest engine averages 6 >= the guard's 4 for 15m", guard_gauge(4)
              + running(f"6x{MINUTES}") + running(f"1x{MINUTES}", pod="qwen3-8b-1") + running(f"2x{MINUTES}", dp="1"),
              [_alerts(R.A_PAST_CROSSOVER, [expected_alert(GROUPS, R.A_PAST_CROSSOVER, past, 6)])],
              [{"expr": R.REQUESTS_RUNNING, "eval_time": "10m",
                "exp_samples": [{"labels": R.REQUESTS_RUNNING + _lab({"namespace": NS, "job": JOB}), "value": 6}]},
               {"expr": R.GUARD, "eval_time": "10m", "exp_samples": [{"labels": R.GUARD + _lab(past), "value": 4}]}]),
        _case("at the crossover exactly (SGLang): fires", guard_gauge(4, {**OP_KEY, "engine": "sglang"})
              + running(f"4x{MINUTES}", engine="sglang"),
              [_alerts(R.A_PAST_CROSSOVER, [expected_alert(GROUPS, R.A_PAST_CROSSOVER,
                                                           {**past, "engine": "sglang"}, 4)])]),
        _case("below the crossover: no alert", guard_gauge(4) + running(f"3x{MINUTES}"),
              [_alerts(R.A_PAST_CROSSOVER, None)]),
        _case("a burst shorter than 15m: no alert", guard_gauge(4) + running(f"1x10 9x8 1x{MINUTES - 18}"),
              [_alerts(R.A_PAST_CROSSOVER, None)]),
        _case("no guard: no alert however busy", running(f"60x{MINUTES}"), [_alerts(R.A_PAST_CROSSOVER, None)]),
    ]


ROLLOUT_KEY = {"namespace": NS, "deployment": "qwen3-8b"}


def rollout_decisions(decision: str, reason: str, values: str) -> list[dict]:
    """The operator's decisions counter for one (decision, reason) as its /metrics has it."""
    lab = {**ROLLOUT_KEY, "decision": decision, "reason": reason, **OP_SCRAPE}
    return [{"series": f"{OP_ROLLOUT_DECISIONS}{_lab(lab)}", "values": values}]


def rollout_phase(current: str, minutes: int = MINUTES, then: str | None = None, after: int = 0) -> list[dict]:
    """The phase gauges: 1 for `current` (until minute `after`, then for `then`), 0 for the others."""
    out = []
    for phase in ("Stable", "Progressing", "Analyzing", "Promoting", "RolledBack"):
        if then is None:
            values = f"{int(phase == current)}x{minutes}"
        else:
            values = f"{int(phase == current)}x{after - 1} {int(phase == then)}x{minutes - after}"
        out.append({"series": f"{OP_ROLLOUT_PHASE}{_lab({**ROLLOUT_KEY, 'phase': phase, **OP_SCRAPE})}",
                    "values": values})
    return out


def rollout_analysis(track: str, figure: str, value: float) -> list[dict]:
    lab = {**ROLLOUT_KEY, "track": track, "figure": figure, **OP_SCRAPE}
    return [{"series": f"{OP_ROLLOUT_ANALYSIS}{_lab(lab)}", "values": f"{value}x{MINUTES}"}]


def rollout_cases() -> list[dict]:
    failed = {**ROLLOUT_KEY, **OP_JOB, "reason": "AcceptanceBelowStable"}
    rec = {**ROLLOUT_KEY, **OP_JOB}
    return [
        # the counters exist at 0 (export_rollout), the rollback at minute 6
        _case("canary rolled back: RolloutFailed fires with the reason, for 15m, then resolves",
              rollout_decisions("rollback", "AcceptanceBelowStable", f"0x5 1x{MINUTES - 5}")
              + rollout_decisions("rollback", "CanaryCrashing", f"0x{MINUTES}")
              + rollout_decisions("promote", "Promoted", f"0x{MINUTES}") + rollout_phase("RolledBack"),
              [{"eval_time": "5m", "alertname": R.A_ROLLOUT_FAILED, "exp_alerts": []},
               {"eval_time": "7m", "alertname": R.A_ROLLOUT_FAILED,
                "exp_alerts": [expected_alert(GROUPS, R.A_ROLLOUT_FAILED, failed)]},
               {"eval_time": "20m", "alertname": R.A_ROLLOUT_FAILED,
                "exp_alerts": [expected_alert(GROUPS, R.A_ROLLOUT_FAILED, failed)]},
               {"eval_time": "25m", "alertname": R.A_ROLLOUT_FAILED, "exp_alerts": []},
               _alerts(R.A_ROLLOUT_STUCK, None)],
              [{"expr": R.ROLLOUT_DECISIONS + '{decision="rollback"} > bool 0', "eval_time": "7m",
                "exp_samples": [{"labels": _lab({**rec, "decision": "rollback", "reason": r}), "value": v}
                                for r, v in (("AcceptanceBelowStable", 1), ("CanaryCrashing", 0))]},
               # bool: increase()'s extrapolated amount depends on the window's edges
               {"expr": R.ROLLOUT_DECISIONS + " > 0", "eval_time": "20m", "exp_samples": []}]),
        _case("the first rollback of a reason the operator did not pre-create (series born at 1): fires",
              rollout_decisions("rollback", "SomethingNew", f"_x5 1x{MINUTES - 5}"),
              [{"eval_time": "10m", "alertname": R.A_ROLLOUT_FAILED, "exp_alerts": [
                  expected_alert(GROUPS, R.A_ROLLOUT_FAILED, {**failed, "reason": "SomethingNew"})]},
               {"eval_time": "25m", "alertname": R.A_ROLLOUT_FAILED, "exp_alerts": []}]),
        _case("canary promoted: no alert", rollout_decisions("promote", "Promoted", f"0x5 1x{MINUTES - 5}")
              + rollout_decisions("rollback", "AcceptanceBelowStable", f"0x{MINUTES}") + rollout_phase("Stable")
              + rollout_analysis("stable", "tau", 3.72) + rollout_analysis("canary", "tau", 3.8),
              [_alerts(R.A_ROLLOUT_FAILED, None), {"eval_time": "7m", "alertname": R.A_ROLLOUT_FAILED,
                                                   "exp_alerts": []}, _alerts(R.A_ROLLOUT_STUCK, None)],
              [{"expr": R.ROLLOUT_ANALYSIS, "eval_time": "10m", "exp_samples": [
                  {"labels": R.ROLLOUT_ANALYSIS + _lab({**rec, "track": "canary", "figure": "tau"}), "value": 3.8},
                  {"labels": R.ROLLOUT_ANALYSIS + _lab({**rec, "track": "stable", "figure": "tau"}), "value": 3.72}]},
               {"expr": R.ROLLOUT_PHASE + " == 1", "eval_time": "10m", "exp_samples": [
                   {"labels": R.ROLLOUT_PHASE + _lab({**rec, "phase": "Stable"}), "value": 1}]}]),
        _case("analyzing for an hour: RolloutStuck fires", rollout_phase("Analyzing", minutes=90),
              [{"eval_time": "59m", "alertname": R.A_ROLLOUT_STUCK, "exp_alerts": []},
               {"eval_time": "61m", "alertname": R.A_ROLLOUT_STUCK, "exp_alerts": [
                   expected_alert(GROUPS, R.A_ROLLOUT_STUCK, {**rec, "phase": "Analyzing"})]}]),
        _case("analyzing for 40m, then rolled back: never stuck", rollout_phase("Analyzing", 90, "RolledBack", 41),
              [{"eval_time": "61m", "alertname": R.A_ROLLOUT_STUCK, "exp_alerts": []},
               {"eval_time": "85m", "alertname": R.A_ROLLOUT_STUCK, "exp_alerts": []}]),
    ]


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("rules")
    (d / "prometheus-rules.yaml").write_text(R.render_rules_yaml())
    return d


def test_promtool_check_rules(rules_dir):
    r = run_promtool("check", "rules", "prometheus-rules.yaml", cwd=rules_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_promtool_test_rules(rules_dir):
    doc = {"rule_files": ["prometheus-rules.yaml"], "evaluation_interval": "1m", "tests": build_cases()}
    write_yaml(rules_dir / "tests.yaml", doc)
    r = run_promtool("test", "rules", "tests.yaml", cwd=rules_dir)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_fires_somewhere_and_stays_silent_when_healthy():
    cases = build_cases()
    healthy = [c for c in cases if c["name"].startswith("healthy")]
    for name in R.ALERTS:
        assert any(t["alertname"] == name and t["exp_alerts"] for c in cases for t in c["alert_rule_test"]), name
        for c in healthy:
            assert any(t["alertname"] == name and not t["exp_alerts"] for t in c["alert_rule_test"]), (name, c["name"])


def test_generated_file_is_current_when_present():
    path = ROOT / R.RULES_FILE
    if path.exists():  # written by `specdeploy generate`; checked there too once wired
        assert path.read_text() == R.render_rules_yaml(), f"{R.RULES_FILE} is stale: run `specdeploy generate`"


def test_rules_use_the_shared_metric_names():
    text = R.render_rules_yaml()
    for name in (acc.VLLM_DRAFTS, acc.VLLM_DRAFT_TOKENS, acc.VLLM_ACCEPTED, acc.VLLM_ACCEPTED_PER_POS,
                 acc.SGLANG_ACCEPT_LENGTH, acc.SGLANG_ACCEPT_RATE, acc.OP_LENGTH, acc.OP_BASELINE,
                 acc.OP_REGRESSION_FRACTION, acc.OP_GUARD_MAX_CONCURRENCY, acc.VLLM_REQUESTS_RUNNING,
                 acc.SGLANG_REQUESTS_RUNNING):
        assert name in text
    doc = yaml.safe_load(text)
    records = {r.get("record") for g in doc["groups"] for r in g["rules"]}
    assert {R.LENGTH, R.RATE, R.PER_POSITION, R.CLIFF, R.BASELINE, R.BASELINE_RATIO, R.REGRESSION_THRESHOLD} <= records
    alerts = {r.get("alert") for g in doc["groups"] for r in g["rules"]} - {None}
    assert alerts == set(R.ALERTS)
    for g in doc["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                rollout = r["alert"] in (R.A_ROLLOUT_FAILED, R.A_ROLLOUT_STUCK)
                assert (R.ROLLOUT_RUNBOOK if rollout else R.RUNBOOK) in r["annotations"]["runbook_url"]
    thresholds = {r["record"]: r["expr"] for r in doc["groups"][0]["rules"]}
    assert thresholds[R.T_MIN_LENGTH] == f"vector({acc.DEFAULT_MIN_LENGTH:g})"


def test_params_change_thresholds():
    text = R.render_rules_yaml(R.RuleParams(min_length=2.0, engine_selector='app_kubernetes_io_managed_by="specdeploy"'))
    assert "vector(2)" in text and 'vllm:generation_tokens_total{app_kubernetes_io_managed_by="specdeploy"}' in text


def test_docs_name_every_rule_alert_and_runbook_anchor():
    ref = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    howto = (ROOT / R.RUNBOOK).read_text()
    doc = yaml.safe_load(R.render_rules_yaml())
    for g in doc["groups"]:
        for r in g["rules"]:
            assert (r.get("record") or r.get("alert")) in ref
            if "alert" in r:
                path, anchor = r["annotations"]["runbook_url"].split("#", 1)
                headings = {line.lstrip("#").strip().lower().replace(" ", "-")
                            for line in (ROOT / path).read_text().splitlines() if line.startswith("#")}
                assert anchor in headings, (path, anchor)
    for name in (acc.VLLM_DRAFTS, acc.VLLM_DRAFT_TOKENS, acc.VLLM_ACCEPTED, acc.VLLM_ACCEPTED_PER_POS,
                 acc.SGLANG_ACCEPT_LENGTH, acc.SGLANG_ACCEPT_RATE):
        assert f"`{name}`" in ref
    for section in ("window-flag-not-set", "sliding-window-dropped", "layer-id-offset", "prefix-cache-staleness"):
        assert f"(#{section})" in howto


def test_dashboard_reads_the_vocabulary():
    import json

    from specdeploy.observability.dashboards import DASHBOARD_FILE, render_dashboard_json

    dash = json.loads(render_dashboard_json())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))  # rows have none
    for record in (R.LENGTH, R.RATE, R.PER_POSITION, R.DRAFTS):
        assert record in exprs
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    path = ROOT / DASHBOARD_FILE
    if path.exists():
        assert path.read_text() == render_dashboard_json(), f"{DASHBOARD_FILE} is stale: run `specdeploy generate`"
