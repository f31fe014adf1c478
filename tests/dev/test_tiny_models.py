"""specdeploy dev tiny-models: deterministic bytes, safetensors layout, the parameter names vLLM loads,
the accept-all and shifted variants, the tokenizer, and the pure checker's verdict on the pairs."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("tokenizers")

from testkit import run_cli  # noqa: E402
from specdeploy_dev import tinymodels as tm  # noqa: E402

TARGET_LAYER = {"self_attn.q_proj.weight": (128, 128), "self_attn.k_proj.weight": (64, 128),
                "self_attn.v_proj.weight": (64, 128), "self_attn.o_proj.weight": (128, 128),
                "self_attn.q_norm.weight": (32,), "self_attn.k_norm.weight": (32,),
                "mlp.gate_proj.weight": (384, 128), "mlp.up_proj.weight": (384, 128),
                "mlp.down_proj.weight": (128, 384), "input_layernorm.weight": (128,),
                "post_attention_layernorm.weight": (128,)}


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return tm.build_tiny_models()


def tensors(files: dict[str, bytes], repo: str) -> dict[str, "np.ndarray"]:
    return tm.decode_safetensors(files[f"{repo}/model.safetensors"])


def config(files: dict[str, bytes], repo: str) -> dict:
    return json.loads(files[f"{repo}/config.json"])


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_cli_writes_the_same_bytes_in_two_processes(tmp_path):
    for d in ("a", "b"):
        r = run_cli("dev", "tiny-models", str(tmp_path / d), "--seed", "7")
        assert r.returncode == 0, r.stderr
        assert "wrote 22 files" in r.stdout  # 17 + tiny/mimo-mtp-flat
    a, b = digests(tmp_path / "a"), digests(tmp_path / "b")
    assert len(a) == 22 and a == b
    # the in-process build is the same set of bytes
    built = tm.build_tiny_models(tm.TinySpec(seed=7))
    assert {k: hashlib.sha256(v).hexdigest() for k, v in built.items()} == a


def test_the_seed_changes_weights_only(files):
    other = tm.build_tiny_models(tm.TinySpec(seed=1))
    assert sorted(other) == sorted(files)
    for name in files:
        same = other[name] == files[name]
        if name.endswith(".safetensors") or name == tm.MANIFEST:
            assert not same, name
        else:
            assert same, name


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "must be in [0, 2^63)"),
    (["--seed", "x"], "is not an integer"),
])
def test_cli_bad_seed_is_one_line(tmp_path, argv, message):
    r = run_cli("dev", "tiny-models", str(tmp_path), *argv)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_cli_output_that_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = run_cli("dev", "tiny-models", str(f))
    assert r.returncode == 2 and "is not a directory" in r.stderr and "Traceback" not in r.stderr


def test_safetensors_layout(files):
    data = files[f"{tm.TARGET}/model.safetensors"]
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
    header = json.loads(data[8:8 + n])
    assert header.pop("__metadata__") == {"format": "pt", "specdeploy.seed": "0"}
    offsets = sorted(tuple(v["data_offsets"]) for v in header.values())
    assert offsets[0][0] == 0 and offsets[-1][1] == len(data) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:])), "tensors are contiguous"
    for name, info in header.items():
        assert info["dtype"] == "BF16"
        start, end = info["data_offsets"]
        assert end - start == 2 * int(np.prod(info["shape"])), name


def test_bf16_rounding_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.standard_normal(4096, dtype=np.float32),
                        np.array([0.0, -0.0, 1.0, -2.5, 1e-8, 3.0e38, 1.00390625, 1.01171875], np.float32)])
    ours = tm.decode_safetensors(tm.encode_safetensors({"x": a}))["x"]
    theirs = torch.from_numpy(a).to(torch.bfloat16).to(torch.float32).numpy()
    assert np.array_equal(ours, theirs)
    assert np.array_equal(tm.decode_safetensors(tm.encode_safetensors({"x": a}, dtype="F32"))["x"], a)


def test_decode_refuses_garbage():
    with pytest.raises(ValueError, match="shorter"):
        tm.decode_safetensors(b"abc")
    with pytest.raises(ValueError, match="past the end"):
        tm.decode_safetensors(struct.pack("<Q", 100) + b"{}")


def test_target_parameter_names_and_shapes(files):
    t = tensors(files, tm.TARGET)
    expected = {"model.embed_tokens.weight": (512, 128), "model.norm.weight": (128,), "lm_head.weight": (512, 128)}
    for i in range(4):
        expected.update({f"model.layers.{i}.{k}": v for k, v in TARGET_LAYER.items()})
    assert {k: v.shape for k, v in t.items()} == expected
    cfg = config(files, tm.TARGET)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["model_type"] == "qwen3"
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (4, 128, 512)


def test_drafter_parameter_names_are_what_vllm_loads(files):
    # vLLM 0.32 DFlashQwen3ForCausalLM.load_weights prefixes "model." to every name but lm_head;
    # embed_tokens and lm_head are absent: shared from the target.
    d = tensors(files, tm.DRAFTERS["random"])
    expected = {f"layers.0.{k}": v for k, v in TARGET_LAYER.items()}
    expected.update({"fc.weight": (128, 2 * 128), "hidden_norm.weight": (128,), "norm.weight": (128,)})
    assert {k: v.shape for k, v in d.items()} == expected
    cfg = config(files, tm.DRAFTERS["random"])
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["num_hidden_layers"] == 1 and cfg["layer_types"] == ["full_attention"] and cfg["block_size"] == 4
    mask = json.loads(files[tm.MANIFEST])["tokens"]["mask"]
    assert cfg["dflash_config"] == {"mask_token_id": mask, "target_layer_ids": [0, 2]}


def test_accept_all_zeroes_only_the_final_norms(files):
    for base, flat, norm in ((tm.TARGET, tm.TARGET_FLAT, "model.norm.weight"),
                             (tm.DRAFTERS["random"], tm.DRAFTERS["accept-all"], "norm.weight")):
        a, b = tensors(files, base), tensors(files, flat)
        assert sorted(a) == sorted(b)
        assert np.all(a[norm] == 1.0) and np.all(b[norm] == 0.0)
        assert all(np.array_equal(a[k], b[k]) for k in a if k != norm)
        assert files[f"{base}/config.json"] == files[f"{flat}/config.json"]
    # greedy on the flat target: every logit lm_head @ (0 * x) is 0, so argmax is token 0
    t = tensors(files, tm.TARGET_FLAT)
    hidden = np.random.default_rng(1).standard_normal(128, dtype=np.float32)
    logits = t["lm_head.weight"] @ (t["model.norm.weight"] * hidden)
    assert np.all(logits == 0) and int(np.argmax(logits)) == 0


def test_shifted_drafter_differs_only_in_its_layer_ids(files):
    rnd, shifted = tm.DRAFTERS["random"], tm.DRAFTERS["shifted"]
    assert files[f"{rnd}/model.safetensors"] == files[f"{shifted}/model.safetensors"]
    a, b = config(files, rnd), config(files, shifted)
    assert b["dflash_config"]["target_layer_ids"] == [i + 1 for i in a["dflash_config"]["target_layer_ids"]]
    assert tm.shift_layer_ids(a) == b
    assert max(b["dflash_config"]["target_layer_ids"]) < a["num_target_layers"]


def test_tokenizer(files):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(files[f"{tm.TARGET}/tokenizer.json"].decode())
    manifest = json.loads(files[tm.MANIFEST])
    assert tok.get_vocab_size() <= 512
    assert manifest["tokens"] == {"eos": tok.token_to_id(tm.EOS_TOKEN), "mask": tok.token_to_id(tm.MASK_TOKEN)}
    assert 0 not in manifest["tokens"].values(), "token 0 must be a plain token (greedy on flat logits picks it)"
    text = "Speculative decoding on a tiny model: 2048 tokens, ünïcode too."
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text and len(ids) < len(text.encode())
    assert tm.MASK_TOKEN not in tok.encode("a <|mask|> b").tokens or \
        tok.encode("<|mask|>").ids == [manifest["tokens"]["mask"]]
    tc = json.loads(files[f"{tm.TARGET}/tokenizer_config.json"])
    gc = json.loads(files[f"{tm.TARGET}/generation_config.json"])
    assert tc["eos_token"] == tm.EOS_TOKEN and gc["eos_token_id"] == manifest["tokens"]["eos"]


def test_manifest_pairs_name_files_that_exist(files):
    manifest = json.loads(files[tm.MANIFEST])
    assert set(manifest["pairs"]) == {"random", "accept-all", "shifted"}
    for pair in manifest["pairs"].values():
        assert f"{pair['target']}/config.json" in files and f"{pair['drafter']}/model.safetensors" in files


@pytest.mark.parametrize("kind", ["random", "accept-all"])
def test_the_checker_accepts_the_pairs(tmp_path, kind):
    tm.write_tiny_models(tmp_path)
    pair = json.loads((tmp_path / tm.MANIFEST).read_text())["pairs"][kind]
    r = run_cli("check", "--drafter", str(tmp_path / pair["drafter"]), "--target", str(tmp_path / pair["target"]),
                "--engine", "vllm", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr  # exit 0: no error finding
    assert "derived" in json.loads(r.stdout)


def test_spec_checks():
    with pytest.raises(ValueError, match="shifted by one"):
        tm.TinySpec(target_layer_ids=(0, 3)).check()
    with pytest.raises(ValueError, match="hidden_size"):
        tm.TinySpec(num_heads=3).check()


def test_mtp_target_is_a_flat_mimo_with_one_mtp_layer(files):
    cfg = config(files, tm.MTP_TARGET_FLAT)
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["num_nextn_predict_layers"] == 1
    assert cfg["model_type"] == "qwen2" and "head_dim" not in cfg
    t = tensors(files, tm.MTP_TARGET_FLAT)
    mtp = {k.removeprefix("model.mtp_layers.0.") for k in t if k.startswith("model.mtp_layers.0.")}
    # what vLLM's MiMoMTP.load_weights maps (models/mimo_mtp.py): the MTP head's own norms and projection,
    # then a Qwen2 decoder layer (biased q/k/v, no q/k norms)
    assert {"token_layernorm.weight", "hidden_layernorm.weight", "input_proj.weight", "final_layernorm.weight",
            "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"} <= mtp
    assert not [k for k in t if "q_norm" in k or "k_norm" in k]
    assert t["model.mtp_layers.0.input_proj.weight"].shape == (128, 256)
    assert {f"model.layers.{i}.self_attn.q_proj.bias" for i in range(4)} <= set(t)
    # flat: the target's final norm and the MTP head's are zero (every logit 0, token 0 both ways), nothing else
    zero = sorted(k for k, v in t.items() if k.endswith("norm.weight") and not v.any())
    assert zero == ["model.mtp_layers.0.final_layernorm.weight", "model.norm.weight"]
    m = json.loads(files[tm.MANIFEST])
    assert m["self_drafting"]["mtp-flat"]["target"] == tm.MTP_TARGET_FLAT and tm.MTP_TARGET_FLAT in m["models"]
