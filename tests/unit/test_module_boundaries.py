"""Module boundaries the import contracts cannot see (pyproject.toml [tool.importlinter] checks which modules import
which; these check what they take and how long their functions are; docs/concepts/architecture.md, "Import
contracts"):

- no module of the product takes another module's private name (``from X import _name``, ``X._name`` on an
  imported module): what a module shares with another is public, named and documented in its home;
- no function of the core is over ``MAX_FUNCTION_LINES`` lines: a long rule chain is a list of small named rules
  (core/checker/layers.py, core/checker/eagle3.py).

Each scanner is run once on the tree and once on a small source with the breach, so it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "specdeploy"
CORE = PRODUCT / "core"
MAX_FUNCTION_LINES = 120


def _module_name(path: Path, source_root: Path) -> str:
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, source_root: Path) -> bool:
    p = source_root.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_cross_imports(package: Path) -> list[str]:
    """Every place under ``package`` (a package directory whose parent is the source root) where a module takes
    another module's private name: ``from X import _name`` or ``X._name`` with ``X`` bound to an imported module."""
    source_root = package.parent
    found = []
    for path in sorted(package.rglob("*.py")):
        me = _module_name(path, source_root)
        here = me if path.name == "__init__.py" else me.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules: dict[str, str] = {}  # local name -> the module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    if _is_module(f"{source}.{alias.name}", source_root):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                    elif _private(alias.name) and source != me:
                        found.append(f"{path.relative_to(source_root)}:{node.lineno}: from {source} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and modules.get(node.value.id, me) != me):
                found.append(f"{path.relative_to(source_root)}:{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return found


def long_functions(package: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method under ``package`` longer than ``limit`` lines (decorators and docstring included)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = node.end_lineno - first + 1
                if lines > limit:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.name} ({lines} lines)")
    return found


def test_no_module_takes_another_modules_private_name():
    assert private_cross_imports(PRODUCT) == []


def test_a_private_cross_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "home.py").write_text("def _helper():\n    pass\n\n\ndef public():\n    return _helper()\n")
    (pkg / "sub" / "ok.py").write_text("from ..home import public\nfrom .. import home\nhome.public()\n")
    (pkg / "sub" / "taker.py").write_text("from ..home import _helper\n")
    (pkg / "sub" / "reacher.py").write_text("from .. import home as h\nh._helper()\n")
    (pkg / "absolute.py").write_text("import pkg.home as h\nfrom pkg.home import _helper\nh._helper()\n")
    assert private_cross_imports(pkg) == [
        "pkg/absolute.py:2: from pkg.home import _helper",
        "pkg/absolute.py:3: pkg.home._helper",
        "pkg/sub/reacher.py:2: pkg.home._helper",
        "pkg/sub/taker.py:1: from pkg.home import _helper",
    ]


def test_no_core_function_is_over_the_limit():
    assert long_functions(CORE) == []


def test_a_long_function_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    lines = ["def at_the_limit():"] + [f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1)]
    lines += ["", "", "def over_it():"] + [f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES)]
    (pkg / "m.py").write_text("\n".join(lines) + "\n")
    assert long_functions(pkg) == [f"pkg/m.py:{MAX_FUNCTION_LINES + 3}: over_it ({MAX_FUNCTION_LINES + 1} lines)"]
