"""The MTP gate (pure): the target carries MTP layers and the engine release has an MTP draft for its
architecture; the steps fit the layers. Read from the vLLM 0.33.0 and SGLang 0.5.23 wheels.

vLLM builds the draft config from the target's in ``config/speculative.py``
``SpeculativeConfig.hf_config_override``: one branch per model type / architecture, each setting
``n_predict`` from the field that model uses (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``,
``num_mtp_modules``); a target with no branch ends in ``NotImplementedError("Unsupported speculative
method: 'mtp'")`` (``__post_init__``). K defaults to n_predict; K > n_predict must be a multiple of it
(ValueError) and reuses the layers with a warning.
SGLang rewrites the target architecture to its NextN/MTP class in ``configs/model_config.py``
``ModelConfig._config_draft_model`` (NEXTN = EAGLE over that class); several rows force
``num_nextn_predict_layers = 1``.
"""

from __future__ import annotations

from typing import Any

from ..modelconfig import TargetConfig, jpath
from .results import S, T, Out

RECORDED = {"vllm": "0.33.0", "sglang": "0.5.23"}

# vLLM hf_config_override: top-level model_type (or architectures[0]) -> (MTP class, fields read for n_predict)
_N = ("num_nextn_predict_layers",)
VLLM_MTP: dict[str, tuple[str, tuple[str, ...]]] = {
    "deepseek_v3": ("DeepSeekMTPModel", _N), "deepseek_v32": ("DeepseekV32MTPModel", _N),
    "glm_moe_dsa": ("DeepseekV32MTPModel", _N), "deepseek_mtp": ("DeepSeekMTPModel", _N),
    "deepseek_v4": ("DeepSeekV4MTPModel", _N), "pangu_ultra_moe": ("OpenPanguMTPModel", _N),
    "kimi_k3": ("KimiK3MTPModel", _N), "MiMoForCausalLM": ("MiMoMTPModel", _N),
    "MiMoV2ForCausalLM": ("MiMoV2MTPModel", ()), "MiMoV2OmniForCausalLM": ("MiMoV2OmniMTPModel", ()),
    "MiMoV2FlashForCausalLM": ("MiMoV2MTPModel", ()),
    "Glm4MoeForCausalLM": ("Glm4MoeMTPModel", _N), "Glm4MoeLiteForCausalLM": ("Glm4MoeLiteMTPModel", _N),
    "GlmOcrForConditionalGeneration": ("GlmOcrMTPModel", _N), "ernie4_5_moe": ("ErnieMTPModel", _N),
    "nemotron_h": ("NemotronHMTPModel", _N), "nemotron_h_puzzle": ("NemotronHMTPModel", _N),
    "qwen3_next": ("Qwen3NextMTP", _N),
    "qwen4_exp": ("Qwen4ExpMTP", ("mtp_num_hidden_layers", "num_nextn_predict_layers")),
    "bailing_hybrid": ("BailingMoeV25MTPModel", _N), "BailingMoeV2_5ForCausalLM": ("BailingMoeV25MTPModel", _N),
    "BailingMoeV3ForCausalLM": ("BailingMoeV3MTPModel", _N), "exaone_moe": ("ExaoneMoeMTP", _N),
    "exaone4_5": ("Exaone4_5_MTP", _N),
    "qwen3_5": ("Qwen3_5MTP", ("mtp_num_hidden_layers",)), "qwen3_5_text": ("Qwen3_5MTP", ("mtp_num_hidden_layers",)),
    "qwen3_5_moe": ("Qwen3_5MoeMTP", ("mtp_num_hidden_layers",)),
    "qwen3_5_moe_text": ("Qwen3_5MoeMTP", ("mtp_num_hidden_layers",)),
    "longcat_flash": ("LongCatFlashMTPModel", _N), "step3p5": ("Step3p5MTP", _N), "step5": ("Step5MTP", _N),
    "hy_v3": ("HYV3MTPModel", _N), "hy_v4": ("HYV4MTPModel", _N),
    "minimax_m3_vl": ("MiniMaxM3MTP", ("num_mtp_modules",)), "glm5_next": ("Glm5NextMTPModel", _N),
    # Inkling: the depth is read from the wrapper's mtp_config only (checkpoint_depths; < 1 raises "The Inkling
    # checkpoint does not contain MTP weights")
    "inkling_mm_model": ("InklingMTPModel", ("mtp_config.num_nextn_predict_layers",)),
    "inkling_model": ("InklingMTPModel", ("mtp_config.num_nextn_predict_layers",)),
}
# model types vLLM refuses for mtp with its own message
VLLM_MTP_REFUSED = {"deepseek_v41": "DeepSeek V4.1 has no classic-MTP draft (its mtp.* weights are DSpark stages); "
                                    "config/speculative.py raises 'Use speculative method dspark'"}

