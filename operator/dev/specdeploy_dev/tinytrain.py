"""``train-tiny-drafter``: a tiny target that has learned something, and a DFlash drafter distilled from it, on CPU.

Writes, next to what ``specdeploy dev tiny-models DIR`` writes (``DIR/<org>/<name>/``, served by the
hub stand-in), three repositories and a manifest:

=============================  =================================================================
``tiny/lang-target``           Qwen3ForCausalLM, 6 layers (hidden 128, the tiny tokenizer), trained
                               for a fixed number of steps on a synthetic language, its adjacent
                               layers made to differ (below).
``tiny/lang-dflash``           DFlashDraftModel, 1 layer, block 4, ``target_layer_ids`` [1, 3] (the
                               canonical DFlash layout for 6 layers), distilled from the target's
                               greedy output with the DFlash block objective.
``tiny/lang-dflash-shifted``   the same weights with ``target_layer_ids`` [2, 4]: the off-by-one.
``tiny-trained.json``          the spec, the input digest, losses, training seconds, adjacent layers'
                               cosine and the offline replay of greedy speculative decoding (tau,
                               per position) with the right ids, the shifted ones and ids - 1 (what
                               an engine that forgets its +1 reads); ``prompts``: texts of the language.
=============================  =================================================================

With ``method="eagle3"`` (``train-tiny-drafter --method eagle3``) the same target, language and greedy
data train an EAGLE-3 head instead (:mod:`specdeploy_dev.tinyeagle`): ``tiny/lang-eagle3``
(LlamaForCausalLMEagle3, ``eagle_aux_hidden_state_layer_ids`` [1, 3, 5], a 64-token draft vocabulary
with ``d2t``), ``tiny/lang-eagle3-shifted`` ([2, 4, 6]), ``tiny/lang-eagle3-shifted-down`` ([0, 2, 4]) and
``tiny-trained-eagle3.json``, in their own cache entry (the method is part of the digest).

With ``drafter_seed=N`` (``train-tiny-drafter --drafter-seed N``) a second drafter of the same target: the
language and the target come from ``seed`` (the same bytes), the drafter's initial weights, training
sequences and batches from N; its repositories and manifest carry the seed (``tiny/lang-dflash-seedN``,
``tiny/lang-dflash-shifted-seedN``, ``tiny-trained-seedN.json``; ``tiny/lang-eagle3-seedN`` ...), so both
drafters sit side by side in one models directory (the canary rollout e2e promotes one over the other).

**The language.** ``words`` whole-word tokens of the tiny tokenizer (each round-trips: the text
``" w1 w2 ..."`` tokenizes back to the same ids) and a seeded second-order Markov chain: every
pair of words (a, b) has three successors with probabilities 0.55 / 0.3 / 0.15, the likeliest
being ``perm_b[a]`` for a permutation per b, the second a function of b alone. So the greedy map of the ``words**2`` states is a
bijection: greedy output runs along long cycles (no repetition within a completion) and, given
the bonus token b, the next token is equally likely to be any word: a drafter must read the
previous token a from the target's hidden states. (With a random successor table the greedy map
falls into a few short cycles where b alone predicts the next token, and shifted ids cost
nothing: measured tau 3.81 with the right ids, 3.82 shifted. The random tiny target's output is
repetitive in the same way.)

**Why the shift costs.** The drafter needs the identity of the token before the bonus, and a
small residual network carries it through every layer in one basis: trained on the language
alone, adjacent layers' centred outputs sit at cosine 0.90-0.99 and a drafter trained on
layers [1, 3] reads [2, 4] almost as well (offline tau 3.73 -> 3.60). Deep layers of large
models rewrite much more of the stream per layer, which is what makes real drafters collapse
when fed their neighbours. So once the language is learned (from ``decorrelate_from`` of the
steps on), the target's loss adds ``decorrelate`` x the mean squared cosine between adjacent
layers' centred outputs: each layer re-encodes what it passes on, the language is learned as
well as without it (loss 1.05 against 1.06), adjacent layers end near cosine 0, and the
shifted ids cost most of tau (measured: ``tiny-trained.json`` ``replay``,
docs/benchmarks.md). Weaker penalties (0.05-0.3, or from the first step) gave partial and
seed-dependent drops or a target that did not learn the language.

**Training.** Target: next-token cross-entropy on freshly sampled sequences (plus the penalty
above). Drafter: sequences
of the target's own greedy output (a sampled prompt, then greedy), the target's layer outputs at
``target_layer_ids`` captured before the final norm (what vLLM feeds the drafter), random anchors
per sequence packed into one forward (block k sees the context before its anchor and itself,
bidirectionally), cross-entropy on block positions 1..B-1 with weights decaying by position;
target embeddings and ``lm_head`` frozen (the drafter has none of its own). Adam, fixed step
budgets, ``torch.manual_seed`` and a fixed thread count: the same inputs give the same bytes.

**Cache.** The output is keyed by a digest of its inputs (the spec, this module's, the reference
forward's and the tiny-models generator's source, the torch version): a rerun copies
``$SPECDEPLOY_CACHE`` (default ``~/.cache/specdeploy``) ``/tiny-trained/<digest>/`` in seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

ORG = "tiny"
TARGET, DRAFTER, SHIFTED = f"{ORG}/lang-target", f"{ORG}/lang-dflash", f"{ORG}/lang-dflash-shifted"
EAGLE3, EAGLE3_SHIFTED, EAGLE3_SHIFTED_DOWN = f"{ORG}/lang-eagle3", f"{ORG}/lang-eagle3-shifted", \
    f"{ORG}/lang-eagle3-shifted-down"
MANIFEST = "tiny-trained.json"
METHODS = ("dflash", "eagle3")


def manifest_name(spec: "TrainSpec") -> str:
    name = MANIFEST if spec.method == "dflash" else f"tiny-trained-{spec.method}.json"
    return name if spec.drafter_seed is None else name.replace(".json", f"-seed{spec.drafter_seed}.json")


def drafter_repo(spec: "TrainSpec", repo: str) -> str:
    """A drafter repository's name: ``tiny/lang-dflash``, or ``tiny/lang-dflash-seed1`` for ``drafter_seed=1``."""
    return repo if spec.drafter_seed is None else f"{repo}-seed{spec.drafter_seed}"


