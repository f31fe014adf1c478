"""launch: exec the engine (a fake one on PATH) with the rendered argv; no shell, signals, exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from runtime_helpers import RUNTIME, run_runtime

FAKE_ENGINE = """\
#!{python}
import json, os, signal, sys, time
out = os.environ["FAKE_OUT"]
def dump(extra):
    with open(out, "w") as fh:
        json.dump({{"argv": sys.argv, "pid": os.getpid(), "env": {{k: os.environ.get(k) for k in ("FOO", "HF_HOME", "KEEP")}}, **extra}}, fh)
if os.environ.get("FAKE_WAIT"):
    def on_term(signum, frame):
        dump({{"signal": signum}})
        sys.exit(42)
    signal.signal(signal.SIGTERM, on_term)
    dump({{"ready": True}})
    while True:
        time.sleep(0.05)
dump({{}})
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


def engine_config(tmp_path: Path, args: list[str], *, worker_args: list[str] | None = None, command=("fake-engine", "serve")) -> str:
    doc = {
        "engine": "vllm", "engineVersion": "0.33.0", "command": list(command), "args": args,
        "env": {"FOO": "from-engine-config", "HF_HOME": "/var/cache/huggingface"},
        "port": 8000, "healthPath": "/health", "metricsPath": "/metrics",
        "target": {"model": "Qwen/Qwen3.6-27B"}, "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"},
        "speculation": {"method": "dflash", "blockSize": 16, "numSpeculativeTokens": 15, "layerTypes": [],
                        "targetLayerIds": [1]},
        "gpuProfile": "b300", "tensorParallelSize": 1, "nodes": 2 if worker_args else 1,
    }
    if worker_args is not None:
        doc["workerArgs"] = worker_args
    p = tmp_path / "engine-config.json"
    p.write_text(json.dumps(doc))
    return str(p)


def fake_env(tmp_path: Path, **extra) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "fake-engine"
    exe.write_text(FAKE_ENGINE.format(python=sys.executable))
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_OUT": str(tmp_path / "out.json"),
            "FOO": "inherited", "KEEP": "kept", **extra}


def test_exec_argv_verbatim_env_merged_exit_code(tmp_path):
    tricky = ["Qwen/Qwen3.6-27B", "--speculative-config", '{"method":"dflash","num_speculative_tokens":15}',
              "--x", "a b; echo pwned > /tmp/never", "$(HOME)", "$$(HOME)", "*"]
    ec = engine_config(tmp_path, tricky)
    env = fake_env(tmp_path, FAKE_EXIT="7")
    proc = subprocess.Popen([RUNTIME, "launch", "--engine-config", ec], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    got = json.loads((tmp_path / "out.json").read_text())
    # exec, not a child: the engine has the launcher's PID
    assert got["pid"] == proc.pid
    assert got["argv"][1:] == ["serve", *tricky[:-3], os.environ["HOME"], "$(HOME)", "*"]
    assert got["env"] == {"FOO": "from-engine-config", "HF_HOME": "/var/cache/huggingface", "KEEP": "kept"}


def test_sigterm_reaches_the_engine(tmp_path):
    ec = engine_config(tmp_path, ["model"])
    env = fake_env(tmp_path, FAKE_WAIT="1")
    proc = subprocess.Popen([RUNTIME, "launch", "--engine-config", ec], env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "out.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists():
            try:
                if json.loads(out.read_text()).get("ready"):
                    break
            except ValueError:
                pass
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError("the fake engine never started")
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 42
    assert json.loads(out.read_text())["signal"] == signal.SIGTERM


def test_worker_role_and_kubelet_vars(tmp_path):
    leader = ["m", "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    ec = engine_config(tmp_path, leader, worker_args=leader + ["--headless"])
    env = fake_env(tmp_path, LWS_WORKER_INDEX="1", LWS_LEADER_ADDRESS="qwen36-0.qwen36")
    p = run_runtime("launch", "--engine-config", ec, env=env)
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["argv"][2:] == ["m", "--node-rank", "1", "--master-addr", "qwen36-0.qwen36", "--headless"]
    p = run_runtime("launch", "--engine-config", ec, "--dry-run", env={**env, "LWS_WORKER_INDEX": "0"})
    assert p.returncode == 0 and "--headless" not in p.stdout and "--node-rank 0" in p.stdout
    assert p.stdout.startswith("FOO=from-engine-config HF_HOME=/var/cache/huggingface fake-engine serve m")


def test_engine_not_found(tmp_path):
    ec = engine_config(tmp_path, ["m"], command=("no-such-engine-binary",))
    p = run_runtime("launch", "--engine-config", ec)
    assert p.returncode == 127
    assert "not found on PATH" in p.stderr and "Traceback" not in p.stderr


def test_launch_missing_engine_config():
    p = run_runtime("launch", "--engine-config", "/nonexistent/engine-config.json")
    assert p.returncode != 0 and "not found" in p.stderr and "Traceback" not in p.stderr
