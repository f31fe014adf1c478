"""The parsed views of a config.json document, shared per read-only document (pure).

``analyze`` and the method gates both parse the target (and the drafter); the reconciler and the
admission webhook hand them the same read-only documents again and again (core/memo.py), only the
options differ. Here a read-only document's ``TargetConfig`` / ``DrafterConfig`` is parsed once and
declared read-only itself, so what is computed from it alone (weight estimate, KV shape, family) is
remembered by its identity too. Any other document is parsed afresh on every call, as before.
Each caller gets its own findings list.
"""

from __future__ import annotations

from typing import Any

from .. import memo
from ..findings import Finding
from ..modelconfig import DrafterConfig, TargetConfig, parse_drafter, parse_target


def target_of(doc: Any) -> tuple[TargetConfig | None, list[Finding]]:
    """``modelconfig.parse_target``; the same (read-only) ``TargetConfig`` for the same read-only document."""
    if not memo.is_read_only(doc):
        return parse_target(doc)
    cfg, findings = _shared_target(doc)
    return cfg, list(findings)


def drafter_of(doc: Any) -> tuple[DrafterConfig | None, list[Finding]]:
    """``modelconfig.parse_drafter``; the same (read-only) ``DrafterConfig`` for the same read-only document."""
    if not memo.is_read_only(doc):
        return parse_drafter(doc)
    cfg, findings = _shared_drafter(doc)
    return cfg, list(findings)


@memo.by_identity(64, max_bytes=12 * memo.MiB, name="checker.parsed_target")
def _shared_target(doc: Any) -> tuple[TargetConfig | None, tuple[Finding, ...]]:
    cfg, findings = parse_target(doc)
    return memo.read_only(cfg), tuple(findings)


@memo.by_identity(64, max_bytes=12 * memo.MiB, name="checker.parsed_drafter")
def _shared_drafter(doc: Any) -> tuple[DrafterConfig | None, tuple[Finding, ...]]:
    cfg, findings = parse_drafter(doc)
    return memo.read_only(cfg), tuple(findings)
