#!/usr/bin/env python3
"""Record what an engine release's own code does with DFlash drafters (and its speculative methods).

Reads the Python sources of one SGLang or vLLM release (an unpacked wheel: nothing is
installed or imported) and records, per fact, the value its code computes and where:

- how ``target_layer_ids`` map to captured hidden states (the +1), per model runner (vLLM)
  or per target model class (SGLang), and which id lists the target class rejects;
- the canonical layer layout the engine falls back to (SGLang ``build_target_layer_ids``);
- whether DFlash draft layers get per-layer sliding windows natively, how ``use_swa`` is
  read, what the compact draft cache covers, which draft attention backends read the
  per-layer window;
- the drafter architectures the release registers, the draft-window flag names, and the
  attention backends that serve non-causal (DFlash) attention;
- which target architectures can hand EAGLE-3 aux hidden states to a drafter (vLLM: ``SupportsEagle3``
  along the class bases of every registered generative architecture; SGLang: ``set_eagle3_layers_to_capture``
  on every EntryClass) (``eagle3_capture``, with the vLLM methods that ask for them: ``eagle3``, ``dflash``,
  ``dspark``), and which SGLang EntryClasses have the DSpark hook ``set_dspark_layers_to_capture``
  (``dspark_capture``; the DFlash hook is ``target_capture``);
- its speculative methods: vLLM's ``speculative_config.method`` names and config keys, SGLang's
  ``--speculative-algorithm`` names, aliases and ``--speculative-*`` flags (``methods``).

Facts are computed by *running* the engine's own functions where they are pure enough:
each function is compiled from the release's source with its module-level helpers, and
its imports are replaced by inert stubs; the inputs are small config objects. Where a fact
is a property of code that cannot run without a GPU (a kernel reading the per-layer window),
it is recorded from the code (``evidence``: file and function). Standard library only.

    engine_facts.py --engine sglang --version 0.5.23 --src DIR [--out FILE]

DIR holds the package directory (``DIR/sglang/srt/...`` or ``DIR/vllm/...``).
"""

from __future__ import annotations

import __future__ as _future
import argparse
import builtins
import ast
import json
import re
import sys
import types
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

SCHEMA = 1
SLIDING, FULL = "sliding_attention", "full_attention"


# --------------------------------------------------------------------------- stubs


class Stub:
    """An inert stand-in for anything the probed code imports or reaches through ``self``:
    every attribute, call and item yields another Stub; it is truthy, iterates as empty and
    compares equal only to itself. ``overrides`` maps attribute paths from the root
    ("model.layers") to real values; assignments and calls are recorded in ``calls``."""

    def __init__(self, path: str = "", overrides: dict[str, Any] | None = None, calls: list | None = None,
                 assigned: dict[str, Any] | None = None):
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_overrides", overrides if overrides is not None else {})
        object.__setattr__(self, "_calls", calls if calls is not None else [])
        object.__setattr__(self, "_assigned", assigned if assigned is not None else {})

    def _child(self, attr: str) -> str:
        return f"{self._path}.{attr}" if self._path else attr

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        full = self._child(attr)
        if full in self._assigned:
            return self._assigned[full]
        if full in self._overrides:
            return self._overrides[full]
        return Stub(full, self._overrides, self._calls, self._assigned)

    def __setattr__(self, attr: str, value: Any) -> None:
        full = self._child(attr)
        self._assigned[full] = value
        self._calls.append(("set", full, value))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._calls.append(("call", self._path, args, kwargs))
        return Stub(self._path + "()", {}, self._calls, {})

    def __bool__(self) -> bool:
        return True

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __getitem__(self, key: Any) -> Any:
        return Stub(self._path + "[]", {}, self._calls, {})

    def __eq__(self, other: Any) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<stub {self._path or 'root'}>"


class StrictConfig(types.SimpleNamespace):
    """A config object with exactly the given attributes (getattr defaults work), plus the
    transformers helpers the engines call on configs."""

    def get_text_config(self, *_, **__):
        return getattr(self, "text_config", None) or self

    def to_dict(self) -> dict:
        return dict(vars(self))

    def get(self, key: str, default: Any = None) -> Any:  # some code treats configs as dicts
        return getattr(self, key, default)


# --------------------------------------------------------------------------- source index


