"""The whole analysis (pure): ``analyze`` parses both config.json documents, runs every rule and derives
what the renderer needs (block size, draft window, engine env); it never raises on any JSON input."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import methods
from ..findings import Finding, findings_bytes, sort_findings
from ..memo import MiB, approx_size, by_identity, size_of
from ..modelconfig import FULL, SLIDING, DrafterConfig, TargetConfig, not_object_finding
from .accept import apply_accept, one_per_root_cause
from .engine import check_backend, check_engine_release, check_hidden_act
from .fit import check_fit, check_memory, check_tp
from .gates import family_mismatch, family_of
from .method import check_method
from .methodplan import derive_method
from .layers import check_drafter, check_duplicates, check_engine_layer_rules, check_target, layer_view
from .options import Options, check_options_into, options_bytes
from .parsed import drafter_of, target_of
from .results import D, S, Analysis, Derived, Out
from .window import check_block_size, check_context, plan_window


def _derive(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, prof, out: Out) -> Derived:
    check_duplicates(d, t, info, out)
    types, drafter_window = layer_view(d, info, row, out)
    block = check_block_size(d, o, out)
    check_engine_layer_rules(d, t, o, info, row, out)
    env = check_engine_release(d, o, info, row, types, out)
    check_hidden_act(d, o, info, row, out)
    served = check_context(d, t, o, info, row, block, out)
    window, native, backend = plan_window(d, o, info, row, prof, types, drafter_window, block, served, out)
    check_backend(d, o, info, row, types, backend, out)
    check_tp(d, t, o, out)
    tb, db = check_fit(d, t, o, prof, out)
    memory = check_memory(d, t, o, prof, types, window, native, served, tb, db, out)
    if t is not None and t.has_auto_map and not o.trust_remote_code and info is not None:
        out.warn("RemoteCodeNotTrusted", S, "spec.target.trustRemoteCode",
                 "the target config has an auto_map (custom code); if the engine does not support the architecture "
                 "natively it will refuse to load it. Turn on spec.target.trustRemoteCode only if you trust that code")
    ddb = (o.ddtree_budget if o.ddtree_budget is not None else block - 1) if o.method == "ddtree" else None
    return Derived(
        block_size=block,
        num_speculative_tokens=block - 1,
        draft_window=window,
        drafter_window=drafter_window,
        layer_types=types,
        has_sliding=drafter_window is not None or SLIDING in types,
        mixed_layers=SLIDING in types and FULL in types,
        target_layer_ids=tuple(i.value - d.target_layer_ids_offset for i in (d.target_layer_ids.value if d.target_layer_ids else [])),
        engine_env=env,
        draft_attention_backend=backend,
        ddtree_budget=ddb,
        ddtree_topk=o.ddtree_topk if o.method == "ddtree" else None,
        target_weight_bytes=tb,
        drafter_weight_bytes=db,
        native_window=native,
        served_context=served,
        max_model_len=o.max_model_len,
        memory=memory,
    )


def _own_lists(a: Analysis) -> Analysis:
    return dataclasses.replace(a, findings=list(a.findings), accepted=list(a.accepted))


def _analysis_bytes(key: tuple, a: Analysis) -> int:
    """What a remembered analysis holds, estimated without walking the tables it points at: the key (the options),
    the findings, the derived settings, and the parsed views (read-only: their registered size)."""
    d = a.derived
    derived = 0 if d is None else 4096 + 64 * (len(d.layer_types) + len(d.target_layer_ids)) + approx_size(d.engine_env)
    return (256 + sum(options_bytes(k) for k in key if not isinstance(k, tuple)) + findings_bytes(a.findings) + findings_bytes(a.accepted) + derived
            + (size_of(a.drafter) if a.drafter is not None else 0) + (size_of(a.target) if a.target is not None else 0))


def analyze(drafter_doc: Any, target_doc: Any, options: Options | None = None) -> Analysis:
    """Every check for a drafter/target pair under the given options, and the derived settings."""
    return _remembered(drafter_doc, target_doc, options or Options())


# the same documents (by identity: core/memo.py) and options give the same analysis; each caller gets its own
# findings lists (render appends to them)
@by_identity(64, copy=_own_lists, max_bytes=16 * MiB, name="checker.analyze", sizeof=_analysis_bytes)
def _remembered(drafter_doc: Any, target_doc: Any, o: Options) -> Analysis:
    out = Out()
    info, row, prof = check_options_into(o, out)
    t, tf = target_of(target_doc)
    out.items.extend(tf)
    if t is not None:
        check_target(t, out)
    derived = None
    d = None
    family = family_of(drafter_doc) if methods.needs_drafter(o.method) else None
    mismatch = family_mismatch(drafter_doc, o.method) if family is not None else None
    if mismatch is not None:  # the one root cause: no rule of the wrong family runs
        out.items.append(mismatch)
    elif methods.uses_dflash_path(o.method):
        d, df = drafter_of(drafter_doc)
        out.items.extend(df)
        if d is not None:
            check_drafter(d, t, out)
            derived = _derive(d, t, o, info, row, prof, out)
        # the family's own rules after the DFlash ones (DFlash2 pairs, Domino, causality, sample_from_anchor)
        out.items.extend(check_method(drafter_doc, target_doc, o, info, row))
    elif methods.needs_drafter(o.method) and not isinstance(drafter_doc, dict):
        out.items.append(not_object_finding(D, drafter_doc))
    else:  # the drafter document of a drafterless method (mtp, ngram, suffix) is not read
        out.items.extend(check_method(drafter_doc if methods.needs_drafter(o.method) else None, target_doc, o, info, row))
        derived = derive_method(target_doc, drafter_doc, t, o, info, row, out)
    if any(f.code in ("DominoArchitectureUnsupported", "DominoUnsupportedByEngine") for f in out.items):
        # one root cause: the Domino rule names the fix (DFlashDraftModel on SGLang; no Domino on vLLM)
        out.items = [f for f in out.items if f.code != "DrafterArchitectureUnsupported"]
    if any(f.code == "MethodUnsupported" for f in out.items):  # the release row already refuses the method
        out.items = [f for f in out.items if f.code != "MethodNeedsV2Runner"]
    if any(f.code in ("MtpLayersMissing", "MtpUnsupportedByEngine") for f in out.items):
        out.items = [f for f in out.items if f.code != "MtpLayersUnknown"]  # the MTP gate's error says it
    findings, accepted = apply_accept(one_per_root_cause(out.limited()), o.accept)
    return Analysis(findings=sort_findings(findings), derived=derived, drafter=d, target=t, accepted=accepted,
                    options=o, family=family if family is not None and family.name != "unknown" else None)


def check(drafter_doc: Any, target_doc: Any, options: Options | None = None) -> list[Finding]:
    return analyze(drafter_doc, target_doc, options).findings
