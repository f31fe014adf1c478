"""The reference DFlash forward, `train-tiny-drafter` and `verify-window --drafter` (CPU, seconds).

The full training (minutes) runs in e2e/test_e2e_vllm_cpu.py through its cache; here a few steps
of every stage prove the pipeline, the layout vLLM loads, determinism and the cache.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from runtime_helpers import run_runtime
from specdeploy.core.checker import Options, analyze
from specdeploy_dev.tinymodels import decode_safetensors
from specdeploy_dev import tinytrain as tt
from specdeploy_runtime.dflash_ref import FULL, SLIDING, DFlashDrafterRef, Shape, init_weights
from specdeploy_runtime.draftcache import DFlashDrafter, DrafterGeometry, FullCache

SHAPE = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96,
             vocab_size=300)


def _pair(layer_types, window=None):
    """The reference drafter with random weights and the cache reference holding the same weights."""
    s = Shape(**SHAPE, layer_types=tuple(layer_types), sliding_window=window)
    ref = DFlashDrafterRef(s, 2)
    init_weights(ref, 0.2, torch.Generator().manual_seed(3))
    with torch.no_grad():  # norms away from 1 so that a swapped norm cannot pass
        for name, p in ref.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    geom = DrafterGeometry(hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, layer_types=tuple(layer_types),
                           sliding_window=window or 4096, block_size=4, num_target_features=2, intermediate_size=96)
    cache_model = DFlashDrafter(geom)
    from specdeploy_runtime.verify import RealWeights

    RealWeights.copy_into(type("R", (), {"drafter": ref})(), cache_model)
    return ref, cache_model, geom


@pytest.mark.parametrize("types, window", [((FULL, FULL), None), ((SLIDING, SLIDING), 5)])
def test_reference_forward_equals_the_cache_reference_on_the_same_weights(types, window):
    ref, cm, geom = _pair(types, window)
    feats = torch.randn(23, 128, generator=torch.Generator().manual_seed(1))
    block = torch.randn(4, 64, generator=torch.Generator().manual_seed(2))
    cache = FullCache(geom, 32)
    cm.inject(cache, feats, torch.arange(23))
    want = cm.draft_step(block, cache).hidden
    with torch.no_grad():
        got, weights = ref(block[None], torch.arange(23, 27)[None], ref.fuse(feats[None]), torch.arange(23)[None],
                           need_weights=True)
    assert (got[0] - want).abs().max() < 1e-4
    w = weights[0][0]  # [Hq, Q, C+Q]
    if window:  # sliding: causal within the window, exactly zero outside it
        q = torch.arange(23, 27)[:, None]
        k = torch.cat([torch.arange(23), torch.arange(23, 27)])[None, :]
        outside = (k > q) | (q - k >= window)
        assert (w[:, outside] == 0).all() and (w[:, ~outside] > 0).all()
    else:  # full: non-causal, every key seen
        assert (w > 0).all()
    # a different rule gives a different answer (the comparison can fail)
    other = DFlashDrafterRef(Shape(**SHAPE, layer_types=(FULL, FULL) if window else (SLIDING, SLIDING),
                                   sliding_window=5), 2)
    other.load_state_dict(ref.state_dict())
    with torch.no_grad():
        changed, _ = other(block[None], torch.arange(23, 27)[None], other.fuse(feats[None]), torch.arange(23)[None])
    assert (changed[0] - want).abs().max() > 1e-3


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("quick")
    cache = tmp_path_factory.mktemp("cache")
    import os

    old = os.environ.get("SPECDEPLOY_CACHE")
    os.environ["SPECDEPLOY_CACHE"] = str(cache)
    try:
        lines: list[str] = []
        m1 = tt.write(root / "a", tt.quick_spec(), log=lines.append)
        m2 = tt.write(root / "b", tt.quick_spec(), log=lines.append)
        m3 = tt.write(root / "c", tt.quick_spec(), use_cache=False, log=lines.append)
    finally:
        if old is None:
            os.environ.pop("SPECDEPLOY_CACHE")
        else:
            os.environ["SPECDEPLOY_CACHE"] = old
    return root, (m1, m2, m3), lines, cache


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_training_writes_the_repos_vllm_loads_deterministically_and_caches(quick):
    root, (m1, m2, m3), lines, cache = quick
    assert not m1["cached"] and m2["cached"] and not m3["cached"]
    assert any(line.startswith("target step 3/3") for line in lines)
    a, b, c = _files(root / "a"), _files(root / "b"), _files(root / "c")
    assert a == b  # the cache copy
    # a second training: the same weights and configs, byte for byte (only the seconds differ)
    assert {k: v for k, v in a.items() if k != "tiny-trained.json"} == {k: v for k, v in c.items() if k != "tiny-trained.json"}
    ma, mc = json.loads(a["tiny-trained.json"]), json.loads(c["tiny-trained.json"])
    assert ma["replay"] == mc["replay"] and ma["training"]["drafter"]["final_loss"] == mc["training"]["drafter"]["final_loss"]
    assert (cache / "tiny-trained" / m1["digest"] / "tiny-trained.json").is_file()
    assert {"tiny/lang-target/model.safetensors", "tiny/lang-target/tokenizer.json", "tiny/lang-dflash/config.json",
            "tiny/lang-dflash/model.safetensors", "tiny/lang-dflash-shifted/config.json", "tiny-trained.json"} <= set(a)
    names = set(decode_safetensors(a["tiny/lang-dflash/model.safetensors"]))
    assert names == {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
        f"layers.0.{n}.weight" for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                         "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj",
                                         "mlp.down_proj", "input_layernorm", "post_attention_layernorm")}
    tnames = set(decode_safetensors(a["tiny/lang-target/model.safetensors"]))
    assert "lm_head.weight" in tnames and "model.layers.5.mlp.down_proj.weight" in tnames
    assert a["tiny/lang-dflash/model.safetensors"] == a["tiny/lang-dflash-shifted/model.safetensors"]
    d, s = json.loads(a["tiny/lang-dflash/config.json"]), json.loads(a["tiny/lang-dflash-shifted/config.json"])
    assert d["dflash_config"]["target_layer_ids"] == [1, 3] and s["dflash_config"]["target_layer_ids"] == [2, 4]
    assert {k: v for k, v in d.items() if k != "dflash_config"} == {k: v for k, v in s.items() if k != "dflash_config"}
    assert m1["prompts"] and all(isinstance(p, str) and p for p in m1["prompts"])
    # an input changes the digest (so the cache never serves stale weights)
    assert tt.quick_spec(seed=1).digest() != tt.quick_spec().digest()


def test_a_drafter_seed_trains_another_drafter_of_the_same_target(quick, monkeypatch):
    root, (m1, _, _), _, cache = quick
    monkeypatch.setenv("SPECDEPLOY_CACHE", str(cache))
    spec = tt.quick_spec(drafter_seed=1)
    assert spec.digest() != tt.quick_spec().digest()  # its own cache entry
    m = tt.write(root / "a", spec, log=lambda line: None)  # next to the seed-0 drafter, as the rollout e2e serves them
    a = _files(root / "a")
    assert m["models"] == [tt.TARGET, f"{tt.DRAFTER}-seed1", f"{tt.SHIFTED}-seed1"]
    assert {"tiny-trained.json", "tiny-trained-seed1.json", "tiny/lang-dflash/model.safetensors",
            "tiny/lang-dflash-seed1/model.safetensors", "tiny/lang-dflash-shifted-seed1/config.json"} <= set(a)
    # the same target (bytes; the manifests say so), another drafter with the same layout and config
    assert m["target_sha256"] == m1["target_sha256"] and m["spec"]["seed"] == m1["spec"]["seed"] == 0
    w0 = decode_safetensors(a["tiny/lang-dflash/model.safetensors"])
    w1 = decode_safetensors(a["tiny/lang-dflash-seed1/model.safetensors"])
    assert set(w0) == set(w1) and all(w0[k].shape == w1[k].shape for k in w0)
    assert any(not np.array_equal(w0[k], w1[k]) for k in w0)
    assert a["tiny/lang-dflash/config.json"] == a["tiny/lang-dflash-seed1/config.json"]
    assert json.loads(a["tiny/lang-dflash-shifted-seed1/config.json"])["dflash_config"]["target_layer_ids"] == [2, 4]


def test_the_gate_accepts_the_trained_ids_and_refuses_the_shifted_ones(quick):
    root = quick[0] / "a"
    t = json.loads((root / "tiny/lang-target/config.json").read_text())
    good = analyze(json.loads((root / "tiny/lang-dflash/config.json").read_text()), t, Options())
    bad = analyze(json.loads((root / "tiny/lang-dflash-shifted/config.json").read_text()), t, Options())
    assert not [f for f in good.findings if f.severity.value == "error"], good.findings
    assert [f.code for f in bad.findings if f.severity.value == "error"] == ["TargetLayerIdsShifted"]


def test_verify_window_on_the_trained_weights(quick):
    root = quick[0] / "a"
    args = ["verify-window", "--drafter", str(root / "tiny/lang-dflash"), "--target", str(root / "tiny/lang-target"),
            "--context", "40", "--window", "8", "-o", "json"]
    p = run_runtime(*args)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = json.loads(p.stdout)
    rw = r["real_weights"]
    assert r["ok"] and r["a_window"]["ok"] and r["b_exact"]["ok"] and r["block"] == 4
    assert rw["layer_types"] == ["sliding_attention"] and rw["target_layer_ids"] == [1, 3]
    assert rw["max_abs_diff"] < 1e-4 and rw["argmax_equal"] == rw["positions"] > 0
    bad = run_runtime(*args[:-2], "--fault", "off-by-one", "-o", "json")
    assert bad.returncode == 1 and not json.loads(bad.stdout)["a_window"]["ok"]
    text = run_runtime(*args[:-2])
    assert text.returncode == 0 and "real weights: drafter" in text.stdout and "engine rule:" in text.stdout


def test_verify_window_drafter_needs_target():
    p = run_runtime("verify-window", "--drafter", "/nonexistent")
    assert p.returncode != 0 and "--drafter and --target go together" in p.stderr


def test_adjacent_cosine_is_centred_and_the_penalty_is_in_the_spec():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 7, 16, generator=g)
    b = torch.randn(2, 7, 16, generator=g)
    c = tt.adjacent_cosine([a, a + 5.0, 2 * a, b])  # a constant offset and a scale change nothing
    assert c.shape == (3, 14)
    assert torch.allclose(c[0], torch.ones(14), atol=1e-5) and torch.allclose(c[1], torch.ones(14), atol=1e-5)
    assert c[2].abs().mean() < 0.5  # unrelated layers
    assert tt.adjacent_cosine([a, -a])[0].mean() < -0.99
    # the shipped recipe decorrelates the target's layers (docs/benchmarks.md: without it a shift costs ~2%)
    spec = tt.TrainSpec()
    assert spec.decorrelate > 0 and 0 < spec.decorrelate_from < 1


# ----------------------------------------------------------------------------- EAGLE-3 (--method eagle3)


@pytest.fixture(scope="module")
def quick_eagle(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("quick-eagle")
    cache = tmp_path_factory.mktemp("cache-eagle")
    old = os.environ.get("SPECDEPLOY_CACHE")
    os.environ["SPECDEPLOY_CACHE"] = str(cache)
    try:
        lines: list[str] = []
        spec = tt.quick_spec(method="eagle3")
        ms = (tt.write(root / "a", spec, log=lines.append), tt.write(root / "b", spec, log=lines.append),
              tt.write(root / "c", spec, use_cache=False, log=lines.append))
    finally:
        if old is None:
            os.environ.pop("SPECDEPLOY_CACHE")
        else:
            os.environ["SPECDEPLOY_CACHE"] = old
    return root, ms, lines


def test_eagle3_training_writes_the_layout_vllm_loads_deterministically_and_caches(quick_eagle):
    root, (m1, m2, m3), lines = quick_eagle
    assert not m1["cached"] and m2["cached"] and not m3["cached"]
    assert any(line.startswith("eagle3 drafter step 3/3") for line in lines)
    a, b, c = _files(root / "a"), _files(root / "b"), _files(root / "c")
    assert a == b
    assert {k: v for k, v in a.items() if not k.endswith(".json") or "/" in k} == \
        {k: v for k, v in c.items() if not k.endswith(".json") or "/" in k}
    assert set(a) == {"tiny-trained-eagle3.json"} | {f"tiny/lang-target/{n}" for n in (
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")} | {
        f"{r}/{n}" for r in (tt.EAGLE3, tt.EAGLE3_SHIFTED, tt.EAGLE3_SHIFTED_DOWN) for n in ("config.json", "model.safetensors")}
    assert m1["digest"] != tt.quick_spec().digest()  # the method is part of the cache key
    w = decode_safetensors(a[f"{tt.EAGLE3}/model.safetensors"])
    # the EAGLE-3 release names vLLM's llama_eagle3 maps (midlayer. -> layers.0., q/k/v stacked); no embeddings
    assert set(w) == {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} | {
        f"midlayer.{n}.weight" for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                                        "hidden_norm", "post_attention_layernorm")}
    assert w["midlayer.self_attn.q_proj.weight"].shape == (128, 256) and w["fc.weight"].shape == (128, 384)
    assert w["lm_head.weight"].shape == (64, 128) and w["d2t"].dtype == np.int64 and w["t2d"].dtype == bool
    draft_ids = np.arange(64) + w["d2t"]
    assert draft_ids.tolist() == m1["draft_vocab"]["target_ids"] and np.flatnonzero(w["t2d"]).tolist() == draft_ids.tolist()
    words = json.loads(a["tiny-trained-eagle3.json"])["language"]["words"]
    assert len(words) == 16 and all(np.diff(draft_ids) > 0)
    cfgs = {r: json.loads(a[f"{r}/config.json"]) for r in (tt.EAGLE3, tt.EAGLE3_SHIFTED, tt.EAGLE3_SHIFTED_DOWN)}
    assert [cfgs[r]["eagle_aux_hidden_state_layer_ids"] for r in cfgs] == [[1, 3, 5], [2, 4, 6], [0, 2, 4]]
    first = cfgs[tt.EAGLE3]
    assert first["architectures"] == ["LlamaForCausalLMEagle3"] and first["draft_vocab_size"] == 64
    assert first["num_hidden_layers"] == 1 and first["target_hidden_size"] == first["hidden_size"] == 128
    for r in (tt.EAGLE3_SHIFTED, tt.EAGLE3_SHIFTED_DOWN):
        assert a[f"{r}/model.safetensors"] == a[f"{tt.EAGLE3}/model.safetensors"]
        assert {k: v for k, v in cfgs[r].items() if k != "eagle_aux_hidden_state_layer_ids"} == \
            {k: v for k, v in first.items() if k != "eagle_aux_hidden_state_layer_ids"}
    assert set(m1["replay"]) == {"right_ids", "shifted_ids", "minus_one_ids"}


def test_eagle3_unrolled_chain_sees_no_future_and_reads_its_inputs():
    from specdeploy_dev import tinyeagle as te

    s = te.EagleShape(hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=48, num_aux=3,
                      draft_vocab_size=20)
    d = te.Eagle3DrafterRef(s)
    init_weights(d, 0.3, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    emb, feats = torch.randn(1, 12, 32, generator=g), torch.randn(1, 12, 96, generator=g)
    with torch.no_grad():
        base = d.unroll(emb, feats, 3)
        later_emb, later_feats = emb.clone(), feats.clone()
        later_emb[:, 9:] += 1.0  # tokens 9.. are the inputs of queries t >= 8 - j only
        later_feats[:, 7:] += 1.0
        later = d.unroll(later_emb, later_feats, 3)
    for j in range(3):
        # query t of step j reads tokens up to t + 1 + j and states up to t: t <= 6 - j is untouched
        keep = min(6, 7 - j)
        assert torch.allclose(base[j][:, :keep + 1], later[j][:, :keep + 1], atol=1e-6), j
        assert (base[j][:, keep + 1:] - later[j][:, keep + 1:]).abs().max() > 1e-4, j


def test_safetensors_round_trips_the_vocabulary_maps():
    from specdeploy_runtime.safetensors_io import decode_safetensors as dec, encode_safetensors as enc

    d2t = np.array([0, 5, -2, 2**40], dtype=np.int64)
    t2d = np.array([True, False, True])
    out = dec(enc({"d2t": d2t, "t2d": t2d, "w": np.ones((2, 2), np.float32)}))
    assert out["d2t"].dtype == np.int64 and out["d2t"].tolist() == d2t.tolist()
    assert out["t2d"].dtype == bool and out["t2d"].tolist() == t2d.tolist()
    assert out["w"].dtype == np.float32 and out["w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