class Source:
    """The Python sources of one release, parsed lazily; compiles functions out of them."""

    def __init__(self, root: Path, package: str):
        self.root = Path(root)
        self.package = package
        self.pkg = self.root / package
        if not self.pkg.is_dir():
            raise SystemExit(f"engine_facts: {self.pkg} does not exist (expected the unpacked {package} package)")
        self._trees: dict[str, ast.Module | None] = {}

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def text(self, rel: str) -> str:
        p = self.root / rel
        return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else ""

    def tree(self, rel: str) -> ast.Module | None:
        if rel not in self._trees:
            src = self.text(rel)
            try:
                self._trees[rel] = ast.parse(src) if src else None
            except SyntaxError:
                self._trees[rel] = None
        return self._trees[rel]

    def files(self, sub: str = "") -> list[str]:
        base = self.pkg / sub if sub else self.pkg
        if not base.exists():
            return []
        return sorted(self.rel(p) for p in base.rglob("*.py"))

    def grep(self, pattern: str, sub: str = "") -> list[str]:
        rx = re.compile(pattern)
        return [f for f in self.files(sub) if rx.search(self.text(f))]

    def module_rel(self, dotted: str) -> str | None:
        """'sglang.srt.speculative.dflash_utils' -> its relative file path, if in the tree."""
        parts = dotted.split(".")
        for cand in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
            if self.exists(cand):
                return cand
        return None

    # -- definitions -----------------------------------------------------------------
    def top_defs(self, rel: str) -> dict[str, ast.stmt]:
        """Top-level functions, classes and simple assignments of a module by name."""
        tree = self.tree(rel)
        out: dict[str, ast.stmt] = {}
        if tree is None:
            return out
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[node.name] = node
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        out[t.id] = node
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                out[node.target.id] = node
        return out

    def imports(self, rel: str) -> dict[str, str]:
        """name -> dotted 'module.attr' for every ``from X import Y`` in the module (any depth)."""
        tree = self.tree(rel)
        out: dict[str, str] = {}
        if tree is None:
            return out
        here = rel[:-3].replace("/", ".")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None or (
                    isinstance(node, ast.ImportFrom) and node.level):
                mod = node.module or ""
                if node.level:
                    base = here.split(".")[: -node.level]
                    mod = ".".join(base + ([mod] if mod else []))
                for alias in node.names:
                    out[alias.asname or alias.name] = f"{mod}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    out[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        return out

    def find_classes(self, name: str, sub: str = "") -> list[tuple[str, ast.ClassDef]]:
        out = []
        for f in self.files(sub):
            if f"class {name}" not in self.text(f):
                continue
            tree = self.tree(f)
            if tree is None:
                continue
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    out.append((f, node))
        return out

    def resolve_name(self, rel: str, name: str) -> tuple[str, ast.stmt] | None:
        """Where a name used in module ``rel`` is defined (same module, or followed through imports)."""
        seen = set()
        while (rel, name) not in seen:
            seen.add((rel, name))
            defs = self.top_defs(rel)
            if name in defs:
                return rel, defs[name]
            target = self.imports(rel).get(name)
            if not target or "." not in target:
                return None
            mod, attr = target.rsplit(".", 1)
            nrel = self.module_rel(mod)
            if nrel is None:
                return None
            rel, name = nrel, attr
        return None

    # -- compiling functions out of the source -------------------------------------
    def load(self, rel: str, name: str, *, stubs: dict[str, Any] | None = None, depth: int = 6) -> Callable | None:
        """Compile top-level function ``name`` of module ``rel`` with the module-level helpers it
        uses (functions and constants, followed through imports ``depth`` levels deep); every
        other free name is a Stub (or the value given in ``stubs``)."""
        spaces: dict[str, dict] = {}
        self._fill(rel, [name], spaces, stubs or {}, depth)
        fn = spaces[rel].get(name)
        return fn if callable(fn) else None

    def method(self, rel: str, cls: ast.ClassDef, name: str, *, stubs: dict[str, Any] | None = None) -> Callable | None:
        """Compile one method of a class as a plain function (first argument ``self``)."""
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                spaces: dict[str, dict] = {}
                self._fill(rel, sorted(_free_names(node)), spaces, stubs or {}, 6)
                ns = spaces[rel]
                mod = ast.Module(body=[_strip(node)], type_ignores=[])
                ast.fix_missing_locations(mod)
                exec(compile(mod, f"{rel}:{cls.name}.{name}", "exec", flags=_future.annotations.compiler_flag,
                             dont_inherit=True), ns)
                return ns[name]
        return None

    def _fill(self, rel: str, names: Iterable[str], spaces: dict[str, dict], stubs: dict, depth: int) -> None:
        """Define ``names`` in module ``rel``'s probe namespace (one namespace per module per load)."""
        ns = spaces.setdefault(rel, {"__builtins__": __builtins__, "__name__": f"probe:{rel}"})
        defs = self.top_defs(rel)
        imports = self.imports(rel)
        for name in names:
            if name in ns:
                continue
            if name in stubs:
                ns[name] = stubs[name]
                continue
            if hasattr(builtins, name):
                continue
            ns[name] = Stub(name)  # placeholder while its dependencies load (recursion guard)
            node = defs.get(name)
            if node is not None and not isinstance(node, ast.ClassDef):
                if depth > 0:
                    self._fill(rel, sorted(_free_names(node)), spaces, stubs, depth - 1)
                try:
                    mod = ast.Module(body=[_strip(node)], type_ignores=[])
                    ast.fix_missing_locations(mod)
                    exec(compile(mod, f"{rel}:{name}", "exec", flags=_future.annotations.compiler_flag,
                                 dont_inherit=True), ns)
                except Exception:  # noqa: BLE001 - a constant whose value needs the real package
                    ns[name] = Stub(name)
            elif name in imports and _stdlib(imports[name]) is not None:
                ns[name] = _stdlib(imports[name])
            elif name in imports and depth > 0:
                mod_name, _, attr = imports[name].rpartition(".")
                mrel = self.module_rel(mod_name) if mod_name else None
                if mrel is not None and mrel.startswith(self.package):
                    self._fill(mrel, [attr], spaces, stubs, depth - 1)
                    ns[name] = spaces[mrel].get(attr, ns[name])


def _stdlib(dotted: str) -> Any:
    """The real object for a standard-library import ('typing.Sequence', 'json'), else None."""
    import importlib

    top = dotted.split(".", 1)[0]
    if top not in sys.stdlib_module_names:
        return None
    try:
        return importlib.import_module(dotted)
    except ImportError:
        pass
    mod, _, attr = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError):
        return None


