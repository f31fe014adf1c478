"""Can the target hand its hidden states over to the drafter at all (pure)? EAGLE-3 heads and the DFlash
family (DFlash, DFlash2, DSpark, Domino) are fed the target's hidden states at their aux/tap layers, and
only target classes built to hand them over can serve one; the engine refuses to start otherwise.

- vLLM: one interface for every such draft. Both model runners raise RuntimeError unless the target class is
  ``SupportsEagle3`` (``v1/worker/gpu_model_runner.py`` ``_setup_eagle3_aux_hidden_state_outputs``, V2
  ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`` ``set_eagle3_aux_hidden_state_layers``), and they ask
  for the aux hidden states under ``eagle3``, ``dflash`` (DFlash2 included) and ``dspark``
  (``requires_aux_hidden_states``; the V1 runner's ``DFlashProposer`` branch alike). Facts key
  ``eagle3_capture``.
- SGLang: one hook per kind (``model_runner_components/attention_backend_setup.py``
  ``configure_aux_hidden_state_capture``): EAGLE3 needs ``set_eagle3_layers_to_capture`` (``eagle3_capture``),
  DFLASH ``set_dflash_layers_to_capture`` (``target_capture``, which also records each class's id mapping),
  DSPARK ``set_dspark_layers_to_capture`` (``dspark_capture``) or else the DFlash hook.

The facts are read from one release per engine (``RECORDED``); another release is checked against them (an
error for an older one, a warning for a newer one, which may have gained the hook).
"""

from __future__ import annotations

from typing import NamedTuple

from ..modelconfig import TargetConfig
from .results import T

RECORDED = {"vllm": "0.33.0", "sglang": "0.5.23"}
ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang"}
KINDS = ("eagle3", "dflash", "dspark")
# the facts keys each (engine, kind) answer is read from (all from the same release)
FACT_KEYS = {
    ("vllm", "eagle3"): ("eagle3_capture",), ("vllm", "dflash"): ("eagle3_capture",),
    ("vllm", "dspark"): ("eagle3_capture",),
    ("sglang", "eagle3"): ("eagle3_capture",),
    # eagle3_capture for the list of SGLang's model classes (a name outside it loads the Transformers fallback)
    ("sglang", "dflash"): ("target_capture", "eagle3_capture"),
    ("sglang", "dspark"): ("target_capture", "dspark_capture", "eagle3_capture"),
}
SGLANG_FALLBACK = "the Transformers fallback (models/transformers.py), which has no {hook}"
SGLANG_HOOK = {"eagle3": "set_eagle3_layers_to_capture", "dflash": "set_dflash_layers_to_capture",
               "dspark": "set_dspark_layers_to_capture or set_dflash_layers_to_capture"}


def is_older(version: str, than: str) -> bool:
    """Whether engine version ``version`` is older than ``than`` (False when either does not parse)."""
    from ..versions import parse_version

    a, b = parse_version(version), parse_version(than)
    return a is not None and b is not None and a < b


def _records(engine: str, version: str | None, keys: tuple[str, ...]) -> tuple[str, dict] | None:
    """(release the facts are from, {key: record}) for this release, else for the recorded one; every key present."""
    from .. import enginedata

    for v in ([version] if version else []) + ([RECORDED[engine]] if engine in RECORDED else []):
        doc = enginedata.load_facts(engine, v)
        facts = (doc or {}).get("facts", {})
        recs = {k: facts.get(k) for k in keys}
        if all(isinstance(r, dict) and isinstance(r.get("value"), dict) for r in recs.values()):
            return v, recs
    return None


def capture_facts(engine: str, version: str | None) -> tuple[str, dict] | None:
    """(release the facts are from, the ``eagle3_capture`` record) for this release, else for the recorded one."""
    hit = _records(engine, version, ("eagle3_capture",))
    return (hit[0], hit[1]["eagle3_capture"]) if hit else None


def target_captures(engine: str, arch: str, version: str | None = None, kind: str = "eagle3"
                    ) -> tuple[bool | None, str, str]:
    """(can this engine's ``arch`` class hand its hidden states to a ``kind`` drafter, the class, hook or fallback
    it loads, the release the answer is from). None where no facts are recorded for the engine."""
    keys = FACT_KEYS.get((engine, kind))
    hit = _records(engine, version, keys) if keys else None
    if hit is None:
        return None, "", ""
    rv, recs = hit
    e3 = recs["eagle3_capture"]["value"]
    sup, uns = e3.get("supported") or {}, e3.get("unsupported") or {}
    if engine == "vllm" or kind == "eagle3":
        if arch in sup:
            return True, sup[arch], rv
        if arch in uns:
            return False, uns[arch] if isinstance(uns, dict) else arch, rv
        # not a class of the engine: vLLM loads it through its Transformers backend (SupportsEagle3), SGLang through
        # its Transformers fallback (no set_eagle3_layers_to_capture)
        return engine == "vllm", str(e3.get("unlisted") or ""), rv
    tc = recs["target_capture"]["value"]
    if arch in tc:
        chain = tc[arch].get("chain") if isinstance(tc[arch], dict) else None
        return True, (chain[0] if chain else f"{arch}.set_dflash_layers_to_capture"), rv
    if kind == "dspark":
        ds = recs["dspark_capture"]["value"].get("supported") or {}
        if arch in ds:
            return True, ds[arch], rv
    if arch in sup or arch in uns:
        return False, arch, rv
    return False, SGLANG_FALLBACK.format(hook=SGLANG_HOOK[kind]), rv


