"""Bounded memory (issue 37 hole 3): every cache and memo has an entry and a byte bound, evicting the least recently
used; a repeated finding is counted, not kept; no unbounded cache decorator in the product. Counters only."""

from __future__ import annotations

import ast
import asyncio
import copy
import gc
import json
import re
import weakref
from pathlib import Path

import pytest

from testkit import pair
from specdeploy.controller import admission, resolve
from specdeploy.controller.webhooks import OperatorConfigs
from specdeploy.core import codeflags, enginedata, extraargs, memo, policy  # noqa: F401 (their caches)
from specdeploy.core.checker import Options, analyze
from specdeploy.core.checker.results import Out
from specdeploy.core.checker.options import options_bytes
from specdeploy.core.findings import PER_CODE_MAX, Finding, Severity, Source, findings_bytes, limit_findings
from specdeploy.core.modelconfig import LIST_MAX, parse_drafter

ROOT = Path(__file__).resolve().parents[2]
MiB = memo.MiB
BUDGET = 256 * MiB  # docs/concepts/security.md "Bounded memory": every cache's byte bound together


# ----------------------------------------------------------------- BoundedLRU


def test_the_entry_bound_evicts_the_least_recently_used():
    c = memo.BoundedLRU("test.entries", 3, MiB)
    for k in "abc":
        c.put(k, k)
    assert c.get("a") == "a"  # used: now the most recent
    c.put("d", "d")
    assert c.keys() == ["c", "a", "d"] and "b" not in c and len(c) == 3


def test_the_byte_bound_evicts_the_least_recently_used_and_counts_what_is_held():
    c = memo.BoundedLRU("test.bytes", 100, 1000, sizeof=lambda k, v: v)
    for k in range(4):
        c.put(k, 300)
    assert c.keys() == [1, 2, 3] and c.nbytes == 900
    c.put(2, 100)  # replaced: its old size is no longer counted
    assert c.nbytes == 700 and c.keys() == [1, 3, 2]
    assert c.pop(1) == 300 and c.nbytes == 400


def test_an_entry_over_the_byte_bound_is_not_kept():
    c = memo.BoundedLRU("test.oversize", 10, 1000, sizeof=lambda k, v: v)
    c.put("a", 10)
    assert c.put("a", 5000) is False and "a" not in c and c.nbytes == 0


def test_the_default_size_is_the_key_and_value_as_held():
    c = memo.BoundedLRU("test.sizes", 10, 4 * MiB)
    c.put("k", ["x" * 1000 + str(i) for i in range(1000)])
    assert 1_000_000 < c.nbytes < 1_200_000


def test_a_cache_needs_both_bounds():
    with pytest.raises(ValueError):
        memo.BoundedLRU("test.none", 10, 0)


def test_approx_size_counts_what_is_held_once():
    s = "y" * 100_000
    assert memo.approx_size([s, s, s]) < memo.approx_size(s) + 200
    assert memo.approx_size({"a": [s], "b": (1, 2)}) > 100_000
    box = type("Box", (), {})()
    box.payload = s
    assert memo.approx_size(box) > 100_000


# ----------------------------------------------------------------- the decorators


def test_bounded_keeps_at_most_its_entries_and_bytes_and_no_exception():
    calls = []

    @memo.bounded("test.bounded", 4, 3 * 110_000)
    def f(n):
        calls.append(n)
        if n < 0:
            raise ValueError(n)
        return "z" * 100_000 + str(n)

    for n in range(6):
        f(n)
    assert f.cache_info().currsize == 3 and f.cache_info().nbytes <= 3 * 110_000  # bytes, before entries
    f(5)
    f(0)
    assert calls == [0, 1, 2, 3, 4, 5, 0]  # 5 was remembered, 0 evicted
    for _ in range(2):
        with pytest.raises(ValueError):
            f(-1)
    assert calls.count(-1) == 2


