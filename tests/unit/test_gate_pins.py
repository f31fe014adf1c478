"""Gate rules pinned to the engine code they encode (issue 43): each test states the engine's own rule (file and
function of the vLLM 0.33.0 / SGLang 0.5.23 wheels) and fails when the gate drifts from it, including the
boundary cases the rule tables of test_method_gates.py do not reach."""

from __future__ import annotations

import pytest

from test_method_gates import DS, L8, LT, NESTED, TOP, codes, gate


def test_vllm_taps_the_last_layers_output():
    """vLLM captures ``hidden_states + residual`` after decoder layer ``idx`` under id ``idx + 1``, and id 0 is the
    embedding output (model_executor/models/interfaces.py EagleModelMixin._maybe_add_hidden_state, called from
    models/llama.py forward with ``self.start_layer`` before the loop and ``idx + 1`` after each layer): on the
    32-layer Llama-3.1-8B, ids 0..32 capture something, id 32 being the last layer's output."""
    for ids in ([2, 16, 32], [0, 16, 29]):
        fs, _, der = gate("eagle3", "vllm", L8, LT, d_edit={TOP: ids})
        assert "Eagle3AuxLayerOutOfRange" not in codes(fs), ids
        assert der["auxLayers"]["vllm"] == ids
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={TOP: [2, 16, 33]})
    assert "Eagle3AuxLayerOutOfRange" in codes(fs, "error")


def test_sglang_taps_stop_before_the_last_layers_output():
    """SGLang captures at the input of layer ``i`` (layers/layer_boundary/stage.py) and adds 1 to the configured
    eagle_config ids (models/llama.py set_eagle3_layers_to_capture): configured 30 -> capture 31, the input of the
    last of 32 layers; configured 31 -> 32 captures nothing."""
    fs, _, der = gate("eagle3", "sglang", L8, LT, d_edit={NESTED: [1, 15, 30]})
    assert "Eagle3AuxLayerOutOfRange" not in codes(fs) and der["auxLayers"]["sglang"] == [2, 16, 31]
    fs, _, _ = gate("eagle3", "sglang", L8, LT, d_edit={NESTED: [1, 15, 31]})
    assert "Eagle3AuxLayerOutOfRange" in codes(fs, "error")


@pytest.mark.parametrize("layers,steps,refused", [
    (3, 1, False), (3, 2, False),  # fewer steps than layers: K <= n_predict is never checked
    (3, 3, False), (3, 6, False), (2, 4, False),  # a multiple reuses the layers
    (3, 4, True), (3, 5, True), (2, 3, True),  # K > n_predict and K % n_predict != 0: ValueError
])
def test_mtp_steps_divisibility_is_vllms(layers, steps, refused):
    """vLLM config/speculative.py SpeculativeConfig.__post_init__: ``num_speculative_tokens > n_predict and
    num_speculative_tokens % n_predict != 0`` raises "must be divisible by n_predict"; fewer steps than MTP layers
    run the first K layers and are accepted."""
    fs, _, der = gate("mtp", "vllm", None, DS, t_edit={("num_nextn_predict_layers",): layers}, steps=steps)
    assert der["mtpLayers"] == layers
    assert ("MtpStepsNotMultiple" in codes(fs, "error")) is refused
    assert ("MtpStepsReuseLayers" in codes(fs, "warning")) is (steps > layers and not refused)


def _inkling(mtp_config: dict | None) -> dict:
    """An Inkling multimodal wrapper (SGLang configs/inkling.py InklingMMConfig): the language model under
    text_config, the MTP depth in the wrapper's mtp_config."""
    doc = {"architectures": ["InklingForConditionalGeneration"], "model_type": "inkling_mm_model",
           "text_config": {"model_type": "inkling_model", "num_hidden_layers": 40, "hidden_size": 4096,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                           "vocab_size": 151936, "intermediate_size": 12288}}
    if mtp_config is not None:
        doc["mtp_config"] = mtp_config
    return doc


