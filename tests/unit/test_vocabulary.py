"""One vocabulary (core/names.py): label and annotation keys, the field manager, the product's condition
types and metric names are written once; every other module imports them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specdeploy.core import acceptance as acc
from specdeploy.core import names as N

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for base in ("operator/specdeploy", "operator/dev/specdeploy_dev", "runtime/specdeploy_runtime") for p in sorted((ROOT / base).rglob("*.py"))]
HOMES = {ROOT / "operator/specdeploy/core/names.py", ROOT / "operator/specdeploy/core/acceptance.py"}  # metric names: acc
PENDING: set[Path] = set()

# Keys written on objects: a label or annotation key of the product or the recommended labels.
KEY = re.compile(r"(app\.kubernetes\.io/[a-z-]+|(dev\.)?specdeploy\.io/(?!v1alpha1\b)[a-z-]+)")
# The product's own words: a string equal to one of these is a copy.
WORDS = {v for m in (N, acc) for k, v in vars(m).items() if k.isupper() and isinstance(v, str)
         and (k.startswith(("OP_", "VLLM_", "SGLANG_")) and v.startswith(("specdeploy_", "vllm:", "sglang:")) or k in (
             "DRAFTER_COMPATIBLE", "SPECULATION_HEALTHY", "SPECULATION_GUARDED", "SPECULATION_PROFITABLE",
             "GROUP_VERSION"))}


def _strings(tree: ast.AST):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def _built_keys(tree: ast.AST):
    """f"{API_GROUP}/...": a key of the product built in place."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for a, b in zip(node.values, node.values[1:]):
                if isinstance(a, ast.FormattedValue) and isinstance(a.value, ast.Name) and a.value.id == "API_GROUP" \
                        and isinstance(b, ast.Constant) and str(b.value).startswith("/"):
                    yield node, "{API_GROUP}" + str(b.value)


def copies(path: Path) -> list[str]:
    out = []
    tree = ast.parse(path.read_text(), str(path))
    for node in _strings(tree):
        s = node.value
        if KEY.search(s) or s in WORDS:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {s[:80]!r}")
    for node, s in _built_keys(tree):
        out.append(f"{path.relative_to(ROOT)}:{node.lineno}: f{s[:80]!r}")
    return sorted(set(out), key=lambda c: int(c.split(":")[1]))


def test_the_vocabulary_is_written_once():
    found = [c for p in SOURCES if p not in HOMES and p not in PENDING for c in copies(p)]
    assert not found, "literals of core/names.py outside it (import the constant):\n" + "\n".join(found)


def test_the_check_sees_a_copy(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""doc: app.kubernetes.io/name is fine here"""\n'
                   'LABELS = {"app.kubernetes.io/instance": "x"}\n'
                   f'METRIC = {acc.VLLM_DRAFTS!r}\n'
                   'ANN = f"specdeploy.io/config-hash={1}"\n'
                   'LABEL = f"{API_GROUP}/engine"\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert [c.split(":")[1] for c in copies(bad)] == ["2", "3", "4", "5"]
    finally:
        ROOT = saved


def test_values_are_unique_where_they_name_different_facts():
    keys = {k: v for k, v in vars(N).items() if k.endswith(("_LABEL", "_ANNOTATION")) and isinstance(v, str)}
    # the tuning key is a label (short) and an annotation (full): the same key on purpose, nothing else repeats
    repeated = {v for v in keys.values() if list(keys.values()).count(v) > 1}
    assert repeated == {N.TUNING_KEY_LABEL}
    assert N.selector({N.LABEL_MANAGED_BY: N.MANAGED_BY, N.LABEL_COMPONENT: N.COMPONENT_ENGINE}) == \
        "app.kubernetes.io/managed-by=specdeploy,app.kubernetes.io/component=engine"
