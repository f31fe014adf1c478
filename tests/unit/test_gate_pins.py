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
