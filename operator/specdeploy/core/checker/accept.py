"""Findings after the rules (pure): codes the user accepts become info (``spec.checks.accept``), and one
finding per root cause (an absent field's finding dropped where its wrong type is already reported)."""

from __future__ import annotations

import re
from dataclasses import replace

from ..findings import Finding, Severity


def apply_accept(findings: list[Finding], accept: tuple[str, ...]) -> tuple[list[Finding], list[Finding]]:
    """(findings with every accepted overridable one turned into info, the accepted ones as they were)."""
    from ..catalog import CATALOG

    if not accept:
        return findings, []
    wanted = {c for c in accept if c in CATALOG and CATALOG[c].overridable}
    out, accepted = [], []
    for f in findings:
        if f.code in wanted and f.severity is not Severity.INFO:
            accepted.append(f)
            f = replace(f, severity=Severity.INFO,
                        message=f"accepted ({f.severity.value}) through spec.checks.accept: {f.message}")
        out.append(f)
    return out, accepted


# Findings that say a field is absent (and what is assumed instead). A field present with the wrong
# type is parsed as absent, so each of these would repeat its InvalidFieldType: the wrong type is
# the root cause and the only finding kept for that field.
ABSENCE_CODES = frozenset({"BlockSizeDefaulted", "SlidingWindowDefaulted", "SlidingWindowMissing", "TargetFieldMissing",
                           "TargetLayerIdsMissing", "DrafterFieldMissing", "MaskTokenMissing"})


def _field_name(path: str) -> str:
    return re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])


def one_per_root_cause(findings: list[Finding]) -> list[Finding]:
    """Drop an absence finding for a field that has an InvalidFieldType finding in the same config
    (e.g. ``block_size: NaN`` is InvalidFieldType, not also BlockSizeDefaulted)."""
    invalid = {(f.source, _field_name(f.path)) for f in findings if f.code == "InvalidFieldType"}
    return [f for f in findings if not (f.code in ABSENCE_CODES and (f.source, _field_name(f.path)) in invalid)]
