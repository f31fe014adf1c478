"""The core's copy of transformers' sliding-window rules against transformers itself.

Both engines load a z-lab/SpecForge drafter config through transformers' config class of its
model_type (Qwen3Config for every released DFlash drafter). Its ``__post_init__`` rewrites
``sliding_window`` and builds ``layer_types``; the checker must see the same values
(``specdeploy.core.modelconfig.hf_view``, a pure copy). transformers is the version the engines
pin (vLLM 0.33: >=5.16.1,<5.21; SGLang 0.5.23: ==5.19.0).
"""

from __future__ import annotations

import itertools

import pytest

from specdeploy.core.modelconfig import FULL, SLIDING, hf_view

import transformers  # the test extra pins it; a missing install must fail, not skip


CASES = [
    {},
    {"use_sliding_window": True},
    {"use_sliding_window": True, "sliding_window": 2048},
    {"use_sliding_window": True, "sliding_window": None},
    {"use_sliding_window": False, "sliding_window": 2048},
    {"use_sliding_window": True, "sliding_window": 2048, "max_window_layers": 0},
    {"use_sliding_window": True, "sliding_window": 2048, "max_window_layers": 3},
    {"use_sliding_window": True, "max_window_layers": 2},
    {"use_sliding_window": False, "sliding_window": 2048, "max_window_layers": 0},
    {"use_sliding_window": False, "sliding_window": 2048, "layer_types": [SLIDING] * 4 + [FULL]},
    {"use_sliding_window": True, "sliding_window": 2048, "layer_types": [SLIDING] * 4 + [FULL]},
    {"use_sliding_window": True, "sliding_window": 1024, "layer_types": [FULL] * 5, "max_window_layers": 0},
    {"sliding_window": 4096, "layer_types": [SLIDING] * 5},
    {"use_sliding_window": True, "sliding_window": 2048, "layer_types": ["attention"] * 5},
]


@pytest.mark.parametrize("model_type, case", list(itertools.product(["qwen3", "qwen2", "qwen3_moe", "llama"],
                                                                      CASES)))
def test_hf_view_equals_transformers(model_type, case):
    doc = {"num_hidden_layers": 5, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 512, "vocab_size": 1000, **case}
    cfg = transformers.AutoConfig.for_model(model_type, **doc)
    view = hf_view(doc, "$", model_type)
    want_types = getattr(cfg, "layer_types", None)
    want_types = tuple(want_types) if want_types is not None else None
    assert view.layer_types == want_types, (model_type, case)
    got_window = view.sliding_window.value if view.sliding_window is not None else None
    assert got_window == getattr(cfg, "sliding_window", None), (model_type, case)


def test_hf_view_of_the_qwen36_example():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[2] / "examples/qwen3.6-27b-b300-vllm/drafter.config.json").read_text())
    cfg = transformers.AutoConfig.for_model(doc["model_type"], **{k: v for k, v in doc.items() if k != "model_type"})
    view = hf_view(doc, "$", doc["model_type"])
    assert view.layer_types == tuple(cfg.layer_types) == (SLIDING,) * 4 + (FULL,)
    assert view.sliding_window.value == cfg.sliding_window == 2048