def test_vllm_reads_the_inkling_mtp_depth_from_the_wrappers_mtp_config():
    """vLLM config/speculative.py SpeculativeConfig.hf_config_override, ``model_type in ("inkling_mm_model",
    "inkling_model")``: ``checkpoint_depths = mtp_config.get("num_nextn_predict_layers", 0)`` (raises "does not
    contain MTP weights" below 1) becomes n_predict; the MTP chain runs without the same-layer warning."""
    fs, _, der = gate("mtp", "vllm", None, _inkling({"num_nextn_predict_layers": 2}), steps=2)
    assert not codes(fs, "error") and der["mtpLayers"] == 2 and der["mtpArchitecture"] == "InklingMTPModel"
    fs, _, _ = gate("mtp", "vllm", None, _inkling({"num_nextn_predict_layers": 2}), steps=3)
    assert "MtpStepsNotMultiple" in codes(fs, "error")
    fs, _, _ = gate("mtp", "vllm", None, _inkling({"num_nextn_predict_layers": 2}), steps=4)
    assert not codes(fs, "error") and "MtpStepsReuseLayers" not in codes(fs)  # vLLM: no warning for inkling_mtp
    fs, _, _ = gate("mtp", "vllm", None, _inkling(None))
    (f,) = [f for f in fs if f.code == "MtpLayersMissing"]
    assert f.path == "$.mtp_config.num_nextn_predict_layers"


def test_sglang_reads_the_inkling_mtp_depth_from_n_layers():
    """SGLang configs/inkling.py InklingMMConfig.__init__: ``mtp_config["n_layers"]`` overrides
    text_config.num_nextn_predict_layers (what the draft worker reads)."""
    fs, _, der = gate("mtp", "sglang", None, _inkling({"n_layers": 3}))
    assert not codes(fs, "error") and der["mtpLayers"] == 3
    doc = _inkling({"n_layers": 3})
    doc["text_config"]["num_nextn_predict_layers"] = 1
    _, _, der = gate("mtp", "sglang", None, doc)
    assert der["mtpLayers"] == 3


# ----------------------------------------------------------------- the survivors of tools/mutation.sh -f mtp.py

def _where(fs, code):
    (f,) = [f for f in fs if f.code == code]
    assert f.message.strip()
    return f.source.value, f.path


def test_mtp_findings_name_the_field_to_fix():
    """Each MTP finding names the source and the JSONPath (or spec path) the user edits."""
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("num_nextn_predict_layers",): 0})
    assert _where(fs, "MtpLayersMissing") == ("target", "$.num_nextn_predict_layers")
    fs, _, _ = gate("mtp", "sglang", None, DS, t_edit={("num_nextn_predict_layers",): None})
    assert _where(fs, "MtpLayersMissing")[1] == "$.num_nextn_predict_layers"
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("num_nextn_predict_layers",): 2}, steps=3)
    assert _where(fs, "MtpStepsNotMultiple") == ("spec", "spec.speculation.mtp.steps")
    fs, _, _ = gate("mtp", "vllm", None, DS, steps=2)
    assert _where(fs, "MtpStepsReuseLayers") == ("spec", "spec.speculation.mtp.steps")
    fs, _, _ = gate("mtp", "sglang", None, DS, t_edit={("architectures",): ["Qwen3ForCausalLM"]})
    assert _where(fs, "MtpUnsupportedByEngine") == ("target", "$.architectures[0]")
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("model_type",): "qwen3", ("architectures",): ["Qwen3ForCausalLM"]})
    assert _where(fs, "MtpUnsupportedByEngine") == ("target", "$.architectures[0]")
    # a text_config model: the field under the language config
    q = _qwen35()
    del q["text_config"]["mtp_num_hidden_layers"]
    fs, _, _ = gate("mtp", "vllm", None, q)
    assert _where(fs, "MtpLayersMissing")[1] == "$.text_config.mtp_num_hidden_layers"
    q["mtp_num_hidden_layers"] = 0  # a wrapper-level field
    fs, _, _ = gate("mtp", "vllm", None, q)
    assert _where(fs, "MtpLayersMissing")[1] == "$.mtp_num_hidden_layers"
    fs, _, _ = gate("mtp", "vllm", None, _inkling({"num_nextn_predict_layers": 0}))
    assert _where(fs, "MtpLayersMissing")[1] == "$.mtp_config.num_nextn_predict_layers"


