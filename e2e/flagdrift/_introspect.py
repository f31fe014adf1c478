"""Shared helpers for the flag-drift drivers (standard library only).

Imported by vllm_driver.py and sglang_driver.py, each of which runs inside
its own engine virtualenv. Nothing here imports an engine.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import re
import sys
from typing import Any, Iterable

SNAPSHOT_FORMAT = 1

# Defaults are recorded only for options whose name matches this pattern
# (speculative-*, attention, metrics, tensor parallel); every other option
# gets dest/takes_value/choices/hidden/deprecated only, which keeps the
# snapshot small and free of machine-dependent values.
DEFAULT_RECORDED = re.compile(
    r"(speculative|attention|attn|metric|tensor[-_]parallel|(^|[-_])tp([-_]|$)"
    r"|tp[-_]size|cuda[-_]graph)",
    re.IGNORECASE,
)

_HOME = os.path.expanduser("~")

# Help text that declares the option itself deprecated: "Deprecated. Use ...",
# "(Deprecated, use ...)", "This flag is deprecated", "--x is deprecated" (x one
# of the action's own option strings). Not "Replaces the deprecated --old" in
# the help of the replacement, nor "the fallback to ... is deprecated".
_HELP_DEPRECATED = re.compile(
    r"^\W*deprecated\b|\b(this|the) (flag|option|argument) is deprecated|\bdeprecated alias\b",
    re.IGNORECASE,
)


def _help_says_deprecated(help_text: str, option_strings: Iterable[str]) -> bool:
    if _HELP_DEPRECATED.search(help_text):
        return True
    low = help_text.lower()
    return any(f"{o.lower()} is deprecated" in low for o in option_strings)


class CapturedParseError(Exception):
    """Raised instead of argparse's print-and-exit."""


def capture_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make parser.error raise CapturedParseError instead of exiting."""

    def _error(message: str):
        raise CapturedParseError(message)

    parser.error = _error  # type: ignore[method-assign]
    return parser


def _plain(value: Any) -> Any:
    """Turn a default/choice into something JSON can hold, deterministically."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if value.startswith(("/", _HOME)) or os.path.isabs(value):
            return "<path>"
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    # Objects (callables, dataclasses, ...) are described by type name only,
    # never by repr (reprs carry memory addresses).
    return f"<{type(value).__name__}>"


def _choices(choices: Any) -> list | None:
    if choices is None:
        return None
    values = [_plain(c) for c in choices]
    if isinstance(choices, (set, frozenset)):
        # Set iteration order changes between runs (hash randomization).
        values.sort(key=lambda v: (v is None, str(v)))
    return values


def _nargs(action: argparse.Action) -> Any:
    n = action.nargs
    if n is None:
        return None
    if isinstance(n, int):
        return n
    return str(n)


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _type_name(action: argparse.Action) -> str | None:
    t = action.type
    if t is None:
        return None
    return getattr(t, "__name__", type(t).__name__)


def snapshot_options(
    parser: argparse.ArgumentParser,
    *,
    deprecated_actions: Iterable[argparse.Action] = (),
) -> dict[str, dict]:
    """Every option string the parser accepts, with what a checker needs."""
    deprecated_ids = {id(a) for a in deprecated_actions}
    out: dict[str, dict] = {}
    for opt, action in parser._option_string_actions.items():  # noqa: SLF001
        if isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        help_text = action.help if isinstance(action.help, str) else ""
        hidden = action.help == argparse.SUPPRESS or opt not in action.option_strings
        reasons = []
        if id(action) in deprecated_ids or getattr(action, "deprecated", False) is True:
            reasons.append("declared")
        if "deprecated" in type(action).__name__.lower():
            reasons.append("action")
        all_strings = set(action.option_strings) | {opt}
        if help_text and help_text != argparse.SUPPRESS and _help_says_deprecated(
            help_text, all_strings
        ):
            reasons.append("help")
        entry: dict[str, Any] = {
            "dest": action.dest,
            "takes_value": _takes_value(action),
            "nargs": _nargs(action),
            "type": _type_name(action),
            "choices": _choices(action.choices),
            "hidden": bool(hidden),
            "deprecated": bool(reasons),
        }
        if reasons:
            entry["deprecated_by"] = reasons
        if DEFAULT_RECORDED.search(opt) or DEFAULT_RECORDED.search(action.dest or ""):
            default = action.default
            entry["default"] = None if default is argparse.SUPPRESS else _plain(default)
        out[opt] = entry
    return dict(sorted(out.items()))


