"""Import weight: the runtime never imports kopf; `specdeploy-runtime --help` never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testkit import ROOT
from runtime_helpers import run_runtime

BLOCK_KOPF = """
import importlib, pkgutil, sys
sys.modules['kopf'] = None  # `import kopf` now raises ImportError
sys.modules['specdeploy_dev'] = None  # and so does the development rig: the runtime never imports it
import specdeploy_runtime
names = [m.name for m in pkgutil.iter_modules(specdeploy_runtime.__path__)]
for name in names:
    importlib.import_module('specdeploy_runtime.' + name)
assert {'cli', 'preflight', 'launch', 'draftcache', 'verify', 'bench'} <= set(names), names
bad = sorted(m for m, mod in sys.modules.items()
             if mod is not None and m.startswith(('kopf', 'kubernetes', 'specdeploy.controller', 'aiohttp')))
assert not bad, bad
print('ok', len(names))
"""


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_every_runtime_module_imports_without_kopf():
    p = _py(BLOCK_KOPF)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("ok")


def test_preflight_runs_without_kopf(tmp_path):
    from runtime_helpers import rendered_pod

    pod = rendered_pod(tmp_path, "sglang")
    code = ("import sys; sys.modules['kopf'] = None; sys.modules['torch'] = None\n"
            "from specdeploy_runtime.cli import main\n"
            f"sys.exit(main({pod.preflight_argv()!r}))")
    p = _py(code)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("argv", [["--help"], ["preflight", "--help"], ["launch", "--help"], ["verify-window", "--help"],
                                  ["bench-window", "--help"]])
def test_help_does_not_import_torch(argv):
    code = ("import sys\n"
            "from specdeploy_runtime.cli import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "heavy = sorted(m for m in ('torch', 'numpy', 'kopf', 'kubernetes') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    p = _py(code)
    assert p.returncode == 0, p.stderr
    assert "HEAVY []" in p.stdout


def test_console_script_help_importtime():
    p = subprocess.run([sys.executable, "-X", "importtime", "-c",
                        "import sys; from specdeploy_runtime.cli import main; sys.argv[0] = 'specdeploy-runtime'; main(['--help'])"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    imported = {line.split("|")[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert "specdeploy_runtime.cli" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "kopf")}
    r = run_runtime("--help")
    assert r.returncode == 0 and "verify-window" in r.stdout and "preflight" in r.stdout