def _strip(node: ast.stmt) -> ast.stmt:
    """Drop decorators (they need the real package) from a definition."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node = type(node)(**{f: getattr(node, f, None) for f in node._fields})
        node.decorator_list = []
    return node


def _free_names(node: ast.AST) -> set[str]:
    bound: set[str] = set()
    used: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (bound if isinstance(n.ctx, ast.Store) else used).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    return used - bound


def _outcome(fn: Callable, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - recording what the engine raises
        return f"raises {type(e).__name__}", str(e)[:160]


def _evidence(src: Source, rel: str, node: ast.AST, qual: str) -> str:
    return f"{rel}:{getattr(node, 'lineno', '?')} {qual}"


def _entry_classes(src: Source, rel: str) -> list[str]:
    node = src.top_defs(rel).get("EntryClass")
    if node is None:
        return []
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return [e.id for e in elts if isinstance(e, ast.Name)]


# --------------------------------------------------------------------------- shared probes

# (target layers, id count) pairs the canonical layout is recorded for.
LAYOUT_TABLE = [(n, k) for n in (4, 5, 8, 12, 24, 28, 32, 36, 40, 46, 48, 61, 62, 64, 80, 94) for k in (1, 2, 3, 4, 5, 6, 8)]


def probe_window_flags(src: Source) -> dict:
    text = "\n".join(src.text(f) for f in src.grep(r"draft-window-size|draft_window_size"))
    flags = sorted(set(re.findall(r"--speculative-(?:dflash-)?draft-window-size", text)))
    return {"value": flags, "evidence": "string search over the package for --speculative-*draft-window-size"}


# --------------------------------------------------------------------------- SGLang


def sglang_facts(src: Source) -> dict:
    facts: dict[str, Any] = {}
    utils = "sglang/srt/speculative/dflash_utils.py"
    present = src.exists(utils) and bool(src.grep(r"\bDFLASH\b", "srt/speculative"))
    facts["dflash"] = {"value": present, "evidence": utils if present else "no speculative/dflash_utils.py"}
    if not present:
        return facts

    # canonical layout: build_target_layer_ids(num_target_layers, num_draft_layers)
    fn = src.load(utils, "build_target_layer_ids") if "build_target_layer_ids" in src.top_defs(utils) else None
    if fn is not None:
        table = {}
        for n, k in LAYOUT_TABLE:
            status, val = _outcome(fn, n, k)
            table[f"{n},{k}"] = val if status == "ok" else status
        node = src.top_defs(utils)["build_target_layer_ids"]
        facts["default_layer_ids"] = {"value": table, "evidence": _evidence(src, utils, node, "build_target_layer_ids")}

    # per-target-class capture: offset and rejected lists
    facts["target_capture"] = sglang_target_capture(src)
    facts["eagle3_capture"] = sglang_eagle3_capture(src)
    facts["dspark_capture"] = sglang_dspark_capture(src)

    # drafter layer types and windows as the DFlash reader resolves them
    facts["sliding_window"] = sglang_sliding_window(src, utils)
    facts["window_flags"] = probe_window_flags(src)
    facts["compact_cache"] = sglang_compact_cache(src)
    facts["draft_attention_backends"] = sglang_backends(src)
    facts["trtllm_mha_condition"] = sglang_trtllm_condition(src)
    facts["drafter_architectures"] = sglang_drafter_archs(src)
    facts["speculation_guard"] = sglang_speculation_guard(src)
    facts["methods"] = sglang_methods(src)
    return facts


def sglang_sliding_window(src: Source, utils: str) -> dict:
    out: dict[str, Any] = {}
    model = "sglang/srt/models/dflash.py"
    defs = src.top_defs(utils)
    get_win = src.load(utils, "get_dflash_attention_sliding_window_size") \
        if "get_dflash_attention_sliding_window_size" in defs else None
    get_types = src.load(utils, "get_dflash_layer_types") if "get_dflash_layer_types" in defs else None
    classes = {c.name: c for c in (src.tree(model).body if src.tree(model) else []) if isinstance(c, ast.ClassDef)}
    native_method = any(
        any(isinstance(m, ast.FunctionDef) and m.name == "get_attention_sliding_window_size" for m in c.body)
        for c in classes.values())
    params = src.load(model, "_get_dflash_layer_attention_params") \
        if "_get_dflash_layer_attention_params" in src.top_defs(model) else None
    out["native"] = {
        "value": bool(native_method and get_win is not None and params is not None),
        "evidence": f"{model} DFlashDraftModel.get_attention_sliding_window_size + _get_dflash_layer_attention_params"
        if native_method else f"{model}: no get_attention_sliding_window_size (draft layers get no window)",
    }
    cases = {
        "mixed": StrictConfig(num_hidden_layers=3, layer_types=[SLIDING, SLIDING, FULL], sliding_window=2048),
        "mixed_no_window": StrictConfig(num_hidden_layers=2, layer_types=[SLIDING, FULL], sliding_window=None),
        "use_swa_only": StrictConfig(num_hidden_layers=2, dflash_config={"use_swa": True, "swa_window_size": 2048}),
    }
    if get_win is not None:
        res = {}
        for name, cfg in cases.items():
            status, val = _outcome(get_win, cfg)
            res[name] = val if status == "ok" else status
        out["window_left"] = {"value": res, "evidence": f"{utils} get_dflash_attention_sliding_window_size"}
    if params is not None:
        per_layer = []
        for i in range(3):
            status, val = _outcome(params, cases["mixed"], i)
            per_layer.append(val[0] if status == "ok" else status)
        out["per_layer_window"] = {"value": per_layer, "evidence": f"{model} _get_dflash_layer_attention_params"}
    if get_types is not None:
        status, val = _outcome(get_types, cases["use_swa_only"])
        out["reads_use_swa"] = {"value": status == "ok" and bool(val),
                                "evidence": f"{utils} get_dflash_layer_types: use_swa-only config -> {val!r}"}
    return out


def sglang_compact_cache(src: Source) -> dict:
    for rel in src.grep(r"def alloc_memory_pool", "srt/speculative"):
        if "dflash" not in rel:
            continue
        tree = src.tree(rel)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.FunctionDef) and node.name == "alloc_memory_pool":
                body = ast.unparse(node)
                if "use_compact_draft_cache" in body and "req_to_token_pool" in body:
                    return {"value": "all_layers", "evidence": _evidence(
                        src, rel, node, "alloc_memory_pool: with the window flag the draft worker gets a private "
                        "compact req->token table, shared by every draft layer")}
    text = "\n".join(src.text(f) for f in src.grep(r"draft_window_size", "srt/speculative"))
    if "draft_window_size" in text:
        return {"value": "all_layers", "evidence": "draft_window_size limits the draft worker's req->token view (no per-layer code)"}
    return {"value": None, "evidence": "no compact draft cache"}


def _supported_draft_backends(src: Source) -> tuple[list[str], str]:
    """The draft attention backends DFLASH accepts (others silently fall back): the
    ``supported_draft_backends`` tuple of the DFLASH hook/worker, else DRAFT_ATTENTION_BACKEND_CHOICES."""
    for rel in src.grep(r"supported_draft_backends\s*=", "srt"):
        tree = src.tree(rel)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "supported_draft_backends"
                                                    for t in node.targets) and isinstance(node.value, (ast.Tuple, ast.List)):
                names = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
                return names, f"{rel}:{node.lineno} supported_draft_backends"
    for rel in ("sglang/srt/arg_groups/choices.py", "sglang/srt/server_args.py"):
        node = src.top_defs(rel).get("DRAFT_ATTENTION_BACKEND_CHOICES")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)], f"{rel} DRAFT_ATTENTION_BACKEND_CHOICES"
    return [], "no list of DFLASH draft backends"


def sglang_backends(src: Source) -> dict:
    names, where = _supported_draft_backends(src)
    registry = "sglang/srt/layers/attention/attention_registry.py"
    reg = src.text(registry)
    out = {}
    for name in names:
        m = re.search(r'@register_attention_backend\("%s"\)\s*\ndef (\w+)' % re.escape(name), reg)
        files = []
        if m:
            fn_node = src.top_defs(registry).get(m.group(1))
            if fn_node is not None:
                for imp in ast.walk(fn_node):
                    if isinstance(imp, ast.ImportFrom) and imp.module and "attention" in imp.module:
                        r = src.module_rel(imp.module)
                        if r and r not in files:
                            files.append(r)
        reads = [f for f in files if "layer.sliding_window_size" in src.text(f)]
        out[name] = {"backend_files": files, "reads_layer_window": bool(reads)}
    return {"value": out, "evidence": f"{where}; {registry} register_attention_backend -> backend module; "
            "'layer.sliding_window_size' read in that module"}


def sglang_trtllm_condition(src: Source) -> dict:
    for rel in src.grep(r"trtllm_mha", "srt/arg_groups") + src.grep(r"trtllm_mha", "srt/server_args.py"):
        text = src.text(rel)
        i = text.find('draft_backend == "trtllm_mha"')
        if i < 0:
            continue
        block = text[i:i + 2500]
        if "does not support 'trtllm_mha'" in block[:400]:
            return {"value": {"accepted_when": "never", "otherwise": "falls back with a warning"},
                    "evidence": f"{rel}:{text[:i].count(chr(10)) + 1} trtllm_mha draft backend refused for DFLASH"}
        reads_text_causal = bool(re.search(r'getattr\(\s*draft_text_config\s*,\s*"is_causal"', block))
        reads_dflash_causal = "dflash_config" in block and '"causal"' in block
        line = text[:i].count("\n") + 1
        return {"value": {"all_sliding": SLIDING in block, "text_config_is_causal": reads_text_causal,
                          "dflash_config_causal": reads_dflash_causal, "otherwise": "falls back with a warning"},
                "evidence": f"{rel}:{line} trtllm_mha draft backend condition"}
    return {"value": None, "evidence": "no trtllm_mha draft condition"}


def sglang_drafter_archs(src: Source) -> dict:
    archs: list[str] = []
    for rel in src.files("srt/models"):
        if "dflash" in Path(rel).name:
            archs += _entry_classes(src, rel)
    return {"value": sorted(set(archs)), "evidence": "EntryClass of sglang/srt/models/*dflash*.py"}


# -- target classes ----------------------------------------------------------------

CAPTURE_N = 64
CAPTURE_PROBES = {
    "canonical": [1, 16, 31, 46, 61],
    "last": [1, 16, 31, 46, 63],
    "past_last": [1, 16, 31, 46, 64],
    "duplicate": [1, 16, 16, 46, 61],
    "unsorted": [16, 1, 31, 46, 61],
}


def sglang_speculation_guard(src: Source) -> dict:
    """Whether the release has a switch that turns speculation down by load, and for which algorithms:
    ``--speculative-adaptive`` (speculative/adaptive_spec_params.py) is refused for every algorithm
    ``adaptive_unsupported_reason`` does not list, with a warning and static speculation."""
    rel = "sglang/srt/speculative/adaptive_spec_params.py"
    fn = src.top_defs(rel).get("adaptive_unsupported_reason")
    if fn is None:
        return {"value": {"switch": None, "algorithms": [], "dflash": False},
                "evidence": f"{rel}: no adaptive_unsupported_reason (no load-dependent speculation switch)"}
    algos: list[str] = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Compare) and "speculative_algorithm" in ast.unparse(node.left)
                and isinstance(node.ops[0], ast.NotIn) and isinstance(node.comparators[0], (ast.Tuple, ast.List))):
            algos = [e.value for e in node.comparators[0].elts if isinstance(e, ast.Constant)]
            break
    tiers = src.top_defs(rel).get("DEFAULT_ADAPTIVE_CONFIG")
    keys = [k.value for k in tiers.value.keys if isinstance(k, ast.Constant)] \
        if tiers is not None and isinstance(getattr(tiers, "value", None), ast.Dict) else []
    return {"value": {"switch": "--speculative-adaptive", "algorithms": sorted(algos), "dflash": "DFLASH" in algos,
                      "batch_size_tiers": keys},
            "evidence": _evidence(src, rel, fn, "adaptive_unsupported_reason: speculative_algorithm not in "
                                  f"{tuple(algos)} -> adaptive disabled, static speculation")}


def _class_index(src: Source) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    idx: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for rel in src.files("srt/models"):
        tree = src.tree(rel)
        for node in tree.body if tree else ():
            if isinstance(node, ast.ClassDef):
                idx.setdefault(node.name, []).append((rel, node))
    return idx


def _resolve_class(src: Source, idx, rel: str, name: str) -> tuple[str, ast.ClassDef] | None:
    hit = src.resolve_name(rel, name)
    if hit and isinstance(hit[1], ast.ClassDef):
        return hit  # type: ignore[return-value]
    cands = idx.get(name, [])
    return cands[0] if len(cands) == 1 else None


def _mro(src: Source, idx, rel: str, cls: ast.ClassDef, depth: int = 8) -> list[tuple[str, ast.ClassDef]]:
    out = [(rel, cls)]
    if depth == 0:
        return out
    for b in cls.bases:
        if isinstance(b, ast.Name):
            hit = _resolve_class(src, idx, rel, b.id)
            if hit:
                out += _mro(src, idx, hit[0], hit[1], depth - 1)
    return out


def _find_method(mro, name: str):
    for rel, c in mro:
        for n in c.body:
            if isinstance(n, ast.FunctionDef) and n.name == name:
                return rel, c, n
    return None


def _init_of(cls: ast.ClassDef) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args] + [a.arg for a in fn.args.kwonlyargs]


def _default(fn: ast.FunctionDef, name: str) -> ast.expr | None:
    pos = [a.arg for a in fn.args.args]
    if name in pos:
        k = pos.index(name) - (len(pos) - len(fn.args.defaults))
        return fn.args.defaults[k] if 0 <= k < len(fn.args.defaults) else None
    kw = [a.arg for a in fn.args.kwonlyargs]
    if name in kw:
        return fn.args.kw_defaults[kw.index(name)]
    return None


def _super_init_arg(sinit: ast.FunctionDef, base_init: ast.FunctionDef, name: str) -> ast.expr | None:
    """The expression a subclass's ``super().__init__(...)`` passes for the base's parameter ``name``."""
    for call in ast.walk(sinit):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"):
            continue
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        base_pos = [a.arg for a in base_init.args.args][1:]  # without self
        if name in base_pos and base_pos.index(name) < len(call.args):
            return call.args[base_pos.index(name)]
    return None


def _class_attr(mro, name: str):
    for rel, c in mro:
        for n in c.body:
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                return rel, n.value
    return None


def _attr_class(src: Source, idx, mro, attr: str) -> tuple[str, ast.ClassDef] | None:
    """The class of ``self.<attr>`` from assignments in __init__ along the MRO: ``self.attr = Cls(...)``,
    ``self.attr = self.cls_attr(...)`` (a class attribute), or ``self.attr = param(...)`` where a subclass
    passes the class to ``super().__init__`` (by keyword or position) or the parameter defaults to it."""
    for i, (rel, c) in enumerate(mro):
        init = _init_of(c)
        if init is None:
            continue
        for node in ast.walk(init):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            if not any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                       and t.value.id == "self" for t in node.targets):
                continue
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                hit = _class_attr(mro, func.attr)
                if hit and isinstance(hit[1], ast.Name):
                    return _resolve_class(src, idx, hit[0], hit[1].id)
                if hit and isinstance(hit[1], ast.Attribute) and isinstance(hit[1].value, ast.Name):
                    mod = src.imports(hit[0]).get(hit[1].value.id)
                    mrel = src.module_rel(mod) if mod else None
                    if mrel:
                        return _resolve_class(src, idx, mrel, hit[1].attr)
                continue
            if not isinstance(func, ast.Name):
                continue
            if func.id not in _params(init):
                return _resolve_class(src, idx, rel, func.id)
            # a constructor parameter: what the nearest subclass passes, else the default
            name, base_init = func.id, init
            for j in range(i - 1, -1, -1):
                srel, sc = mro[j]
                sinit = _init_of(sc)
                if sinit is None:
                    continue
                expr = _super_init_arg(sinit, base_init, name)
                if expr is None:
                    continue
                if isinstance(expr, ast.Name) and expr.id in _params(sinit):
                    d = _default(sinit, expr.id)
                    if isinstance(d, ast.Name):
                        return _resolve_class(src, idx, srel, d.id)
                    name, base_init = expr.id, sinit
                    continue
                if isinstance(expr, ast.Name):
                    return _resolve_class(src, idx, srel, expr.id)
            d = _default(init, func.id)
            if isinstance(d, ast.Name):
                return _resolve_class(src, idx, rel, d.id)
    return None


def _run_capture(src: Source, idx, rel: str, cls: ast.ClassDef, ids: list[int], chain: list[str], depth: int = 4):
    """Run the class's set_dflash_layers_to_capture on ``ids``: (status, captured list or None)."""
    mro = _mro(src, idx, rel, cls)
    found = _find_method(mro, "set_dflash_layers_to_capture")
    if found is None:
        return "no method", None
    mrel, mcls, _node = found
    chain.append(f"{mrel}:{mcls.name}.set_dflash_layers_to_capture")
    fn = src.method(mrel, mcls, "set_dflash_layers_to_capture")
    if fn is None:
        return "not compilable", None
    layers = [types.SimpleNamespace() for _ in range(CAPTURE_N)]
    calls: list = []
    overrides = {
        "pp_group.is_last_rank": True, "pp_group.world_size": 1, "pp_group.is_first_rank": True,
        "model.layers": layers, "layers": layers, "config.num_hidden_layers": CAPTURE_N,
        "model.start_layer": 0, "model.end_layer": CAPTURE_N, "start_layer": 0, "end_layer": CAPTURE_N,
        "config.text_config.num_hidden_layers": CAPTURE_N,
    }
    self = Stub("", overrides, calls)
    status, val = _outcome(fn, self, list(ids))
    if status != "ok":
        return status, val
    captured = None
    for kind, path, *rest in calls:
        if kind == "set" and path.endswith("layers_to_capture"):
            captured = list(rest[0])
        if kind == "call" and path.endswith(".set_dflash_layers_to_capture") and rest and rest[0]:
            attr = path[: -len(".set_dflash_layers_to_capture")]
            inner = list(rest[0][0])
            target = _attr_class(src, idx, mro, attr.split(".")[-1]) if "." not in attr else None
            if target is None:
                return "delegates to unresolved " + attr, inner
            st, sub = _run_capture(src, idx, target[0], target[1], inner, chain, depth - 1)
            if st == "no method" and attr == "model":
                # an inner model that only stores the list: captured as given
                return "ok", inner
            return st, sub
    return "ok", captured


