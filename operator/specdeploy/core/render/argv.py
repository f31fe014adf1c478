"""The engine's command line per (engine, method) (pure): exec-form argv from the spec's validated
fields and the checked configs, never a shell string. The method's name is the release's own
(``EngineRelease.method_names``: SGLang's --speculative-algorithm, vLLM's speculative_config.method). extraArgs are appended last, one argv element
each, kubelet-escaped; the checker refuses any that sets an owned flag. The pod's preflight checks
the rendered argv in the runtime (``specdeploy_runtime.preflight``, through ``specdeploy.flagdrift``)."""

from __future__ import annotations

import json
import re
from typing import Any

from .. import engines as eng
from .. import gpus, methods
from ..checker import Derived
from ..findings import Finding, Severity, Source

SGLANG_DIST_PORT = 20000
# spec.rollout Canary: vLLM finishes its in-flight requests for up to this long on SIGTERM instead of aborting them
# (--shutdown-timeout; 0, vLLM's default, aborts). It runs after the preStop wait (objects.PRESTOP_SLEEP_SECONDS)
# and both fit in the pod's grace period (objects.TERMINATION_GRACE_SECONDS), so a canary removed after its
# verdict fails no request it accepted (docs/how-to/roll-out-safely.md).
VLLM_DRAIN_SECONDS = 90


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_kubelet_vars(arg: str, env: dict[str, str]) -> str:
    """What kubelet does to ``$(VAR)`` in command/args: substitute defined variables, keep
    undefined references as written, ``$$`` escapes a dollar. No shell is involved."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, arg)


def escape_kubelet_vars(arg: str) -> str:
    """A user string the kubelet must pass through unchanged: every ``$`` doubled, so ``$(HF_TOKEN)``
    reaches the engine as those characters instead of the Secret's value (kubelet turns ``$$`` into ``$``)."""
    return arg.replace("$", "$$")


def _user_args(spec) -> list[str]:
    return [escape_kubelet_vars(a) for a in spec.engine.extra_args]


def _user_sets(spec, flag: str) -> bool:
    """Whether extraArgs already set ``flag`` (as ``FLAG VALUE`` or ``FLAG=VALUE``): the user's value wins."""
    return any(a == flag or a.startswith(flag + "=") for a in spec.engine.extra_args)


def _hub_revision(src, baked: bool = False) -> str | None:
    """The revision the engine is given: only for hub models (a path in the pod has none)."""
    return src.revision if (src.revision and src.pvc is None and not baked) else None


def _sglang_method_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str | None,
                        baked: bool) -> list[str]:
    """--speculative-algorithm (the release's own name for the method) and the method's flags."""
    f = row.flags
    method = spec.speculation.method
    a = [f["algorithm"], row.method_names[method]]
    if method == "mtp":
        # the draft path defaults to the target only for some architectures (_handle_eagle_family): always give it
        a += [f["draft_model"], target]
        if spec.target.revision and spec.target.pvc is None:
            a += [f["draft_revision"], spec.target.revision]
    elif drafter is not None:
        a += [f["draft_model"], drafter]
        if _hub_revision(spec.drafter, baked):
            a += [f["draft_revision"], spec.drafter.revision]
    if d.steps is not None:  # eagle3, eagle, draft_model (STANDALONE), mtp (NEXTN)
        a += [f["num_steps"], str(d.steps), f["eagle_topk"], str(d.topk), f["num_draft_tokens"], str(d.block_size)]
    elif method == "ngram":
        if spec.speculation.ngram is not None and spec.speculation.ngram.num_speculative_tokens is not None:
            a += [f["num_draft_tokens"], str(d.block_size)]
    else:  # dflash, dflash2 (block size), dspark (gamma + 1)
        a += [f["num_draft_tokens"], str(d.block_size)]
    if d.draft_window is not None:
        a += [f["draft_window"], str(d.draft_window)]
    return a


