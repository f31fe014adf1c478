"""The per-family gates behind ``check_method`` (pure): family detection, the method/family match, and
each family's rules (``eagle3``, ``mtp``, ``dflashfamily``). ``run_gates`` never raises on any JSON input.
"""

from __future__ import annotations

from typing import Any

from ..findings import Finding
from ..memo import by_identity
from ..modelconfig import LIST_MAX
from .dflashfamily import check_dflash_capture, check_dflash_family
from .eagle3 import check_eagle3
from .family import Family, detect_family, method_family_problem
from .mtp import check_mtp, steps_of
from .parsed import drafter_of, target_of
from .results import S, Out


@by_identity(64, name="checker.family")  # the same document object: the same family (core/memo.py)
def family_of(drafter_doc: Any) -> Family | None:
    return detect_family(drafter_doc) if isinstance(drafter_doc, dict) else None


def family_mismatch(drafter_doc: Any, method: str) -> Finding | None:
    """The MethodFamilyMismatch finding for this drafter under ``method``, or None."""
    fam = family_of(drafter_doc)
    problem = method_family_problem(method, fam) if fam is not None else None
    if problem is None:
        return None
    out = Out()
    out.err("MethodFamilyMismatch", S, "spec.speculation.method", problem)
    return out.items[0]


def _layer_ids(doc: dict) -> list[int] | None:
    dc = doc.get("dflash_config") if isinstance(doc.get("dflash_config"), dict) else {}
    v = dc.get("target_layer_ids", doc.get("target_layer_ids"))
    if isinstance(v, list) and len(v) <= LIST_MAX and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def run_gates(drafter_doc: Any, target_doc: Any, o, info=None, row=None, *, dflash_rules_ran: bool = True
              ) -> tuple[list[Finding], Family | None, dict]:
    """(findings, the drafter's family, what the gate derived) for ``o.method``. ``dflash_rules_ran``: the
    DFlash rules (layers, window) already ran on this drafter, so they are not repeated for DSpark."""
    out = Out()
    t, _ = target_of(target_doc)  # its findings are the analysis's own
    fam = family_of(drafter_doc)
    derived: dict = {"family": fam.to_dict()} if fam is not None else {}
    mismatch = family_mismatch(drafter_doc, o.method)
    if mismatch is not None:
        return [mismatch], fam, derived
    if o.method == "mtp":
        derived.update(check_mtp(t, o, steps_of(o), out))
    elif fam is not None and o.method == "eagle3":
        derived.update(check_eagle3(drafter_doc, fam, t, o, out))
    elif fam is not None and fam.name in ("dflash", "dflash2", "dspark", "domino"):
        if fam.name == "dspark" and not dflash_rules_ran:
            from .layers import check_drafter

            d, df = drafter_of(drafter_doc)
            out.items.extend(df)
            if d is not None:
                sub = Out()
                check_drafter(d, t, sub)
                # the family is DSpark, not "not a DFlash drafter" (DeepSeek's DSpark drafts have no dflash_config)
                out.items.extend(f for f in sub.items if f.code != "NotADFlashDrafter")
        n = t.num_hidden_layers.value if (t is not None and t.num_hidden_layers) else None
        check_dflash_family(drafter_doc, fam, o, n, _layer_ids(drafter_doc), out)
        derived.update(check_dflash_capture(fam, t, o, out))
    return out.limited(), fam, derived