@dataclass(frozen=True)
class TrainSpec:
    seed: int = 0
    words: int = 16
    target_layers: int = 6
    intermediate_size: int = 256
    seq_len: int = 64
    target_steps: int = 500
    target_batch: int = 16
    target_lr: float = 1e-2
    prompt_len: int = 8
    drafter_sequences: int = 1536
    drafter_steps: int = 300
    drafter_batch: int = 32
    anchors: int = 8
    drafter_lr: float = 3e-3
    block_size: int = 4
    drafter_layers: int = 1
    target_layer_ids: tuple[int, ...] = (1, 3)
    eval_prompts: int = 48
    threads: int = 1
    # The embeddings stay at their small initial scale: trained freely they grow until the
    # residual stream is mostly the token's embedding at every layer (norm ~300 against updates
    # of ~30; adjacent layers' outputs at cosine 0.93-0.98), a drafter then reads the previous
    # token from any layer and shifted ids cost nothing (measured: tau 3.63 right, 3.58 shifted).
    # Frozen, the layers' own updates carry the residual stream, as in a large model.
    freeze_embeddings: bool = True
    # Adjacent layers made to differ (see the module doc, "Why the shift costs"): from
    # ``decorrelate_from`` x target_steps on (ramped up over a fifth of the steps, once the
    # language is learned) the target's loss adds ``decorrelate`` x the mean squared cosine
    # between every pair of adjacent layers' centred outputs.
    decorrelate: float = 1.0
    decorrelate_from: float = 0.3
    # which drafter: "dflash" (tiny/lang-dflash*, tiny-trained.json) or "eagle3" (tiny/lang-eagle3*,
    # tiny-trained-eagle3.json; specdeploy_dev.tinyeagle), on the same target
    method: str = "dflash"
    # EAGLE-3: vLLM's aux ids (id L = the output of layer L - 1, id 0 the embeddings), three as every released
    # EAGLE-3 head has (vLLM 0.32 sizes ``fc`` for 3 states unless eagle_config names the ids:
    # llama_eagle3.LlamaModel.__init__), evenly spread so that ids + 1 and ids - 1 read none of them; the
    # unrolled depth (= speculative tokens); the draft vocabulary (its own lm_head, mapped by d2t)
    eagle_aux_ids: tuple[int, ...] = (1, 3, 5)
    eagle_depth: int = 3
    eagle_steps: int = 300
    eagle_batch: int = 32
    eagle_lr: float = 3e-3
    draft_vocab_size: int = 64
    # Another drafter of the same target: ``seed`` makes the language and the target, ``drafter_seed`` (None: ``seed``)
    # the drafter's initial weights, training data and batches. Its repositories carry the seed
    # (``tiny/lang-dflash-seed1``, ``tiny/lang-dflash-shifted-seed1``, ``tiny-trained-seed1.json``); the target
    # repository is the same bytes as ``seed``'s (``target_sha256`` in the manifest)
    drafter_seed: int | None = None

    @property
    def dseed(self) -> int:
        return self.seed if self.drafter_seed is None else self.drafter_seed

    def digest(self) -> str:
        h = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode())
        from specdeploy_runtime import dflash_ref

        from . import tinyeagle, tinymodels

        for src in (Path(__file__), Path(dflash_ref.__file__), Path(tinymodels.__file__), Path(tinyeagle.__file__)):
            h.update(src.read_bytes())
        import torch

        h.update(torch.__version__.encode())
        return h.hexdigest()[:20]