def sglang_target_capture(src: Source) -> dict:
    idx = _class_index(src)
    out: dict[str, Any] = {}
    for rel in src.files("srt/models"):
        if "set_dflash_layers_to_capture" not in src.text(rel) and "EntryClass" not in src.text(rel):
            continue
        for arch in _entry_classes(src, rel):
            hit = _resolve_class(src, idx, rel, arch)
            if hit is None:
                continue
            if _find_method(_mro(src, idx, hit[0], hit[1]), "set_dflash_layers_to_capture") is None:
                continue
            rec: dict[str, Any] = {}
            chain: list[str] = []
            status, captured = _run_capture(src, idx, hit[0], hit[1], CAPTURE_PROBES["canonical"], chain)
            if status == "ok" and captured is not None and len(captured) == len(CAPTURE_PROBES["canonical"]):
                offs = {c - i for c, i in zip(captured, CAPTURE_PROBES["canonical"])}
                rec["offset"] = offs.pop() if len(offs) == 1 else None
            else:
                rec["offset"] = None
                rec["canonical"] = status if status != "ok" else f"captured {captured}"
            rejects = {}
            for probe, ids in CAPTURE_PROBES.items():
                if probe == "canonical":
                    continue
                st, _ = _run_capture(src, idx, hit[0], hit[1], ids, [])
                rejects[probe] = st if st.startswith("raises") else "accepted"
            rec["probes"] = rejects
            rec["chain"] = chain
            out[arch] = rec
    return {"value": out, "num_target_layers": CAPTURE_N, "probes": CAPTURE_PROBES,
            "evidence": "set_dflash_layers_to_capture of every EntryClass under sglang/srt/models, run with a "
            f"{CAPTURE_N}-layer stub model"}


