"""One message catalog for SpeculativeDeployment spec validation (pure).

The admission webhook, the reconciler's status and the CLI all describe a bad spec with these
words: each problem is ``(field path, message, code)``. Where the checker has a rule for a field
(``core.checker.check_options``: the object-level checks) its message and code are used; where
only the schema refuses a value, pydantic's error is rewritten here into a sentence that names
what is expected (never ``String should match pattern '^/?[A-Za-z0-9_.]...'``).

``validate(obj)`` is the whole verdict on an object: the parse, then the object-level check of
the parsed spec. Every spec problem is reported the same way everywhere: the webhook rejects the
object, the reconciler sets ``DrafterCompatible=Unknown`` and ``Progressing=False`` with reason
``InvalidSpec``, the CLI exits 2.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any

import pydantic

from ..core.checker import Options, apply_accept, check_options
from ..core.findings import Severity
from . import types as T

INVALID_SPEC = "InvalidSpec"  # the condition reason of every spec problem

# What each pattern of the API types accepts, in words.
PATTERN_WORDS = {
    T.MODEL_PATTERN: "a hub repository id such as Qwen/Qwen3.6-27B, or with pvc a path inside the claim "
                     "(letters, digits, '_', '.', '-' and '/'; not starting with '-')",
    T.REVISION_PATTERN: "a hub branch, tag or commit (letters, digits, '.', '_', '-' and '/'; at most 128 characters)",
    T.NAME_PATTERN: "a Kubernetes object name (lowercase letters, digits, '-' and '.'; starting and ending with a "
                    "letter or digit)",
    T.IMAGE_PATTERN: "an image reference such as ghcr.io/specdeploy/runtime:vllm-0.33.0",
    T.VERSION_PATTERN: "a release number such as 0.5.23 or 0.33.0",
    T.QUANTITY_PATTERN: "a Kubernetes quantity such as 16Gi, 500m or 4",
    T.DURATION_PATTERN: "a duration such as 30s, 10m or 1h30m",
}


@dataclass(frozen=True)
class SpecProblem:
    path: str
    message: str
    code: str

    def line(self) -> str:
        """The one line every surface shows: ``spec.x.y: what is wrong and what to set [Code]``."""
        return f"{self.path}: {self.message} [{self.code}]"


def problems_message(problems: list[SpecProblem]) -> str:
    return "; ".join(p.line() for p in problems)


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def schema_message(err: dict) -> tuple[str, str]:
    """(message, code) for one pydantic error of the API types."""
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    got = f" (found {_shown(err.get('input'))})" if "input" in err and kind != "missing" else ""
    if kind == "extra_forbidden":
        return "unknown field; check the spelling against the API reference (docs/reference/api.md)", "UnknownField"
    if kind == "missing":
        return "is required", "FieldRequired"
    if kind == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(ctx.get("pattern", ""), f"a value matching {ctx.get('pattern')}")
        return f"must be {words}{got}", "FieldValueInvalid"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "?")
        return f"must be {op} {bound}{got}", "FieldValueOutOfRange"
    if kind in ("string_too_long", "too_long"):
        return f"is too long: at most {ctx.get('max_length')}{' characters' if kind == 'string_too_long' else ' items'}", \
            "FieldValueTooLong"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer{got}", "FieldTypeInvalid"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"must be a finite number{got}", "FieldTypeInvalid"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false{got}", "FieldTypeInvalid"
    if kind in ("string_type",):
        return f"must be a string{got}", "FieldTypeInvalid"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be an object{got}", "FieldTypeInvalid"
    if kind in ("list_type",):
        return f"must be a list{got}", "FieldTypeInvalid"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')}{got}", "FieldValueInvalid"
    if kind == "value_error":  # a model validator's own sentence
        return str(ctx.get("error") or err.get("msg", "invalid")).removeprefix("Value error, "), "FieldValueInvalid"
    return err.get("msg", "invalid"), "FieldValueInvalid"


def _union_tag(p: str) -> bool:
    """A pydantic location part that names a union member or a validator, not a field (a field may start with
    the same letters: `strategy`, `interval`)."""
    return p in ("int", "str", "float", "bool") or p.startswith(("function-", "literal[", "int-", "str-", "int[",
                                                                  "str["))


def loc_path(loc: tuple) -> str:
    """A pydantic error location as the field path a user writes (``spec.drafter[0].model``), union tags left out."""
    parts = [p for p in loc if not (isinstance(p, str) and _union_tag(p))]
    path = ""
    for p in parts:
        path += f"[{p}]" if isinstance(p, int) else (f".{p}" if path else str(p))
    return path or "(object)"


def object_check_errors(opts: Options | None) -> list[SpecProblem]:
    """The object-level check's errors (no configs), in the catalog's form."""
    if opts is None:
        return []
    try:
        found, _ = apply_accept(check_options(opts), opts.accept)
    except Exception:  # noqa: BLE001 - the lenient view is a courtesy; the schema's messages stand
        return []
    return [SpecProblem(f.path, f.message, f.code) for f in found if f.severity is Severity.ERROR]


# A model validator's sentence that starts with the field it refuses ("spec.drafter is required ..."): the
# problem is reported at that field, as the CRD's CEL rule (fieldPath) does.
_NAMED_FIELD = re.compile(r"^(spec(?:\.[A-Za-z]+)+)(?: is |: )")


def parse(obj: Any, limit: int | None = None) -> tuple[T.SpeculativeDeployment | None, list[SpecProblem]]:
    """(parsed CR, []) or (None, problems): the schema's refusals in the catalog's words, with the checker's
    message and code for a field where it has a rule (one problem per field). ``limit``: at most that many
    problems, and no work spent on the rest (the admission webhook's bound on an object with thousands of
    refused values; the work is linear in the problems listed, not quadratic in those refused)."""
    try:
        return T.SpeculativeDeployment.model_validate(obj), []
    except pydantic.ValidationError as e:
        errors = e.errors()
    except (RecursionError, ValueError, TypeError) as e:  # defensive: absurd inputs
        return None, [SpecProblem("(object)", f"cannot be read as a {T.KIND}: {str(e)[:200]}", "InvalidObject")]
    spec = obj.get("spec") if isinstance(obj, dict) else None
    checker: dict[str, SpecProblem] = {}
    for p in object_check_errors(T.checker_options(spec, lenient=True)):
        checker.setdefault(p.path, p)
    out: list[SpecProblem] = []
    used: set[str] = set()
    listed: set[str] = set()
    for err in errors:
        if limit is not None and len(out) >= limit:
            return None, out
        path = loc_path(tuple(err.get("loc", ())))
        named = _NAMED_FIELD.match(str((err.get("ctx") or {}).get("error") or "")) if err.get("type") == "value_error" \
            else None
        if named and (path in ("spec", "(object)") or named.group(1).startswith(path + ".")):
            path = named.group(1)  # a cross-field validator naming the field it refuses
        hit = next((checker[p] for p in checker if path == p or path.startswith((p + ".", p + "["))), None)
        if hit is not None:
            if hit.path not in used:
                out.append(hit)
                used.add(hit.path)
                listed.add(hit.path)
            continue
        if path in listed:
            continue  # one problem per field (a union reports each alternative)
        msg, code = schema_message(err)
        if named and path == named.group(1) and msg.startswith(path + ": "):
            msg = msg[len(path) + 2:]  # "spec.x: ..." is shown as the problem's own path
        out.append(SpecProblem(path, msg, code))
        listed.add(path)
    out += [p for path, p in checker.items() if path not in used]
    return None, out if limit is None else out[:limit]


def validate(obj: Any) -> tuple[T.SpeculativeDeployment | None, list[SpecProblem]]:
    """The whole verdict on an object: the parse, then the object-level check of the parsed spec."""
    cr, problems = parse(obj)
    if cr is None:
        return None, problems
    problems = object_check_errors(T.checker_options(cr.spec))
    return (cr if not problems else None), problems
