"""SpeculativeBenchmark on the embedded cluster: the real operator (`kopf run`), the dev kubelet
running the variant pods and the client Jobs as local processes, the engine stand-in as `vllm serve`.

The scene is ``specdeploy_dev.realloop.RealLoop`` (tiny models on the hub stand-in, the embedded API
server, the operator, the dev kubelet) with two stand-ins in place of the heavy parts:
- ``vllm`` is the engine stand-in's ``--as-vllm`` mode (``specdeploy_dev.engine_standin``): it reads
  the rendered ``vllm serve`` command line (``--speculative-config``'s num_speculative_tokens, or
  none for the baseline), serves /health, vLLM's real /metrics counters and a deterministic greedy
  /v1/completions;
- ``specdeploy-runtime bench-client`` is ``specdeploy_dev.bench_client_standin`` until the real
  client is installed (every other ``specdeploy-runtime`` command, the preflight included, is real).
The client pod reaches the variant's Service by its cluster DNS name through the dev kubelet's
``--service-proxy``.

Checks: ``kubectl apply`` -> Running -> Complete; the variant Deployments are owned by the benchmark
and gone afterwards; the serving Deployment untouched; tau per point equals the stand-in's exact
per-step tau (from the counters' increase); every speculative point's greedy outputs equal the
baseline's; a recommendation and the results ConfigMap; printer columns; a second benchmark whose
speculative tokens exceed the drafter's block fails with a message naming the field.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specdeploy_dev.harness import BIN, wait_for
from specdeploy_dev.realloop import cpu_cr

NAME, DEP = "sweep", "tiny"


def _script(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def standins(work: Path) -> dict:
    """The scene's options: the engine stand-in as vllm, the bench-client stand-in as specdeploy-runtime."""
    vllm = _script(work / "vllm-standin", f"#!{sys.executable}\nimport sys\nfrom specdeploy_dev.engine_standin import "
                   "vllm_main\nsys.exit(vllm_main(sys.argv[1:]))\n")
    real = BIN / "specdeploy-runtime"
    runtime = _script(work / "specdeploy-runtime", f"#!{sys.executable}\nimport os, sys\n"
                      "if sys.argv[1:2] == ['bench-client'] and os.environ.get('SPECDEPLOY_TEST_REAL_CLIENT') != '1':\n"
                      "    from specdeploy_dev.bench_client_standin import main\n    sys.exit(main(sys.argv[1:]))\n"
                      f"os.execv({str(real)!r}, [{str(real)!r}] + sys.argv[1:])\n")
    return {"vllm": vllm, "kubelet_args": ["--service-proxy", "--exec", f"specdeploy-runtime={runtime}"]}


# the loop fixture (e2e/conftest.py) starts the scene once for the module; its dev kubelet puts pods on loopback
# addresses with fixed ports, so the module runs in the serial pass, on its worker's own addresses (conftest.py)
pytestmark = [pytest.mark.real_loop(standins, prometheus=False, operator_env={"SPECDEPLOY_BENCH_POLL_SECONDS": "1"}),
              pytest.mark.serial]


def bench(name: str, **matrix) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "metadata": {"name": name},
            "spec": {"deploymentRef": {"name": DEP},
                     "matrix": {"speculativeTokens": [3], "contexts": [16], "concurrency": [1, 2],
                                "promptsPerPoint": 4, "maxOutputTokens": 16, **matrix}}}


def phase(loop, name):
    return (loop.get("specbench", name).get("status") or {}).get("phase")


