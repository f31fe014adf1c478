"""The dev kubelet against the embedded API server, with real kubectl: Deployments get ReplicaSets and
pods, pods run as local processes (init containers, volumes, env, probes, restarts), status is written,
`kubectl logs` works through the API server's pods/log proxy, and deleted pods' processes are gone.

The containers are tests/dev/kubelet_app.py run by the venv's Python (`--exec python3=...`). Every wait
has a deadline; the kubelet runs with short probe periods and back-off so the module takes seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from specdeploy_dev.harness import Cluster, kubectl_available, pod_ip_args, pod_ip_range, wait_for
from specdeploy_dev.procs import stop_process

# pods on loopback addresses with fixed ports: beside the parallel pass's kubelets two pods would take one address and
# port, so the module runs in the serial pass, on its worker's own addresses (harness.pod_ip_range, conftest.py)
pytestmark = [pytest.mark.skipif(not kubectl_available(), reason="needs kubectl"), pytest.mark.serial,
              pytest.mark.usefixtures("kubelet_log_on_failure")]

APP = str(Path(__file__).with_name("kubelet_app.py"))
MANAGED = {"app.kubernetes.io/managed-by": "specdeploy"}


def start_kubelet(c: Cluster, root: Path, log, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(Path(sys.executable).parent / "specdeploy"), "dev", "kubelet", "--kubeconfig",
                             c.kubeconfig, "--root", str(root), "--exec", f"python3={sys.executable}",
                             "--probe-period-cap", "0.2", "--backoff", "0.2", "--max-grace", "5", *args],
                            stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("kubelet")
    c = Cluster(workdir=work).start()
    log = open(work / "kubelet.log", "w")
    p = start_kubelet(c, work / "root", log, "--namespace", "default", *pod_ip_args(last=pod_ip_range()[1] - 11),
                      "--env", "NODE_LEVEL=from-the-node", "--service-proxy")
    try:
        wait_for(lambda: c.kubectl("get", "node", "specdeploy-dev", check=False).returncode == 0, 30, "the Node")
        c.kubelet = p  # type: ignore[attr-defined]
        c.kubelet_log = work / "kubelet.log"  # type: ignore[attr-defined]
        c.kubelet_root = work / "root"  # type: ignore[attr-defined]
        yield c
    finally:
        try:
            stop_process(p, 30)
        finally:
            log.close()
            c.stop()


def container(name: str, *args: str, **extra) -> dict:
    return {"name": name, "image": "example.org/app:1", "command": ["python3"], "args": [APP, *args], **extra}


def deployment(name: str, containers: list[dict], *, init: list[dict] | None = None, volumes: list[dict] | None = None,
               replicas: int = 1, labels: dict | None = None, strategy: dict | None = None) -> dict:
    spec = {"containers": containers, "volumes": volumes or [], "terminationGracePeriodSeconds": 5}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": MANAGED if labels is None else labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "strategy": strategy or {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def apply(c: Cluster, *objs: dict) -> None:
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def pods(c: Cluster, app: str) -> list[dict]:
    return c.get_json("pods", "-l", f"app={app}")["items"]


def ready_pods(c: Cluster, app: str, n: int) -> list[dict]:
    def check():
        ps = pods(c, app)
        ok = [p for p in ps if any(x["type"] == "Ready" and x["status"] == "True"
                                   for x in (p.get("status") or {}).get("conditions") or [])]
        return ok if len(ok) == n and len(ps) == n else None
    return wait_for(check, 60, f"{n} ready pod(s) of {app}")


def status_of(pod: dict, cname: str) -> dict:
    st = pod.get("status") or {}
    return next(s for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
                if s["name"] == cname)


def logs(c: Cluster, pod: str, *args: str) -> str:
    return c.kubectl("logs", pod, *args).stdout


def test_pods_run_with_init_volumes_env_probes_and_logs(cluster):
    c = cluster
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config"},
          "data": {"greeting.txt": "hello from a configmap", "mode": "fast"}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-secret"},
              "data": {"token": "czNjcjN0"}}  # "s3cr3t"
    web = container(
        "web", "--host", "0.0.0.0", "--port", "8080", "--read", "/data/from-init", "--read", "/etc/web/greeting.txt",
        "--env", "MODE", "--env", "TOKEN", "--env", "POD_IP", "--env", "POD_NAME", "--env", "GREETING",
        "--env", "NODE_LEVEL", "--env", "HOME",
        env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "web-config", "key": "mode"}}},
             {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "web-secret", "key": "token"}}},
             {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
             {"name": "GREETING", "value": "$(MODE)-mode at $(POD_IP)"},
             {"name": "HOME", "value": "/data/home"}],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        volumeMounts=[{"name": "data", "mountPath": "/data"}, {"name": "config", "mountPath": "/etc/web"}])
    init = container("init", "--write", "/data/from-init", "written by the init container", "--exit-after", "0")
    init["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    apply(c, cm, secret, deployment("web", [web], init=[init], replicas=2, volumes=[
        {"name": "data", "emptyDir": {}}, {"name": "config", "configMap": {"name": "web-config"}}]))
    ps = ready_pods(c, "web", 2)
    dep = wait_for(lambda: (d := c.get_json("deployment", "web"))["status"].get("readyReplicas") == 2 and d,
                   30, "the Deployment's status")
    st = dep["status"]
    assert (st["replicas"], st["updatedReplicas"], st["availableReplicas"], st["observedGeneration"]) == (2, 2, 2, 1)
    assert {x["type"]: x["reason"] for x in st["conditions"]} == {"Available": "MinimumReplicasAvailable",
                                                                   "Progressing": "NewReplicaSetAvailable"}
    # ownership: Deployment -> ReplicaSet -> pods, the template hash on both
    (rs,) = c.get_json("replicasets", "-l", "app=web")["items"]
    assert rs["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
    thash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{thash}"
    ips = set()
    for p in ps:
        assert p["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
        assert p["metadata"]["labels"]["pod-template-hash"] == thash
        assert p["spec"]["nodeName"] == "specdeploy-dev"
        ip = p["status"]["podIP"]
        assert ip.startswith("127.0.0.") and ip != "127.0.0.1"
        ips.add(ip)
        assert status_of(p, "init")["state"]["terminated"]["exitCode"] == 0
        out = logs(c, p["metadata"]["name"], "-c", "web")
        # --host 0.0.0.0 became the pod's loopback address; the port stays unless it was taken there (recorded)
        moved = json.loads((p["metadata"].get("annotations") or {}).get("dev.specdeploy.io/port-map") or "{}")
        port = int(moved.get("web", {}).get("8080", 8080))
        assert f"listening on {ip}:{port}" in out
        # mount paths in arguments are rewritten to the pod's local volume directories
        assert "read /data/from-init" not in out and "/volumes/data/from-init: written by the init container" in out
        assert "/volumes/config/greeting.txt: hello from a configmap" in out
        for line in ("env MODE=fast", "env TOKEN=s3cr3t", f"env POD_IP={ip}", f"env POD_NAME={p['metadata']['name']}",
                     f"env GREETING=fast-mode at {ip}", "env NODE_LEVEL=from-the-node"):
            assert line in out, line
        assert "env HOME=/data/home" not in out and "/pods/" in out.split("env HOME=")[1].splitlines()[0]
        assert "wrote " in logs(c, p["metadata"]["name"], "-c", "init")
        with urllib.request.urlopen(f"http://{ip}:{port}/healthz", timeout=5) as r:
            assert r.status == 200
    assert len(ips) == 2
    node = c.get_json("node", "specdeploy-dev")
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0


def test_rolling_update_replaces_every_pod(cluster):
    c = cluster
    apply(c, deployment("roll", [container("app", "--host", "0.0.0.0", "--port", "8080",
                                           readinessProbe={"tcpSocket": {"port": 8080}},
                                           ports=[{"containerPort": 8080}])], replicas=2))
    before = {p["metadata"]["name"] for p in ready_pods(c, "roll", 2)}
    c.kubectl("set", "env", "deployment/roll", "VERSION=2")
    dep = c.get_json("deployment", "roll")

    def rolled():
        ps = pods(c, "roll")
        d = c.get_json("deployment", "roll")
        return (len(ps) == 2 and not before & {p["metadata"]["name"] for p in ps}
                and d["status"].get("updatedReplicas") == 2 and d["status"].get("availableReplicas") == 2
                and d["status"].get("observedGeneration") == d["metadata"]["generation"]) and ps
    ps = wait_for(rolled, 60, "the rollout")
    assert all(e["value"] == "2" for p in ps for e in p["spec"]["containers"][0]["env"] if e["name"] == "VERSION")
    rss = {r["metadata"]["labels"]["pod-template-hash"]: r for r in c.get_json("replicasets", "-l", "app=roll")["items"]}
    assert len(rss) == 2 and sorted(r["spec"]["replicas"] for r in rss.values()) == [0, 2]
    assert dep["metadata"]["generation"] == 2
    c.kubectl("rollout", "status", "deployment/roll", "--timeout=30s")


def test_crash_restarts_with_termination_message_and_previous_logs(cluster):
    c = cluster
    apply(c, deployment("crash", [container("app", "--exit-after", "0", "--code", "3", "--message", "boom: bad input")]))

    def restarted():
        ps = pods(c, "crash")
        s = status_of(ps[0], "app") if ps else {}
        return s.get("restartCount", 0) >= 2 and (s.get("lastState") or {}).get("terminated") and ps[0]
    pod = wait_for(restarted, 60, "two restarts")
    last = status_of(pod, "app")["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"], last["message"]) == (3, "Error", "boom: bad input")
    name = pod["metadata"]["name"]
    assert "exiting" in logs(c, name, "--previous")
    assert pod["status"]["phase"] == "Running"  # a container restarting keeps its pod Running


def test_fallback_to_logs_on_error(cluster):
    c = cluster
    app = container("app", "--exit-after", "0", "--code", "1", terminationMessagePolicy="FallbackToLogsOnError")
    apply(c, deployment("fallback", [app]))

    def message():
        ps = pods(c, "fallback")
        return ps and ((status_of(ps[0], "app").get("lastState") or {}).get("terminated") or {}).get("message")
    assert "exiting" in wait_for(message, 60, "the fallback termination message")


def test_unmapped_command_and_missing_configmap_are_reported(cluster):
    c = cluster
    apply(c, deployment("unmapped", [{"name": "app", "image": "busybox", "command": ["sh", "-c", "echo hi"]}]),
          deployment("nocm", [container("app", env=[{"name": "X", "valueFrom": {
              "configMapKeyRef": {"name": "absent", "key": "k"}}}])]))

    def waiting(app: str):
        ps = pods(c, app)
        return ps and (status_of(ps[0], "app")["state"].get("waiting") or {}).get("message")
    msg = wait_for(lambda: waiting("unmapped"), 30, "the unmapped command's message")
    assert "no local executable for command 'sh'" in msg and "--exec sh=PATH" in msg
    assert 'configmap "absent" not found' in wait_for(lambda: waiting("nocm"), 30, "the missing configmap's message")


def test_liveness_failure_restarts_the_container(cluster):
    c = cluster
    apply(c, deployment("sick", [container("app", "--host", "0.0.0.0", "--port", "8080", "--unhealthy",
                                           livenessProbe={"httpGet": {"path": "/healthz", "port": 8080},
                                                          "failureThreshold": 2})]))

    def restarted():
        ps = pods(c, "sick")
        return ps and status_of(ps[0], "app").get("restartCount", 0) >= 1 and ps[0]
    pod = wait_for(restarted, 60, "a liveness restart")
    assert status_of(pod, "app")["lastState"]["terminated"]["message"] == "Liveness probe failed"


def test_unselected_deployment_gets_no_pods(cluster):
    c = cluster
    apply(c, deployment("other", [container("app")], labels={"team": "x"}),
          deployment("marker", [container("app")]))
    wait_for(lambda: pods(c, "marker"), 30, "the selected deployment's pod")
    assert pods(c, "other") == [] and c.get_json("replicasets", "-l", "app=other")["items"] == []


def test_deleting_a_deployment_stops_its_processes(cluster):
    c = cluster
    apply(c, deployment("gone", [container("app", "--host", "0.0.0.0", "--port", "8080",
                                           readinessProbe={"tcpSocket": {"port": 8080}})]))
    (pod,) = ready_pods(c, "gone", 1)
    pid = int(status_of(pod, "app")["containerID"].removeprefix("local://"))
    os.kill(pid, 0)  # running
    c.kubectl("delete", "deployment", "gone")

    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_for(gone, 30, f"process {pid} to stop")
    assert pods(c, "gone") == []


def test_service_proxy_spreads_over_ready_pods_and_a_deleted_pod_leaves_before_its_prestop_hook(cluster, tmp_path):
    """Through the Service proxy (as a client outside the pods reaches it): each ready pod answers a share of the
    requests (kube-proxy's random pick, not always the first pod). A deleted pod stops getting requests at once, its
    preStop hook (exec) runs while its container still serves, then SIGTERM stops it."""
    c = cluster
    hook = tmp_path / "prestop-ran"
    apply(c, deployment("spread", [container(
        "app", "--host", "0.0.0.0", "--port", "8080", readinessProbe={"httpGet": {"path": "/healthz", "port": 8080}},
        ports=[{"name": "http", "containerPort": 8080}],
        lifecycle={"preStop": {"exec": {"command": ["python3", APP, "--write", str(hook), "ran", "--exit-after", "2"]}}})],
        replicas=2),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "spread"},
         "spec": {"selector": {"app": "spread"}, "ports": [{"port": 80, "targetPort": "http"}]}})
    pods_ = ready_pods(c, "spread", 2)
    proxy = (c.kubelet_root / "service-proxy").read_text().strip()  # type: ignore[attr-defined]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))

    def who() -> str:
        with opener.open("http://spread.default.svc/healthz", timeout=10) as r:
            return r.headers["X-Pod"]

    seen = [who() for _ in range(40)]
    names = {p["metadata"]["name"] for p in pods_}
    assert set(seen) == names and min(seen.count(n) for n in names) >= 5, seen  # 1 in 2^39 to fail by chance

    gone = pods_[0]
    pid = int(status_of(gone, "app")["containerID"].removeprefix("local://"))
    c.kubectl("delete", "pod", gone["metadata"]["name"], "--wait=false")
    after = [who() for _ in range(20)]
    assert gone["metadata"]["name"] not in after, after
    wait_for(hook.exists, 15, "the preStop hook")
    assert alive(pid), "SIGTERM came before the preStop hook ended"
    wait_for(lambda: not alive(pid), 30, f"process {pid} to stop after its preStop hook")
    c.kubectl("delete", "deployment,service", "spread")


def test_the_canary_prestop_hook_sleep_runs_without_a_mapping(cluster):
    """The operator's Canary preStop hook is ``exec: [sleep, N]`` (core/render/objects.py): sleep(1) is built into the
    executable table (this machine's, as the runtime images' coreutils), so the hook runs instead of failing with
    "no local executable" and the pod is stopped at once, its endpoint still listed."""
    c = cluster
    apply(c, deployment("nap", [container("app", "--host", "0.0.0.0", "--port", "8080",
                                          readinessProbe={"tcpSocket": {"port": 8080}},
                                          lifecycle={"preStop": {"exec": {"command": ["sleep", "1"]}}})]))
    (pod,) = ready_pods(c, "nap", 1)
    pid = int(status_of(pod, "app")["containerID"].removeprefix("local://"))
    c.kubectl("delete", "pod", pod["metadata"]["name"], "--wait=false")
    wait_for(lambda: not alive(pid), 30, f"process {pid} to stop after its preStop hook")
    log = c.kubelet_log.read_text()  # type: ignore[attr-defined]
    assert not [ln for ln in log.splitlines() if pod["metadata"]["name"] in ln and "preStop" in ln], log[-2000:]
    c.kubectl("delete", "deployment", "nap")


def test_sigterm_goes_to_the_main_process_only_as_to_a_containers_pid_1(cluster, tmp_path):
    """Deleting a pod signals the container's main process, not its whole process group (a container runtime signals
    PID 1): the main process's own worker gets no SIGTERM from the kubelet (it would die under an engine that
    drains), and is gone with the group once the main process has exited."""
    c = cluster
    marker = tmp_path / "child-got-sigterm"
    apply(c, deployment("pid1", [container("app", "--child", str(marker), "--host", "0.0.0.0", "--port", "8080",
                                           readinessProbe={"tcpSocket": {"port": 8080}})]))
    (pod,) = ready_pods(c, "pid1", 1)
    child = wait_for(lambda: (m := re.search(r"child (\d+)", logs(c, pod["metadata"]["name"]))) and int(m.group(1)), 30,
                     "the app's child process")
    assert alive(child)
    c.kubectl("delete", "deployment", "pid1")
    wait_for(lambda: not alive(child), 30, f"the child process {child} to go with its pod")
    assert not marker.exists(), "the kubelet sent SIGTERM to the whole process group"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kubelet_stop_and_crash_leave_no_processes(cluster, tmp_path):
    """A second kubelet (its own node, namespace and root): SIGTERM stops its pods' processes; after a SIGKILL
    the processes outlive it, and the next kubelet on that root kills them before running the pod again."""
    c = cluster
    apply(c, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "solo"}})
    log = open(tmp_path / "solo.log", "w")
    solo = (pod_ip_range()[1] - 10, pod_ip_range()[1])  # the end of this process's pod addresses, past the first kubelet's
    args = ("--namespace", "solo", "--node-name", "solo-node", *pod_ip_args(*solo), "--max-pods", "4")
    k = start_kubelet(c, tmp_path / "root", log, *args)
    try:
        c.kubectl("apply", "-n", "solo", "-f", "-", input=json.dumps(
            deployment("solo", [container("app", "--host", "0.0.0.0", "--port", "8080",
                                          readinessProbe={"tcpSocket": {"port": 8080}})])))

        def ready_pid():
            ps = c.get_json("pods", "-n", "solo", "-l", "app=solo")["items"]
            ok = [p for p in ps if any(x["type"] == "Ready" and x["status"] == "True"
                                       for x in (p.get("status") or {}).get("conditions") or [])]
            return ok and int(status_of(ok[0], "app")["containerID"].removeprefix("local://"))
        pid = wait_for(ready_pid, 60, "the solo pod")
        ip = c.get_json("pods", "-n", "solo", "-l", "app=solo")["items"][0]["status"]["podIP"]
        assert solo[0] <= int(ip.rsplit(".", 1)[1]) <= solo[1], ip  # --ip-range
        k.send_signal(signal.SIGTERM)
        assert k.wait(30) == 0
        assert not alive(pid)
        k = start_kubelet(c, tmp_path / "root", log, *args)
        pid2 = wait_for(lambda: (x := ready_pid()) and x != pid and x, 60, "the pod running again")
        k.kill()  # SIGKILL: no clean-up; the container survives in its own process group
        k.wait(30)
        assert alive(pid2)
        k = start_kubelet(c, tmp_path / "root", log, *args)
        wait_for(lambda: not alive(pid2), 30, f"the leftover process {pid2} to be killed")
        wait_for(lambda: (x := ready_pid()) and x not in (pid, pid2), 60, "the pod running a third time")
    except BaseException:
        log.flush()
        print("== solo kubelet log\n" + (tmp_path / "solo.log").read_text()[-6000:])
        for p in c.get_json("pods", "-n", "solo")["items"]:
            print(json.dumps(p.get("status"))[:3000])
            prev = c.kubectl("logs", "-n", "solo", p["metadata"]["name"], "--previous", check=False)
            print(f"== previous log\n{prev.stdout}{prev.stderr}")
        raise
    finally:
        k.send_signal(signal.SIGTERM)
        k.wait(30)
        log.close()
        c.kubectl("delete", "namespace", "solo", check=False)


@pytest.mark.parametrize("args, message", [
    (["--ip-range", "1-300"], "--ip-range 1-300: expected FIRST-LAST"),
    (["--ip-range", "10-12", "--max-pods", "4"], "--max-pods 4: must be 1..3"),
    (["--exec", "vllm=relative/path"], "not an absolute path to an executable"),
    (["--env", "NOVALUE"], "expected NAME=VALUE"),
    (["--backoff", "0"], "must be > 0"),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
    kc = tmp_path / "kc"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    p = subprocess.run([str(Path(sys.executable).parent / "specdeploy"), "dev", "kubelet", "--kubeconfig", str(kc),
                        "--root", str(tmp_path / "r"), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and message in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_bare_pods_bound_to_the_node_run_or_are_refused(cluster):
    c = cluster

    def pod(name: str, cname: str) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": "specdeploy-dev", "restartPolicy": "Never",
                         "containers": [container(cname, "--exit-after", "0", "--code", "0")]}}
    apply(c, pod("bare-ok", "app"), pod("bare-bad", "Bad_Name"))
    ok = wait_for(lambda: (p := c.get_json("pod", "bare-ok"))["status"].get("phase") == "Succeeded" and p, 30,
                  "the bare pod to succeed")
    assert status_of(ok, "app")["state"]["terminated"]["reason"] == "Completed"
    bad = wait_for(lambda: (p := c.get_json("pod", "bare-bad")).get("status", {}).get("phase") == "Failed" and p, 30,
                   "the bad pod to be refused")
    assert bad["status"]["reason"] == "UnsupportedPod" and "is not a DNS label" in bad["status"]["message"]
