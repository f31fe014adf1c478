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
    engine release ``row`` (None: no engine given). Family detection and per-family gates go here."""
    return []