def sglang_eagle3_capture(src: Source) -> dict:
    """Which target classes can hand EAGLE-3 aux hidden states to a drafter: SGLang raises at start-up unless
    the target model has ``set_eagle3_layers_to_capture`` (``configure_aux_hidden_state_capture``). Every
    EntryClass under srt/models, with the class that defines the method along its bases."""
    idx = _class_index(src)
    supported: dict[str, str] = {}
    unsupported: list[str] = []
    for rel in src.files("srt/models"):
        for arch in _entry_classes(src, rel):
            hit = _resolve_class(src, idx, rel, arch)
            found = _find_method(_mro(src, idx, hit[0], hit[1]), "set_eagle3_layers_to_capture") if hit else None
            if found is None:
                unsupported.append(arch)
            else:
                supported[arch] = f"{found[0]}:{found[1].name}.set_eagle3_layers_to_capture"
    checks = []
    for rel in src.grep(r"hasattr\(\s*model,\s*\"set_eagle3_layers_to_capture\"\s*\)", "srt/model_executor"):
        tree = src.tree(rel)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(c, ast.Raise) for c in ast.walk(node)) and "set_eagle3_layers_to_capture" in ast.unparse(node):
                checks.append(_evidence(src, rel, node, node.name))
    return {"value": {"supported": dict(sorted(supported.items())), "unsupported": sorted(set(unsupported) - set(supported)),
                      "unlisted": "the Transformers fallback (models/transformers.py), which has no set_eagle3_layers_to_capture"},
            "evidence": "; ".join(checks or ["no set_eagle3_layers_to_capture check found"]) + ": raises ValueError "
            "unless the target model has set_eagle3_layers_to_capture; "
            "EntryClass of sglang/srt/models/*.py, method looked up along the class bases"}


def sglang_dspark_capture(src: Source) -> dict:
    """Which target classes have their own DSpark capture hook: under DSPARK, SGLang calls
    ``set_dspark_layers_to_capture`` where the target model has it, else ``set_dflash_layers_to_capture`` (recorded
    per class under ``target_capture``), and raises when it has neither (``configure_aux_hidden_state_capture``).
    Every EntryClass under srt/models that has the DSpark hook along its bases."""
    idx = _class_index(src)
    supported: dict[str, str] = {}
    for rel in src.files("srt/models"):
        if "EntryClass" not in src.text(rel):
            continue
        for arch in _entry_classes(src, rel):
            hit = _resolve_class(src, idx, rel, arch)
            found = _find_method(_mro(src, idx, hit[0], hit[1]), "set_dspark_layers_to_capture") if hit else None
            if found is not None:
                supported[arch] = f"{found[0]}:{found[1].name}.set_dspark_layers_to_capture"
    checks = []
    for rel in src.grep(r"set_dspark_layers_to_capture", "srt/model_executor"):
        tree = src.tree(rel)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and any(isinstance(c, ast.Raise) for c in ast.walk(node)) \
                    and "set_dflash_layers_to_capture" in ast.unparse(node) \
                    and "set_dspark_layers_to_capture" in ast.unparse(node):
                checks.append(_evidence(src, rel, node, node.name))
    return {"value": {"supported": dict(sorted(supported.items()))},
            "evidence": "; ".join(checks or ["no set_dspark_layers_to_capture check found"]) + ": DSPARK calls "
            "set_dspark_layers_to_capture where the target has it, else set_dflash_layers_to_capture (target_capture), "
            "and raises ValueError when it has neither (DFLASH needs set_dflash_layers_to_capture); EntryClass of "
            "sglang/srt/models/*.py, method looked up along the class bases"}


# --------------------------------------------------------------------------- vLLM


def vllm_facts(src: Source) -> dict:
    facts: dict[str, Any] = {}
    spec = "vllm/config/speculative.py"
    model = "vllm/model_executor/models/qwen3_dflash.py"
    present = src.exists(model) and '"dflash"' in src.text(spec)
    facts["dflash"] = {"value": present, "evidence": model if present else "no models/qwen3_dflash.py"}
    if not present:
        return facts
    facts["layer_ids_offset"] = vllm_layer_ids(src)
    facts["sliding_window"] = vllm_sliding(src, model)
    facts["drafter_architectures"] = vllm_archs(src)
    facts["non_causal_backends"] = vllm_noncausal(src)
    facts["draft_context"] = vllm_draft_context(src)
    facts["speculation_guard"] = vllm_speculation_guard(src)
    facts["methods"] = vllm_methods(src)
    facts["eagle3_capture"] = vllm_eagle3_capture(src)
    return facts


