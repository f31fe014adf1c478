"""A tiny EAGLE-3 drafter in plain PyTorch: the forward vLLM 0.32 runs, its training and its offline replay.

Used by ``train-tiny-drafter --method eagle3`` (:mod:`specdeploy_dev.tinytrain`), which trains it on the
tiny language target's greedy output. The forward is the one vLLM 0.32's
``vllm/model_executor/models/llama_eagle3.py`` (``Eagle3LlamaForCausalLM``, ``LlamaModel``,
``LlamaDecoderLayer``) and ``vllm/v1/spec_decode/llm_base_proposer.py`` (``propose``) define:

- **Aux hidden states.** ``eagle_aux_hidden_state_layer_ids`` (top level of the drafter's config) are
  read by ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (``v1/worker/gpu_model_runner.py``;
  the CPU runner inherits it) and captured by the target's ``_maybe_add_hidden_state``
  (``model_executor/models/interfaces.py``) at ``idx + 1`` after layer ``idx``: id ``L`` is the output
  of layer ``L - 1`` (the input of layer ``L``; id 0 the embeddings), sorted and deduplicated. So the
  EAGLE-3 ids ``[2, 4]`` read what the DFlash ``target_layer_ids`` ``[1, 3]`` read.
- **First pass.** ``fc`` (``Linear(n_aux * H, H)``) fuses the captured states (``combine_hidden_states``);
  position ``t`` then gets the embedding of token ``t + 1`` (the target's table: the drafter ships none)
  and the fused state of position ``t`` and predicts token ``t + 2``. The one layer: ``input_layernorm``
  on the embedding, ``hidden_norm`` on the state (the state itself is the residual), their
  concatenation (``2H``) into ``q/k/v_proj``, RoPE (neox) at ``t``, causal attention, ``o_proj``,
  residual add + ``post_attention_layernorm``, SiLU-gated MLP, residual add, ``norm``; logits from the
  drafter's own ``lm_head`` over ``draft_vocab_size`` tokens, mapped to the target's ids by
  ``d2t`` (target id = draft id + ``d2t[draft id]``; ``compute_logits``).
- **Draft steps.** Step ``j`` feeds the previous draft token's embedding and the previous step's
  pre-norm output at position ``t + j``; its keys join the cache, so a query sees the first pass's
  keys up to ``t`` and its own chain's keys. Training unrolls the same chain ("training-time test")
  with the target's greedy tokens as inputs, which is exact for acceptance: a step whose input token
  is wrong is past the accepted prefix anyway.

Checkpoint names are the EAGLE-3 release layout vLLM maps (``midlayer.`` -> ``layers.0.``,
``q/k/v_proj`` stacked): ``midlayer.self_attn.{q,k,v,o}_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``,
``midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight``, ``fc.weight``,
``norm.weight``, ``lm_head.weight``, ``d2t`` (int64) and ``t2d`` (bool, skipped by vLLM).
Dev/test infrastructure, imported only by the training.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from specdeploy_runtime.dflash_ref import _heads, _Norm, apply_rope, attention, rms_norm, rope_cos_sin


@dataclass(frozen=True)
class EagleShape:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_aux: int
    draft_vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0


class Eagle3DrafterRef(nn.Module):
    """One EAGLE-3 layer (``Eagle3LlamaForCausalLM`` with ``num_hidden_layers`` 1), checkpoint names."""

    def __init__(self, s: EagleShape):
        super().__init__()
        self.shape = s
        h, qd, kvd = s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        m = self.midlayer = nn.Module()
        m.self_attn = nn.Module()
        a = m.self_attn
        a.q_proj, a.k_proj, a.v_proj = (nn.Linear(2 * h, qd, bias=False), nn.Linear(2 * h, kvd, bias=False),
                                        nn.Linear(2 * h, kvd, bias=False))
        a.o_proj = nn.Linear(qd, h, bias=False)
        m.mlp = nn.Module()
        m.mlp.gate_proj = nn.Linear(h, s.intermediate_size, bias=False)
        m.mlp.up_proj = nn.Linear(h, s.intermediate_size, bias=False)
        m.mlp.down_proj = nn.Linear(s.intermediate_size, h, bias=False)
        m.input_layernorm, m.hidden_norm, m.post_attention_layernorm = _Norm(h), _Norm(h), _Norm(h)
        self.fc = nn.Linear(s.num_aux * h, h, bias=False)
        self.norm = _Norm(h)
        self.lm_head = nn.Linear(h, s.draft_vocab_size, bias=False)

    def step(self, emb: torch.Tensor, hid: torch.Tensor, pos: torch.Tensor, cache: list[tuple[Any, Any]],
             visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[Any, Any]]:
        """One pass over [N, T] queries: ``emb`` the input tokens' embeddings, ``hid`` the fused target state
        (first pass) or the previous step's pre-norm output, ``pos`` [N, T] positions; ``cache`` the earlier
        passes' (k, v); ``visible`` [N, T, K_cache + T]. Returns (normed, pre-norm, this pass's (k, v))."""
        s, m = self.shape, self.midlayer
        a = m.self_attn
        n, t, _ = emb.shape
        eps = s.rms_norm_eps
        x = torch.cat([rms_norm(emb, m.input_layernorm.weight, eps), rms_norm(hid, m.hidden_norm.weight, eps)], -1)
        cos, sin = rope_cos_sin(pos, s.head_dim, s.rope_theta, x.dtype)
        q = apply_rope(_heads(a.q_proj(x), s.num_heads, s.head_dim), cos, sin)
        k = apply_rope(_heads(a.k_proj(x), s.num_kv_heads, s.head_dim), cos, sin)
        v = _heads(a.v_proj(x), s.num_kv_heads, s.head_dim)
        keys = torch.cat([c[0] for c in cache] + [k], dim=2)
        vals = torch.cat([c[1] for c in cache] + [v], dim=2)
        o, _ = attention(q, keys, vals, visible, s.head_dim ** -0.5)
        residual = hid + a.o_proj(o.transpose(1, 2).reshape(n, t, -1))
        y = rms_norm(residual, m.post_attention_layernorm.weight, eps)
        pre = residual + m.mlp.down_proj(F.silu(m.mlp.gate_proj(y)) * m.mlp.up_proj(y))
        return rms_norm(pre, self.norm.weight, eps), pre, (k, v)

    def unroll(self, emb_seq: torch.Tensor, feats: torch.Tensor, depth: int) -> list[torch.Tensor]:
        """The first pass and ``depth - 1`` draft steps over every position of [N, T] sequences.

        ``emb_seq`` [N, T, H]: embeddings of the tokens; ``feats`` [N, T, n_aux * H]: the captured target
        states. Query ``t`` of step ``j`` sits at position ``t + j`` with input token ``t + 1 + j`` and
        predicts token ``t + 2 + j``; it sees the first pass's keys ``<= t`` and step ``1..j``'s keys of
        its own ``t``. Returns the draft-vocabulary logits per step, [N, T - 1, draft_vocab] each (queries
        ``t = 0..T-2``; tokens past the end are clamped: their labels are masked by the caller)."""
        n, big_t, _ = emb_seq.shape
        tq = big_t - 1
        idx = torch.arange(tq)
        hid = self.fc(feats[:, :tq])
        cache: list[tuple[Any, Any]] = []
        causal = (idx[None, :] <= idx[:, None])  # [T, T] key <= query
        diag = torch.eye(tq, dtype=torch.bool)
        out = []
        for j in range(depth):
            tok = (idx + 1 + j).clamp(max=big_t - 1)
            emb = emb_seq[:, tok]
            vis = torch.cat([causal] + [diag] * j, dim=1) if j else causal
            normed, hid, kv = self.step(emb, hid, (idx + j).expand(n, tq), cache, vis.expand(n, tq, -1))
            cache.append(kv)
            out.append(self.lm_head(normed))
        return out


def draft_vocabulary(words: list[int], vocab_size: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The draft vocabulary: the language's words then the lowest other ids, ``size`` target ids sorted;
    ``d2t`` (target id - draft id, int64) and ``t2d`` (bool over the target vocabulary), as EAGLE-3 ships them."""
    chosen = set(words)
    for tid in range(vocab_size):
        if len(chosen) >= size:
            break
        chosen.add(tid)
    ids = np.array(sorted(chosen), dtype=np.int64)
    t2d = np.zeros(vocab_size, dtype=bool)
    t2d[ids] = True
    return ids, ids - np.arange(len(ids), dtype=np.int64), t2d


