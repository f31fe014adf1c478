"""Label and field selectors and the JSONPath subset that printer columns and scale paths use."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .common import ApiError, JSON


# --------------------------------------------------------------------------------------------
# Selectors and JSONPath (the subset that printer columns, scale paths and selectors need)
# --------------------------------------------------------------------------------------------

def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_RE = re.compile(r"^([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([A-Za-z0-9_./-]+)$")


def parse_label_selector(text: str | None) -> Callable[[dict[str, str]], bool] | None:
    """Compile a label selector (``a=b,c!=d,e in (f,g),h notin (i),j,!k``); 400 on bad syntax."""
    if not text:
        return None
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_top(text):
        if m := _SET_RE.match(term):
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(lambda labels, k=key, vs=vals: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=vals: labels.get(k) not in vs)
        elif m := _EQ_RE.match(term):
            key, op, val = m.groups()
            if op == "!=":
                tests.append(lambda labels, k=key, v=val: labels.get(k) != v)
            else:
                tests.append(lambda labels, k=key, v=val: k in labels and labels[k] == v)
        elif m := _KEY_RE.match(term):
            neg, key = m.groups()
            if neg:
                tests.append(lambda labels, k=key: k not in labels)
            else:
                tests.append(lambda labels, k=key: k in labels)
        else:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
    return lambda labels: all(t(labels) for t in tests)


def _field_value(obj: JSON, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None) -> Callable[[JSON], bool] | None:
    """Compile a field selector (``metadata.name=x,metadata.namespace!=y``, any dotted path)."""
    if not text:
        return None
    tests: list[Callable[[JSON], bool]] = []
    for term in _split_top(text):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}")
        path, op, val = m.groups()
        if op == "!=":
            tests.append(lambda o, p=path, v=val: _field_value(o, p) != v)
        else:
            tests.append(lambda o, p=path, v=val: _field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in tests)


_JP_TOKEN = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\['([^']*)'\]")


def jsonpath(obj: Any, path: str) -> Any:
    """Evaluate the simple JSONPath used by printer columns and scale paths; None if absent."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    cur: Any = obj
    pos = 0
    while pos < len(path):
        m = _JP_TOKEN.match(path, pos)
        if not m:
            return None
        pos = m.end()
        key, index, fkey, fval, quoted = m.groups()
        if key is not None or quoted is not None:
            cur = cur.get(key if key is not None else quoted) if isinstance(cur, dict) else None
        elif index is not None:
            cur = cur[int(index)] if isinstance(cur, list) and int(index) < len(cur) else None
        else:
            cur = next((item for item in cur if isinstance(item, dict) and _field_value(item, fkey) == fval), None) \
                if isinstance(cur, list) else None
        if cur is None:
            return None
    return cur


def _set_path(obj: JSON, path: str, value: Any) -> None:
    keys = [k for k in path.strip().lstrip(".").split(".") if k]
    cur = obj
    for key in keys[:-1]:
        cur = cur.setdefault(key, {})
    cur[keys[-1]] = value



def match_label_selector(selector: Any, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector object (matchLabels, matchExpressions); empty or None matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
