"""Parse model config.json files into normalised views that remember where each value came from.

Targets come plain (``Qwen3ForCausalLM``) or wrapped: multimodal and wrapper models nest the
language model under ``text_config`` (Qwen3.5/3.6, Kimi K2.5/K2.6), ``language_config``,
``llm_config`` or ``thinker_config.text_config``.

Drafters come in every shape real files use (dflash-engines.md s2):
- ``DFlashDraftModel`` / ``DFlash2DraftModel`` / vendor aliases (any architecture naming DFlash);
- DFlash fields inside ``dflash_config`` (which wins over the top level, as z-lab's
  ``_draft_value`` and SGLang's ``parse_dflash_draft_config`` do) or only at the top level;
- ``dflash_config.use_swa`` + ``swa_window_size`` instead of ``layer_types``;
- the speculators format: ``speculators_model_type: dflash``, ``aux_hidden_state_layer_ids``
  (= target_layer_ids + 1), geometry in ``transformer_layer_config``, ``draft_vocab_size``,
  ``target_hidden_size``.

Parsing never raises: a value of the wrong type becomes an ``InvalidFieldType`` finding and
is treated as absent. Unknown fields are ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Generic, Iterable, TypeVar

from .findings import PER_CODE_MAX, Finding, Severity, Source, limit_findings

T = TypeVar("T")

SLIDING = "sliding_attention"
FULL = "full_attention"
DRAFTER_LAYER_TYPES = (SLIDING, FULL)
# Bounds on integers read from config files. No engine reads a value beyond int64, and
# larger ones overflow float arithmetic (weight estimate); layer counts also size per-layer
# lists and loops, so an absurd count must not become a 10**12-element list.
MAX_INT = 2**63 - 1
MAX_LAYERS = 10_000


@dataclass(frozen=True)
class Val(Generic[T]):
    """A value read from a config file and the JSONPath it was read from."""

    value: T
    path: str


def jpath(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    if key.isidentifier():
        return f"{base}.{key}"
    return f"{base}[{key!r}]"


# Longest list read from a config.json (layer_types, target_layer_ids, ...: one entry per layer; the largest models
# have a few hundred layers). A longer list is a type problem, not parsed (docs/concepts/security.md "Bounded memory").
LIST_MAX = 4096


class _Reader:
    """Typed reads from a JSON document; type problems become findings, never exceptions."""

    def __init__(self, source: Source):
        self.source = source
        self.findings: list[Finding] = []
        self.dropped: dict[str, int] = {}  # past PER_CODE_MAX: counted only (findings.limit_findings)

    def limited(self, more: list[Finding] = ()) -> list[Finding]:  # type: ignore[assignment]
        return limit_findings(self.findings + list(more), self.dropped)

    def _bad(self, path: str, want: str, got: Any, shown: str | None = None) -> None:
        if len(self.findings) >= PER_CODE_MAX:  # every finding here is InvalidFieldType
            self.dropped["InvalidFieldType"] = self.dropped.get("InvalidFieldType", 0) + 1
            return
        try:
            shown = repr(got) if shown is None else shown
        except (ValueError, RecursionError):  # ints past sys.get_int_max_str_digits, deep nesting
            shown = f"a {type(got).__name__}"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        self.findings.append(
            Finding(
                Severity.ERROR,
                "InvalidFieldType",
                self.source,
                path,
                f"expected {want}, found {shown}; fix the value in the {self.source.value} config.json",
            )
        )

    def raw(self, obj: Any, key: str, base: str) -> Val[Any] | None:
        if isinstance(obj, dict) and key in obj and obj[key] is not None:
            return Val(obj[key], jpath(base, key))
        return None

    def first(self, candidates: Iterable[tuple[Any, str, str]]) -> Val[Any] | None:
        """First present (non-null) value among (obj, key, base) candidates."""
        for obj, key, base in candidates:
            v = self.raw(obj, key, base)
            if v is not None:
                return v
        return None

    def as_int(self, v: Val[Any] | None, *, minimum: int | None = None, maximum: int = MAX_INT) -> Val[int] | None:
        if v is None:
            return None
        x = v.value
        if isinstance(x, bool):
            self._bad(v.path, "an integer", x)
            return None
        if isinstance(x, float) and math.isfinite(x) and x.is_integer():
            x = int(x)
        if not isinstance(x, int):
            self._bad(v.path, "an integer", x)
            return None
        if minimum is not None and x < minimum:
            self._bad(v.path, f"an integer >= {minimum}", x)
            return None
        if not -MAX_INT <= x <= maximum:
            self._bad(v.path, f"an integer between {-MAX_INT if minimum is None else minimum} and {maximum}", x)
            return None
        return Val(x, v.path)

    def as_bool(self, v: Val[Any] | None) -> Val[bool] | None:
        if v is None:
            return None
        if not isinstance(v.value, bool):
            self._bad(v.path, "true or false", v.value)
            return None
        return v

    def as_str(self, v: Val[Any] | None) -> Val[str] | None:
        if v is None:
            return None
        if not isinstance(v.value, str):
            self._bad(v.path, "a string", v.value)
            return None
        return v

    def as_dict(self, v: Val[Any] | None) -> Val[dict] | None:
        if v is None:
            return None
        if not isinstance(v.value, dict):
            self._bad(v.path, "an object", v.value)
            return None
        return v

    def as_int_list(self, v: Val[Any] | None) -> Val[list[Val[int]]] | None:
        if v is None:
            return None
        if not isinstance(v.value, list):
            self._bad(v.path, "a list of integers", v.value)
            return None
        if len(v.value) > LIST_MAX:  # a layer list: one entry per layer (the parsed view keeps each with its path)
            self._bad(v.path, f"a list of at most {LIST_MAX} integers", None, f"{len(v.value)} entries")
            return None
        items: list[Val[int]] = []
        ok = True
        for i, x in enumerate(v.value):
            iv = self.as_int(Val(x, jpath(v.path, i)))
            if iv is None:
                ok = False
            else:
                items.append(iv)
        return Val(items, v.path) if ok else None

    def as_str_list(self, v: Val[Any] | None) -> Val[list[Val[str]]] | None:
        if v is None:
            return None
        if not isinstance(v.value, list):
            self._bad(v.path, "a list of strings", v.value)
            return None
        if len(v.value) > LIST_MAX:  # a layer list: one entry per layer (the parsed view keeps each with its path)
            self._bad(v.path, f"a list of at most {LIST_MAX} strings", None, f"{len(v.value)} entries")
            return None
        items: list[Val[str]] = []
        ok = True
        for i, x in enumerate(v.value):
            if isinstance(x, str):
                items.append(Val(x, jpath(v.path, i)))
            else:
                self._bad(jpath(v.path, i), "a string", x)
                ok = False
        return Val(items, v.path) if ok else None


def not_object_finding(source: Source, doc: Any) -> Finding:
    """The ConfigNotAnObject error for a config.json document that is not a JSON object."""
    return Finding(
        Severity.ERROR,
        "ConfigNotAnObject",
        source,
        "$",
        f"the {source.value} config.json must be a JSON object, found {type(doc).__name__}; "
        f"point the {source.value} at the model's config.json",
    )


# --------------------------------------------------------------------------- target

# Fields some released configs omit because transformers' config class has a default
# (Gemma 3's config.json has no vocab_size). (model_type of the language config) -> defaults.
TARGET_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "tie_word_embeddings": True},  # transformers Gemma3TextConfig
}

TEXT_CONFIG_KEYS = (("text_config",), ("language_config",), ("llm_config",), ("thinker_config", "text_config"))


@dataclass
class TargetConfig:
    root: str  # JSONPath of the language-model config ("$" or "$.text_config", ...)
    architectures: list[str]
    model_type: str | None
    num_hidden_layers: Val[int] | None
    hidden_size: Val[int] | None
    vocab_size: Val[int] | None
    num_attention_heads: Val[int] | None
    num_key_value_heads: Val[int] | None
    head_dim: Val[int] | None
    intermediate_size: Val[int] | None
    layer_types: list[str]
    tie_word_embeddings: bool
    dtype: str | None
    quantization: dict | None
    has_auto_map: bool
    # Everything else the weight estimate reads (MoE, MLA, linear attention), untyped.
    text: dict = field(default_factory=dict)
    wrapper: dict = field(default_factory=dict)


def _is_zero(v: "Val[Any] | None") -> bool:
    return v is not None and type(v.value) is int and v.value == 0


def parse_target(doc: Any) -> tuple[TargetConfig | None, list[Finding]]:
    r = _Reader(Source.TARGET)
    if not isinstance(doc, dict):
        return None, [not_object_finding(Source.TARGET, doc)]
    text, root = doc, "$"
    for chain in TEXT_CONFIG_KEYS:
        obj, path = doc, "$"
        for key in chain:
            obj = obj.get(key) if isinstance(obj, dict) else None
            path = jpath(path, key)
        if isinstance(obj, dict) and obj:
            text, root = obj, path
            break

    def pick(*keys: str) -> Val[Any] | None:
        # the language-model config first, then the wrapper (some wrappers keep vocab_size outside)
        cands = [(text, k, root) for k in keys]
        if text is not doc:
            cands += [(doc, k, "$") for k in keys]
        return r.first(cands)

    archs = r.as_str_list(r.raw(doc, "architectures", "$"))
    raw_types = text.get("layer_types")
    layer_types = [t for t in raw_types if isinstance(t, str)] if isinstance(raw_types, list) else []
    dtype = r.as_str(pick("torch_dtype", "dtype"))
    quant = r.as_dict(pick("quantization_config", "compression_config"))
    tie = r.as_bool(pick("tie_word_embeddings", "tie_embedding"))
    text_type = text.get("model_type") if isinstance(text.get("model_type"), str) else None
    defaults = TARGET_DEFAULTS.get(text_type or "", {})
    defaulted: list[Finding] = []

    def or_default(v: Val[Any] | None, key: str) -> Val[Any] | None:
        if v is None and key in defaults:
            path = jpath(root, key)
            defaulted.append(Finding(Severity.INFO, "TargetFieldDefaulted", Source.TARGET, path,
                                     f"{key} is absent; using the {text_type} default {defaults[key]} as transformers does"))
            return Val(defaults[key], path)
        return v

    if tie is None and "tie_word_embeddings" in defaults:
        tie = Val(defaults["tie_word_embeddings"], jpath(root, "tie_word_embeddings"))
    cfg = TargetConfig(
        root=root,
        architectures=[a.value for a in archs.value] if archs else [],
        model_type=(r.as_str(r.raw(doc, "model_type", "$")) or Val(None, "")).value,
        num_hidden_layers=r.as_int(pick("num_hidden_layers", "num_layers", "n_layer", "n_layers"), minimum=1, maximum=MAX_LAYERS),
        hidden_size=r.as_int(pick("hidden_size", "d_model", "n_embd"), minimum=1),
        vocab_size=or_default(r.as_int(pick("vocab_size", "padded_vocab_size"), minimum=1), "vocab_size"),
        num_attention_heads=r.as_int(pick("num_attention_heads", "n_head", "num_heads"), minimum=1),
        num_key_value_heads=r.as_int(pick("num_key_value_heads", "num_kv_heads", "multi_query_group_num"), minimum=1),
        # MLA targets may carry head_dim 0 beside qk_head_dim/v_head_dim (GLM-5.3-Flash): 0 means "not set"
        head_dim=None if _is_zero(pick("head_dim")) else r.as_int(pick("head_dim"), minimum=1),
        intermediate_size=r.as_int(pick("intermediate_size", "ffn_hidden_size"), minimum=1),
        layer_types=layer_types,
        tie_word_embeddings=bool(tie.value) if tie else False,
        dtype=dtype.value if dtype else None,
        quantization=quant.value if quant else None,
        has_auto_map=isinstance(doc.get("auto_map"), dict) or isinstance(text.get("auto_map"), dict),
        text=text,
        wrapper=doc,
    )
    return cfg, r.limited(defaulted)


# --------------------------------------------------------------------------- drafter


@dataclass
class DrafterConfig:
    architectures: list[str]
    variant: str  # "dflash" | "dflash2"
    format: str  # "dflash" (z-lab/SpecForge layout) | "speculators"
    is_dflash: bool
    target_layer_ids: Val[list[Val[int]]] | None
    target_layer_ids_offset: int  # 1 when read from aux_hidden_state_layer_ids (= id + 1)
    block_size: Val[int] | None
    block_size_other: Val[int] | None  # the losing value when both places set a different one
    mask_token_id: Val[int] | None
    num_target_layers: Val[int] | None
    hidden_size: Val[int] | None
    target_hidden_size: Val[int] | None
    num_hidden_layers: Val[int] | None
    num_attention_heads: Val[int] | None
    num_key_value_heads: Val[int] | None
    head_dim: Val[int] | None
    intermediate_size: Val[int] | None
    vocab_size: Val[int] | None
    hidden_act: Val[str] | None
    layer_types: Val[list[Val[str]]] | None
    sliding_window: Val[int] | None
    use_swa: Val[bool] | None
    swa_window_size: Val[int] | None
    causal: Val[bool] | None
    # HF Qwen3Config fields DFlash readers do not consult (kept to warn about ambiguity).
    use_sliding_window: Val[bool] | None
    max_window_layers: Val[int] | None
    dtype: str | None
    dflash_config_path: str  # where DFlash fields live or should live
    model_type: str | None = None
    geometry_path: str = "$"  # where the transformer fields live ("$" or "$.transformer_layer_config")
    max_position_embeddings: Val[int] | None = None
    rope_type: str = "default"
    # dflash_config holds the key swa_window_size (even as null): vLLM then reads only that key.
    swa_window_key: bool = False
    # text_config.is_causal (or top-level is_causal): what SGLang's trtllm_mha condition reads.
    text_is_causal: bool | None = None
    # The config as transformers' config class builds it (hf_view), which is what both engines read.
    hf: "HfView | None" = None
    # layer_types at the top level of a speculators config (not read by vLLM)
    raw_top_layer_types: list[str] | None = None
    raw: dict = field(default_factory=dict)  # the document as given (duplicate-field checks)

    def engine_layers(self, engine: str | None = None) -> tuple[list[str] | None, Val[int] | None]:
        """(per-layer attention kind, sliding window) as the engine's DFlash reader resolves them from the
        config transformers builds (:func:`hf_view`); None when unknown.

        SGLang (speculative/dflash_utils.py get_dflash_layer_types / get_dflash_attention_sliding_window_size):
        ``layer_types`` and ``sliding_window`` only; ``use_swa`` is never read.
        vLLM (models/qwen3_dflash.py ``_resolve_layer_attention``, also used when no engine is given):
        ``use_swa`` with no sliding entry in ``layer_types`` (absent, or the all-full list transformers
        synthesises) makes every layer sliding; otherwise ``layer_types`` decides; the window is
        ``dflash_config.swa_window_size`` when that key exists, else ``sliding_window``.
        """
        hf = self.hf
        types = list(hf.layer_types) if hf and hf.layer_types is not None else None
        window = hf.sliding_window if hf else self.sliding_window
        if engine == "sglang":
            return types, window
        n = len(types) if types is not None else (self.num_hidden_layers.value if self.num_hidden_layers else None)
        use_swa = bool(self.use_swa and self.use_swa.value)
        if use_swa and (types is None or SLIDING not in types):
            types = None if n is None else [SLIDING] * n
        elif types is None and n is not None:
            types = [FULL] * n
        if self.swa_window_key:
            window = self.swa_window_size if self.swa_window_size is not None else None
        return types, window

    def resolved_layer_types(self) -> list[str] | None:
        return self.engine_layers(None)[0]

    def window(self) -> Val[int] | None:
        return self.engine_layers(None)[1]


# --------------------------------------------------------------------------- transformers' view

# transformers 5.19 configuration classes that rewrite sliding-window fields in __post_init__:
# model_type -> (default sliding_window, default max_window_layers, synthesises layer_types).
#   qwen3, qwen2 (configuration_qwen3.py / configuration_qwen2.py): sliding_window = sliding_window if
#     use_sliding_window else None; missing layer_types become sliding where sliding_window is not None
#     and i >= max_window_layers.
#   qwen3_moe (configuration_qwen3_moe.py): sliding_window nulled the same way; layer_types untouched.
# Other model types keep the file's values. tests/unit/test_hf_view.py compares this with transformers.
HF_SLIDING_RULES: dict[str, tuple[int, int, bool]] = {
    "qwen3": (4096, 28, True),
    "qwen2": (4096, 28, True),
    "qwen3_moe": (4096, 28, False),
}
HF_DEFAULT_LAYERS = {"qwen3": 32, "qwen2": 24, "qwen3_moe": 24}
_LEGACY_LAYER_TYPES = {"attention": FULL}  # transformers configuration_utils._LEGACY_LAYER_TYPE_REMAP


@dataclass(frozen=True)
class HfView:
    """The sliding-window fields as the transformers config class leaves them."""

    layer_types: tuple[str, ...] | None
    sliding_window: Val[int] | None
    # True when transformers built layer_types (the file has none)
    layer_types_derived: bool = False
    # the file's positive sliding_window was dropped because use_sliding_window is false
    sliding_window_dropped: Val[int] | None = None
    # use_sliding_window is true and the file has no sliding_window: the class default applies
    sliding_window_defaulted: bool = False


def hf_view(doc: dict, base: str, model_type: str | None) -> HfView:
    """Pure copy of what transformers' config class does to ``layer_types``/``sliding_window`` for
    ``model_type`` (the drafter's, read at ``base``). Values of the wrong type are left to the typed parse."""
    lt = doc.get("layer_types")
    listed = tuple(_LEGACY_LAYER_TYPES.get(x, x) for x in lt) if isinstance(lt, list) and all(
        isinstance(x, str) for x in lt) else None
    sw_raw = doc.get("sliding_window")
    sw = Val(sw_raw, jpath(base, "sliding_window")) if isinstance(sw_raw, int) and not isinstance(sw_raw, bool) else None
    rule = HF_SLIDING_RULES.get(model_type or "")
    if rule is None:
        return HfView(layer_types=listed, sliding_window=sw)
    default_window, default_mwl, synth = rule
    use = doc.get("use_sliding_window", False)
    use = use if isinstance(use, bool) else False
    dropped = None
    defaulted = False
    if use:
        if "sliding_window" not in doc:
            sw, defaulted = Val(default_window, jpath(base, "sliding_window") + " (transformers default)"), True
    else:
        dropped = sw if sw is not None and sw.value > 0 else None
        sw = None
    if listed is not None or not synth:
        return HfView(layer_types=listed, sliding_window=sw, sliding_window_dropped=dropped,
                      sliding_window_defaulted=defaulted)
    n = doc.get("num_hidden_layers", HF_DEFAULT_LAYERS.get(model_type or "", 32))
    mwl = doc.get("max_window_layers", default_mwl)
    if not (isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_LAYERS):
        return HfView(layer_types=None, sliding_window=sw, sliding_window_dropped=dropped)
    if not (isinstance(mwl, int) and not isinstance(mwl, bool)):
        mwl = default_mwl
    types = tuple(SLIDING if sw is not None and i >= mwl else FULL for i in range(n))
    return HfView(layer_types=types, sliding_window=sw, layer_types_derived=True, sliding_window_dropped=dropped,
                  sliding_window_defaulted=defaulted)


def rope_type_of(doc: dict) -> str:
    """RoPE type of a config: rope_parameters / rope_scaling ``rope_type`` (or legacy ``type``), else default."""
    for key in ("rope_parameters", "rope_scaling"):
        rp = doc.get(key)
        if isinstance(rp, dict):
            t = rp.get("rope_type", rp.get("type"))
            if isinstance(t, str):
                return t
    return "default"


def parse_drafter(doc: Any) -> tuple[DrafterConfig | None, list[Finding]]:
    r = _Reader(Source.DRAFTER)
    if not isinstance(doc, dict):
        return None, [not_object_finding(Source.DRAFTER, doc)]
    dcv = r.as_dict(r.raw(doc, "dflash_config", "$"))
    dc = dcv.value if dcv else {}
    dc_path = "$.dflash_config"
    tlv = r.as_dict(r.raw(doc, "transformer_layer_config", "$"))
    tl = tlv.value if tlv else {}
    tl_path = "$.transformer_layer_config"
    spec_type = r.as_str(r.raw(doc, "speculators_model_type", "$"))
    speculators = spec_type is not None and spec_type.value.lower() == "dflash"
    archs_v = r.as_str_list(r.raw(doc, "architectures", "$"))
    archs = [a.value for a in archs_v.value] if archs_v else []
    if not archs and tl:
        tl_archs = r.as_str_list(r.raw(tl, "architectures", tl_path))
        archs = [a.value for a in tl_archs.value] if tl_archs else []

    def dflash_field(key: str) -> Val[Any] | None:
        return r.first([(dc, key, dc_path), (doc, key, "$")])

    def geometry(*keys: str) -> Val[Any] | None:
        # Speculators exports: vLLM builds the drafter config from transformer_layer_config alone
        # (transformers_utils/configs/speculators/base.py extract_transformers_pre_trained_config);
        # top-level transformer fields are not read.
        if speculators and tl:
            return r.first([(tl, k, tl_path) for k in keys])
        return r.first([(doc, k, "$") for k in keys] + [(tl, k, tl_path) for k in keys])

    offset = 0
    ids = r.as_int_list(dflash_field("target_layer_ids"))
    if ids is None and dflash_field("target_layer_ids") is None:
        aux = r.as_int_list(r.first([(doc, "aux_hidden_state_layer_ids", "$"), (dc, "aux_hidden_state_layer_ids", dc_path)]))
        if aux is not None:
            ids, offset = aux, 1

    block_in_dc = r.as_int(r.raw(dc, "block_size", dc_path))
    block_top = r.as_int(r.raw(doc, "block_size", "$"))
    block = block_in_dc or block_top
    if block is None and speculators:
        # Speculators exports carry the draft length as proposal speculative_tokens (= block - 1).
        methods = (doc.get("speculators_config") or {}).get("proposal_methods") if isinstance(doc.get("speculators_config"), dict) else None
        if isinstance(methods, list) and methods and isinstance(methods[0], dict):
            toks = r.as_int(r.raw(methods[0], "speculative_tokens", "$.speculators_config.proposal_methods[0]"), minimum=1)
            if toks is not None:
                block = Val(toks.value + 1, toks.path)
    other = block_top if (block_in_dc and block_top and block_in_dc.value != block_top.value) else None

    lt = r.as_str_list(geometry("layer_types"))
    dtype = r.as_str(geometry("torch_dtype", "dtype"))
    is_dflash = speculators or bool(dc) or any("dflash" in a.lower() for a in archs)
    cfg = DrafterConfig(
        architectures=archs,
        variant="dflash2" if any("dflash2" in a.lower() for a in archs) else "dflash",
        format="speculators" if speculators else "dflash",
        is_dflash=is_dflash,
        target_layer_ids=ids,
        target_layer_ids_offset=offset,
        block_size=block,
        block_size_other=other,
        mask_token_id=r.as_int(dflash_field("mask_token_id")),
        num_target_layers=r.as_int(dflash_field("num_target_layers"), minimum=1),
        hidden_size=r.as_int(geometry("hidden_size"), minimum=1),
        target_hidden_size=r.as_int(dflash_field("target_hidden_size"), minimum=1),
        num_hidden_layers=r.as_int(geometry("num_hidden_layers"), minimum=1, maximum=MAX_LAYERS),
        num_attention_heads=r.as_int(geometry("num_attention_heads"), minimum=1),
        num_key_value_heads=r.as_int(geometry("num_key_value_heads"), minimum=1),
        head_dim=r.as_int(geometry("head_dim"), minimum=1),
        intermediate_size=r.as_int(geometry("intermediate_size"), minimum=1),
        # The embedding vocabulary: a speculators draft_vocab_size is the reduced draft head, by design.
        vocab_size=r.as_int(r.first([(doc, "vocab_size", "$"), (tl, "vocab_size", tl_path), (doc, "draft_vocab_size", "$")]), minimum=1),
        hidden_act=r.as_str(geometry("hidden_act")),
        layer_types=lt,
        sliding_window=r.as_int(geometry("sliding_window")),
        use_swa=r.as_bool(dflash_field("use_swa")),
        swa_window_size=r.as_int(dflash_field("swa_window_size")),
        causal=r.as_bool(r.first([(dc, "causal", dc_path), (dc, "is_causal", dc_path), (doc, "is_causal", "$")])),
        use_sliding_window=r.as_bool(geometry("use_sliding_window")),
        max_window_layers=r.as_int(geometry("max_window_layers")),
        dtype=dtype.value if dtype else None,
        dflash_config_path=dc_path if (dc or not speculators) else "$",
    )
    # the transformer fields: top level (z-lab/SpecForge), or transformer_layer_config (speculators)
    geo, geo_path = (tl, tl_path) if (tl and (speculators or "num_hidden_layers" not in doc)) else (doc, "$")
    # Speculators configs load as vLLM's SpeculatorsConfig (plain attributes, no transformers
    # post-processing); z-lab/SpecForge configs as the config class of their model_type (Qwen3Config).
    mt = None if speculators else (doc.get("model_type") if isinstance(doc.get("model_type"), str) else None)
    cfg.model_type = mt
    cfg.geometry_path = geo_path
    cfg.max_position_embeddings = r.as_int(geometry("max_position_embeddings"), minimum=1)
    cfg.rope_type = rope_type_of(geo)
    cfg.swa_window_key = "swa_window_size" in dc
    text = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else geo
    causal = text.get("is_causal")
    cfg.text_is_causal = causal if isinstance(causal, bool) else None
    cfg.hf = hf_view(geo, geo_path, mt)
    top_lt = doc.get("layer_types")
    cfg.raw_top_layer_types = [x for x in top_lt if isinstance(x, str)] if isinstance(top_lt, list) else None
    cfg.raw = doc
    return cfg, r.limited()


# --------------------------------------------------------------------------- context length

_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled context (vLLM does not apply `factor`).
_PRESCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})