# ----------------------------------------------------------------------------- the language


@dataclass
class Language:
    words: np.ndarray  # token ids of the words [W]
    succ: np.ndarray  # [W, W, 3] successor word indices per (a, b)
    probs: np.ndarray = field(default_factory=lambda: np.array([0.55, 0.3, 0.15]))

    def sample(self, rng: np.random.Generator, n: int, length: int) -> np.ndarray:
        """n sequences of word *indices*, [n, length]."""
        w = len(self.words)
        out = np.empty((n, length), dtype=np.int64)
        out[:, :2] = rng.integers(0, w, (n, 2))
        cum = np.cumsum(self.probs)
        for t in range(2, length):
            choice = np.searchsorted(cum, rng.random(n))
            out[:, t] = self.succ[out[:, t - 2], out[:, t - 1], choice]
        return out


def word_tokens(tokenizer_json: str) -> list[tuple[int, str]]:
    """Whole-word tokens (``Ġ`` + letters) whose text round-trips to the same single id."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    out = []
    for piece, tid in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        if piece.startswith("Ġ") and piece[1:].isalpha() and len(piece) >= 4:
            text = " " + piece[1:]
            if tok.encode(text).ids == [tid]:
                out.append((tid, text))
    return out


def build_language(spec: TrainSpec, tokenizer_json: str) -> tuple[Language, dict[int, str]]:
    cands = word_tokens(tokenizer_json)
    if len(cands) < spec.words:
        raise ValueError(f"the tokenizer has {len(cands)} whole-word tokens, fewer than words={spec.words}")
    rng = np.random.default_rng([spec.seed, 11])
    pick = sorted(rng.choice(len(cands), spec.words, replace=False).tolist())
    chosen = [cands[i] for i in pick]
    w = spec.words
    # The likeliest successor of (a, b) is f(a), f one cycle through all the words: the token two
    # back decides. Greedy output is then two interleaved walks along the cycle whose phase
    # difference the prompt sets, so the bonus token b alone says nothing about the next token
    # (any of the w words, depending on the phase): a drafter must read a, the token before the
    # bonus, from the target's hidden states. The second likeliest, g(b), depends on b alone.
    cycle = rng.permutation(w)
    f = np.empty(w, dtype=np.int64)
    f[cycle] = np.roll(cycle, -1)
    g = rng.integers(0, w, w)
    succ = np.empty((w, w, 3), dtype=np.int64)
    for a in range(w):
        for b in range(w):
            second = g[b] if g[b] != f[a] else (f[a] + 1) % w
            third = rng.choice([x for x in range(w) if x not in (f[a], second)])
            succ[a, b] = [f[a], second, third]
    return Language(np.array([t for t, _ in chosen]), succ), dict(chosen)


# ----------------------------------------------------------------------------- training


def _cosine(step: int, total: int, lr: float, warmup: int = 10) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * p)))


def adjacent_cosine(outs) -> "Any":
    """Per-token cosine between adjacent layers' centred outputs: [L-1, N*T]."""
    import torch

    h = torch.stack([o.reshape(-1, o.shape[-1]) for o in outs])  # [L, M, H]
    h = h - h.mean(1, keepdim=True)
    h = h / (h.norm(dim=-1, keepdim=True) + 1e-6)
    return (h[:-1] * h[1:]).sum(-1)


