"""The rig's commands behind ``specdeploy demo`` and ``specdeploy dev ...``.

Their arguments are declared with the rest of the ``specdeploy`` command (specdeploy.cli), which hands
over to these functions by name when one of them runs: the product never imports the rig. Dev/test
infrastructure, never installed in the operator image.
"""

from __future__ import annotations

import argparse

from specdeploy.cli_common import UsageError


def cmd_demo(args: argparse.Namespace) -> int:
    import os

    from . import demo

    if args.engine == "vllm-cpu":
        if args.offline or args.cluster:
            raise UsageError("--engine vllm-cpu runs its own embedded cluster with the dev kubelet; "
                             "drop --offline/--cluster")
        return demo.run_real()
    if args.offline:
        return demo.run_offline(args.examples)
    kubeconfig = None
    if args.cluster:
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        if not os.path.exists(kubeconfig):
            raise UsageError(f"--cluster: no kubeconfig at {kubeconfig}; set KUBECONFIG")
    return demo.run(args.examples, kubeconfig=kubeconfig, namespace=args.namespace)


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
    return bench.run(args.what, args.repeat, counts, args.resync_seconds)
