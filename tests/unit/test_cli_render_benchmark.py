"""`specdeploy render` of a SpeculativeBenchmark (issue 37): the tenancy policy on the deployment it measures and on
each method drafter first (exit 1 with the codes), then every object the operator would create; exit 2 for unusable
input. Real processes, as a user runs them."""

from __future__ import annotations

import json

import pytest
import yaml

from testkit import EXAMPLES, run_cli

EXAMPLE = EXAMPLES / "qwen3.6-27b-b300-vllm"
CONFIGS = ("--drafter-config", str(EXAMPLE / "drafter.config.json"), "--target-config", str(EXAMPLE / "target.config.json"))
DEP = yaml.safe_load((EXAMPLE / "speculativedeployment.yaml").read_text())


def bench(methods=None) -> dict:
    b = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark", "metadata": {"name": "sweep"},
         "spec": {"deploymentRef": {"name": DEP["metadata"]["name"]},
                  "matrix": {"speculativeTokens": [3], "contexts": [64], "concurrency": [1]}}}
    if methods is not None:
        b["spec"]["matrix"]["methods"] = methods
    return b


def write(tmp_path, name: str, *docs: dict) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump_all(docs))
    return str(p)


def codes(stderr: str) -> list[tuple[str, str]]:
    """(code, path) of each finding line: 'error   CODE  [spec] PATH'."""
    return [(ln.split()[1], ln.split("] ", 1)[1]) for ln in stderr.splitlines() if ln.startswith("error ")]


def test_a_benchmark_renders_every_variant_and_client_job(tmp_path):
    f = write(tmp_path, "bench.yaml", bench([{"method": "ngram"}]))
    p = run_cli("render", "-f", f, "--deployment", str(EXAMPLE / "speculativedeployment.yaml"), *CONFIGS, "-o", "json")
    assert p.returncode == 0, p.stderr
    items = json.loads(p.stdout)["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in items] == [
        (k, f"sweep-{v}{s}") for v in ("baseline", "k3", "ngram")
        for k, s in (("ConfigMap", "-engine"), ("Deployment", ""), ("Service", ""), ("ConfigMap", "-plan"),
                     ("Job", "-client"))]
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in items if o["kind"] in ("Deployment", "Job")}
    assert all(pod["automountServiceAccountToken"] is False for pod in pods.values())
    [pre] = [c for c in pods["sweep-baseline"]["initContainers"] if c["name"] == "preflight"]
    assert "--no-speculation" in pre["args"]  # the baseline is preflighted too (target only)


def test_a_method_drafter_or_a_deployment_the_policy_refuses_exits_1_with_the_codes(tmp_path):
    methods = [{"method": "eagle3", "drafter": {"model": "z/d", "tokenSecretRef": {"name": "prod-db"}}},
               {"method": "eagle3", "drafter": {"model": "d", "pvc": {"claimName": "other-team"}}},
               {"method": "eagle3", "drafter": {"model": "z/d", "tokenSecretRef": {"name": "hf-token", "key": "aws"}}}]
    evil = json.loads(json.dumps(DEP))
    evil["spec"]["engine"]["image"] = "evil.io/miner:1"
    evil["spec"]["engine"]["extraArgs"] = ["--worker-cls", "evil.Worker"]
    evil["spec"].setdefault("pod", {})["priorityClassName"] = "system-node-critical"
    # the deployment in the same file (no --deployment)
    f = write(tmp_path, "bench.yaml", bench(methods), evil)
    p = run_cli("render", "-f", f, *CONFIGS, "--allowed-token-secret", "hf-token")
    assert p.returncode == 1 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert "sweep: refused by the tenancy policy; nothing rendered" in p.stderr
    name = DEP["metadata"]["name"]
    assert codes(p.stderr) == [
        ("PolicyImageNotAllowed", f"SpeculativeDeployment {name} spec.engine.image"),
        ("PolicyCodeArgNotAllowed", f"SpeculativeDeployment {name} spec.engine.extraArgs[0]"),
        ("PolicyPriorityClassNotAllowed", f"SpeculativeDeployment {name} spec.pod.priorityClassName"),
        ("PolicyTokenSecretNotAllowed", "spec.matrix.methods[0].drafter.tokenSecretRef.name"),
        ("PolicyClaimNotAllowed", "spec.matrix.methods[1].drafter.pvc.claimName"),
        ("PolicyTokenSecretKeyNotAllowed", "spec.matrix.methods[2].drafter.tokenSecretRef.key")]
    # -o json: the report on stdout too; the same flags the chart passes make it render (configs given)
    f = write(tmp_path, "bench2.yaml", bench(methods[:1]))
    dep = ("--deployment", str(EXAMPLE / "speculativedeployment.yaml"))
    p = run_cli("render", "-f", f, *dep, *CONFIGS, "-o", "json")
    assert p.returncode == 1 and json.loads(p.stdout)["findings"][0]["code"] == "PolicyTokenSecretNotAllowed"
    p = run_cli("render", "-f", f, *dep, *CONFIGS, "--allowed-token-secret", "prod-db", "--method-drafter-config",
                f"eagle3={tmp_path / 'eagle.json'}")
    assert p.returncode == 2 and "eagle.json" in p.stderr  # listed now: the policy passed, the config is read


@pytest.mark.parametrize("args,needle", [
    ((), "must hold that SpeculativeDeployment"),
    (("--deployment", str(EXAMPLE / "speculativedeployment.yaml"), *CONFIGS, "--method-drafter-config", "eagle3"),
     "expected VARIANT=FILE"),
    (("--deployment", str(EXAMPLE / "speculativedeployment.yaml"), *CONFIGS), "pass --method-drafter-config eagle3=FILE"),
], ids=["no-deployment", "bad-method-config", "method-config-missing"])
def test_unusable_input_exits_2(tmp_path, args, needle):
    f = write(tmp_path, "bench.yaml", bench([{"method": "eagle3", "drafter": {"model": "z/d"}}]))
    p = run_cli("render", "-f", f, *args)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
