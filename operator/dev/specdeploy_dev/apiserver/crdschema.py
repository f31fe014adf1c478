"""Custom resources against their CRD's structural schema, as kube-apiserver treats them.

In the order of the real request path (k8s.io/apiextensions-apiserver):
1. unknown fields: with ``fieldValidation=Strict`` they refuse the request (400, ``strict decoding
   error: unknown field "spec.foo"``), with ``Warn`` they come back as warnings; in every case
   they are pruned (dropped) unless ``x-kubernetes-preserve-unknown-fields`` covers them;
2. defaults: ``default`` of every absent property of an object that is present (deep, in one pass
   from the root, so a defaulted object gets its own properties' defaults);
3. validation: type, nullable, int-or-string, enum, pattern, min/max(Length|Items|Properties),
   minimum/maximum (exclusive too), multipleOf, required, uniqueItems and list-type set/map keys;
4. ``x-kubernetes-validations`` (cel.py), transition rules against the old object on updates.
Errors come back as the causes of one 422 Invalid Status whose message is what the real server
writes (``SpeculativeDeployment.specdeploy.io "x" is invalid: spec.gpu.count: Invalid value: 0:
spec.gpu.count in body should be greater than or equal to 1``); kubectl prints the causes as
``The SpeculativeDeployment "x" is invalid: ...``.

``unknown_fields`` also serves built-in kinds (strict field validation against the upstream schema).
Pure: no I/O.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from . import cel
from .common import JSON, ApiError

Resolver = Callable[[str], JSON | None]  # "$ref" -> schema (built-in definitions)


@dataclass
class Cause:
    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueTooLong, ...
    message: str

    def as_status(self) -> JSON:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def text(self) -> str:
        return f"{self.field}: {self.message}"


def _path(parts: list[str]) -> str:
    out = ""
    for p in parts:
        if p.startswith("["):
            out += p
        else:
            out += ("." if out else "") + p
    return out


def _show(value: Any) -> str:
    """How field errors print values (Go's %#v for strings and numbers)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if value is None:
        return "null"
    return f'"{_json_type(value)}"'


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _deref(schema: Any, resolve: Resolver | None) -> JSON:
    seen = 0
    while isinstance(schema, dict) and resolve is not None and (
            "$ref" in schema or (len(schema.get("allOf") or []) == 1 and "$ref" in schema["allOf"][0])):
        ref = schema["$ref"] if "$ref" in schema else schema["allOf"][0]["$ref"]
        schema = resolve(ref) or {}
        seen += 1
        if seen > 50:
            break
    return schema if isinstance(schema, dict) else {}


# ------------------------------------------------------------------ 1. unknown fields / pruning

_UNSET: Any = object()


def unknown_fields(obj: Any, schema: JSON, resolve: Resolver | None = None, prune: bool = False,
                   root: bool = True, path: list[str] | None = None, old: Any = _UNSET) -> list[str]:
    """Dotted paths of fields the schema does not declare (``x-kubernetes-preserve-unknown-fields``
    and ``additionalProperties`` allow them); with ``prune`` they are also removed from ``obj``.
    With ``old`` (an update), parts equal to the stored object are not walked again."""
    path = path or []
    if old is not _UNSET and not prune:
        if obj == old:
            return []
        if isinstance(obj, dict) and isinstance(old, dict):
            schema = _deref(schema, resolve)
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties")
            found: list[str] = []
            for key, value in obj.items():
                if key in old and old[key] == value:
                    continue
                sub = {"properties": {key: props[key]}} if key in props else \
                    {"properties": {}, "additionalProperties": addl} if addl is not None else \
                    {"properties": {k: v for k, v in props.items()}, **{k: v for k, v in schema.items() if k.startswith("x-")}}
                found += unknown_fields({key: value}, sub, resolve, False, root, path)
            return found
    schema = _deref(schema, resolve)
    found: list[str] = []
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-embedded-resource") and not schema.get("properties"):
            props = schema.get("properties") or {}
            for key, value in obj.items():
                if key in props:
                    found += unknown_fields(value, props[key], resolve, prune, False, path + [key])
            return found
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        if props is None and addl is None:
            if schema.get("type") in (None, "object") and not schema.get("x-kubernetes-int-or-string"):
                return found  # an untyped or free-form object
            return found
        for key in list(obj):
            if root and key in ("apiVersion", "kind", "metadata") and (props is None or key not in props or key == "metadata"):
                continue
            if props is not None and key in props:
                found += unknown_fields(obj[key], props[key], resolve, prune, False, path + [key])
            elif isinstance(addl, dict):
                found += unknown_fields(obj[key], addl, resolve, prune, False, path + [key])
            elif addl is True:
                continue
            else:
                found.append(_path(path + [key]))
                if prune:
                    del obj[key]
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], resolve, prune, False, path + [f"[{i}]"])
    return found


