"""``specdeploy dev up`` / ``dev down``: the embedded API server, the chart installed with Helm, its
operator Deployment's own args run as a local process that serves the admission webhooks, a helm upgrade
restarting it with the new args, a second ``up`` refused, ``down`` stopping everything."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy_dev.devup import helm_install_argv
from specdeploy_dev.harness import Cluster, kubectl_available, wait_for

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / ".venv" / "tools" / "helm4"
SPECDEPLOY = Path(sys.executable).parent / "specdeploy"


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def operator_pid(state: Path) -> int:
    """The local operator's pid, from dev up's last 'operator running as pid N' line."""
    pids = re.findall(r"operator running as pid (\d+)", (state.parent / "up.log").read_text())
    return int(pids[-1]) if pids else 0


def test_helm_install_argv_keeps_user_values_as_arguments():
    import argparse

    args = argparse.Namespace(release="r", chart=None, namespace="ns", watch_namespace=["a", "b"],
                              values=["v.yaml"], set=["x=$(rm -rf /)"])
    argv = helm_install_argv("/h", args, "/kc")
    assert argv[:3] == ["/h", "install", "r"] and argv[3].endswith("charts/specdeploy")
    assert argv[4:] == ["--namespace", "ns", "--create-namespace", "--kubeconfig", "/kc", "--set",
                        "watch.namespaces={a,b}", "--values", "v.yaml", "--set", "x=$(rm -rf /)"]


@pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")
def test_dev_up_installs_runs_the_charts_operator_and_dev_down_stops_it(tmp_path):
    if not HELM.exists():
        pytest.skip(f"{HELM} is missing: run .ci/install-tools (or .ci/setup-test)")
    state = tmp_path / "state"
    log = open(tmp_path / "up.log", "w")
    up = subprocess.Popen([str(SPECDEPLOY), "dev", "up", "--dir", str(state), "--helm", str(HELM),
                           "--set", "resyncSeconds=90"], stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                          start_new_session=True)
    try:
        found = wait_for(lambda: re.search(r"^export KUBECONFIG=(\S+)$", (tmp_path / "up.log").read_text(), re.M),
                         120, "dev up's KUBECONFIG line")
        text = (tmp_path / "up.log").read_text()
        assert found.group(1) == str(state / "kubeconfig")
        assert f"specdeploy dev down --dir {state}" in text and "Ctrl-C" in text
        assert (state / "dev-up.pid").read_text().strip() == str(up.pid)
        c = Cluster(workdir=tmp_path / "h", kubeconfig=found.group(1))
        # the operator process runs the chart Deployment's args (ports moved, --kubeconfig added)
        dep = c.get_json("deployment", "specdeploy", "-n", "specdeploy-system")
        chart_args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        pid = operator_pid(state)
        argv = cmdline(pid)
        assert argv[argv.index("operator"):][:len(chart_args)][:2] == ["operator", "run"]
        flags = [a for a in chart_args if a.startswith("--")]
        assert [a for a in argv if a.startswith("--") and a != "--kubeconfig"] == flags
        assert argv[argv.index("--resync-seconds") + 1] == "90"
        assert dep["status"]["readyReplicas"] == dep["spec"]["replicas"]  # kubectl rollout status passes
        # the webhook Service's Endpoints point at it: the API server calls its webhooks
        eps = c.get_json("endpoints", "specdeploy-webhook", "-n", "specdeploy-system")
        assert eps["subsets"][0]["addresses"] == [{"ip": "127.0.0.1"}]
        assert eps["subsets"][0]["ports"][0]["port"] == int(argv[argv.index("--webhook-port") + 1])
        c.kubectl("apply", "-k", str(ROOT / "examples" / "qwen3.6-27b-b300-vllm"), "-n", "default")
        cr = c.get_json("specdeploy", "qwen36-27b", "-n", "default")
        assert cr["metadata"]["name"] == "qwen36-27b"
        c.wait_condition("qwen36-27b", "DrafterCompatible", "True", namespace="default", timeout=60)
        denied = c.kubectl("patch", "specdeploy", "qwen36-27b", "-n", "default", "--type=merge", "-p",
                           json.dumps({"spec": {"engine": {"image": "evil.example.com/x:1"}}}), check=False)
        # the tenancy policy lives in the operator's webhook alone (not the CRD schema)
        assert denied.returncode != 0 and "is not under an allowed repository" in denied.stderr, denied.stderr
        # a second dev up on the same state is refused, naming the running one
        again = subprocess.run([str(SPECDEPLOY), "dev", "up", "--dir", str(state)], capture_output=True, text=True,
                               timeout=60)
        assert again.returncode == 2 and f"already running in {state} (pid {up.pid})" in again.stderr
        # helm upgrade: the process restarts with the Deployment's new args
        subprocess.run([str(HELM), "upgrade", "specdeploy", str(ROOT / "charts" / "specdeploy"), "-n",
                        "specdeploy-system", "--reuse-values", "--set", "resyncSeconds=120"], check=True,
                       capture_output=True, env={**os.environ, "KUBECONFIG": found.group(1)}, timeout=120)
        wait_for(lambda: operator_pid(state) not in (0, pid), 90, "the operator restarted after helm upgrade")
        new = cmdline(operator_pid(state))
        assert new[new.index("--resync-seconds") + 1] == "120"
        assert not Path(f"/proc/{pid}").exists() or "operator" not in cmdline(pid)
        # dev down stops dev up, the operator and the API server
        down = subprocess.run([str(SPECDEPLOY), "dev", "down", "--dir", str(state)], capture_output=True, text=True,
                              timeout=90)
        assert down.returncode == 0 and f"stopped dev up (pid {up.pid})" in down.stdout
        assert up.wait(30) == 0
        assert not (state / "dev-up.pid").exists()
        gone = operator_pid(state)
        assert not Path(f"/proc/{gone}").exists() or "operator" not in cmdline(gone)
        again = subprocess.run([str(SPECDEPLOY), "dev", "down", "--dir", str(state)], capture_output=True, text=True,
                               timeout=30)
        assert again.returncode == 0 and "nothing running" in again.stdout
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(10)
        log.close()
