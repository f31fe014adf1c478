"""The engine's command line per (engine, method) (pure): exec-form argv from the spec's validated
fields and the checked configs, never a shell string. extraArgs are appended last, one argv element
each, kubelet-escaped; the checker refuses any that sets an owned flag. The pod's preflight checks
the rendered argv in the runtime (``specdeploy_runtime.preflight``, through ``specdeploy.flagdrift``)."""

from __future__ import annotations

import json
import re
from typing import Any

from .. import engines as eng
from .. import gpus
from ..checker import Derived
from ..findings import Finding, Severity, Source

SGLANG_DIST_PORT = 20000


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


def _hub_revision(src, baked: bool = False) -> str | None:
    """The revision the engine is given: only for hub models (a path in the pod has none)."""
    return src.revision if (src.revision and src.pvc is None and not baked) else None


def _sglang_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool,
                 baked: bool = False) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [f["model"], target]
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    a += [f["tensor_parallel"], str(spec.gpu.count), f["host"], "0.0.0.0", f["port"], str(eng.SGLANG.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    a += [f["algorithm"], "DFLASH", f["draft_model"], drafter]
    if _hub_revision(spec.drafter, baked):
        a += [f["draft_revision"], spec.drafter.revision]
    a += [f["num_draft_tokens"], str(d.block_size)]
    if d.draft_window is not None:
        a += [f["draft_window"], str(d.draft_window)]
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


def _vllm_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool,
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
    sc: dict[str, Any] = {"method": "dflash", "model": drafter, "num_speculative_tokens": d.num_speculative_tokens}
    if _hub_revision(spec.drafter, baked):
        sc["revision"] = spec.drafter.revision
    if spec.speculation.draft_attention_backend:
        sc["attention_backend"] = row.draft_attention_backends[spec.speculation.draft_attention_backend]
    a += [f["speculative_config"], json.dumps(sc, sort_keys=True, separators=(",", ":"))]
    if not multinode:
        return a + _user_args(spec), None
    dist = ["--nnodes", str(spec.nodes), "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    leader = a + dist + _user_args(spec)
    worker = a + dist + ["--headless"] + _user_args(spec)
    return leader, worker


# (engine, method) -> the argv builder. The renderer refuses any method it has no entry for, so a
# capability row that gains a method (DDTree) cannot be served as plain DFlash under its name.
ARG_BUILDERS = {("sglang", "dflash"): _sglang_args, ("vllm", "dflash"): _vllm_args}
DDTREE_PULLS = "sgl-project/sglang PR #29907 (open), liranringel/ddtree; no vLLM pull request yet"


def method_render_problem(engine: str, method: str) -> Finding | None:
    """A MethodNotRenderable error when the renderer has no command line for (engine, method)."""
    if (engine, method) in ARG_BUILDERS:
        return None
    why = f" (DDTree is not in any engine release: {DDTREE_PULLS})" if method == "ddtree" else ""
    return Finding(Severity.ERROR, "MethodNotRenderable", Source.SPEC, "spec.speculation.method",
                   f"the renderer has no {engine} command line for method {method!r}{why}; it refuses rather than "
                   "serve another method under that name. Use method dflash")
