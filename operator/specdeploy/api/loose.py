"""A typed object built from what a model refused (pure): every well-typed field kept, defaults for the rest.

``loose(Model, raw)`` walks ``Model``'s fields (by alias, as the JSON has them) and keeps a raw value when
its Python type fits the field's annotation, whatever the field's constraints say (a ``blockSize`` of 100
is kept although ``le=16`` refuses it); anything else takes the field's default, a required field without
one becomes None, a required nested model an empty loose one. No validator runs: the result is for reading
(``api/types.checker_options(..., lenient=True)``: the checker describes values the schema refused in its
own words), never for rendering. It follows the models: a field added to the API types needs nothing here.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_MISSING = object()


def _fits(ann: Any, v: Any) -> Any:
    """``v`` (or its loose form) when its type fits ``ann``; _MISSING otherwise."""
    origin = get_origin(ann)
    if origin is Annotated:
        return _fits(get_args(ann)[0], v)
    if origin in (Union, types.UnionType):
        for a in get_args(ann):
            got = _fits(a, v)
            if got is not _MISSING:
                return got
        return _MISSING
    if ann is type(None):
        return None if v is None else _MISSING
    if ann is Any:
        return v
    if origin is Literal:  # any value of a literal's type: the checker names the allowed ones
        return v if any(type(v) is type(x) for x in get_args(ann)) else _MISSING
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return loose(ann, v) if isinstance(v, dict) else _MISSING
    if origin in (list, tuple):
        if not isinstance(v, list):
            return _MISSING
        item = (get_args(ann) or (Any,))[0]
        return [x for x in (_fits(item, x) for x in v) if x is not _MISSING]
    if origin is dict:
        return v if isinstance(v, dict) else _MISSING
    if ann is bool:
        return v if isinstance(v, bool) else _MISSING
    if ann is int:
        return v if isinstance(v, int) and not isinstance(v, bool) else _MISSING
    if ann is float:
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else _MISSING
    if ann is str:
        return v if isinstance(v, str) else _MISSING
    return _MISSING


def _empty(ann: Any) -> Any:
    """A required field's stand-in: a loose empty model for a model, else None."""
    if get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return loose(ann, {})
    return None


def _capped(info: Any, v: Any) -> Any:
    """A list or mapping longer than its field's ``max_length`` cut to that length: the schema refuses the rest,
    and the checker's work on a refused value stays bounded (thousands of extraArgs, each looked up)."""
    cap = next((m.max_length for m in info.metadata if isinstance(getattr(m, "max_length", None), int)), None)
    if cap is None or not isinstance(v, (list, dict)) or len(v) <= cap:
        return v
    return v[:cap] if isinstance(v, list) else dict(list(v.items())[:cap])


def loose(model: type[M], raw: Any) -> M:
    """``model`` built from ``raw`` without validation: the fields whose values fit their types."""
    raw = raw if isinstance(raw, dict) else {}
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        got = _fits(info.annotation, _capped(info, raw[key])) if key in raw else _MISSING
        if got is _MISSING and info.is_required():
            got = _empty(info.annotation)
        if got is not _MISSING:
            values[name] = got
    return model.model_construct(**values)
