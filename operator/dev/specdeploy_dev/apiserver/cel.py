"""``x-kubernetes-validations`` rules evaluated with a real CEL implementation (cel-python).

What mirrors kube-apiserver (k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel):
- ``self`` is the value at the rule's schema node; ``oldSelf`` the correlated old value on an
  update (rules that mention ``oldSelf`` are transition rules: skipped on create and when no old
  value correlates, as the real server does).
- int-or-string values are ``dyn`` (``type(self) == string`` works); integers are CEL ints.
- A failed rule reports ``<path>: Invalid value: "<schema type>": <message>``; ``fieldPath``
  moves the path, ``reason`` sets the cause reason (FieldValueInvalid by default), and
  ``messageExpression`` is evaluated for the message when present.
- The Kubernetes CEL libraries used by rules in this project and the common ones: lists
  (``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``), strings
  (``lowerAscii``, ``upperAscii``, ``trim``, ``split``, ``join``, ``replace``, ``indexOf``,
  ``lastIndexOf``) on top of CEL's standard ``has``, ``size``, ``matches``, ``type``, ``int``,
  macros (``all``, ``exists``, ``exists_one``, ``map``, ``filter``).
Rules that fail to compile are reported as the real server does when the CRD is written
(here: when the object is validated) with the compiler's message.

Pure: no I/O. Programs are compiled once per rule text.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from typing import Any

import celpy
from celpy import celtypes

from .common import JSON


class RuleError(Exception):
    """A rule could not be compiled or evaluated (reported as an Invalid cause)."""


def _to_py(value: Any) -> Any:
    if isinstance(value, celtypes.ListType):
        return [_to_py(v) for v in value]
    if isinstance(value, celtypes.MapType):
        return {str(k): _to_py(v) for k, v in value.items()}
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    return value


def _is_sorted(lst: Any) -> celtypes.BoolType:
    items = _to_py(lst)
    return celtypes.BoolType(all(a <= b for a, b in zip(items, items[1:])))


def _sum(lst: Any) -> Any:
    items = list(lst)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _min(lst: Any) -> Any:
    items = list(lst)
    if not items:
        raise celpy.CELEvalError("min called on an empty list")
    return min(items)


def _max(lst: Any) -> Any:
    items = list(lst)
    if not items:
        raise celpy.CELEvalError("max called on an empty list")
    return max(items)


def _index_of(container: Any, item: Any) -> celtypes.IntType:
    if isinstance(container, celtypes.StringType):
        return celtypes.IntType(str(container).find(str(item)))
    items = list(container)
    return celtypes.IntType(items.index(item) if item in items else -1)


def _last_index_of(container: Any, item: Any) -> celtypes.IntType:
    if isinstance(container, celtypes.StringType):
        return celtypes.IntType(str(container).rfind(str(item)))
    items = list(container)
    return celtypes.IntType(len(items) - 1 - items[::-1].index(item) if item in items else -1)


def _split(text: Any, sep: Any, limit: Any = None) -> celtypes.ListType:
    parts = str(text).split(str(sep)) if limit is None or int(limit) < 0 else \
        str(text).split(str(sep), max(int(limit) - 1, 0)) if int(limit) else []
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _join(lst: Any, sep: Any = "") -> celtypes.StringType:
    return celtypes.StringType(str(sep).join(str(x) for x in lst))


def _replace(text: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    n = -1 if limit is None else int(limit)
    return celtypes.StringType(str(text).replace(str(old), str(new), n))


FUNCTIONS = {
    "isSorted": _is_sorted, "sum": _sum, "min": _min, "max": _max, "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "split": _split, "join": _join, "replace": _replace,
}

_ENV = celpy.Environment()


@functools.lru_cache(maxsize=1024)
def compile_rule(text: str) -> Any:
    try:
        ast = _ENV.compile(text)
        return _ENV.program(ast, functions=FUNCTIONS)
    except Exception as e:  # celpy raises its own CELParseError and lark errors
        raise RuleError(f"compilation failed: {e}") from None


def uses_old_self(text: str) -> bool:
    return "oldSelf" in text


_RESULTS: collections.OrderedDict[tuple[str, str], Any] = collections.OrderedDict()
_RESULTS_MAX = 4096


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRING = re.compile(r'(?:[rR]?[bB]?|[bB]?[rR]?)(\'\'\'|\"\"\"|\'|")')


@functools.lru_cache(maxsize=1024)
def self_paths(text: str) -> tuple[tuple[str, ...], ...] | None:
    """The field paths of ``self`` a rule reads, when it reads ``self`` only through field selections
    (``self.a.b``, ``self.a.b.size()``, ``has(self.a)``, ``self.a[0]``); None when it uses ``self`` any
    other way (bare, indexed, as a method receiver) or the text cannot be scanned with certainty."""
    paths: list[tuple[str, ...]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        m = _STRING.match(text, i) if ch in "'\"rRbB" else None
        if m and (ch in "'\"" or m.end() > i + 1):
            quote = m.group(1)
            raw = "r" in text[i:m.start(1)].lower()
            j = m.end()
            while True:
                if j >= n:
                    return None  # unterminated: not sure what is code
                if not raw and text[j] == "\\":
                    j += 2
                    continue
                if text.startswith(quote, j):
                    j += len(quote)
                    break
                j += 1
            i = j
            continue
        if ch.isalpha() or ch == "_":
            m = _IDENT.match(text, i)
            assert m is not None
            word, j = m.group(0), m.end()
            k = i - 1
            while k >= 0 and text[k].isspace():
                k -= 1
            if word == "self" and not (k >= 0 and text[k] == "."):
                path: list[str] = []
                while True:
                    t = j
                    while t < n and text[t].isspace():
                        t += 1
                    if t < n and text[t] == ".":
                        t += 1
                        while t < n and text[t].isspace():
                            t += 1
                        f = _IDENT.match(text, t)
                        if f is None:
                            return None  # self.?x and other forms
                        path.append(f.group(0))
                        j = f.end()
                        continue
                    break
                t = j
                while t < n and text[t].isspace():
                    t += 1
                if t < n and text[t] == "(":
                    path.pop() if path else None  # a method: its receiver is the path before it
                    if not path:
                        return None
                if not path:
                    return None
                paths.append(tuple(path))
            i = j
            continue
        i += 1
    return tuple(paths)


def _project(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    """Only the parts of ``value`` at ``paths`` (each with its whole subtree), on the same map structure:
    a rule that reads ``self`` through those paths only sees the same values, present or absent."""
    if not isinstance(value, dict):
        return value
    out: dict = {}
    for path in paths:
        src, dst = value, out
        for depth, key in enumerate(path):
            if key not in src:
                break
            if depth == len(path) - 1 or not isinstance(src[key], dict):
                dst[key] = src[key]
                break
            nxt = dst.get(key)
            if nxt is None:
                nxt = dst[key] = {}
            elif nxt is src[key]:
                break  # a shorter path already took the whole subtree
            src, dst = src[key], nxt
    return out


def evaluate(text: str, value: Any, old: Any = None, has_old: bool = False) -> Any:
    """The rule's result (a Python value) with ``self`` (and ``oldSelf`` when ``has_old``).

    Rules are pure functions of their inputs: results of rules without ``oldSelf`` are memoized
    by (rule, value) in a bounded LRU (the same spec seen again costs one JSON encoding). A rule that
    reads ``self`` only through field selections sees (and is memoized by) just those fields, so a rule
    on a whole object does not convert or key the whole object."""
    if has_old:
        return _evaluate(text, value, old, True)
    paths = self_paths(text)
    if paths is not None:
        value = _project(value, paths)
    key = (text, json.dumps(value, sort_keys=True, separators=(",", ":")))
    if key in _RESULTS:
        _RESULTS.move_to_end(key)
        hit = _RESULTS[key]
        if isinstance(hit, RuleError):
            raise hit
        return hit
    try:
        result = _evaluate(text, value, None, False)
    except RuleError as e:
        result = e
    _RESULTS[key] = result
    if len(_RESULTS) > _RESULTS_MAX:
        _RESULTS.popitem(last=False)
    if isinstance(result, RuleError):
        raise result
    return result


def _evaluate(text: str, value: Any, old: Any, has_old: bool) -> Any:
    program = compile_rule(text)
    activation: JSON = {"self": celpy.json_to_cel(value)}
    if has_old:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = program.evaluate(activation)
    except Exception as e:  # evaluation errors (no such key, division by zero, ...)
        raise RuleError(str(e)) from None
    if isinstance(result, celpy.CELEvalError):
        raise RuleError(str(result.args[0]) if result.args else str(result))
    return _to_py(result)
