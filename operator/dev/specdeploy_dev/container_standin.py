"""A stand-in for podman or docker that builds nothing, for tests of images/build.sh's argument handling,
tags and pushes (and of the README's install section, which starts with it).

It logs every call (one JSON argv a line) to $FAKE_CONTAINER_LOG and answers what images/build.sh asks
of the images it "built" (their config as images/operator and images/runtime make it). A push to a
reference containing $FAKE_CONTAINER_PUSH_FAIL fails as an unauthenticated push does. Test
infrastructure only.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from .harness import ROOT


FAKE_CONTAINER_TOOL = r'''
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
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text(f"#!{sys.executable}" + FAKE_CONTAINER_TOOL)
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