def train(drafter: Eagle3DrafterRef, target, tokens: torch.Tensor, feats: torch.Tensor, draft_ids: np.ndarray,
          *, steps: int, batch: int, lr: float, depth: int, prompt_len: int, seed: int, lr_at: Callable,
          log: Callable[[str], None]) -> dict:
    """Cross-entropy over the unrolled chain (step ``j`` weighted 0.8^j) on labels the target generated
    greedily (token index >= ``prompt_len``); the target's embeddings frozen (shared, not shipped)."""
    emb_w = target.model.embed_tokens.weight.detach()
    to_draft = torch.full((emb_w.shape[0],), -100, dtype=torch.long)
    to_draft[torch.from_numpy(draft_ids)] = torch.arange(len(draft_ids))
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(drafter.parameters(), lr=lr)
    n, big_t = tokens.shape
    tq = big_t - 1
    losses = []
    t0 = time.perf_counter()
    drafter.train()
    for step in range(steps):
        sel = torch.randint(0, n, (batch,), generator=gen)
        x, f = tokens[sel], feats[sel]
        outs = drafter.unroll(F.embedding(x, emb_w), f, depth)
        loss = torch.zeros(())
        for j, logits in enumerate(outs):
            lab_idx = torch.arange(tq) + 2 + j
            valid = (lab_idx < big_t) & (lab_idx >= prompt_len)
            labels = to_draft[x[:, lab_idx.clamp(max=big_t - 1)]]
            labels = torch.where(valid[None, :], labels, torch.full_like(labels, -100))
            loss = loss + 0.8 ** j * F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                     ignore_index=-100)
        loss = loss / sum(0.8 ** j for j in range(depth))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == steps - 1:
            log(f"eagle3 drafter step {step + 1}/{steps}: loss {losses[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
    drafter.eval()
    return {"final_loss": round(float(np.mean(losses[-10:])), 4), "seconds": round(time.perf_counter() - t0, 1)}


def replay(drafter: Eagle3DrafterRef, target, tokens: torch.Tensor, feats: torch.Tensor, draft_ids: np.ndarray,
           depth: int, prompt_len: int) -> dict:
    """Offline greedy speculative decoding with ``depth`` speculative tokens on sequences the target
    generated greedily, as tinytrain.replay does for DFlash: from each bonus position ``s`` (the first
    pass's last query ``t = s - 1``) the accepted prefix is where draft steps 0..depth-1 agree with the
    target's tokens ``s + 1 ..``; tau = 1 + mean accepted."""
    emb_w = target.model.embed_tokens.weight
    ids = torch.from_numpy(draft_ids)
    with torch.no_grad():
        outs = drafter.unroll(F.embedding(tokens, emb_w), feats, depth)
    guess = torch.stack([ids[o.argmax(-1)] for o in outs], dim=-1)  # [N, T-1, depth] target ids
    steps = accepted = 0
    per_pos = np.zeros(depth)
    big_t = tokens.shape[1]
    for x, g in zip(tokens, guess):
        s = prompt_len
        while s + depth + 1 <= big_t:
            t = s - 1
            ok = (g[t] == x[s + 1:s + 1 + depth]).long()
            acc = int(ok.cumprod(0).sum())
            per_pos[:acc] += 1
            steps += 1
            accepted += acc
            s += acc + 1
    return {"tau": round(1 + accepted / steps, 4), "per_position": [round(float(v / steps), 4) for v in per_pos],
            "drafts": steps}


def state_arrays(drafter: Eagle3DrafterRef, d2t: np.ndarray, t2d: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {k: v.detach().float().cpu().numpy() for k, v in drafter.state_dict().items()}
    out["d2t"] = d2t
    out["t2d"] = t2d
    return out