def test_by_identity_is_bounded_in_bytes():
    calls = []

    @memo.by_identity(64, max_bytes=2 * 300_000)
    def f(doc, n):
        calls.append(n)
        return "r" * 250_000 + str(n)

    doc = memo.read_only({"a": 1})
    for n in range(5):
        f(doc, n)
    assert len(f.cache) == 2 and f.cache.nbytes <= 600_000
    f(doc, 4)
    assert calls == [0, 1, 2, 3, 4]


def test_memos_keep_no_document_alive_and_a_reused_id_never_meets_old_answers(monkeypatch):
    monkeypatch.setattr(memo, "_READ_ONLY", memo._Registry(max_entries=2, max_bytes=MiB))

    class Doc:
        def __init__(self, n):
            self.n = n

    @memo.by_identity(64)
    def f(doc):
        return doc.n

    first = memo.read_only(Doc(1))
    ref = weakref.ref(first)
    assert f(first) == 1 and len(f.cache) == 1
    for n in (2, 3):  # the registry holds 2: the first is evicted
        memo.read_only(Doc(n))
    assert not memo.is_read_only(first)
    del first
    gc.collect()
    assert ref() is None  # the memo's entry did not keep it
    for n in range(4, 40):  # new read-only objects, some at the freed id: each gets its own answer
        d = memo.read_only(Doc(n))
        assert f(d) == n


def test_the_read_only_registry_is_bounded_in_entries_and_bytes(monkeypatch):
    reg = memo._Registry(max_entries=3, max_bytes=300_000)
    monkeypatch.setattr(memo, "_READ_ONLY", reg)
    docs = [memo.read_only({"n": i}) for i in range(5)]
    assert len(reg.lru) == 3 and not memo.is_read_only(docs[0]) and memo.is_read_only(docs[-1])
    big = [memo.read_only({"pad": "p" * 120_000 + str(i)}) for i in range(3)]
    assert reg.lru.nbytes <= 300_000 and memo.is_read_only(big[-1]) and not memo.is_read_only(big[0])
    huge = memo.read_only({"pad": "h" * 400_000})  # over the bound alone: not registered (computed every time)
    assert not memo.is_read_only(huge)


# ----------------------------------------------------------------- the product's caches


def test_the_admission_memo_is_bounded_in_bytes():
    m = admission._Memo("test.admission", 2048, 2 * MiB)
    for i in range(20):
        m.remember(("k", "v" * 500_000 + str(i)), lambda: ())
    assert len(m) < 20 and m.nbytes <= 2 * MiB
    assert m.remember(["unhashable"], lambda: 7) == 7 and len(m) < 20


def _big_configmap(name: str, i: int) -> dict:
    doc = {"pad": [f"{i}-{j}-" + "q" * 200 for j in range(3000)]}  # ~0.7 MiB of text
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1"},
            "data": {"config.json": json.dumps(doc)}}


def test_the_webhook_parsed_documents_are_bounded_in_bytes():
    class Cache:
        configmaps: dict = {}

    lookup = OperatorConfigs(None, Cache(), parsed_bytes=4 * MiB)
    for i in range(12):
        Cache.configmaps[("ns", f"cm{i}")] = _big_configmap(f"cm{i}", i)
        asyncio.run(lookup._configmap("ns", f"cm{i}", "config.json", "drafter", False))
    assert 0 < len(lookup._parsed) < 12 and lookup._parsed.nbytes <= 4 * MiB


def test_the_resolver_parsed_documents_are_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(resolve, "PARSED_BYTES", 4 * MiB)
    r = resolve.Resolver(kube=None)
    for i in range(12):
        r.configmaps[("ns", f"cm{i}")] = _big_configmap(f"cm{i}", i)
        asyncio.run(r._from_configmap("ns", f"cm{i}", "config.json", "drafter"))
    assert 0 < len(r._parsed) < 12 and r._parsed.nbytes <= 4 * MiB


