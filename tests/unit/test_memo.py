"""core/memo.py: the checker's answers remembered by the identity of read-only documents (issue 23 item 7)."""

from __future__ import annotations

import copy

from testkit import pair
from specdeploy.core import memo
from specdeploy.core.checker import Options, analyze
from specdeploy.core.checker.gates import family_of
from specdeploy.core.engineconfig import config_digest


def _counting():
    calls = []

    @memo.by_identity(4)
    def f(doc, n):
        calls.append(n)
        return (len(doc), n)

    return f, calls


def test_read_only_documents_are_remembered_by_identity_and_other_arguments_by_value():
    f, calls = _counting()
    doc = memo.read_only({"a": 1})
    assert f(doc, 1) == f(doc, 1) == (1, 1)
    assert calls == [1]
    f(doc, 2)  # another value: computed
    assert calls == [1, 2]
    twin = memo.read_only({"a": 1})  # equal but another object: computed
    f(twin, 1)
    assert calls == [1, 2, 1]


def test_documents_not_declared_read_only_are_never_remembered():
    f, calls = _counting()
    doc = {"a": 1}
    assert f(doc, 1) == (1, 1)
    doc["b"] = 2  # a caller that edits its document between calls sees the edit
    assert f(doc, 1) == (2, 1)
    assert calls == [1, 1]


def test_unhashable_arguments_are_computed_every_time():
    f, calls = _counting()
    doc = memo.read_only({"a": 1})
    f(doc, [1])
    f(doc, [1])
    assert calls == [[1], [1]]


def test_the_memo_is_bounded():
    f, calls = _counting()
    doc = memo.read_only({"a": 1})
    for n in range(6):
        f(doc, n)
    f(doc, 0)  # evicted (size 4): computed again
    assert calls == [0, 1, 2, 3, 4, 5, 0]


def test_analyze_of_read_only_documents_is_remembered_and_each_caller_owns_its_findings_lists():
    d, t = pair("qwen3.6-27b")
    fresh = analyze(copy.deepcopy(d), copy.deepcopy(t), Options(engine="sglang", gpu="h200"))
    d, t = memo.read_only(d), memo.read_only(t)
    a = analyze(d, t, Options(engine="sglang", gpu="h200"))
    b = analyze(d, t, Options(engine="sglang", gpu="h200"))  # an equal Options object: remembered
    assert a.findings == b.findings == fresh.findings and a.derived == b.derived == fresh.derived
    assert a.derived is b.derived  # the remembered analysis (frozen parts shared)
    assert a.findings is not b.findings and a.accepted is not b.accepted
    a.findings.append("appended by a caller (render does)")
    assert analyze(d, t, Options(engine="sglang", gpu="h200")).findings == fresh.findings


def test_config_digest_and_family_of_read_only_documents_are_remembered():
    d, _ = pair("qwen3.6-27b")
    d = memo.read_only(d)
    assert config_digest(d) == config_digest(copy.deepcopy(d))
    assert family_of(d) is family_of(d) and family_of(d) == family_of(copy.deepcopy(d))
