"""Field ownership: server-side apply and managedFields, after structured-merge-diff.

What the real server does (k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager and
sigs.k8s.io/structured-merge-diff/v4 typed/ and merge/update.go), reduced to what the
embedded server serves:

- A field set is the set of paths of a typed value (``typed.ToFieldSet``): scalars, atomic
  maps/structs/lists, null and empty maps are members; every item of an associative list
  (``x-kubernetes-list-type: map``, addressed ``k:{"name":"x"}``) and of a set (``v:"x"``)
  is a member (the ``"."`` entry in ``fieldsV1``) besides its own fields; keys of a map
  that is not a struct (labels, data) are members. Lists without a list type are atomic.
- Types come from the schemas the server publishes: the upstream OpenAPI definitions of
  built-in kinds (``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``,
  ``x-kubernetes-map-type``) and each CRD's ``openAPIV3Schema``; an untyped value (no
  schema, ``x-kubernetes-preserve-unknown-fields``) has granular maps and atomic lists.
- Managers are ``(manager, operation, apiVersion for Update, subresource)``. Apply sets the
  applier's set to the applied configuration's field set, merges the configuration into the
  live object, and removes the fields the applier owned before, no longer applies and no
  other manager owns (``Updater.prune``). Any write (Apply or not) that modifies or adds a
  field another manager owns conflicts with it (``Updater.update``): Apply answers 409 unless
  forced, a forced Apply and every Update take the field from that manager. Removed fields
  leave every manager. A manager whose set becomes empty disappears.
- Updates (create, PUT, JSON/merge/strategic patch) own what they added or modified; the
  manager is the ``fieldManager`` parameter, else the User-Agent up to its first ``/``.
- A write whose ``metadata.managedFields`` differs from the live object's replaces the
  managers (``[{}]`` clears them): how kubectl upgrades client-side-apply ownership
  (k8s.io/client-go/util/csaupgrade).
- Paths never tracked (``stripMeta``): apiVersion, kind, metadata name, namespace, uid,
  resourceVersion, generation, creationTimestamp, selfLink, managedFields; and the fields a
  subresource resets (status on the main resource; everything but status on ``/status``).
"""

from __future__ import annotations

import collections
import json
from typing import Any, Iterable

from .common import ApiError, JSON, _clone, _now

Path = tuple[str, ...]
FieldSet = set[Path]

_STRIPPED_META = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "selfLink",
                  "managedFields", "clusterName"}

# ------------------------------------------------------------------------------------------ types

_MISS = object()
ATOMIC, STRUCT, MAP, LIST_MAP, LIST_SET, SCALAR, UNTYPED = "atomic", "struct", "map", "listmap", "set", "scalar", "untyped"


class Types:
    """Resolves the schema of a resource (``$ref`` into ``defs``) into the SMD element kinds."""

    def __init__(self, root: JSON | None, defs: dict[str, JSON] | None = None, status_sub: bool = False):
        self.root = root
        self.defs = defs or {}
        self.status_sub = status_sub
        # per schema node (by id: the schemas live as long as this view): resolved references,
        # element kinds, field lookups; computing them is most of a field set's cost
        self._resolved: dict[int, JSON | None] = {}
        self._kinds: dict[int, str] = {}
        self._fields: dict[tuple[int, str], tuple[JSON | None, bool]] = {}
        self._keep: list[Any] = []

    def resolve(self, schema: Any) -> JSON | None:
        if not isinstance(schema, dict):
            return None
        hit = self._resolved.get(id(schema), _MISS)
        if hit is _MISS:
            hit = self._resolved[id(schema)] = self._resolve(schema)
            self._keep.append(schema)
        return hit

    def _resolve(self, schema: Any) -> JSON | None:
        for _ in range(20):
            if not isinstance(schema, dict):
                return None
            ref = schema.get("$ref")
            if ref is None and isinstance(schema.get("allOf"), list) and len(schema["allOf"]) == 1:
                ref = (schema["allOf"][0] or {}).get("$ref")
            if not isinstance(ref, str):
                return schema
            schema = self.defs.get(ref.rsplit("/", 1)[-1])
        return None

    def kind(self, schema: JSON | None) -> str:
        if schema is None:
            return UNTYPED
        hit = self._kinds.get(id(schema))
        if hit is None:
            hit = self._kinds[id(schema)] = self._kind(schema)
            self._keep.append(schema)
        return hit

    def _kind(self, schema: JSON) -> str:
        if schema.get("x-kubernetes-int-or-string") or schema.get("format") in ("int-or-string", "quantity"):
            return SCALAR
        t = schema.get("type")
        if t == "array" or "items" in schema:
            lt = schema.get("x-kubernetes-list-type")
            return LIST_MAP if lt == "map" else LIST_SET if lt == "set" else ATOMIC
        if t == "object" or "properties" in schema or "additionalProperties" in schema:
            if schema.get("x-kubernetes-map-type") == "atomic":
                return ATOMIC
            if "properties" in schema:
                return STRUCT
            if isinstance(schema.get("additionalProperties"), dict):
                return MAP
            return UNTYPED
        if t in ("string", "integer", "number", "boolean"):
            return SCALAR
        return UNTYPED

    def field(self, schema: JSON | None, key: str) -> tuple[JSON | None, bool]:
        """The schema of a map's key, and whether the key is a declared struct field."""
        if schema is None:
            return None, False
        k = (id(schema), key)
        hit = self._fields.get(k)
        if hit is None:
            hit = self._fields[k] = self._field(schema, key)
            self._keep.append(schema)
        return hit

    def _field(self, schema: JSON, key: str) -> tuple[JSON | None, bool]:
        props = schema.get("properties")
        if isinstance(props, dict) and key in props:
            return self.resolve(props[key]), True
        addl = schema.get("additionalProperties")
        return (self.resolve(addl) if isinstance(addl, dict) else None), False

    def items(self, schema: JSON | None) -> JSON | None:
        return self.resolve(schema.get("items")) if schema else None


