"""JSON with explicit limits (pure): config documents come from users, so nesting depth and size
are bounded before the parser recurses (CPython's json recursion would otherwise end in a
RecursionError deep inside whatever called it)."""

from __future__ import annotations

import json
from typing import Any
from specdeploy.core.errors import Permanent

MAX_DEPTH = 64  # real config.json files nest 3-4 levels; 64 leaves room for any real shape
MAX_BYTES = 8 * 1024 * 1024


class JsonLimitError(Permanent, ValueError):
    """The document is too deep or too large (a ValueError, like json's own errors)."""


def nesting_depth(text: str) -> int:
    """The deepest [ / { nesting outside strings (a linear scan, no recursion)."""
    depth = best = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> Any:
    """json.loads with a depth and size limit; raises ValueError (JsonLimitError or json's own)."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise JsonLimitError(f"{len(text)} bytes exceed the limit of {max_bytes}")
        text = text.decode("utf-8")
    if len(text) > max_bytes:
        raise JsonLimitError(f"{len(text)} characters exceed the limit of {max_bytes}")
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonLimitError(f"nesting depth {depth} exceeds the limit of {max_depth}")
    try:
        return json.loads(text)
    except RecursionError:  # a limit passed by the caller that the interpreter cannot hold
        raise JsonLimitError("nesting too deep for this interpreter") from None
