"""Dynamic-import sites of an engine release, and the CLI flags whose values reach them (standard library only).

Reads the unpacked Python sources of one release (``record-code-sites.sh`` downloads the wheel) and writes
``operator/specdeploy/data/codesites/<engine>-<version>.json``:

- ``sites``: every call of a primitive that imports or runs code named by a value (``resolve_obj_by_qualname``,
  ``importlib.import_module``, ``dynamic_import``, ``__import__``, ``exec``, ``spec_from_file_location``,
  ``logging.config.dictConfig``, ``pickle``/``dill``/``cloudpickle`` ``loads``, ...),
  as ``file:Class.function`` -> sorted primitives. A new release's new sites show up as a diff of this file.
- ``derived``: flag -> the sites its value reaches by name: a parser destination (from the release's flag
  snapshot, ``data/flags/<engine>-<version>.json``) that is the primitive's argument, an attribute of it
  (``parallel_config.worker_cls``), or a local variable assigned from one in the same function (one hop). This
  finds a flag like vLLM ``--distributed-executor-backend`` (``resolve_obj_by_qualname(distributed_executor_backend)``
  in ``Executor.get_class``) from the code path, whatever the flag is called. Flags whose value is a JSON
  object with a module-path field (``--kv-transfer-config``) are not derived here; ``data/codeflags.json`` cites
  their site by hand and the unit test checks that every cited site is in ``sites``.

usage: code_sites.py --engine vllm --version 0.33.0 --src DIR [--flags SNAPSHOT.json] --out FILE
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys

PRIMITIVES = {"resolve_obj_by_qualname", "import_module", "dynamic_import", "__import__", "exec", "eval",
              "spec_from_file_location", "load_module", "exec_module", "import_from_path", "get_class_from_path",
              "import_string", "locate", "dictConfig"}
# ``module.attr`` calls that run code out of bytes (unpickling constructs any callable)
DOTTED = {("pickle", "loads"), ("pickle", "load"), ("dill", "loads"), ("dill", "load"), ("cloudpickle", "loads")}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _idents(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


class _Visitor(ast.NodeVisitor):
    def __init__(self, rel: str):
        self.rel, self.stack, self.sites = rel, [], {}  # site -> {"calls": set, "idents": set}

    def _scoped(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Call(self, node: ast.Call):
        prim = _name(node.func)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in DOTTED:
            prim = f"{f.value.id}.{f.attr}"
        elif prim not in PRIMITIVES:
            prim = None
        if prim is not None and node.args and not isinstance(node.args[0], ast.Constant):
            site = f"{self.rel}:{'.'.join(self.stack) or '<module>'}"
            row = self.sites.setdefault(site, {"calls": set(), "args": set()})
            row["calls"].add(prim)
            row["args"] |= _idents(node.args[0])
        self.generic_visit(node)


def _assignments(tree: ast.AST) -> dict[tuple[str, ...], dict[str, set[str]]]:
    """function scope -> local name -> identifiers of the values assigned to it."""
    out: dict[tuple[str, ...], dict[str, set[str]]] = {}

    def walk(node, stack):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, (*stack, child.name))
                continue
            if isinstance(child, (ast.Assign, ast.AnnAssign)) and child.value is not None:
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        out.setdefault(stack, {}).setdefault(t.id, set()).update(_idents(child.value))
            walk(child, stack)

    walk(tree, ())
    return out


def scan(src: pathlib.Path, package: str, dests: dict[str, str]) -> dict:
    """{"sites": {site: [primitives]}, "derived": {flag: [sites]}}; ``dests``: parser destination -> flag."""
    sites: dict[str, list[str]] = {}
    derived: dict[str, set[str]] = {}
    for path in sorted((src / package).rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if "/tests/" in rel or "/third_party/" in rel:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        v = _Visitor(rel)
        v.visit(tree)
        if not v.sites:
            continue
        assigned = _assignments(tree)
        for site, row in v.sites.items():
            sites[site] = sorted(row["calls"])
            scope = tuple(site.partition(":")[2].split(".")) if not site.endswith(":<module>") else ()
            names = set(row["args"])
            for name in list(names):  # one hop through a local assignment
                names |= assigned.get(scope, {}).get(name, set())
            for name in names:
                flag = dests.get(name)
                if flag is not None:
                    derived.setdefault(flag, set()).add(site)
    return {"sites": dict(sorted(sites.items())),
            "derived": {f: sorted(s) for f, s in sorted(derived.items())}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, choices=["vllm", "sglang"])
    p.add_argument("--version", required=True)
    p.add_argument("--src", required=True, type=pathlib.Path, help="folder holding the release's <engine>/ sources")
    p.add_argument("--flags", type=pathlib.Path, help="the release's parser snapshot (default: data/flags/)")
    p.add_argument("--out", required=True, type=pathlib.Path)
    a = p.parse_args(argv)
    root = pathlib.Path(__file__).resolve().parents[2]
    flags = a.flags or root / "operator/specdeploy/data/flags" / f"{a.engine}-{a.version}.json"
    snap = json.loads(flags.read_text(encoding="utf-8"))
    # a destination shared by --x and --no-x names the positive flag
    dests = {o["dest"]: f for f, o in sorted(snap["options"].items(), key=lambda kv: kv[0].startswith("--no-"),
                                             reverse=True) if o.get("dest") and f.startswith("--")}
    doc = {"about": "Dynamic-import sites of this release and the flags whose values reach them by name "
                    "(e2e/flagdrift/code_sites.py; refreshed by e2e/flagdrift/record-code-sites.sh).",
           "engine": a.engine, "version": a.version, **scan(a.src, a.engine, dests)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"code_sites: {a.engine} {a.version}: {len(doc['sites'])} sites, derived flags: "
          f"{', '.join(doc['derived']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
