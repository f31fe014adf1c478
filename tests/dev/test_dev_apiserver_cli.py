"""`rm -f P; specdeploy dev apiserver --kubeconfig P &` then `until [ -s P ]; ...`, as develop-locally.md runs it:
the kubeconfig appears, whole, once the server serves, so the wait never races it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy_dev.apiserver.server import write_kubeconfig
from specdeploy_dev.harness import free_port, kubectl_available
from specdeploy_dev.procs import stop_process

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")


def test_waiting_for_the_kubeconfig_waits_for_this_server(tmp_path):
    kc = tmp_path / "kc"
    write_kubeconfig(kc, f"http://127.0.0.1:{free_port()}")  # an earlier run's: nothing listens there
    kc.unlink()  # the docs' `rm -f`
    proc = subprocess.Popen([str(Path(sys.executable).parent / "specdeploy"), "dev", "apiserver", "--kubeconfig",
                             str(kc)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p = subprocess.run(["bash", "-c", f"until [ -s {kc} ]; do sleep 0.2; done; kubectl --kubeconfig {kc} "
                            "get namespaces -o name --request-timeout=20s"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "namespace/default" in p.stdout
    finally:
        stop_process(proc, 20)
