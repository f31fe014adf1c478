"""`specdeploy operator run --kubeconfig PATH` works with no KUBECONFIG in the environment.

Regression: kopf's default login reads the kubeconfig location the kubernetes library took
from KUBECONFIG at import time, so an explicit --kubeconfig was ignored for kopf's watches.
"""

from __future__ import annotations

import os
import subprocess

from e2e_support import QWEN, Cluster, embedded_only, wait_for
from specdeploy_dev.harness import BIN, ROOT
from specdeploy_dev.procs import stop_process


@embedded_only
def test_operator_with_only_the_kubeconfig_flag(tmp_path):
    c = Cluster(workdir=tmp_path).start()
    try:
        c.apply_crds()
        c.kubectl("apply", "-k", str(QWEN))
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env["HOME"] = str(tmp_path)  # no ~/.kube/config to fall back on
        env["SPECDEPLOY_WEBHOOK_PORT"] = "0"
        log = open(tmp_path / "op.log", "w")
        op = subprocess.Popen([str(BIN / "specdeploy"), "operator", "run", "--kubeconfig", c.kubeconfig,
                               "--metrics-port", "0", "--namespace", "default"],
                              stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            cond = c.wait_condition("qwen36-27b", "DrafterCompatible", "True", timeout=60)
            assert cond["reason"] == "Compatible"
            wait_for(lambda: c.kubectl("get", "deployment", "qwen36-27b", check=False).returncode == 0, 30,
                     "the Deployment")
        finally:
            stop_process(op, 30)
            log.close()
        text = (tmp_path / "op.log").read_text()
        assert "Cannot authenticate" not in text and "LoginError" not in text
    finally:
        c.stop()
