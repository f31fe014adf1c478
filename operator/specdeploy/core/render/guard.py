"""The speculation guard as rendered (pure): the limit from the spec (or the controller's resolution of
``fromBenchmark``), its plan (``core/rollout/guard.py``), and its keys merged into the speculative-config argv."""

from __future__ import annotations

import json

from .. import engines as eng
from ..rollout import guard as gd
from ..checker import Derived


def guard_limit(spec, resolved: "gd.GuardLimit | None" = None) -> "gd.GuardLimit | None":
    """The guard's limit: ``maxConcurrency`` from the spec, else the controller's resolution of ``fromBenchmark``
    (None until the benchmark is Complete: nothing is rendered)."""
    g = spec.speculation.guard
    if g is None:
        return None
    if g.max_concurrency is not None:
        return gd.GuardLimit(g.max_concurrency, "spec.speculation.guard.maxConcurrency")
    return resolved


def plan_guard(spec, d: Derived, resolved: "gd.GuardLimit | None" = None) -> "gd.GuardPlan | None":
    limit = guard_limit(spec, resolved)
    if limit is None:
        return None
    return gd.plan_guard(spec.engine.name, spec.engine.version, limit, d.num_speculative_tokens)


def apply_guard(args: list[str] | None, row: eng.EngineRelease, plan: "gd.GuardPlan | None") -> list[str] | None:
    """Merge the guard's keys into the ``--speculative-config`` JSON of an argv (a copy); an argv without
    speculation (a benchmark's baseline variant) or a plan with nothing to render is returned as it is."""
    flag = row.flags.get("speculative_config")
    if args is None or plan is None or not plan.config or flag is None or flag not in args:
        return args
    i = args.index(flag) + 1
    sc = {**json.loads(args[i]), **plan.config}
    return args[:i] + [json.dumps(sc, sort_keys=True, separators=(",", ":"))] + args[i + 1:]
