"""Every shape real public drafter/target config.json files take, as hand-written minimal configs.

Each config below is our own minimal dict holding only the fields the checker reads; a comment
names the public file whose *shape* it reproduces. No third-party file is copied here. Some of
these tests describe behaviour the checker does not have yet (see the survey report); they are
deliberately not skipped.
"""

from __future__ import annotations

import copy

import pytest

from specdeploy.core.checker import Options, analyze
from specdeploy.core.modelconfig import FULL, SLIDING, parse_drafter, parse_target
from specdeploy.core.weights import estimate_target_bytes


def codes(a, severity=None):
    return [f.code for f in a.findings if severity is None or f.severity.value == severity]


def finding(a, code):
    hits = [f for f in a.findings if f.code == code]
    assert hits, f"no {code} in {[(f.code, f.path) for f in a.findings]}"
    return hits[0]


def qwen3_drafter(**over):
    """Minimal z-lab/SpecForge-layout drafter (Qwen3 geometry)."""
    d = {
        "architectures": ["DFlashDraftModel"],
        "hidden_size": 4096,
        "num_hidden_layers": 5,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "hidden_act": "silu",
        "vocab_size": 151936,
    }
    d.update(over)
    return d


# ------------------------------------------------------------------ targets (minimal)

# Shape of Qwen/Qwen3-8B config.json: flat Qwen3ForCausalLM, carries use_sliding_window=false.
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
    "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 36,
}

# Shape of Qwen/Qwen3.5-27B (and 3.6-27B) config.json: *ForConditionalGeneration wrapper, text_config
# with hybrid linear/full layer_types and attn_output_gate.
QWEN35_27B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64, "vocab_size": 248320,
        "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 17408,
        "attn_output_gate": True, "dtype": "bfloat16",
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 48,
    },
    "tie_word_embeddings": False,
    "vision_config": {"hidden_size": 1152, "depth": 27},
}

# Shape of moonshotai/Kimi-K2.6 config.json: KimiK25 wrapper, text_config model_type kimi_k2
# (DeepSeek-V3 MLA + MoE), compressed-tensors INT4 with an ignore list, auto_map.
KIMI_K26 = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
    "text_config": {
        "model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840,
        "num_attention_heads": 64, "num_key_value_heads": 64, "intermediate_size": 18432,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "n_routed_experts": 384, "n_shared_experts": 1, "moe_intermediate_size": 2048,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "tie_word_embeddings": False, "dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32, "type": "int"}}},
            "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                       "re:.*lm_head.*"],
        },
    },
}


# ------------------------------------------------------------------ drafters that must pass


