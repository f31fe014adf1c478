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


TERMINATION_LOG = "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_LIMIT = 4096


def cmd_inspect(args: argparse.Namespace) -> int:
    """Read config.json from a mounted model and report it in the termination message
    (gzip + base64, so real configs fit in 4 KiB); the operator reads it from the pod status."""
    import base64
    import gzip
    import os

    from specdeploy.core.engineconfig import config_digest

    path = os.path.join(args.path, "config.json") if os.path.isdir(args.path) else args.path

    def report(text: str, code: int) -> int:
        try:
            with open(args.termination_log, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass
        print(text, file=sys.stderr if code else sys.stdout)
        return code

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        doc = json.loads(raw)
    except FileNotFoundError:
        return report(f"config.json not found at {path}", 1)
    except (ValueError, UnicodeDecodeError) as e:
        return report(f"{path} is not valid JSON: {e}", 1)
    except OSError as e:
        return report(f"cannot read {path}: {e.strerror}", 1)
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    envelope = json.dumps({"digest": config_digest(doc), "gz": base64.b64encode(gzip.compress(canonical, 9)).decode()})
    if len(envelope) > TERMINATION_LIMIT:
        return report(f"{path} is too large to report ({len(envelope)} bytes compressed); use configFrom.configMapKeyRef", 1)
    return report(envelope, 0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="specdeploy pod runtime: inspect and run the rendered engine config.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    s = sub.add_parser("show-config", help="validate the rendered engine config and print the engine command line")
    s.add_argument("--engine-config", default=DEFAULT_ENGINE_CONFIG, metavar="FILE")
    s.add_argument("--output", "-o", choices=["text", "json"], default="text")
    s.set_defaults(func=cmd_show)
    i = sub.add_parser("inspect-config", help="report a mounted model's config.json in the termination message")
    i.add_argument("--path", required=True, help="model directory (or config.json) inside the pod")
    i.add_argument("--termination-log", default=TERMINATION_LOG, metavar="FILE")
    i.set_defaults(func=cmd_inspect)
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
