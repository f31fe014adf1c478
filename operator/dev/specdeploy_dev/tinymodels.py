"""Tiny models for a real engine on CPU: a Qwen3 target and DFlash drafters, generated from a seed.

``specdeploy dev tiny-models DIR [--seed N]`` writes, with no network and byte-identical for a
given seed (and numpy/tokenizers release), one Hugging Face-style repository per model under
``DIR/<org>/<name>/`` (the layout the hub stand-in serves, ``specdeploy_dev.hubserver``) and a
manifest ``DIR/tiny-models.json`` naming the pairs:

==========================  ===============================================================
repository                  what
==========================  ===============================================================
``tiny/target``             Qwen3ForCausalLM, 4 layers, hidden 128, 4 heads of 32 (2 KV
                            heads), vocab 512, random weights; a byte-level BPE tokenizer
                            trained offline on :data:`CORPUS` (tokenizer.json,
                            tokenizer_config.json, generation_config.json).
``tiny/target-flat``        the same with the final norm zeroed: every logit is 0, so greedy
                            decoding always picks token 0.
``tiny/dflash-random``      DFlashDraftModel (model_type qwen3), 1 full-attention layer,
                            block_size 4, ``dflash_config.target_layer_ids`` [0, 2],
                            ``mask_token_id`` the tokenizer's ``<|mask|>``; random weights,
                            no embeddings or lm_head (shared from the target).
``tiny/dflash-accept-all``  the random drafter with its final norm zeroed; paired with
                            ``tiny/target-flat`` every draft token is accepted (tau = 1 + k).
``tiny/dflash-shifted``     the random drafter's weights with ``target_layer_ids`` shifted by
                            one ([1, 3]): the off-by-one the checker must catch.
``tiny/mimo-mtp-flat``      MiMoForCausalLM (a Qwen2 body, attention biases) with one MTP layer
                            (``num_nextn_predict_layers`` 1, ``model.mtp_layers.0.*``), random
                            weights with the final norm and the MTP layer's ``final_layernorm``
                            zeroed: greedy decoding picks token 0 and so does the MTP draft, so
                            vLLM's ``mtp`` method accepts every draft token (tau = 2 at one
                            token). ``model_type`` is ``qwen2``: MiMo's own ``mimo`` needs its
                            remote code, and vLLM picks the model by architecture
                            (``models/mimo.py``, ``models/mimo_mtp.py``, ``config/speculative.py``
                            ``hf_config_override``).
==========================  ===============================================================

Weights are safetensors written here without torch: an 8-byte little-endian header length, a
JSON header (dtype, shape, data offsets per tensor, sorted by name), then the raw little-endian
bytes. bfloat16 values are float32 values rounded to nearest-even on the upper 16 bits. The
parameter names are those vLLM loads: the target's are Hugging Face Qwen3 names
(``model.layers.{i}...``, ``model.norm``, ``model.embed_tokens``, ``lm_head``); the drafter's
are vLLM's ``DFlashQwen3ForCausalLM.load_weights`` names without the ``model.`` prefix
(``layers.{i}.self_attn.{q,k,v,o}_proj``, ``q_norm``/``k_norm``, ``mlp.{gate,up,down}_proj``,
``input_layernorm``, ``post_attention_layernorm``, ``fc``, ``hidden_norm``, ``norm``).

Pure: :func:`build_tiny_models` returns ``{relative path: bytes}``; :func:`write_tiny_models`
is the only function that touches the file system. Dev/test infrastructure: never imported by
production code paths. Needs the rig's dependencies (numpy, tokenizers; operator/dev/pyproject.toml). The safetensors
codec is the runtime's (:mod:`specdeploy_runtime.safetensors_io`), re-exported here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from specdeploy_runtime.safetensors_io import decode_safetensors, encode_safetensors

__all__ = [
    "CORPUS", "MANIFEST", "TinySpec", "build_tiny_models", "decode_safetensors", "encode_safetensors",
    "shift_layer_ids", "train_tokenizer", "write_tiny_models",
]

MANIFEST = "tiny-models.json"
ORG = "tiny"
TARGET, TARGET_FLAT = f"{ORG}/target", f"{ORG}/target-flat"
MTP_TARGET_FLAT = f"{ORG}/mimo-mtp-flat"
DRAFTERS = {"random": f"{ORG}/dflash-random", "accept-all": f"{ORG}/dflash-accept-all",
            "shifted": f"{ORG}/dflash-shifted"}
EOS_TOKEN, MASK_TOKEN = "<|endoftext|>", "<|mask|>"
TRANSFORMERS_VERSION = "4.51.0"  # what the files claim to be written by (Qwen3 support)

# Built-in training text for the tokenizer (written for this file; no network, no data set).
CORPUS = """\
Speculative decoding lets a small drafter propose several tokens at once; the large target
model checks them in one forward pass and keeps the longest prefix it agrees with. When the
drafter guesses well, each step of the target yields more than one token, and the answer
arrives sooner without changing a single word of it: greedy outputs stay identical.
A DFlash drafter has no embedding table and no output head of its own. It borrows both from
the target, reads hidden states from a few of the target's layers, fuses them with a linear
layer and a norm, and fills a whole block of masked positions in parallel. The layer ids it
reads are written in its config; if they are off by one, it still loads, still runs, and
quietly stops being accepted. That failure makes no noise, so an operator has to measure it.
The acceptance length tau counts the tokens a target step produces: one bonus token plus the
accepted draft tokens. With three speculative tokens tau lies between one and four. A random
drafter sits near one; a drafter that always agrees reaches four.
The quick brown fox jumps over the lazy dog while the five boxing wizards jump quickly.
Pack my box with five dozen liquor jugs, then sphinx of black quartz, judge my vow.
Numbers help a tokenizer too: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096.
Kubernetes runs pods; a deployment keeps replicas ready, rolls them on a template change,
and reports how many are available. Probes ask an engine whether it is alive and ready.
Logs tell the rest of the story when something goes wrong, and events say what happened.
"""


@dataclass(frozen=True)
class TinySpec:
    """Shapes of the tiny pair (the defaults are what test-stack.md describes)."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    drafter_layers: int = 1
    block_size: int = 4
    target_layer_ids: tuple[int, ...] = (0, 2)
    max_position_embeddings: int = 4096
    init_std: float = 0.02

    def check(self) -> None:
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed {self.seed} must be in [0, 2^63)")
        if self.vocab_size < 300:
            raise ValueError("vocab_size must be >= 300 (256 byte tokens, merges, special tokens)")
        if self.num_heads * self.head_dim != self.hidden_size or self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads * head_dim must equal hidden_size; num_heads a multiple of num_kv_heads")
        ids = self.target_layer_ids
        if not ids or min(ids) < 0 or max(ids) + 1 >= self.num_layers:
            raise ValueError(f"target_layer_ids {list(ids)} must lie in [0, {self.num_layers - 1}) so that the "
                             "ids shifted by one stay inside the target")


