"""The import contracts (pyproject.toml, [tool.importlinter]; docs/concepts/architecture.md, "Import
contracts") hold on the tree, and a contract broken on purpose fails ``lint-imports``.

The broken trees are copies of the three source roots (the product, the runtime, the rig) in a
temporary directory with one forbidden import added; ``lint-imports`` runs there with the copies first
on the path, exactly as ``.ci/test`` runs it on the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOTS = {"operator/specdeploy": "specdeploy", "operator/dev/specdeploy_dev": "specdeploy_dev",
         "runtime/specdeploy_runtime": "specdeploy_runtime"}
CONTRACTS = {c["id"]: c["name"] for c in
             tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]}


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath) if pythonpath else os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def copy_tree(tmp_path: Path) -> Path:
    """The three source roots and pyproject.toml copied under ``tmp_path``; returns the copies' source root."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for rel, name in ROOTS.items():
        shutil.copytree(ROOT / rel, src / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return src


def test_the_tree_keeps_every_contract():
    p = lint_imports(ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("module, line, contract", [
    # the core does I/O: a Kubernetes client in the pure layer
    ("specdeploy/core/findings.py", "import kubernetes  # noqa: F401", "pure"),
    # the controller reaches into the rig
    ("specdeploy/controller/queue.py", "import specdeploy_dev.harness  # noqa: F401",
     "product-without-rig"),
    # the pod runtime imports the controller
    ("specdeploy_runtime/launch.py", "import specdeploy.controller.kube  # noqa: F401",
     "runtime"),
    # an arrow the wrong way: the core imports the API layer above it
    ("specdeploy/core/findings.py", "import specdeploy.api.types  # noqa: F401", "layers"),
    # the pure planner reaches for the API client
    ("specdeploy/controller/plan.py", "from . import kube  # noqa: F401", "reconcile-planner"),
    # the monitor holds the controller again
    ("specdeploy/controller/monitor.py", "from . import reconciler  # noqa: F401", "monitor-one-way"),
    # the canary analysis reaches for the controller
    ("specdeploy/controller/canary.py", "from . import reconciler  # noqa: F401", "monitor-one-way"),
    # the reconciler holds the monitor's module again (it asks an Observer, wired by handlers.py)
    ("specdeploy/controller/reconciler.py", "from . import monitor  # noqa: F401", "observers-one-way"),
    # the planner reads the canary analysis' internals instead of its report
    ("specdeploy/controller/plan.py", "from . import canary  # noqa: F401", "observers-one-way"),
    # two command groups import each other
    ("specdeploy/cli/check.py", "from . import operator  # noqa: F401", "cli-groups"),
    # inside the core, a leaf reaches up into a wing (the tenancy policy read the pod paths from render)
    ("specdeploy/core/policy.py", "from .render import children  # noqa: F401", "core-wings"),
    # the renderer imports the benchmark wing above it (render/jobs.py took the client plan's key from it)
    ("specdeploy/core/render/jobs.py", "from ..bench import plan  # noqa: F401", "core-wings"),
])
def test_a_contract_broken_on_purpose_fails(tmp_path, module, line, contract):
    src = copy_tree(tmp_path)
    path = src / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    p = lint_imports(tmp_path, pythonpath=src)
    out = " ".join(p.stdout.split())  # lint-imports wraps its lines
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-2000:]
    assert f"{CONTRACTS[contract]} BROKEN" in out, out[-3000:]
    # the forbidden import is named in the report (the module and the line added)
    added = len(path.read_text(encoding="utf-8").splitlines())
    assert f"(l.{added})" in out, out[-3000:]


def test_a_core_module_without_a_floor_fails(tmp_path):
    """The core's contract is exhaustive: a new module of the core is placed on a floor (a wing or the leaves)."""
    src = copy_tree(tmp_path)
    (src / "specdeploy/core/unplaced.py").write_text('"""A new core module nobody placed."""\n', encoding="utf-8")
    p = lint_imports(tmp_path, pythonpath=src)
    out = " ".join(p.stdout.split())
    assert p.returncode == 1, p.stdout[-4000:] + p.stderr[-2000:]
    assert f"{CONTRACTS['core-wings']} BROKEN" in out, out[-3000:]
    assert "specdeploy.core.unplaced" in out, out[-3000:]