def _untyped_kind(value: Any) -> str:
    return MAP if isinstance(value, dict) else ATOMIC if isinstance(value, list) else SCALAR


# Key fields the real server has defaulted before it computes field sets (the embedded server does
# not default them on stored objects): a port's protocol.
_KEY_DEFAULTS = {"protocol": "TCP"}


def _item_pe(schema: JSON | None, kind: str, item: Any, index: int) -> str:
    if kind == LIST_MAP:
        keys = schema.get("x-kubernetes-list-map-keys") or []
        if not isinstance(item, dict):
            raise ApiError(422, f"associative list item {item!r} is not an object")
        key = {k: item[k] if k in item else _KEY_DEFAULTS.get(k) for k in sorted(keys)}
        return "k:" + json.dumps({k: v for k, v in key.items() if v is not None}, separators=(",", ":"))
    if kind == LIST_SET:
        return "v:" + json.dumps(item, separators=(",", ":"))
    return f"i:{index}"


# ------------------------------------------------------------------------------------------ field sets

def field_set(obj: JSON, types: Types, sub: str | None = None) -> FieldSet:
    """``typed.ToFieldSet`` of an object, less the paths the server never tracks or the subresource resets."""
    return set(field_values(obj, types, sub))


def field_values(obj: JSON, types: Types, sub: str | None = None) -> dict[Path, Any]:
    """The member paths of an object with the value at each (what ``field_set`` and ``compare`` use)."""
    out: dict[Path, Any] = {}
    root = types.resolve(types.root)
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or not _tracked(types, key, sub):
            continue
        schema, declared = types.field(root, key)
        if key == "metadata" and isinstance(value, dict):
            for mk, mv in value.items():
                if mk in _STRIPPED_META:
                    continue
                ms, mdecl = types.field(schema, mk)
                _walk(mv, ms, types, ("f:metadata", f"f:{mk}"), out, mdecl)
            continue
        _walk(value, schema, types, (f"f:{key}",), out, declared)
    return out


def _tracked(types: Types, key: str, sub: str | None) -> bool:
    """The status subresource resets everything but status; the main resource resets status when
    the resource has a status subresource."""
    if sub == "status":
        return key == "status"
    return not (key == "status" and types.status_sub)


def _walk(value: Any, schema: JSON | None, types: Types, path: Path, out: dict[Path, Any], declared: bool) -> None:
    kind = types.kind(schema) if schema is not None else UNTYPED
    if kind == UNTYPED:
        kind = _untyped_kind(value)
    if not declared or value is None or kind in (SCALAR, ATOMIC) or not isinstance(value, (dict, list)) or not value:
        out[path] = value
    if value is None or kind in (SCALAR, ATOMIC) or not isinstance(value, (dict, list)):
        return
    if isinstance(value, dict):
        for key, child in value.items():
            if kind == STRUCT:
                cs, cdecl = types.field(schema, key)
            else:
                cs, cdecl = _map_elem(types, schema), False
            _walk(child, cs, types, path + (f"f:{key}",), out, cdecl)
        return
    if kind not in (LIST_MAP, LIST_SET):
        out[path] = value
        return
    elem = types.items(schema)
    for i, item in enumerate(value):
        p = path + (_item_pe(schema, kind, item, i),)
        out[p] = item
        if kind == LIST_MAP and isinstance(item, dict):
            for key, child in item.items():
                cs, cdecl = types.field(elem, key)
                _walk(child, cs, types, p + (f"f:{key}",), out, cdecl)


