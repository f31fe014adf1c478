"""``verify-window``: prove the windowed draft cache is exact where it must be.

Checks, at several context lengths S (block queries at S..S+B-1):

(a) *window*: on every sliding layer, every key older than ``p - w + 1`` (and every future
    key) gets softmax weight exactly 0.0 for every block query p, and every key inside
    ``[p - w + 1, p]`` gets a positive weight; full-attention layers see exactly the keys
    their rule allows (all context; the block bidirectionally unless causal). Checked on
    the weights of the full cache (where old keys are present) and of the compact cache.
    The expected key set is computed here, independently of the mask the model uses.
(b) *exactness*: on sliding layers the compact cache keeping r >= w - 1 tokens gives the
    same attention output as the full cache plus mask (max |diff| <= tolerance, fp32),
    layer by layer from identical layer inputs.
(c) *approximation*: on full-attention layers, how far the compact cache deviates from
    the full cache (max |diff|, relative difference, and the attention mass that the
    compact cache hides). Reported, never gating.

Extra information: the condition is tight (r = w - 2 deviates), the fused SDPA kernel
that the benchmark uses agrees with the eager path, and the end-to-end drafter output.

``fault`` injects a deliberate bug so tests (and sceptical operators) can watch the
verifier fail: ``no-window``, ``off-by-one``, ``narrow``, ``finite-bias``, ``short-cache``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

FAULTS = ("none", "no-window", "off-by-one", "narrow", "finite-bias", "short-cache")


@dataclass
class VerifyOptions:
    context: int = 8192
    window: int = 2048
    block: int = 16
    layers: tuple[str, ...] = ("sliding_attention",) * 4 + ("full_attention",)
    keep: int | None = None  # compact cache size r; default w - 1, the least the condition allows
    device: str = "cpu"
    tolerance: float = 1e-5
    seed: int = 0
    fault: str = "none"
    hidden_size: int = 256
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    causal: bool = False
    checkpoints: tuple[int, ...] | None = None
    # Real weights: a trained drafter (its layers made ``layers``/``window``) fed by its target's
    # layer outputs over the target's greedy continuation of a prompt of the language.
    drafter_dir: str | None = None
    target_dir: str | None = None


def _fault_mask(fault: str):
    """A wrong mask function for a fault, or None (the model's own HF mask)."""
    import torch

    from .draftcache import SLIDING

    def build(rule):
        def mask(q_pos, k_pos, kind, window, causal):
            qp, kp = q_pos[:, None], k_pos[None, :]
            valid = kp >= 0
            if kind == SLIDING:
                return valid & (kp <= qp) & rule(qp - kp, window)
            return (valid & (kp <= qp)) if causal else valid.expand(qp.shape[0], kp.shape[1])
        return mask

    if fault == "no-window":
        return build(lambda dist, w: torch.ones_like(dist, dtype=torch.bool))
    if fault == "off-by-one":
        return build(lambda dist, w: dist <= w)
    if fault == "narrow":
        return build(lambda dist, w: dist < w - 1)
    return None


def expected_visible(q_pos, k_pos, kind: str, window: int, causal: bool):
    """The key set a query must see, written from the rules (not from the model's mask):
    sliding: p - w + 1 <= k <= p; full: every key (k <= p when causal). Empty slots: none."""
    qp, kp = q_pos[:, None], k_pos[None, :]
    present = kp >= 0
    if kind == "sliding_attention":
        return present & (kp >= qp - (window - 1)) & (kp <= qp)
    if causal:
        return present & (kp <= qp)
    return present.expand(qp.shape[0], kp.shape[1])


def default_checkpoints(context: int, window: int, block: int) -> list[int]:
    pts = {block, window - 1, window, window + 1, window + block, context // 2 + 3, context}
    return sorted(p for p in pts if 1 <= p <= context)


def _weight_check(weights, q_pos, k_pos, kind, window, causal) -> dict:
    """(a) on one layer's weights [Hq, B, N]."""
    import torch

    exp = expected_visible(q_pos, k_pos, kind, window, causal)  # [B, N]
    w = weights.float()
    outside = w.masked_select(~exp.unsqueeze(0).expand_as(w))
    inside = w.masked_select(exp.unsqueeze(0).expand_as(w))
    leaked = int((outside != 0).sum())
    starved = int((inside <= 0).sum())
    row_err = float((w.sum(-1) - 1).abs().max()) if w.numel() else 0.0
    missing = 0
    if kind == "sliding_attention":
        # Keys of the window that the cache no longer holds (a compact cache that is too short).
        want_n = torch.clamp(q_pos + 1, max=window)
        missing = int((want_n - exp.sum(-1)).clamp(min=0).sum()) * int(w.shape[0])
    out = {
        "leaked_keys": leaked,
        "missing_keys": missing,
        "max_leaked_weight": float(outside.abs().max()) if outside.numel() else 0.0,
        "starved_keys": starved,
        "row_sum_error": row_err,
        "queries": int(w.shape[0] * w.shape[1]),
    }
    if kind == "sliding_attention":
        # The oldest key each query actually attends to, against p - w + 1.
        attended = (w > 0).any(0)  # [B, N]
        big = torch.iinfo(torch.long).max
        oldest = torch.where(attended, k_pos[None, :].expand_as(attended), torch.full_like(attended, big, dtype=torch.long)).amin(-1)
        want = torch.clamp(q_pos - (window - 1), min=0)
        bad = (oldest != want).nonzero().flatten().tolist()
        if bad:
            i = bad[0]
            out["first_bad_query"] = {"query": int(q_pos[i]), "oldest_attended": int(oldest[i]), "expected_oldest": int(want[i])}
    out["ok"] = leaked == 0 and starved == 0 and missing == 0 and row_err <= 1e-4 and "first_bad_query" not in out
    return out


@dataclass
class _VerifyRun:
    """What one verification runs on: the drafter, its caches and the context it is fed."""

    model: Any
    geom: Any
    real: Any  # RealWeights | None
    feats: Any
    gen: Any
    chunk_rng: Any
    full: Any
    compact: Any
    tight: Any  # a compact cache one token too short (sliding layers only), or None
    keep: int
    tight_keep: int
    checkpoints: list[int]
    sliding_ids: list[int]
    full_ids: list[int]


@dataclass
class _Tally:
    """What the checkpoints measured, per claim (a), (b), (c) and the end-to-end/kernel checks."""

    a_layers: list[dict]
    b_rows: list[dict]
    c_rows: list[dict]
    e2e: list[dict]
    ref_rows: list[dict]
    b_max: float = 0.0
    kernel_max: float = 0.0
    tightness: float | None = None


def _verify_setup(opts: VerifyOptions) -> _VerifyRun:
    import torch

    from .draftcache import FULL, SLIDING, CompactCache, DFlashDrafter, DrafterGeometry, FullCache

    if opts.fault not in FAULTS:
        raise ValueError(f"unknown fault {opts.fault!r}; one of {', '.join(FAULTS)}")
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device is available to torch")
    w, b, L = opts.window, opts.block, opts.context
    real = RealWeights.load(opts) if opts.drafter_dir else None
    if real is not None:
        geom = real.geometry
        b = geom.block_size
    else:
        geom = DrafterGeometry(hidden_size=opts.hidden_size, num_heads=opts.num_heads, num_kv_heads=opts.num_kv_heads,
                               head_dim=opts.head_dim, layer_types=tuple(opts.layers), sliding_window=w, block_size=b,
                               causal=opts.causal)
    keep = opts.keep if opts.keep is not None else max(1, w - 1)
    if opts.fault == "short-cache":
        keep = max(1, w - 2)
    dev, dt = opts.device, torch.float32
    model = DFlashDrafter(geom, seed=opts.seed, device=dev, dtype=dt, mask_fn=_fault_mask(opts.fault),
                          mask_bias=-30.0 if opts.fault == "finite-bias" else None)
    gen = torch.Generator().manual_seed(opts.seed + 1)
    if real is not None:
        real.copy_into(model)
        feats = real.features.to(dev, dt)
    else:
        feats = torch.randn((L, geom.num_target_features * geom.hidden_size), generator=gen).to(dev, dt)
    full = FullCache(geom, L, device=dev, dtype=dt)
    compact = CompactCache(geom, keep, device=dev, dtype=dt)
    tight_keep = w - 2
    tight = CompactCache(geom, tight_keep, device=dev, dtype=dt) if tight_keep >= 1 and SLIDING in geom.layer_types else None
    checkpoints = sorted(set(opts.checkpoints)) if opts.checkpoints else default_checkpoints(L, w, b)
    if not checkpoints or checkpoints[0] < 1 or checkpoints[-1] > L:
        raise ValueError(f"checkpoints must lie in [1, {L}]")
    chunk_rng = torch.Generator().manual_seed(opts.seed + 2)
    return _VerifyRun(
        model=model, geom=geom, real=real, feats=feats, gen=gen, chunk_rng=chunk_rng, full=full, compact=compact,
        tight=tight, keep=keep, tight_keep=tight_keep, checkpoints=checkpoints,
        sliding_ids=[i for i, k in enumerate(geom.layer_types) if k == SLIDING],
        full_ids=[i for i, k in enumerate(geom.layer_types) if k == FULL])


def _feed(opts: VerifyOptions, run: _VerifyRun, fed: int, s: int) -> int:
    """Feed context fed..s in random chunk sizes (the ring wraps at many offsets); returns s."""
    import torch

    b, w, dev = run.geom.block_size, opts.window, opts.device
    while fed < s:
        n = min(s - fed, int(torch.randint(1, max(2, 3 * b + w // 3), (1,), generator=run.chunk_rng)))
        pos = torch.arange(fed, fed + n, device=dev)
        run.model.inject([c for c in (run.full, run.compact, run.tight) if c is not None], run.feats[fed:fed + n], pos)
        fed += n
    return fed


def _check_layers(opts: VerifyOptions, run: _VerifyRun, s: int, ref: Any, t: _Tally) -> None:
    """The compact cache, layer by layer from the full run's layer inputs: claims (a), (b), (c) and the
    one-token-short cache at the last checkpoint."""
    import torch

    from .draftcache import SLIDING

    model, compact, tight, w = run.model, run.compact, run.tight, opts.window
    q_pos = ref.traces[0].query_pos
    compact.begin_block(q_pos)
    cos, sin = model.rope.cos_sin(q_pos)
    masks = model.masks(compact, q_pos)
    if tight is not None:
        tight.begin_block(q_pos)
        tmasks = model.masks(tight, q_pos)
    row: dict[str, Any] = {"context": s, "layers": []}
    for tr in ref.traces:
        i = tr.index
        chk_full = _weight_check(tr.weights, tr.query_pos, tr.key_pos, tr.kind, w, run.geom.causal)
        _, c_out, c_w = model.layer_forward(i, tr.input, compact, q_pos, cos, sin, masks, need_weights=True)
        c_kpos = compact.key_positions()
        chk_comp = _weight_check(c_w, q_pos, c_kpos, tr.kind, w, run.geom.causal)
        diff = float((c_out - tr.attn_out).abs().max())
        t.a_layers.append({"context": s, "layer": i, "kind": tr.kind, "full_cache": chk_full, "compact_cache": chk_comp})
        entry = {"layer": i, "kind": tr.kind, "max_abs_diff": diff}
        if tr.kind == SLIDING:
            t.b_max = max(t.b_max, diff)
        else:
            kept = torch.isin(tr.key_pos, c_kpos[c_kpos >= 0])
            hidden = tr.weights.float()[:, :, ~kept].sum(-1)  # [Hq, B]
            ref_norm = float(tr.attn_out.abs().max())
            entry.update({"max_rel_diff": diff / ref_norm if ref_norm else 0.0,
                          "hidden_mass_max": float(hidden.max()) if hidden.numel() else 0.0,
                          "hidden_mass_mean": float(hidden.mean()) if hidden.numel() else 0.0,
                          "context_hidden": int(max(0, s - run.keep))})
            t.c_rows.append({"context": s, **entry})
        if tight is not None and tr.kind == SLIDING and s == run.checkpoints[-1]:
            _, t_out, _ = model.layer_forward(i, tr.input, tight, q_pos, cos, sin, tmasks)
            td = float((t_out - tr.attn_out).abs().max())
            t.tightness = max(t.tightness or 0.0, td)
        row["layers"].append(entry)
    t.b_rows.append(row)


def _check_checkpoint(opts: VerifyOptions, run: _VerifyRun, s: int, t: _Tally) -> None:
    """One checkpoint: a traced draft step on the full cache, the layer checks, end to end (each cache
    propagates its own hidden states) and the fused kernel against the eager one."""
    import torch

    model, real, dev, dt = run.model, run.real, opts.device, torch.float32
    if real is not None:
        block = real.block(s).to(dev, dt)
    else:
        block = torch.randn((run.geom.block_size, run.geom.hidden_size), generator=run.gen).to(dev, dt)
    ref = model.draft_step(block, run.full, trace=True, need_weights=True)
    if real is not None:
        t.ref_rows.append({"context": s, **real.engine_check(s, ref.hidden)})
    _check_layers(opts, run, s, ref, t)
    got = model.draft_step(block, run.compact)
    t.e2e.append({"context": s, "max_abs_diff": float((got.hidden - ref.hidden).abs().max())})
    for cache, want in ((run.full, ref.hidden), (run.compact, got.hidden)):
        fast = model.draft_step(block, cache, impl="sdpa")
        t.kernel_max = max(t.kernel_max, float((fast.hidden - want).abs().max()))


def _verify_report(opts: VerifyOptions, run: _VerifyRun, t: _Tally, t0: float) -> dict[str, Any]:
    w, keep, sliding_ids, a_layers, c_rows = opts.window, run.keep, run.sliding_ids, t.a_layers, t.c_rows
    a_ok = all(x["full_cache"]["ok"] and x["compact_cache"]["ok"] for x in a_layers)
    a_fail = [x for x in a_layers if not (x["full_cache"]["ok"] and x["compact_cache"]["ok"])]

    def worst(key: str) -> float:
        return max([x["full_cache"][key] for x in a_layers] + [x["compact_cache"][key] for x in a_layers])

    b_ok = (not sliding_ids) or (t.b_max <= opts.tolerance and keep >= w - 1)
    if sliding_ids and keep < w - 1:
        b_note = f"r = {keep} < w - 1 = {w - 1}: the compact cache cannot be exact"
    else:
        b_note = None
    real_ok = run.real is None or all(r["max_abs_diff"] <= max(opts.tolerance, 1e-4) for r in t.ref_rows)
    report: dict[str, Any] = {
        "ok": bool(a_ok and b_ok and real_ok),
        "fault": opts.fault,
        "device": str(opts.device),
        "dtype": "float32",
        "context": opts.context,
        "window": w,
        "block": run.geom.block_size,
        "keep": keep,
        "checkpoints": run.checkpoints,
        "geometry": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(run.geom).items()},
        "a_window": {
            "ok": a_ok,
            "layers_checked": len(a_layers),
            "sliding_layers": sliding_ids,
            "leaked_keys": sum(x["full_cache"]["leaked_keys"] + x["compact_cache"]["leaked_keys"] for x in a_layers),
            "max_leaked_weight": worst("max_leaked_weight"),
            "starved_keys": sum(x["full_cache"]["starved_keys"] + x["compact_cache"]["starved_keys"] for x in a_layers),
            "max_row_sum_error": worst("row_sum_error"),
            "failures": a_fail[:5],
        },
        "b_exact": {
            "ok": b_ok,
            "sliding_layers": sliding_ids,
            "max_abs_diff": t.b_max,
            "tolerance": opts.tolerance,
            "note": b_note,
            "per_checkpoint": t.b_rows,
        },
        "c_full_layers": {
            "full_layers": run.full_ids,
            "max_abs_diff": max([r["max_abs_diff"] for r in c_rows], default=0.0),
            "max_rel_diff": max([r["max_rel_diff"] for r in c_rows], default=0.0),
            "max_hidden_mass": max([r["hidden_mass_max"] for r in c_rows], default=0.0),
            "per_checkpoint": c_rows,
        },
        "tightness": None if t.tightness is None else {"keep": run.tight_keep, "sliding_max_abs_diff": t.tightness,
                                                        "context": run.checkpoints[-1]},
        "kernel_sdpa_vs_eager_max_abs_diff": t.kernel_max,
        "end_to_end": t.e2e,
        "real_weights": None if run.real is None else run.real.summary(t.ref_rows, opts.tolerance),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    return report


def run_verify(opts: VerifyOptions) -> dict[str, Any]:
    t0 = time.perf_counter()
    run = _verify_setup(opts)
    t = _Tally(a_layers=[], b_rows=[], c_rows=[], e2e=[], ref_rows=[])
    fed = 0
    for s in run.checkpoints:
        fed = _feed(opts, run, fed, s)
        _check_checkpoint(opts, run, s, t)
    return _verify_report(opts, run, t, t0)


def format_report(r: dict[str, Any]) -> str:
    a, b, c = r["a_window"], r["b_exact"], r["c_full_layers"]
    g = r["geometry"]
    lines = [
        f"verify-window: context {r['context']}, window w={r['window']}, block B={r['block']}, compact cache r={r['keep']}, "
        f"{r['device']} {r['dtype']}" + (f", FAULT INJECTED: {r['fault']}" if r["fault"] != "none" else ""),
        f"  drafter: {len(g['layer_types'])} layers [{', '.join('S' if t == 'sliding_attention' else 'F' for t in g['layer_types'])}], "
        f"hidden {g['hidden_size']}, {g['num_heads']} heads / {g['num_kv_heads']} KV heads x {g['head_dim']}; "
        f"checkpoints S = {', '.join(map(str, r['checkpoints']))}",
        f"  (a) window   {'PASS' if a['ok'] else 'FAIL'}: {a['leaked_keys']} keys outside the window with weight != 0 "
        f"(max {a['max_leaked_weight']:.3g}); {a['starved_keys']} keys inside with weight 0; "
        f"{a['layers_checked']} layer-checkpoints, full and compact cache",
    ]
    for f in a["failures"][:3]:
        for which in ("full_cache", "compact_cache"):
            x = f[which]
            if not x["ok"]:
                extra = ""
                if "first_bad_query" in x:
                    q = x["first_bad_query"]
                    extra = f"; query {q['query']} attends from key {q['oldest_attended']}, must start at {q['expected_oldest']}"
                lines.append(f"      S={f['context']} layer {f['layer']} ({f['kind']}) {which}: leaked {x['leaked_keys']} "
                             f"(max {x['max_leaked_weight']:.3g}), starved {x['starved_keys']}, "
                             f"window keys missing from the cache {x['missing_keys']}{extra}")
                break
    if b["sliding_layers"]:
        lines.append(f"  (b) exact    {'PASS' if b['ok'] else 'FAIL'}: sliding layers {b['sliding_layers']}: compact (r={r['keep']}) vs "
                     f"full cache + mask, max |diff| {b['max_abs_diff']:.3g} (tolerance {b['tolerance']:g})"
                     + (f"; {b['note']}" if b["note"] else ""))
    else:
        lines.append("  (b) exact    n/a: no sliding layers")
    if c["full_layers"]:
        last = [x for x in c["per_checkpoint"] if x["context"] == r["checkpoints"][-1]]
        hid = max((x["hidden_mass_max"] for x in last), default=0.0)
        lines.append(f"  (c) full-attention layers {c['full_layers']} with the compact cache (an approximation): "
                     f"max |diff| {c['max_abs_diff']:.3g} (relative {c['max_rel_diff']:.3g}); at S={r['checkpoints'][-1]} "
                     f"it hides up to {hid:.1%} of a query's attention mass")
    else:
        lines.append("  (c) no full-attention layers")
    if r["tightness"]:
        t = r["tightness"]
        lines.append(f"  tightness: r = w - 2 = {t['keep']} deviates on sliding layers by {t['sliding_max_abs_diff']:.3g} at "
                     f"S={t['context']} (the condition r >= w - 1 is tight)")
    e2e = max((x["max_abs_diff"] for x in r["end_to_end"]), default=0.0)
    lines.append(f"  fused SDPA kernel vs eager: max |diff| {r['kernel_sdpa_vs_eager_max_abs_diff']:.3g}; "
                 f"drafter output, compact vs full: max |diff| {e2e:.3g}")
    rw = r.get("real_weights")
    if rw:
        lines.insert(1, f"  real weights: drafter {rw['drafter']} (layers made {rw['layer_types']}, window {r['window']}), "
                        f"features from {rw['target']} at target_layer_ids {rw['target_layer_ids']} over its greedy output")
        lines.append(f"  engine rule: the reference DFlash forward (vLLM's per-layer masks: sliding causal within w, full "
                     f"non-causal) vs the cache reference with the full cache: max |diff| {rw['max_abs_diff']:.3g} "
                     f"(argmax of the draft logits equal at {rw['argmax_equal']} of {rw['positions']} positions)")
    lines.append(f"  {'OK' if r['ok'] else 'FAILED'}: (a) {'holds' if a['ok'] else 'violated'}, (b) "
                 f"{'holds' if b['ok'] else 'violated'} ({r['seconds']} s)")
    return "\n".join(lines)


class RealWeights:
    """A trained drafter and its target (``train-tiny-drafter``) for ``verify-window --drafter``: the
    drafter's layers are made ``opts.layers`` with window ``opts.window`` (the CPU build of vLLM
    runs all-sliding or all-full drafters; mixed ones need the V2 model runner), the context
    features are the target's layer outputs at ``target_layer_ids`` over its greedy output."""

    def __init__(self, opts, drafter, target, cfg, tokens, features, geometry):
        self.opts, self.drafter, self.target, self.cfg = opts, drafter, target, cfg
        self.tokens, self.features, self.geometry = tokens, features, geometry
        self.mask_id = int(cfg["dflash_config"]["mask_token_id"])

    @classmethod
    def load(cls, opts: "VerifyOptions") -> "RealWeights":
        import torch

        from .dflash_ref import SLIDING as REF_SLIDING, load_drafter, load_target
        from .draftcache import DrafterGeometry

        if not opts.target_dir:
            raise ValueError("--drafter needs --target (the model whose layer outputs feed it)")
        probe, cfg = load_drafter(opts.drafter_dir)
        n = probe.shape.num_layers
        types = tuple(opts.layers) if opts.layers else (REF_SLIDING,) * n
        if len(types) != n:
            raise ValueError(f"--layers names {len(types)} layer kinds; the drafter has {n} layers")
        override = {"layer_types": list(types), "sliding_window": opts.window}
        drafter, cfg = load_drafter(opts.drafter_dir, config_override=override)
        target, tcfg = load_target(opts.target_dir)
        ids = list(cfg["dflash_config"]["target_layer_ids"])
        block = int(cfg.get("block_size") or (cfg.get("dflash_config") or {}).get("block_size") or 4)
        s = drafter.shape
        geometry = DrafterGeometry(hidden_size=s.hidden_size, num_heads=s.num_heads, num_kv_heads=s.num_kv_heads,
                                   head_dim=s.head_dim, layer_types=types, sliding_window=opts.window,
                                   block_size=block, num_target_features=len(ids),
                                   intermediate_size=s.intermediate_size, causal=bool(opts.causal),
                                   rope_theta=s.rope_theta, rms_norm_eps=s.rms_norm_eps)
        # a prompt of the target's own tokens, continued greedily to the context length (+ one block)
        prompt = torch.tensor([_prompt_ids(opts)])
        total = opts.context + block + 1
        tokens = target.greedy(prompt, total - prompt.shape[1])[0]
        with torch.no_grad():
            _, outs, _ = target(tokens[None])
        features = target.features(outs, ids)[0]
        return cls(opts, drafter, target, cfg, tokens, features[: opts.context], geometry)

    def copy_into(self, model) -> None:
        """The trained weights into the cache reference (its fused q|k|v layout)."""
        import torch

        d = self.drafter
        with torch.no_grad():
            model.fc.copy_(d.fc.weight)
            model.hidden_norm.copy_(d.hidden_norm.weight)
            model.final_norm.copy_(d.norm.weight)
            for m, layer in zip(model.layers, d.layers):
                a = layer.self_attn
                m.input_norm.copy_(layer.input_layernorm.weight)
                m.post_norm.copy_(layer.post_attention_layernorm.weight)
                m.qkv_proj.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
                m.o_proj.copy_(a.o_proj.weight)
                m.q_norm.copy_(a.q_norm.weight)
                m.k_norm.copy_(a.k_norm.weight)
                m.gate.copy_(layer.mlp.gate_proj.weight)
                m.up.copy_(layer.mlp.up_proj.weight)
                m.down.copy_(layer.mlp.down_proj.weight)

    def block(self, s: int):
        """Embeddings of [bonus, MASK x (B-1)] at position s: the bonus is the target's greedy token there."""
        import torch
        import torch.nn.functional as F

        ids = torch.tensor([int(self.tokens[s])] + [self.mask_id] * (self.geometry.block_size - 1))
        return F.embedding(ids, self.target.model.embed_tokens.weight).detach()

    def engine_check(self, s: int, cache_hidden) -> dict:
        """The reference DFlash forward with the engine's per-layer masks at context s against the cache
        reference's full-cache output, and the drafted tokens of both."""
        import torch
        import torch.nn.functional as F

        d = self.drafter
        b = self.geometry.block_size
        with torch.no_grad():
            ctx = d.fuse(self.features[None, :s])
            hidden, _ = d(self.block(s)[None], torch.arange(s, s + b)[None], ctx, torch.arange(s)[None])
        head = self.target.lm_head.weight
        mine = F.linear(hidden[0, 1:], head).argmax(-1)
        theirs = F.linear(cache_hidden.float().cpu()[1:], head).argmax(-1)
        return {"max_abs_diff": float((hidden[0] - cache_hidden.float().cpu()).abs().max()),
                "argmax_equal": int((mine == theirs).sum()), "positions": int(b - 1)}

    def summary(self, rows: list[dict], tolerance: float) -> dict:
        return {"drafter": self.opts.drafter_dir, "target": self.opts.target_dir,
                "target_layer_ids": list(self.cfg["dflash_config"]["target_layer_ids"]),
                "layer_types": list(self.geometry.layer_types),
                "max_abs_diff": max((r["max_abs_diff"] for r in rows), default=0.0),
                "argmax_equal": sum(r["argmax_equal"] for r in rows), "positions": sum(r["positions"] for r in rows),
                "per_checkpoint": rows}


def _prompt_ids(opts: "VerifyOptions") -> list[int]:
    """The first prompt of ``tiny-trained.json`` (next to the models) in the target's tokenizer, else a fixed text."""
    import json
    from pathlib import Path

    from tokenizers import Tokenizer

    tdir = Path(opts.target_dir)
    text = "Speculative decoding lets a small drafter propose several tokens at once"
    for up in (tdir.parent.parent, tdir.parent):
        manifest = up / "tiny-trained.json"
        if manifest.is_file():
            text = json.loads(manifest.read_text())["prompts"][opts.seed % 8]
            break
    return Tokenizer.from_file(str(tdir / "tokenizer.json")).encode(text).ids
