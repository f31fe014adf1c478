"""Acceptance monitoring end to end: the operator scrapes a (stand-in) engine pod, writes
status.acceptance and SpeculationHealthy, posts Events, exports its gauges; a real
Prometheus with our rules scrapes the same engine and the operator and fires the alert.

The scene (embedded API server only: the test plays the kubelet for the engine pod):
- a stand-in vLLM engine (``specdeploy_dev.engine_standin``, mode healthy) on loopback;
- the operator with ``SPECDEPLOY_ACCEPTANCE_INTERVAL=1`` and the qwen3.6-27b example applied;
  its Deployment marked ready, and one engine Pod whose ``status.podIP`` is 127.0.0.1 and whose
  container port ``http`` is the stand-in's port: the operator's ordinary code path scrapes it;
- real Prometheus (``specdeploy_dev.prometheus``, 1 s scrape and evaluation) scraping the
  stand-in and the operator's /metrics, with the shipped rules rendered with a 10 s rate window
  and a 2 s ``for`` on the alerts (``RuleParams``; the chart's file keeps 5m and 10m).

Every wait has a deadline; nothing is timed.
"""

from __future__ import annotations

import pytest

from e2e_support import (QWEN, embedded_only, events_for, get, new_cluster, play_engine_pod, printer_columns,
                         stop_cluster, wait_for, writes)
from specdeploy_dev.engine_standin import EngineStandin
from specdeploy_dev.prometheus import Prometheus, PrometheusError, find_exe, scrape_job
from specdeploy.observability import rules as R

pytestmark = embedded_only

NAME = "qwen36-27b"  # the example's SpeculativeDeployment
POD = f"{NAME}-6b8d9c7f5-x2k4q"
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"
INTERVAL_S = 1  # the operator's acceptance interval in this scene
DEADLINE_S = 30.0  # operator-side waits: a few 1 s monitor ticks plus a reconcile
ALERT_DEADLINE_S = 60.0  # the 10 s rate window turning over, plus the 2 s `for`


class Scene:
    def __init__(self, c, standin: EngineStandin, prom: Prometheus):
        self.c, self.standin, self.prom = c, standin, prom
        self.job = f"{c.namespace}/{NAME}"  # what a PodMonitor makes of it: <namespace>/<deployment>

    def speculation(self) -> dict | None:
        return self.c.condition(NAME, "SpeculationHealthy")

    def acceptance(self) -> dict:
        return (get(self.c, "specdeploy", NAME).get("status") or {}).get("acceptance") or {}

    def wait_speculation(self, status: str, reason: str) -> dict:
        return self.c.wait_condition(NAME, "SpeculationHealthy", status, reason, timeout=DEADLINE_S)

    def events(self, reason: str, type_: str) -> list[dict]:
        return [e for e in events_for(self.c, NAME) if e["reason"] == reason and e["type"] == type_]

    def operator_length(self) -> float | None:
        m = self.c.operator_metrics() or {}
        want = (f'namespace="{self.c.namespace}"', f'deployment="{NAME}"', 'engine="vllm"', f'drafter="{DRAFTER}"')
        got = [v for k, v in m.items() if k.startswith("specdeploy_acceptance_length{") and all(w in k for w in want)]
        return got[0] if len(got) == 1 else None

    def firing(self, alert: str = R.A_COLLAPSED) -> list[dict]:
        return self.prom.query(f'ALERTS{{alertname="{alert}",alertstate="firing",job="{self.job}"}}')


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    exe = find_exe()
    if exe is None:
        pytest.skip("prometheus is not installed (.ci/install-prometheus)")
    standin = EngineStandin("vllm", "healthy", model_name="Qwen/Qwen3.6-27B").start()
    c = prom = None
    try:
        c = new_cluster("acceptance", extra_env={"SPECDEPLOY_ACCEPTANCE_INTERVAL": str(INTERVAL_S)})
        rules = tmp_path_factory.mktemp("rules") / "prometheus-rules.yaml"
        rules.write_text(R.render_rules_yaml(R.RuleParams(window="10s", collapse_for="2s", cliff_for="2s",
                                                          regression_for="2s")))
        jobs = [scrape_job(f"{c.namespace}/{NAME}", f"127.0.0.1:{standin.port}",
                           labels={"namespace": c.namespace, "pod": POD}),
                scrape_job("specdeploy-operator", f"127.0.0.1:{c.operator_metrics_port}", honor_labels=True,
                           labels={"namespace": "specdeploy-system", "pod": "specdeploy-operator-0"})]  # as the chart
        prom = Prometheus(jobs, [rules], exe=exe).start()
        yield Scene(c, standin, prom)
    finally:
        if prom is not None:
            prom.stop()
        if c is not None:
            stop_cluster(c)
        standin.stop()


