"""The ``specdeploy-runtime`` command (pod side).

Reads the engine config document the operator rendered (``/etc/specdeploy/engine-config.json``).
Imports nothing heavy for ``--help``; torch only where kernels live.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Sequence

PROG = "specdeploy-runtime"
DEFAULT_ENGINE_CONFIG = "/etc/specdeploy/engine-config.json"


def _load_engine_config(path: str):
    import pydantic

    from specdeploy.core.engineconfig import EngineConfig

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise SystemExit(f"{PROG}: error: engine config not found: {path}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"{PROG}: error: {path} is not valid JSON: line {e.lineno}: {e.msg}")
    try:
        return EngineConfig.model_validate(doc)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SystemExit(f"{PROG}: error: {path}: invalid engine config at {where or '(document)'}: {first.get('msg')}")


def cmd_show(args: argparse.Namespace) -> int:
    ec = _load_engine_config(args.engine_config)
    if args.output == "json":
        print(ec.to_json(), end="")
        return 0
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(ec.env.items()))
    print(f"engine: {ec.engine} {ec.engine_version}; speculation: {ec.speculation.method}, block {ec.speculation.block_size}, "
          f"draft window {ec.speculation.draft_window}")
    print(f"command: {env} {shlex.join(ec.command + ec.args)}".strip())
    if ec.worker_args:
        print(f"workers: {env} {shlex.join(ec.command + ec.worker_args)}".strip())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="specdeploy pod runtime: inspect and run the rendered engine config.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    s = sub.add_parser("show-config", help="validate the rendered engine config and print the engine command line")
    s.add_argument("--engine-config", default=DEFAULT_ENGINE_CONFIG, metavar="FILE")
    s.add_argument("--output", "-o", choices=["text", "json"], default="text")
    s.set_defaults(func=cmd_show)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
