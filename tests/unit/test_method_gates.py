"""The method gates (issue 25): family detection, the method/family match, and one table row per rule of
the EAGLE-3, MTP, DFlash2, DSpark, Domino and causality gates (core/checker/family.py, eagle3.py, mtp.py,
dflashfamily.py), on the real configs of tests/fixtures/models and the held-out ones of
tests/fixtures/models-heldout. Every rule has a row that fails when the rule is removed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specdeploy.core.catalog import CATALOG
from specdeploy.core.checker.accept import apply_accept
from specdeploy.core.checker.eagle3 import canonical_taps, sglang_reading, vllm_architecture
from specdeploy.core.checker.family import DISPLAY, detect_family, method_family_problem
from specdeploy.core.checker.gates import run_gates

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "models"
HELD = ROOT / "tests" / "fixtures" / "models-heldout"
VERSION = {"vllm": "0.33.0", "sglang": "0.5.23"}
DEL = object()


def load(name: str) -> dict | None:
    if name is None:
        return None
    p = FIX / name if (FIX / name).exists() else HELD / name
    return json.loads(p.read_text())


def edit(doc: dict, changes: dict) -> dict:
    doc = copy.deepcopy(doc)
    for path, value in changes.items():
        obj = doc
        for k in path[:-1]:
            obj = obj.setdefault(k, {})
        if value is DEL:
            obj.pop(path[-1], None)
        else:
            obj[path[-1]] = value
    return doc


def gate(method, engine, drafter, target, *, gpu=None, version=None, steps=None, d_edit=None, t_edit=None, block=None):
    d = load(drafter) if isinstance(drafter, str) and drafter.endswith(".json") else drafter
    t = load(target) if isinstance(target, str) and target.endswith(".json") else target
    if d_edit:
        d = edit(d, d_edit)
    if t_edit:
        t = edit(t, t_edit)
    o = SimpleNamespace(engine=engine, engine_version=version or VERSION.get(engine), method=method, gpu=gpu, steps=steps,
                        block_size=block)
    return run_gates(d, t, o, dflash_rules_ran=False)


def codes(findings, severity=None):
    return {f.code for f in findings if severity is None or f.severity.value == severity}


# ------------------------------------------------------------------ family detection

@pytest.mark.parametrize("name,label,fmt", [
    ("eagle3-llama3.1-8b.drafter.json", "EAGLE-3", "hf"),
    ("eagle3-llama3.1-8b-eagle-upstream-template.drafter.json", "EAGLE-3", "eagle-template"),
    ("eagle3-qwen3-8b.drafter.json", "EAGLE-3", "hf"),
    ("eagle3.1-qwen3-30b-a3b.drafter.json", "EAGLE-3.1", "hf"),
    ("eagle3-mla-kimi-k2.5.drafter.json", "EAGLE-3 (MLA)", "specforge"),
    ("speculators-eagle3-gemma-4-31b.drafter.json", "EAGLE-3", "speculators"),
    ("dspark-qwen3-8b.drafter.json", "DSpark", "specforge"),
    ("dspark-causal-nemotron-3.5-lightning.drafter.json", "DSpark (causal)", "specforge"),
    ("domino-qwen3-8b.drafter.json", "Domino", "specforge"),
    ("dflash2-mla-kimi-k3.drafter.json", "DFlash2 (MLA)", "specforge"),
    ("qwen3-8b-dflash-b16.drafter.json", "DFlash", "specforge"),
    ("qwen3.6-27b-dflash.drafter.json", "DFlash", "specforge"),
    ("kimi-k2.7-code-dflash.drafter.json", "DFlash", "specforge"),
    ("angelslim-qwen3-8b-eagle3.drafter.json", "EAGLE-3", "hf"),
    ("redhatai-llama-3.1-8b-speculator.eagle3.drafter.json", "EAGLE-3", "speculators"),
    ("lmsys-eagle3-llama3.3-70b.drafter.json", "EAGLE-3", "hf"),
])
def test_family_of_every_real_drafter(name, label, fmt):
    fam = detect_family(load(name))
    assert (fam.label, fam.format) == (label, fmt)
    assert fam.evidence


@pytest.mark.parametrize("doc,name", [
    ({"architectures": ["Eagle3DeepseekV3ForCausalLM"]}, "eagle3"),
    ({"architectures": ["PEagleDraftModel"]}, "peagle"),
    ({"architectures": ["EagleLlamaForCausalLM"]}, "eagle"),
    ({"architectures": ["LiLiCorrDraftModel"]}, "lilicorr"),
    ({"architectures": ["Qwen3XPressModel"]}, "xpress"),
    ({"architectures": ["MiniMaxDFlash2DraftModel"]}, "dflash2"),
    ({"speculators_model_type": "dflash2"}, "dflash2"),
    ({"speculators_model_type": "dspark"}, "dspark"),
    ({"architectures": ["DeepseekV3ForCausalLMNextN"]}, "mtp"),
    ({"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36}, "unknown"),
    ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}, "unknown"),
    ({"architectures": ["DFlashDraftModel"], "dflash_config": {"projector_type": "domino"}}, "domino"),
    ({"dflash_config": {"mask_token_id": 1}}, "dflash"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}, "eagle3"),
    ([], "unknown"),
])
def test_family_from_fields(doc, name):
    assert detect_family(doc).name == name


def test_eagle31_variant_from_each_switch():
    for key in ("fc_norm", "norm_output", "use_aux_norm"):
        assert "3.1" in detect_family({"architectures": ["LlamaForCausalLMEagle3"], key: True}).variants
    assert "3.1" not in detect_family({"architectures": ["LlamaForCausalLMEagle3"], "fc_norm": False}).variants


# ------------------------------------------------------------------ method vs family

@pytest.mark.parametrize("method,drafter,bad", [
    ("dflash", "eagle3-qwen3-8b.drafter.json", True),
    ("eagle", "eagle3-qwen3-8b.drafter.json", True),
    ("eagle3", "eagle3-qwen3-8b.drafter.json", False),
    ("dflash", "dflash2-mla-kimi-k3.drafter.json", True),
    ("dflash2", "dflash2-mla-kimi-k3.drafter.json", False),
    ("dflash", "dspark-qwen3-8b.drafter.json", True),
    ("dspark", "dspark-qwen3-8b.drafter.json", False),
    ("dflash", "domino-qwen3-8b.drafter.json", False),
    ("eagle3", "qwen3-8b-dflash-b16.drafter.json", True),
    ("ddtree", "dflash2-mla-kimi-k3.drafter.json", True),
    ("dflash", "qwen3-8b.target.json", False),  # unknown family: the DFlash rules say NotADFlashDrafter
])
def test_method_family_mismatch_names_both(method, drafter, bad):
    fs, fam, _ = gate(method, "vllm", drafter, None)
    assert ("MethodFamilyMismatch" in codes(fs)) is bad
    if bad:
        (f,) = [f for f in fs if f.code == "MethodFamilyMismatch"]
        assert f.path == "spec.speculation.method" and repr(method) in f.message and fam.label in f.message


def test_mismatch_is_the_only_finding():
    fs, _, _ = gate("dflash", "sglang", "eagle3-qwen3-8b.drafter.json", "qwen3-8b.target.json")
    assert [f.code for f in fs] == ["MethodFamilyMismatch"]
    assert method_family_problem("mtp", detect_family(load("eagle3-qwen3-8b.drafter.json"))) is None


# ------------------------------------------------------------------ verdicts on every shared config

OK, ERR = "ok", "err"
# (method, drafter, target, engine, gpu) -> verdict and the error codes (all of them)
VERDICTS = [
    ("eagle3", "eagle3-llama3.1-8b.drafter.json", "llama-3.1-8b-instruct.target.json", "vllm", None, ()),
    ("eagle3", "eagle3-llama3.1-8b.drafter.json", "llama-3.1-8b-instruct.target.json", "vllm", "cpu", ()),
    ("eagle3", "eagle3-llama3.1-8b.drafter.json", "llama-3.1-8b-instruct.target.json", "sglang", None, ()),
    ("eagle3", "eagle3-llama3.1-8b-eagle-upstream-template.drafter.json", "llama-3.1-8b-instruct.target.json", "vllm", None, ()),
    ("eagle3", "eagle3-llama3.1-8b-eagle-upstream-template.drafter.json", "llama-3.1-8b-instruct.target.json", "sglang", None,
     ("Eagle3ArchitectureUnsupported",)),
    ("eagle3", "eagle3-qwen3-8b.drafter.json", "qwen3-8b.target.json", "vllm", None, ()),
    ("eagle3", "eagle3-qwen3-8b.drafter.json", "qwen3-8b.target.json", "sglang", None, ()),
    ("eagle3", "eagle3.1-qwen3-30b-a3b.drafter.json", "qwen3-30b-a3b.target.json", "vllm", None, ()),
    ("eagle3", "eagle3.1-qwen3-30b-a3b.drafter.json", "qwen3-30b-a3b.target.json", "sglang", None, ()),
    ("eagle3", "eagle3-mla-kimi-k2.5.drafter.json", "kimi-k2.6.target.json", "sglang", None, ()),
    ("eagle3", "eagle3-mla-kimi-k2.5.drafter.json", "kimi-k2.6.target.json", "vllm", None, ()),  # V2: default = meant
    ("eagle3", "eagle3-mla-kimi-k2.5.drafter.json", "kimi-k2.6.target.json", "vllm", "cpu", ("Eagle3AuxLayerIdsShifted",)),
    ("eagle3", "speculators-eagle3-gemma-4-31b.drafter.json", None, "vllm", None, ()),
    ("eagle3", "speculators-eagle3-gemma-4-31b.drafter.json", None, "sglang", None, ("SpeculatorsUnsupportedByEngine",)),
    ("dspark", "dspark-qwen3-8b.drafter.json", "qwen3-8b.target.json", "vllm", None, ("DSparkMarkovRankNested",)),
    ("dspark", "dspark-qwen3-8b.drafter.json", "qwen3-8b.target.json", "sglang", None, ()),
    ("dspark", "dspark-qwen3-8b.drafter.json", "qwen3-8b.target.json", "vllm", "cpu",
     ("DSparkMarkovRankNested", "MethodNeedsV2Runner")),
    ("dspark", "dspark-causal-nemotron-3.5-lightning.drafter.json", None, "vllm", None, ()),
    ("dspark", "dspark-causal-nemotron-3.5-lightning.drafter.json", None, "sglang", None, ()),
    ("dflash", "domino-qwen3-8b.drafter.json", "qwen3-8b.target.json", "vllm", None, ("DominoUnsupportedByEngine",)),
    ("dflash", "domino-qwen3-8b.drafter.json", "qwen3-8b.target.json", "sglang", None, ("DominoArchitectureUnsupported",)),
    ("dflash2", "dflash2-mla-kimi-k3.drafter.json", None, "vllm", None, ()),
    ("dflash2", "dflash2-mla-kimi-k3.drafter.json", None, "sglang", None, ()),
    ("dflash2", "dflash2-mla-kimi-k3.drafter.json", None, "vllm", "cpu", ("MethodNeedsV2Runner",)),
    ("dflash", "dflash2-mla-kimi-k3.drafter.json", None, "vllm", None, ("MethodFamilyMismatch",)),
    ("mtp", None, "glm-5.3-flash.target.json", "vllm", None, ()),
    ("mtp", None, "glm-5.3-flash.target.json", "sglang", None, ()),
    ("mtp", None, "kimi-k2.6.target.json", "vllm", None, ("MtpUnsupportedByEngine",)),
    ("mtp", None, "kimi-k2.6.target.json", "sglang", None, ("MtpUnsupportedByEngine",)),
    ("mtp", None, "qwen3.5-27b.target.json", "vllm", None, ("MtpLayersMissing",)),
    ("mtp", None, "qwen3.5-27b.target.json", "sglang", None, ("MtpLayersMissing",)),
    ("mtp", None, "qwen3-8b.target.json", "vllm", None, ("MtpUnsupportedByEngine",)),
    ("mtp", None, "llama-3.1-8b-instruct.target.json", "sglang", None, ("MtpUnsupportedByEngine",)),
    ("mtp", None, "qwen3-30b-a3b.target.json", "sglang", None, ("MtpLayersMissing",)),
    # held out (tests/fixtures/models-heldout, reconstructed)
    ("eagle3", "angelslim-qwen3-8b-eagle3.drafter.json", "qwen3-8b.target.json", "vllm", None, ()),
    ("eagle3", "angelslim-qwen3-8b-eagle3.drafter.json", "qwen3-8b.target.json", "sglang", None, ("Eagle3ArchitectureUnsupported",)),
    ("eagle3", "redhatai-llama-3.1-8b-speculator.eagle3.drafter.json", "llama-3.1-8b-instruct.target.json", "vllm", None, ()),
    ("eagle3", "redhatai-llama-3.1-8b-speculator.eagle3.drafter.json", "llama-3.1-8b-instruct.target.json", "sglang", None,
     ("SpeculatorsUnsupportedByEngine",)),
    ("eagle3", "redhatai-qwen3-8b-speculator.eagle3.drafter.json", "qwen3-8b.target.json", "vllm", None, ()),
    ("eagle3", "lmsys-eagle3-llama3.3-70b.drafter.json", "llama-3.3-70b-instruct.target.json", "vllm", None, ()),
    ("eagle3", "lmsys-eagle3-llama3.3-70b.drafter.json", "llama-3.3-70b-instruct.target.json", "sglang", None, ()),
    ("eagle3", "lmsys-eagle3-llama3.3-70b.drafter.json", "llama-3.1-8b-instruct.target.json", "vllm", None, ("HiddenSizeMismatch",)),
    ("mtp", None, "deepseek-v3.target.json", "vllm", None, ()),
    ("mtp", None, "deepseek-v3.target.json", "sglang", None, ()),
    ("mtp", None, "glm-4.5-air.target.json", "vllm", None, ()),
    ("mtp", None, "glm-4.5-air.target.json", "sglang", None, ()),
    ("mtp", None, "mimo-7b-rl.target.json", "vllm", None, ()),
    ("mtp", None, "mimo-7b-rl.target.json", "sglang", None, ()),
    ("mtp", None, "llama-3.3-70b-instruct.target.json", "vllm", None, ("MtpUnsupportedByEngine",)),
]


@pytest.mark.parametrize("method,drafter,target,engine,gpu,errs", VERDICTS,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_verdict_on_real_configs(method, drafter, target, engine, gpu, errs):
    fs, _, _ = gate(method, engine, drafter, target, gpu=gpu)
    assert codes(fs, "error") == set(errs)


# ------------------------------------------------------------------ EAGLE-3 conventions

def test_canonical_and_conventions():
    assert canonical_taps(32) == [2, 16, 29] and canonical_taps(61) == [2, 30, 58]
    assert vllm_architecture("LlamaForCausalLM") == "Eagle3LlamaForCausalLM"
    assert vllm_architecture("LlamaForCausalLMEagle3") == "LlamaForCausalLMEagle3"
    assert sglang_reading([1, 29, 57], "KimiK25ForConditionalGeneration", 61) == [2, 30, 58]
    assert sglang_reading([2, 30, 58], "DeepseekV3ForCausalLM", 61) == [2, 30, 58]
    assert sglang_reading([1, 15, 28], "LlamaForCausalLM", 32) == [2, 16, 29]
    assert sglang_reading([2, 18, 36], "GptOssForCausalLM", 36) == [2, 18, 36]
    assert sglang_reading([2, 18, 34], "GptOssForCausalLM", 36) == [3, 19, 35]


L8, LT = "eagle3-llama3.1-8b.drafter.json", "llama-3.1-8b-instruct.target.json"
TOP = ("eagle_aux_hidden_state_layer_ids",)
NESTED = ("eagle_config", "eagle_aux_hidden_state_layer_ids")


@pytest.mark.parametrize("engine,gpu,d_edit,shifted", [
    ("vllm", None, {TOP: [3, 17, 30]}, True),   # vLLM reads top-level ids as given: canonical + 1
    ("vllm", None, {TOP: [1, 15, 28]}, True),   # canonical - 1
    ("vllm", None, {TOP: [2, 16, 29]}, False),  # canonical
    ("vllm", "cpu", {NESTED: [2, 16, 29]}, False),  # V1 reads eagle_config as given... but the writer meant +1
    ("sglang", None, {NESTED: [2, 16, 29]}, True),  # SGLang adds 1
    ("sglang", None, {NESTED: [1, 15, 28]}, False),  # SpecForge's convention
    ("vllm", "cpu", {NESTED: [1, 15, 28]}, True),  # the same SpecForge ids on vLLM V1: shifted (vllm #43671)
])
def test_exact_aux_shift_is_refused_per_engine(engine, gpu, d_edit, shifted):
    fs, _, _ = gate("eagle3", engine, L8, LT, gpu=gpu, d_edit=d_edit)
    assert ("Eagle3AuxLayerIdsShifted" in codes(fs, "error")) is shifted


def test_shift_is_overridable_through_accept():
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={TOP: [3, 17, 30]})
    out, accepted = apply_accept(fs, ("Eagle3AuxLayerIdsShifted",))
    assert not codes(out, "error") and [f.code for f in accepted] == ["Eagle3AuxLayerIdsShifted"]
    assert CATALOG["Eagle3AuxLayerIdsShifted"].overridable and CATALOG["Eagle3AuxLayersReadDifferently"].overridable


@pytest.mark.parametrize("engine,gpu,d_edit,path", [
    ("vllm", None, {NESTED: [4, 15, 27]}, "$.eagle_config.eagle_aux_hidden_state_layer_ids"),  # V2 ignores eagle_config
    ("vllm", "cpu", {NESTED: [4, 15, 27]}, "$.eagle_config.eagle_aux_hidden_state_layer_ids"),  # V1: no +1
    ("sglang", None, {TOP: [5, 16, 28]}, "$.eagle_aux_hidden_state_layer_ids"),  # SGLang ignores top-level ids
])
def test_engine_reads_other_layers(engine, gpu, d_edit, path):
    fs, _, der = gate("eagle3", engine, L8, LT, gpu=gpu, d_edit=d_edit)
    (f,) = [f for f in fs if f.code == "Eagle3AuxLayersReadDifferently"]
    assert f.path == path
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={TOP: [5, 16, 28]})
    assert "Eagle3AuxLayersReadDifferently" not in codes(fs)


def test_v2_runner_default_taps_and_derived():
    _, _, der = gate("eagle3", "vllm", "eagle3-mla-kimi-k2.5.drafter.json", "kimi-k2.6.target.json")
    assert der["auxLayers"] == {"vllm": [2, 30, 58]} and der["family"]["label"] == "EAGLE-3 (MLA)"
    _, _, der = gate("eagle3", None, "eagle3-mla-kimi-k2.5.drafter.json", "kimi-k2.6.target.json")
    assert set(der["auxLayers"]) == {"vllm", "sglang"}


@pytest.mark.parametrize("engine,d_edit,code", [
    ("vllm", {TOP: [2, 16, 33]}, "Eagle3AuxLayerOutOfRange"),  # vLLM captures 0..32
    ("sglang", {NESTED: [1, 15, 31]}, "Eagle3AuxLayerOutOfRange"),  # +1 -> 32, SGLang captures 0..31
    ("vllm", {TOP: [2, 10, 16, 29]}, "Eagle3AuxCountMismatch"),  # fc takes 3 chunks
    ("vllm", {("architectures",): ["Glm4MoeForCausalLMEagle3"]}, "Eagle3ArchitectureUnsupported"),
    ("sglang", {("architectures",): ["Eagle3LlamaForCausalLM"]}, "Eagle3ArchitectureUnsupported"),
    ("vllm", {("hidden_size",): 2048}, "HiddenSizeMismatch"),
    ("vllm", {("target_hidden_size",): 2048}, "HiddenSizeMismatch"),
    ("vllm", {("hidden_size",): DEL}, "DrafterFieldMissing"),
    ("vllm", {("vocab_size",): 128000}, "Eagle3VocabTooSmall"),
    ("sglang", {("draft_vocab_size",): 200000}, "DraftVocabSizeInvalid"),
    ("vllm", {("use_aux_norm",): True}, "Eagle3VariantUnsupported"),
])
def test_eagle3_rule(engine, d_edit, code):
    fs, _, _ = gate("eagle3", engine, L8, LT, d_edit=d_edit)
    assert code in codes(fs, "error")
    clean, _, _ = gate("eagle3", engine, L8, LT)
    assert code not in codes(clean)


def test_eagle3_count_follows_num_aux():
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={TOP: [2, 10, 16, 29], ("num_aux_hidden_states",): 4})
    assert not codes(fs, "error")


def test_eagle3_use_aux_norm_is_read_by_sglang():
    fs, _, _ = gate("eagle3", "sglang", L8, LT, d_edit={("use_aux_norm",): True})
    assert not codes(fs, "error")


def test_eagle3_vocab_and_mapping_findings():
    fs, _, _ = gate("eagle3", "vllm", L8, LT)
    assert "DraftVocabMapped" in codes(fs, "info")
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={("draft_vocab_size",): 128256})
    assert "DraftVocabMapped" not in codes(fs)
    fs, _, _ = gate("eagle3", "vllm", L8, LT, d_edit={("vocab_size",): 128512})
    assert "VocabSizeDiffers" in codes(fs, "warning")


@pytest.mark.parametrize("d_edit,code", [
    ({("transformer_layer_config", "model_type"): "gemma3"}, "Eagle3ArchitectureUnsupported"),
    ({("speculators_config", "proposal_methods"): []}, "SpeculatorsConfigIncomplete"),
    ({("speculators_config", "verifier", "name_or_path"): DEL}, "SpeculatorsConfigIncomplete"),
])
def test_speculators_rules(d_edit, code):
    fs, _, _ = gate("eagle3", "vllm", "speculators-eagle3-gemma-4-31b.drafter.json", None, d_edit=d_edit)
    assert code in codes(fs, "error")


def test_release_other_than_recorded():
    fs, _, _ = gate("eagle3", "vllm", "eagle3.1-qwen3-30b-a3b.drafter.json", "qwen3-30b-a3b.target.json", version="0.32.0")
    assert "MethodFactsFromOtherRelease" in codes(fs, "info") and "Eagle3VariantUnverified" in codes(fs, "warning")
    fs, _, _ = gate("eagle3", "vllm", L8, LT, version="0.32.0")
    assert "Eagle3VariantUnverified" not in codes(fs)


# ------------------------------------------------------------------ MTP

DS = "deepseek-v3.target.json"


@pytest.mark.parametrize("engine,t_edit,steps,code,sev", [
    ("vllm", {("num_nextn_predict_layers",): 0}, None, "MtpLayersMissing", "error"),
    ("sglang", {("num_nextn_predict_layers",): DEL}, None, "MtpLayersMissing", "error"),
    ("vllm", {("model_type",): "deepseek_v41"}, None, "MtpUnsupportedByEngine", "error"),
    ("sglang", {("architectures",): ["Qwen3ForCausalLM"]}, None, "MtpUnsupportedByEngine", "error"),
    ("vllm", {("num_nextn_predict_layers",): 2}, 3, "MtpStepsNotMultiple", "error"),
    ("vllm", {}, 2, "MtpStepsReuseLayers", "warning"),
])
def test_mtp_rule(engine, t_edit, steps, code, sev):
    fs, _, _ = gate("mtp", engine, None, DS, t_edit=t_edit, steps=steps)
    assert code in codes(fs, sev)
    clean, _, der = gate("mtp", engine, None, DS, steps=1)
    assert not codes(clean) and der["mtpLayers"] == 1


def test_mtp_layers_read_where_each_model_keeps_them():
    q = load("qwen3.5-27b.target.json")
    q["text_config"]["mtp_num_hidden_layers"] = 1
    fs, _, der = gate("mtp", "vllm", None, q)
    assert not codes(fs, "error") and der["mtpArchitecture"] == "Qwen3_5MTP"
    fs, _, der = gate("mtp", "sglang", None, "glm-5.3-flash.target.json", t_edit={("text_config", "num_nextn_predict_layers"): 2})
    assert "MtpLayersCapped" in codes(fs, "info") and der["mtpLayers"] == 2


# ------------------------------------------------------------------ DFlash2, DSpark, Domino, causality

K3 = "dflash2-mla-kimi-k3.drafter.json"
DSP = "dspark-qwen3-8b.drafter.json"
DOM = "domino-qwen3-8b.drafter.json"
Q8T = "qwen3-8b.target.json"
DC = ("dflash_config",)


@pytest.mark.parametrize("method,engine,drafter,target,d_edit,code,sev", [
    ("dflash2", "vllm", K3, None, {DC + ("sample_from_anchor",): True}, "SampleFromAnchorUnsupported", "error"),
    ("dflash2", "sglang", K3, None, {DC + ("selector_top_k",): DEL}, "DFlash2FieldsUnpaired", "error"),
    ("dflash2", "sglang", K3, None, {DC + ("target_layer_ids",): [19, 37, 37, 66, 78, 90]}, "TargetLayerIdsNotIncreasing", "error"),
    ("dspark", "sglang", DSP, Q8T, {DC + ("target_layer_ids",): [1, 17, 9, 25, 33]}, "TargetLayerIdsNotIncreasing", "error"),
    ("dspark", "sglang", DSP, Q8T, {DC + ("markov_rank",): 0}, "DSparkMarkovConfigInvalid", "error"),
    ("dspark", "sglang", DSP, Q8T, {DC + ("markov_head_type",): "lstm"}, "DSparkMarkovConfigInvalid", "error"),
    ("dspark", "sglang", DSP, Q8T, {DC + ("markov_head_type",): DEL}, "DSparkMarkovConfigInvalid", "error"),
    ("dflash", "sglang", DOM, Q8T, {DC + ("pure_draft_prefix_len",): 2}, "DominoConfigInvalid", "error"),
    ("dflash", "sglang", DOM, Q8T, {("emb_dim",): 128}, "DominoConfigInvalid", "error"),
    ("dflash", "sglang", DOM, Q8T, {DC + ("shift_label",): DEL}, "DominoConfigInvalid", "error"),
    ("dflash", "sglang", DOM, Q8T, {DC + ("gru_hidden_dim",): DEL}, "DominoConfigInvalid", "error"),
    ("dflash", "sglang", DOM, Q8T, {("block_size",): 1}, "DominoConfigInvalid", "error"),
    ("dflash", "sglang", "qwen3-8b-dflash-b16.drafter.json", Q8T, {DC + ("causal",): True}, "CausalityIgnoredByEngine", "error"),
    ("dflash", "vllm", "qwen3-8b-dflash-b16.drafter.json", Q8T, {DC + ("causal_head",): True}, "CausalHeadIgnored", "warning"),
])
def test_dflash_family_rule(method, engine, drafter, target, d_edit, code, sev):
    base = {("architectures",): ["DFlashDraftModel"]} if drafter == DOM else {}
    fs, _, _ = gate(method, engine, drafter, target, d_edit={**base, **d_edit})
    assert code in codes(fs, sev)
    clean, _, _ = gate(method, engine, drafter, target, d_edit=base)
    assert code not in codes(clean)


@pytest.mark.parametrize("engine,d_edit,block,code", [
    ("vllm", {("architectures",): ["DSparkDraftMod"]}, None, "DrafterArchitectureUnsupported"),
    ("sglang", {("architectures",): ["Gemma4DSparkModel"]}, None, "DrafterArchitectureUnsupported"),
    ("sglang", {("block_size",): 0}, None, "BlockSizeInvalid"),
    ("sglang", {}, 9, "BlockSizeAboveTrained"),
])
def test_dspark_block_and_architecture(engine, d_edit, block, code):
    fs, _, _ = gate("dspark", engine, DSP, Q8T, d_edit=d_edit, block=block)
    assert any(f.code == code and ("DSpark" in f.message) for f in fs if f.severity.value == "error")
    clean, _, _ = gate("dspark", engine, DSP, Q8T, block=8)
    assert code not in codes(clean)


def test_domino_served_as_dflash_on_sglang():
    fs, fam, _ = gate("dflash", "sglang", DOM, Q8T, d_edit={("architectures",): ["DFlashDraftModel"]})
    assert fam.name == "domino" and not codes(fs, "error")


def test_dspark_markov_rank_at_top_level_loads_on_vllm():
    d = load(DSP)
    d["markov_rank"] = d["dflash_config"]["markov_rank"]
    fs, _, _ = gate("dspark", "vllm", d, Q8T)
    assert "DSparkMarkovRankNested" not in codes(fs)


def test_causality_agrees_when_is_causal_is_explicit():
    fs, _, _ = gate("dflash", "sglang", "qwen3-8b-dflash-b16.drafter.json", Q8T,
                    d_edit={DC + ("causal",): True, ("is_causal",): True})
    assert "CausalityIgnoredByEngine" not in codes(fs)
    fs, _, _ = gate("dflash", "vllm", "qwen3-8b-dflash-b16.drafter.json", Q8T, d_edit={DC + ("causal",): True})
    assert "CausalityIgnoredByEngine" not in codes(fs)


def test_dspark_runs_the_dflash_layer_rules_once():
    fs, _, _ = gate("dspark", "sglang", DSP, Q8T, d_edit={DC + ("target_layer_ids",): [1, 9, 17, 25, 36]})
    assert "TargetLayerOutOfRange" in codes(fs, "error")
    o = SimpleNamespace(engine="sglang", engine_version="0.5.23", method="dspark", gpu=None, steps=None)
    fs, _, _ = run_gates(edit(load(DSP), {DC + ("target_layer_ids",): [1, 9, 17, 25, 36]}), load(Q8T), o)
    assert "TargetLayerOutOfRange" not in codes(fs)


def test_gates_never_raise_on_odd_json():
    """Odd documents get well-formed findings (catalog codes at the catalog's severity, a path, a message),
    never an exception; what can be judged still is: an MTP target without MTP layers or architecture is refused,
    a DSpark drafter's unreadable markov_rank is refused on SGLang, a drafter of another family is a mismatch."""
    from specdeploy.core.findings import Finding, Source

    for d in (None, [], "x", {"architectures": "LlamaForCausalLMEagle3"}, {"eagle_config": [1]},
              {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": ["a", 1]},
              {"architectures": ["DSparkDraftModel"], "dflash_config": {"markov_rank": "x"}}):
        for m in ("eagle3", "dspark", "dflash2", "mtp", "dflash"):
            for e in ("vllm", "sglang", None):
                fs, _, der = gate(m, e, d, {"num_hidden_layers": "x"} if d else [], gpu=None)
                assert isinstance(fs, list) and isinstance(der, dict)
                for f in fs:
                    assert isinstance(f, Finding) and f.code in CATALOG, f
                    assert isinstance(f.source, Source) and isinstance(f.path, str) and f.path
                    assert isinstance(f.message, str) and f.message.strip()
                    assert f.severity.value == CATALOG[f.code].severity, f
                if m == "mtp" and d not in (None, []):
                    assert codes(fs, "error") & {"MtpUnsupportedByEngine", "MtpLayersMissing"}, (d, e)
                if m == "dspark" and e == "sglang" and isinstance(d, dict) and "dflash_config" in d:
                    assert "DSparkMarkovConfigInvalid" in codes(fs, "error")
                if isinstance(d, dict) and isinstance(d.get("architectures"), list) and m != "mtp" and \
                        ("DSpark" in d["architectures"][0]) != (m == "dspark"):
                    assert "MethodFamilyMismatch" in codes(fs, "error"), (d, m, e)


# ------------------------------------------------------------------ the whole analysis and the CLI

def _analyze(method, drafter, target, engine, gpu):
    from specdeploy.core.checker import Options, analyze

    version = "0.32.0" if gpu == "cpu" else VERSION[engine]
    return analyze(load(drafter) if drafter else None, load(target) if target else {"architectures": ["X"]},
                   Options(engine=engine, engine_version=version, method=method, gpu=gpu))


@pytest.mark.parametrize("method,drafter,target,engine,gpu,errs", [v for v in VERDICTS if v[2] is not None],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_analysis_verdict_on_real_configs(method, drafter, target, engine, gpu, errs):
    a = _analyze(method, drafter, target, engine, gpu)
    # the CPU build's release row refuses the V2-only methods itself (MethodUnsupported, one root cause)
    want = {"MethodUnsupported" if c == "MethodNeedsV2Runner" else c for c in errs}
    assert {f.code for f in a.findings if f.severity.value == "error"} == want
    if drafter:
        assert a.family is not None and a.family.to_dict()["label"] == detect_family(load(drafter)).label


def test_cli_check_refuses_an_exact_shift_and_reports_the_family(tmp_path):
    from testkit import run_cli

    d = edit(load(L8), {TOP: [3, 17, 30]})
    (tmp_path / "d.json").write_text(json.dumps(d))
    p = run_cli("check", "--method", "eagle3", "--drafter", str(tmp_path / "d.json"), "--target", str(FIX / LT),
                         "--engine", "vllm", "--engine-version", "0.33.0")
    assert p.returncode == 1 and "Eagle3AuxLayerIdsShifted" in p.stdout and "drafter family: EAGLE-3 (format hf" in p.stdout
    p = run_cli("check", "--method", "eagle3", "--drafter", str(tmp_path / "d.json"), "--target", str(FIX / LT),
                         "--engine", "vllm", "--engine-version", "0.33.0", "--accept", "Eagle3AuxLayerIdsShifted")
    assert p.returncode == 0
    p = run_cli("check", "--method", "mtp", "--target", str(HELD / DS), "--engine", "sglang", "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"] and "family" not in json.loads(p.stdout)
    p = run_cli("check", "--method", "eagle3", "--drafter", str(FIX / "eagle3.1-qwen3-30b-a3b.drafter.json"),
                         "--target", str(FIX / "qwen3-30b-a3b.target.json"), "--engine", "sglang", "-o", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["family"]["label"] == "EAGLE-3.1"


def test_status_reports_the_family():
    from specdeploy.controller import status as st
    from specdeploy.controller.plan import _family_label

    label = _family_label(load("eagle3.1-qwen3-30b-a3b.drafter.json"))
    assert label == "EAGLE-3.1 (hf)" and _family_label(None) is None and _family_label(load(Q8T)) is None
    obs = st.Observation(generation=1, findings=[], family=label)
    (compat,) = [c for c in st.compute_conditions(obs) if c["type"] == st.DRAFTER_COMPATIBLE]
    assert compat["message"].startswith("EAGLE-3.1 (hf) drafter: ")


# ------------------------------------------------------------------ EAGLE-3: the target hands its hidden states over

CAPTURE = "Eagle3TargetCaptureUnsupported"


def eagle3_for(target: dict) -> dict:
    """The Llama-3.1-8B EAGLE-3 head resized to ``target`` (hidden size, vocabulary; default taps), so the capture
    rule is the only one that can fire."""
    t = target.get("text_config") or target
    return edit(load(L8), {("hidden_size",): t["hidden_size"], ("vocab_size",): t["vocab_size"],
                           ("draft_vocab_size",): min(32000, t["vocab_size"]), TOP: DEL})


def minimal_target(arch: str, model_type: str = "x") -> dict:
    """A config of a registered architecture that no fixture has: the fields the gate reads."""
    return {"architectures": [arch], "model_type": model_type, "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192}


# (target, vLLM 0.33.0 captures, SGLang 0.5.23 captures): every target of the shared fixtures, the held-out ones,
# and architectures from the engines' registries that no fixture has (minimal configs)
CAPTURE_TABLE = [
    ("llama-3.1-8b-instruct.target.json", True, True),
    ("qwen3-8b.target.json", True, True),
    ("qwen3-30b-a3b.target.json", True, True),
    ("qwen3.5-27b.target.json", True, True),          # Qwen3_5ForConditionalGeneration
    ("kimi-k2.6.target.json", True, True),            # KimiK25ForConditionalGeneration
    ("glm-5.3-flash.target.json", True, True),        # Glm5NextForConditionalGeneration
    ("deepseek-v3.target.json", True, True),
    ("llama-3.3-70b-instruct.target.json", True, True),
    ("glm-4.5-air.target.json", False, True),         # vLLM's Glm4MoeForCausalLM has no SupportsEagle3
    ("mimo-7b-rl.target.json", True, False),          # SGLang's MiMoForCausalLM has no set_eagle3_layers_to_capture
    ("MixtralForCausalLM", False, False),
    ("Gemma3ForCausalLM", False, True),
    ("Qwen2MoeForCausalLM", False, True),
    ("Glm4MoeLiteForCausalLM", False, True),
    ("Step3p5ForCausalLM", False, False),
    ("Ernie4_5_MoeForCausalLM", False, False),
    ("Cohere2ForCausalLM", False, False),
    ("MiMoV2FlashForCausalLM", True, False),
    ("ArceeForCausalLM", True, False),                # vLLM: its Transformers backend; SGLang: no class
    ("GptOssForCausalLM", True, True),
    ("MiniMaxM2ForCausalLM", True, True),
    ("Qwen2ForCausalLM", True, True),
    ("Phi3ForCausalLM", True, True),
    ("DeepseekV32ForCausalLM", True, True),
    ("Llama4ForConditionalGeneration", True, True),
    ("NotARegisteredForCausalLM", True, False),       # vLLM's Transformers backend captures; SGLang's fallback cannot
]


@pytest.mark.parametrize("target,vllm_ok,sglang_ok", CAPTURE_TABLE, ids=[r[0] for r in CAPTURE_TABLE])
def test_eagle3_target_capture_per_engine(target, vllm_ok, sglang_ok):
    t = load(target) if target.endswith(".json") else minimal_target(target)
    arch = t["architectures"][0]
    for engine, ok in (("vllm", vllm_ok), ("sglang", sglang_ok)):
        fs, _, der = gate("eagle3", engine, eagle3_for(t), t)
        assert codes(fs, "error") == (set() if ok else {CAPTURE}), (engine, [f.message for f in fs])
        if ok:
            assert der.get("targetCapture"), engine
            continue
        (f,) = [f for f in fs if f.code == CAPTURE]
        assert f.path == "$.architectures[0]" and f.source.value == "target"
        assert arch in f.message and {"vllm": "vLLM 0.33.0", "sglang": "SGLang 0.5.23"}[engine] in f.message
        other_ok, other = (sglang_ok, "SGLang") if engine == "vllm" else (vllm_ok, "vLLM")
        assert (f"serve it on {other}" in f.message) is other_ok
        assert "method ngram" in f.message


def test_eagle3_capture_fix_names_mtp_when_the_target_has_it():
    t = load("glm-4.5-air.target.json")
    fs, _, _ = gate("eagle3", "vllm", eagle3_for(t), t)
    (f,) = [f for f in fs if f.code == CAPTURE]
    assert "method mtp (the target's own 1 MTP layer)" in f.message and "SupportsEagle3" in f.message
    t = minimal_target("MixtralForCausalLM")
    fs, _, _ = gate("eagle3", "vllm", eagle3_for(t), t)
    assert "method mtp" not in next(f.message for f in fs if f.code == CAPTURE)


def test_eagle3_capture_is_not_needed_without_aux_hidden_states():
    """A head that reads the last layer like EAGLE-1 (eagle_config.use_aux_hidden_state: false) needs no capture."""
    t = load("glm-4.5-air.target.json")
    d = edit(eagle3_for(t), {("eagle_config", "use_aux_hidden_state"): False})
    fs, _, _ = gate("eagle3", "vllm", d, t)
    assert CAPTURE not in codes(fs)


def test_eagle3_capture_on_other_releases():
    t = load("glm-4.5-air.target.json")
    fs, _, _ = gate("eagle3", "vllm", eagle3_for(t), t, version="0.32.0")  # older: read from 0.33.0, still an error
    (f,) = [f for f in fs if f.code == CAPTURE]
    assert f.severity.value == "error" and "read from vLLM 0.33.0" in f.message
    fs, _, _ = gate("eagle3", "vllm", eagle3_for(t), t, version="0.34.0")  # newer: it may have gained the interface
    assert CAPTURE in codes(fs, "warning") and CAPTURE not in codes(fs, "error")
    assert not CATALOG[CAPTURE].overridable


def test_eagle3_capture_facts_agree_with_the_gates_target_tables():
    """The SGLang targets the aux-id conventions name (SGLANG_FIRST_ID_TARGETS, SGLANG_MAX_TARGETS) capture."""
    from specdeploy.core.checker.eagle3 import SGLANG_FIRST_ID_TARGETS, SGLANG_MAX_TARGETS, target_captures

    for arch in SGLANG_FIRST_ID_TARGETS | SGLANG_MAX_TARGETS:
        assert target_captures("sglang", arch)[0] is True, arch


# ------------------------------------------------------------------ the DFlash family: the target hands its hidden states over

DCAPTURE = "DFlashTargetCaptureUnsupported"
# (method, drafter, engines): the family's real drafters; Domino runs on SGLang only (as DFlashDraftModel)
DFLASH_DRAFTERS = [
    ("dflash", "qwen3-8b-dflash-b16.drafter.json", ("vllm", "sglang")),
    ("dflash2", "dflash2-mla-kimi-k3.drafter.json", ("vllm", "sglang")),
    ("dspark", "dspark-qwen3-8b.drafter.json", ("vllm", "sglang")),
    ("dflash", "domino-qwen3-8b.drafter.json", ("sglang",)),
]

# (target, vLLM 0.33.0 captures under dflash/dspark, SGLang 0.5.23 DFLASH captures, SGLang 0.5.23 DSPARK captures):
# every target of the shared fixtures, the held-out ones, and registry architectures no fixture has (minimal configs).
# vLLM: SupportsEagle3 as for EAGLE-3; SGLang: set_dflash_layers_to_capture, for DSPARK also set_dspark_layers_to_capture.
DFLASH_CAPTURE_TABLE = [
    ("llama-3.1-8b-instruct.target.json", True, True, True),
    ("qwen3-8b.target.json", True, True, True),
    ("qwen3-30b-a3b.target.json", True, True, True),
    ("qwen3.5-27b.target.json", True, True, True),
    ("kimi-k2.6.target.json", True, True, True),
    ("glm-5.3-flash.target.json", True, True, True),
    ("deepseek-v3.target.json", True, True, True),
    ("llama-3.3-70b-instruct.target.json", True, True, True),
    ("glm-4.5-air.target.json", False, False, False),   # neither engine's Glm4MoeForCausalLM captures
    ("mimo-7b-rl.target.json", True, False, False),     # SGLang's MiMoForCausalLM has no set_dflash_layers_to_capture
    ("Qwen2ForCausalLM", True, False, False),           # Qwen2/2.5: SGLang's qwen2.py has EAGLE-3 capture, not DFlash
    ("MiniMaxM2ForCausalLM", True, False, False),
    ("Llama4ForConditionalGeneration", True, False, False),
    ("DeepseekV4ForCausalLM", True, False, True),       # SGLang: set_dspark_layers_to_capture only
    ("KimiLinearForCausalLM", True, False, True),
    ("BailingMoeV3ForCausalLM", False, False, True),
    ("Glm4MoeLiteForCausalLM", False, True, True),
    ("MixtralForCausalLM", False, False, False),
    ("Gemma3ForCausalLM", False, False, False),
    ("Ernie4_5_MoeForCausalLM", False, False, False),
    ("Gemma4ForConditionalGeneration", True, True, True),
    ("GptOssForCausalLM", True, True, True),
    ("MiMoV2FlashForCausalLM", True, True, True),
    ("NemotronHForCausalLM", True, True, True),
    ("Phi3ForCausalLM", True, True, True),
    ("KimiK3ForConditionalGeneration", True, True, True),
    ("ArceeForCausalLM", True, False, False),
    ("NotARegisteredForCausalLM", True, False, False),  # vLLM's Transformers backend captures; SGLang's fallback cannot
]


def _drafter_doc(name: str) -> dict:
    d = load(name)
    if "domino" in name:  # SGLang runs Domino as DFlashDraftModel (DominoArchitectureUnsupported otherwise)
        d = edit(d, {("architectures",): ["DFlashDraftModel"]})
    return d


@pytest.mark.parametrize("target,vllm_ok,sglang_ok,sglang_dspark_ok", DFLASH_CAPTURE_TABLE,
                         ids=[r[0] for r in DFLASH_CAPTURE_TABLE])
def test_dflash_family_target_capture_per_engine(target, vllm_ok, sglang_ok, sglang_dspark_ok):
    t = load(target) if target.endswith(".json") else minimal_target(target)
    arch = t["architectures"][0]
    capturing = edit(t, {("architectures",): ["Qwen3ForCausalLM"]})  # the same target through a class that captures
    for method, drafter, engines in DFLASH_DRAFTERS:
        d = _drafter_doc(drafter)
        for engine in engines:
            ok = vllm_ok if engine == "vllm" else (sglang_dspark_ok if method == "dspark" else sglang_ok)
            fs, _, der = gate(method, engine, d, t)
            errs = codes(fs, "error")
            assert (DCAPTURE in errs) is (not ok), (method, engine, [f.message for f in fs])
            # the architecture changes this rule's verdict only
            assert errs - {DCAPTURE} == codes(gate(method, engine, d, capturing)[0], "error") - {DCAPTURE}, (method, engine)
            if ok:
                assert der.get("targetCapture"), (method, engine)
                continue
            (f,) = [f for f in fs if f.code == DCAPTURE]
            assert f.path == "$.architectures[0]" and f.source.value == "target"
            assert arch in f.message and {"vllm": "vLLM 0.33.0", "sglang": "SGLang 0.5.23"}[engine] in f.message
            assert "method ngram" in f.message and f"a {DISPLAY[detect_family(d).name]} drafter" in f.message
            other_ok = {"vllm": sglang_dspark_ok if method == "dspark" else sglang_ok, "sglang": vllm_ok}[engine]
            other = "SGLang" if engine == "vllm" else "vLLM"
            assert (f"serve it on {other}" in f.message) is (other_ok and (engine, "domino" in drafter) != ("sglang", True))


def test_dflash_capture_messages_name_each_engines_hook():
    t = minimal_target("DeepseekV4ForCausalLM")
    fs, _, _ = gate("dflash", "sglang", _drafter_doc("qwen3-8b-dflash-b16.drafter.json"), t)
    (f,) = [f for f in fs if f.code == DCAPTURE]
    assert "DFLASH needs set_dflash_layers_to_capture" in f.message and "configure_aux_hidden_state_capture" in f.message
    t = minimal_target("MixtralForCausalLM")
    fs, _, _ = gate("dspark", "sglang", _drafter_doc("dspark-qwen3-8b.drafter.json"), t)
    (f,) = [f for f in fs if f.code == DCAPTURE]
    assert "DSPARK needs set_dspark_layers_to_capture or set_dflash_layers_to_capture" in f.message
    fs, _, _ = gate("dspark", "vllm", _drafter_doc("dspark-qwen3-8b.drafter.json"), t)
    (f,) = [f for f in fs if f.code == DCAPTURE]
    assert "'dspark'" in f.message and "requires_aux_hidden_states" in f.message and "SupportsEagle3" in f.message
    fs, _, _ = gate("dflash", "sglang", _drafter_doc("qwen3-8b-dflash-b16.drafter.json"),
                    minimal_target("NotARegisteredForCausalLM"))
    (f,) = [f for f in fs if f.code == DCAPTURE]
    assert "no SGLang class of that name: it loads the Transformers fallback" in f.message
    t = load("glm-4.5-air.target.json")  # its own MTP layer, which both engines run
    for engine in ("vllm", "sglang"):
        fs, _, _ = gate("dflash", engine, _drafter_doc("qwen3-8b-dflash-b16.drafter.json"), t)
        assert "method mtp (the target's own 1 MTP layer)" in next(f.message for f in fs if f.code == DCAPTURE)


def test_dflash_capture_skips_domino_on_vllm_which_is_refused_apart():
    fs, _, _ = gate("dflash", "vllm", _drafter_doc("domino-qwen3-8b.drafter.json"), minimal_target("MixtralForCausalLM"))
    assert "DominoUnsupportedByEngine" in codes(fs) and DCAPTURE not in codes(fs)


def test_dflash_capture_on_other_releases():
    t, d = minimal_target("Qwen2ForCausalLM"), _drafter_doc("qwen3-8b-dflash-b16.drafter.json")
    fs, _, _ = gate("dflash", "sglang", d, t, version="0.5.22")  # older: read from 0.5.23, still an error
    (f,) = [f for f in fs if f.code == DCAPTURE]
    assert f.severity.value == "error" and "read from SGLang 0.5.23" in f.message
    fs, _, _ = gate("dflash", "sglang", d, t, version="0.5.24")  # newer: it may have gained the hook
    assert DCAPTURE in codes(fs, "warning") and DCAPTURE not in codes(fs, "error")
    assert not CATALOG[DCAPTURE].overridable


def test_vllm_asks_for_the_hidden_states_only_under_the_recorded_methods(monkeypatch):
    """The vLLM rule follows the recorded requires_aux_hidden_states methods (facts eagle3_capture value.methods)."""
    from specdeploy.core.checker import capture

    assert capture.needs_capture("vllm", "dflash") and capture.needs_capture("vllm", "dspark")
    real = capture.capture_facts
    monkeypatch.setattr(capture, "capture_facts", lambda e, v: (lambda h: (h[0], {"value": {**h[1]["value"],
                                                                                           "methods": ["eagle3"]}}))(real(e, v)))
    assert not capture.needs_capture("vllm", "dflash")
    fs, _, _ = gate("dflash", "vllm", _drafter_doc("qwen3-8b-dflash-b16.drafter.json"), minimal_target("MixtralForCausalLM"))
    assert DCAPTURE not in codes(fs)


def test_dflash_capture_in_the_whole_analysis():
    """On the DFlash checker path too (check_method after the DFlash rules)."""
    from specdeploy.core.checker import Options, analyze

    d = load("qwen3-8b-dflash-b16.drafter.json")
    t = edit(load("qwen3-8b.target.json"), {("architectures",): ["Qwen2ForCausalLM"], ("model_type",): "qwen2"})
    for engine, bad in (("sglang", True), ("vllm", False)):
        a = analyze(d, t, Options(engine=engine, engine_version=VERSION[engine], method="dflash"))
        assert (DCAPTURE in {f.code for f in a.findings if f.severity.value == "error"}) is bad, engine
