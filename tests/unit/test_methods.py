"""Issue 25, item 1: every speculative method in the API, mapped to each engine release's own name and flags.

The API accepts each method with its typed knobs (drafter required or refused by method), the checker refuses
what a release or engine lacks, the renderer writes the release's own method name, and the pod's preflight
accepts what the renderer wrote (and refuses a command line that serves another method)."""

from __future__ import annotations

import json

import pytest

from specdeploy.api.validation import validate
from specdeploy.core import engines as eng
from specdeploy.core import methods as M
from specdeploy.core.checker import Options, analyze, check_options
from specdeploy.core.render import render

TARGET_MTP = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
              "hidden_size": 7168, "vocab_size": 129280, "num_attention_heads": 128, "num_key_value_heads": 128,
              "num_nextn_predict_layers": 1, "max_position_embeddings": 163840}
EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 7168,
          "num_hidden_layers": 1, "vocab_size": 129280, "num_attention_heads": 56, "num_key_value_heads": 8}
# a drafter of each method's own family (the family gate refuses another family: core/checker/family.py)
DRAFTERS = {"eagle": {**EAGLE3, "architectures": ["EagleLlamaForCausalLM"]},
            "dspark": {**EAGLE3, "architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "block_size": 7,
                       "target_layer_ids": [1, 30, 58], "mask_token_id": 128000, "markov_rank": 256,
                       "markov_head_type": "vanilla"}}


def cr(method: str, engine: str = "vllm", version: str | None = None, gpu: str = "b300", **speculation) -> dict:
    spec = {"engine": {"name": engine, "version": version or eng.ENGINES[engine].newest_verified},
            "target": {"model": "deepseek-ai/DeepSeek-V3"}, "speculation": {"method": method, **speculation},
            "gpu": {"type": gpu, "count": 1 if gpu == "cpu" else 8}}
    if M.needs_drafter(method):
        spec["drafter"] = {"model": "org/drafter"}
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "m"},
            "spec": spec}


def parsed(doc):
    obj, problems = validate(doc)
    assert obj is not None, problems
    return obj


def engine_config(obj, drafter=None):
    r = render(obj, TARGET_MTP, drafter if M.needs_drafter(obj.spec.speculation.method) else None)
    return r.engine_config


# ----------------------------------------------------------------- API


@pytest.mark.parametrize("method", [m for m in M.METHODS])
def test_every_method_is_accepted_by_the_schema(method):
    from specdeploy.api.validation import parse

    obj, problems = parse(cr(method))
    assert problems == [] and obj.spec.speculation.method == method


@pytest.mark.parametrize("method", sorted(M.DRAFTERLESS))
def test_drafter_is_refused_for_drafterless_methods(method):
    doc = cr(method)
    doc["spec"]["drafter"] = {"model": "org/drafter"}
    obj, problems = validate(doc)
    assert obj is None and [p.path for p in problems] == ["spec.drafter"], problems


@pytest.mark.parametrize("method", ["eagle3", "dspark", "dflash", "draft_model"])
def test_drafter_is_required_for_drafter_methods(method):
    doc = cr(method)
    del doc["spec"]["drafter"]
    obj, problems = validate(doc)
    assert obj is None and [p.path for p in problems] == ["spec.drafter"], problems


@pytest.mark.parametrize("method, knob", [("dflash", {"eagle": {"steps": 3}}), ("eagle3", {"mtp": {"steps": 1}}),
                                          ("mtp", {"ngram": {"lookupMax": 3}}), ("ngram", {"blockSize": 8}),
                                          ("eagle3", {"draftWindow": 2048})])
def test_knobs_only_with_their_methods(method, knob):
    obj, problems = validate(cr(method, **knob))
    assert obj is None and problems


def test_the_crd_carries_the_method_rules():
    from specdeploy.api.crd import build_crd

    text = json.dumps(build_crd())
    assert "!has(self.drafter) : has(self.drafter)" in text
    assert "eagle settings apply only to methods eagle3, eagle and draft_model" in text
    props = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert props["speculation"]["properties"]["method"]["enum"] == list(M.METHODS)


# ----------------------------------------------------------------- checker


def test_methods_a_release_lacks_are_refused_naming_the_ones_it_has():
    f = check_options(Options(engine="sglang", engine_version="0.5.23", method="suffix"))
    assert [x.code for x in f] == ["MethodUnsupported"] and "eagle3" in f[0].message
    f = check_options(Options(engine="vllm", engine_version="0.33.0", method="ddtree"))
    assert [x.code for x in f] == ["MethodUnsupported"] and "29907" in f[0].message
    f = check_options(Options(engine="vllm", engine_version="0.32.0", gpu="cpu", method="dspark"))
    assert "MethodUnsupported" in [x.code for x in f]