def _qwen35() -> dict:
    from test_method_gates import load

    q = load("qwen3.5-27b.target.json")
    q["text_config"]["mtp_num_hidden_layers"] = 1
    return q


def test_vllm_refuses_deepseek_v41_mtp_with_its_own_reason():
    """config/speculative.py: model_type deepseek_v41 with method mtp raises "no classic-MTP draft ... Use
    speculative method 'dspark'" (not the generic unsupported-method error)."""
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("model_type",): "deepseek_v41"})
    (f,) = [f for f in fs if f.code == "MtpUnsupportedByEngine"]
    assert f.path == "$.model_type" and "dspark" in f.message


@pytest.mark.parametrize("value", ["2", True, 2.0])
def test_mtp_layer_counts_are_integers(value):
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("num_nextn_predict_layers",): value})
    assert "MtpLayersMissing" in codes(fs, "error")


def test_vllm_reads_each_models_own_layer_field():
    """hf_config_override: qwen3_5 reads mtp_num_hidden_layers (not num_nextn_predict_layers); MiMo-V2 uses only its
    first MTP layer (_MIMO_V2_*_NUM_MTP_LAYERS), whatever the config declares; exaone4_5* by substring."""
    q = _qwen35()
    q["text_config"]["num_nextn_predict_layers"] = 3
    _, _, der = gate("mtp", "vllm", None, q)
    assert der["mtpLayers"] == 1
    mimo = {"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash", "num_hidden_layers": 48,
            "hidden_size": 4096, "num_nextn_predict_layers": 3}
    fs, _, der = gate("mtp", "vllm", None, mimo, steps=2)
    assert der["mtpLayers"] == 1 and der["mtpArchitecture"] == "MiMoV2MTPModel"
    assert "MtpStepsReuseLayers" in codes(fs, "warning") and "MtpStepsNotMultiple" not in codes(fs)
    ex = {"architectures": ["Exaone4_5ForConditionalGeneration"], "model_type": "exaone4_5_vl",
          "num_hidden_layers": 32, "hidden_size": 4096, "num_nextn_predict_layers": 1}
    fs, _, der = gate("mtp", "vllm", None, ex)
    assert not codes(fs, "error") and der["mtpArchitecture"] == "Exaone4_5_MTP"


def test_sglang_caps_only_its_one_layer_rows():
    """SGLang configs/model_config.py _config_draft_model forces num_nextn_predict_layers = 1 only for some rows
    (MtpLayersCapped, info); DeepSeek V3's NextN keeps the target's count, and vLLM caps nothing."""
    fs, _, der = gate("mtp", "sglang", None, DS, t_edit={("num_nextn_predict_layers",): 3})
    assert "MtpLayersCapped" not in codes(fs) and der["mtpArchitecture"] == "DeepseekV3ForCausalLMNextN"
    fs, _, _ = gate("mtp", "vllm", None, "glm-5.3-flash.target.json", t_edit={("text_config", "num_nextn_predict_layers"): 2})
    assert "MtpLayersCapped" not in codes(fs)
    fs, _, _ = gate("mtp", "sglang", None, "glm-5.3-flash.target.json", t_edit={("text_config", "num_nextn_predict_layers"): 1})
    assert "MtpLayersCapped" not in codes(fs)
    fs, _, _ = gate("mtp", "sglang", None, "glm-5.3-flash.target.json", t_edit={("text_config", "num_nextn_predict_layers"): 2})
    assert _where(fs, "MtpLayersCapped") == ("target", "$.text_config.num_nextn_predict_layers")


def test_deepseek_v41_refusal_is_the_targets():
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("model_type",): "deepseek_v41"})
    assert _where(fs, "MtpUnsupportedByEngine") == ("target", "$.model_type")


@pytest.mark.parametrize("steps", ["3", True, 3.0])
def test_steps_that_are_not_an_integer_are_not_judged(steps):
    """Options.steps is an integer (the schema's); anything else is no steps request, never an exception."""
    fs, _, _ = gate("mtp", "vllm", None, DS, t_edit={("num_nextn_predict_layers",): 2}, steps=steps)
    assert not codes(fs) & {"MtpStepsNotMultiple", "MtpStepsReuseLayers"}
