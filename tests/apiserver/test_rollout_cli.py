"""`specdeploy rollout status|promote|abort|retry NAME` against the stand-in API server: the real
SpeculativeDeployment CRD installed, status.rollout written through the status subresource as the
reconciler writes it (ROLLOUT.md's shape), the command run as a process with a kubeconfig."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apiserver_helpers import server, kubeconfig, kubectl  # noqa: F401  (fixtures)

from specdeploy.cli import rollout as RC
from specdeploy.core.names import ROLLOUT, ROLLOUT_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "specdeploy.io_speculativedeployments.yaml"
EXAMPLE = ROOT / "examples" / "qwen3-8b-ngram-vllm" / "speculativedeployment.yaml"
NAME = "qwen3-8b-ngram"
STABLE, CANARY = "3f2a1b4c5d6e7f80", "9b1c2d3e4f506172"
T0 = "2026-12-01T19:00:00Z"

ANALYSIS = [
    {"track": "stable", "revision": STABLE, "pods": 2, "drafts": 1843, "tau": 3.72, "tokensPerSecondPerRequest": 11.2,
     "requests": 40, "failedRequests": 0, "errorRate": 0.0},
    {"track": "canary", "revision": CANARY, "pods": 1, "drafts": 210, "tau": 1.45, "tokensPerSecondPerRequest": 6.5,
     "requests": 12, "failedRequests": 1, "errorRate": 1 / 12},
]


def crd_text() -> str:
    """The real CRD; where this branch's schema has no spec.rollout / status.rollout yet (the API helper's
    branch adds them), those two fields kept as they are instead of pruned."""
    doc = yaml.safe_load(CRD.read_text())
    for v in doc["spec"]["versions"]:
        props = v["schema"]["openAPIV3Schema"]["properties"]
        for top in ("spec", "status"):
            props[top]["properties"].setdefault("rollout", {"type": "object",
                                                            "x-kubernetes-preserve-unknown-fields": True})
    return yaml.safe_dump(doc)


def deployment(strategy: str | None, namespace: str = "default") -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    if strategy:
        doc["spec"]["rollout"] = {"strategy": strategy}
    return yaml.safe_dump(doc)


def condition(status: str, reason: str, message: str) -> dict:
    return {"type": ROLLOUT, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0,
            "observedGeneration": 1}


def write_status(kubectl, rollout: dict, cond: dict | None = None, namespace: str = "default") -> None:
    status = {"rollout": rollout}
    if cond:
        status["conditions"] = [cond]
    kubectl("patch", "specdeploy", NAME, "-n", namespace, "--subresource", "status", "--type", "merge",
            "-p", json.dumps({"status": status}))


def cli(kubeconfig: str | None, tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    flags = ["--kubeconfig", kubeconfig] if kubeconfig else []
    return subprocess.run([sys.executable, "-m", "specdeploy.cli", "rollout", *args, *flags], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "HOME": str(tmp_path), **(env or {})})


def annotation(kubectl, namespace: str = "default") -> str | None:
    obj = json.loads(kubectl("get", "specdeploy", NAME, "-n", namespace, "-o", "json").stdout)
    return (obj["metadata"].get("annotations") or {}).get(ROLLOUT_ANNOTATION)


@pytest.fixture
def crd(kubectl):
    kubectl("apply", "-f", "-", stdin=crd_text())
    kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdeploy.io", "--timeout=10s")


def test_errors_no_object_and_no_rollout(crd, kubectl, kubeconfig, tmp_path):
    p = cli(kubeconfig, tmp_path, "status", NAME, "-n", "default")
    assert p.returncode == 2 and f"no SpeculativeDeployment {NAME} in namespace default" in p.stderr, p.stderr
    p = cli(kubeconfig, tmp_path, "promote", NAME, "-o", "json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"]["command"] == "rollout promote"

    kubectl("apply", "-f", "-", stdin=deployment(None))
    for action in ("status", "promote", "abort", "retry"):
        p = cli(kubeconfig, tmp_path, action, NAME)
        assert p.returncode == 2, (action, p.stdout, p.stderr)
        assert (f"SpeculativeDeployment default/{NAME} has no canary rollout configured (spec.rollout.strategy is "
                "RollingUpdate): set spec.rollout.strategy: Canary") in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    assert annotation(kubectl) is None

    kubectl("apply", "-f", "-", stdin=deployment("Canary"))
    p = cli(kubeconfig, tmp_path, "promote", NAME)
    assert p.returncode == 2 and "nothing to promote" in p.stderr and "reports no rollout yet" in p.stderr, p.stderr
    p = cli(kubeconfig, tmp_path, "status", NAME)
    assert p.returncode == 0 and "Phase:" in p.stdout and "no rollout reported yet" in p.stdout, p.stdout


def test_status_prints_the_analysis_and_promote_sets_the_annotation(crd, kubectl, kubeconfig, tmp_path):
    kubectl("apply", "-f", "-", stdin=deployment("Canary"))
    write_status(kubectl, {"phase": "Analyzing", "stableRevision": STABLE, "canaryRevision": CANARY, "startedAt": T0,
                           "analysis": ANALYSIS, "probe": {"prompts": 4, "identical": 4, "message": "greedy outputs equal"}},
                 condition("Unknown", "Analyzing", "120/200 drafts, 2m0s of the 10m0s analysis window"))
    p = cli(kubeconfig, tmp_path, "status", NAME, "-n", "default")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert re.search(r"^Phase:\s+Analyzing$", out, re.M) and re.search(rf"^Stable:\s+{STABLE}$", out, re.M)
    assert re.search(rf"^Canary:\s+{CANARY}  \(started {T0}, ", out, re.M)
    assert re.search(r"^Refused:\s+-$", out, re.M)
    assert re.search(r"^Condition:\s+Rollout=Unknown Analyzing: 120/200 drafts, 2m0s of the 10m0s analysis window$", out, re.M)
    assert re.search(r"^Probe:\s+4/4 prompts identical: greedy outputs equal$", out, re.M)
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["TRACK", "REVISION", "PODS", "DRAFTS", "TAU", "TOKENS/S/REQ", "REQUESTS", "FAILED",
                                "ERROR", "RATE"]
    assert table[1].split() == ["stable", STABLE, "2", "1843", "3.72", "11.20", "40", "0", "0.00%"]
    assert table[2].split() == ["canary", CANARY, "1", "210", "1.45", "6.50", "12", "1", "8.33%"]
    # aligned: every column starts at the same offset on every line
    for header in ("REVISION", "TAU", "ERROR RATE"):
        col = table[0].index(header)
        assert all(line[col - 2:col] == "  " and line[col] != " " for line in table[1:]), (header, table)

    doc = json.loads(cli(kubeconfig, tmp_path, "status", NAME, "-o", "json").stdout)
    assert doc["ok"] and doc["strategy"] == "Canary" and doc["rollout"]["analysis"] == ANALYSIS
    assert doc["condition"]["reason"] == "Analyzing" and doc["pendingRequest"] is None

    p = cli(kubeconfig, tmp_path, "promote", NAME)
    assert p.returncode == 0, p.stderr
    value = annotation(kubectl)
    assert re.fullmatch(r"promote@\d{13}", value), value
    assert f"promote requested for SpeculativeDeployment default/{NAME}: canary {CANARY} (Analyzing)" in p.stdout
    assert f"set {ROLLOUT_ANNOTATION}={value}" in p.stdout
    # not acted on yet: status says so, and a second request replaces it with a new value
    assert re.search(rf"^Request:\s+{value} \(not acted on yet\)$", cli(kubeconfig, tmp_path, "status", NAME).stdout,
                     re.M)
    p = cli(kubeconfig, tmp_path, "abort", NAME, "-o", "json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["replaced"] == value and doc["action"] == "abort"
    assert doc["annotation"][ROLLOUT_ANNOTATION] == annotation(kubectl) != value
    assert annotation(kubectl).startswith("abort@")


def test_rolled_back_retry_only_and_stable_nothing_to_do(crd, kubectl, kubeconfig, tmp_path):
    kubectl("apply", "-f", "-", stdin=deployment("Canary"))
    message = "canary tau 1.45 vs stable 3.72: 0.39 < 0.90"
    write_status(kubectl, {"phase": "RolledBack", "stableRevision": STABLE, "refusedRevision": CANARY,
                           "decision": {"result": "Rollback", "reason": "AcceptanceBelowStable", "message": message,
                                        "at": "2026-12-01T19:12:00Z"},
                           "analysis": ANALYSIS, "requestHandled": "abort@1764620000000"},
                 condition("False", "AcceptanceBelowStable", message))
    out = cli(kubeconfig, tmp_path, "status", NAME).stdout
    assert re.search(r"^Decision:\s+Rollback AcceptanceBelowStable at 2026-12-01T19:12:00Z$", out, re.M), out
    assert re.search(rf"^Message:\s+{re.escape(message)}$", out, re.M)
    assert re.search(rf"^Refused:\s+{CANARY}$", out, re.M) and re.search(r"^Canary:\s+-$", out, re.M)
    for action in ("promote", "abort"):
        p = cli(kubeconfig, tmp_path, action, NAME)
        assert p.returncode == 2, p.stdout
        assert (f"nothing to {action}: SpeculativeDeployment default/{NAME} is in phase RolledBack (revision {CANARY} "
                f"was rolled back; `specdeploy rollout retry {NAME}` analyses it again)") in p.stderr, p.stderr
    assert annotation(kubectl) is None
    p = cli(kubeconfig, tmp_path, "retry", NAME)
    assert p.returncode == 0 and f"refused revision {CANARY}" in p.stdout, p.stderr
    assert annotation(kubectl).startswith("retry@")

    write_status(kubectl, {"phase": "Stable", "stableRevision": CANARY, "refusedRevision": None, "analysis": []},
                 condition("True", "Stable", "nothing pending"))
    for action, why in (("promote", "no canary under way"), ("abort", "no canary under way"),
                        ("retry", "no refused revision to analyse again")):
        p = cli(kubeconfig, tmp_path, action, NAME)
        assert p.returncode == 2 and f"nothing to {action}:" in p.stderr and why in p.stderr, p.stderr


def test_context_and_namespace_from_the_kubeconfig(crd, kubectl, kubeconfig, tmp_path):
    kubectl("create", "namespace", "team-a")
    kubectl("apply", "-f", "-", stdin=deployment("Canary", "team-a"))
    write_status(kubectl, {"phase": "Analyzing", "stableRevision": STABLE, "canaryRevision": CANARY,
                           "analysis": ANALYSIS}, namespace="team-a")
    kc = yaml.safe_load(Path(kubeconfig).read_text())
    team = {**kc["contexts"][0], "name": "team"}
    team["context"] = {**team["context"], "namespace": "team-a"}
    kc["contexts"].append(team)
    two = tmp_path / "two-contexts"
    two.write_text(yaml.safe_dump(kc))
    # the current context's namespace (default) has no such object; --context team's has
    p = cli(str(two), tmp_path, "status", NAME)
    assert p.returncode == 2 and f"no SpeculativeDeployment {NAME} in namespace default" in p.stderr, p.stderr
    p = cli(str(two), tmp_path, "status", NAME, "--context", "team")
    assert p.returncode == 0 and re.search(r"^Namespace:\s+team-a$", p.stdout, re.M), p.stderr
    # KUBECONFIG when no --kubeconfig; -n over the context's namespace
    p = cli(None, tmp_path, "promote", NAME, "-n", "team-a", env={"KUBECONFIG": str(two)})
    assert p.returncode == 0 and annotation(kubectl, "team-a").startswith("promote@"), p.stderr
    p = cli(str(two), tmp_path, "status", NAME, "--context", "nope")
    assert p.returncode == 2 and "context 'nope'" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_stale_object_is_not_patched(crd, kubectl, kubeconfig, tmp_path):
    """The patch carries the resourceVersion the checks read: a change in between is a conflict, not a blind write."""
    kubectl("apply", "-f", "-", stdin=deployment("Canary"))
    write_status(kubectl, {"phase": "Analyzing", "stableRevision": STABLE, "canaryRevision": CANARY})
    cluster = RC.Cluster(kubeconfig, None)
    stale = RC.get_deployment(cluster, "default", NAME)
    kubectl("annotate", "specdeploy", NAME, "team=inference")
    with pytest.raises(RC.RolloutError, match="changed while this command ran"):
        RC.patch_annotation(cluster, stale, "promote@1")
    assert annotation(kubectl) is None
    fresh = RC.get_deployment(cluster, "default", NAME)
    assert RC.patch_annotation(cluster, fresh, "promote@2")["metadata"]["annotations"][ROLLOUT_ANNOTATION] == "promote@2"


def test_unreachable_api_server(tmp_path):
    from specdeploy_dev import apiserver

    kc = apiserver.write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")  # discard port: nothing listens
    p = cli(kc, tmp_path, "status", NAME)
    assert p.returncode == 2 and "cannot reach the API server at http://127.0.0.1:9" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
