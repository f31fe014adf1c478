"""The draft window and the served context (pure): block size against the trained one, the compact draft
cache window (or the window the engine applies natively), its memory trade, and maxModelLen against the
target's and the drafter's context."""

from __future__ import annotations

from ..modelconfig import FULL, SLIDING, DrafterConfig, TargetConfig, context_limit
from .options import DEFAULT_BLOCK_SIZE, WINDOW_OFF, Options
from .results import D, S, Out


def check_block_size(d: DrafterConfig, o: Options, out: Out) -> int:
    """The block size served: ``spec.speculation.blockSize`` checked against the drafter's trained one, else the trained one."""
    trained = d.block_size.value if d.block_size else DEFAULT_BLOCK_SIZE
    if o.block_size is None:
        return trained
    if o.block_size > trained:
        out.err("BlockSizeAboveTrained", S, "spec.speculation.blockSize",
                f"blockSize {o.block_size} exceeds the drafter's trained block size {trained}; "
                f"set blockSize <= {trained} or leave it unset")
    elif o.block_size < trained:
        out.warn("BlockSizeBelowTrained", S, "spec.speculation.blockSize",
                 f"blockSize {o.block_size} is below the drafter's trained {trained}: fewer draft tokens per step "
                 "and a lower speed-up ceiling")
    return o.block_size


