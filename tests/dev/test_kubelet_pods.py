"""The dev kubelet's pod half (pure): env, $(VAR), volumes, path translation, loopback binding,
executables, termination messages, pod status; and the API server's pods/log target."""

from __future__ import annotations

import base64
import json

import pytest

from specdeploy_dev import kubelet_pods as kp
from specdeploy_dev.podlogs import kubelet_url

POD = {"metadata": {"name": "p1", "namespace": "ns", "uid": "u1", "labels": {"app": "x"},
                    "annotations": {"a": "b"}},
       "spec": {"nodeName": "node-a", "containers": [{"name": "c"}]}}
CMS = {"cfg": {"data": {"mode": "fast", "file.txt": "content"}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}}
SECRETS = {"sec": {"data": {"token": base64.b64encode(b"s3cr3t").decode()}}}
TABLE = kp.ExecTable({"vllm": "/opt/venv/bin/vllm", "specdeploy-runtime": "/opt/rt/bin/specdeploy-runtime"})


def env_of(container: dict) -> dict:
    return kp.resolve_env(POD, container, CMS, SECRETS, "127.0.0.5", "127.0.0.1")


def test_env_sources_and_expansion():
    env = env_of({"envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
                  "env": [{"name": "A", "value": "1"},
                          {"name": "B", "value": "$(A)-$(CFG_mode)-$(UNDEFINED)-$$(A)"},
                          {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                          {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                          {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                          {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                          {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                          {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                          {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k",
                                                                        "optional": True}}}]})
    assert env == {"CFG_mode": "fast", "CFG_file.txt": "content", "A": "1", "B": "1-fast-$(UNDEFINED)-$(A)",
                   "IP": "127.0.0.5", "NAME": "p1", "LABEL": "x", "NODE": "node-a", "MODE": "fast",
                   "TOKEN": "s3cr3t"}


@pytest.mark.parametrize("env, message", [
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}, 'configmap "absent" not found'),
    ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}, 'couldn\'t find key k in configmap'),
    ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}, 'secret "absent" not found'),
    ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}, "is not supported"),
])
def test_env_errors_are_messages(env, message):
    with pytest.raises(kp.PodConfigError, match=message) as e:
        env_of({"env": [env]})
    assert e.value.reason == "CreateContainerConfigError"