def _map_elem(types: Types, schema: JSON | None) -> JSON | None:
    if schema is None:
        return None
    addl = schema.get("additionalProperties")
    return types.resolve(addl) if isinstance(addl, dict) else None


def to_fields_v1(paths: Iterable[Path]) -> JSON:
    tree: JSON = {}
    for path in paths:  # _finish sorts every level
        cur = tree
        for pe in path:
            cur = cur.setdefault(pe, {})
        cur["__member__"] = True
    return _finish(tree)


def _finish(tree: JSON) -> JSON:
    member = tree.pop("__member__", False) or "." in tree
    tree.pop(".", None)
    out: JSON = {".": {}} if member and tree else {}
    for k in sorted(tree):
        out[k] = _finish(tree[k])
    return out


def from_fields_v1(tree: Any, prefix: Path = ()) -> FieldSet:
    out: FieldSet = set()
    if not isinstance(tree, dict):
        return out
    if prefix and (not tree or "." in tree):
        out.add(prefix)
    for k, v in tree.items():
        if k != ".":
            out |= from_fields_v1(v, prefix + (k,))
    return out


def path_string(path: Path) -> str:
    """``.spec.template.spec.containers[name="engine"].image``, as in the server's conflict messages."""
    s = ""
    for pe in path:
        if pe.startswith("f:"):
            s += "." + pe[2:]
        elif pe.startswith("k:"):
            s += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(pe[2:]).items()) + "]"
        elif pe.startswith("v:"):
            s += f"[={pe[2:]}]"
        else:
            s += f"[{pe[2:]}]"
    return s


# ------------------------------------------------------------------------------------------ values

def _index(items: list, schema: JSON | None, kind: str) -> dict[str, int]:
    return {_item_pe(schema, kind, item, i): i for i, item in enumerate(items)}


def merge(live: Any, config: Any, schema: JSON | None, types: Types) -> Any:
    """``typed.Merge``: the configuration over the live value, granular where the type is."""
    kind = types.kind(schema) if schema is not None else _untyped_kind(config)
    if kind == UNTYPED:
        kind = _untyped_kind(config)
    if config is None or kind in (SCALAR, ATOMIC):
        return _clone(config)
    if isinstance(config, dict):
        if not isinstance(live, dict):
            live = {}
        out = dict(live)
        for key, value in config.items():
            cs = types.field(schema, key)[0] if kind == STRUCT else _map_elem(types, schema)
            out[key] = merge(live.get(key), value, cs, types)
        return out
    if not isinstance(config, list):
        return _clone(config)
    if not isinstance(live, list) or kind not in (LIST_MAP, LIST_SET):
        return _clone(config)
    elem = types.items(schema)
    live_idx = _index(live, schema, kind)
    conf_pes = [_item_pe(schema, kind, item, i) for i, item in enumerate(config)]
    conf_set = set(conf_pes)
    out: list = []
    ci = 0

    def take(j: int) -> None:
        pe, item = conf_pes[j], config[j]
        out.append(merge(live[live_idx[pe]], item, elem, types) if pe in live_idx and kind == LIST_MAP else _clone(item))

    for pe, item in zip(_index(live, schema, kind), live):
        if pe not in conf_set:
            out.append(item)
            continue
        while ci < len(config):
            ci += 1
            take(ci - 1)
            if conf_pes[ci - 1] == pe:
                break
    while ci < len(config):
        ci += 1
        take(ci - 1)
    return out


def remove(obj: Any, path: Path, schema: JSON | None, types: Types) -> None:
    """Remove one path (and what is under it) from a value, pruning maps the removal emptied."""
    if not path or not isinstance(obj, (dict, list)):
        return
    pe, rest = path[0], path[1:]
    if isinstance(obj, dict) and pe.startswith("f:"):
        key = pe[2:]
        if key not in obj:
            return
        if not rest:
            del obj[key]
            return
        kind = types.kind(schema) if schema is not None else UNTYPED
        cs = types.field(schema, key)[0] if kind == STRUCT else _map_elem(types, schema)
        child = obj[key]
        remove(child, rest, cs, types)
        if child == {} or child == []:
            del obj[key]
        return
    if isinstance(obj, list):
        kind = types.kind(schema) if schema is not None else ATOMIC
        if kind not in (LIST_MAP, LIST_SET):
            return
        idx = _index(obj, schema, kind)
        if pe not in idx:
            return
        i = idx[pe]
        if not rest:
            del obj[i]
        else:
            remove(obj[i], rest, types.items(schema), types)