def positionals(parser: argparse.ArgumentParser) -> list[dict]:
    return [
        {"dest": a.dest, "nargs": _nargs(a)}
        for a in parser._actions  # noqa: SLF001
        if not a.option_strings
    ]


def write_snapshot(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_commands(path: str, engine: str, version: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of command objects")
    return [c for c in data if c.get("engine") == engine and str(c.get("version")) == version]


def flag_tokens(argv: list[str]) -> list[str]:
    """The option strings used in argv (the part before '=' of --x=y)."""
    out = []
    for tok in argv:
        if tok == "--":
            break
        if tok.startswith("-") and not _is_number(tok):
            out.append(tok.split("=", 1)[0])
    return out


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def first_flag_in(message: str, argv: list[str]) -> str | None:
    """Best effort: the flag of argv that an error message names first."""
    best = None
    for flag in set(flag_tokens(argv)):
        for m in re.finditer(re.escape(flag) + r"(?![A-Za-z0-9_-])", message):
            key = (m.start(), -len(flag))
            if best is None or key < best[0]:
                best = (key, flag)
            break
    if best is not None:
        return best[1]
    m = re.search(r"(--?[A-Za-z][A-Za-z0-9_.-]*)", message)
    return m.group(1) if m else None


class Report:
    """Collects per-command outcomes; printed as one JSON document."""

    def __init__(self, engine: str, version: str, snapshot: str | None):
        self.engine = engine
        self.version = version
        self.snapshot = snapshot
        self.commands: list[dict] = []

    def start(self, name: str) -> dict:
        rec = {"name": name, "problems": [], "skipped": [], "passed": []}
        self.commands.append(rec)
        return rec

    @staticmethod
    def fail(rec: dict, step: str, message: str, flag: str | None = None) -> None:
        rec["problems"].append({"step": step, "flag": flag, "message": message.strip()})

    @staticmethod
    def skip(rec: dict, step: str, why: str) -> None:
        rec["skipped"].append({"step": step, "why": why.strip()})

    @property
    def ok(self) -> bool:
        return all(not c["problems"] for c in self.commands)

    def emit(self) -> int:
        for c in self.commands:
            status = "FAIL" if c["problems"] else "ok"
            print(f"[{self.engine} {self.version}] {status}: {c['name']}", file=sys.stderr)
            for p in c["problems"]:
                kind = "variable" if p["step"] == "env" else "flag"
                flag = f" {kind} {p['flag']}:" if p.get("flag") else ""
                print(f"    - {p['step']}:{flag} {p['message']}", file=sys.stderr)
            for s in c["skipped"]:
                print(f"    (skipped {s['step']}: {s['why']})", file=sys.stderr)
        print(
            json.dumps(
                {
                    "engine": self.engine,
                    "version": self.version,
                    "snapshot": self.snapshot,
                    "commands": self.commands,
                },
                sort_keys=True,
            )
        )
        return 0 if self.ok else 1


def common_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--version", required=True, help="engine version expected in this venv")
    p.add_argument("--commands", help="JSON list of rendered commands to check")
    p.add_argument("--snapshot-out", help="write the flag snapshot to this path")
    return p.parse_args()


def check_deprecated_or_hidden(rec: dict, argv: list[str], options: dict[str, dict]) -> None:
    """Flags that parse but are hidden/deprecated count as drift (rename pending)."""
    for flag in flag_tokens(argv):
        entry = options.get(flag)
        if entry is None:
            continue  # the parser itself reports unknown flags
        if entry.get("deprecated"):
            Report.fail(
                rec,
                "flag-status",
                f"{flag} is deprecated in this version ({','.join(entry.get('deprecated_by', []))})",
                flag,
            )
        elif entry.get("hidden"):
            Report.fail(rec, "flag-status", f"{flag} is a hidden (undocumented) option", flag)


def truncate(text: str, limit: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def env_literals(package_dir: str, prefix: str) -> list[str]:
    """Names like PREFIX_FOO that appear as string literals in the package source.

    Engines read some variables with os.environ/getenv outside their env
    registry; a checker must not call those unknown.
    """
    pattern = re.compile(r"[\"'](" + re.escape(prefix) + r"[A-Z0-9_]+)[\"']")
    found: set[str] = set()
    for root, _dirs, files in os.walk(package_dir):
        for name in files:
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as fh:
                    found.update(pattern.findall(fh.read()))
            except OSError:
                continue
    return sorted(n for n in found if not n.endswith("_"))
