"""The engine capability table against the facts recorded from each release's own code.

``operator/specdeploy/data/facts/<engine>-<version>.json`` is written by
``e2e/flagdrift/record-facts.sh`` (the release's wheel, its functions run on small inputs).
Every recorded release must fall into a table row that says exactly what its code does; a
row change without re-recorded facts, or facts that move under a row, fail here.
"""

from __future__ import annotations

import pytest

from specdeploy.core import enginedata
from specdeploy.core import engines as eng
from specdeploy.core.checker import canonical_layer_ids
from specdeploy.core.versions import in_range, parse_version

FACTS = enginedata.available_facts()
SGLANG_FACTS = [v for e, v in FACTS if e == "sglang"]
VLLM_FACTS = [v for e, v in FACTS if e == "vllm"]


def facts(engine: str, version: str) -> dict:
    doc = enginedata.load_facts(engine, version)
    assert doc is not None and doc["engine"] == engine and doc["version"] == version
    return doc


def f(doc, *path):
    return enginedata.fact(doc, *path)


def test_facts_are_recorded_for_the_pinned_releases_and_every_row():
    assert "0.5.23" in SGLANG_FACTS and "0.33.0" in VLLM_FACTS
    for info in eng.ENGINES.values():
        for row in info.releases:
            inside = [v for e, v in FACTS if e == info.name and in_range(parse_version(v), row.since, row.until)]
            assert row.since in inside, f"{info.name} row {row.since}..{row.until}: no facts recorded for {row.since}"


@pytest.mark.parametrize("engine, version", FACTS, ids=[f"{e}-{v}" for e, v in FACTS])
def test_dflash_presence_matches_the_table(engine, version):
    doc = facts(engine, version)
    row = eng.ENGINES[engine].release_for(version)
    assert f(doc, "dflash") == (row is not None), \
        f"{engine} {version}: facts say dflash={f(doc, 'dflash')}, table row={row and row.since}"


@pytest.mark.parametrize("version", SGLANG_FACTS)
def test_sglang_row_matches_recorded_facts(version):
    doc = facts("sglang", version)
    row = eng.SGLANG.release_for(version)
    if row is None:
        pytest.skip(f"sglang {version} has no table row (no DFlash: test_dflash_presence_matches_the_table)")
    assert f(doc, "sliding_window", "native") == row.native_draft_window
    if row.native_draft_window:
        # HF windows count the current token: SGLang stores window_left = sliding_window - 1 per sliding layer
        assert f(doc, "sliding_window", "per_layer_window") == [2047, 2047, -1]
    assert f(doc, "sliding_window", "reads_use_swa") in (None, False) and row.reads_use_swa is False
    flags = set(f(doc, "window_flags"))
    assert flags == {row.flags["draft_window"], *row.aliases}, (flags, row.flags["draft_window"], dict(row.aliases))
    assert set(f(doc, "drafter_architectures")) == set(row.drafter_architectures)
    assert f(doc, "compact_cache") == row.compact_cache == "all_layers"
    backends = f(doc, "draft_attention_backends")
    assert set(row.draft_attention_backends) <= set(backends), (sorted(row.draft_attention_backends), sorted(backends))
    for b in row.native_window_backends:
        assert backends[b]["reads_layer_window"], f"{b} does not read the per-layer window in {version}"
    cond = f(doc, "trtllm_mha_condition")
    if row.trtllm_mha_draft is None:
        assert cond is None
    elif row.trtllm_mha_draft == "never":
        assert cond["accepted_when"] == "never"
    else:
        assert cond["all_sliding"] and cond["text_config_is_causal"] and not cond["dflash_config_causal"]


@pytest.mark.parametrize("version", SGLANG_FACTS)
def test_canonical_layout_is_sglangs(version):
    doc = facts("sglang", version)
    table = f(doc, "default_layer_ids")
    if table is None:
        pytest.skip(f"sglang {version}: no default_layer_ids recorded (the release has no default DFlash layout)")
    assert table, version
    for key, want in table.items():
        n, k = (int(x) for x in key.split(","))
        got = canonical_layer_ids(n, k)
        if isinstance(want, str):  # the engine raises: N too small for several ids
            assert want.startswith("raises") and got is None, (key, want, got)
        else:
            assert got == want, (key, want, got)


