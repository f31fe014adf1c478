"""Patches: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902), server-side apply helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .common import ApiError, _clone


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_SMP_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
             "volumes": "name", "env": "name", "imagePullSecrets": "name", "volumeMounts": "mountPath",
             "volumeDevices": "devicePath", "conditions": "type", "hostAliases": "ip",
             "ownerReferences": "uid", "topologySpreadConstraints": "topologyKey"}
_DELETE = object()


def _merge_key(field_name: str, items: list[Any]) -> str | None:
    if field_name == "ports":
        if items and all(isinstance(i, dict) and "containerPort" in i for i in items):
            return "containerPort"
        if items and all(isinstance(i, dict) and "port" in i for i in items):
            return "port"
        return None
    key = _SMP_KEYS.get(field_name)
    if key and all(isinstance(i, dict) and key in i for i in items):
        return key
    return None


def strategic_merge_patch(target: Any, patch: Any, field_name: str = "") -> Any:
    """Strategic merge patch for the common keyed lists; the rest behaves as a merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: _strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list) and \
                (mk := _merge_key(key, value)) and _merge_key(key, result[key]) == mk:
            result[key] = _merge_list(result[key], value, mk, key)
        else:
            result[key] = _strip_directives(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str, field_name: str,
                merge: Callable[[Any, Any, str], Any] | None = None) -> list[Any]:
    merge = merge or strategic_merge_patch
    out = list(current)
    index = {item.get(key): i for i, item in enumerate(out) if isinstance(item, dict)}
    removed: set[int] = set()
    for item in patch:
        k = item.get(key)
        if k in index:
            merged = merge(out[index[k]], item, field_name)
            if merged is _DELETE:
                removed.add(index[k])
            else:
                out[index[k]] = merged
        elif item.get("$patch") != "delete":
            out.append(_strip_directives(item))
            index[k] = len(out) - 1
    return [item for i, item in enumerate(out) if i not in removed]


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve_parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise ApiError(422, f"JSON patch: path not found: /{'/'.join(parts)}")
    return cur, parts[-1]


def _jp_get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise ApiError(422, f"JSON patch: path not found: /{'/'.join(parts)}")


def _jp_remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise ApiError(422, f"JSON patch: cannot remove a missing path: /{'/'.join(parts)}")


def _jp_add(doc: Any, parts: list[str], value: Any, replace: bool = False) -> Any:
    if not parts:
        return value
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"JSON patch: cannot replace a missing path: /{'/'.join(parts)}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise ApiError(422, f"JSON patch: bad list index: /{'/'.join(parts)}")
    else:
        raise ApiError(422, f"JSON patch: parent is not a container: /{'/'.join(parts)}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch; every failure (a failed ``test`` included) is 422, as kopf expects."""
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(422, f"JSON patch: malformed operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "test":
            try:
                actual = _jp_get(doc, parts)
            except ApiError:
                actual = None
            if actual != op.get("value"):
                raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                    f"test failed at {op['path']}: {actual!r} != {op.get('value')!r}")
        elif kind == "add":
            doc = _jp_add(doc, parts, _clone(op.get("value")))
        elif kind == "replace":
            doc = _jp_add(doc, parts, _clone(op.get("value")), replace=True)
        elif kind == "remove":
            _jp_remove(doc, parts)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = _jp_remove(doc, src) if kind == "move" else _clone(_jp_get(doc, src))
            doc = _jp_add(doc, parts, value)
        else:
            raise ApiError(422, f"JSON patch: unknown operation {kind!r}")
    return doc


# Server-side apply helpers: leaf paths (lists are leaves) and their removal.
_SSA_SKIP_META = {"name", "namespace", "resourceVersion", "uid", "generation", "creationTimestamp",
                  "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}


def _leaf_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            if prefix == () and key in ("apiVersion", "kind"):
                continue
            if prefix == ("metadata",) and key in _SSA_SKIP_META:
                continue
            paths |= _leaf_paths(value, prefix + (key,))
    elif prefix:
        paths.add(prefix)
    return paths


def _apply_merge(target: Any, applied: Any, field_name: str = "") -> Any:
    if not isinstance(applied, dict):
        return _clone(applied)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in applied.items():
        if isinstance(value, dict):
            result[key] = _apply_merge(result.get(key), value, key)
        elif isinstance(value, list) and isinstance(result.get(key), list) and \
                (mk := _merge_key(key, value)) and _merge_key(key, result[key]) == mk:
            result[key] = _merge_list(result[key], value, mk, key, _apply_merge)
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = _clone(value)
    return result