def test_collapse_turns_speculation_unhealthy_fires_the_alert_and_recovers(scene):
    c, s, prom = scene.c, scene.standin, scene.prom
    c.kubectl("apply", "-k", str(QWEN), "-n", c.namespace)
    c.wait_condition(NAME, "DrafterCompatible", "True")
    wait_for(lambda: get(c, "deployment", NAME), DEADLINE_S, f"deployment {NAME}")
    c.mark_workload_ready(NAME, "deployment", c.namespace)
    c.wait_condition(NAME, "Ready", "True", "AllReplicasReady")
    assert scene.speculation() is None  # no engine pod yet: nothing judged, nothing written
    assert not scene.acceptance()

    # --- healthy: the operator scrapes the pod's podIP:http port
    play_engine_pod(c, NAME, POD, s.port)
    cond = scene.wait_speculation("True", "Healthy")
    assert cond["observedGeneration"] == get(c, "specdeploy", NAME)["metadata"]["generation"]
    a = scene.acceptance()
    assert a["length"] == pytest.approx(3.96, abs=0.005) and a["length"] == round(s.expected_length(), 2)
    assert a["rate"] == pytest.approx((3.96 - 1) / 15, abs=0.005)
    assert len(a["perPosition"]) == 15 and a["perPosition"][0] == 0.75 and a["perPosition"][14] == 0.01
    assert a["podsReporting"] == 1 and a["window"] == f"{INTERVAL_S}s" and a["sampledAt"].endswith("Z")
    assert printer_columns(c)[NAME]["ACCEPTLEN"] == "3.96"
    wait_for(lambda: scene.events("Healthy", "Normal"), DEADLINE_S, "the Normal Healthy event")
    assert s.requests > 0

    # steady figures write nothing: let the operator scrape a few more times, then compare
    before, sampled, seen = writes(c), a["sampledAt"], s.requests
    wait_for(lambda: s.requests >= seen + 8, DEADLINE_S, "more scrapes of the stand-in (operator and Prometheus)")
    wait_for(lambda: scene.operator_length() is not None, DEADLINE_S, "specdeploy_acceptance_length on /metrics")
    assert writes(c) == before, "a steady acceptance caused API writes"
    assert scene.acceptance()["sampledAt"] == sampled

    # Prometheus scrapes the engine and the operator; the operator's gauge is there
    prom.wait_until(lambda: {x["metric"]["job"] for x in prom.query("up == 1")} >= {scene.job, "specdeploy-operator"},
                    DEADLINE_S, "both targets up")
    prom.wait_until(lambda: prom.query(f'specdeploy_acceptance_length{{deployment="{NAME}"}} > 3.9'), DEADLINE_S,
                    "the operator's acceptance gauge in Prometheus")
    assert not scene.firing()

    # --- collapse
    s.set_mode("collapsed")
    cond = scene.wait_speculation("False", "AcceptanceCollapsed")
    assert "below 1.5" in cond["message"]
    a = scene.acceptance()
    assert a["length"] == pytest.approx(1.05, abs=0.005) and a["podsReporting"] == 1
    assert printer_columns(c)[NAME]["ACCEPTLEN"] == "1.05"
    warnings = wait_for(lambda: scene.events("AcceptanceCollapsed", "Warning"), DEADLINE_S,
                        "the Warning AcceptanceCollapsed event")
    assert len(warnings) == 1 and "collapsed" in warnings[0]["message"]
    assert c.condition(NAME, "Ready")["status"] == "True"  # the reconciler's conditions are all still there
    assert {x["type"] for x in get(c, "specdeploy", NAME)["status"]["conditions"]} == \
        {"DrafterCompatible", "Progressing", "Ready", "Degraded", "SpeculationHealthy"}
    length = wait_for(lambda: (v := scene.operator_length()) is not None and v < 1.5 and v, DEADLINE_S,
                      "specdeploy_acceptance_length below 1.5 on the operator's /metrics")
    assert length == pytest.approx(1.05, abs=0.005)
    try:
        alerts = prom.wait_until(scene.firing, ALERT_DEADLINE_S, f"{R.A_COLLAPSED} firing")
    except PrometheusError:
        pytest.fail(f"{R.A_COLLAPSED} did not fire: {prom.query('ALERTS')} "
                    f"tau={prom.query(R.LENGTH)}\n{prom.log()}")
    assert alerts[0]["metric"]["namespace"] == c.namespace and alerts[0]["metric"]["severity"] == "warning"

    # --- recovery
    s.set_mode("healthy")
    scene.wait_speculation("True", "Healthy")
    # the first window after the switch may mix collapsed and healthy steps: then the pure one
    wait_for(lambda: scene.acceptance().get("length") == 3.96, DEADLINE_S, "status.acceptance.length 3.96 again")
    wait_for(lambda: len(scene.events("Healthy", "Normal")) == 2, DEADLINE_S, "a second Normal Healthy event")
    wait_for(lambda: (v := scene.operator_length()) is not None and v > 3.9, DEADLINE_S,
             "specdeploy_acceptance_length back above 3.9")


