"""Speculation off (pure): the engine argv with every speculative-decoding flag removed, the target
served alone (a SpeculativeBenchmark's ``baseline`` variant)."""

from __future__ import annotations

from .. import engines as eng

# Capability-row flag keys of speculative decoding: each takes one value (core/engines.py rows).
SPECULATIVE_FLAG_KEYS = ("speculative_config", "algorithm", "draft_model", "draft_revision", "num_draft_tokens",
                         "num_steps", "eagle_topk", "draft_attention_backend", "draft_window")


def strip_speculation_args(engine: str, engine_version: str, args: list[str]) -> list[str]:
    """The engine argv with every speculative-decoding flag and its value removed: the target served
    alone (a SpeculativeBenchmark's ``baseline`` variant). Flags written ``--flag=value`` go too."""
    row = eng.get_engine(engine).release_for(engine_version)
    if row is None:
        raise ValueError(f"no {engine} capability row for {engine_version}")
    flags = {row.flags[k] for k in SPECULATIVE_FLAG_KEYS if k in row.flags}
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if a.split("=", 1)[0] in flags and "=" in a:
            continue
        out.append(a)
    return out