def needs_capture(engine: str, kind: str, version: str | None = None) -> bool:
    """Whether the engine asks the target for aux hidden states under this kind of draft: vLLM's recorded
    ``requires_aux_hidden_states`` methods where recorded (eagle3 is gated by ``use_aux_hidden_state`` apart);
    SGLang always for EAGLE3 heads with aux states and the DFlash family (``spec_aux_hidden_state.py``)."""
    if engine != "vllm" or kind == "eagle3":
        return True
    hit = capture_facts(engine, version)
    methods = hit[1]["value"].get("methods") if hit else None
    return kind in methods if isinstance(methods, list) and methods else True


def _how(engine: str, kind: str, method: str) -> str:
    if engine == "vllm":
        why = "" if kind == "eagle3" else (
            f"its speculative method {method!r} reads the target's hidden states through the EAGLE-3 interface "
            "(v1/worker/gpu/spec_decode/eagle/eagle3_utils.py requires_aux_hidden_states; the V1 runner's DFlash "
            "branch alike), and ")
        return ("vLLM's model runner raises RuntimeError 'Model does not support EAGLE3 interface' at load: "
                f"{why}the class has no SupportsEagle3 among its bases (v1/worker/gpu_model_runner.py "
                "_setup_eagle3_aux_hidden_state_outputs, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py "
                "set_eagle3_aux_hidden_state_layers)")
    if kind == "eagle3":
        return ("SGLang raises ValueError 'does not implement set_eagle3_layers_to_capture' at start-up "
                "(model_runner_components/attention_backend_setup.py configure_aux_hidden_state_capture)")
    algo = "DSPARK" if kind == "dspark" else "DFLASH"
    return ("SGLang raises ValueError 'implements neither set_dspark_layers_to_capture nor "
            "set_dflash_layers_to_capture' at start-up (model_runner_components/attention_backend_setup.py "
            f"configure_aux_hidden_state_capture): {algo} needs {SGLANG_HOOK[kind]} on the target model")


class CaptureProblem(NamedTuple):
    message: str
    newer: bool  # the facts are from an older release than the one checked: a warning, not an error


def target_capture(kind: str, drafter: str, t: TargetConfig | None, o, *,
                   engines: tuple[str, ...] = ("vllm", "sglang"), method: str | None = None
                   ) -> tuple[dict, CaptureProblem | None]:
    """The shared rule: ``t`` must hand its hidden states to ``drafter`` ("an EAGLE-3 drafter") on ``o.engine``.
    Returns (``{"targetCapture": ...}`` where it captures, else the problem: the message names the engine release
    and the fixes: the other engine of ``engines`` where its class captures, mtp where the target has MTP layers
    the engine runs, ngram). The caller reports it under its own code, on ``$.architectures[0]`` (``report``)."""
    engine = o.engine
    if engine not in RECORDED or t is None or not t.architectures or not needs_capture(engine, kind, o.engine_version):
        return {}, None
    arch = t.architectures[0]
    ok, where, rv = target_captures(engine, arch, o.engine_version, kind)
    if ok is None:
        return {}, None
    if ok:
        return {"targetCapture": where}, None
    name = ENGINE_NAME[engine]
    version = o.engine_version or RECORDED[engine]
    how = _how(engine, kind, method or kind)
    if where.startswith("the "):  # not a class of the engine: its fallback
        what = f"{arch} (no {name} class of that name: it loads {where})"
    elif ":" in where:
        what = f"{arch} ({where.removeprefix('vllm/model_executor/').replace(':', ' ')})"
    else:
        what = arch
    fixes = []
    for other in engines:
        if other == engine:
            continue
        ok_other, _, rv_other = target_captures(other, arch, None, kind)
        if ok_other:
            fixes.append(f"serve it on {ENGINE_NAME[other]} ({ENGINE_NAME[other]} {rv_other}'s {arch} captures them)")
    from .mtp import SGLANG_MTP, vllm_mtp_row, mtp_layers

    n_mtp, _ = mtp_layers(t)
    if n_mtp and (SGLANG_MTP.get(arch) if engine == "sglang" else vllm_mtp_row(t)):
        fixes.append(f"use method mtp (the target's own {n_mtp} MTP layer{'s' if n_mtp > 1 else ''})")
    fixes.append("use method ngram (no drafter)")
    fixes.append(f"or a target whose {name} class captures them")
    newer = is_older(rv, version)
    msg = (f"the target {what} cannot hand hidden states to {drafter} on {name} {version}: {how}"
           + (f" (read from {name} {rv}; a newer release may have added it)" if newer else
              f" (read from {name} {rv})" if rv != version else "")
           + ". Fix: " + "; ".join(fixes))
    return {}, CaptureProblem(msg, newer)


CAPTURE_PATH = (T, "$.architectures[0]")  # where both capture findings point