@pytest.mark.parametrize("version", SGLANG_FACTS)
def test_sglang_target_classes_capture_layer_outputs(version):
    doc = facts("sglang", version)
    if not f(doc, "dflash"):
        pytest.skip(f"sglang {version} has no DFlash: no target capture recorded")
    cap = f(doc, "target_capture")
    # the targets of the examples: hidden state after layer id (+1), and what each class refuses
    assert cap["Qwen3ForCausalLM"]["offset"] == 1
    assert cap["KimiK25ForConditionalGeneration"]["offset"] == 1
    assert cap["Qwen3_5ForConditionalGeneration"]["offset"] == 1
    assert cap["Qwen3_5ForConditionalGeneration"]["probes"]["last"].startswith("raises")


@pytest.mark.parametrize("version", VLLM_FACTS)
def test_vllm_row_matches_recorded_facts(version):
    doc = facts("vllm", version)
    row = eng.VLLM.release_for(version)
    if row is None:
        pytest.skip(f"vllm {version} has no table row (no DFlash: test_dflash_presence_matches_the_table)")
    assert f(doc, "layer_ids_offset", "v1") == row.layer_ids_offset
    v2 = f(doc, "layer_ids_offset", "v2")
    assert v2 in (None, row.layer_ids_offset)
    sw = f(doc, "sliding_window")
    assert sw["supported"] == row.sliding_window_layers == row.reads_use_swa == row.native_draft_window
    if row.sliding_window_layers:
        cases = sw["cases"]
        assert cases["all_sliding@v1"] == [2048, True]
        assert cases["use_swa_only@v1"] == [2048, False]
        assert cases["sliding_no_window@v1"].startswith("raises ValueError")
        assert cases["mixed@v1"] == "raises NotImplementedError"
        assert (cases["mixed@v2"] == [2048, True]) == (row.mixed_layers_env is not None)
    else:
        assert row.mixed_layers_env is None
    archs = f(doc, "drafter_architectures")
    assert archs["renames_to_dflash"] and row.prefixes_dflash_architecture
    assert set(archs["registered"]) == set(row.drafter_architectures)
    assert set(row.draft_attention_backends.values()) <= set(f(doc, "non_causal_backends"))
    ctx = f(doc, "draft_context")
    if row.raises_draft_context is None:
        assert ctx["raises_draft_limit"] is False
    else:
        assert ctx["raises_draft_limit"] is True
        for rope, got in ctx["draft_4096_served_16384"].items():
            assert (got == 16384) == (rope in row.raises_draft_context), (rope, got)


@pytest.mark.parametrize("engine, version", [(e, v) for e, v in FACTS if eng.ENGINES[e].release_for(v) is not None],
                         ids=[f"{e}-{v}" for e, v in FACTS if eng.ENGINES[e].release_for(v) is not None])
def test_guard_switch_matches_recorded_facts(engine, version):
    """spec.speculation.guard renders a switch exactly where the release's code has one that DFlash honours."""
    from specdeploy.core.rollout import guard as gd

    row = eng.ENGINES[engine].release_for(version)
    g = f(facts(engine, version), "speculation_guard")
    assert g is not None, f"{engine} {version}: re-record facts (e2e/flagdrift/record-facts.sh)"
    assert row.guard_source, "a row without a guard says why (or cites the code that honours it)"
    if engine == "sglang":
        assert row.batch_size_guard is None and g["dflash"] is False and "DFLASH" not in g["algorithms"]
        return
    # no release the table covers has the V0 key; every one refuses unknown keys: never render it
    assert g["disable_by_batch_size"] is False and g["unknown_keys_rejected"] is True
    assert g["v1_reads_disable_by_batch_size"] is False
    honours = (g["batch_size_schedule"] == eng.VLLM_SCHEDULE_KEY and g["scheduler_reads_schedule"]
               and g["v1_runner_passes_k_to_dflash"] and g["drafter_skips_zero"])
    assert (row.batch_size_guard == eng.VLLM_SCHEDULE_KEY) == honours, (version, g)
    if honours:
        # the release's own lookup, run on [[1, 3, 3], [4, 4, 0]] up to 8 sequences, and ours agree
        lk = g["lookup"]
        assert lk["per_batch_size"] == [3, 3, 3, 0, 0, 0, 0, 0]
        assert lk["schedule"] == gd.vllm_schedule(4, 3)
        assert [gd.schedule_tokens(lk["schedule"], b, 3) for b in range(1, 9)] == lk["per_batch_size"]


def test_every_row_cites_the_engine_code():
    for info in eng.ENGINES.values():
        for row in info.releases:
            assert any(".py" in s for s in row.sources), (info.name, row.since)


# ----------------------------------------------------------------- speculative methods (issue 25)

METHOD_FACTS = [(e, v) for e, v in FACTS if enginedata.fact(enginedata.load_facts(e, v), "methods") is not None]


