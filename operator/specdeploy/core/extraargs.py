"""``spec.engine.extraArgs`` resolved the way the engine's own argument parser would (pure).

Each argument is matched against the recorded parser snapshot of the engine release
(``data/flags/<engine>-<version>.json``) with argparse's rules: ``--flag=value`` and
``--flag value``, short options with an attached value (``-n4``), unique-prefix
abbreviations (both engines use argparse's default ``allow_abbrev``), vLLM's
underscore spellings and ``--json-flag.key`` sub-keys, ``--no-`` negations of boolean
flags. A flag is identified by its *destination*, so every spelling of a setting the
operator owns (``-n``, ``--nnodes``, ``--no-trust-remote-code``, SGLang's
``--nccl-init-addr`` for ``--dist-init-addr``) is refused alike.

Refused: unknown flags (another engine's flag, wrong case), missing values, values outside
a flag's choices or type, ambiguous abbreviations, stray positionals, settings the operator
owns, and flags that change the model configuration the gate just checked
(``--hf-overrides``, ``--json-model-override-args``, config files).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import engines as eng
from .enginedata import load_snapshot
from .memo import MiB, bounded

_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")

# Destinations whose flags change the model configuration after the check: never from extraArgs.
CONFIG_CHANGING_DESTS = {
    "vllm": frozenset({"hf_overrides", "hf_config_path", "config", "config_format", "model_class_overrides"}),
    "sglang": frozenset({"json_model_override_args", "config", "model_config_parser", "decrypted_config_file",
                         "decrypted_draft_config_file"}),
}
# Owned destinations by prefix (every speculative setting is derived from the configs).
OWNED_DEST_PREFIXES = {"vllm": ("speculative_", "spec_"), "sglang": ("speculative_",)}
SPEC_FIELD_FOR_DEST = {
    "max_model_len": "spec.engine.maxModelLen", "context_length": "spec.engine.maxModelLen",
    "tensor_parallel_size": "spec.gpu.count", "tp_size": "spec.gpu.count",
    "trust_remote_code": "spec.target.trustRemoteCode", "revision": "spec.target.revision",
    "model": "spec.target.model", "model_path": "spec.target.model", "model_tag": "spec.target.model",
    "nnodes": "spec.nodes", "node_rank": "spec.nodes", "dist_init_addr": "spec.nodes", "master_addr": "spec.nodes",
    "master_port": "spec.nodes", "headless": "spec.nodes", "host": "(none: the operator serves on 0.0.0.0)",
    "port": "(none: the operator picks the engine's port)", "enable_metrics": "(none: metrics are always on)",
}


@dataclass(frozen=True)
class ArgProblem:
    index: int  # position in extraArgs
    code: str
    message: str
    severity: str = "error"


def is_flag(tok: str) -> bool:
    """Whether an argv token is a flag (``-x``, ``--name``) rather than a value (a lone ``-`` or a negative number)."""
    return tok.startswith("-") and tok != "-" and not _NUMBER.match(tok)


class _Resolver:
    """One release's parser, compiled once (``compiled_resolver``): shared between calls, never mutated."""

    def __init__(self, engine: str, snapshot: Mapping[str, Any]):
        self.engine = engine
        self.options: Mapping[str, Mapping[str, Any]] = snapshot.get("options", {})
        self.long = sorted(o for o in self.options if o.startswith("--"))
        # dest -> its first long spelling that is not a --no- negation (the name an error message shows)
        self.canonical: dict[str, str] = {}
        for o in self.long:
            d = self.options[o].get("dest")
            if d and not o.startswith("--no-"):
                self.canonical.setdefault(d, o)
        self.owned: frozenset[str] = frozenset()

    def resolve(self, name: str) -> tuple[str | None, str | None, str | None]:
        """(option string, sub-key, problem) for a flag name as written (without '=value')."""
        if name in self.options:
            return name, None, None
        sub = None
        if self.engine == "vllm" and name.startswith("--"):
            base, _, sub = name.partition(".")
            base = "--" + base[2:].replace("_", "-")
            if base in self.options:
                return base, (sub.rstrip("+") or None), None
            name = base
        if name.startswith("--") and len(name) > 2:
            hits = [o for o in self.long if o.startswith(name)]
            if len(hits) == 1:
                return hits[0], sub or None, None
            if len(hits) > 1:
                shown = ", ".join(hits[:6]) + (", ..." if len(hits) > 6 else "")
                return None, None, f"ambiguous abbreviation {name} (could be {shown})"
        return None, None, None