def vllm_draft_context(src: Source) -> dict:
    """Whether the release raises a draft's max_position_embeddings to the served context
    (SpeculativeConfig._maybe_override_draft_max_position_embeddings), per RoPE type."""
    spec = "vllm/config/speculative.py"
    tree = src.tree(spec)
    cls = next((c for c in (tree.body if tree else []) if isinstance(c, ast.ClassDef) and c.name == "SpeculativeConfig"), None)
    name = "_maybe_override_draft_max_position_embeddings"
    if cls is None or not any(isinstance(n, ast.FunctionDef) and n.name == name for n in cls.body):
        return {"value": {"raises_draft_limit": False},
                "evidence": f"{spec}: no {name}; a draft shorter than the served context keeps its own RoPE cache"}
    # the call site's condition, evaluated for method "dflash" (0.27-0.32 apply it to eagle/eagle3 only)
    applies, where = False, "no call site"
    for node in ast.walk(cls):
        if isinstance(node, ast.If) and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                                            and c.func.attr == name for c in ast.walk(node)):
            try:
                test = compile(ast.Expression(node.test), "cond", "eval")
                applies = bool(eval(test, {"__builtins__": {}}, {"self": types.SimpleNamespace(method="dflash")}))
                where = f"{spec}:{node.lineno} if {ast.unparse(node.test)}"
            except Exception as e:  # noqa: BLE001 - a condition the probe cannot evaluate
                where = f"{spec}:{node.lineno} if {ast.unparse(node.test)} ({type(e).__name__})"
    if not applies:
        return {"value": {"raises_draft_limit": False, "call_site": where},
                "evidence": f"{spec}: SpeculativeConfig.{name} is not applied to dflash drafts"}
    fn = src.method(spec, cls, name)
    res = {}
    for rope in ("default", "linear", "yarn", "llama3", "dynamic"):
        cfg = StrictConfig(max_position_embeddings=4096, rope_parameters={"rope_type": rope, "factor": 4.0})
        status, _ = _outcome(fn, cfg, 16384)  # staticmethod: (draft_hf_config, target_max_model_len)
        res[rope] = cfg.max_position_embeddings if status == "ok" else status
    node = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return {"value": {"raises_draft_limit": True, "call_site": where, "draft_4096_served_16384": res},
            "evidence": _evidence(src, spec, node, f"SpeculativeConfig.{name}")}


def vllm_layer_ids(src: Source) -> dict:
    """Run each model runner's aux-layer-id function on a z-lab style drafter config."""
    ids = [3, 7, 11]
    out: dict[str, Any] = {}
    where = {"v1": "vllm/v1/worker/gpu_model_runner.py", "v2": "vllm/v1/worker/gpu/spec_decode"}
    for runner, loc in where.items():
        files = [loc] if loc.endswith(".py") else src.files(loc[len("vllm/"):])
        for rel in files:
            tree = src.tree(rel)
            if tree is None:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef) or '"target_layer_ids"' not in ast.unparse(node) and \
                        "'target_layer_ids'" not in ast.unparse(node):
                    continue
                body = ast.unparse(node)
                if "dflash_config" not in body:
                    continue
                cls = next((c for c in tree.body if isinstance(c, ast.ClassDef) and node in c.body), None)
                cfg = StrictConfig(dflash_config={"target_layer_ids": list(ids), "mask_token_id": 5})
                if cls is not None:
                    fn = src.method(rel, cls, node.name)
                    self = Stub("", {"speculative_config.draft_model_config.hf_config": cfg,
                                         "speculative_config.method": "dflash",
                                         "speculative_config.draft_model_config.hf_text_config": cfg})
                    args: list[Any] = [self] + [cfg] * (len(node.args.args) - 1)
                else:
                    fn = src.load(rel, node.name)
                    spec_stub = Stub("", {"draft_model_config.hf_config": cfg, "method": "dflash",
                                          "draft_model_config.hf_text_config": cfg})
                    args = [spec_stub if "spec" in a.arg or "vllm_config" in a.arg else cfg for a in node.args.args]
                if fn is None:
                    continue
                status, val = _outcome(fn, *args)
                got = list(val) if status == "ok" and isinstance(val, (list, tuple)) else None
                if got is None or len(got) != len(ids):
                    out.setdefault(runner, {"value": None, "evidence": f"{rel}:{node.lineno} {node.name} -> {status} {val!r}"[:200]})
                    continue
                offs = {g - i for g, i in zip(got, ids)}
                out[runner] = {"value": offs.pop() if len(offs) == 1 else None,
                               "evidence": f"{rel}:{node.lineno} {node.name}: target_layer_ids {ids} -> {got}"}
    for runner in where:
        out.setdefault(runner, {"value": None, "evidence": "no function maps dflash_config.target_layer_ids"})
    return out


def vllm_sliding(src: Source, model: str) -> dict:
    fn_name = "_resolve_layer_attention"
    if fn_name not in src.top_defs(model):
        reads = "sliding_window" in src.text(model) or "layer_types" in src.text(model)
        return {"value": {"supported": False, "reads_layer_types": reads},
                "evidence": f"{model}: no {fn_name}; draft layers are built without a sliding window"}
    res: dict[str, Any] = {}
    cases = {
        "all_sliding": StrictConfig(layer_types=[SLIDING, SLIDING], sliding_window=2048, dflash_config={}),
        "mixed": StrictConfig(layer_types=[SLIDING, FULL], sliding_window=2048, dflash_config={}),
        "use_swa_only": StrictConfig(layer_types=None, sliding_window=None,
                                     dflash_config={"use_swa": True, "swa_window_size": 2048}),
        "use_swa_all_full_types": StrictConfig(layer_types=[FULL, FULL], sliding_window=None,
                                               dflash_config={"use_swa": True, "swa_window_size": 2048}),
        "sliding_no_window": StrictConfig(layer_types=[SLIDING, SLIDING], sliding_window=None, dflash_config={}),
    }
    for v2 in (False, True):
        vcfg = types.SimpleNamespace(use_v2_model_runner=v2)
        fn = src.load(model, fn_name, stubs={"get_current_vllm_config": lambda vcfg=vcfg: vcfg})
        if fn is None:
            return {"value": None, "evidence": f"{model}: {fn_name} not compilable"}
        for name, cfg in cases.items():
            status, val = _outcome(fn, cfg, 0)
            key = f"{name}@{'v2' if v2 else 'v1'}"
            res[key] = list(val) if status == "ok" and isinstance(val, tuple) else status
    node = src.top_defs(model)[fn_name]
    return {"value": {"supported": True, "cases": res}, "evidence": _evidence(src, model, node, fn_name)}


