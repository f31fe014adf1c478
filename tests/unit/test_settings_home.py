"""Issue 39: settings in one object, one home.

- The product (operator/specdeploy) reads the environment only in controller/settings.py (the documented
  defaults, settings.ENV) and in the CLI entry (operator/specdeploy/cli/): nothing else calls ``os.environ``,
  ``os.getenv`` or the like, and nothing writes it.
- No ``global`` statement in the product or the runtime: the running parts live on kopf's memo
  (controller/handlers.py Operator), not in module globals.
- The runtime (runtime/specdeploy_runtime) reads its environment in its CLI module and in the few modules listed
  below (the pod's own variables: the engine API key and the hub credentials it is given).

The scan is of the syntax tree (an ``environ`` in a comment or a string is no read)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "specdeploy"
RUNTIME = ROOT / "runtime" / "specdeploy_runtime"
ENV_HOMES = {"controller/settings.py"}  # and cli/*
# The runtime's readers besides cli.py: the variables its pod is given (spec.engine.apiKey; the hub token Secret).
RUNTIME_ENV_HOMES = {"cli.py", "benchclient.py", "hubfiles.py"}
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def env_touches(tree: ast.AST) -> list[int]:
    """Lines that touch the process environment: ``os.environ``/``os.getenv``..., or those names imported from os."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in ENV_NAMES for a in node.names):
            lines.append(node.lineno)
    return lines


def global_statements(tree: ast.AST) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Global)]


def sources(root: Path) -> list[tuple[str, ast.AST]]:
    out = [(p.relative_to(root).as_posix(), ast.parse(p.read_text(), str(p))) for p in sorted(root.rglob("*.py"))]
    assert len(out) > 10, root
    return out


def test_the_product_reads_the_environment_only_in_the_settings_module_and_the_cli():
    found = {f"{rel}:{line}" for rel, tree in sources(PRODUCT) for line in env_touches(tree)
             if rel not in ENV_HOMES and not rel.startswith("cli/")}
    assert not found, ("the environment is read outside controller/settings.py and cli/: add the variable to "
                       f"settings.ENV and read it there (OperatorSettings), {sorted(found)}")


def test_the_settings_module_reads_it():
    """The scan finds what it looks for (a scan that finds nothing anywhere proves nothing)."""
    [tree] = [t for rel, t in sources(PRODUCT) if rel == "controller/settings.py"]
    assert env_touches(tree)
    assert env_touches(ast.parse("from os import environ\n")) and env_touches(ast.parse("import os\nos.getenv('X')\n"))
    assert not env_touches(ast.parse("x = 'os.environ'  # os.environ\n"))


@pytest.mark.parametrize("root", [PRODUCT, RUNTIME], ids=["operator", "runtime"])
def test_no_global_statement(root):
    found = {f"{rel}:{line}" for rel, tree in sources(root) for line in global_statements(tree)}
    assert not found, f"a global statement: keep the running parts on an object (kopf's memo) instead, {sorted(found)}"
    assert global_statements(ast.parse("def f():\n    global x\n    x = 1\n"))


def test_the_runtime_reads_the_environment_in_its_listed_modules_only():
    found = {rel for rel, tree in sources(RUNTIME) if env_touches(tree)}
    assert found <= RUNTIME_ENV_HOMES, sorted(found - RUNTIME_ENV_HOMES)
    assert "cli.py" in found