def test_every_cache_is_within_the_budget_and_documented():
    held = OperatorConfigs(None, None), resolve.Resolver(kube=None)  # noqa: F841 (their caches live while they do)
    caches = [c for c in memo.caches() if not c.name.startswith("test.")]
    names = {c.name for c in caches}
    assert {"admission.pair", "admission.options", "webhook.parsed", "resolver.parsed", "resolver.hub",
            "memo.read_only", "checker.options"} <= names
    assert sum(max(c.max_bytes for c in caches if c.name == n) for n in names) <= BUDGET
    section = (ROOT / "docs/concepts/security.md").read_text().split("## Bounded memory", 1)[1].split("\n## ", 1)[0]
    documented = {name for row in section.splitlines() if row.startswith("| `")
                  for name in re.findall(r"`([a-z_]+\.[a-z_]+)`", row.split("|")[1])}
    assert names == documented, (f"not in docs/concepts/security.md 'Bounded memory': {sorted(names - documented)}; "
                                 f"listed there but not a bounded cache: {sorted(documented - names)}")


def test_the_product_has_no_unbounded_cache_decorator():
    """functools.lru_cache/cache hold what their arguments and results are, with no byte bound: memo.bounded instead."""
    unbounded = {"lru_cache", "cache", "cached_property"}
    found = []
    for path in (ROOT / "operator" / "specdeploy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "functools":
                names = [a.name for a in node.names if a.name in unbounded]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "functools":
                names = [node.attr] if node.attr in unbounded else []
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno} functools.{n}" for n in names]
    assert not found, found


# ----------------------------------------------------------------- findings


def _f(code: str, i: int, msg: str = "m") -> Finding:
    return Finding(Severity.ERROR, code, Source.DRAFTER, f"$.x[{i}]", msg)


def test_a_repeated_finding_is_kept_up_to_its_bound_then_counted():
    out = limit_findings([_f("A", i) for i in range(50)] + [_f("B", 0, "b" * 5000)])
    assert [f.code for f in out].count("A") == PER_CODE_MAX + 1
    assert [f.message for f in out if f.code == "A"][-1].startswith("and 30 more A findings")
    assert all(len(f.message) <= 1024 for f in out) and len(out) == PER_CODE_MAX + 2


def test_the_size_estimates_without_a_walk_are_not_below_the_walk():
    fs = [_f("A", i, "m" * (i * 37)) for i in range(200)]
    assert memo.approx_size(fs) <= findings_bytes(fs) <= 2 * memo.approx_size(fs)
    o = Options(engine="vllm", engine_version="0.33.0", extra_args=tuple(f"--a{i}={'x' * 4000}" for i in range(128)),
                accept=("RemoteCodeNotTrusted",))
    assert memo.approx_size(o) <= options_bytes(o) <= 2 * memo.approx_size(o)


def test_the_checker_collector_counts_past_the_bound_without_keeping():
    out = Out()
    for i in range(10_000):
        out.err("TargetLayerOutOfRange", Source.DRAFTER, f"$.t[{i}]", "out of range")
    assert len(out.items) == PER_CODE_MAX and out.dropped == {"TargetLayerOutOfRange": 10_000 - PER_CODE_MAX}
    assert len(out.limited()) == PER_CODE_MAX + 1


def test_an_analysis_of_a_config_repeating_a_mistake_is_compact():
    d, t = pair("qwen3.6-27b")
    d = copy.deepcopy(d)
    d["dflash_config"]["target_layer_ids"] = list(range(64, 64 + 3000))
    a = analyze(d, t, Options(engine="vllm", engine_version="0.33.0", gpu="b300"))
    codes = [f.code for f in a.findings]
    assert codes.count("TargetLayerOutOfRange") == PER_CODE_MAX + 1
    assert memo.approx_size(a.findings) < 64 * 1024


def test_a_config_list_longer_than_any_model_is_a_type_problem_not_parsed():
    d, _ = pair("qwen3.6-27b")
    d = copy.deepcopy(d)
    d["dflash_config"]["target_layer_ids"] = list(range(LIST_MAX + 1))
    cfg, findings = parse_drafter(d)
    assert cfg.target_layer_ids is None
    assert [f.code for f in findings] == ["InvalidFieldType"] and f"{LIST_MAX + 1} entries" in findings[0].message