def check_extra_args(engine: str, version: str, args: Sequence[str], snapshot: str | None = None
                     ) -> tuple[list[ArgProblem], bool]:
    """(problems, parser_known): every problem with ``args`` for that engine release; parser_known is
    False when no snapshot of the release's parser exists (then only owned flag names are checked).
    ``snapshot``: the parser snapshot's engine key when it differs (a CPU build: "vllm-cpu")."""
    info = eng.ENGINES.get(engine)
    if info is None:
        return [], False
    try:
        r = compiled_resolver(engine, version, snapshot or engine)
    except LookupError:
        return [ArgProblem(i, "ExtraArgSetsOwnedFlag", _owned_message(flag, info))
                for i, flag in eng.owned_flag_violations(info, list(args))], False
    owned = r.owned
    out: list[ArgProblem] = []
    i = 0
    while i < len(args):
        tok = str(args[i])
        idx = i
        i += 1
        if not is_flag(tok):
            out.append(ArgProblem(idx, "ExtraArgUnexpectedValue",
                                  f"{tok!r} is not a flag and no flag before it takes a value; extraArgs hold flags "
                                  "and their values, e.g. [\"--max-num-seqs\", \"64\"]"))
            continue
        name, eq, inline = tok.partition("=")
        opt, sub, why = r.resolve(name)
        entry = r.options.get(opt) if opt else None
        if entry is None and not eq and not name.startswith("--") and len(name) > 2:
            short = r.options.get(name[:2])  # argparse reads "-n4" as "-n 4"
            if short is not None and short.get("takes_value", True):
                opt, entry, eq, inline = name[:2], short, "=", name[2:]
        if entry is None:
            if why is None:
                close = difflib.get_close_matches(name, list(r.options), n=2, cutoff=0.75)
                close = close or [o for o in r.options if o.lower() == name.lower()]
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                why = f"{name} is not a flag of {info.display_name} {version}{hint}"
            out.append(ArgProblem(idx, "ExtraArgUnknown", why + " (checked against the release's own argument parser)"))
            if not eq and i < len(args) and not is_flag(str(args[i])):
                i += 1  # its value, most likely
            continue
        dest = entry.get("dest") or ""
        # values
        nargs = entry.get("nargs")
        values: list[str] = []
        if not entry.get("takes_value", True):
            if eq:
                out.append(ArgProblem(idx, "ExtraArgInvalidValue", f"{opt} takes no value, found {inline!r}"))
        elif eq:
            values = [inline]
        elif nargs in (None, 1):
            if i < len(args) and not is_flag(str(args[i])):
                values = [str(args[i])]
                i += 1
            else:
                out.append(ArgProblem(idx, "ExtraArgValueMissing",
                                      f"{opt} needs a value; add it as the next extraArgs entry or write {opt}=VALUE"))
        elif nargs in ("*", "+") or isinstance(nargs, int):
            while i < len(args) and not is_flag(str(args[i])) and (not isinstance(nargs, int) or len(values) < nargs):
                values.append(str(args[i]))
                i += 1
            if (nargs == "+" and not values) or (isinstance(nargs, int) and len(values) < nargs):
                out.append(ArgProblem(idx, "ExtraArgValueMissing", f"{opt} needs {nargs} value(s), found {len(values)}"))
        elif nargs == "?" and i < len(args) and not is_flag(str(args[i])):
            values = [str(args[i])]
            i += 1
        if dest in CONFIG_CHANGING_DESTS.get(engine, ()):
            out.append(ArgProblem(idx, "ExtraArgChangesModelConfig",
                                  f"{opt} changes the model configuration after the drafter/target check, so the check "
                                  "and the engine would disagree; change the config.json (spec.target/spec.drafter "
                                  "configFrom) instead"))
            continue
        if dest in owned:
            canonical = r.canonical.get(dest, opt)
            out.append(ArgProblem(idx, "ExtraArgSetsOwnedFlag", _owned_message(name, info, dest, canonical)))
            continue
        if entry.get("hidden") or entry.get("deprecated"):
            out.append(ArgProblem(idx, "ExtraArgDeprecated",
                                  f"{opt} is {'hidden' if entry.get('hidden') else 'deprecated'} in {info.display_name} "
                                  f"{version}; it may disappear in the next release", severity="warning"))
        if sub is None:
            for v in values:
                problem = _value_problem(opt, entry, v)
                if problem:
                    out.append(ArgProblem(idx, "ExtraArgInvalidValue", problem))
    return out, True


@bounded("extraargs.compiled", 64, 8 * MiB)
def compiled_resolver(engine: str, version: str, snapshot: str) -> _Resolver:
    """The parser snapshot of (snapshot key, version) read, decoded and indexed once, with the destinations the
    operator owns in ``engine`` ``version``; LookupError when no snapshot is recorded (not cached: cheap, and
    the listing behind it is cached). Pure inputs (the recorded data files do not change while running)."""
    r = _Resolver(engine, load_snapshot(snapshot, version))
    r.owned = _owned_dests(eng.ENGINES[engine], version, r)
    return r


def _owned_dests(info: eng.EngineInfo, version: str, r: _Resolver) -> frozenset[str]:
    dests = set()
    row = info.release_for(version)
    flags = set(info.all_owned_flags()) | (set(row.flags.values()) if row else set())
    for f in flags:
        e = r.options.get(f)
        if e and e.get("dest"):
            dests.add(e["dest"])
    for o, e in r.options.items():
        d = e.get("dest") or ""
        if any(d.startswith(p) for p in OWNED_DEST_PREFIXES.get(info.name, ())) or \
                any(o.startswith(p) for p in info.owned_prefixes):
            dests.add(d)
    dests.discard("")
    return frozenset(dests)


def _owned_message(flag: str, info: eng.EngineInfo, dest: str | None = None, opt: str | None = None) -> str:
    field = SPEC_FIELD_FOR_DEST.get(dest or "") or eng.OWNED_FLAG_FIELDS.get(flag.replace("_", "-")) or \
        "spec.speculation, spec.gpu, spec.target, spec.drafter"
    alias = f" (= {opt})" if opt and opt != flag else ""
    return (f"{flag}{alias} is set by the operator from the spec and the configs; remove it from extraArgs and use "
            f"the spec field instead ({field})")


def _value_problem(opt: str, entry: Mapping[str, Any], value: str) -> str | None:
    kind = entry.get("type")
    if kind in ("int", "float"):
        try:
            int(value) if kind == "int" else float(value)
        except ValueError:
            return f"{opt}: {value!r} is not a valid {kind}"
    choices = entry.get("choices")
    if choices is not None and value not in {str(c) for c in choices}:
        shown = ", ".join(str(c) for c in choices[:12]) + (", ..." if len(choices) > 12 else "")
        return f"{opt}: {value!r} is not one of {shown}"
    return None