def _gb(n: float) -> str:
    if isinstance(n, int) and n >= 2**60:  # a config's absurd sizes: too large for a float, still a clear message
        return f"{n // 2**30} GiB"
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def draft_kv_bytes_per_token(d: DrafterConfig) -> int | None:
    """Draft KV cache bytes per token of one sequence (every draft layer, K and V, 16-bit)."""
    n = d.num_hidden_layers.value if d.num_hidden_layers else None
    kv = (d.num_key_value_heads or d.num_attention_heads)
    hd = d.head_dim.value if d.head_dim else (
        d.hidden_size.value // d.num_attention_heads.value if d.hidden_size and d.num_attention_heads else None)
    if n is None or kv is None or hd is None:
        return None
    return n * 2 * kv.value * hd * 2


def _window_trade(d: DrafterConfig, window: int, context: int | None) -> str:
    per_tok = draft_kv_bytes_per_token(d)
    if per_tok is None or context is None:
        return ""
    without, with_ = per_tok * context, per_tok * min(window, context)
    return (f"; draft KV cache per sequence at {context} tokens: {_gb(without)} without the compact cache, "
            f"{_gb(with_)} with it ({d.num_hidden_layers.value} layers x {(d.num_key_value_heads or d.num_attention_heads).value} "
            f"KV heads, 16-bit)")


def plan_window(d: DrafterConfig, o: Options, info, row, prof, types: tuple[str, ...], drafter_window: int | None,
                 block: int, context: int | None, out: Out) -> tuple[int | None, int | None, str | None]:
    """(compact-cache window to render, window the engine applies natively, draft attention backend)."""
    has_sliding = drafter_window is not None
    full = [i for i, x in enumerate(types) if x == FULL]
    explicit = o.draft_window if isinstance(o.draft_window, int) and not isinstance(o.draft_window, bool) \
        and o.draft_window >= 1 else None
    if explicit is not None and explicit < block:
        out.err("DraftWindowBelowBlockSize", S, "spec.speculation.draftWindow",
                f"draftWindow {explicit} is below the block size {block}; set draftWindow >= {block} or leave it unset")
    if explicit is not None and has_sliding and explicit < drafter_window - 1:
        out.warn("DraftWindowBelowTrained", S, "spec.speculation.draftWindow",
                 f"draftWindow {explicit} keeps fewer context tokens than the trained window {drafter_window} needs "
                 f"(>= {drafter_window - 1}); sliding layers lose context. Leave it unset")
    if info is None:
        return None, None, None
    if info.name == "vllm":
        if explicit is not None:
            out.warn("DraftWindowIgnoredByEngine", S, "spec.speculation.draftWindow",
                     "vLLM has no compact draft cache: it windows sliding layers from the drafter's config.json itself "
                     "and keeps the full context for full-attention layers; this setting has no effect. Remove it")
        native = drafter_window if (has_sliding and row is not None and row.sliding_window_layers) else None
        if native is not None:
            out.info("DraftWindowNative", D, "$.sliding_window",
                     f"vLLM {o.engine_version} applies window {native} to the drafter's sliding layers "
                     f"{[i for i, x in enumerate(types) if x == SLIDING]} itself (models/qwen3_dflash.py "
                     "_resolve_layer_attention); full-attention layers see the whole context")
        return None, native, None
    # SGLang
    backend = o.draft_attention_backend or (prof.sglang_draft_attention_backend if prof else "flashinfer")
    flag = row.flags.get("draft_window") if row is not None else "the draft-window flag"
    native_ok = row is not None and row.native_draft_window and backend in row.native_window_backends
    full_note = (f"; the compact cache limits every draft layer to the last N tokens, so the full-attention "
                 f"layer(s) {full} lose the context they were trained to see (speculative/dflash_worker*.py "
                 "alloc_memory_pool)") if full else ""
    if explicit is not None:
        trade = _window_trade(d, explicit, context)
        if full:
            out.warn("CompactCacheTruncatesFullAttention", S, "spec.speculation.draftWindow",
                     f"rendering {flag} {explicit}: memory O(window) instead of O(context){trade}{full_note}. "
                     "Leave draftWindow unset for exact drafting")
        else:
            out.info("DraftWindowSet", S, "spec.speculation.draftWindow",
                     f"rendering {flag} {explicit}: memory O(window) instead of O(context){trade}; every draft layer "
                     "is sliding, so the compact cache is exact while it keeps >= window - 1 tokens")
        return explicit, None, backend
    if not has_sliding:
        return None, None, backend
    if native_ok:
        if o.draft_window != WINDOW_OFF:
            out.info("DraftWindowNative", D, "$.sliding_window",
                     f"SGLang {o.engine_version} applies window {drafter_window} to the drafter's sliding layers itself "
                     f"(models/dflash.py _get_dflash_layer_attention_params; the {backend} backend reads the per-layer "
                     f"window): no compact cache is rendered and the full-attention layers keep the whole context. "
                     f"Set draftWindow: N to trade that for O(N) draft memory{_window_trade(d, drafter_window, context)}")
        return None, drafter_window, backend
    why = (f"SGLang {o.engine_version} does not window DFlash draft layers itself (native windows since 0.5.14)"
           if row is not None and not row.native_draft_window else
           f"the {backend} draft backend does not read per-layer windows in SGLang {o.engine_version}")
    if o.draft_window == WINDOW_OFF:
        out.warn("DraftWindowOff", S, "spec.speculation.draftWindow",
                 f"draftWindow is 'off' and {why}: the drafter's sliding layers (trained with window {drafter_window}) "
                 "run as full attention and acceptance falls once the context exceeds it. Remove the override")
        return None, None, backend
    if full:
        out.warn("CompactCacheTruncatesFullAttention", S, "spec.speculation.draftWindow",
                 f"{why}: rendering {flag} {drafter_window} so the sliding layers keep their trained window{full_note}. "
                 "Use an SGLang release >= 0.5.14 for exact drafting")
    else:
        out.info("DraftWindowDerived", S, "spec.speculation.draftWindow",
                 f"{why}: rendering {flag} {drafter_window}; every draft layer is sliding, so the compact cache is exact")
    return drafter_window, None, backend


def check_context(d: DrafterConfig, t: TargetConfig | None, o: Options, info, row, block: int, out: Out) -> int | None:
    """The served context (maxModelLen, else the target's limit), checked against target and drafter."""
    limit = context_limit(t) if t is not None else None
    if o.max_model_len is not None:
        if o.max_model_len < block:
            out.err("MaxModelLenInvalid", S, "spec.engine.maxModelLen",
                    f"maxModelLen {o.max_model_len} is below the block size {block}; raise it")
        if limit is not None and o.max_model_len > limit.value:
            how = ("vLLM raises at start-up (config/model.py _get_and_verify_max_len) unless "
                   "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" if info is None or info.name == "vllm" else
                   "SGLang refuses it at start-up unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
            out.err("MaxModelLenAboveTarget", S, "spec.engine.maxModelLen",
                    f"maxModelLen {o.max_model_len} exceeds the target's context {limit.value} ({limit.path}): {how}, "
                    f"and positions past it are outside what the model was trained on. Set maxModelLen <= {limit.value}")
    served = o.max_model_len if o.max_model_len is not None else (limit.value if limit else None)
    mpe = d.max_position_embeddings
    if served is None or mpe is None or served <= mpe.value:
        return served
    where = "spec.engine.maxModelLen" if o.max_model_len is not None else "the target's context"
    raises = row.raises_draft_context if (info is not None and info.name == "vllm" and row is not None) else None
    if raises is not None and d.rope_type in raises:
        out.info("DrafterContextRaisedByEngine", D, mpe.path,
                 f"the drafter's max_position_embeddings {mpe.value} is below the served context {served} ({where}); "
                 f"vLLM {o.engine_version} raises it to the served context for RoPE type {d.rope_type!r} "
                 "(config/speculative.py _maybe_override_draft_max_position_embeddings)")
        return served
    out.err("DrafterContextTooShort", D, mpe.path,
            f"the drafter's max_position_embeddings {mpe.value} is below the served context {served} ({where}): the "
            "drafter gets the target's absolute positions, its RoPE cache is sized from its own limit, and the first "
            "longer request reads past it (vLLM: CUDA illegal memory access that takes the engine down, vllm #57941 / "
            f"PR #57964). Set spec.engine.maxModelLen <= {mpe.value}, or use a drafter trained for this context")
    return served
