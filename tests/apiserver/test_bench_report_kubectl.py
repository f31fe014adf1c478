"""`specdeploy bench report NAME -n NS`: the benchmark and its results ConfigMap read through real kubectl
from the stand-in API server (the SpeculativeBenchmark CRD installed, status written as the operator does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from apiserver_helpers import server, kubeconfig, kubectl  # noqa: F401  (fixtures)
from apiserver_helpers import KUBECTL

from specdeploy.core.bench import reco as benchreco

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "specdeploy.io_speculativebenchmarks.yaml"
RESULTS = ROOT / "tests" / "fixtures" / "bench" / "tiny-sweep-results.json"

BENCH = """
apiVersion: specdeploy.io/v1alpha1
kind: SpeculativeBenchmark
metadata: {name: tiny-sweep, namespace: default}
spec:
  deploymentRef: {name: tiny}
  matrix: {speculativeTokens: [3], contexts: [64, 256], concurrency: [1, 4], promptsPerPoint: 4, maxOutputTokens: 32}
"""


def report(kubeconfig: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path),
           "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "specdeploy.cli", "bench", "report", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=ROOT)


def test_report_reads_status_and_configmap_through_kubectl(kubectl, kubeconfig, tmp_path):
    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/speculativebenchmarks.specdeploy.io", "--timeout=10s")

    p = report(kubeconfig, tmp_path, "tiny-sweep", "-n", "default", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "no SpeculativeBenchmark tiny-sweep in namespace default" in p.stderr, p.stderr

    kubectl("apply", "-f", "-", stdin=BENCH)
    kubectl("patch", "specbench", "tiny-sweep", "--subresource", "status", "--type", "merge",
            "-p", json.dumps({"status": {"phase": "Running", "progress": "1/2"}}))
    p = report(kubeconfig, tmp_path, "tiny-sweep", "-n", "default", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "has no results ConfigMap tiny-sweep-results yet (phase Running, progress 1/2)" \
        in p.stderr, p.stderr
    assert "Traceback" not in p.stderr

    # what the operator writes when the benchmark completes (controller/benchmark.py _finish)
    doc = json.loads(RESULTS.read_text())
    order = [v["variant"] for v in doc["variants"]]
    points = [{**pt, "variant": v["variant"]} for v in doc["variants"] for pt in v["points"]]
    eq = benchreco.equal_to_baseline(points)
    for pt in points:
        pt["equalToBaseline"] = eq.get(pt["id"])
    reco = benchreco.recommend(points, order)
    full = {"benchmark": "tiny-sweep", "deployment": "tiny", "variants": [{"name": v} for v in order],
            "clients": {v["variant"]: {"client": v["client"], "clientVersion": v["clientVersion"]} for v in doc["variants"]},
            "points": points, "recommendation": reco}
    (tmp_path / "results.json").write_text(json.dumps(full, indent=1, sort_keys=True))
    kubectl("create", "configmap", "tiny-sweep-results", "-n", "default",
            f"--from-file=results.json={tmp_path / 'results.json'}")
    kubectl("patch", "specbench", "tiny-sweep", "--subresource", "status", "--type", "merge", "-p", json.dumps(
        {"status": {"phase": "Complete", "progress": "2/2", "resultsConfigMap": "tiny-sweep-results",
                    "recommendation": reco}}))
    out = tmp_path / "report"
    p = report(kubeconfig, tmp_path, "tiny-sweep", "-n", "default", "--out", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["VARIANT", "CONTEXT", "CONC"]
    assert any(line.split()[:3] == ["k3", "256", "4"] and line.split()[-1] == "yes" for line in lines)
    assert f"recommendation: {reco['summary']}" in p.stdout
    for f in ("tokens_per_s.png", "tau.png", "tokens_per_s.svg", "tau.svg", "report.html"):
        assert (out / f).stat().st_size > 1000, f
    assert "acceptance length (tau)" in (out / "report.html").read_text()

    # -o json: the same, as a document
    p = report(kubeconfig, tmp_path, "tiny-sweep", "-n", "default", "--out", str(out), "-o", "json")
    got = json.loads(p.stdout)
    assert p.returncode == 0 and got["recommendation"]["summary"] == reco["summary"] and len(got["points"]) == 8