def test_volumes():
    pod = {**POD, "spec": {"volumes": [
        {"name": "scratch", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "picked", "configMap": {"name": "cfg", "items": [{"key": "mode", "path": "sub/mode.txt"}]}},
        {"name": "opt", "configMap": {"name": "absent", "optional": True}},
        {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "meta", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
    ]}}
    vols = kp.plan_volumes(pod, "/r/pods/u1", "/r/pvc", CMS, SECRETS, "127.0.0.5", "127.0.0.1")
    assert vols["scratch"].path == "/r/pods/u1/volumes/scratch" and vols["scratch"].files == {}
    assert vols["cfg"].files == {"mode": b"fast", "file.txt": b"content", "bin": b"\x00\x01"}
    assert vols["picked"].files == {"sub/mode.txt": b"fast"}
    assert vols["opt"].files == {}
    assert vols["sec"].files == {"token": b"s3cr3t"}
    assert vols["meta"].files == {"name": b"p1"}
    assert vols["model"].path == "/r/pvc/ns/models"


@pytest.mark.parametrize("vol, message", [
    ({"name": "h", "hostPath": {"path": "/etc"}}, "hostPath is not supported"),
    ({"name": "c", "configMap": {"name": "absent"}}, 'configmap "absent" not found'),
    ({"name": "c", "configMap": {"name": "cfg", "items": [{"key": "mode", "path": "../escape"}]}}, "relative path"),
    ({"name": "Bad_Name", "emptyDir": {}}, "not a DNS label"),
    ({"name": "p", "persistentVolumeClaim": {"claimName": "../x"}}, "not a valid name"),
])
def test_volume_errors(vol, message):
    with pytest.raises(kp.PodConfigError, match=message):
        kp.plan_volumes({**POD, "spec": {"volumes": [vol]}}, "/r/p", "/r/pvc", CMS, SECRETS, "ip", "ip")


def test_mounts_and_subpaths():
    vols = {"a": kp.VolumeDir("a", "emptyDir", "/r/a"), "b": kp.VolumeDir("b", "emptyDir", "/r/b")}
    c = {"volumeMounts": [{"name": "a", "mountPath": "/etc/x"}, {"name": "b", "mountPath": "/etc/x/deeper/"},
                          {"name": "b", "mountPath": "/tmp", "subPath": "tmp"}]}
    assert kp.container_mounts(c, vols) == [("/etc/x/deeper", "/r/b"), ("/etc/x", "/r/a"), ("/tmp", "/r/b/tmp")]
    for bad in ({"name": "a", "mountPath": "relative"}, {"name": "a", "mountPath": "/"},
                {"name": "a", "mountPath": "/x", "subPath": "../../etc"}, {"name": "zz", "mountPath": "/x"}):
        with pytest.raises(kp.PodConfigError):
            kp.container_mounts({"volumeMounts": [bad]}, vols)


@pytest.mark.parametrize("value, want", [
    ("/models/drafter", "/L/d"),
    ("/models/drafter/sub/file", "/L/d/sub/file"),
    ("--x=/models/drafter", "--x=/L/d"),
    ('{"model":"/models/drafter","n":3}', '{"model":"/L/d","n":3}'),
    ("/models/drafters", "/models/drafters"),  # another path that merely starts the same
    ("/data/models/drafter", "/data/models/drafter"),  # not at a path boundary
    ("http://h:8000/models/drafter", "http://h:8000/models/drafter"),
    ("/models/target/x /models/drafter", "/L/t/x /L/d"),
    ("/etc/specdeploy/engine-config.json", "/L/e/engine-config.json"),
])
def test_translate_paths(value, want):
    mounts = [("/etc/specdeploy", "/L/e"), ("/models/drafter", "/L/d"), ("/models/target", "/L/t")]
    assert kp.translate_paths(value, mounts) == want


def test_translated_paths_are_not_translated_again():
    # the kubelet's root under /tmp, and a volume mounted at /tmp: the engine config's local path stays as is
    mounts = [("/etc/specdeploy", "/tmp/root/pods/u/volumes/engine-config"), ("/tmp", "/tmp/root/pods/u/volumes/s/tmp")]
    assert kp.translate_paths("/etc/specdeploy/engine-config.json /tmp/x", mounts) == \
        "/tmp/root/pods/u/volumes/engine-config/engine-config.json /tmp/root/pods/u/volumes/s/tmp/x"


def test_node_cache_links_a_path_inside_a_volume(tmp_path):
    vol, node = tmp_path / "vol", tmp_path / "node" / "modelinfos"
    vol.mkdir()
    mounts = [("/var/cache/specdeploy", str(vol))]
    caches = {"/var/cache/specdeploy/.cache/vllm/modelinfos": str(node), "/opt/elsewhere": str(tmp_path / "other")}
    kp.link_node_caches(caches, mounts)
    link = vol / ".cache" / "vllm" / "modelinfos"
    assert link.is_symlink() and link.resolve() == node.resolve() and node.is_dir()
    (link / "entry.json").write_text("{}")  # what one pod writes, the next finds
    assert (node / "entry.json").read_text() == "{}"
    assert not (tmp_path / "other").exists()  # outside every volume: left alone
    kp.link_node_caches(caches, mounts)  # again (a preStop hook's process): unchanged
    assert link.is_symlink()
    (vol / "own").mkdir()  # a path the pod already has is not replaced
    kp.link_node_caches({"/var/cache/specdeploy/own": str(node)}, mounts)
    assert not (vol / "own").is_symlink()


def test_build_process():
    c = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "command": ["vllm", "serve"],
         "args": ["/models/target", "--host", "0.0.0.0", "--port", "8000", "--speculative-config",
                  '{"model":"/models/drafter"}', "--x", "$(LWS_WORKER_INDEX)", "--y", "$(A)", "--host=::"],
         "terminationMessagePath": "/dev/termination-log"}
    mounts = [("/models/target", "/L/t"), ("/models/drafter", "/L/d"), ("/var/cache/huggingface", "/L/hf")]
    ps = kp.build_process(c, {"A": "a-value", "HF_HOME": "/var/cache/huggingface"}, mounts, TABLE, "127.0.0.7",
                          {8000: 41000}, "/r/pods/u/containers/engine", {"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert ps.argv == ["/opt/venv/bin/vllm", "serve", "/L/t", "--host", "127.0.0.7", "--port", "41000",
                       "--speculative-config", '{"model":"/L/d"}', "--x", "$(LWS_WORKER_INDEX)", "--y", "a-value",
                       "--host=127.0.0.7"]
    assert ps.env["HF_HOME"] == "/L/hf" and ps.env["HF_ENDPOINT"] == "http://127.0.0.1:9"
    assert ps.env["PATH"].startswith("/opt/venv/bin:") and ps.env["HOME"] == "/r/pods/u/containers/engine/home"
    assert ps.env[kp.TERMINATION_ENV] == ps.termination_log == "/r/pods/u/containers/engine/termination-log"
    assert ps.cwd == "/r/pods/u/containers/engine"


def test_build_process_keeps_specific_hosts_and_unmapped_ports():
    c = {"name": "x", "command": ["vllm"], "args": ["--host", "10.1.2.3", "--port", "8000", "--port=9000"]}
    assert kp.build_process(c, {}, [], TABLE, "127.0.0.7", {}, "/d").argv[1:] == \
        ["--host", "10.1.2.3", "--port", "8000", "--port=9000"]


def test_termination_path_in_arguments_is_translated():
    c = {"name": "pf", "command": ["specdeploy-runtime"], "args": ["preflight", "--termination-log", "/dev/termination-log"]}
    ps = kp.build_process(c, {}, [], TABLE, "127.0.0.7", {}, "/d")
    assert ps.argv[-1] == "/d/termination-log"


@pytest.mark.parametrize("container, message", [
    ({"name": "x", "image": "busybox"}, "has no command"),
    ({"name": "x", "image": "busybox", "command": ["sh", "-c", "rm -rf /"]}, "no local executable for command 'sh'"),
    ({"name": "x", "image": "i", "command": ["/usr/bin/vllm"]}, "no local executable"),
])
def test_refused_commands(container, message):
    with pytest.raises(kp.PodConfigError, match=message):
        kp.build_process(container, {}, [], TABLE, "127.0.0.7", {}, "/d")


def test_named_ports():
    c = {"ports": [{"name": "http", "containerPort": 8000}]}
    assert kp.named_port(POD, c, "http") == 8000 and kp.named_port(POD, c, 9) == 9 and kp.named_port(POD, c, "9") == 9
    assert kp.named_port(POD, c, "metrics") is None


def test_termination_message():
    assert kp.termination_message("from file", "log", "FallbackToLogsOnError", True) == "from file"
    assert kp.termination_message("", "log", "File", True) == ""
    assert kp.termination_message("", "ok log", "FallbackToLogsOnError", False) == ""
    log = "".join(f"line {i}\n" for i in range(200))
    tail = kp.termination_message("", log, "FallbackToLogsOnError", True)
    assert tail.endswith("line 199\n") and tail.count("\n") <= 80 and len(tail) <= 2048
    assert len(kp.termination_message("x" * 10000, "", None, True)) == 4096


def view(name, state="running", **kw) -> kp.ContainerView:
    return kp.ContainerView(name, "img", state=state, **kw)


@pytest.mark.parametrize("inits, mains, restart, phase, ready", [
    ([view("i", "running")], [view("c", "waiting")], "Always", "Pending", False),
    ([view("i", "terminated", exit_code=0)], [view("c", ready=True)], "Always", "Running", True),
    ([], [view("c", ready=False)], "Always", "Running", False),
    ([], [view("c", "waiting", restart_count=2)], "Always", "Running", False),
    ([], [view("c", "terminated", exit_code=0)], "Never", "Succeeded", False),
    ([], [view("c", "terminated", exit_code=1)], "Never", "Failed", False),
    ([], [view("c", "waiting")], "Always", "Pending", False),
])
def test_pod_phase_and_readiness(inits, mains, restart, phase, ready):
    pod = {**POD, "spec": {"restartPolicy": restart}}
    st = kp.pod_status(pod, inits, mains, pod_ip="127.0.0.5", host_ip="127.0.0.1", start_time="t0", now="t1")
    assert st["phase"] == phase
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds["Ready"] == conds["ContainersReady"] == ("True" if ready else "False")
    assert st["podIP"] == "127.0.0.5" and st["hostIP"] == "127.0.0.1"


def test_pod_status_keeps_transition_times_and_reports_restarts():
    last = view("c", "terminated", exit_code=3, reason="Error", message="boom", pid=42, started_at="t0",
                finished_at="t1").terminated()
    c = view("c", "waiting", reason="CrashLoopBackOff", message="back-off", restart_count=2, last_terminated=last)
    st = kp.pod_status(POD, [], [c], pod_ip="i", host_ip="h", start_time="t0", now="t1")
    cs = st["containerStatuses"][0]
    assert cs["restartCount"] == 2 and cs["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}
    assert cs["lastState"] == {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom", "startedAt": "t0",
                                              "finishedAt": "t1", "containerID": "local://42"}}
    again = kp.pod_status(POD, [], [c], pod_ip="i", host_ip="h", start_time="t0", now="t2", previous=st)
    assert [x["lastTransitionTime"] for x in again["conditions"]] == ["t1"] * 4
    c.ready = True
    c.state = "running"
    third = kp.pod_status(POD, [], [c], pod_ip="i", host_ip="h", start_time="t0", now="t3", previous=again)
    assert {x["type"]: x["lastTransitionTime"] for x in third["conditions"]}["Ready"] == "t3"


def test_port_map_annotation():
    assert kp.port_map_annotation({"engine": {8000: 8000}}) is None
    assert json.loads(kp.port_map_annotation({"engine": {8000: 41000, 9000: 9000}})) == {"engine": {"8000": 41000}}


NODE = {"status": {"addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "127.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}


def test_pod_log_target():
    pod = {"metadata": {"name": "p", "namespace": "ns"},
           "spec": {"nodeName": "n", "containers": [{"name": "engine"}], "initContainers": [{"name": "preflight"}]}}
    assert kubelet_url(pod, NODE, None) == ("http://127.0.0.1:10250/containerLogs/ns/p/engine", "")
    assert kubelet_url(pod, NODE, "preflight")[0].endswith("/ns/p/preflight")
    assert kubelet_url(pod, NODE, "nope") == (None, "container nope is not valid for pod p")
    two = {**pod, "spec": {**pod["spec"], "containers": [{"name": "a"}, {"name": "b"}]}}
    assert kubelet_url(two, NODE, None)[1] == ("a container name must be specified for pod p, choose one of: [a b] "
                                               "or one of the init containers: [preflight]")
    unbound = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}}
    assert kubelet_url(unbound, NODE, None)[1] == "pod p does not have a host assigned"
    remote = {"status": {**NODE["status"], "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]}}
    assert "loopback only" in kubelet_url(pod, remote, None)[1]
    assert "not found" in kubelet_url(pod, None, None)[1]


@pytest.mark.parametrize("pod, problem", [
    ({"metadata": {"uid": "0b1c-22"}, "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "b"}]}},
     None),
    ({"metadata": {"uid": "../../etc"}, "spec": {"containers": [{"name": "a"}]}}, "is not a UUID"),
    ({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "../x"}]}}, "is not a DNS label"),
    ({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "a"}]}},
     "not unique"),
    ({"metadata": {"uid": "u"}, "spec": {"containers": []}}, "no containers"),
])
def test_validate_pod(pod, problem):
    got = kp.validate_pod(pod)
    assert (got is None) if problem is None else (problem in got)