def test_specforge_flat_block_size_ids_in_dflash_config():
    # sgl-project/SpecForge configs/qwen3-8b-dflash.json (and qwen3-4b, qwen2.5-0.5b, lfm2.5, longcat):
    # block_size top level, dflash_config holds only mask_token_id + target_layer_ids,
    # plus the Qwen3Config fields use_sliding_window=false / sliding_window=null.
    d = qwen3_drafter(
        block_size=16, num_target_layers=36, use_sliding_window=False, sliding_window=None, max_window_layers=5,
        layer_types=[FULL] * 5, dflash_config={"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    )
    a = analyze(d, QWEN3_8B)
    assert a.ok and codes(a) == []
    assert a.drafter.block_size.path == "$.block_size"
    assert a.derived.block_size == 16 and not a.derived.has_sliding


def test_dflash2_block_size_only_in_dflash_config_on_wrapper_target():
    # z-lab/Qwen3.8-27B-DFlash2 config.json (also SpecForge configs/qwen3.6-27b-dflash2.json):
    # DFlash2DraftModel, block_size only inside dflash_config next to conv_*/selector_* keys,
    # top-level is_causal=false, all-sliding layer_types, rope_parameters instead of rope_theta.
    d = qwen3_drafter(
        architectures=["DFlash2DraftModel"], hidden_size=5120, intermediate_size=17408, vocab_size=248320,
        is_causal=False, num_target_layers=64, sliding_window=2048, use_sliding_window=True, max_window_layers=5,
        layer_types=[SLIDING] * 5, rope_parameters={"rope_theta": 10000000, "rope_type": "default"},
        dflash_config={"block_size": 8, "conv_group_size": 16, "conv_kernel_size": 2, "selector_rank": 256,
                       "selector_top_k": 16, "mask_token_id": 248070, "target_layer_ids": [5, 19, 33, 47, 61]},
    )
    a = analyze(d, QWEN35_27B, Options(engine="sglang", method="dflash2"))
    assert a.ok, [(f.code, f.path) for f in a.findings]
    assert "BlockSizeDefaulted" not in codes(a)
    assert a.drafter.variant == "dflash2"
    assert a.drafter.block_size.path == "$.dflash_config.block_size"
    assert a.derived.block_size == 8 and a.derived.drafter_window == 2048
    assert set(a.derived.layer_types) == {SLIDING}


def test_dflash2_block_16_with_logit_scalars():
    # z-lab/Muse-Glimmer-30B-DFlash2 config.json: second DFlash2 shape, block 16 in dflash_config,
    # output_multiplier / final_logit_softcapping floats in dflash_config, 52-layer target.
    d = qwen3_drafter(
        architectures=["DFlash2DraftModel"], hidden_size=6656, intermediate_size=19968, vocab_size=202048,
        is_causal=False, num_target_layers=52, sliding_window=2048, layer_types=[SLIDING] * 5,
        dflash_config={"block_size": 16, "conv_group_size": 16, "conv_kernel_size": 2, "final_logit_softcapping": 20.0,
                       "output_multiplier": 0.196, "selector_rank": 256, "selector_top_k": 16,
                       "mask_token_id": 201818, "target_layer_ids": [1, 13, 25, 37, 49]},
    )
    # the Muse Glimmer target's own class (SGLang serves DFLASH only from targets with set_dflash_layers_to_capture)
    t = {"architectures": ["MuseGlimmerForCausalLM"], "hidden_size": 6656, "num_hidden_layers": 52, "vocab_size": 202048}
    a = analyze(d, t, Options(engine="sglang", method="dflash2"))
    assert a.ok and a.derived.block_size == 16 and a.derived.drafter_window == 2048


def test_use_swa_without_layer_types_every_layer_slides():
    # XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash dflash/config.json: no layer_types; dflash_config.use_swa +
    # swa_window_size + attention_sink_bias; block_size 8 in both places; target ids include layer 0
    # and the target's last layer (69 of 70). vLLM _resolve_layer_attention: every layer SWA.
    d = qwen3_drafter(
        hidden_size=6144, intermediate_size=16384, num_attention_heads=128, num_key_value_heads=8, vocab_size=152064,
        block_size=8, num_target_layers=70, sliding_window=1024, torch_dtype="bfloat16",
        dflash_config={"target_layer_ids": [0, 15, 31, 47, 69], "mask_token_id": 151669, "block_size": 8,
                       "use_swa": True, "swa_window_size": 1024, "attention_sink_bias": True},
    )
    t = {"architectures": ["MiMoV2ForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 70, "vocab_size": 152064}
    a = analyze(d, t, Options(engine="vllm"))
    assert a.ok
    assert set(a.derived.layer_types) == {SLIDING} and a.derived.drafter_window == 1024
    assert "BlockSizeConflict" not in codes(a)
    last = finding(a, "TargetLayerIsLast")
    assert last.severity.value == "warning" and last.path == "$.dflash_config.target_layer_ids[4]"


def test_use_swa_overrides_all_full_layer_types_like_vllm():
    # Same MiMo shape once a loader has synthesized layer_types (HF Qwen3Config fills an all-full list).
    # vLLM qwen3_dflash.py::_resolve_layer_attention: `use_swa and not any_sliding` -> every layer SWA,
    # so the drafter runs sliding layers with window 1024, not full attention.
    d = qwen3_drafter(
        hidden_size=6144, num_attention_heads=128, vocab_size=152064, block_size=8, layer_types=[FULL] * 5,
        dflash_config={"target_layer_ids": [0, 15, 31, 47, 68], "mask_token_id": 151669,
                       "use_swa": True, "swa_window_size": 1024},
    )
    t = {"architectures": ["X"], "hidden_size": 6144, "num_hidden_layers": 70, "vocab_size": 152064}
    a = analyze(d, t, Options(engine="vllm"))
    assert set(a.derived.layer_types) == {SLIDING}
    assert a.derived.drafter_window == 1024


def test_mask_token_in_both_places_on_kimi_wrapper():
    # SpecForge configs/kimi-k2.7-code-dflash.json against moonshotai/Kimi-K2.6: mask_token_id both at
    # the top level and in dflash_config, block 8, 61-layer MLA/INT4 target under text_config.
    d = qwen3_drafter(
        hidden_size=7168, num_hidden_layers=6, num_attention_heads=64, intermediate_size=18432, vocab_size=163840,
        block_size=8, mask_token_id=163838, num_target_layers=61, layer_types=[FULL] * 6,
        dflash_config={"mask_token_id": 163838, "target_layer_ids": [1, 12, 24, 35, 47, 58]},
    )
    a = analyze(d, KIMI_K26, Options(engine="sglang", gpu="b300", gpu_count=8, trust_remote_code=True))
    assert a.ok, [(f.code, f.path) for f in a.findings]
    assert a.target.root == "$.text_config"
    assert a.drafter.mask_token_id.path == "$.dflash_config.mask_token_id"


def test_top_level_target_layer_ids_and_vendor_architecture():
    # Qwen3.5-9B-DFlash-style shape used by third-party loaders: a vendor architecture name
    # (Qwen3DFlashForCausalLM), target_layer_ids at the top level (SGLang falls back to it),
    # dflash_config holding only mask_token_id + block_size, rope_parameters, 8 taps for 6 layers.
    d = qwen3_drafter(
        architectures=["Qwen3DFlashForCausalLM"], num_hidden_layers=6, num_key_value_heads=4, vocab_size=248320,
        sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
        target_layer_ids=[1, 6, 11, 16, 22, 27, 32, 37],
        dflash_config={"mask_token_id": 248077, "block_size": 16},
    )
    t = {"architectures": ["Qwen3_5ForConditionalGeneration"],
         "text_config": {"hidden_size": 4096, "num_hidden_layers": 40, "vocab_size": 248320}}
    a = analyze(d, t)
    assert a.ok, [(f.code, f.path) for f in a.findings]
    assert a.drafter.target_layer_ids.path == "$.target_layer_ids"
    assert a.derived.target_layer_ids == (1, 6, 11, 16, 22, 27, 32, 37)


def test_use_sliding_window_without_layer_types_follows_qwen3config():
    # z-lab/Qwen3.5-122B-A10B-DFlash (as trimmed in public loader fixtures): dflash_config.block_size only,
    # use_sliding_window=true + sliding_window=4096, no layer_types. Both engines load it through
    # transformers' Qwen3Config, which builds layer_types: sliding where i >= max_window_layers (default 28),
    # so a 6-layer drafter runs every layer full; with max_window_layers 2 layers 2.. are sliding.
    d = qwen3_drafter(
        model_type="qwen3", hidden_size=3072, num_hidden_layers=6, intermediate_size=9216, vocab_size=248320,
        use_sliding_window=True, sliding_window=4096,
        dflash_config={"block_size": 16, "mask_token_id": 248077, "target_layer_ids": [1, 7, 14, 20, 26, 32, 39, 45]},
    )
    t = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
         "text_config": {"hidden_size": 3072, "num_hidden_layers": 48, "vocab_size": 248320}}
    a = analyze(d, t)
    assert a.ok
    assert set(a.derived.layer_types) == {FULL} and a.derived.drafter_window is None
    assert "LayerTypesDerived" not in codes(a)
    a = analyze({**d, "max_window_layers": 2}, t, Options(engine="vllm", engine_version="0.33.0"))
    assert a.ok, codes(a)
    assert a.derived.layer_types == (FULL, FULL) + (SLIDING,) * 4 and a.derived.drafter_window == 4096
    assert finding(a, "LayerTypesDerived").path == "$.layer_types"


def test_num_layers_alias_on_longcat_target():
    # SpecForge configs/longcat-flash-dflash.json against meruan/LongCat-Flash-Chat config.json, which
    # names its depth num_layers (not num_hidden_layers) and its FFN widths ffn_hidden_size /
    # expert_ffn_hidden_size.
    d = qwen3_drafter(hidden_size=6144, vocab_size=131072, block_size=16, num_target_layers=28,
                      dflash_config={"mask_token_id": 2, "target_layer_ids": [1, 7, 13, 19, 25]})
    a = analyze(d, LONGCAT)
    assert a.ok and a.target.num_hidden_layers.path == "$.num_layers"
    assert "NumTargetLayersMismatch" not in codes(a)


def test_lfm2_target_with_conv_layers():
    # SpecForge configs/lfm2.5-1.2b-instruct-dflash.json against LiquidAI/LFM2.5-1.2B-Instruct, whose
    # layer_types mixes "conv" and "full_attention" and which ties embeddings via tie_embedding.
    d = qwen3_drafter(hidden_size=2048, num_hidden_layers=8, head_dim=64, intermediate_size=6144, vocab_size=65536,
                      block_size=16, num_target_layers=16, tie_word_embeddings=True,
                      dflash_config={"mask_token_id": 16, "target_layer_ids": [1, 4, 7, 10, 13]})
    a = analyze(d, LFM2)
    assert a.ok, [(f.code, f.path) for f in a.findings]


def test_qwen3_vl_text_config_target_and_vl_drafter():
    # SpecForge configs/qwen3-vl-8b-dflash.json (drafter model_type qwen3_vl_text, mrope rope_scaling)
    # against Qwen/Qwen3-VL-8B-Instruct (text_config; tie_word_embeddings only on the wrapper).
    d = qwen3_drafter(model_type="qwen3_vl_text", block_size=16, num_target_layers=36, layer_types=[FULL] * 5,
                      rope_scaling={"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
                      dflash_config={"mask_token_id": 151669, "target_layer_ids": [3, 9, 17, 25, 33]})
    t = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
         "text_config": {"hidden_size": 4096, "num_hidden_layers": 36, "vocab_size": 151936,
                         "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288},
         "tie_word_embeddings": False, "vision_config": {"hidden_size": 1152, "out_hidden_size": 4096}}
    a = analyze(d, t)
    assert a.ok and a.target.root == "$.text_config"


def test_flat_multimodal_target_reads_language_fields_not_vision():
    # Qwen/Qwen2.5-VL-7B-Instruct config.json (older transformers): language fields at the top level
    # next to a vision_config that has its own hidden_size (1280).
    t = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "hidden_size": 3584, "num_hidden_layers": 28,
         "vocab_size": 152064, "num_attention_heads": 28, "num_key_value_heads": 4,
         "vision_config": {"hidden_size": 1280, "depth": 32, "out_hidden_size": 3584}}
    tc, findings = parse_target(t)
    assert findings == [] and tc.root == "$" and tc.hidden_size.value == 3584


def test_llama4_wrapper_text_config():
    # meta-llama/Llama-4-Scout-17B-16E-Instruct config.json: Llama4ForConditionalGeneration with
    # text_config (MoE via num_local_experts, intermediate_size_mlp).
    tc, findings = parse_target(LLAMA4_SCOUT)
    assert findings == [] and tc.root == "$.text_config"
    assert (tc.num_hidden_layers.value, tc.hidden_size.value, tc.vocab_size.value) == (48, 5120, 202048)


def test_speculators_geometry_and_window_inside_transformer_layer_config():
    # Speculators-format DFlash drafter (vllm-project/speculators export, e.g. RedHatAI *speculator.dflash):
    # aux_hidden_state_layer_ids (= target id + 1), mask_token_id / block_size top level, geometry,
    # layer_types and sliding_window inside transformer_layer_config.
    d = {
        "speculators_model_type": "dflash", "architectures": ["DFlashSpeculator"], "block_size": 8,
        "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34], "mask_token_id": 151669,
        "transformer_layer_config": {
            "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
            "hidden_act": "silu", "layer_types": [SLIDING] * 5, "sliding_window": 2048,
        },
    }
    a = analyze(d, QWEN3_8B)
    assert a.ok and a.drafter.format == "speculators"
    assert a.derived.target_layer_ids == (1, 9, 17, 25, 33)
    assert a.drafter.layer_types.path == "$.transformer_layer_config.layer_types"
    assert a.derived.drafter_window == 2048 and a.derived.block_size == 8


def test_speculators_top_level_sliding_fields_are_not_read_by_vllm():
    # Shape: layer_types, use_sliding_window, sliding_window at the top level; transformer_layer_config's
    # sliding_window null. vLLM 0.33 builds the drafter config from transformer_layer_config alone
    # (speculators/base.py extract_transformers_pre_trained_config; update_dflash copies only ids, mask,
    # vocab and target_hidden_size), so those sliding layers would run as full attention: an error.
    d = {
        "speculators_model_type": "dflash", "block_size": 8, "target_hidden_size": 4096,
        "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34], "mask_token_id": 151669,
        "layer_types": [SLIDING, SLIDING, SLIDING, FULL, FULL], "use_sliding_window": True, "sliding_window": 2048,
        "transformer_layer_config": {"hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
                                     "num_key_value_heads": 8, "vocab_size": 151936, "sliding_window": None},
    }
    a = analyze(d, QWEN3_8B, Options(engine="vllm", engine_version="0.33.0"))
    assert not a.ok
    f = finding(a, "SlidingLayersIgnoredByEngine")
    assert f.path == "$.layer_types" and "transformer_layer_config" in f.message
    assert set(a.derived.layer_types) == {FULL}
    # moved into transformer_layer_config, the same drafter is fine
    tl = {**d["transformer_layer_config"], "layer_types": d["layer_types"], "sliding_window": 2048}
    good = {k: v for k, v in d.items() if k not in ("layer_types", "use_sliding_window", "sliding_window")}
    a = analyze({**good, "transformer_layer_config": tl}, QWEN3_8B, Options(engine="vllm", engine_version="0.33.0"))
    assert a.ok, codes(a)
    assert a.derived.drafter_window == 2048 and a.derived.mixed_layers


def test_speculators_block_size_from_proposal_speculative_tokens():
    # Speculators exports carry the draft length in speculators_config.proposal_methods[0].speculative_tokens
    # (vLLM SpeculatorsConfig forwards it as num_speculative_tokens); block_size = speculative_tokens + 1.
    d = {
        "speculators_model_type": "dflash", "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34], "mask_token_id": 151669,
        "speculators_config": {"proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 7}],
                               "verifier": {"name_or_path": "Qwen/Qwen3-8B"}},
        "transformer_layer_config": {"hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
                                     "num_key_value_heads": 8, "vocab_size": 151936},
    }
    a = analyze(d, QWEN3_8B)
    assert "BlockSizeDefaulted" not in codes(a)
    assert a.derived.block_size == 8


def test_speculators_reduced_draft_vocab_is_not_a_vocab_mismatch():
    # Speculators DFlash with a reduced draft vocabulary (draft_vocab_size 32000 + d2t/t2d tables): the
    # embedding table is transformer_layer_config.vocab_size (= target vocab); the reduced lm_head is by design.
    d = {
        "speculators_model_type": "dflash", "block_size": 8, "draft_vocab_size": 32000,
        "aux_hidden_state_layer_ids": [2, 10, 18, 26, 34], "mask_token_id": 151669,
        "transformer_layer_config": {"hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
                                     "num_key_value_heads": 8, "vocab_size": 151936},
    }
    a = analyze(d, QWEN3_8B)
    assert a.ok
    assert "VocabSizeDiffers" not in codes(a)


# ------------------------------------------------------------------ training templates that must fail


def test_mla_drafter_template_with_empty_dflash_config():
    # SpecForge configs/deepseek-v2-lite-dflash.json: vendor architecture DeepseekDFlashDraftModel,
    # MLA geometry (kv_lora_rank, no num_key_value_heads/head_dim), dflash_config {} -> a training
    # template, not a deployable drafter.
    d = {"architectures": ["DeepseekDFlashDraftModel"], "model_type": "deepseek_v3", "hidden_act": "silu",
         "hidden_size": 2048, "num_hidden_layers": 3, "num_attention_heads": 16, "kv_lora_rank": 512,
         "q_lora_rank": None, "num_target_layers": 27, "block_size": 8, "vocab_size": 102400,
         "draft_vocab_size": 102400, "dflash_config": {}}
    t = {"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 27, "vocab_size": 102400}
    a = analyze(d, t)
    assert "NotADFlashDrafter" not in codes(a)
    assert finding(a, "TargetLayerIdsMissing").path == "$.dflash_config.target_layer_ids"
    assert finding(a, "MaskTokenMissing").path == "$.dflash_config.mask_token_id"


def test_null_mask_token_id_in_dflash_config():
    # SpecForge configs/qwen3.5-27b-dflash.json: "mask_token_id": null inside dflash_config.
    d = qwen3_drafter(hidden_size=5120, vocab_size=248320, block_size=16, num_target_layers=64,
                      dflash_config={"mask_token_id": None, "target_layer_ids": [3, 15, 31, 47, 59]})
    a = analyze(d, QWEN35_27B)
    f = finding(a, "MaskTokenMissing")
    assert f.severity.value == "error" and f.path == "$.dflash_config.mask_token_id"


# ------------------------------------------------------------------ wrappers that omit defaults

# Shape of google/gemma-3-27b-it config.json: Gemma3ForConditionalGeneration whose text_config omits
# vocab_size (Gemma3TextConfig default 262208) and tie_word_embeddings (default true); the wrapper has
# no vocab_size either.
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "gemma3_text", "hidden_size": 5376, "num_hidden_layers": 62,
                    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                    "intermediate_size": 21504, "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
}


def gemma_drafter():
    # z-lab/gemma-4-31B-it-DFlash-style drafter: mixed sliding/full layer_types with sliding_window.
    return qwen3_drafter(hidden_size=5376, intermediate_size=21504, vocab_size=262208, block_size=16,
                         sliding_window=1024, layer_types=[SLIDING, FULL, SLIDING, FULL, FULL],
                         dflash_config={"mask_token_id": 4, "target_layer_ids": [1, 15, 30, 45, 59]})


def test_gemma3_wrapper_without_vocab_size_is_not_an_error():
    a = analyze(gemma_drafter(), GEMMA3_27B, Options(engine="vllm"))
    assert "TargetFieldMissing" not in codes(a, "error")
    # vLLM 0.33's Gemma3ForConditionalGeneration is not SupportsEagle3: it cannot feed a DFlash drafter (and
    # SGLang's has no set_dflash_layers_to_capture), the one error; the config itself is fine
    assert codes(a, "error") == ["DFlashTargetCaptureUnsupported"]
    a = analyze(gemma_drafter(), GEMMA3_27B, Options())
    assert "TargetFieldMissing" not in codes(a, "error")
    assert a.ok


def test_gemma3_wrapper_weight_estimate_available():
    # 27.0B text params x 2 bytes ~ 54 GB; without a vocab the fit check is silently skipped.
    t, _ = parse_target(GEMMA3_27B)
    b = estimate_target_bytes(t)
    assert b is not None and 0.85 <= b / 54e9 <= 1.15


# ------------------------------------------------------------------ weight estimates vs known sizes

LLAMA31_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
               "layer_types": [SLIDING, FULL] * 12, "num_attention_heads": 64, "num_hidden_layers": 24,
               "num_key_value_heads": 8, "num_local_experts": 32, "sliding_window": 128, "tie_word_embeddings": False,
               "vocab_size": 201088, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                   "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
QWEN3_CODER_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "decoder_sparse_step": 1, "head_dim": 128,
                       "hidden_size": 2048, "intermediate_size": 6144, "mlp_only_layers": [], "moe_intermediate_size": 768,
                       "num_attention_heads": 32, "num_experts": 128, "num_hidden_layers": 48, "num_key_value_heads": 4,
                       "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 151936}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3, "hidden_size": 7168,
               "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
               "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128, "num_hidden_layers": 61,
               "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "vocab_size": 129280, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
GLM45 = {"architectures": ["Glm4MoeForCausalLM"], "first_k_dense_replace": 3, "head_dim": 128, "hidden_size": 5120,
         "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 160, "n_shared_experts": 1,
         "num_attention_heads": 96, "num_hidden_layers": 92, "num_key_value_heads": 8, "tie_word_embeddings": False,
         "torch_dtype": "bfloat16", "vocab_size": 151552}
LLAMA4_SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": False,
                "text_config": {"head_dim": 128, "hidden_size": 5120, "interleave_moe_layer_step": 1,
                                "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40,
                                "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
                                "torch_dtype": "bfloat16", "vocab_size": 202048}}
# meituan-longcat/LongCat-Flash-Chat config.json: num_layers, ffn_hidden_size (dense), expert_ffn_hidden_size (MoE),
# 512 routed experts (+256 zero experts), MLA, two attention + two dense MLP blocks per layer. ~560B params.
LONGCAT = {"architectures": ["LongcatFlashForCausalLM"], "vocab_size": 131072, "hidden_size": 6144,
           "ffn_hidden_size": 12288, "expert_ffn_hidden_size": 2048, "num_layers": 28, "num_attention_heads": 64,
           "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "n_routed_experts": 512, "zero_expert_num": 256, "moe_topk": 12, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}
# LiquidAI/LFM2.5-1.2B-Instruct config.json: conv + attention layer_types, block_auto_adjust_ff_dim, tie_embedding.
LFM2 = {"architectures": ["Lfm2ForCausalLM"], "block_auto_adjust_ff_dim": True, "block_ff_dim": 12288,
        "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "conv_L_cache": 3, "hidden_size": 2048,
        "intermediate_size": 12288, "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention", "conv", "conv",
                        "full_attention", "conv", "full_attention", "conv", "full_attention", "conv",
                        "full_attention", "conv"],
        "tie_embedding": True, "torch_dtype": "bfloat16", "vocab_size": 65536}


@pytest.mark.parametrize(
    "name,doc,known_bytes",
    [
        ("llama-3.1-8b bf16", LLAMA31_8B, 8.03e9 * 2),
        ("gpt-oss-20b mxfp4 experts", GPT_OSS_20B, 13.8e9),  # released safetensors total
        ("qwen3-coder-30b-a3b MoE", QWEN3_CODER_30B_A3B, 30.5e9 * 2),
        ("deepseek-v3 fp8 MLA", DEEPSEEK_V3, 671e9 * 1),
        ("glm-4.5 MoE", GLM45, 353e9 * 2),
        ("kimi-k2.6 int4 wrapper", KIMI_K26, 594e9),  # released INT4 checkpoint ~594 GB
        ("qwen3.5-27b hybrid linear wrapper", QWEN35_27B, 27e9 * 2),
        ("llama-4-scout text_config", LLAMA4_SCOUT, 108e9 * 2),
        ("longcat-flash num_layers/expert_ffn_hidden_size", LONGCAT, 560e9 * 2),
        ("lfm2.5-1.2b conv layers", LFM2, 1.17e9 * 2),
    ],
)
def test_target_weight_estimate_close_to_known_size(name, doc, known_bytes):
    t, _ = parse_target(copy.deepcopy(doc))
    b = estimate_target_bytes(t)
    assert b is not None
    assert 0.85 <= b / known_bytes <= 1.2, f"{name}: estimate {b / 1e9:.1f} GB vs known {known_bytes / 1e9:.1f} GB"


def test_longcat_fits_on_eight_b300():
    # ~1.12 TB bf16 on 8 x 288 GB: must not be refused as not fitting.
    d = qwen3_drafter(hidden_size=6144, vocab_size=131072, block_size=16, num_target_layers=28,
                      dflash_config={"mask_token_id": 2, "target_layer_ids": [1, 7, 13, 19, 25]})
    a = analyze(d, LONGCAT, Options(gpu="b300", gpu_count=8))
    assert "WeightsExceedGpuMemory" not in codes(a)


def test_drafter_parse_never_raises_on_speculators_without_layer_config():
    # Minimal speculators marker as written by training stores ({"speculators_model_type": "dflash"}).
    d, findings = parse_drafter({"speculators_model_type": "dflash"})
    assert d is not None and d.is_dflash and d.format == "speculators"
    a = analyze({"speculators_model_type": "dflash"}, QWEN3_8B)
    assert "TargetLayerIdsMissing" in codes(a) and "MaskTokenMissing" in codes(a)