# SGLang _config_draft_model: target architectures[0] -> NextN/MTP class (1: the row forces one MTP layer)
SGLANG_MTP: dict[str, tuple[str, bool]] = {
    "DeepseekV3ForCausalLM": ("DeepseekV3ForCausalLMNextN", False),
    "DeepseekV32ForCausalLM": ("DeepseekV3ForCausalLMNextN", False),
    "GlmMoeDsaForCausalLM": ("GlmMoeDsaForCausalLMNextN", False),
    "DeepseekV4ForCausalLM": ("DeepseekV4ForCausalLMNextN", True),
    "Glm4MoeForCausalLM": ("Glm4MoeForCausalLMNextN", False),
    "Glm4MoeLiteForCausalLM": ("Glm4MoeLiteForCausalLMNextN", False),
    "Glm5NextForConditionalGeneration": ("Glm5NextForConditionalGenerationNextN", True),
    "GlmOcrForConditionalGeneration": ("GlmOcrForConditionalGenerationNextN", False),
    "LongcatFlashForCausalLM": ("LongcatFlashForCausalLMNextN", False),
    "MiMoForCausalLM": ("MiMoMTP", False), "MiMoV2ForCausalLM": ("MiMoV2MTP", True),
    "MiMoV2FlashForCausalLM": ("MiMoV2MTP", True), "Step3p5ForCausalLM": ("Step3p5MTP", False),
    "Step3p7ForConditionalGeneration": ("Step3p5MTP", False),
    "InklingForConditionalGeneration": ("InklingForConditionalGenerationMTP", False),
    "GigaChat35ForCausalLM": ("GigaChat35ForCausalLMNextN", False),
    "BailingMoeV2ForCausalLM": ("BailingMoeForCausalLMNextN", False),
    "BailingMoeForCausalLM": ("BailingMoeForCausalLMNextN", False),
    "BailingMoeV2_5ForCausalLM": ("BailingMoeForCausalLMNextN", False),
    "BailingMoeV3ForCausalLM": ("BailingMoeForCausalLMNextN", False),
    "Ernie4_5_MoeForCausalLM": ("Ernie4_5_MoeForCausalLMMTP", False),
    "Qwen3NextForCausalLM": ("Qwen3NextForCausalLMMTP", True),
    "Qwen4ExpForConditionalGeneration": ("Qwen4ExpForCausalLMMTP", False),
    "Qwen3MoeForCausalLM": ("Qwen3MoeForCausalLMMTP", False),
    "Qwen3_5ForConditionalGeneration": ("Qwen3_5ForCausalLMMTP", True),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3_5ForCausalLMMTP", True),
    "Qwen3_5ForCausalLM": ("Qwen3_5ForCausalLMMTP", True), "Qwen3_5MoeForCausalLM": ("Qwen3_5ForCausalLMMTP", True),
    "ExaoneMoEForCausalLM": ("ExaoneMoEForCausalLMMTP", True), "ExaoneMoeForCausalLM": ("ExaoneMoEForCausalLMMTP", True),
    "NemotronHForCausalLM": ("NemotronHForCausalLMMTP", True), "NemotronHPuzzleForCausalLM": ("NemotronHForCausalLMMTP", True),
    "HYV3ForCausalLM": ("HYV3ForCausalLMNextN", True), "HYV4ForCausalLM": ("HYV4ForCausalLMNextN", True),
}

# Every field a released config uses for its MTP layer count (the siblings of num_nextn_predict_layers); a
# "mtp_config.KEY" entry is read from the wrapper's mtp_config (Inkling: SGLang configs/inkling.py InklingMMConfig
# takes n_layers, vLLM config/speculative.py num_nextn_predict_layers).
MTP_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", "num_mtp_layers",
              "mtp_config.n_layers", "mtp_config.num_nextn_predict_layers")
# SGLang configs/inkling.py InklingMMConfig: mtp_config.n_layers overrides text_config.num_nextn_predict_layers
SGLANG_MTP_FIELDS = {"InklingForConditionalGeneration": ("mtp_config.n_layers", "num_nextn_predict_layers")}
# vLLM runs these MTP heads as a chain: no "multiple times of forward on same MTP layer" warning (__post_init__)
VLLM_MTP_CHAINED = frozenset({"step3p5", "step5", "inkling_mm_model", "inkling_model"})
_WRAPPED = "mtp_config."


def mtp_layers(t: TargetConfig, fields: tuple[str, ...] = MTP_FIELDS) -> tuple[int | None, str | None]:
    """(MTP layer count, JSONPath) from the fields in order: each from the language config, then the wrapper
    (``mtp_config.KEY``: the wrapper's mtp_config); (None, None) when absent."""
    mc = t.wrapper.get("mtp_config") if isinstance(t.wrapper.get("mtp_config"), dict) else {}
    for key in fields:
        if key.startswith(_WRAPPED):
            places = ((mc, "$.mtp_config", key[len(_WRAPPED):]),)
        else:
            places = ((t.text, t.root, key), (t.wrapper, "$", key))
        for obj, base, k in places:
            v = obj.get(k) if isinstance(obj, dict) else None
            if isinstance(v, int) and not isinstance(v, bool):
                return v, jpath(base, k)
    return None, None


