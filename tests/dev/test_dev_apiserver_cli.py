"""develop-locally.md's "Just the API server" block, run as written (its kubeconfig path moved to a scratch
directory): `rm -f P; specdeploy dev apiserver --kubeconfig P &` then `until [ -s P ]; ...`: the kubeconfig appears,
whole, once the server serves, so the wait never races it and the next kubectl command reaches this server."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy_dev.apiserver.server import write_kubeconfig
from specdeploy_dev.harness import free_port, kubectl_available, wait_for

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "develop-locally.md"
PATH_IN_DOCS = "/tmp/specdeploy-dev.kubeconfig"


def the_block() -> str:
    """The console block of the page that starts the API server in the background."""
    for body in re.findall(r"```console\n(.*?)```", PAGE.read_text(), re.S):
        if "dev apiserver --kubeconfig" in body and "&" in body:
            return body
    raise AssertionError(f"{PAGE}: no console block starts `dev apiserver ... &`")


def test_the_pages_api_server_block_waits_for_this_server(tmp_path):
    kc = tmp_path / "kc"
    write_kubeconfig(kc, f"http://127.0.0.1:{free_port()}")  # an earlier run's: nothing listens there
    block = the_block().replace(PATH_IN_DOCS, str(kc))
    block = re.sub(r"(^|\s)\.venv/bin/", lambda m: f"{m.group(1)}{shlex.quote(str(Path(sys.executable).parent))}/",
                   block)
    pidfile = tmp_path / "pid"
    script = f"{block}\necho $! > {pidfile}\nkubectl get namespaces -o name --request-timeout=20s\n"
    out = tmp_path / "out"
    try:
        # output to a file: the background server keeps a pipe open until it stops
        with open(out, "w") as f:
            p = subprocess.run(["bash", "-c", script], stdout=f, stderr=subprocess.STDOUT, timeout=120)
        assert p.returncode == 0, out.read_text()
        assert "namespace/default" in out.read_text()
    finally:
        if pidfile.exists():
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not Path(f"/proc/{pid}").exists() or
                     Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", 30, "the API server to stop")
