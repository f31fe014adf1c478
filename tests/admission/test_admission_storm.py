"""Issue 37, item 3: bounded work and a bounded answer per review, whatever the object (error storms capped).

A SpeculativeDeployment with thousands of refused values (unknown fields, values of the wrong type, thousands of
unknown engine flags, a deeply nested value) is refused with the first PROBLEMS_MAX problems and a line saying
more were left out; the answer's size is bounded, and the work is counted in calls (no timing): the schema
messages written and the flag look-ups made do not grow with the number of refused values."""

from __future__ import annotations

import copy
import json

import pytest

from admission_helpers import QWEN, example_cr, review_request
from specdeploy.api import validation
from specdeploy.controller import admission
from specdeploy.core import extraargs

ANSWER_MAX = 24 << 10  # bytes of the AdmissionReview answer (MESSAGE_MAX 16 KiB and 50 causes of <= 1 KiB... clipped)
N = 5000


def _deep(depth: int) -> object:
    v: object = "x"
    for _ in range(depth):
        v = [v]
    return v


STORMS = {
    "unknown fields": lambda s: s.update({f"field{i}": i for i in range(N)}),
    "wrong types": lambda s: s.setdefault("pod", {}).update(nodeSelector={f"k{i}": i for i in range(N)}),
    "unknown engine flags": lambda s: s["engine"].update(extraArgs=[f"--no-such-flag-{i}" for i in range(N)]),
    "invalid list items": lambda s: s.setdefault("pod", {}).update(
        tolerations=[{f"bad{j}": j for j in range(N // 32)} for _ in range(32)]),
    "deeply nested": lambda s: s.update({f"deep{i}": _deep(400) for i in range(50)}),
}


@pytest.fixture
def counted(monkeypatch):
    calls = {"schema_message": 0, "flag_lookups": 0}
    real_message, real_close = validation.schema_message, extraargs.difflib.get_close_matches

    def message(err):
        calls["schema_message"] += 1
        return real_message(err)

    def close(*a, **k):
        calls["flag_lookups"] += 1
        return real_close(*a, **k)

    monkeypatch.setattr(validation, "schema_message", message)
    monkeypatch.setattr(extraargs.difflib, "get_close_matches", close)
    return calls


@pytest.mark.parametrize("storm", sorted(STORMS))
def test_an_error_storm_gets_a_bounded_answer_for_bounded_work(storm, counted):
    cr = copy.deepcopy(example_cr(QWEN))
    STORMS[storm](cr["spec"])
    body = json.dumps(review_request(cr)).encode()
    doc = admission.review(body)
    r = doc["response"]
    assert r["allowed"] is False and r["status"]["code"] == 422, r
    size = len(json.dumps(doc))
    assert size <= ANSWER_MAX, (storm, size)
    causes = r["status"]["details"]["causes"]
    assert 1 <= len(causes) <= admission.PROBLEMS_MAX
    lines = r["status"]["message"].splitlines()
    assert len(lines) <= admission.PROBLEMS_MAX + 2
    if storm == "unknown engine flags":  # one finding code: at most 20 of it, then a count of the rest
        #                                   (core/findings per-code cap, the bounded-memory rule of the same issue)
        assert len(causes) <= 1 + 20 + 1, causes[-2:]
        assert causes[0]["message"] == "is too long: at most 128 items", causes[0]
    elif storm != "deeply nested":  # thousands refused: capped, and the answer says so
        assert len(causes) == admission.PROBLEMS_MAX
        assert "more" in lines[0] and "the first 50 are listed" in lines[0], lines[0]
        assert lines[-1].startswith("- ... and more"), lines[-1]
    # the work: schema messages for the listed problems only, and no more flag look-ups than extraArgs may hold
    assert counted["schema_message"] <= admission.PROBLEMS_MAX + 1, counted
    assert counted["flag_lookups"] <= 128, counted


def test_a_few_problems_are_all_listed_and_counted():
    cr = copy.deepcopy(example_cr(QWEN))
    cr["spec"].update({"a1": 1, "a2": 2, "a3": 3})
    r = admission.review(review_request(cr))["response"]
    assert r["status"]["message"].splitlines()[0].endswith("is invalid (3 errors):")
    assert len(r["status"]["details"]["causes"]) == 3 and "more" not in r["status"]["message"]


def test_warnings_are_capped_with_a_count_of_the_rest():
    from specdeploy.core.findings import Finding, Severity, Source

    many = [Finding(Severity.WARNING, "W", Source.SPEC, "spec.x", f"warning {i}") for i in range(300)]
    out = admission._warnings(many)
    assert len(out) == admission.WARNINGS_MAX
    assert out[-1] == f"... and {300 - admission.WARNINGS_MAX + 1} more warnings"
    assert len(admission._warnings(many[:5])) == 5
