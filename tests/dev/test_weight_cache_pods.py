"""The weight cache with pods: the operator's rendered Deployment (spec.cache: a claim) run by the dev
kubelet against the hub stand-in serving the tiny models. The first pod's preflight downloads the weights
into the claim; a restarted pod (deleted and recreated) and a second replica on the same claim download
no weight (GETs counted at the stand-in); the engine container (a stand-in that loads the models with the
rendered env, HF_HUB_OFFLINE=1) reads them from the cache. Every wait has a deadline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.policy import TenancyPolicy
from specdeploy.core.render import render
from specdeploy_dev.harness import Cluster, kubectl_available, pod_ip_args, wait_for
from specdeploy_dev.hubserver import repos_from_directory, start_in_thread
from specdeploy_dev.procs import stop_process

# pods on loopback addresses with fixed ports: beside the parallel pass's kubelets two pods would take one address and
# port, so the module runs in the serial pass, on its worker's own addresses (harness.pod_ip_range, conftest.py)
pytestmark = [pytest.mark.skipif(not kubectl_available(), reason="needs kubectl"), pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
ENGINE = Path(__file__).with_name("cache_engine.py")
NAME, CLAIM = "cached", "hf-cache"
TARGET, DRAFTER = "tiny/target-flat", "tiny/dflash-accept-all"


def weight_gets(hub) -> int:
    return hub.server.count("GET", contains=".safetensors")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    from specdeploy_dev.tinymodels import write_tiny_models

    work = tmp_path_factory.mktemp("weight-cache")
    write_tiny_models(work / "models")
    with start_in_thread(repos_from_directory(work / "models")) as hub:
        c = Cluster(workdir=work / "cluster").start()
        exe = work / "vllm"
        exe.write_text(f"#!/bin/sh\nexec {sys.executable} {ENGINE} \"$@\"\n")
        exe.chmod(0o755)
        log = open(work / "kubelet.log", "w")
        kubelet = subprocess.Popen(
            [str(Path(sys.executable).parent / "specdeploy"), "dev", "kubelet", "--kubeconfig", c.kubeconfig,
             "--root", str(work / "kubelet"), "--exec", f"vllm={exe}", "--env", f"HF_ENDPOINT={hub}",
             "--env", "HF_HUB_DISABLE_TELEMETRY=1", "--probe-period-cap", "0.5", "--backoff", "0.5",
             "--max-grace", "5", *pod_ip_args()], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_for(lambda: c.kubectl("get", "node", "specdeploy-dev", check=False).returncode == 0, 60, "the Node")
            yield c, hub, work
        finally:
            try:
                stop_process(kubelet, 60)
            finally:
                log.close()
                c.stop()


def rendered_objects(work: Path) -> list[dict]:
    cr = yaml.safe_load((ROOT / "examples" / "dev" / "tiny-cpu.yaml").read_text())
    cr["metadata"].update(name=NAME, namespace="default")
    cr["spec"]["target"]["model"], cr["spec"]["drafter"]["model"] = TARGET, DRAFTER
    cr["spec"]["cache"] = {"type": "pvc", "pvc": {"claimName": CLAIM}}
    target = json.loads((work / "models" / TARGET / "config.json").read_text())
    drafter = json.loads((work / "models" / DRAFTER / "config.json").read_text())
    r = render(SpeculativeDeployment.model_validate(cr), target, drafter, policy=TenancyPolicy(pvcs=(CLAIM,)))
    out = []
    for o in r.objects:
        if o["kind"] in ("ConfigMap", "Deployment"):
            o["metadata"].pop("ownerReferences", None)  # no CR here: the test plays the operator
            out.append(o)
    return out


def ready_pods(c: Cluster, n: int, exclude: set[str] = frozenset()) -> list[dict]:
    def check():
        pods = c.get_json("pods", "-l", f"app.kubernetes.io/instance={NAME}")["items"]
        ok = [p for p in pods if p["metadata"]["name"] not in exclude and not p["metadata"].get("deletionTimestamp")
              and any(x["type"] == "Ready" and x["status"] == "True" for x in (p.get("status") or {}).get("conditions") or [])]
        return ok if len(ok) >= n else None
    return wait_for(check, 240, f"{n} ready engine pod(s)")


def logs(c: Cluster, pod: str, container: str) -> str:
    return c.kubectl("logs", pod, "-c", container).stdout


def test_restart_and_second_replica_download_no_weights(scene):
    c, hub, work = scene
    objs = rendered_objects(work)
    dep = next(o for o in objs if o["kind"] == "Deployment")
    pod_spec = dep["spec"]["template"]["spec"]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": CLAIM}} in pod_spec["volumes"]
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))

    (first,) = ready_pods(c, 1)
    downloaded = weight_gets(hub)
    assert downloaded >= 2, hub.server.requests  # the target's and the drafter's weights, once
    pre = logs(c, first["metadata"]["name"], "preflight")
    assert "files downloaded" in pre, pre
    engine = logs(c, first["metadata"]["name"], "engine")
    assert f"loaded {TARGET}" in engine and f"loaded {DRAFTER}" in engine and "HF_HUB_OFFLINE=1" in engine, engine

    # a pod restart: the pod is deleted, the Deployment makes a new one on the same claim
    c.kubectl("delete", "pod", first["metadata"]["name"], "--wait=false")
    (second,) = ready_pods(c, 1, exclude={first["metadata"]["name"]})
    assert weight_gets(hub) == downloaded, "the restarted pod downloaded weights"
    pre = logs(c, second["metadata"]["name"], "preflight")
    assert f"weights target {TARGET}@" in pre and "none downloaded" in pre, pre

    # a second replica on the same storage
    c.kubectl("scale", "deployment", NAME, "--replicas=2")
    pods = ready_pods(c, 2, exclude={first["metadata"]["name"]})
    assert len(pods) == 2
    assert weight_gets(hub) == downloaded, "the second replica downloaded weights"