def vllm_archs(src: Source) -> dict:
    reg = "vllm/model_executor/models/registry.py"
    node = src.top_defs(reg).get("_SPECULATIVE_DECODING_MODELS")
    keys: list[str] = []
    if node is not None and isinstance(node.value, ast.Dict):  # type: ignore[union-attr]
        keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]  # type: ignore[union-attr]
    eagle = src.text("vllm/transformers_utils/configs/eagle.py")
    renames = bool(re.search(r'startswith\("DFlash"\)', eagle))
    served = sorted(k for k in keys if k.startswith("DFlash") or k.endswith("DFlash")) if renames else \
        sorted(k for k in keys if "DFlash" in k)
    return {"value": {"registered": served, "renames_to_dflash": renames},
            "evidence": f"{reg} _SPECULATIVE_DECODING_MODELS; vllm/transformers_utils/configs/eagle.py "
            "(an architecture X is looked up as DFlashX unless it starts or ends with DFlash)"}


# registry tables of generative models (embedding, reward and classification models serve no drafts)
VLLM_TARGET_TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS",
                      "_TRANSFORMERS_BACKEND_MODELS")


def _bases_closure(src: Source, rel: str, cls: ast.ClassDef, depth: int = 10) -> list[str]:
    """The names of a class and of every base reachable through the module's imports."""
    out = [cls.name]
    if depth == 0:
        return out
    for b in cls.bases:
        if not isinstance(b, ast.Name):
            continue
        hit = src.resolve_name(rel, b.id)
        if hit and isinstance(hit[1], ast.ClassDef):
            out += _bases_closure(src, hit[0], hit[1], depth - 1)
        else:
            out.append(b.id)
    return out


