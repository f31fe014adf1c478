"""The dev kubelet in container mode (``--runtime podman``) against the embedded API server: pods run
from their images with the securityContext, volumes, env, probes, limits and termination messages.

Opt-in: ``SPECDEPLOY_E2E_IMAGES=1`` (``bash .ci/test`` sets it after ``bash images/build.sh``). The image
is the Python base the operator image builds on (a stand-in made by images/build.sh where no registry is
reachable); the container program is tests/dev/kubelet_app.py, delivered by a ConfigMap volume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from specdeploy_dev.harness import Cluster, kubectl_available, pod_ip_args, wait_for
from specdeploy_dev.kubelet_podman import LABEL_POD
from specdeploy_dev.procs import stop_process

pytestmark = [pytest.mark.images, pytest.mark.skipif(not kubectl_available(), reason="needs kubectl"),
              pytest.mark.usefixtures("kubelet_log_on_failure")]

IMAGE = "docker.io/library/python:3.11.13-slim-bookworm"
APP = Path(__file__).with_name("kubelet_app.py")
MANAGED = {"app.kubernetes.io/managed-by": "specdeploy"}
HARDENED = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: bash .ci/install-podman")
    if podman("image", "exists", IMAGE).returncode != 0:
        pytest.fail(f"{IMAGE} is missing: bash images/build.sh operator (makes it where it cannot be pulled)")
    work = tmp_path_factory.mktemp("kubelet-podman")
    c = Cluster(workdir=work).start()
    log = open(work / "kubelet.log", "w")
    p = subprocess.Popen([str(Path(sys.executable).parent / "specdeploy"), "dev", "kubelet", "--kubeconfig",
                          c.kubeconfig, "--root", str(work / "root"), "--runtime", "podman", "--namespace", "default",
                          "--probe-period-cap", "0.5", "--backoff", "0.5", "--max-grace", "5",
                          "--env", "NODE_LEVEL=from-the-node", *pod_ip_args()], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: c.kubectl("get", "node", "specdeploy-dev", check=False).returncode == 0, 30, "the Node")
        c.kubelet_log = work / "kubelet.log"  # type: ignore[attr-defined]
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
            "data": {"app.py": APP.read_text(), "greeting.txt": "hello from a configmap"}}))
        yield c
    finally:
        try:
            stop_process(p, 60)
        finally:
            log.close()
            c.stop()
    assert not podman("ps", "-aq", "--filter", f"label=io.specdeploy.dev-kubelet.root={work / 'root'}").stdout.strip(), \
        "containers left behind by the stopped kubelet"


def container(name: str, *args: str, **extra) -> dict:
    mounts = [{"name": "app", "mountPath": "/app"}, *extra.pop("volumeMounts", [])]
    return {"name": name, "image": IMAGE, "command": ["python3", "/app/app.py"], "args": list(args),
            "volumeMounts": mounts, **extra}


def deployment(name: str, containers: list[dict], *, init: list[dict] | None = None,
               volumes: list[dict] | None = None) -> dict:
    spec = {"containers": containers, "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "app", "configMap": {"name": "app"}}, *(volumes or [])]}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": MANAGED},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def the_pod(c: Cluster, app: str, ready: bool = True) -> dict:
    def check():
        ps = c.get_json("pods", "-l", f"app={app}")["items"]
        ok = [p for p in ps if not ready or any(x["type"] == "Ready" and x["status"] == "True"
                                                for x in (p.get("status") or {}).get("conditions") or [])]
        return ok[0] if len(ps) == 1 and ok else None
    return wait_for(check, 120, f"the pod of {app}")


def status_of(pod: dict, cname: str) -> dict:
    st = pod.get("status") or {}
    return next(s for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
                if s["name"] == cname)


SECRET = "hf_not-on-the-command-line-7f3a"


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_hardened_pod_runs_from_its_image(cluster):
    c = cluster
    web = container("web", "--host", "0.0.0.0", "--port", "8080", "--read", "/data/from-init",
                    "--read", "/app/greeting.txt", "--write", "/tmp/scratch", "x", "--env", "MODE", "--env",
                    "NODE_LEVEL", "--env", "POD_IP", "--env", "HF_TOKEN",
                    env=[{"name": "MODE", "value": "fast"},
                         {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    ports=[{"name": "http", "containerPort": 8080}],
                    readinessProbe={"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                    securityContext=HARDENED, resources={"limits": {"cpu": "500m", "memory": "256Mi"}},
                    volumeMounts=[{"name": "data", "mountPath": "/data", "readOnly": True},
                                  {"name": "tmp", "mountPath": "/tmp"}])
    init = container("init", "--write", "/data/from-init", "written by the init container", "--exit-after", "0",
                     securityContext=HARDENED, volumeMounts=[{"name": "data", "mountPath": "/data"}])
    c.kubectl("create", "secret", "generic", "hub", f"--from-literal=token={SECRET}")
    c.kubectl("apply", "-f", "-", input=json.dumps(deployment("web", [web], init=[init], volumes=[
        {"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}])))
    pod = the_pod(c, "web")
    ip = pod["status"]["podIP"]
    assert status_of(pod, "init")["state"]["terminated"]["exitCode"] == 0
    out = c.kubectl("logs", pod["metadata"]["name"], "-c", "web").stdout
    # paths are the container's own (bind mounts), not rewritten as in process mode
    for line in (f"listening on {ip}:8080", "read /data/from-init: written by the init container",
                 "read /app/greeting.txt: hello from a configmap", "wrote /tmp/scratch", "env MODE=fast",
                 "env NODE_LEVEL=from-the-node", f"env POD_IP={ip}", f"env HF_TOKEN={SECRET}"):
        assert line in out, (line, out)
    # the Secret's value reached the container through the 0600 env file, never a command line
    leaked = [pid for pid in os.listdir("/proc") if pid.isdigit() and SECRET.encode() in _cmdline(pid)]
    assert not leaked, f"the secret is on the command line of {leaked}"
    with urllib.request.urlopen(f"http://{ip}:8080/healthz", timeout=5) as r:
        assert r.status == 200
    (info,) = json.loads(podman("container", "inspect", f"sdk-{pod['metadata']['uid']}-web").stdout)
    host = info["HostConfig"]
    assert info["Config"]["User"] == "65532:65532" and host["ReadonlyRootfs"] is True
    assert host["Memory"] == 256 * 2**20 and host["NanoCpus"] == 500_000_000
    assert "no-new-privileges" in host["SecurityOpt"] and not info.get("EffectiveCaps")
    name = info["Name"]
    p = podman("exec", name, "touch", "/etc/x")
    assert p.returncode != 0 and "Read-only file system" in p.stderr
    assert podman("exec", name, "touch", "/data/x").returncode != 0  # readOnly: true mount
    status = podman("exec", name, "grep", "-E", "^(CapEff|NoNewPrivs|Seccomp):", "/proc/1/status").stdout
    assert dict(line.split(":\t") for line in status.strip().splitlines()) == {
        "CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
    # deleting the Deployment removes the containers
    c.kubectl("delete", "deployment", "web")
    wait_for(lambda: not podman("ps", "-aq", "--filter", f"label={LABEL_POD}={pod['metadata']['uid']}").stdout.strip(),
             60, "the pod's containers to be removed")


def test_termination_message_and_restart(cluster):
    c = cluster
    c.kubectl("apply", "-f", "-", input=json.dumps(deployment("crash", [
        container("crash", "--exit-after", "0", "--code", "3", "--message", "boom from the container",
                  securityContext=HARDENED)])))

    def restarted():
        ps = c.get_json("pods", "-l", "app=crash")["items"]
        last = (status_of(ps[0], "crash").get("lastState") or {}).get("terminated") if ps else None
        return last if last and last.get("exitCode") == 3 else None
    last = wait_for(restarted, 90, "a restarted container with its termination message")
    assert last["message"] == "boom from the container"
    c.kubectl("delete", "deployment", "crash")


def test_refusals_are_waiting_reasons(cluster):
    c = cluster
    root = container("root", "--exit-after", "60", securityContext={"runAsNonRoot": True})  # the image runs as root
    missing = container("missing", "--exit-after", "60", image="example.org/not-built:1")
    c.kubectl("apply", "-f", "-", input=json.dumps(deployment("refused", [root, missing])))

    def waiting():
        ps = c.get_json("pods", "-l", "app=refused")["items"]
        if not ps:
            return None
        got = {n: (status_of(ps[0], n)["state"].get("waiting") or {}) for n in ("root", "missing")}
        return got if all(w.get("message") for w in got.values()) else None
    got = wait_for(waiting, 60, "both containers refused")
    assert got["root"]["reason"] == "CreateContainerConfigError"
    assert "has runAsNonRoot and image will run as root" in got["root"]["message"]
    assert got["missing"]["reason"] == "ErrImageNeverPull"
    assert 'Container image "example.org/not-built:1" is not present' in got["missing"]["message"]
    c.kubectl("delete", "deployment", "refused")