def test_knobs_the_engine_has_no_flag_for_are_refused():
    f = check_options(Options(engine="vllm", engine_version="0.33.0", method="eagle3", topk=4))
    assert [(x.code, x.path) for x in f] == [("MethodSettingUnsupported", "spec.speculation.eagle.topk")]
    f = check_options(Options(engine="sglang", engine_version="0.5.23", method="ngram", ngram_max=4))
    assert [(x.code, x.path) for x in f] == [("MethodSettingUnsupported", "spec.speculation.ngram.lookupMax")]
    assert check_options(Options(engine="sglang", engine_version="0.5.23", method="eagle3", topk=4, steps=5,
                                 draft_tokens=8)) == []


def test_mtp_steps_default_to_the_targets_mtp_layers():
    a = analyze(None, {**TARGET_MTP, "num_nextn_predict_layers": 2}, Options(engine="vllm", engine_version="0.33.0",
                                                                            method="mtp"))
    assert a.ok and (a.derived.steps, a.derived.num_speculative_tokens) == (2, 2)
    a = analyze(None, {k: v for k, v in TARGET_MTP.items() if k != "num_nextn_predict_layers"},
                Options(engine="vllm", engine_version="0.33.0", method="mtp"))
    # the MTP gate refuses a target without MTP layers (core/checker/mtp.py); the steps still default to 1
    assert [x.code for x in a.findings] == ["MtpLayersMissing"] and a.derived.steps == 1


# ----------------------------------------------------------------- render


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("method", ["eagle3", "eagle", "draft_model", "mtp", "ngram", "suffix", "dspark"])
def test_each_method_renders_the_releases_own_name(engine, method):
    row = eng.ENGINES[engine].release_for(eng.ENGINES[engine].newest_verified)
    if method not in row.methods:
        obj, problems = validate(cr(method, engine))
        assert obj is None and [p.code for p in problems] == ["MethodUnsupported"]
        return
    ec = engine_config(parsed(cr(method, engine)), DRAFTERS.get(method, EAGLE3))
    assert ec.speculation.method == method and ec.speculation.engine_method == row.method_names[method]
    assert (ec.drafter is None) == (method in M.DRAFTERLESS)
    if engine == "vllm":
        sc = json.loads(ec.args[ec.args.index("--speculative-config") + 1])
        assert sc["method"] == row.method_names[method]
        assert ("model" in sc) == M.needs_drafter(method)
    else:
        assert ec.args[ec.args.index("--speculative-algorithm") + 1] == row.method_names[method]


def test_mtp_on_sglang_gives_the_target_as_draft_path_and_the_steps():
    ec = engine_config(parsed(cr("mtp", "sglang", mtp={"steps": 2})))
    a = ec.args
    assert a[a.index("--speculative-algorithm") + 1] == "NEXTN"
    assert a[a.index("--speculative-draft-model-path") + 1] == "deepseek-ai/DeepSeek-V3"
    assert [a[a.index(k) + 1] for k in ("--speculative-num-steps", "--speculative-eagle-topk",
                                        "--speculative-num-draft-tokens")] == ["2", "1", "3"]


def test_ngram_on_vllm_renders_the_lookup_window():
    ec = engine_config(parsed(cr("ngram", "vllm", ngram={"lookupMin": 2, "lookupMax": 4, "numSpeculativeTokens": 3})))
    sc = json.loads(ec.args[ec.args.index("--speculative-config") + 1])
    assert sc == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


def test_eagle3_steps_become_vllms_num_speculative_tokens():
    ec = engine_config(parsed(cr("eagle3", "vllm", eagle={"steps": 5})), EAGLE3)
    sc = json.loads(ec.args[ec.args.index("--speculative-config") + 1])
    assert sc == {"method": "eagle3", "model": "org/drafter", "num_speculative_tokens": 5}


# ----------------------------------------------------------------- preflight (in process)


def _preflight(tmp_path, ec, drafter_doc=None, args=None):
    from specdeploy_runtime.preflight import run_preflight

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(TARGET_MTP))
    ddir = None
    if drafter_doc is not None:
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "config.json").write_text(json.dumps(drafter_doc))
        ddir = str(tmp_path / "d")
    if args is not None:
        ec = ec.model_copy(update={"args": args})
    (tmp_path / "ec.json").write_text(ec.to_json())
    return run_preflight(str(tmp_path / "t"), ddir, str(tmp_path / "ec.json"))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_preflight_accepts_a_drafterless_render(tmp_path, engine):
    ec = engine_config(parsed(cr("mtp", engine)))
    res = _preflight(tmp_path, ec)
    assert res.ok, res.message()


def test_preflight_refuses_another_algorithm_than_the_methods(tmp_path):
    ec = engine_config(parsed(cr("mtp", "sglang")))
    args = list(ec.args)
    args[args.index("--speculative-algorithm") + 1] = "EAGLE3"
    res = _preflight(tmp_path, ec, args=args)
    assert not res.ok and "AlgorithmFlagMismatch" in res.message()


def test_preflight_refuses_a_drafter_for_a_drafterless_method(tmp_path):
    ec = engine_config(parsed(cr("ngram", "vllm")))
    res = _preflight(tmp_path, ec, drafter_doc=EAGLE3)
    assert not res.ok and "DrafterPresenceMismatch" in res.message()