# ------------------------------------------------------------------ 2. defaults

def apply_defaults(obj: Any, schema: JSON) -> Any:
    """Set the ``default`` of every absent property (and nulls of non-nullable ones) in place."""
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            if "default" in sub and (key not in obj or (obj[key] is None and not sub.get("nullable"))):
                obj[key] = copy.deepcopy(sub["default"])
            if key in obj:
                apply_defaults(obj[key], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for key in obj:
                if key not in props:
                    apply_defaults(obj[key], addl)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            apply_defaults(item, schema["items"])
    return obj


# ------------------------------------------------------------------ 3. + 4. validation

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _type_ok(value: Any, type_: str) -> bool:
    if type_ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(type_)
    return expected is None or isinstance(value, expected)


def _num(x: Any) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def validate(obj: Any, schema: JSON, old: Any = None, has_old: bool = False) -> list[Cause]:
    """Every schema and CEL failure of ``obj`` (the whole object, root schema)."""
    causes: list[Cause] = []
    _validate(obj, schema, [], causes, old, has_old)
    return causes


_NO: Any = object()  # a keyword the schema node does not have


class _Plan:
    """What one schema node checks, read off it once (``_plan``): the walk then tests only what is there.

    A node's keywords are read when it is first validated against; schemas are stored objects replaced
    (not edited) on a CRD update, and the cache is keyed by the node's identity."""

    __slots__ = ("type", "nullable", "int_or_string", "enum", "string", "number", "array", "items", "object",
                 "props", "addl", "all_of", "rules", "transition")

    def __init__(self, schema: JSON):
        get = schema.get
        self.type = get("type")
        self.nullable = bool(get("nullable"))
        self.int_or_string = bool(get("x-kubernetes-int-or-string"))
        self.enum = schema["enum"] if "enum" in schema else _NO
        self.string = any(k in schema for k in ("maxLength", "minLength", "pattern"))
        self.number = any(k in schema for k in ("minimum", "maximum")) or bool(get("multipleOf"))
        self.array = any(k in schema for k in ("maxItems", "minItems", "uniqueItems", "x-kubernetes-list-type"))
        self.items = get("items") if isinstance(get("items"), dict) else None
        self.object = bool(get("required")) or any(k in schema for k in ("maxProperties", "minProperties"))
        self.props = get("properties") or {}
        addl = get("additionalProperties")
        self.addl = addl if isinstance(addl, dict) else None
        self.all_of = get("allOf") or ()
        self.rules = tuple(get("x-kubernetes-validations") or ())
        self.transition = _has_transition_rules(schema)


_PLANS: dict[int, tuple[JSON, _Plan]] = {}


def _plan(schema: JSON) -> _Plan:
    hit = _PLANS.get(id(schema))
    if hit is None or hit[0] is not schema:
        if len(_PLANS) > 100_000:
            _PLANS.clear()
        _PLANS[id(schema)] = hit = (schema, _Plan(schema))
    return hit[1]


def _body(where: str) -> str:
    return f"{where} in body" if where else "body"


def _validate(value: Any, schema: JSON, path: list[str], causes: list[Cause], old: Any, has_old: bool) -> None:
    if not isinstance(schema, dict):
        return
    plan = _plan(schema)
    if has_old and path and value == old and not plan.transition:
        return  # validation ratcheting (CRDValidationRatcheting, on since 1.30): an unchanged value passes
    type_ = plan.type
    if value is None:
        if not plan.nullable and type_:
            causes.append(Cause(_path(path), "FieldValueTypeInvalid",
                                f'Invalid value: "null": {_body(_path(path))} must be of type {type_}: "null"'))
        return
    if plan.int_or_string:
        if not (isinstance(value, (int, str)) and not isinstance(value, bool)):
            where = _path(path)
            causes.append(Cause(where, "FieldValueTypeInvalid",
                                f'Invalid value: "{_json_type(value)}": {_body(where)} must be of type integer or string: '
                                f'"{_json_type(value)}"'))
            return
    elif type_ and not _type_ok(value, type_):
        where = _path(path)
        causes.append(Cause(where, "FieldValueTypeInvalid",
                            f'Invalid value: "{_json_type(value)}": {_body(where)} must be of type {type_}: "{_json_type(value)}"'))
        return
    before = len(causes)
    if plan.enum is not _NO and value not in plan.enum:
        supported = ", ".join(json.dumps(v) for v in plan.enum)
        causes.append(Cause(_path(path), "FieldValueNotSupported", f"Unsupported value: {_show(value)}: supported values: {supported}"))
    if plan.string and isinstance(value, str):
        _string_checks(value, schema, path, causes)
    if plan.number and isinstance(value, (int, float)) and not isinstance(value, bool):
        _number_checks(value, schema, path, causes)
    if isinstance(value, list):
        if plan.array:
            _array_checks(value, schema, path, causes)
        items = plan.items
        if items is not None:
            old_items = _correlate_list(old, value, schema) if has_old else {}
            for i, item in enumerate(value):
                o = old_items.get(i, _MISSING)
                _validate(item, items, path + [f"[{i}]"], causes, None if o is _MISSING else o, o is not _MISSING)
    elif isinstance(value, dict):
        if plan.object:
            _object_checks(value, schema, path, causes)
        props, addl = plan.props, plan.addl
        old_dict = old if has_old and isinstance(old, dict) else None
        for key, sub in value.items():
            target = props.get(key) if key in props else addl
            if target is None or (not path and key == "metadata"):
                continue
            has = old_dict is not None and key in old_dict
            _validate(sub, target, path + [key], causes, old_dict[key] if has else None, has)
    for sub in plan.all_of:
        _validate(value, sub, path, causes, old, has_old)
    if plan.rules and len(causes) == before:  # rules run on values that passed the schema (as the real server)
        _rules(value, schema, path, causes, old, has_old)


def _string_checks(value: str, schema: JSON, path: list[str], causes: list[Cause]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        causes.append(Cause(_path(path), "FieldValueTooLong", f"Too long: may not be longer than {schema['maxLength']}"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        causes.append(Cause(_path(path), "FieldValueInvalid",
                            f"Invalid value: {_show(value)}: {_body(_path(path))} should be at least {schema['minLength']} chars long"))
    if "pattern" in schema:
        try:
            matched = re.search(schema["pattern"], value) is not None
        except re.error:
            matched = True
        if not matched:
            causes.append(Cause(_path(path), "FieldValueInvalid",
                                f"Invalid value: {_show(value)}: {_body(_path(path))} should match '{schema['pattern']}'"))


def _number_checks(value: int | float, schema: JSON, path: list[str], causes: list[Cause]) -> None:
    if "minimum" in schema:
        lo = schema["minimum"]
        if value < lo or (schema.get("exclusiveMinimum") and value == lo):
            word = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
            causes.append(Cause(_path(path), "FieldValueInvalid", f"Invalid value: {_show(value)}: {_body(_path(path))} should be {word} {_num(lo)}"))
    if "maximum" in schema:
        hi = schema["maximum"]
        if value > hi or (schema.get("exclusiveMaximum") and value == hi):
            word = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            causes.append(Cause(_path(path), "FieldValueInvalid", f"Invalid value: {_show(value)}: {_body(_path(path))} should be {word} {_num(hi)}"))
    if schema.get("multipleOf") and (value / schema["multipleOf"]) % 1:
        causes.append(Cause(_path(path), "FieldValueInvalid",
                            f"Invalid value: {_show(value)}: {_body(_path(path))} should be a multiple of {_num(schema['multipleOf'])}"))


def _array_checks(value: list[Any], schema: JSON, path: list[str], causes: list[Cause]) -> None:
    where = _path(path)
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        causes.append(Cause(where, "FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
    if "minItems" in schema and len(value) < schema["minItems"]:
        causes.append(Cause(where, "FieldValueInvalid",
                            f"Invalid value: {len(value)}: {_body(where)} should have at least {schema['minItems']} items"))
    list_type = schema.get("x-kubernetes-list-type")
    if schema.get("uniqueItems") or list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                causes.append(Cause(_path(path + [f"[{i}]"]), "FieldValueDuplicate", f"Duplicate value: {_show(item)}"))
            seen.append(item)
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if isinstance(item, dict):
                k = json.dumps([item.get(x) for x in keys])
                if k in seen_keys:
                    shown = ",".join(f'"{x}":{json.dumps(item.get(x))}' for x in keys)
                    causes.append(Cause(_path(path + [f"[{i}]"]), "FieldValueDuplicate", f"Duplicate value: map[string]interface {{}}{{{shown}}}"))
                seen_keys.add(k)


def _object_checks(value: JSON, schema: JSON, path: list[str], causes: list[Cause]) -> None:
    for req in schema.get("required") or []:
        if req not in value:
            causes.append(Cause(_path(path + [req]), "FieldValueRequired", "Required value"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        causes.append(Cause(_path(path), "FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxProperties']} items"))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        causes.append(Cause(_path(path), "FieldValueInvalid",
                            f"Invalid value: {len(value)}: {_body(_path(path))} should have at least {schema['minProperties']} properties"))


_MISSING = object()


def _has_transition_rules(schema: JSON) -> bool:
    """Whether a transition rule sits at or below this schema node (those must still run)."""
    key = id(schema)
    hit = _TRANSITION_CACHE.get(key)
    if hit is None or hit[0] is not schema:
        found = "oldSelf" in json.dumps(schema)
        if len(_TRANSITION_CACHE) > 100_000:
            _TRANSITION_CACHE.clear()
        _TRANSITION_CACHE[key] = hit = (schema, found)
    return hit[1]


_TRANSITION_CACHE: dict[int, tuple[JSON, bool]] = {}


def _correlate_list(old: Any, new: list[Any], schema: JSON) -> dict[int, Any]:
    """Old items for new ones: by key for list-type map, none otherwise (as the real server)."""
    if not isinstance(old, list) or schema.get("x-kubernetes-list-type") != "map":
        return {}
    keys = schema.get("x-kubernetes-list-map-keys") or []
    index = {json.dumps([o.get(k) for k in keys]): o for o in old if isinstance(o, dict)}
    out = {}
    for i, item in enumerate(new):
        if isinstance(item, dict):
            k = json.dumps([item.get(x) for x in keys])
            if k in index:
                out[i] = index[k]
    return out


def _rules(value: Any, schema: JSON, path: list[str], causes: list[Cause], old: Any, has_old: bool) -> None:
    for rule in _plan(schema).rules:
        text = rule.get("rule") or ""
        transition = cel.uses_old_self(text)
        if transition and not has_old:
            continue  # a transition rule: only on updates with a correlated old value
        try:
            ok = cel.evaluate(text, value, old, has_old and transition)
        except cel.RuleError as e:
            ok = e
        if ok is True:
            continue
        field_path = rule.get("fieldPath") or ""
        target = path + [p for p in re.split(r"\.(?![^\[]*\])", field_path.lstrip(".")) if p] if field_path else path
        where = _path(target) or "<nil>"
        type_shown = schema.get("type") or ""
        if isinstance(ok, cel.RuleError):
            causes.append(Cause(where, "FieldValueInvalid", f"Invalid value: \"{type_shown}\": {ok}"))
            continue
        message = rule.get("message") or f"failed rule: {text}"
        if rule.get("messageExpression"):
            try:
                got = cel.evaluate(rule["messageExpression"], value, old, has_old)
                if isinstance(got, str) and got.strip():
                    message = got
            except cel.RuleError:
                pass
        reason = rule.get("reason") or "FieldValueInvalid"
        if reason == "FieldValueRequired":
            causes.append(Cause(where, reason, f"Required value: {message}"))
        elif reason == "FieldValueForbidden":
            causes.append(Cause(where, reason, f"Forbidden: {message}"))
        elif reason == "FieldValueDuplicate":
            causes.append(Cause(where, reason, f"Duplicate value: \"{type_shown}\": {message}"))
        else:
            causes.append(Cause(where, "FieldValueInvalid", f"Invalid value: \"{type_shown}\": {message}"))


# ------------------------------------------------------------------ the request path

def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """One 422 Invalid Status for ``causes``, worded as the real server words it."""
    qualified = f"{kind}.{group}" if group else kind
    texts = [c.text() for c in causes]
    agg = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(422, f'{qualified} "{name}" is invalid: {agg}', reason="Invalid",
                    details={"name": name, "group": group, "kind": kind,
                             "causes": [c.as_status() for c in causes]})


def strict_error(kind: str, version: str, unknown: list[str]) -> ApiError:
    fields = ", ".join(f'unknown field "{p}"' for p in unknown)
    return ApiError(400, f"{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {fields}",
                    reason="BadRequest")


def admit_custom(obj: JSON, schema: JSON, kind: str, group: str, version: str, validation: str,
                 warnings: list[str], old: JSON | None = None, status_only: bool = False) -> JSON:
    """Prune (or refuse) unknown fields, default and validate ``obj`` in place; returns it."""
    strict = validation == "Strict"
    unknown = unknown_fields(obj, schema, prune=not strict)  # one walk: pruning reports what it prunes
    if unknown and strict:
        raise strict_error(kind, version, unknown)
    if unknown and validation == "Warn":
        warnings.extend(f'unknown field "{p}"' for p in unknown)
    apply_defaults(obj, schema)
    causes = validate(obj, schema, old, old is not None)
    if causes:
        raise invalid(kind, group, (obj.get("metadata") or {}).get("name", ""), causes)
    return obj