def test_methods_are_recorded_for_the_pinned_releases():
    assert ("sglang", "0.5.23") in METHOD_FACTS and ("vllm", "0.33.0") in METHOD_FACTS


@pytest.mark.parametrize("engine, version", METHOD_FACTS, ids=[f"{e}-{v}" for e, v in METHOD_FACTS])
def test_every_method_name_is_the_releases_own(engine, version):
    """Each method the row serves maps to a name the release's code accepts (vLLM SpeculativeMethod, SGLang
    SpeculativeAlgorithm or an alias of it), and the row serves every method whose name the release has."""
    doc = facts(engine, version)
    row = eng.ENGINES[engine].release_for(version)
    rec = f(doc, "methods")
    known = set(rec["names"]) if engine == "vllm" else set(rec["algorithms"]) | set(rec["aliases"])
    for method, name in row.method_names.items():
        assert name in known, f"{engine} {version}: {method} -> {name!r} is not in the release's code"
    table = eng.VLLM_METHODS if engine == "vllm" else eng.SGLANG_METHODS
    missing = sorted(m for m, n in table.items() if n in known and m not in row.methods)
    assert missing == [], f"{engine} {version} has these methods in its code but the row does not serve them"


@pytest.mark.parametrize("engine, version", METHOD_FACTS, ids=[f"{e}-{v}" for e, v in METHOD_FACTS])
def test_every_method_flag_is_in_the_release(engine, version):
    doc = facts(engine, version)
    row = eng.ENGINES[engine].release_for(version)
    rec = f(doc, "methods")
    for method in row.methods:
        if engine == "sglang":
            keys = eng.SGLANG_METHOD_FLAGS[method]
            absent = [row.flags[k] for k in keys if row.flags[k] not in rec["flags"]]
        else:
            absent = [k for k in eng.VLLM_METHOD_KEYS[method] if k not in rec["config_fields"]]
        assert absent == [], f"{engine} {version} {method}: {absent} not in the release's code"


def test_mtp_aliases_are_recorded_as_rewrites():
    rec = f(facts("vllm", "0.33.0"), "methods")
    assert rec["aliases"]["deepseek_mtp"] == "mtp" and "mtp" in rec["names"]
    assert f(facts("sglang", "0.5.23"), "methods")["aliases"] == {"NEXTN": "EAGLE"}


# ----------------------------------------------------------------- EAGLE-3 capture (the target hands hidden states over)

def test_eagle3_capture_is_recorded_for_the_gates_releases():
    """The EAGLE-3 gate's RECORDED releases carry the per-architecture capture facts, with the runner checks cited."""
    from specdeploy.core.checker.eagle3 import RECORDED

    for engine, version in RECORDED.items():
        doc = facts(engine, version)
        rec = doc["facts"]["eagle3_capture"]
        sup, uns = rec["value"]["supported"], rec["value"]["unsupported"]
        assert "LlamaForCausalLM" in sup and "Qwen3ForCausalLM" in sup and not set(sup) & set(uns)
        assert len(sup) > 50 and len(uns) > 50
        cited = ("_setup_eagle3_aux_hidden_state_outputs", "set_eagle3_aux_hidden_state_layers") if engine == "vllm" \
            else ("configure_aux_hidden_state_capture",)
        assert all(c in rec["evidence"] for c in cited), rec["evidence"]
    assert "Glm4MoeForCausalLM" in f(facts("vllm", "0.33.0"), "eagle3_capture", "unsupported")
    assert "MiMoForCausalLM" in f(facts("sglang", "0.5.23"), "eagle3_capture", "unsupported")


def test_dflash_family_capture_is_recorded_for_the_gates_releases():
    """vLLM asks for the aux hidden states under dflash and dspark too; SGLang's DSpark hook is recorded per class."""
    from specdeploy.core.checker.capture import RECORDED

    rec = facts("vllm", RECORDED["vllm"])["facts"]["eagle3_capture"]
    assert {"eagle3", "dflash", "dspark"} <= set(rec["value"]["methods"]) and "requires_aux_hidden_states" in rec["evidence"]
    doc = facts("sglang", RECORDED["sglang"])
    ds = f(doc, "dspark_capture", "supported")
    classes = set(f(doc, "eagle3_capture", "supported")) | set(f(doc, "eagle3_capture", "unsupported"))
    assert "DeepseekV4ForCausalLM" in ds and "DeepseekV4ForCausalLM" not in f(doc, "target_capture")
    assert set(ds) <= classes and set(f(doc, "target_capture")) <= classes
    assert "configure_aux_hidden_state_capture" in doc["facts"]["dspark_capture"]["evidence"]
