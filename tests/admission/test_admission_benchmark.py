"""Admission of SpeculativeBenchmark: the validating webhook refuses a bad spec in the operator's words;
the mutating webhook admits benchmarks unchanged; the chart routes benchmarks to the webhooks."""

from __future__ import annotations

import copy

import yaml

from admission_helpers import EXAMPLES, review_request
from specdeploy.controller.admission import review

BENCH = yaml.safe_load((EXAMPLES / "dev" / "tiny-benchmark.yaml").read_text())
BENCH["metadata"]["namespace"] = "default"
GVK = {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeBenchmark"}
GVR = {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativebenchmarks"}


def bench_review(obj, **kw) -> dict:
    body = review_request(obj, **kw)
    body["request"]["kind"], body["request"]["resource"] = dict(GVK), dict(GVR)
    return body


def test_a_valid_benchmark_is_admitted_and_never_mutated():
    assert review(bench_review(BENCH))["response"]["allowed"] is True
    resp = review(bench_review(BENCH), webhook="mutate")["response"]
    assert resp["allowed"] is True and "patch" not in resp


def test_a_bad_benchmark_is_refused_naming_the_fields():
    bad = copy.deepcopy(BENCH)
    bad["spec"]["matrix"]["draftWindow"] = ["on"]
    resp = review(bench_review(bad))["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    msg = resp["status"]["message"]
    assert msg.startswith("SpeculativeBenchmark default/tiny-sweep is invalid")
    assert "spec.matrix.draftWindow[0]: must be a positive number of tokens or 'off'" in msg
    assert resp["status"]["details"]["kind"] == "SpeculativeBenchmark"
    dup = copy.deepcopy(BENCH)
    dup["spec"]["matrix"]["concurrency"] = [1, 1]
    resp = review(bench_review(dup))["response"]
    assert resp["allowed"] is False and "concurrency lists a value twice: list each value once" in resp["status"]["message"]


def test_status_updates_deletes_and_unchanged_specs_pass():
    bad = copy.deepcopy(BENCH)
    bad["spec"]["matrix"]["concurrency"] = [0]
    assert review(bench_review(bad, sub_resource="status", operation="UPDATE", old=bad))["response"]["allowed"] is True
    assert review(bench_review(None, operation="DELETE", old=bad))["response"]["allowed"] is True
    resp = review(bench_review(bad, operation="UPDATE", old=copy.deepcopy(bad)))["response"]
    assert resp["allowed"] is True and "spec unchanged by this update" in resp["warnings"][0]


def test_other_kinds_are_still_refused_as_misrouted():
    body = bench_review(BENCH)
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    resp = review(body)["response"]
    assert resp["allowed"] is False and "SpeculativeBenchmark only" in resp["status"]["message"]
