"""kubectl's content types against the embedded cluster: protobuf bodies of its generators, edit,
the three patch types, server-side apply, and Helm 3/4 install, upgrade, rollback and uninstall."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from apiserver_helpers import server, api, kubeconfig, kubectl  # noqa: F401  (fixtures)
from apiserver_helpers import KUBECTL, REAL_CRD, ROOT, Http

HELMS = {"helm3": ROOT / ".venv" / "tools" / "helm3", "helm4": ROOT / ".venv" / "tools" / "helm4"}


def test_generators_send_protobuf_and_are_decoded(kubectl, api: Http, tmp_path):
    """kubectl create configmap|secret|namespace|serviceaccount: typed clients, protobuf bodies."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 128}\n')
    assert "configmap/target created" in kubectl("create", "configmap", "target", f"--from-file=config.json={cfg}").stdout
    cm = api.get("/api/v1/namespaces/default/configmaps/target")[1]
    assert cm["data"] == {"config.json": '{"hidden_size": 128}\n'} and "generateName" not in cm["metadata"]
    kubectl("create", "secret", "generic", "hub-token", "--from-literal=token=hf_abc")
    secret = api.get("/api/v1/namespaces/default/secrets/hub-token")[1]
    assert secret["type"] == "Opaque" and base64.b64decode(secret["data"]["token"]) == b"hf_abc"
    kubectl("create", "namespace", "team-b")
    assert api.get("/api/v1/namespaces/team-b")[1]["status"]["phase"] == "Active"
    kubectl("create", "serviceaccount", "runner", "-n", "team-b")
    assert api.get("/api/v1/namespaces/team-b/serviceaccounts/runner")[0] == 200
    # A kind without a protobuf table: refused with 415 and the media types that work, like a CR.
    p = kubectl("create", "deployment", "web", "--image=nginx", check=False)
    assert p.returncode != 0 and "the body of the request was in an unknown format" in p.stderr


def test_edit_and_the_three_patch_types(kubectl, api: Http, tmp_path):
    kubectl("create", "configmap", "e", "--from-literal=a=1")
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/^  a: \"1\"$/  a: \"2\"/' \"$1\"\n")
    editor.chmod(0o755)
    env = {**os.environ, "EDITOR": str(editor), "HOME": str(tmp_path)}
    p = subprocess.run([KUBECTL, "--kubeconfig", str(tmp_path / "kubeconfig"),
                        "--cache-dir", str(tmp_path / "kube-cache"), "edit", "configmap", "e"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and "configmap/e edited" in p.stdout, p.stderr
    kubectl("patch", "configmap", "e", "--type=json", "-p", '[{"op":"add","path":"/data/b","value":"x"}]')
    kubectl("patch", "configmap", "e", "--type=merge", "-p", '{"data":{"c":"y"}}')
    kubectl("patch", "configmap", "e", "--type=strategic", "-p", '{"data":{"d":"z"}}')
    assert api.get("/api/v1/namespaces/default/configmaps/e")[1]["data"] == {"a": "2", "b": "x", "c": "y", "d": "z"}


def test_server_side_apply_of_the_crd_and_a_cr(kubectl, api: Http):
    kubectl("apply", "--server-side", "-f", str(REAL_CRD))
    kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdeploy.io", "--timeout=10s")
    cr = yaml.safe_load((ROOT / "examples" / "qwen3.6-27b-b300-vllm" / "speculativedeployment.yaml").read_text())
    out = kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(cr)).stdout
    assert "serverside-applied" in out
    cr["spec"]["speculation"] = {"blockSize": 1}
    p = kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(cr), check=False)
    assert p.returncode != 0 and "spec.speculation.blockSize in body should be greater than or equal to 2" in p.stderr


@pytest.mark.parametrize("helm", sorted(HELMS))
def test_helm_install_upgrade_rollback_uninstall(helm, kubeconfig, api: Http, tmp_path):
    binary = HELMS[helm]
    if not binary.exists():
        pytest.skip(f"{binary} is installed by .ci/setup-test")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path), "HELM_CACHE_HOME": str(tmp_path / "cache"),
           "HELM_CONFIG_HOME": str(tmp_path / "config"), "HELM_DATA_HOME": str(tmp_path / "data")}

    def run(*args: str) -> subprocess.CompletedProcess:
        p = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, f"{helm} {' '.join(args)}: {p.stdout}\n{p.stderr}"
        return p

    chart = str(ROOT / "charts" / "specdeploy")
    run("install", "specdeploy", chart, "--namespace", "specdeploy-system", "--create-namespace")
    dep = api.get("/apis/apps/v1/namespaces/specdeploy-system/deployments/specdeploy")[1]
    assert "--resync-seconds" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert api.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/specdeploy")[0] == 200
    run("upgrade", "specdeploy", chart, "-n", "specdeploy-system", "--reuse-values", "--set", "resyncSeconds=17")
    args = api.get("/apis/apps/v1/namespaces/specdeploy-system/deployments/specdeploy")[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--resync-seconds") + 1] == "17"
    run("rollback", "specdeploy", "1", "-n", "specdeploy-system")
    args = api.get("/apis/apps/v1/namespaces/specdeploy-system/deployments/specdeploy")[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--resync-seconds") + 1] == "60"
    history = run("history", "specdeploy", "-n", "specdeploy-system", "-o", "json").stdout
    assert [r["revision"] for r in json.loads(history)] == [1, 2, 3]
    run("uninstall", "specdeploy", "-n", "specdeploy-system")
    assert api.get("/apis/apps/v1/namespaces/specdeploy-system/deployments/specdeploy")[0] == 404
    # crds.keep: the CRD survives the uninstall (helm.sh/resource-policy: keep).
    assert api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/speculativedeployments.specdeploy.io")[0] == 200
    assert run("list", "-A", "-o", "json").stdout.strip() in ("[]", "")
    assert Path(kubeconfig).exists()