def compare(old: dict[Path, Any], new: dict[Path, Any]) -> tuple[FieldSet, FieldSet, FieldSet]:
    """(added, modified, removed) between the member values of two objects (``typed.Compare``): a
    member whose value differs is modified unless it is a map or list item with members below it."""
    added = set(new) - set(old)
    removed = set(old) - set(new)
    modified = set()
    for p in set(old) & set(new):
        a, b = old[p], new[p]
        if a != b and not (isinstance(a, (dict, list)) and isinstance(b, (dict, list)) and _has_children(p, new)):
            modified.add(p)
    return added, modified, removed


def _has_children(p: Path, paths: FieldSet) -> bool:
    n = len(p)
    return any(len(q) > n and q[:n] == p for q in paths)


# ------------------------------------------------------------------------------------------ managers

def manager_id(entry: JSON) -> tuple:
    op = entry.get("operation") or "Update"
    return (entry.get("manager") or "", op, entry.get("apiVersion") if op == "Update" else None,
            entry.get("subresource") or None)


# fieldsV1 trees this module built, by identity (each held here, so its id is not reused while listed):
# an entry read back from a stored object is decoded from here and, when its set did not change, encoded
# as the same tree. Client-given trees are never listed (they are decoded and re-encoded as before).
_ENCODED: collections.OrderedDict[int, tuple[JSON, frozenset]] = collections.OrderedDict()
_ENCODED_MAX = 50000


# fieldsV1 trees by field set: objects of one shape (a controller's children, a client's creates) share one
# tree (never mutated, like every tree listed in _ENCODED) instead of building and sorting it each time
_BY_SET: collections.OrderedDict[frozenset, JSON] = collections.OrderedDict()
_BY_SET_MAX = 2000


# fieldsV1 subtrees by the field set under one top-level field: a set seen for the first time (a controller's
# child carries its owner's uid in metadata) still shares its spec's tree with the children of the same shape
_BY_TOP: collections.OrderedDict[frozenset, JSON] = collections.OrderedDict()
_BY_TOP_MAX = 4000


def _build(paths: frozenset) -> JSON:
    """``to_fields_v1(paths)``, each top-level subtree taken from ``_BY_TOP`` when its set was seen."""
    groups: dict[str, list[Path]] = {}
    for p in paths:
        if not p:
            return to_fields_v1(paths)
        groups.setdefault(p[0], []).append(p)
    if "." in groups:
        return to_fields_v1(paths)
    out: JSON = {}
    for top in sorted(groups):
        group = frozenset(groups[top])
        sub = _BY_TOP.get(group)
        if sub is None:
            sub = _BY_TOP[group] = to_fields_v1(group)[top]
            if len(_BY_TOP) > _BY_TOP_MAX:
                _BY_TOP.popitem(last=False)
        else:
            _BY_TOP.move_to_end(group)
        out[top] = sub
    return out


def _encoded(paths: frozenset) -> JSON:
    fields = _BY_SET.get(paths)
    if fields is None:
        fields = _BY_SET[paths] = _build(paths)
        if len(_BY_SET) > _BY_SET_MAX:
            _BY_SET.popitem(last=False)
    else:
        _BY_SET.move_to_end(paths)
    _ENCODED[id(fields)] = (fields, paths)
    _ENCODED.move_to_end(id(fields))
    if len(_ENCODED) > _ENCODED_MAX:
        _ENCODED.popitem(last=False)
    return fields


class Managers:
    """The managedFields of one object, decoded: manager id -> (entry without fieldsV1, field set)."""

    def __init__(self, entries: Any):
        self.entries: dict[tuple, tuple[JSON, FieldSet]] = {}
        self._decoded: dict[tuple, tuple[frozenset, JSON]] = {}  # field sets this module encoded, as read
        for e in entries if isinstance(entries, list) else []:
            if not isinstance(e, dict) or not e.get("manager"):
                continue  # [{}] clears
            meta = {k: v for k, v in e.items() if k != "fieldsV1"}
            fields = e.get("fieldsV1") or {}
            known = _ENCODED.get(id(fields))
            if known is not None and known[0] is fields:
                self._decoded[manager_id(e)] = (known[1], fields)
                self.entries[manager_id(e)] = (meta, set(known[1]))
            else:
                self.entries[manager_id(e)] = (meta, from_fields_v1(fields))

    def encode(self) -> list[JSON]:
        out = []
        for mid, (meta, paths) in self.entries.items():
            if paths:
                known = self._decoded.get(mid)
                if known is not None and known[0] == paths:
                    fields = known[1]  # unchanged: the same (never mutated) fieldsV1 as before
                else:
                    fields = _encoded(frozenset(paths))
                out.append({**meta, "fieldsType": "FieldsV1", "fieldsV1": fields})
        return out

    def owned_by_others(self, me: tuple) -> FieldSet:
        out: FieldSet = set()
        for mid, (_, paths) in self.entries.items():
            if mid != me:
                out |= paths
        return out