def vllm_mtp_row(t: TargetConfig) -> tuple[str, tuple[str, tuple[str, ...]]] | None:
    """vLLM's MTP row for this target (by model_type, then architecture): (key, row), or None when vLLM has none."""
    mt = t.model_type or ""
    arch = t.architectures[0] if t.architectures else ""
    for key in (mt, arch):
        if key in VLLM_MTP:
            return key, VLLM_MTP[key]
    if "exaone4_5" in mt:
        return mt, VLLM_MTP["exaone4_5"]
    return None


def check_mtp(t: TargetConfig | None, o, steps: int | None, out: Out) -> dict:
    derived: dict = {}
    if t is None:
        return derived
    arch = t.architectures[0] if t.architectures else None
    engine = o.engine
    n, path = mtp_layers(t)
    fields = MTP_FIELDS
    if engine == "vllm":
        refused = VLLM_MTP_REFUSED.get(t.model_type or "")
        row = vllm_mtp_row(t)
        if refused:
            out.err("MtpUnsupportedByEngine", T, "$.model_type", f"vLLM {o.engine_version or RECORDED['vllm']}: {refused}")
            return derived
        if row is None:
            out.err("MtpUnsupportedByEngine", T, "$.architectures[0]",
                    f"vLLM {o.engine_version or RECORDED['vllm']} has no MTP draft for model_type {t.model_type!r} / "
                    f"{arch!r} (config/speculative.py SpeculativeConfig.hf_config_override has no branch; __post_init__ "
                    "raises \"Unsupported speculative method: 'mtp'\"). Use a drafter method (eagle3, dflash) or ngram")
            return derived
        _, (cls, fields) = row
        derived["mtpArchitecture"] = cls
        if not fields:  # MiMo-V2: vLLM uses only the first MTP layer (_MIMO_V2_*_NUM_MTP_LAYERS)
            n = 1
        else:
            n, path = mtp_layers(t, fields)
    elif engine == "sglang":
        row = SGLANG_MTP.get(arch or "")
        if row is None:
            out.err("MtpUnsupportedByEngine", T, "$.architectures[0]",
                    f"SGLang {o.engine_version or RECORDED['sglang']} has no NextN/MTP draft class for {arch!r} "
                    "(configs/model_config.py ModelConfig._config_draft_model rewrites no such architecture): NEXTN would "
                    "load the target class itself as draft. Use a drafter method (eagle3, dflash) or ngram")
            return derived
        derived["mtpArchitecture"] = row[0]
        if arch in SGLANG_MTP_FIELDS:
            fields = SGLANG_MTP_FIELDS[arch]
            n, path = mtp_layers(t, fields)
    if not n or n < 1:
        where = path or ("$." + fields[0] if fields[0].startswith(_WRAPPED) else jpath(t.root, fields[0]))
        out.err("MtpLayersMissing", T, where,
                f"the target declares no MTP layers ({' / '.join(fields)} "
                f"{'is 0' if n == 0 else 'absent'} in {t.root}): there is no MTP head to draft with "
                "(the checkpoint has no mtp weights). Use a target that ships MTP layers, or a drafter method")
        return derived
    derived["mtpLayers"] = n
    if engine == "sglang" and SGLANG_MTP[arch][1] and n > 1:
        out.info("MtpLayersCapped", T, path,
                 f"the target has {n} MTP layers but SGLang's {SGLANG_MTP[arch][0]} uses one "
                 "(configs/model_config.py _config_draft_model sets num_nextn_predict_layers = 1)")
    if steps is not None:
        if steps > n and steps % n:
            out.err("MtpStepsNotMultiple", S, "spec.speculation.mtp.steps",
                    f"{steps} steps over {n} MTP layers: vLLM requires a multiple of the layer count when it reuses "
                    f"them (config/speculative.py __post_init__ 'must be divisible by n_predict'); use {n} or a "
                    f"multiple of {n}")
        elif steps > n and not (engine == "vllm" and t.model_type in VLLM_MTP_CHAINED):
            out.warn("MtpStepsReuseLayers", S, "spec.speculation.mtp.steps",
                     f"{steps} steps over {n} MTP layers run the same layers again: acceptance of the later positions "
                     f"drops (vLLM warns 'multiple times of forward on same MTP layer'); {n} is what the target trained")
    return derived


def steps_of(o: Any) -> int | None:
    """The MTP steps the spec asks for (Options.steps: spec.speculation.mtp.steps, the CLI's --steps)."""
    v = getattr(o, "steps", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None
