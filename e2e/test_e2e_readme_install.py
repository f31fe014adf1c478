"""The README's install section, run as written, reaches Ready for its example.

The block between ``<!-- install:begin`` and ``<!-- install:end -->`` in README.md runs as one bash
script (``set -euo pipefail``), verbatim except for what the README says to replace: ``REGISTRY``.
What a real cluster and registry would provide is played around it, never inside it:

- the cluster: ``specdeploy dev up --no-install`` (the embedded API server; whatever ``helm install``
  installs, its operator Deployment's own args run as a local process with the webhook Service's
  Endpoints pointing at it, its status ready);
- the container tool and the registry: a stand-in ``docker`` on PATH (specdeploy_dev.container_standin:
  logs the builds, tags and pushes, builds nothing);
- ``helm`` on PATH: .venv/tools/helm4;
- the engine pods: after the block, the test plays the Deployment controller for the example's engine
  Deployment (the example needs B300 nodes), and the SpeculativeDeployment reaches Ready=True.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_support import EMBEDDED
from specdeploy_dev.container_standin import container_calls, fake_container_tool
from specdeploy_dev.harness import Cluster, kubectl_available, wait_for

ROOT = Path(__file__).resolve().parents[1]

README = ROOT / "README.md"
BEGIN, END = "<!-- install:begin", "<!-- install:end -->"
REGISTRY = "localhost:5000/specdeploy-test"  # what the README says to replace REGISTRY with: any registry
HELM = ROOT / ".venv" / "tools" / "helm4"
SPECDEPLOY = Path(sys.executable).parent / "specdeploy"

pytestmark = [
    pytest.mark.skipif(not EMBEDDED, reason="plays the cluster with the embedded API server "
                       "(SPECDEPLOY_E2E_KUBECONFIG is set)"),
    pytest.mark.skipif(not kubectl_available(), reason="needs kubectl"),
]


def install_section() -> str:
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README.md: one install section between markers"
    section = text[text.index(BEGIN):text.index(END)]
    blocks = re.findall(r"```console\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the install section holds one console block"
    return blocks[0]


def test_install_section_names_the_steps():
    block = install_section()
    assert block.startswith("bash images/build.sh --push REGISTRY\n")  # the images first
    assert "--set image.repository=REGISTRY/specdeploy/operator" in block
    assert "helm install" in block and "kubectl apply -k examples/" in block


def test_readme_install_verbatim_reaches_ready(tmp_path):
    if not HELM.exists():
        pytest.skip(f"{HELM} is missing: run .ci/install-tools (or .ci/setup-test)")
    block = install_section()
    script = block.replace("REGISTRY", REGISTRY)
    log, env = fake_container_tool(tmp_path / "bin")
    (tmp_path / "bin" / "helm").symlink_to(HELM)
    state = tmp_path / "dev"
    up_log = open(tmp_path / "dev-up.log", "w")
    up = subprocess.Popen([str(SPECDEPLOY), "dev", "up", "--no-install", "--dir", str(state)],
                          stdout=up_log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        line = wait_for(lambda: re.search(r"^export KUBECONFIG=(\S+)$", (tmp_path / "dev-up.log").read_text(), re.M),
                        90, "dev up's KUBECONFIG line")
        kubeconfig = line.group(1)
        env = {**env, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path / "home")}  # kubectl's discovery cache too
        p = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, f"the README's install section failed ({p.returncode}):\n{p.stdout}\n{p.stderr}\n" \
                                  f"dev up:\n{(tmp_path / 'dev-up.log').read_text()}"
        # the images were built, tagged and pushed to the registry the chart then pulls from
        pushes = [c[1] for c in container_calls(log) if c[0] == "push"]
        assert [x.rsplit(":", 1)[0] for x in pushes] == [f"{REGISTRY}/specdeploy/operator",
                                                          f"{REGISTRY}/specdeploy/runtime"]
        cluster = Cluster(workdir=tmp_path / "harness", kubeconfig=kubeconfig)
        dep = cluster.get_json("deployment", "specdeploy", "-n", "specdeploy-system")
        assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == pushes[0]
        assert "qwen36-27b" in p.stdout and "Compatible" in p.stdout  # kubectl get specdeploy -o wide
        # the example's engine Deployment becomes ready (a GPU node would run it): Ready=True
        wait_for(lambda: cluster.kubectl("get", "deployment", "qwen36-27b", check=False).returncode == 0, 60,
                 "the example's engine Deployment")
        cluster.mark_workload_ready("qwen36-27b", "deployment", "default")
        cluster.wait_condition("qwen36-27b", "Ready", "True", "AllReplicasReady", timeout=120, namespace="default")
        down = subprocess.run([str(SPECDEPLOY), "dev", "down", "--dir", str(state)], cwd=ROOT,
                              capture_output=True, text=True, timeout=90)
        assert down.returncode == 0, down.stdout + down.stderr
        assert up.wait(60) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGTERM)
            try:
                up.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait(10)
        up_log.close()