def vllm_eagle3_capture(src: Source) -> dict:
    """Which target architectures can hand EAGLE-3 (and DFlash/DSpark) aux hidden states to a drafter: both
    model runners raise RuntimeError at load unless ``supports_eagle3(model)`` (the class has SupportsEagle3 in
    its bases). Every architecture of the registry's generative tables, with the class it loads."""
    reg = "vllm/model_executor/models/registry.py"
    defs = src.top_defs(reg)
    supported: dict[str, str] = {}
    unsupported: dict[str, str] = {}
    for table in VLLM_TARGET_TABLES:
        node = defs.get(table)
        if node is None or not isinstance(getattr(node, "value", None), ast.Dict):
            continue
        for k, v in zip(node.value.keys, node.value.values):  # type: ignore[union-attr]
            if not (isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) >= 2
                    and all(isinstance(e, ast.Constant) for e in v.elts[:2])):
                continue
            mod, cname = v.elts[0].value, v.elts[1].value  # type: ignore[union-attr]
            rel = src.module_rel(mod if mod.startswith("vllm.") else f"vllm.model_executor.models.{mod}")
            hit = src.resolve_name(rel, cname) if rel else None
            if hit is None or not isinstance(hit[1], ast.ClassDef):
                continue
            where = f"{hit[0]}:{cname}"
            (supported if "SupportsEagle3" in _bases_closure(src, hit[0], hit[1]) else unsupported)[k.value] = where
    # the methods whose drafts need the aux hidden states (V2 runner: requires_aux_hidden_states, eagle3 unless
    # eagle_config.use_aux_hidden_state is false; the V1 runner sets use_aux_hidden_state_outputs alike)
    methods: list[str] = []
    rel_u = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
    fn_u = src.top_defs(rel_u).get("requires_aux_hidden_states")
    for node in ast.walk(fn_u) if isinstance(fn_u, ast.FunctionDef) else ():
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.comparators[0], (ast.Tuple, ast.List)) \
                and "method" in ast.unparse(node.left):
            if isinstance(node.ops[0], ast.In):
                methods += [e.value for e in node.comparators[0].elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq) \
                and "method" in ast.unparse(node.left) and isinstance(node.comparators[0], ast.Constant):
            methods.append(node.comparators[0].value)
    checks = []
    for rel, fn_name in (("vllm/v1/worker/gpu_model_runner.py", "_setup_eagle3_aux_hidden_state_outputs"),
                         ("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "set_eagle3_aux_hidden_state_layers")):
        tree = src.tree(rel)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and node.name == fn_name and "supports_eagle3" in ast.unparse(node):
                checks.append(_evidence(src, rel, node, fn_name))
    if isinstance(fn_u, ast.FunctionDef):
        checks.append(_evidence(src, rel_u, fn_u, "requires_aux_hidden_states") + f" (methods {sorted(set(methods))})")
    return {"value": {"supported": dict(sorted(supported.items())), "unsupported": dict(sorted(unsupported.items())),
                      "unlisted": "the Transformers modeling backend (models/transformers/base.py Base), which is SupportsEagle3",
                      "methods": sorted(set(methods))},
            "evidence": "; ".join(checks or ["no supports_eagle3 check found"]) + ": RuntimeError unless "
            "supports_eagle3(model) (vllm/model_executor/models/interfaces.py SupportsEagle3); architectures from "
            f"{reg} {', '.join(VLLM_TARGET_TABLES)}"}


def vllm_noncausal(src: Source) -> dict:
    reg = "vllm/v1/attention/backends/registry.py"
    enum_paths: dict[str, str] = {}
    for m in re.finditer(r'^\s+([A-Z0-9_]+)\s*=\s*\(?\s*"(vllm\.v1\.attention\.backends\.[\w.]+)"', src.text(reg), re.M):
        enum_paths[m.group(2)] = m.group(1)
    out = []
    for rel in src.files("v1/attention/backends"):
        tree = src.tree(rel)
        for cls in tree.body if tree else ():
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "supports_non_causal":
                    rets = [r for r in ast.walk(fn) if isinstance(r, ast.Return)]
                    if rets and all(isinstance(r.value, ast.Constant) and r.value.value is True for r in rets):
                        dotted = rel[:-3].replace("/", ".") + "." + cls.name
                        out.append(enum_paths.get(dotted, dotted))
    return {"value": sorted(set(out)), "evidence": "AttentionBackend.supports_non_causal() returning True under "
            "vllm/v1/attention/backends; names from " + reg}


def vllm_speculation_guard(src: Source) -> dict:
    """The speculative-config keys that limit speculation by batch size, and whether the V1 engine uses them.

    ``disable_by_batch_size`` (the V0 switch) must be a SpeculativeConfig field, else the release rejects it
    (config/utils.py ``config``: extra fields forbidden). ``num_speculative_tokens_per_batch_size`` (dynamic
    speculative decoding) is run through the release's own ``build_dynamic_sd_schedule_lookup`` on a
    schedule that switches speculation off from batch size 4."""
    spec = "vllm/config/speculative.py"
    tree = src.tree(spec)
    cls = next((c for c in (tree.body if tree else []) if isinstance(c, ast.ClassDef) and c.name == "SpeculativeConfig"), None)
    fields = {n.target.id for n in (cls.body if cls else []) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    value: dict[str, Any] = {
        "disable_by_batch_size": "disable_by_batch_size" in fields,
        "unknown_keys_rejected": 'extra="forbid"' in src.text("vllm/config/utils.py"),
        "v1_reads_disable_by_batch_size": bool(src.grep(r"\bdisable_by_batch_size\b", "v1")),
    }
    evidence = [f"{spec} SpeculativeConfig fields; vllm/config/utils.py config (extra fields forbidden)"]
    key = "num_speculative_tokens_per_batch_size"
    dyn = "vllm/v1/spec_decode/dynamic/utils.py"
    if key not in fields or "build_dynamic_sd_schedule_lookup" not in src.top_defs(dyn):
        value["batch_size_schedule"] = None
        return {"value": value, "evidence": "; ".join(evidence + [f"no SpeculativeConfig.{key}"])}
    fn = src.load(dyn, "build_dynamic_sd_schedule_lookup")
    schedule = [[1, 3, 3], [4, 4, 0]]
    status, lookup = _outcome(fn, schedule, 8, 3)
    sched = "vllm/v1/core/sched/scheduler.py"
    stext = src.text(sched)
    runner = src.text("vllm/v1/worker/gpu_model_runner.py")
    m = re.search(r"use_dflash\(\)(.|\n){0,6000}?num_speculative_tokens=num_spec_tokens_to_schedule", runner)
    base = src.text("vllm/v1/spec_decode/llm_base_proposer.py")
    value.update({
        "batch_size_schedule": key,
        # index b: speculative tokens the scheduler asks for at batch size b (index 0 unused)
        "lookup": {"schedule": schedule, "max_num_seqs": 8, "num_speculative_tokens": 3,
                   "per_batch_size": list(lookup)[1:] if status == "ok" else status},
        "scheduler_reads_schedule": key in stext and "num_spec_tokens_to_schedule=" in stext,
        "v1_runner_passes_k_to_dflash": m is not None,
        "drafter_skips_zero": bool(re.search(r"if self\.num_speculative_tokens == 0:", base)),
    })
    evidence.append(f"{dyn} build_dynamic_sd_schedule_lookup (run); {sched} Scheduler.__init__/schedule "
                    "(dynamic_sd_lookup -> SchedulerOutput.num_spec_tokens_to_schedule); vllm/v1/worker/gpu_model_runner.py "
                    "propose_draft_token_ids (dflash: num_speculative_tokens=num_spec_tokens_to_schedule); "
                    "vllm/v1/spec_decode/llm_base_proposer.py propose (K=0: empty drafts)")
    return {"value": value, "evidence": "; ".join(evidence)}


# --------------------------------------------------------------------------- speculative methods (issue 25)


def _flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def sglang_methods(src: Source) -> dict:
    """The release's speculative algorithms (enum members of speculative/spec_info.py SpeculativeAlgorithm),
    the aliases that resolve to them (spec_registry._RESERVED_ALIASES -> EAGLE) and its --speculative-* flags
    (the ``spec`` namespace fields of arg_groups/fields/spec.py, else the ServerArgs fields of server_args.py)."""
    info = "sglang/srt/speculative/spec_info.py"
    algos: list[str] = []
    node = src.top_defs(info).get("SpeculativeAlgorithm")
    if isinstance(node, ast.ClassDef):
        for st in node.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and st.targets[0].id != "NONE":  # NONE: speculation off
                algos.append(st.targets[0].id)
    aliases: dict[str, str] = {}
    reg = "sglang/srt/speculative/spec_registry.py"
    rnode = src.top_defs(reg).get("_RESERVED_ALIASES")
    if rnode is not None:
        for c in ast.walk(rnode):
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                aliases[c.value] = "EAGLE"  # SpeculativeAlgorithm.from_string: a reserved alias is EAGLE
    fields: list[str] = []
    for rel, cls in (("sglang/srt/arg_groups/fields/spec.py", "Spec"), ("sglang/srt/server_args.py", "ServerArgs")):
        cnode = src.top_defs(rel).get(cls)
        if isinstance(cnode, ast.ClassDef):
            fields = [st.target.id for st in cnode.body if isinstance(st, ast.AnnAssign)
                      and isinstance(st.target, ast.Name) and st.target.id.startswith("speculative_")]
            if fields:
                where = f"{rel} {cls}"
                break
    else:
        where = "no speculative_* fields found"
    return {"value": {"algorithms": sorted(algos), "aliases": aliases, "flags": sorted(_flag_of(f) for f in fields)},
            "evidence": f"{info} SpeculativeAlgorithm (enum members); {reg} _RESERVED_ALIASES + "
                        f"SpeculativeAlgorithm.from_string (alias -> EAGLE); {where} (speculative_* fields -> flags)"}


def _literal_strings(src: Source, rel: str, name: str, seen: set[str] | None = None) -> list[str]:
    """The strings of a module-level ``Name = Literal[...]`` alias, following aliases it nests."""
    seen = seen if seen is not None else set()
    if name in seen:
        return []
    seen.add(name)
    node = src.top_defs(rel).get(name)
    value = getattr(node, "value", None)
    if not isinstance(value, ast.Subscript):
        return []
    sl = value.slice
    elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
    out: list[str] = []
    for e in elts:
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            out.append(e.value)
        elif isinstance(e, ast.Name):
            out += _literal_strings(src, rel, e.id, seen)
    return out


def vllm_methods(src: Source) -> dict:
    """``speculative_config.method`` values of the release (config/speculative.py SpeculativeMethod, nested
    Literal aliases expanded), the model-specific MTP names __post_init__ rewrites to "mtp" (MTPModelTypes),
    and the SpeculativeConfig fields (the keys --speculative-config accepts)."""
    spec = "vllm/config/speculative.py"
    names = _literal_strings(src, spec, "SpeculativeMethod")
    mtp = [n for n in _literal_strings(src, spec, "MTPModelTypes") if n != "mtp"]
    rewrites = bool(re.search(r'MTPModelTypes\)\s+and\s+self\.method\s*!=\s*"mtp"', src.text(spec)))
    fields: list[str] = []
    cnode = src.top_defs(spec).get("SpeculativeConfig")
    if isinstance(cnode, ast.ClassDef):
        fields = [st.target.id for st in cnode.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)]
    return {"value": {"names": sorted(set(names)), "aliases": {n: "mtp" for n in sorted(mtp)} if rewrites else {},
                      "config_fields": sorted(fields)},
            "evidence": f"{spec} SpeculativeMethod (Literal, nested aliases expanded); MTPModelTypes + "
                        "SpeculativeConfig.__post_init__ ('method `%s` is deprecated and replaced with mtp'); "
                        "SpeculativeConfig fields (the --speculative-config keys)"}


# --------------------------------------------------------------------------- main


def record(engine: str, version: str, root: Path) -> dict:
    src = Source(root, engine)
    facts = sglang_facts(src) if engine == "sglang" else vllm_facts(src)
    return {"schema": SCHEMA, "engine": engine, "version": version,
            "recorded_from": f"{engine}=={version} wheel sources (pip download --no-deps); e2e/flagdrift/engine_facts.py",
            "facts": facts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, choices=["sglang", "vllm"])
    p.add_argument("--version", required=True)
    p.add_argument("--src", required=True, type=Path, help="directory holding the unpacked package")
    p.add_argument("--out", type=Path, help="write the facts JSON here (default: stdout)")
    a = p.parse_args(argv)
    doc = record(a.engine, a.version, a.src)
    text = json.dumps(doc, indent=1, sort_keys=True, default=repr) + "\n"
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
