"""Every name kubectl resolves for the two kinds (plural, singular, short names) works with get, explain, describe
and edit against the embedded cluster; the category `speculative` lists both kinds; the default columns show
the Ready condition's reason (STATUS)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from specdeploy.api.crd import CATEGORY, build_bench_crd, build_crd
from specdeploy_dev.harness import ROOT, Cluster, kubectl_available

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")
EXAMPLE = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
BENCH = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark",
         "metadata": {"name": "sweep", "namespace": "default"},
         "spec": {"deploymentRef": {"name": "qwen36-27b"},
                  "matrix": {"speculativeTokens": [3], "contexts": [32], "concurrency": [1]},
                  "prompts": {"generated": {"seed": 0}}}}


def _names(crd: dict) -> list[str]:
    n = crd["spec"]["names"]
    return [n["plural"], n["singular"], *n["shortNames"]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(workdir=tmp_path_factory.mktemp("names")) as c:
        c.apply_crds()
        c.kubectl("apply", "-k", str(EXAMPLE))
        c.kubectl("apply", "-f", "-", input=json.dumps(BENCH))
        yield c


@pytest.mark.parametrize("crd, obj", [(build_crd(), "qwen36-27b"), (build_bench_crd(), "sweep")],
                         ids=["SpeculativeDeployment", "SpeculativeBenchmark"])
def test_every_name_works_with_get_explain_describe_edit(cluster, crd, obj):
    kind = crd["spec"]["names"]["kind"]
    env_editor = {"EDITOR": "true", "KUBE_EDITOR": "true"}
    for name in _names(crd):
        got = cluster.kubectl("get", name, obj, "-o", "json")
        assert json.loads(got.stdout)["kind"] == kind, name
        assert f"KIND:       {kind}" in cluster.kubectl("explain", f"{name}.spec").stdout, name
        assert f"Kind:         {kind}" in cluster.kubectl("describe", name, obj).stdout, name
        p = _kubectl_env(cluster, env_editor, "edit", name, obj)
        assert p.returncode == 0 and "Edit cancelled, no changes made." in p.stdout + p.stderr, (name, p.stderr)


def _kubectl_env(cluster: Cluster, extra: dict, *args: str):
    return subprocess.run(["kubectl", *args], env={**os.environ, **cluster.env(), **extra}, capture_output=True,
                          text=True, timeout=60)


def test_the_category_lists_both_kinds_and_shadows_no_name(cluster):
    out = cluster.kubectl("get", CATEGORY, "-o", "json").stdout
    assert sorted(i["kind"] for i in json.loads(out)["items"]) == ["SpeculativeBenchmark", "SpeculativeDeployment"]
    assert CATEGORY not in _names(build_crd()) + _names(build_bench_crd())


def test_status_column_is_the_ready_reason(cluster):
    # READY is ready/desired replicas (status.ready, written by the operator: issue 27), STATUS the Ready reason
    status = {"status": {"ready": "1/2", "replicas": 2, "readyReplicas": 1,
                         "conditions": [{"type": "Ready", "status": "False", "reason": "ReplicasNotReady",
                                         "message": "1/2 replicas ready", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}
    cluster.kubectl("patch", "specdeploy", "qwen36-27b", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    header, row = cluster.kubectl("get", "specdeploy", "qwen36-27b").stdout.splitlines()[:2]
    cols = dict(zip(header.split(), row.split()))
    assert cols["READY"] == "1/2" and cols["STATUS"] == "ReplicasNotReady", (header, row)
    header, row = cluster.kubectl("get", "specdeploy", "qwen36-27b", "-o", "wide").stdout.splitlines()[:2]
    at = header.index("REPLICAS")  # by position: empty columns (ACCEPTLEN) shift a split
    assert row[at:].split()[0] == "2", (header, row)


def test_benchmark_status_column_is_the_running_reason(cluster):
    status = {"status": {"phase": "Failed", "progress": "0/2",
                         "conditions": [{"type": "Failed", "status": "True", "reason": "ClientFailed", "message": "boom",
                                         "lastTransitionTime": "2026-12-01T00:00:00Z"},
                                        {"type": "Running", "status": "False", "reason": "ClientFailed", "message": "boom",
                                         "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}
    cluster.kubectl("patch", "specbench", "sweep", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    header, row = cluster.kubectl("get", "specbench", "sweep").stdout.splitlines()[:2]
    col = lambda name: row[header.index(name):].split()[0]  # noqa: E731 - by position: BEST is empty here
    assert (col("PHASE"), col("STATUS"), col("PROGRESS")) == ("Failed", "ClientFailed", "0/2"), (header, row)
