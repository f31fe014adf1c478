"""One choke point for pod templates (issue 37): every pod spec the operator creates is built in core/render/ (engine
pods, canary, tuning Job, inspector Job, benchmark variants and client Jobs), behind the tenancy policy gate
(core/render/gate.py). An AST scan of the product fails on a pod spec built anywhere else, on an ``Admitted`` made
outside the gate, and on a controller call to a renderer without the policy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "specdeploy"
# the modules that build pod specs (the render package); podsecurity defines harden_pod
BUILDERS = {"core/render/objects.py", "core/render/tuning.py", "core/render/jobs.py"}
POD_KEYS = {"containers", "initContainers"}
RENDERERS = {"render", "render_variant", "plan_reconcile"}  # every controller call names the policy


def _modules() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(PRODUCT)), ast.parse(p.read_text())) for p in sorted(PRODUCT.rglob("*.py"))]


def _name(fn: ast.AST) -> str | None:
    return fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None


def pod_builders(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each place ``tree`` builds or rewrites a pod spec: a dict literal with a ``containers`` or
    ``initContainers`` list (or comprehension) literal, a subscript store to those keys, a harden_pod call, a
    container dict literal (``image`` beside ``name``)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict):
            keys = {k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            for k, v in zip(n.keys, n.values):
                if isinstance(k, ast.Constant) and k.value in POD_KEYS and isinstance(v, (ast.List, ast.Call)):
                    out.append((n.lineno, f"a pod spec literal ({k.value})"))
            if {"name", "image"} <= keys:
                out.append((n.lineno, "a container literal (name, image)"))
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value in POD_KEYS:
                    out.append((n.lineno, f"{t.slice.value} rewritten"))
        elif isinstance(n, ast.Call) and _name(n.func) == "harden_pod":
            out.append((n.lineno, "harden_pod"))
    return out


def test_only_the_render_package_builds_pod_specs():
    found = {mod: hits for mod, tree in _modules() if mod not in BUILDERS and (hits := pod_builders(tree))}
    assert found == {}, "build every pod spec in core/render/ (behind core/render/gate.py), not here"
    assert all(pod_builders(ast.parse((PRODUCT / m).read_text())) for m in BUILDERS)  # the scan sees them


def test_the_scan_catches_each_way_of_building_a_pod():
    for src in ('x = {"spec": {"containers": [{"name": "c", "image": "i"}]}}',
                'x = {"initContainers": list(y)}',
                'pod["containers"] = []',
                'harden_pod({})',
                'podsecurity.harden_pod(p)',
                'c = {"name": "evil", "image": "evil.io/x"}'):
        assert pod_builders(ast.parse(src)), src
    # reading a pod is not building one (the monitor keeps a slim copy of the pods it reads)
    assert pod_builders(ast.parse('s = {"containers": [c for c in pod["spec"]["containers"]]}')) == []
    assert pod_builders(ast.parse('cs = pod.get("spec", {}).get("containers") or []')) == []


def test_an_admitted_spec_is_made_by_the_gate_only():
    makers = {mod: [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) == "Admitted"]
              for mod, tree in _modules()}
    assert {m: ls for m, ls in makers.items() if ls and m != "core/render/gate.py"} == {}


@pytest.mark.parametrize("mod", sorted(str(p.relative_to(PRODUCT)) for p in (PRODUCT / "controller").glob("*.py")))
def test_every_controller_render_names_the_policy(mod):
    tree = ast.parse((PRODUCT / mod).read_text())
    bare = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) in RENDERERS
            and not any(k.arg == "policy" for k in n.keywords)]
    assert bare == [], f"{mod}: pass policy= (the tenancy policy) to every render call"
