"""The product's wheel holds no development rig.

The operator image and the runtime images install the wheel that ``python -m pip wheel --no-deps .``
builds from the repository root (images/*/Dockerfile). This test builds it the same way, from a copy of
what the Dockerfiles copy (pyproject.toml, README.md, operator/, runtime/; the rig in operator/dev/
included, as a context without the .dockerignore would have it), and reads the wheel: the product's
packages are in it, no rig module is. No podman, no network: the venv's setuptools builds it
(--no-build-isolation), with the same pyproject.toml configuration the image build reads.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RIG_PACKAGES = ("specdeploy_dev", "specdeploy_runtime_dev")


def top_packages(names: list[str]) -> set[str]:
    return {n.split("/")[0] for n in names if n.endswith(".py")}


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> tuple[list[str], str]:
    """The wheel's file names and pip's verbose output (setuptools' warnings are in it)."""
    src = tmp_path_factory.mktemp("context")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("operator", "runtime"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    assert (src / "operator" / "dev" / "specdeploy_dev" / "__init__.py").exists()  # the rig is in the context
    out = tmp_path_factory.mktemp("wheels")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
                        "--wheel-dir", str(out), "."], cwd=src, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (whl,) = out.glob("specdeploy-*.whl")
    with zipfile.ZipFile(whl) as z:
        return z.namelist(), p.stdout + p.stderr


@pytest.fixture(scope="module")
def wheel_names(build) -> list[str]:
    return build[0]


def test_setuptools_has_nothing_to_warn_about(build):
    """No pending setuptools deprecation (the license table, to be removed by 2027-02-18) and no package left out of
    `packages` (specdeploy.data.prompts, whose files the bench prompts read)."""
    warnings = [ln.strip() for ln in build[1].splitlines() if "BuildBackendWarning" in ln or "Deprecat" in ln]
    assert not warnings, warnings
    assert any(n.startswith("specdeploy/data/prompts/") and n.endswith(".json") for n in build[0])


def test_the_wheel_holds_the_product(wheel_names):
    names = set(wheel_names)
    for module in ("specdeploy/cli/__init__.py", "specdeploy/core/checker.py", "specdeploy/controller/main.py",
                   "specdeploy/core/flagdrift.py", "specdeploy_runtime/preflight.py", "specdeploy_runtime/launch.py"):
        assert any(n == module or n.startswith(module.removesuffix(".py") + "/") for n in names), module
    assert top_packages(wheel_names) == {"specdeploy", "specdeploy_runtime"}, top_packages(wheel_names)


def test_the_wheel_holds_no_rig(wheel_names):
    rig = [n for n in wheel_names if n.split("/")[0] in RIG_PACKAGES or "/dev/" in n or n.startswith("dev/")]
    assert rig == [], rig[:10]


@pytest.mark.parametrize("argv", [["demo", "--offline"], ["dev", "apiserver", "--kubeconfig", "kc"],
                                  ["dev", "flag-commands"]])
def test_rig_commands_without_the_rig_name_what_to_install(argv, monkeypatch, capsys):
    """Where the rig is not installed (the operator image), `specdeploy demo` and `specdeploy dev ...`
    exit 2 with one line naming the distribution, never a traceback."""
    from specdeploy import cli

    for name in [m for m in sys.modules if m == "specdeploy_dev" or m.startswith("specdeploy_dev.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "specdeploy_dev", None)  # import specdeploy_dev -> ModuleNotFoundError
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "specdeploy-dev" in err and "pip install -e operator/dev" in err and len(err.strip().splitlines()) == 1, err


def test_train_tiny_drafter_without_the_rig_names_what_to_install(monkeypatch, tmp_path):
    """The runtime's one development command hands over to the rig; in a runtime image (no rig) it
    stops with one line naming the distribution."""
    from specdeploy_runtime import cli

    for name in [m for m in sys.modules if m == "specdeploy_dev" or m.startswith("specdeploy_dev.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "specdeploy_dev", None)
    with pytest.raises(SystemExit) as e:
        cli.main(["train-tiny-drafter", str(tmp_path)])
    assert "specdeploy-dev" in str(e.value) and "pip install -e operator/dev" in str(e.value), e.value
