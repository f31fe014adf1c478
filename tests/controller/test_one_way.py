"""The controller is one-way: each report store has one writer (controller/reports.py, ``WRITERS``).

Observers write typed, frozen reports that only they own; the reconciler and its planner read them; where the
reconciler needs an observer to change what it reports, it asks through the observer's commands
(``reports.Observer``). The walk below reads every product module's code and fails on a write to a report store
(``<x>.<store>.put(...)``/``.drop(...)``, an item assignment or deletion, a dict mutator, a rebinding, an alias
under another name) outside the store's writer. The import side (the reconciler and the planner never import the observers) is the
``observers-one-way`` contract (pyproject.toml; tests/unit/test_import_contracts.py).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import specdeploy
from specdeploy.controller import reports as rp
from specdeploy.controller.cache import Caches
from specdeploy.core.rollout import canary as ro

PRODUCT = Path(specdeploy.__file__).parent
WRITES = {"put", "drop", "pop", "clear", "update", "setdefault", "popitem", "__setitem__", "__delitem__"}
DECLARED_IN = "specdeploy.controller.cache"  # Caches.__init__ makes the stores


def _module(path: Path) -> str:
    return ".".join(("specdeploy", *path.relative_to(PRODUCT).with_suffix("").parts))


def _store(node: ast.AST) -> str | None:
    """The report store ``node`` names (``<x>.<store>`` or a bare ``<store>`` of a writer's own), else None."""
    if isinstance(node, ast.Attribute) and node.attr in rp.WRITERS:
        return node.attr
    return None


def writes(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(store, line, what) of every write to a report store in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            store = _store(node.func.value)
            if store is not None:
                out.append((store, node.lineno, f".{node.func.attr}()"))
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if isinstance(node, ast.Assign) and _store(node.value) is not None:
            out.append((_store(node.value), node.lineno, "alias"))  # a store under another name escapes the walk
        for t in targets:
            if isinstance(t, ast.Subscript) and _store(t.value) is not None:
                out.append((_store(t.value), node.lineno, "[...] = / del"))
            elif _store(t) is not None:
                out.append((_store(t), node.lineno, "rebinding"))
    return out


def product_writes() -> dict[str, list[tuple[str, int, str]]]:
    return {_module(p): w for p in sorted(PRODUCT.rglob("*.py"))
            for w in (writes(ast.parse(p.read_text(encoding="utf-8"))),) if w}


def test_each_report_store_is_written_by_its_writer_only():
    found = product_writes()
    wrong = [(mod, store, line, what) for mod, ws in found.items() for store, line, what in ws
             if mod != rp.WRITERS[store] and not (mod == DECLARED_IN and what == "rebinding")]
    assert not wrong, "a report store written outside its writer (controller/reports.py WRITERS): " + repr(wrong)
    # each writer does write its store (the walk sees the writes it must see)
    for store, writer in rp.WRITERS.items():
        assert any(s == store and what == ".put()" for s, _, what in found.get(writer, [])), (store, writer)


@pytest.mark.parametrize("line", [
    "self.cache.acceptances.put(key, AcceptanceReport())",  # the reconciler writes the monitor's report
    "self.cache.canaries.drop(key)",  # ... or forgets the canary analysis' for it
    "self.cache.acceptances[key] = report",
    "del self.cache.canaries[key]",
    "self.cache.acceptances = {}",
    "mine = self.cache.acceptances",  # an alias: writes through it would escape the walk
])
def test_the_walk_finds_a_write_from_the_reconciler(line):
    """The mutant: a write the reconciler must never make is found (and named) by the walk above."""
    source = (PRODUCT / "controller" / "reconciler.py").read_text(encoding="utf-8")
    tree = ast.parse(source + "\n\ndef _mutant(self, key, report):\n    " + line + "\n")
    store = line.split("cache.")[1].split(".")[0].split("[")[0].split(" ")[0].split(",")[0]
    assert any(s == store and n > len(source.splitlines()) for s, n, _ in writes(tree)), line


def test_reports_are_typed_and_frozen():
    c = Caches()
    with pytest.raises(TypeError, match="AcceptanceReport"):
        c.acceptances.put(("ns", "a"), {"acceptance": None, "condition": None})  # the old untyped hand-over
    with pytest.raises(TypeError):
        c.acceptances[("ns", "a")] = rp.AcceptanceReport()  # a read-only mapping for everyone
    health = ro.Health(pods=1, ready=1, restarts=0, crash_looping=False)
    for report in (rp.AcceptanceReport(), rp.Admission("uid", 1),
                   rp.CanaryReport(revision="r", stable=ro.Totals(), canary=ro.Totals(), probe=None, health=health,
                                   since=0.0)):
        field = dataclasses.fields(report)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(report, field, None)
    assert c.admitted.put(("ns", "a"), rp.Admission("uid", 1)) is True
    assert c.admitted.put(("ns", "a"), rp.Admission("uid", 1)) is False  # the same report: no change
    assert dict(c.admitted) == {("ns", "a"): rp.Admission("uid", 1)}
    assert c.admitted.drop(("ns", "a")) is True and c.admitted.drop(("ns", "a")) is False


def test_a_promotion_is_asked_of_the_monitor_not_written_into_its_report():
    """``AcceptanceMonitor.promoted`` (the command the reconciler calls) keeps the monitor's parts and sets the
    baseline; the monitor is the one that writes it."""
    from specdeploy.controller.monitor import AcceptanceMonitor

    c = Caches()
    m = AcceptanceMonitor(c, 30)
    key = ("ns", "a")
    m.promoted(key, {"length": 3.8, "revision": "r2"})
    assert c.acceptances[key] == rp.AcceptanceReport(acceptance={"baseline": {"length": 3.8, "revision": "r2"}})
    cond = {"type": "SpeculationHealthy", "status": "True", "reason": "Healthy", "message": ""}
    before = rp.AcceptanceReport(acceptance={"length": 3.7, "baseline": {"length": 3.6}}, condition=cond)
    c.acceptances.put(key, before)  # as the monitor's tick would (this test stands in for it)
    m.promoted(key, {"length": 3.8, "revision": "r2"})
    assert c.acceptances[key] == rp.AcceptanceReport(
        acceptance={"length": 3.7, "baseline": {"length": 3.8, "revision": "r2"}}, condition=cond)
    m.forget(key)
    assert key not in c.acceptances
