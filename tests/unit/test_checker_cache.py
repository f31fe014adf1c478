"""What the checker remembers between calls (issue 23 item 7: the webhook's CPU per review): parsed views and
estimates per read-only document, object-level checks per Options value, engine facts per release. A changed
document or option is never served an old answer, every cache is bounded, and results equal a fresh run."""

from __future__ import annotations

import copy

from testkit import pair
from specdeploy.core import enginedata, memo
from specdeploy.core.checker import Options, analyze, check_options
from specdeploy.core.checker import options as checker_options
from specdeploy.core.checker import parsed
from specdeploy.core.checker.fit import _target_kv
from specdeploy.core.findings import sort_findings
from specdeploy.core.memory import target_kv
from specdeploy.core.modelconfig import parse_target
from specdeploy.core.weights import estimate_target_bytes


def test_read_only_objects_are_matched_by_identity_and_others_by_value():
    calls = []

    class Box:  # unhashable, like TargetConfig (a dataclass with eq)
        __hash__ = None  # type: ignore[assignment]

        def __init__(self, n):
            self.n = n

    @memo.by_identity(8)
    def f(box, k):
        calls.append((box.n, k))
        return box.n + k

    shared = memo.read_only(Box(1))
    assert f(shared, 1) == f(shared, 1) == 2 and calls == [(1, 1)]
    assert f(memo.read_only(Box(1)), 1) == 2 and len(calls) == 2  # an equal object that is another one: computed
    private = Box(5)
    assert f(private, 1) == 6
    private.n = 7  # not declared read-only: never remembered, its edit is seen
    assert f(private, 1) == 8 and len(calls) == 4


def test_a_value_argument_never_matches_an_identity_key():
    @memo.by_identity(8)
    def f(x):
        return ("value", x)

    doc = memo.read_only({"a": 1})
    assert f(doc) == ("value", doc)
    assert f(("id", id(doc))) == ("value", ("id", id(doc)))  # a tuple that looks like the key: computed for itself


def test_a_read_only_document_is_parsed_once_and_its_view_is_read_only():
    _, t = pair("qwen3.6-27b")
    doc = memo.read_only(copy.deepcopy(t))
    a, fa = parsed.target_of(doc)
    b, fb = parsed.target_of(doc)
    assert a is b and memo.is_read_only(a)
    assert a == parse_target(copy.deepcopy(t))[0] and fa == fb == parse_target(t)[1]
    fa.append("a caller's own list")
    assert parsed.target_of(doc)[1] == fb


def test_a_document_not_declared_read_only_is_parsed_every_time_and_its_edits_are_seen():
    _, t = pair("qwen3.6-27b")
    doc = copy.deepcopy(t)
    first, _ = parsed.target_of(doc)
    assert not memo.is_read_only(first)
    text = doc.get("text_config", doc)
    text["num_hidden_layers"] = 7
    again, _ = parsed.target_of(doc)
    assert again is not first and again.num_hidden_layers.value == 7


def test_a_changed_config_is_a_new_document_and_gets_its_own_analysis():
    d, t = pair("qwen3.6-27b")
    o = Options(engine="vllm", gpu="b300", gpu_count=1)
    before = analyze(memo.read_only(copy.deepcopy(d)), memo.read_only(copy.deepcopy(t)), o)
    bigger = copy.deepcopy(t)
    text = bigger.get("text_config", bigger)
    text["hidden_size"] = text["hidden_size"] * 4
    after = analyze(memo.read_only(copy.deepcopy(d)), memo.read_only(bigger), o)
    fresh = analyze(copy.deepcopy(d), copy.deepcopy(bigger), o)
    assert after.findings == fresh.findings and after.derived == fresh.derived
    assert after.derived.target_weight_bytes > before.derived.target_weight_bytes


def test_estimates_of_a_read_only_view_are_remembered_and_of_others_computed():
    _, t = pair("qwen3.6-27b")
    view, _ = parsed.target_of(memo.read_only(copy.deepcopy(t)))
    assert estimate_target_bytes(view) == estimate_target_bytes(view)
    assert _target_kv(view, 2) is _target_kv(view, 2) and _target_kv(view, 2) == target_kv(view, 2)
    own, _ = parse_target(copy.deepcopy(t))
    before = estimate_target_bytes(own)
    own.num_hidden_layers = type(own.num_hidden_layers)(own.num_hidden_layers.value * 2, own.num_hidden_layers.path)
    assert estimate_target_bytes(own) > before  # an object nobody declared read-only is estimated afresh


def test_the_parsed_views_are_bounded():
    _, t = pair("qwen3.6-27b")
    docs = [memo.read_only(copy.deepcopy(t)) for _ in range(70)]
    views = [parsed.target_of(doc)[0] for doc in docs]
    assert parsed.target_of(docs[0])[0] is not views[0]  # evicted (64 remembered): parsed again
    assert parsed.target_of(docs[-1])[0] is views[-1]


def test_object_level_checks_are_remembered_exactly_by_value_and_type():
    wanted = Options(engine="vllm", block_size=4, draft_window=1)
    assert [f.code for f in check_options(wanted)] == ["DraftWindowBelowBlockSize"]
    # True == 1 and hashes alike, but a boolean draft window is another value: it is not served the int's answer
    assert "DraftWindowBelowBlockSize" not in [f.code for f in check_options(Options(engine="vllm", block_size=4,
                                                                                   draft_window=True))]
    assert [f.code for f in check_options(Options(engine="vllm", block_size=4, draft_window=1))] == [
        "DraftWindowBelowBlockSize"]


def test_object_level_checks_equal_a_fresh_run_and_the_cache_is_bounded():
    checker_options._options_checked_exact.cache_clear()
    for i in range(300):
        o = Options(engine="vllm", engine_version="0.33.0", extra_args=(f"--max-num-seqs={i + 1}", "--no-such-flag"))
        out = checker_options.Out()
        checker_options._run_checks(o, out)
        assert check_options(o) == check_options(o) == sort_findings(out.items)
        assert [f.code for f in out.items] == ["ExtraArgUnknown"]
    info = checker_options._options_checked_exact.cache_info()
    assert info.maxsize == 256 and info.currsize == 256


def test_options_with_an_unhashable_value_are_checked_every_time():
    o = Options(engine="vllm", extra_args=["--max-num-seqs=4"])  # a list: not remembered, still checked
    assert check_options(o) == check_options(Options(engine="vllm", extra_args=("--max-num-seqs=4",)))


def test_engine_facts_are_looked_up_as_before_and_the_lookup_is_bounded():
    engine, version = enginedata.available_facts()[0]
    doc = enginedata.load_facts(engine, version)
    assert doc is not None and enginedata.load_facts(engine, "v" + version) is doc
    assert enginedata.load_facts(engine, "0.0.0-not-recorded") is None
    assert enginedata._facts_key.cache_info().maxsize == 256
    assert enginedata.available_facts() == sorted(enginedata.available_facts(),
                                                  key=lambda ev: (ev[0], enginedata.parse_version(ev[1]) or (0, 0, 0)))