def test_benchmark_completes_with_a_recommendation(loop):
    loop.apply(cpu_cr(DEP, "tiny/target-flat", "tiny/dflash-accept-all"))
    loop.ready_pod(DEP)
    serving = loop.get("deployment", DEP)
    t0 = time.monotonic()
    loop.apply(bench(NAME))
    seen: set = set()
    variants: dict = {}

    def done():
        st = loop.get("specbench", NAME).get("status") or {}
        seen.add(st.get("phase"))
        for d in loop.get("deployments", "-l", f"specdeploy.io/benchmark={NAME}")["items"]:
            seen.add(d["metadata"]["name"])
            variants[d["metadata"]["name"]] = (d["metadata"]["ownerReferences"][0]["kind"],
                                               d["metadata"]["labels"]["app.kubernetes.io/component"])
        return st if st.get("phase") in ("Complete", "Failed") else None

    st = wait_for(done, 600, "the SpeculativeBenchmark to finish", interval=0.5)
    assert st["phase"] == "Complete", st
    print(f"benchmark complete in {time.monotonic() - t0:.1f}s")
    assert "Running" in seen and {"sweep-baseline", "sweep-k3"} <= seen
    assert set(variants.values()) == {("SpeculativeBenchmark", "benchmark-engine")}
    assert st["progress"] == "2/2" and st["variants"] == ["baseline", "k3"]
    assert st["resultsConfigMap"] == f"{NAME}-results"
    cond = next(c for c in st["conditions"] if c["type"] == "Complete")
    assert cond["status"] == "True" and cond["reason"] == "Measured" and cond["message"] == st["recommendation"]["summary"]
    pts = {(p["variant"], p["concurrency"]): p for p in st["points"]}
    assert set(pts) == {("baseline", 1), ("baseline", 2), ("k3", 1), ("k3", 2)}
    # tau from the counters' increase over each point: the stand-in's healthy mode, k=3: 1 + 75 + 56 + 42 per 100 drafts
    for n in (1, 2):
        assert pts[("k3", n)]["tau"] == 2.73 and pts[("k3", n)]["equalToBaseline"] is True
        assert "tau" not in pts[("baseline", n)]
        assert pts[("k3", n)]["outputTokensPerSecond"] > 0 and pts[("baseline", n)]["failed"] == 0
    reco = st["recommendation"]
    assert [(b["context"], b["concurrency"]) for b in reco["bands"]] == [(16, 1), (16, 2)]
    assert all(b["best"] in ("baseline", "k3") and b["baselineTokensPerSecond"] > 0 for b in reco["bands"])
    assert reco["excluded"] == [] and reco["crossover"][0]["context"] == 16

    cm = loop.get("configmap", f"{NAME}-results")
    assert cm["metadata"]["ownerReferences"][0]["name"] == NAME
    full = json.loads(cm["data"]["results.json"])
    assert full["benchmark"] == NAME and full["deployment"] == DEP
    assert full["recommendation"]["bands"] == reco["bands"] and full["recommendation"]["summary"] == reco["summary"]
    assert {p["id"] for p in full["points"]} == {"baseline/c16/n1", "baseline/c16/n2", "k3/c16/n1", "k3/c16/n2"}
    k3 = next(p for p in full["points"] if p["id"] == "k3/c16/n1")
    assert k3["acceptance"]["perPosition"] == [0.75, 0.56, 0.42] and len(k3["outputDigests"]) == 4
    assert full["variantSettings"] == [{"name": "baseline", "speculation": False},
                                {"name": "k3", "speculation": True, "method": "dflash", "speculativeTokens": 3}]

    # nothing of the variants is left running; the serving Deployment was never touched
    wait_for(lambda: not loop.get("deployments", "-l", f"specdeploy.io/benchmark={NAME}")["items"], 60,
             "the variant Deployments to be deleted")
    assert not loop.get("jobs", "-l", f"specdeploy.io/benchmark={NAME}")["items"]
    after = loop.get("deployment", DEP)
    assert after["metadata"]["generation"] == serving["metadata"]["generation"]
    assert after["spec"]["template"] == serving["spec"]["template"]

    # `specdeploy bench report NAME` reads the benchmark and its results ConfigMap with kubectl and writes the plots
    out_dir = loop.workdir / "report"
    rep = subprocess.run([str(BIN / "specdeploy"), "bench", "report", NAME, "-n", loop.namespace, "--out", str(out_dir)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "KUBECONFIG": loop.cluster.kubeconfig})
    assert rep.returncode == 0, rep.stderr
    assert "k3" in rep.stdout and "baseline" in rep.stdout, rep.stdout
    png = (out_dir / "tokens_per_s.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") >= 400  # width in the IHDR chunk
    svg = (out_dir / "tokens_per_s.svg").read_text()
    assert "concurrency" in svg.lower() and "tokens/s" in svg.lower()
    assert (out_dir / "report.html").stat().st_size > 1000

    out = loop.cluster.kubectl("get", "specbench", NAME).stdout
    header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    assert header[:5] == ["NAME", "DEPLOYMENT", "PHASE", "PROGRESS", "BEST"] and row[:4] == [NAME, DEP, "Complete", "2/2"]
    # issue 27: STATUS is the Running condition's reason; Events followed the run
    assert header[5] == "STATUS" and row[5] == "Measured", out
    items = loop.cluster.get_json("events", "-n", loop.namespace).get("items") or []
    reasons = [e["reason"] for e in items if (e.get("involvedObject") or {}).get("kind") == "SpeculativeBenchmark"
               and e["involvedObject"].get("name") == NAME]
    assert {"VariantStarting", "ClientStarted", "VariantMeasured", "Measured"} <= set(reasons), reasons


