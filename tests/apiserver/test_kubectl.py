"""Real kubectl against the stand-in (validation on: the stand-in serves OpenAPI v2 and v3)."""

from __future__ import annotations

import json
import subprocess

import yaml

from apiserver_helpers import server, kubeconfig, kubectl  # noqa: F401  (fixtures)
from apiserver_helpers import KUBECTL, REAL_CRD, WIDGET_CRD, wait_for

WIDGET_YAML = """
apiVersion: test.specdeploy.io/v1
kind: Widget
metadata:
  name: w1
  labels: {team: a}
spec:
  size: 3
"""


def test_apply_get_describe_patch_delete(kubectl, tmp_path):
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/widgets.test.specdeploy.io", "--timeout=10s")
    (tmp_path / "w.yaml").write_text(WIDGET_YAML)
    assert "widget.test.specdeploy.io/w1 created" in kubectl("apply", "-f", str(tmp_path / "w.yaml")).stdout
    assert "unchanged" in kubectl("apply", "-f", str(tmp_path / "w.yaml")).stdout
    # a changed object: client-side apply patches a custom resource with a JSON merge patch (the OpenAPI
    # says custom resources take no strategic merge patch, as a real API server's does)
    (tmp_path / "w.yaml").write_text(WIDGET_YAML.replace("size: 3", "size: 2"))
    assert "widget.test.specdeploy.io/w1 configured" in kubectl("apply", "-f", str(tmp_path / "w.yaml")).stdout
    assert json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)["spec"]["size"] == 2
    (tmp_path / "w.yaml").write_text(WIDGET_YAML)
    assert "configured" in kubectl("apply", "-f", str(tmp_path / "w.yaml")).stdout

    table = kubectl("get", "widgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "PHASE", "AGE"] and table[1].split()[:2] == ["w1", "3"]
    assert kubectl("get", "wdg", "-o", "name").stdout.strip() == "widget.test.specdeploy.io/w1"
    obj = json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert obj["spec"]["size"] == 3 and obj["metadata"]["generation"] == 3
    assert "w1" in kubectl("get", "all").stdout  # categories

    kubectl("patch", "widget", "w1", "--type", "merge", "-p", '{"spec":{"size":4}}')
    kubectl("patch", "widget", "w1", "--subresource", "status", "--type", "merge", "-p", '{"status":{"phase":"Ready"}}')
    kubectl("patch", "widget", "w1", "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/x","value":"y"}]')
    obj = json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert obj["spec"]["size"] == 4 and obj["status"]["phase"] == "Ready" and obj["metadata"]["generation"] == 4
    assert kubectl("get", "widgets", "-l", "x=y", "-o", "name").stdout.strip() == "widget.test.specdeploy.io/w1"
    assert kubectl("get", "widgets", "-l", "x!=y", "-o", "name").stdout.strip() == ""
    assert kubectl("get", "widgets", "--field-selector", "metadata.name=w1", "-o", "name").stdout.strip()
    kubectl("scale", "widget", "w1", "--replicas=5")
    assert json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)["spec"]["replicas"] == 5

    described = kubectl("describe", "widget", "w1").stdout
    assert "Name:" in described and "w1" in described and "Ready" in described

    dry = kubectl("apply", "--dry-run=server", "-f", "-", stdin=WIDGET_YAML.replace("w1", "w2")).stdout
    assert "(server dry run)" in dry
    assert kubectl("get", "widget", "w2", check=False).returncode != 0

    assert '"w1" deleted' in kubectl("delete", "widget", "w1", "--timeout=20s").stdout
    assert "No resources found" in kubectl("get", "widgets").stderr


def test_server_side_apply_and_real_crd(kubectl, tmp_path):
    kubectl("apply", "--server-side", "-f", str(REAL_CRD))
    kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdeploy.io", "--timeout=10s")
    sd = yaml.safe_load((REAL_CRD.parents[1] / "examples" / "kimi-k2.6-rtx-pro-6000-sglang" /
                         "speculativedeployment.yaml").read_text())
    sd["metadata"] = {"name": "demo"}
    kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(sd))
    out = kubectl("get", "specdeploy").stdout.splitlines()
    assert out[0].split()[:3] == ["NAME", "ENGINE", "TARGET"] and out[1].split()[:2] == ["demo", "sglang"]
    managed = json.loads(kubectl("get", "specdeploy", "demo", "-o", "json", "--show-managed-fields").stdout)
    assert managed["metadata"]["managedFields"][0]["manager"] == "kubectl"


def test_configmap_get_watch_and_wait(kubectl, tmp_path):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    kubectl("apply", "-f", "-", stdin=json.dumps(cm))
    cmd = [KUBECTL, "--kubeconfig", str(tmp_path / "kubeconfig"), "--cache-dir", str(tmp_path / "kube-cache"),
           "get", "configmaps", "-w", "-o", "name", "--request-timeout=4s"]
    watcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = watcher.stdout.readline()  # the initial listing arrives before we change anything
        assert first.strip() == "configmap/c"
        kubectl("patch", "configmap", "c", "-p", '{"data":{"k":"v2"}}')
        assert watcher.stdout.readline().strip() == "configmap/c"  # the MODIFIED event
    finally:
        out, err = watcher.communicate(timeout=20)
    # The table form of a watch (server-side Tables in watch events).
    table = subprocess.run(cmd[:-3] + ["--request-timeout=2s"], capture_output=True, text=True, timeout=20)
    assert table.stdout.split()[:3] == ["NAME", "DATA", "AGE"]

    waiter = subprocess.Popen([KUBECTL, "--kubeconfig", str(tmp_path / "kubeconfig"), "--cache-dir",
                               str(tmp_path / "kube-cache"), "wait", "--for=jsonpath={.data.k}=v3", "configmap/c",
                               "--timeout=20s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kubectl("patch", "configmap", "c", "-p", '{"data":{"k":"v3"}}')
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert "condition met" in out
    assert kubectl("wait", "--for=delete", "configmap/c", "--timeout=1s", check=False).returncode != 0
    kubectl("delete", "configmap", "c")
    assert kubectl("get", "configmap", "c", check=False).returncode != 0


def test_namespaces_and_events(kubectl):
    kubectl("create", "namespace", "team-b")  # a protobuf body (kubectl's typed client)
    kubectl("apply", "-f", "-", stdin='{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-c"}}')
    names = kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/team-c" in names and "namespace/default" in names
    wait_for(lambda: "Active" in kubectl("get", "ns", "team-c").stdout, timeout=5)
    kubectl("delete", "namespace", "team-c", "--timeout=20s")
    assert "namespace/team-c" not in kubectl("get", "namespaces", "-o", "name").stdout.split()