def update_managers(managers: Managers, me: tuple, old: JSON, new: JSON, types: Types, sub: str | None,
                    force: bool, applied_set: FieldSet | None = None) -> None:
    """``Updater.update``: conflicts (raised unless forced), removals, and the writer's own set."""
    others = any(mid != me for mid in managers.entries)
    if old is new or old == new or (applied_set is not None and not others):
        added = modified = removed = set()  # nothing changed, or no other manager to compare for
    else:
        added, modified, removed = compare(field_values(old, types, sub) if old else {},
                                           field_values(new, types, sub))
    changed = added | modified
    conflicts: dict[tuple, FieldSet] = {}
    for mid, (meta, paths) in managers.entries.items():
        if mid == me:
            continue
        hit = paths & changed
        if hit:
            conflicts[mid] = hit
    if conflicts and not force:
        raise conflict_error(conflicts)
    for mid, hit in conflicts.items():
        managers.entries[mid][1].difference_update(hit)
    for mid, (meta, paths) in list(managers.entries.items()):
        if mid != me:
            paths.difference_update(removed)
    mine = applied_set if applied_set is not None else \
        ((managers.entries.get(me, (None, set()))[1] - removed) | changed)
    managers.entries[me] = (managers.entries.get(me, (None, set()))[0] or {}, mine)
    for mid, (meta, paths) in list(managers.entries.items()):
        if not paths:
            del managers.entries[mid]


def conflict_error(conflicts: dict[tuple, FieldSet]) -> ApiError:
    """409 worded as the real server (fieldmanager/internal/conflict.go, merge/conflict.go)."""
    n = sum(len(p) for p in conflicts.values())
    causes, lines = [], []
    for mid, paths in conflicts.items():
        who = f'"{mid[0]}"' + (f" using {mid[2]}" if mid[2] else "")
        lines.append(f"conflicts with {who}:")
        for p in sorted(paths):
            causes.append({"type": "FieldManagerConflict", "message": f"conflict with {who}", "field": path_string(p)})
            lines.append(f"- {path_string(p)}")
    if n == 1:
        msg = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        msg = f"Apply failed with {n} conflicts: " + "\n".join(lines)
    return ApiError(409, msg, reason="Conflict", details={"causes": causes})


def apply(live: JSON, config: JSON, types: Types, managers: Managers, me: tuple, sub: str | None,
          force: bool) -> JSON:
    """``Updater.Apply``: merge, prune what the applier dropped, ownership; returns the new object."""
    applied_set = field_set(config, types, sub)
    last = managers.entries.get(me, (None, set()))[1]
    root = types.resolve(types.root)
    cfg = {k: v for k, v in config.items() if k != "metadata"}
    cfg["metadata"] = {k: v for k, v in (config.get("metadata") or {}).items() if k not in _STRIPPED_META}
    if sub == "status":
        cfg = {"status": config.get("status")} if "status" in config else {}
    elif types.status_sub:
        cfg.pop("status", None)
    merged = merge(live, cfg, root, types)
    others = managers.owned_by_others(me)
    keep = applied_set | others
    drop = {p for p in last - keep if not _is_key_field(p)
            and not any(len(q) > len(p) and q[:len(p)] == p for q in keep)}
    for path in sorted(drop, key=len, reverse=True):
        if not any(path[:i] in drop for i in range(1, len(path))):  # what is under a removed path goes with it
            remove(merged, path, root, types)
    update_managers(managers, me, live, merged, types, sub, force, applied_set)
    return merged


def _is_key_field(path: Path) -> bool:
    """A key field of an associative list item: it stays while the item does."""
    return len(path) >= 2 and path[-2].startswith("k:") and path[-1][2:] in json.loads(path[-2][2:])


def stamp(managers: Managers, me: tuple, api_version: str, changed: bool) -> None:
    meta, paths = managers.entries.get(me, ({}, set()))
    if not paths:
        return
    entry = {"manager": me[0], "operation": me[1], "apiVersion": api_version, "time": meta.get("time") or _now()}
    if changed or not meta.get("time"):
        entry["time"] = _now()
    if me[3]:
        entry["subresource"] = me[3]
    managers.entries[me] = (entry, paths)
