"""Shared test helpers: the repository root, the model config fixtures, a CLI runner.

Test modules import them with ``from testkit import ...``. Not in ``tests/conftest.py`` itself: every
conftest.py is imported as the module ``conftest``, and e2e/conftest.py is one too, so a test module's
``from testkit import ...`` would get whichever was loaded last."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
EXAMPLES = ROOT / "examples"

# Real released pairs (tests/fixtures/models/SOURCES.md).
PAIRS = {
    "qwen3-8b": ("qwen3-8b-dflash-b16.drafter.json", "qwen3-8b.target.json"),
    "qwen3.6-27b": ("qwen3.6-27b-dflash.drafter.json", "qwen3.5-27b.target.json"),
    "kimi-k2.6": ("kimi-k2.7-code-dflash.drafter.json", "kimi-k2.6.target.json"),
}


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()  # a value for set_path: delete the key


def set_path(doc: Any, path: Sequence[Any], value: Any) -> None:
    """``doc[path[0]]...[path[-1]] = value`` in place, or delete that key when ``value`` is DELETE."""
    for key in path[:-1]:
        doc = doc[key]
    if value is DELETE:
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


def load_fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def pair(name: str) -> tuple[dict, dict]:
    """(drafter, target) config dicts of a real pair, fresh copies."""
    d, t = PAIRS[name]
    return copy.deepcopy(load_fixture(d)), copy.deepcopy(load_fixture(t))


def run_cli(*args: str, stdin: str | None = None, prog: str = "specdeploy", env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a console script of the installed package as a real process."""
    exe = Path(sys.executable).parent / prog
    return subprocess.run([str(exe), *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=120)


def minimal_crd(group: str, kind: str, plural: str) -> dict:
    """A CRD that serves KIND with any content: a cluster's other operators' APIs (prometheus-operator,
    LeaderWorkerSet) as the docs and chart tests need them present."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}

