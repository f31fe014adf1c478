"""The gate for the methods other than DFlash (pure): ``check_method`` is the one entry point the whole
analysis calls for every method outside the DFlash checker path (and for ``dflash2`` after it), so family
detection and the per-family rules (EAGLE-3 aux-layer ids, MTP layers, DSpark fields, ...) live behind it.

It returns findings only; what the renderer needs for these methods is derived in ``methodplan``.
"""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from .options import Options


def check_method(drafter_doc: Any, target_doc: Any, o: Options, info=None, row=None) -> list[Finding]:
    """Findings for ``o.method``'s drafter (None for drafterless methods) against the target under the
    engine release ``row`` (None: no engine given): the family's gate (``gates.run_gates``). On the DFlash
    path the DFlash rules already ran and are not repeated."""
    from .. import methods
    from .gates import run_gates

    findings, _, _ = run_gates(drafter_doc, target_doc, o, info, row, dflash_rules_ran=methods.uses_dflash_path(o.method))
    return findings