def test_a_drop_below_the_learned_baseline_is_a_regression_until_accepted(scene):
    """tau 3.96 -> 1.99: above the collapse floor, half the baseline: AcceptanceRegressed in status,
    an Event, SpecdeployAcceptanceRegressed in Prometheus; the reset annotation accepts 1.99."""
    c, s, prom = scene.c, scene.standin, scene.prom
    if scene.speculation() is None:
        pytest.skip("needs the collapse scenario's deployment and pod")
    s.set_mode("healthy")
    # the window that spans the switch mixes collapsed and healthy steps (tau ~2.5, above the floor, so
    # it would be learned): once a healthy window shows in status, let the stand-in be scraped (each
    # scrape, the operator's or Prometheus's, is one step) about three more monitor windows, so the
    # latest three windows the monitor holds are healthy ones
    wait_for(lambda: scene.acceptance().get("length") == 3.96, DEADLINE_S, "a window at tau 3.96")
    steps = s.steps
    wait_for(lambda: s.steps >= steps + 8, DEADLINE_S, "eight more stand-in steps")
    # learn quickly: 1 s and 100 drafts (one stand-in step) after 3 windows
    c.kubectl("patch", "specdeploy", NAME, "-n", c.namespace, "--type=merge", "-p",
              '{"spec": {"monitoring": {"baselineSettleSeconds": 1, "baselineMinDrafts": 100}}}')
    base = wait_for(lambda: (b := scene.acceptance().get("baseline")) and b["length"] == 3.96 and b, DEADLINE_S,
                    "status.acceptance.baseline 3.96")
    assert base["revision"] == scene.acceptance()["revision"] and base["since"].endswith("Z")
    assert "baseline 3.96 (this revision" in scene.wait_speculation("True", "Healthy")["message"]
    prom.wait_until(lambda: prom.query(f'{R.BASELINE}{{job="{scene.job}"}} == 3.96'), DEADLINE_S,
                    "the baseline in Prometheus")

    s.set_mode("regressed")
    scene.wait_speculation("False", "AcceptanceRegressed")
    # the first window after the switch may mix healthy and regressed steps: then the pure one
    cond = wait_for(lambda: (x := scene.speculation()) and "1.99 is 50% below the baseline 3.96" in x["message"] and x,
                    DEADLINE_S, "the regression message with both numbers")
    assert "reset-acceptance-baseline" in cond["message"] and cond["status"] == "False"
    assert scene.acceptance()["baseline"] == base  # this revision's baseline does not move
    wait_for(lambda: scene.events("AcceptanceRegressed", "Warning"), DEADLINE_S, "the Warning AcceptanceRegressed event")
    try:
        alerts = prom.wait_until(lambda: scene.firing(R.A_REGRESSED), ALERT_DEADLINE_S, f"{R.A_REGRESSED} firing")
    except PrometheusError:
        pytest.fail(f"{R.A_REGRESSED} did not fire: {prom.query('ALERTS')} "
                    f"ratio={prom.query(R.BASELINE_RATIO)}\n{prom.log()}")
    assert alerts[0]["metric"]["deployment"] == NAME and alerts[0]["metric"]["namespace"] == c.namespace
    assert not scene.firing(R.A_COLLAPSED)

    # the person accepts tau 1.99: a new baseline is learned, the regression ends
    c.kubectl("annotate", "specdeploy", NAME, "-n", c.namespace, "specdeploy.io/reset-acceptance-baseline=accepted-1",
              "--overwrite")
    scene.wait_speculation("True", "Healthy")
    new = wait_for(lambda: (b := scene.acceptance().get("baseline")) and b["length"] == 1.99 and b, DEADLINE_S,
                   "the new baseline 1.99")
    assert new["resetToken"] == "accepted-1"
    prom.wait_until(lambda: not scene.firing(R.A_REGRESSED), ALERT_DEADLINE_S, f"{R.A_REGRESSED} resolved")


def test_engine_pod_gone_is_no_ready_pods(scene):
    c = scene.c
    if scene.speculation() is None:
        pytest.skip("needs the collapse scenario's deployment and pod")
    c.kubectl("delete", "pod", POD, "-n", c.namespace, "--wait=false")
    cond = scene.wait_speculation("Unknown", "NoReadyPods")
    assert cond["message"]
    had = scene.acceptance().get("baseline")
    wait_for(lambda: "length" not in scene.acceptance(), DEADLINE_S, "status.acceptance figures cleared")
    assert scene.acceptance().get("baseline") == had  # the learned baseline stays
    assert "ACCEPTLEN" not in printer_columns(c)[NAME]
    wait_for(lambda: scene.operator_length() is None, DEADLINE_S, "the operator's acceptance series removed")
    wait_for(lambda: scene.events("NoReadyPods", "Normal"), DEADLINE_S, "the Normal NoReadyPods event")