# ----------------------------------------------------------------------------- tokenizer


def train_tokenizer(vocab_size: int, text: str = CORPUS) -> str:
    """tokenizer.json of a byte-level BPE trained on ``text``: ``vocab_size - 2`` learned entries
    (at most), then the special tokens ``<|endoftext|>`` and ``<|mask|>``. Token 0 is a plain
    byte token, never a special one (greedy decoding on all-equal logits picks it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer)
    tok.add_special_tokens([EOS_TOKEN, MASK_TOKEN])
    doc = json.loads(tok.to_str())
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _token_id(tokenizer_json: str, token: str) -> int:
    for t in json.loads(tokenizer_json)["added_tokens"]:
        if t["content"] == token:
            return int(t["id"])
    raise KeyError(token)


# ----------------------------------------------------------------------------- configs


def target_config(spec: TinySpec, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "initializer_range": spec.init_std,
        "intermediate_size": spec.intermediate_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "max_window_layers": spec.num_layers,
        "model_type": "qwen3",
        "num_attention_heads": spec.num_heads,
        "num_hidden_layers": spec.num_layers,
        "num_key_value_heads": spec.num_kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": TRANSFORMERS_VERSION,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": spec.vocab_size,
    }


def drafter_config(spec: TinySpec, eos_id: int, mask_id: int, target_layer_ids: tuple[int, ...] | None = None
                   ) -> dict[str, Any]:
    cfg = target_config(spec, eos_id)
    cfg.update({
        "architectures": ["DFlashDraftModel"],
        "block_size": spec.block_size,
        "dflash_config": {"mask_token_id": mask_id,
                          "target_layer_ids": list(spec.target_layer_ids if target_layer_ids is None
                                                   else target_layer_ids)},
        "layer_types": ["full_attention"] * spec.drafter_layers,
        "max_window_layers": spec.drafter_layers,
        "num_hidden_layers": spec.drafter_layers,
        "num_target_layers": spec.num_layers,
    })
    return dict(sorted(cfg.items()))


def shift_layer_ids(config: Mapping[str, Any], by: int = 1) -> dict[str, Any]:
    """A drafter config whose ``dflash_config.target_layer_ids`` are shifted by ``by`` (the off-by-one)."""
    out = json.loads(json.dumps(config))
    dc = out["dflash_config"]
    dc["target_layer_ids"] = [i + by for i in dc["target_layer_ids"]]
    return out


# ----------------------------------------------------------------------------- weights


def _layer_tensors(rng: np.random.Generator, spec: TinySpec, prefix: str) -> dict[str, np.ndarray]:
    h, q, kv, i = spec.hidden_size, spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim, \
        spec.intermediate_size

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(spec.init_std)

    return {
        f"{prefix}.self_attn.q_proj.weight": normal(q, h),
        f"{prefix}.self_attn.k_proj.weight": normal(kv, h),
        f"{prefix}.self_attn.v_proj.weight": normal(kv, h),
        f"{prefix}.self_attn.o_proj.weight": normal(h, q),
        f"{prefix}.self_attn.q_norm.weight": np.ones(spec.head_dim, np.float32),
        f"{prefix}.self_attn.k_norm.weight": np.ones(spec.head_dim, np.float32),
        f"{prefix}.mlp.gate_proj.weight": normal(i, h),
        f"{prefix}.mlp.up_proj.weight": normal(i, h),
        f"{prefix}.mlp.down_proj.weight": normal(h, i),
        f"{prefix}.input_layernorm.weight": np.ones(h, np.float32),
        f"{prefix}.post_attention_layernorm.weight": np.ones(h, np.float32),
    }


def target_tensors(spec: TinySpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([spec.seed, 1])
    out = {"model.embed_tokens.weight": rng.standard_normal((spec.vocab_size, spec.hidden_size), dtype=np.float32)
           * np.float32(spec.init_std)}
    for layer in range(spec.num_layers):
        out.update(_layer_tensors(rng, spec, f"model.layers.{layer}"))
    out["model.norm.weight"] = np.ones(spec.hidden_size, np.float32)
    out["lm_head.weight"] = rng.standard_normal((spec.vocab_size, spec.hidden_size), dtype=np.float32) \
        * np.float32(spec.init_std)
    return out


def mtp_target_config(spec: TinySpec, eos_id: int) -> dict[str, Any]:
    """A MiMo target with one MTP layer (see the module doc, ``tiny/mimo-mtp-flat``)."""
    cfg = target_config(spec, eos_id)
    cfg.pop("head_dim")  # Qwen2: hidden_size / num_attention_heads
    cfg.update({"architectures": ["MiMoForCausalLM"], "model_type": "qwen2", "num_nextn_predict_layers": 1})
    return dict(sorted(cfg.items()))


def mtp_target_tensors(spec: TinySpec) -> dict[str, np.ndarray]:
    """The MiMo target's weights (Hugging Face MiMo names), flat: ``model.norm`` and the MTP layer's
    ``final_layernorm`` zero, so that the target and its MTP draft both always pick token 0."""
    rng = np.random.default_rng([spec.seed, 3])
    h = spec.hidden_size

    def qwen2_layer(prefix: str) -> dict[str, np.ndarray]:
        out = {k: v for k, v in _layer_tensors(rng, spec, prefix).items() if not k.endswith(("q_norm.weight", "k_norm.weight"))}
        for proj, n in (("q_proj", spec.num_heads * spec.head_dim), ("k_proj", spec.num_kv_heads * spec.head_dim),
                        ("v_proj", spec.num_kv_heads * spec.head_dim)):
            out[f"{prefix}.self_attn.{proj}.bias"] = np.zeros(n, np.float32)
        return out

    out = {"model.embed_tokens.weight": rng.standard_normal((spec.vocab_size, h), dtype=np.float32)
           * np.float32(spec.init_std)}
    for layer in range(spec.num_layers):
        out.update(qwen2_layer(f"model.layers.{layer}"))
    out["model.norm.weight"] = np.zeros(h, np.float32)
    out["lm_head.weight"] = rng.standard_normal((spec.vocab_size, h), dtype=np.float32) * np.float32(spec.init_std)
    mtp = "model.mtp_layers.0"
    out.update(qwen2_layer(mtp))
    out.update({f"{mtp}.token_layernorm.weight": np.ones(h, np.float32), f"{mtp}.hidden_layernorm.weight": np.ones(h, np.float32),
                f"{mtp}.input_proj.weight": rng.standard_normal((h, 2 * h), dtype=np.float32) * np.float32(spec.init_std),
                f"{mtp}.final_layernorm.weight": np.zeros(h, np.float32)})
    return out


def drafter_tensors(spec: TinySpec) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([spec.seed, 2])
    out: dict[str, np.ndarray] = {}
    for layer in range(spec.drafter_layers):
        out.update(_layer_tensors(rng, spec, f"layers.{layer}"))
    h = spec.hidden_size
    out["fc.weight"] = rng.standard_normal((h, len(spec.target_layer_ids) * h), dtype=np.float32) \
        * np.float32(spec.init_std)
    out["hidden_norm.weight"] = np.ones(h, np.float32)
    out["norm.weight"] = np.ones(h, np.float32)
    return out


def _flat(tensors: Mapping[str, np.ndarray], norm: str) -> dict[str, np.ndarray]:
    out = dict(tensors)
    out[norm] = np.zeros_like(out[norm])
    return out


# ----------------------------------------------------------------------------- the set


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def build_tiny_models(spec: TinySpec = TinySpec()) -> dict[str, bytes]:
    """Every file of the tiny set, ``{"<org>/<name>/<file>": bytes}`` plus the manifest. Pure."""
    spec.check()
    tokenizer = train_tokenizer(spec.vocab_size)
    eos, mask = _token_id(tokenizer, EOS_TOKEN), _token_id(tokenizer, MASK_TOKEN)
    if mask >= spec.vocab_size:
        raise ValueError(f"the tokenizer has {mask + 1} tokens, more than vocab_size {spec.vocab_size}")
    tok_config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_max_length": spec.max_position_embeddings,
        "pad_token": EOS_TOKEN,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    gen_config = {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos,
                  "transformers_version": TRANSFORMERS_VERSION}
    tgt_cfg = target_config(spec, eos)
    tgt = target_tensors(spec)
    dft = drafter_tensors(spec)
    meta = {"format": "pt", "specdeploy.seed": str(spec.seed)}
    target_files = {"config.json": _json(tgt_cfg), "generation_config.json": _json(gen_config),
                    "tokenizer.json": tokenizer.encode(), "tokenizer_config.json": _json(tok_config)}
    files: dict[str, bytes] = {}
    for repo, weights in ((TARGET, tgt), (TARGET_FLAT, _flat(tgt, "model.norm.weight"))):
        for name, data in target_files.items():
            files[f"{repo}/{name}"] = data
        files[f"{repo}/model.safetensors"] = encode_safetensors(weights, metadata=meta)
    dcfg = drafter_config(spec, eos, mask)
    drafters = {
        "random": (dcfg, dft),
        "accept-all": (dcfg, _flat(dft, "norm.weight")),
        "shifted": (shift_layer_ids(dcfg), dft),
    }
    for kind, (cfg, weights) in drafters.items():
        repo = DRAFTERS[kind]
        files[f"{repo}/config.json"] = _json(cfg)
        files[f"{repo}/model.safetensors"] = encode_safetensors(weights, metadata=meta)
    for name, data in target_files.items():
        files[f"{MTP_TARGET_FLAT}/{name}"] = data
    files[f"{MTP_TARGET_FLAT}/config.json"] = _json(mtp_target_config(spec, eos))
    files[f"{MTP_TARGET_FLAT}/model.safetensors"] = encode_safetensors(mtp_target_tensors(spec), metadata=meta)
    manifest = {
        "seed": spec.seed,
        "spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(spec).items()},
        "tokens": {"eos": eos, "mask": mask},
        "models": sorted({TARGET, TARGET_FLAT, MTP_TARGET_FLAT, *DRAFTERS.values()}),
        # drafter kind -> the target it is meant for, and what greedy speculation should show
        "pairs": {
            "random": {"target": TARGET, "drafter": DRAFTERS["random"], "expect": "tau near 1"},
            "accept-all": {"target": TARGET_FLAT, "drafter": DRAFTERS["accept-all"],
                           "expect": f"tau = {spec.block_size} (every draft token accepted)"},
            "shifted": {"target": TARGET, "drafter": DRAFTERS["shifted"],
                        "expect": "target_layer_ids shifted by one: loads and runs, acceptance drops"},
        },
        # targets that draft for themselves (method mtp): no drafter
        "self_drafting": {"mtp-flat": {"target": MTP_TARGET_FLAT, "method": "mtp",
                                       "expect": "tau = 2 at one MTP token (every draft token accepted)"}},
    }
    files[MANIFEST] = _json(manifest)
    return files


def write_tiny_models(directory: str | os.PathLike[str], spec: TinySpec = TinySpec()) -> list[Path]:
    """Write :func:`build_tiny_models` under ``directory`` (each file replaced atomically); the paths written."""
    root = Path(directory)
    written = []
    for rel, data in sorted(build_tiny_models(spec).items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        os.replace(part, path)
        written.append(path)
    return written