def train_target(spec: TrainSpec, target, lang: Language, log: Callable[[str], None]) -> dict:
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng([spec.seed, 21])
    if spec.freeze_embeddings:  # see TrainSpec.freeze_embeddings
        target.model.embed_tokens.weight.requires_grad_(False)
    opt = torch.optim.Adam([p for p in target.parameters() if p.requires_grad], lr=spec.target_lr)
    words = torch.from_numpy(lang.words)
    losses = []
    t0 = time.perf_counter()
    target.train()
    for step in range(spec.target_steps):
        x = words[torch.from_numpy(lang.sample(rng, spec.target_batch, spec.seq_len))]
        logits, outs, _ = target(x)
        loss = F.cross_entropy(logits[:, 1:-1].reshape(-1, logits.shape[-1]), x[:, 2:].reshape(-1))
        if spec.decorrelate:
            cos = adjacent_cosine(outs)
            start = spec.decorrelate_from * spec.target_steps
            ramp = min(1.0, max(0.0, (step - start) / max(1.0, 0.2 * spec.target_steps)))
            loss = loss + spec.decorrelate * ramp * cos.pow(2).mean()
        for g in opt.param_groups:
            g["lr"] = _cosine(step, spec.target_steps, spec.target_lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 20 == 0 or step == spec.target_steps - 1:
            log(f"target step {step + 1}/{spec.target_steps}: loss {losses[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
    target.eval()
    # the chain's own entropy: the loss a perfect model reaches
    p = lang.probs
    return {"final_loss": round(float(np.mean(losses[-10:])), 4), "floor": round(float(-(p * np.log(p)).sum()), 4),
            "seconds": round(time.perf_counter() - t0, 1)}


def greedy_data(spec: TrainSpec, target, lang: Language, n: int, rng_key: int, seed: int | None = None):
    """Tokens [n, T]: a sampled prompt + the target's greedy continuation (``seed``: the sampling's, default spec.seed)."""
    import torch

    rng = np.random.default_rng([spec.seed if seed is None else seed, rng_key])
    words = torch.from_numpy(lang.words)
    prompts = words[torch.from_numpy(lang.sample(rng, n, spec.prompt_len))]
    seqs = []
    for i in range(0, n, 2048):  # one batch: 56 forwards of [n, 1] with the KV cache
        seqs.append(target.greedy(prompts[i:i + 2048], spec.seq_len - spec.prompt_len))
    return torch.cat(seqs)


def target_features(target, tokens, ids) -> "Any":
    import torch

    feats = []
    with torch.no_grad():
        for i in range(0, tokens.shape[0], 128):
            _, outs, _ = target(tokens[i:i + 128])
            feats.append(target.features(outs, ids))
    return torch.cat(feats)


def train_drafter(spec: TrainSpec, drafter, target, tokens, feats, mask_id: int, log: Callable[[str], None]) -> dict:
    import torch
    import torch.nn.functional as F

    b, k, big_t = spec.block_size, spec.anchors, tokens.shape[1]
    gen = torch.Generator().manual_seed(spec.dseed + 31)
    emb = target.model.embed_tokens.weight.detach()
    head = target.lm_head.weight.detach()
    opt = torch.optim.Adam(drafter.parameters(), lr=spec.drafter_lr)
    pos_w = torch.tensor([0.8 ** j for j in range(b - 1)])
    losses = []
    t0 = time.perf_counter()
    drafter.train()
    n = tokens.shape[0]
    lo, hi = spec.prompt_len - 1, big_t - b  # anchors: the bonus at a, labels a+1..a+b-1, context < a
    for step in range(spec.drafter_steps):
        idx = torch.randint(0, n, (spec.drafter_batch,), generator=gen)
        x, f = tokens[idx], feats[idx]
        anchors = torch.randint(lo, hi + 1, (spec.drafter_batch, k), generator=gen)  # [N, K]
        q_pos = (anchors[:, :, None] + torch.arange(b)).reshape(spec.drafter_batch, k * b)  # [N, Q]
        block_ids = torch.full((spec.drafter_batch, k, b), mask_id)
        block_ids[:, :, 0] = torch.gather(x, 1, anchors)
        block = F.embedding(block_ids.reshape(spec.drafter_batch, k * b), emb)
        labels = torch.gather(x, 1, q_pos.clamp(max=big_t - 1)).view(spec.drafter_batch, k, b)[:, :, 1:]
        ctx = drafter.fuse(f)
        ctx_pos = torch.arange(big_t).expand(spec.drafter_batch, big_t)
        a_q = anchors.repeat_interleave(b, dim=1)  # [N, Q] the anchor of each query
        ctx_visible = ctx_pos[:, None, :] < a_q[:, :, None]
        blk = torch.arange(k).repeat_interleave(b)
        block_visible = (blk[:, None] == blk[None, :]).expand(spec.drafter_batch, k * b, k * b)
        hidden, _ = drafter(block, q_pos, ctx, ctx_pos, ctx_visible, block_visible)
        logits = F.linear(hidden.view(spec.drafter_batch, k, b, -1)[:, :, 1:], head)
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
        loss = (ce.view(-1, b - 1) * pos_w).sum(-1).mean() / pos_w.sum()
        for g in opt.param_groups:
            g["lr"] = _cosine(step, spec.drafter_steps, spec.drafter_lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == spec.drafter_steps - 1:
            log(f"drafter step {step + 1}/{spec.drafter_steps}: loss {losses[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
    drafter.eval()
    return {"final_loss": round(float(np.mean(losses[-10:])), 4), "seconds": round(time.perf_counter() - t0, 1)}


def replay(drafter, target, tokens, feats, mask_id: int, block_size: int, prompt_len: int) -> dict:
    """Offline greedy speculative decoding on sequences the target generated greedily: from each
    position S (the bonus at S, the context < S) the drafter proposes B-1 tokens; the accepted
    prefix is where they agree with the target's greedy tokens. tau = 1 + mean accepted."""
    import torch
    import torch.nn.functional as F

    emb, head = target.model.embed_tokens.weight, target.lm_head.weight
    steps, accepted = 0, 0
    per_pos = np.zeros(block_size - 1)
    with torch.no_grad():
        for x, f in zip(tokens, feats):
            s = prompt_len  # the first bonus: the target's first greedy token
            ctx = drafter.fuse(f[None])
            while s + block_size <= x.shape[0]:
                ids = torch.tensor([int(x[s])] + [mask_id] * (block_size - 1))
                q_pos = torch.arange(s, s + block_size)[None]
                ctx_pos = torch.arange(s)[None]
                hidden, _ = drafter(F.embedding(ids, emb)[None], q_pos, ctx[:, :s], ctx_pos)
                draft = F.linear(hidden[0, 1:], head).argmax(-1)
                ok = (draft == x[s + 1:s + block_size]).long()
                acc = int(ok.cumprod(0).sum())
                per_pos[:acc] += 1
                steps += 1
                accepted += acc
                s += acc + 1
    return {"tau": round(1 + accepted / steps, 4), "per_position": [round(float(v / steps), 4) for v in per_pos],
            "drafts": steps}


# ----------------------------------------------------------------------------- the whole run


def build(spec: TrainSpec = TrainSpec(), log: Callable[[str], None] = print) -> dict[str, bytes]:
    """Train and return every file, ``{"<org>/<name>/<file>": bytes}`` plus the manifest."""
    import torch

    from . import tinymodels as tm

    from specdeploy_runtime.dflash_ref import DFlashDrafterRef, Qwen3Target, Shape, init_weights, state_arrays

    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    t_all = time.perf_counter()
    tiny = tm.TinySpec(seed=spec.seed, num_layers=spec.target_layers, intermediate_size=spec.intermediate_size,
                       drafter_layers=spec.drafter_layers, block_size=spec.block_size,
                       target_layer_ids=tuple(spec.target_layer_ids))
    tiny.check()
    base = tm.build_tiny_models(tm.TinySpec(seed=spec.seed))
    tok_json = base[f"{tm.TARGET}/tokenizer.json"].decode()
    eos, mask = (json.loads(base[tm.MANIFEST])["tokens"][k] for k in ("eos", "mask"))
    lang, word_text = build_language(spec, tok_json)
    tcfg = tm.target_config(tiny, eos)
    dcfg = tm.drafter_config(tiny, eos, mask)

    target = Qwen3Target(Shape.from_config(tcfg))
    init_weights(target, tiny.init_std, torch.Generator().manual_seed(spec.seed + 1))
    log(f"train-tiny-drafter: target {spec.target_layers} layers, {sum(p.numel() for p in target.parameters())} "
        f"parameters; language of {spec.words} words (order-2 Markov); {spec.threads} thread(s)")
    t_stats = train_target(spec, target, lang, log)
    meta = {"format": "pt", "specdeploy.seed": str(spec.seed), "specdeploy.trained": "train-tiny-drafter"}
    target_st = tm.encode_safetensors(state_arrays(target), metadata=meta)
    # continue with the bf16-rounded weights the engine will load
    with torch.no_grad():
        for name, arr in tm.decode_safetensors(target_st).items():
            dict(target.named_parameters())[name].copy_(torch.from_numpy(arr.copy()))
    for p in target.parameters():
        p.requires_grad_(False)

    if spec.method not in METHODS:
        raise ValueError(f"method {spec.method!r} is not one of {list(METHODS)}")
    if spec.method == "eagle3":
        return _build_eagle3(spec, target, t_stats, lang, word_text, base, tcfg, eos, mask, meta, target_st, t_all, log)
    t1 = time.perf_counter()
    tokens = greedy_data(spec, target, lang, spec.drafter_sequences, 41, spec.dseed)
    feats = target_features(target, tokens, spec.target_layer_ids)
    gen_s = round(time.perf_counter() - t1, 1)
    log(f"greedy data: {tokens.shape[0]} sequences of {tokens.shape[1]} tokens, features {tuple(feats.shape)} ({gen_s} s)")

    drafter = DFlashDrafterRef(Shape.from_config(dcfg), len(spec.target_layer_ids))
    init_weights(drafter, tiny.init_std, torch.Generator().manual_seed(spec.dseed + 2))
    d_stats = train_drafter(spec, drafter, target, tokens, feats, mask, log)
    drafter_st = tm.encode_safetensors(state_arrays(drafter), metadata=drafter_meta(spec, meta))
    with torch.no_grad():
        for name, arr in tm.decode_safetensors(drafter_st).items():
            dict(drafter.named_parameters())[name].copy_(torch.from_numpy(arr.copy()))

    ev_tokens = greedy_data(spec, target, lang, spec.eval_prompts, 51)
    shifted_ids = [i + 1 for i in spec.target_layer_ids]
    # what an engine that forgets its +1 reads (the input of each layer: the output of id - 1)
    minus_one_ids = [i - 1 for i in spec.target_layer_ids]
    ev = {}
    with torch.no_grad():
        _, outs, _ = target(ev_tokens)
        cosines = [round(float(c), 3) for c in adjacent_cosine(outs).mean(1)]
        for name, ids in (("right_ids", spec.target_layer_ids), ("shifted_ids", shifted_ids),
                          ("minus_one_ids", minus_one_ids)):
            if min(ids) < 0:
                continue
            ev[name] = {"ids": list(ids), **replay(drafter, target, ev_tokens, target.features(outs, ids), mask,
                                                   spec.block_size, spec.prompt_len)}
    log(f"adjacent layers' centred outputs, cosine: {cosines}")
    log(f"offline replay (greedy, {spec.block_size - 1} speculative tokens): " + "; ".join(
        f"ids {r['ids']}: tau {r['tau']} {r['per_position']}" for r in ev.values()))
    prompts = language_prompts(spec, lang, word_text)
    files = target_files(base, tcfg, target_st)
    drafter, shifted = drafter_repo(spec, DRAFTER), drafter_repo(spec, SHIFTED)
    files[f"{drafter}/config.json"] = tm._json(dcfg)
    files[f"{drafter}/model.safetensors"] = drafter_st
    files[f"{shifted}/config.json"] = tm._json(tm.shift_layer_ids(dcfg))
    files[f"{shifted}/model.safetensors"] = drafter_st
    manifest = {
        "method": "dflash",
        "spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(spec).items()},
        "digest": spec.digest(),
        "torch": torch.__version__,
        "tokens": {"eos": eos, "mask": mask},
        "models": [TARGET, drafter, shifted],
        "target_sha256": hashlib.sha256(target_st).hexdigest(),
        "target_layer_ids": list(spec.target_layer_ids), "shifted_layer_ids": shifted_ids,
        "language": {"words": [word_text[int(t)] for t in lang.words], "order": 2,
                     "successor_probabilities": lang.probs.tolist()},
        "prompts": prompts,
        "training": {"target": t_stats, "greedy_data_s": gen_s, "drafter": d_stats,
                     "total_s": round(time.perf_counter() - t_all, 1)},
        "replay": ev,
        "adjacent_layer_cosine": cosines,
        "pairs": {"trained": {"target": TARGET, "drafter": drafter},
                  "shifted": {"target": TARGET, "drafter": shifted}},
    }
    files[manifest_name(spec)] = tm._json(manifest)
    return files


def drafter_meta(spec: TrainSpec, meta: dict[str, str]) -> dict[str, str]:
    """The drafter's safetensors metadata: the target's, plus its own seed when it has one."""
    return meta if spec.drafter_seed is None else {**meta, "specdeploy.drafter_seed": str(spec.drafter_seed)}


def language_prompts(spec: TrainSpec, lang: Language, word_text: dict[int, str]) -> list[str]:
    """Texts of the language for the engine: prompts the target continues in-language."""
    rng = np.random.default_rng([spec.seed, 61])
    prompt_words = lang.sample(rng, 8, spec.prompt_len)
    return ["".join(word_text[int(lang.words[w])] for w in row).lstrip() for row in prompt_words]


def target_files(base: dict[str, bytes], tcfg: dict, target_st: bytes) -> dict[str, bytes]:
    from . import tinymodels as tm

    files: dict[str, bytes] = {}
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        files[f"{TARGET}/{name}"] = base[f"{tm.TARGET}/{name}"]
    files[f"{TARGET}/config.json"] = tm._json(tcfg)
    files[f"{TARGET}/model.safetensors"] = target_st
    return files


def eagle3_config(spec: TrainSpec, tcfg: dict, aux_ids: list[int]) -> dict[str, Any]:
    """The EAGLE-3 drafter's config.json as SpecForge/speculators-trained Llama heads ship it (vLLM:
    ``LlamaForCausalLMEagle3`` -> ``llama_eagle3.Eagle3LlamaForCausalLM``), ids at the top level."""
    cfg = {k: tcfg[k] for k in ("bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size",
                                "max_position_embeddings", "num_attention_heads", "num_key_value_heads",
                                "rms_norm_eps", "rope_theta", "vocab_size", "transformers_version")}
    cfg.update({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "attention_bias": False,
                "intermediate_size": spec.intermediate_size, "num_hidden_layers": 1, "rope_scaling": None,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                "draft_vocab_size": spec.draft_vocab_size, "target_hidden_size": tcfg["hidden_size"],
                "eagle_aux_hidden_state_layer_ids": list(aux_ids)})
    return dict(sorted(cfg.items()))


def _build_eagle3(spec: TrainSpec, target, t_stats: dict, lang: Language, word_text: dict[int, str],
                  base: dict[str, bytes], tcfg: dict, eos: int, mask: int, meta: dict, target_st: bytes,
                  t_all: float, log: Callable[[str], None]) -> dict[str, bytes]:
    """The EAGLE-3 half of :func:`build` (specdeploy_dev.tinyeagle): the same target, greedy data and
    captured states, a 1-layer EAGLE-3 head trained on them, the offline replay with the right ids, ids + 1
    and ids - 1, and the repositories."""
    import torch

    from . import tinyeagle as te
    from . import tinymodels as tm

    aux = list(spec.eagle_aux_ids)
    if aux != sorted(set(aux)) or min(aux) < 1 or max(aux) + 1 > spec.target_layers:
        raise ValueError(f"eagle_aux_ids {aux} must be increasing and lie in [1, {spec.target_layers - 1}] so that "
                         "ids - 1 and ids + 1 stay inside the target (vLLM sorts and deduplicates them)")

    def feats_of(tokens, ids):  # vLLM's id L: the output of layer L - 1, id 0 the embeddings
        out = []
        with torch.no_grad():
            for i in range(0, tokens.shape[0], 128):
                x = tokens[i:i + 128]
                _, outs, _ = target(x)
                states = [target.model.embed_tokens(x)] + list(outs)
                out.append(torch.cat([states[j] for j in ids], dim=-1))
        return torch.cat(out)

    t1 = time.perf_counter()
    tokens = greedy_data(spec, target, lang, spec.drafter_sequences, 41, spec.dseed)
    feats = feats_of(tokens, aux)
    gen_s = round(time.perf_counter() - t1, 1)
    log(f"greedy data: {tokens.shape[0]} sequences of {tokens.shape[1]} tokens, features {tuple(feats.shape)} ({gen_s} s)")
    draft_ids, d2t, t2d = te.draft_vocabulary([int(w) for w in lang.words], tcfg["vocab_size"], spec.draft_vocab_size)
    shape = te.EagleShape(hidden_size=tcfg["hidden_size"], num_heads=tcfg["num_attention_heads"],
                          num_kv_heads=tcfg["num_key_value_heads"], head_dim=tcfg["head_dim"],
                          intermediate_size=spec.intermediate_size, num_aux=len(aux),
                          draft_vocab_size=len(draft_ids), rms_norm_eps=tcfg["rms_norm_eps"],
                          rope_theta=float(tcfg["rope_theta"]))
    drafter = te.Eagle3DrafterRef(shape)
    from specdeploy_runtime.dflash_ref import init_weights

    init_weights(drafter, 0.02, torch.Generator().manual_seed(spec.dseed + 3))
    with torch.no_grad():  # the head starts as the target's rows of the draft vocabulary
        drafter.lm_head.weight.copy_(target.lm_head.weight[torch.from_numpy(draft_ids)])
    d_stats = te.train(drafter, target, tokens, feats, draft_ids, steps=spec.eagle_steps, batch=spec.eagle_batch,
                       lr=spec.eagle_lr, depth=spec.eagle_depth, prompt_len=spec.prompt_len, seed=spec.dseed + 33,
                       lr_at=_cosine, log=log)
    drafter_st = tm.encode_safetensors(te.state_arrays(drafter, d2t, t2d), metadata=drafter_meta(spec, meta))
    with torch.no_grad():  # evaluate the bf16-rounded weights the engine loads
        own = dict(drafter.named_parameters())
        for name, arr in tm.decode_safetensors(drafter_st).items():
            if name in own:
                own[name].copy_(torch.from_numpy(arr.copy()))

    ev_tokens = greedy_data(spec, target, lang, spec.eval_prompts, 51)
    shifted, down = [i + 1 for i in aux], [i - 1 for i in aux]
    ev = {}
    for name, ids in (("right_ids", aux), ("shifted_ids", shifted), ("minus_one_ids", down)):
        ev[name] = {"ids": ids, **te.replay(drafter, target, ev_tokens, feats_of(ev_tokens, ids), draft_ids,
                                             spec.eagle_depth, spec.prompt_len)}
    log(f"offline replay (greedy, {spec.eagle_depth} speculative tokens): " + "; ".join(
        f"ids {r['ids']}: tau {r['tau']} {r['per_position']}" for r in ev.values()))

    files = target_files(base, tcfg, target_st)
    eagle3, eagle3_shifted, eagle3_down = (drafter_repo(spec, r) for r in (EAGLE3, EAGLE3_SHIFTED, EAGLE3_SHIFTED_DOWN))
    for repo, ids in ((eagle3, aux), (eagle3_shifted, shifted), (eagle3_down, down)):
        files[f"{repo}/config.json"] = tm._json(eagle3_config(spec, tcfg, ids))
        files[f"{repo}/model.safetensors"] = drafter_st
    manifest = {
        "method": "eagle3",
        "spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(spec).items()},
        "digest": spec.digest(),
        "torch": torch.__version__,
        "tokens": {"eos": eos, "mask": mask},
        "models": [TARGET, eagle3, eagle3_shifted, eagle3_down],
        "target_sha256": hashlib.sha256(target_st).hexdigest(),
        "aux_layer_ids": aux, "shifted_layer_ids": shifted, "shifted_down_layer_ids": down,
        "draft_vocab": {"size": len(draft_ids), "target_ids": draft_ids.tolist()},
        "language": {"words": [word_text[int(t)] for t in lang.words], "order": 2,
                     "successor_probabilities": lang.probs.tolist()},
        "prompts": language_prompts(spec, lang, word_text),
        "training": {"target": t_stats, "greedy_data_s": gen_s, "drafter": d_stats,
                     "total_s": round(time.perf_counter() - t_all, 1)},
        "replay": ev,
        "pairs": {"trained": {"target": TARGET, "drafter": eagle3},
                  "shifted": {"target": TARGET, "drafter": eagle3_shifted},
                  "shifted_down": {"target": TARGET, "drafter": eagle3_down}},
    }
    files[manifest_name(spec)] = tm._json(manifest)
    return files


def cache_root() -> Path:
    return Path(os.environ.get("SPECDEPLOY_CACHE") or Path.home() / ".cache" / "specdeploy") / "tiny-trained"


def write(directory: str | os.PathLike[str], spec: TrainSpec = TrainSpec(), *, use_cache: bool = True,
          log: Callable[[str], None] = print) -> dict:
    """Train (or copy from the cache) into ``directory``; returns the manifest (plus ``cached``)."""
    root = Path(directory)
    key = spec.digest()
    cached = cache_root() / key
    mname = manifest_name(spec)
    hit = use_cache and (cached / mname).is_file()
    if not hit:
        files = build(spec, log)
        if use_cache:
            tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            for rel, data in files.items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)
            if not (cached / mname).is_file():  # a half-written entry of an older run goes; a complete one stays
                shutil.rmtree(cached, ignore_errors=True)
            try:
                os.replace(tmp, cached)
            except OSError:  # another process (a parallel test worker) trained the same spec first: keep its entry
                if not (cached / mname).is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
    else:
        files = {p.relative_to(cached).as_posix(): p.read_bytes() for p in sorted(cached.rglob("*")) if p.is_file()}
    for rel, data in sorted(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        os.replace(part, path)
    manifest = json.loads(files[mname])
    manifest["cached"] = bool(hit)
    return manifest


def quick_spec(**kw: Any) -> TrainSpec:
    """A few steps of everything (tests of the pipeline, determinism)."""
    base = TrainSpec(target_steps=3, drafter_steps=3, drafter_sequences=64, target_batch=8, drafter_batch=8,
                     eval_prompts=4, seq_len=32, eagle_steps=3, eagle_batch=8)
    return replace(base, **kw)
