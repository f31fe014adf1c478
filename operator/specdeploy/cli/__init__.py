"""The ``specdeploy`` command (operator side).

Subcommands import what they need when they run: ``specdeploy --help`` imports nothing
beyond argparse. Exit codes of every command: 0 success; 1 findings (the check found errors,
generated files out of date, unhealthy acceptance); 2 unusable input (missing file, bad JSON/YAML,
invalid object, a bad flag), always a one-line message, never a traceback, and with ``-o json``
also a JSON document on stdout.

One module per command group, each adding its parsers to the root one: ``check`` (check, render),
``generate`` (crd, generate), ``operator`` (operator run), ``dev`` (demo and the dev tools, which hand
over to the development rig), ``acceptance``, ``bench``, ``rollout``, ``completion``. Shared pieces, the help texts' format and the
argument types: ``common``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import acceptance, bench, check, completion, dev, generate, operator, rollout
from .common import PROG, ArgumentError, Parser, UsageError, VersionAction, epilog, print_error, wants_json

__all__ = ["PROG", "UsageError", "build_parser", "main"]


# ----------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Speculative-decoding deployments on SGLang and vLLM: DFlash, DFlash2, DSpark or "
               "EAGLE-3 drafters, the target's MTP layers, or n-gram lookup.",
               epilog=epilog(["specdeploy check --drafter drafter/ --target target/ --engine vllm --gpu b300",
                              "specdeploy render -f speculativedeployment.yaml --drafter-config d.json "
                              "--target-config t.json",
                              "specdeploy demo", "specdeploy COMMAND --help"],
                             ok="success", findings="findings: the check found errors, generated files are out of "
                             "date, acceptance collapsed", json_errors=True))
    p.add_argument("--version", action=VersionAction, help="print the package and engine-table versions and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    check.add_parsers(sub)
    generate.add_parsers(sub, p)
    dev.add_demo_parser(sub)
    operator.add_parsers(sub)
    dev.add_dev_parser(sub)
    acceptance.add_parser(sub)
    bench.add_parser(sub)
    rollout.add_parser(sub)
    completion.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ArgumentError as e:
        e.parser.print_usage(sys.stderr)
        command = e.parser.prog[len(PROG):].strip() or None
        return print_error(command, str(e), as_json)
    if not getattr(args, "func", None):
        parser.print_help()
        print(f"{PROG}: error: choose a command", file=sys.stderr)
        return 2
    label = " ".join(filter(None, (args.command, getattr(args, "dev_command", None),
                                   getattr(args, "operator_command", None), getattr(args, "bench_command", None),
                                   getattr(args, "rollout_command", None))))
    try:
        return args.func(args)
    except UsageError as e:
        return print_error(label, str(e), as_json)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