def test_an_operator_restart_mid_variant_continues_where_it_was(loop):
    """The operator stops while the baseline's client Job runs and starts again: the same variant
    Deployment and the same Job are waited for (never created twice), and the benchmark completes."""
    name = "restart"
    loop.apply(bench(name, concurrency=[1], promptsPerPoint=8, maxOutputTokens=200))
    job = f"{name}-baseline-client"
    seen: dict[str, set] = {"job": set(), "deployment": set()}

    def watch(until):
        def check():
            for j in loop.get("jobs", "-l", f"specdeploy.io/benchmark={name}")["items"]:
                if j["metadata"]["name"] == job:
                    seen["job"].add(j["metadata"]["uid"])
            for d in loop.get("deployments", "-l", f"specdeploy.io/benchmark={name}")["items"]:
                if d["metadata"]["name"] == f"{name}-baseline":
                    seen["deployment"].add(d["metadata"]["uid"])
            return until()
        return check

    def client_running():
        st = loop.get("specbench", name).get("status") or {}
        return st.get("current") == "baseline: client running" and seen["job"]

    wait_for(watch(client_running), 300, "the baseline's client Job to run", interval=0.3)
    c = loop.cluster
    c.stop_operator()
    c.start_operator(resync_seconds=30, extra_env={"HF_ENDPOINT": str(loop.hub), "SPECDEPLOY_WEBHOOK_PORT": "0",
                                                   "SPECDEPLOY_ACCEPTANCE_INTERVAL": f"{loop.interval:g}",
                                                   **loop.operator_env})

    def finished():
        st = loop.get("specbench", name).get("status") or {}
        return st if st.get("phase") in ("Complete", "Failed") else None

    st = wait_for(watch(finished), 600, "the benchmark to finish after the restart", interval=0.3)
    assert st["phase"] == "Complete", st
    assert len(seen["job"]) == 1 and len(seen["deployment"]) == 1, seen
    assert [p["variant"] for p in st["points"]] == ["baseline", "k3"]


def test_a_deleted_benchmark_leaves_nothing_without_an_operator(loop):
    """Issue 27 (clean uninstall): every temporary object of a running benchmark (the variant's engine
    Deployment, Service and ConfigMap, the client plan ConfigMap and Job, the results ConfigMap) is owned by the
    SpeculativeBenchmark, so deleting it removes them by garbage collection alone: here with no operator
    running, as after `helm uninstall` (the CRDs are kept, so benchmarks and their children stay until deleted)."""
    name = "orphan"
    loop.apply(bench(name, concurrency=[1], promptsPerPoint=8, maxOutputTokens=200))
    sel = f"specdeploy.io/benchmark={name}"
    kinds = ("deployments", "services", "configmaps", "jobs")

    def mine() -> dict[str, list[str]]:
        return {k: sorted(o["metadata"]["name"] for o in loop.get(k, "-l", sel)["items"]) for k in kinds}

    wait_for(lambda: (loop.get("specbench", name).get("status") or {}).get("current") == "baseline: client running"
             and mine()["jobs"], 300, "the baseline's client Job to run", interval=0.3)
    c = loop.cluster
    c.stop_operator()
    try:
        before = mine()
        assert before["deployments"] == [f"{name}-baseline"] and before["jobs"] == [f"{name}-baseline-client"], before
        assert f"{name}-baseline-plan" in before["configmaps"] and f"{name}-baseline-engine" in before["configmaps"]
        for k in kinds:
            for o in loop.get(k, "-l", sel)["items"]:
                refs = o["metadata"].get("ownerReferences") or []
                assert [(r["kind"], r["name"], r.get("controller")) for r in refs] == \
                    [("SpeculativeBenchmark", name, True)], (k, o["metadata"]["name"], refs)
        c.kubectl("delete", "specbench", name, "-n", loop.namespace, "--wait=false")
        wait_for(lambda: not any(mine().values()), 60, "garbage collection of the benchmark's objects")
        print(f"left after deleting the benchmark with no operator: {mine()} (before: {before})")
    finally:
        c.start_operator(resync_seconds=30, extra_env={"HF_ENDPOINT": str(loop.hub), "SPECDEPLOY_WEBHOOK_PORT": "0",
                                                       "SPECDEPLOY_ACCEPTANCE_INTERVAL": f"{loop.interval:g}",
                                                       **loop.operator_env})


def test_too_many_speculative_tokens_fail_with_the_field(loop):
    loop.apply(bench("toolong", speculativeTokens=[9]))  # the tiny drafter's block size is 4
    st = wait_for(lambda: (s := loop.get("specbench", "toolong").get("status") or {}).get("phase") == "Failed" and s,
                  120, "the benchmark to fail")
    cond = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert cond["reason"] == "InvalidMatrix"
    assert "spec.matrix.speculativeTokens[0]" in cond["message"] and "at most block size - 1 = 3" in cond["message"]
    assert not loop.get("deployments", "-l", "specdeploy.io/benchmark=toolong")["items"]


def test_spec_is_immutable(loop):
    p = loop.cluster.kubectl("patch", "specbench", "toolong", "--type=merge", "-p",
                             json.dumps({"spec": {"matrix": {"contexts": [32]}}}), check=False)
    assert p.returncode != 0 and "spec is immutable" in p.stderr
