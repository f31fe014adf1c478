"""What every ``specdeploy`` subcommand shares: the exit codes, the one-line usage error, the JSON
error document, camelCase keys, the help texts (description, examples, exit codes) and the argument
types (``type=`` validators: positive integers, seeds, seconds).

Standard library only: ``specdeploy --help`` imports nothing heavy.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any, Callable

PROG = "specdeploy"
OK, FINDINGS, UNUSABLE = 0, 1, 2


class UsageError(Exception):
    """Unusable input: reported in one line, exit 2 (with ``-o json`` also as a JSON document on stdout)."""


class ArgumentError(UsageError):
    """A command line argparse refuses (unknown flag, missing argument, bad choice)."""

    def __init__(self, message: str, parser: argparse.ArgumentParser):
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so the caller can answer in JSON when asked to."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise ArgumentError(message, self)


_CAMEL = re.compile(r"_([a-z0-9])")


def camel(key: str) -> str:
    return _CAMEL.sub(lambda m: m.group(1).upper(), key)


def camel_keys(obj: Any) -> Any:
    """The same document with every dict key in camelCase (the Kubernetes style every command uses)."""
    if isinstance(obj, dict):
        return {camel(k) if isinstance(k, str) else k: camel_keys(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [camel_keys(v) for v in obj]
    return obj


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for ``-o json`` (read from the raw argv: parsing may be what failed)."""
    for i, a in enumerate(argv):
        if a in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if a in ("-ojson", "--output=json"):
            return True
    return False


def print_error(command: str | None, message: str, as_json: bool, code: int = UNUSABLE) -> int:
    """The one-line error on stderr; with ``-o json`` also ``{"ok": false, "error": ..., "exitCode": N}`` on stdout."""
    where = f"{PROG} {command}" if command else PROG
    print(f"{where}: error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"ok": False, "error": {"command": command or "", "message": message}, "exitCode": code},
                         indent=2))
    return code


def need_action(parser: argparse.ArgumentParser, what: str):
    """A command group called without its action: its own help on stdout, one error line, exit 2."""

    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        print(f"{parser.prog}: error: choose {what}", file=sys.stderr)
        return UNUSABLE

    return run


def epilog(examples: list[str], ok: str | None, findings: str | None = None, json_errors: bool = False) -> str:
    """The help's closing block: examples, then the exit codes (``ok`` None: a group, its actions say)."""
    ex = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    if ok is None:
        return f"{ex}\n\nexit codes: those of the action (ACTION --help); 2 when no action is given"
    codes = [f"  0  {ok}"] + ([f"  1  {findings}"] if findings else []) + [
        "  2  unusable input (missing or unreadable file, invalid JSON/YAML, a bad flag value): one line on stderr"
        + ("; with -o json also a JSON document {ok: false, error, exitCode} on stdout" if json_errors else "")]
    return f"{ex}\n\nexit codes:\n" + "\n".join(codes)


def known_engine_versions(engine: str, gpu: str | None = None) -> list[str]:
    """Releases the engine table knows: recorded facts or a recorded flag snapshot (CPU pool: the CPU build's)."""
    from ..core import enginedata
    from ..core import engines as eng
    from ..core.versions import parse_version

    info = eng.get_engine(engine)
    if gpu == "cpu" and eng.cpu_build(engine) is not None:
        vs = set(eng.cpu_verified_versions(engine))
    else:
        vs = {v for e, v in enginedata.available_facts() if e == engine} | set(info.verified_versions())
    return sorted(vs, key=lambda v: parse_version(v) or (0, 0, 0))


class VersionAction(argparse.Action):
    """--version: the package and the engine table it carries (computed only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(0)


def version_text() -> str:
    from .. import __version__
    from ..core import engines as eng

    lines = [f"{PROG} {__version__}", "engine table:"]
    for name in eng.ENGINE_NAMES:
        info = eng.get_engine(name)
        known = known_engine_versions(name)
        line = (f"  {name}: DFlash from {info.oldest}; facts recorded for {known[0]} .. {known[-1]} ({len(known)} "
                f"releases); flags verified for {', '.join(info.verified_versions()) or 'none'} "
                f"(default {info.newest_verified})")
        build = eng.cpu_build(name)
        if build is not None:
            line += f"; CPU build {build.distribution} verified for {', '.join(eng.cpu_verified_versions(name))}"
        lines.append(line)
    return "\n".join(lines)


# ----------------------------------------------------------------- argument types


def number_type(ok: Callable[[Any], bool], bad: str, not_a_number: str = "is not a number",
                convert: Callable[[str], Any] = float, name: str | None = None) -> Callable[[str], Any]:
    """An argparse ``type=``: ``convert(text)``, refused with ``'TEXT' <not_a_number>`` when it does not
    convert and with ``bad`` (``{text}``: the argument, ``{v}``: the value) when ``ok(v)`` is false."""

    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} {not_a_number}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(bad.format(text=text, v=v))
        return v

    parse.__name__ = name or "number"
    return parse


positive_int = number_type(lambda v: v >= 1, "{v} must be >= 1", "is not an integer", int, "positive_int")
seed = number_type(lambda v: 0 <= v < 2**63, "{v} must be in [0, 2^63)", "is not an integer", int, "seed")
seconds = number_type(lambda v: math.isfinite(v) and v > 0, "{text} must be a positive number of seconds",
                      "is not a number of seconds", name="seconds")
