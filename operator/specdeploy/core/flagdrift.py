"""Check a rendered engine command line against a recorded flag snapshot.

Snapshots live in ``specdeploy/data/flags/<engine>-<version>.json``. They are
written by ``e2e/flagdrift/run.sh`` from the real engine's own argument parser
(vLLM's ``make_arg_parser``, SGLang's ``ServerArgs.add_cli_args``), so this
module can tell, without the engine installed, whether a command the operator
renders would be rejected or silently misread by that engine version:
unknown/renamed flags, hidden or deprecated flags, values outside a flag's
choices, flags missing their value, bad ``--speculative-config`` JSON (vLLM),
and environment variables the engine version does not know.

Standard library only.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Mapping, Sequence

try:  # the reader lives with the data (core.enginedata)
    from .enginedata import available_snapshots, load_snapshot
except ImportError:  # loaded as a standalone file by e2e/flagdrift/run.sh: only check_against_snapshot is used
    pass

__all__ = [
    "available_snapshots",
    "check_against_snapshot",
    "check_argv",
    "load_snapshot",
]

_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def check_argv(
    engine: str,
    version: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """Problems with an engine command line (the args after the entrypoint).

    ``engine`` is "sglang" (argv = args of ``python3 -m sglang.launch_server``)
    or "vllm" (argv = args of ``vllm serve``, positional model first).
    Raises LookupError when no snapshot exists for that engine version.
    """
    return check_against_snapshot(load_snapshot(engine, version), argv, env)


# --------------------------------------------------------------------------


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and tok != "-" and not _NUMBER.match(tok)


def _fmt_choices(choices: Sequence[Any], limit: int = 12) -> str:
    shown = [str(c) for c in choices if c is not None]
    more = "" if len(shown) <= limit else f", ... ({len(shown) - limit} more)"
    return ", ".join(shown[:limit]) + more


class _Checker:
    def __init__(self, snapshot: Mapping[str, Any]):
        self.snap = snapshot
        self.engine = snapshot.get("engine", "?")
        self.version = snapshot.get("version", "?")
        self.options: Mapping[str, Mapping[str, Any]] = snapshot.get("options", {})
        self.problems: list[str] = []

    # -- helpers ---------------------------------------------------------
    def add(self, msg: str) -> None:
        self.problems.append(f"{self.engine} {self.version}: {msg}")

    def normalize(self, name: str) -> tuple[str, str | None]:
        """(option string, dotted sub-key) as the engine would read it."""
        if name in self.options:
            return name, None
        if self.engine == "vllm" and name.startswith("--"):
            # FlexibleArgumentParser: underscores == dashes in flag names, and
            # --json-arg.key[.key2][+] sets a key inside a JSON argument.
            base, _, sub = name.partition(".")
            base = "--" + base[2:].replace("_", "-")
            if base in self.options:
                return base, (sub.rstrip("+") or None)
        return name, None

    def unknown(self, name: str) -> None:
        close = difflib.get_close_matches(name, list(self.options), n=2, cutoff=0.75)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        self.add(f"unknown flag {name}{hint}")

    # -- main walk -------------------------------------------------------
    def run(self, argv: Sequence[str], env: Mapping[str, str] | None) -> list[str]:
        argv = [str(a) for a in argv]
        positionals = list(self.snap.get("positionals") or [])
        i = 0
        while i < len(argv):
            tok = argv[i]
            i += 1
            if tok == "--":
                for rest in argv[i:]:
                    self.positional(rest, positionals)
                break
            if not _is_flag(tok):
                self.positional(tok, positionals)
                continue
            name, eq, inline = tok.partition("=")
            opt, subkey = self.normalize(name)
            entry = self.options.get(opt)
            if entry is None and not eq and not name.startswith("--") and len(name) > 2:
                # argparse also reads "-O3" as "-O 3".
                short = self.options.get(name[:2])
                if short is not None and short.get("takes_value", True):
                    opt, entry, eq, inline, name = name[:2], short, "=", name[2:], name[:2]
            if entry is None:
                self.unknown(name)
                # Assume it took the next non-flag token as its value so one
                # unknown flag does not cascade into positional complaints.
                if not eq and i < len(argv) and not _is_flag(argv[i]):
                    i += 1
                continue
            if entry.get("hidden"):
                self.add(f"flag {name} is hidden in this version (undocumented alias)")
            if entry.get("deprecated"):
                self.add(f"flag {name} is deprecated in this version")
            values, i = self.take_values(name, entry, argv, i, inline if eq else None)
            if values is None:
                continue
            self.check_values(name, opt, subkey, entry, values)
        self.check_env(env or {})
        return self.problems

    def positional(self, tok: str, positionals: list) -> None:
        if positionals:
            positionals.pop(0)
            return
        self.add(f"unexpected positional argument {tok!r}")

    def take_values(self, name, entry, argv, i, inline):
        nargs = entry.get("nargs")
        if not entry.get("takes_value", True):
            if inline is not None:
                self.add(f"flag {name} takes no value but got {inline!r}")
            return [], i
        if inline is not None:
            return [inline], i
        if nargs is None or nargs == 1:
            if i < len(argv) and not _is_flag(argv[i]):
                return [argv[i]], i + 1
            self.add(f"flag {name} needs a value but none was given")
            return None, i
        if nargs == "?":
            if i < len(argv) and not _is_flag(argv[i]):
                return [argv[i]], i + 1
            return [], i
        if nargs in ("*", "+"):
            vals = []
            while i < len(argv) and not _is_flag(argv[i]):
                vals.append(argv[i])
                i += 1
            if nargs == "+" and not vals:
                self.add(f"flag {name} needs at least one value but none was given")
                return None, i
            return vals, i
        if isinstance(nargs, int):
            vals = []
            while len(vals) < nargs and i < len(argv) and not _is_flag(argv[i]):
                vals.append(argv[i])
                i += 1
            if len(vals) < nargs:
                self.add(f"flag {name} needs {nargs} values but got {len(vals)}")
                return None, i
            return vals, i
        # argparse.REMAINDER and friends: swallow the rest.
        return list(argv[i:]), len(argv)

    def check_values(self, name, opt, subkey, entry, values) -> None:
        kind = entry.get("type")
        if subkey is None and kind in ("int", "float"):
            for v in values:
                try:
                    int(v) if kind == "int" else float(v)
                except ValueError:
                    self.add(f"flag {name}: {v!r} is not a valid {kind}")
        choices = entry.get("choices")
        if choices is not None and subkey is None:
            allowed = {str(c) for c in choices}
            for v in values:
                if v not in allowed:
                    self.add(
                        f"flag {name}: value {v!r} is not one of its choices "
                        f"({_fmt_choices(choices)})"
                    )
        if self.engine == "vllm":
            self.check_vllm_value(name, opt, subkey, values)
        elif self.engine == "sglang":
            self.check_sglang_value(name, opt, values)

    # -- engine specifics ------------------------------------------------
    def check_vllm_value(self, name, opt, subkey, values) -> None:
        spec = self.snap.get("speculative_config") or {}
        dest = (self.options.get(opt) or {}).get("dest")
        if dest != "speculative_config" or not spec or not values:
            return
        if subkey is not None:
            key = subkey.split(".")[0].replace("-", "_")
            self.check_spec_key(name, key, values[-1], spec, raw=True)
            return
        raw = values[-1]
        try:
            cfg = json.loads(raw)
        except ValueError as exc:
            self.add(f"flag {name}: value is not valid JSON ({exc})")
            return
        if not isinstance(cfg, dict):
            self.add(f"flag {name}: JSON must be an object, got {type(cfg).__name__}")
            return
        for key, value in cfg.items():
            self.check_spec_key(name, str(key).replace("-", "_"), value, spec, raw=False)

    def check_spec_key(self, name, key, value, spec, raw: bool) -> None:
        fields = spec.get("fields") or []
        if fields and key not in fields:
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.75)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.add(f"flag {name}: unknown speculative-config key {key!r}{hint}")
            return
        if key in (spec.get("rejected_keys") or ()):
            self.add(f"flag {name}: speculative-config key {key!r} is rejected by this version")
            return
        if key == "method":
            methods = spec.get("methods") or []
            if methods and value is not None and str(value) not in methods:
                self.add(
                    f"flag {name}: speculative method {value!r} is not supported "
                    f"(allowed: {_fmt_choices(methods, 40)})"
                )
        elif key == "num_speculative_tokens":
            try:
                n = int(value) if raw else value
            except (TypeError, ValueError):
                n = None
            if isinstance(n, bool) or not isinstance(n, int):
                self.add(f"flag {name}: num_speculative_tokens must be an integer, got {value!r}")
            elif n <= 0:
                self.add(f"flag {name}: num_speculative_tokens must be > 0, got {n}")

    def check_sglang_value(self, name, opt, values) -> None:
        spec = self.snap.get("speculative") or {}
        dest = (self.options.get(opt) or {}).get("dest")
        if not values:
            return
        if dest == "speculative_algorithm" and spec.get("algorithms"):
            v = values[-1]
            cmp = v.upper() if spec.get("algorithms_case_insensitive") else v
            if cmp not in spec["algorithms"]:
                self.add(
                    f"flag {name}: speculative algorithm {v!r} is not known "
                    f"(allowed: {_fmt_choices(spec['algorithms'], 40)})"
                )
        elif dest == "speculative_draft_attention_backend" and spec.get(
            "draft_attention_backends"
        ):
            v = values[-1]
            if v not in spec["draft_attention_backends"]:
                self.add(
                    f"flag {name}: draft attention backend {v!r} is not supported "
                    f"(allowed: {_fmt_choices(spec['draft_attention_backends'])}); "
                    "the engine would silently fall back to another backend"
                )

    def check_env(self, env: Mapping[str, str]) -> None:
        info = self.snap.get("env") or {}
        known = set(info.get("known") or ()) | set(info.get("mentioned_in_source") or ())
        if not known:
            return
        prefix = {"vllm": "VLLM_", "sglang": "SGLANG_"}.get(self.engine)
        if prefix is None:
            return
        for name in sorted(env):
            if name.startswith(prefix) and name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
                hint = f" (did you mean {close[0]}?)" if close else ""
                self.add(f"environment variable {name} is not known to this version{hint}")


def check_against_snapshot(
    snapshot: Mapping[str, Any],
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """Like check_argv, with the snapshot given (e.g. a freshly written one)."""
    return _Checker(snapshot).run(argv, env)