def context_limit(t: TargetConfig) -> Val[int] | None:
    """The longest context the engine serves the target with by default, as vLLM derives it
    (config/model.py ``_get_and_verify_max_len`` + model_arch_config_convertor
    ``derive_max_model_len_and_key``): the smallest of the length keys of the language config
    (``model_max_length`` wins outright), times the RoPE ``factor`` unless the RoPE type already
    scales ``max_position_embeddings`` (yarn, llama3, longrope, ...) or the model is Gemma 3."""
    text = t.text
    best: Val[int] | None = None
    for key in _MAX_LEN_KEYS:
        v = text.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0 and (best is None or v < best.value):
            best = Val(v, jpath(t.root, key))
    mml = text.get("model_max_length")
    if isinstance(mml, int) and not isinstance(mml, bool) and mml > 0:
        best = Val(mml, jpath(t.root, "model_max_length"))
    if best is None:
        return None
    factor = 1.0
    if "gemma3" not in str(text.get("model_type") or ""):
        for key in ("rope_parameters", "rope_scaling"):
            rp = text.get(key)
            if isinstance(rp, dict):
                kind = rp.get("rope_type", rp.get("type", "default"))
                kind = kind if isinstance(kind, str) else "default"
                f = rp.get("factor")
                if kind not in _PRESCALED_ROPE and isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0:
                    factor = float(f)
                break
    try:
        scaled = best.value * factor
    except OverflowError:  # absurd lengths: keep the unscaled value, the checks stay advisory
        return best
    if factor != 1.0 and math.isfinite(scaled) and scaled < MAX_INT:
        return Val(int(scaled), f"{best.path} x rope factor {factor:g}")
    return best