def _sglang_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str | None, multinode: bool,
                 baked: bool = False) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [f["model"], target]
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    a += [f["tensor_parallel"], str(spec.gpu.count), f["host"], "0.0.0.0", f["port"], str(eng.SGLANG.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    a += _sglang_method_args(spec, d, row, target, drafter, baked)
    if d.max_model_len is not None:
        a += [f["max_model_len"], str(d.max_model_len)]
    if d.draft_attention_backend:
        a += [f["draft_attention_backend"], d.draft_attention_backend]
    a.append(f["enable_metrics"])
    if not multinode:
        return a + _user_args(spec), None
    # Kubelet expands $(VAR) from the container env that LeaderWorkerSet injects: no shell.
    a += [f["nnodes"], str(spec.nodes), f["node_rank"], "$(LWS_WORKER_INDEX)",
          f["dist_init_addr"], f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_PORT}"]
    a += _user_args(spec)
    return a, list(a)


def vllm_speculative_config(spec, d: Derived, row: eng.EngineRelease, drafter: str | None, baked: bool) -> dict[str, Any]:
    """The --speculative-config document: ``method`` is the release's own name (config/speculative.py
    SpeculativeMethod), ``model`` the drafter (absent for mtp: vLLM uses the target; ngram/suffix need none)."""
    method = spec.speculation.method
    sc: dict[str, Any] = {"method": row.method_names[method]}
    if drafter is not None:
        sc["model"] = drafter
        if _hub_revision(spec.drafter, baked):
            sc["revision"] = spec.drafter.revision
    if method != "suffix":  # suffix: K defaults to suffix_decoding_max_tree_depth
        sc["num_speculative_tokens"] = d.num_speculative_tokens
    if method == "ngram":
        if d.ngram_min is not None:
            sc["prompt_lookup_min"] = d.ngram_min
        if d.ngram_max is not None:
            sc["prompt_lookup_max"] = d.ngram_max
    if spec.speculation.draft_attention_backend:
        sc["attention_backend"] = row.draft_attention_backends[spec.speculation.draft_attention_backend]
    return sc


def _vllm_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str | None, multinode: bool,
               baked: bool = False) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [target]  # `vllm serve MODEL`: the model is positional
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    if gpus.get_profile(spec.gpu.type).accelerator:  # the CPU build gets no GPU flag
        a += [f["tensor_parallel"], str(spec.gpu.count)]
    a += [f["host"], "0.0.0.0", f["port"], str(eng.VLLM.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    if d.max_model_len is not None:
        a += [f["max_model_len"], str(d.max_model_len)]
    sc = vllm_speculative_config(spec, d, row, drafter, baked)
    a += [f["speculative_config"], json.dumps(sc, sort_keys=True, separators=(",", ":"))]
    if spec.canary() and row.drain_flag and not _user_sets(spec, row.drain_flag):
        a += [row.drain_flag, str(VLLM_DRAIN_SECONDS)]
    if not multinode:
        return a + _user_args(spec), None
    dist = ["--nnodes", str(spec.nodes), "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    leader = a + dist + _user_args(spec)
    worker = a + dist + ["--headless"] + _user_args(spec)
    return leader, worker


# (engine, method) -> the argv builder: every method the API accepts except those in no release (ddtree).
# The renderer refuses any pair it has no entry for, so a method that gains a row cannot be served as another
# method under its name; a release that lacks the method is refused by the checker (MethodUnsupported).
ARG_BUILDERS = {(e, m): b for e, b in (("sglang", _sglang_args), ("vllm", _vllm_args))
                for m in methods.METHODS if m not in methods.REFUSED}
DDTREE_PULLS = methods.DDTREE_PULLS


def method_render_problem(engine: str, method: str, row: eng.EngineRelease | None = None) -> Finding | None:
    """A MethodNotRenderable error when the renderer has no command line for (engine, method), or the
    release ``row`` has no name for the method."""
    if (engine, method) in ARG_BUILDERS and (row is None or row.engine_method(method) is not None):
        return None
    why = f" (DDTree is not in any engine release: {DDTREE_PULLS})" if method == "ddtree" else ""
    ok = sorted(m for (e, m) in ARG_BUILDERS if e == engine and (row is None or row.engine_method(m)))
    return Finding(Severity.ERROR, "MethodNotRenderable", Source.SPEC, "spec.speculation.method",
                   f"the renderer has no {engine} command line for method {method!r}{why}; it refuses rather than "
                   f"serve another method under that name. Use one of: {methods.method_list(ok)}")
