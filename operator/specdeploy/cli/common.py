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
from specdeploy.core.errors import Permanent

PROG = "specdeploy"
OK, FINDINGS, UNUSABLE = 0, 1, 2


class UsageError(Permanent):
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


OUTPUTS = ("text", "json", "yaml")  # -o of every command that prints a document


def print_doc(doc, output: str) -> None:
    """A command's document on stdout, as -o asks: JSON (indented) or YAML (block style, keys in order)."""
    import json

    if output == "yaml":
        import yaml

        print(yaml.safe_dump(doc, sort_keys=False, width=1000, allow_unicode=True), end="")
    else:
        print(json.dumps(doc, indent=2, allow_nan=False, default=str))


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


# ----------------------------------------------------------------- the tenancy policy flags (operator run, render)


def policy_args(args: argparse.Namespace):
    from ..api.types import NAME_PATTERN
    from ..core.policy import TenancyPolicy

    import re

    names = {"--engine-service-account": [args.engine_service_account] if args.engine_service_account else [],
             "--allowed-service-account": args.allowed_service_account or [],
             "--allowed-token-secret": args.allowed_token_secret or [], "--allowed-pvc": args.allowed_pvc or []}
    for flag, values in names.items():
        for v in values:
            if not re.fullmatch(NAME_PATTERN, v):
                raise UsageError(f"{flag} {v!r} is not a Kubernetes object name")
    label = None
    if args.pvc_label:
        key, eq, value = args.pvc_label.partition("=")
        if not eq or not key:
            raise UsageError(f"--pvc-label {args.pvc_label!r}: expected KEY=VALUE")
        label = (key, value)
    node_paths = []
    for item in getattr(args, "cache_node_path", None) or []:
        name, eq, path = item.partition("=")
        if not eq or not re.fullmatch(NAME_PATTERN, name) or len(name) > 63:
            raise UsageError(f"--cache-node-path {item!r}: expected NAME=PATH with NAME a lowercase name")
        if not path.startswith("/") or any(seg in (".", "..") for seg in path.split("/")) or path.rstrip("/") == "":
            raise UsageError(f"--cache-node-path {item!r}: PATH must be an absolute directory without '.' or '..' "
                             "segments, and not /")
        node_paths.append((name, path))
    bindings: dict[str, tuple[str, ...]] = {}
    for item in getattr(args, "cache_node_path_namespaces", None) or []:
        name, eq, listed = item.partition("=")
        namespaces = tuple(n for n in listed.split(",") if n)
        if not eq or name not in dict(node_paths):
            raise UsageError(f"--cache-node-path-namespaces {item!r}: expected NAME=NS[,NS...] with NAME a "
                             "--cache-node-path name")
        for n in namespaces:
            if n != "*" and (not re.fullmatch(NAME_PATTERN, n) or len(n) > 63):
                raise UsageError(f"--cache-node-path-namespaces {item!r}: {n!r} is not a namespace name (or *)")
        bindings[name] = bindings.get(name, ()) + namespaces  # NAME= alone: no namespace
    default = None
    if getattr(args, "default_cache", None) and args.default_cache != "emptyDir":
        kind, slash, ref = args.default_cache.partition("/")
        if kind not in ("pvc", "nodePath") or not slash or not re.fullmatch(NAME_PATTERN, ref):
            raise UsageError(f"--default-cache {args.default_cache!r}: expected emptyDir, pvc/CLAIM or nodePath/NAME")
        if kind == "nodePath" and ref not in dict(node_paths):
            raise UsageError(f"--default-cache {args.default_cache!r}: no --cache-node-path named {ref!r}")
        default = (kind, ref)
    kwargs: dict = {}
    if args.allowed_image_prefix:
        kwargs["image_prefixes"] = tuple(args.allowed_image_prefix)
    for flag, attr, field in (("--allowed-token-secret-key", "allowed_token_secret_key", "token_secret_keys"),
                              ("--allowed-api-key-secret-key", "allowed_api_key_secret_key", "api_key_secret_keys"),
                              ("--allow-trust-remote-code-namespace", "allow_trust_remote_code_namespace",
                               "trust_remote_code_namespaces"),
                              ("--allow-trust-remote-code-model", "allow_trust_remote_code_model",
                               "trust_remote_code_models"),
                              ("--allowed-code-arg", "allowed_code_arg", "code_args"),
                              ("--allowed-egress-arg", "allowed_egress_arg", "egress_args"),
                              ("--allowed-toleration-key", "allowed_toleration_key", "toleration_keys"),
                              ("--allowed-node-selector-key", "allowed_node_selector_key", "node_selector_keys"),
                              ("--allowed-priority-class", "allowed_priority_class", "priority_classes")):
        values = getattr(args, attr, None)
        if values is None:
            continue  # the policy's default
        for v in values:
            if any(ch.isspace() or ch in "\x00=," for ch in v) or len(v) > 316:
                raise UsageError(f"{flag} {v!r}: expected a name without spaces, '=' or ','")
            if attr in ("allowed_code_arg", "allowed_egress_arg") and not v.startswith("--"):
                raise UsageError(f"{flag} {v!r}: expected an engine flag such as --chat-template")
        kwargs[field] = tuple(v for v in values if v)  # '' alone: none allowed
    return TenancyPolicy(engine_service_account=args.engine_service_account,
                         service_accounts=tuple(args.allowed_service_account or ()),
                         token_secrets=tuple(args.allowed_token_secret or ()), pvcs=tuple(args.allowed_pvc or ()),
                         pvc_label=label, cache_node_paths=tuple(node_paths),
                         cache_node_path_namespaces=tuple(sorted(bindings.items())), default_cache=default, **kwargs)


def add_policy_args(pol) -> None:
    """The tenancy policy flags (core/policy.py): the operator's, and ``specdeploy render``'s."""
    pol.add_argument("--allowed-image-prefix", action="append", metavar="PREFIX",
                     help="image repository engine pods may run (repeatable; default: the project's runtime images, "
                     "ghcr.io/specdeploy/runtime)")
    pol.add_argument("--engine-service-account", metavar="NAME",
                     help="ServiceAccount engine pods run as when spec.pod.serviceAccountName is unset (always allowed)")
    pol.add_argument("--allowed-service-account", action="append", metavar="NAME",
                     help="another ServiceAccount spec.pod.serviceAccountName may name (repeatable; default: none)")
    pol.add_argument("--allowed-token-secret", action="append", metavar="NAME",
                     help="Secret a tokenSecretRef may name (repeatable; default: none; chart value hub.tokenSecrets)")
    pol.add_argument("--allowed-pvc", action="append", metavar="NAME", help="claim a spec may mount (repeatable)")
    pol.add_argument("--pvc-label", metavar="KEY=VALUE", help="claims carrying this label may be mounted too")
    pol.add_argument("--cache-node-path", action="append", metavar="NAME=PATH",
                     help="a node-local directory engine pods may use as their hub cache, named NAME "
                     "(spec.cache.nodePath: NAME); repeatable; chart value cache.nodePaths")
    pol.add_argument("--cache-node-path-namespaces", action="append", metavar="NAME=NS[,NS...]",
                     help="bind the node path NAME to these namespaces (a spec in another namespace is refused, the "
                     "default cache falls back to emptyDir there; '*': every namespace; NAME= alone: none); repeatable; "
                     "without it a node path is shared by every namespace; chart value cache.nodePaths.NAME.namespaces")
    pol.add_argument("--default-cache", metavar="emptyDir|pvc/CLAIM|nodePath/NAME",
                     help="hub cache of engine pods whose spec has no cache (default emptyDir); chart value "
                     "cache.default")
    pol.add_argument("--allowed-token-secret-key", action="append", metavar="KEY",
                     help="key of an allowed token Secret a tokenSecretRef may name (repeatable; default: token; chart "
                     "value hub.tokenSecretKeys)")
    pol.add_argument("--allowed-api-key-secret-key", action="append", metavar="KEY",
                     help="key of an allowed token Secret spec.engine.apiKey.secretKeyRef may name (repeatable; "
                     "default: token; '' alone: none; chart value policy.allowedApiKeySecretKeys)")
    pol.add_argument("--allow-trust-remote-code-namespace", action="append", metavar="NS",
                     help="namespace whose SpeculativeDeployments may set spec.target.trustRemoteCode ('*': every "
                     "namespace; repeatable; default: none; chart value policy.allowTrustRemoteCode.namespaces)")
    pol.add_argument("--allow-trust-remote-code-model", action="append", metavar="PREFIX",
                     help="model prefix (e.g. moonshotai/) whose targets may set spec.target.trustRemoteCode (repeatable; "
                     "default: none; chart value policy.allowTrustRemoteCode.modelPrefixes)")
    pol.add_argument("--allowed-code-arg", action="append", metavar="FLAG",
                     help="engine flag that loads code or opens pod files (data/codeflags.json, e.g. --chat-template) "
                     "spec.engine.extraArgs may use (repeatable; default: none; chart value policy.allowedCodeArgs)")
    pol.add_argument("--allowed-egress-arg", action="append", metavar="FLAG",
                     help="engine flag that connects out of the pod (loads: egress in data/codeflags.json, e.g. "
                     "--otlp-traces-endpoint) spec.engine.extraArgs may use (repeatable; default: none; chart value "
                     "policy.allowedEgressArgs)")
    pol.add_argument("--allowed-toleration-key", action="append", metavar="KEY|PREFIX*|*",
                     help="taint key spec.pod.tolerations may name (repeatable; default: *, the control-plane taints "
                     "only when listed by name; '' alone: none; chart value policy.allowedTolerationKeys)")
    pol.add_argument("--allowed-node-selector-key", action="append", metavar="KEY|PREFIX*|*",
                     help="label key spec.pod.nodeSelector may name (repeatable; default: *, the control-plane roles "
                     "only when listed by name; '' alone: none; chart value policy.allowedNodeSelectorKeys)")
    pol.add_argument("--allowed-priority-class", action="append", metavar="NAME|PREFIX*|*",
                     help="priority class spec.pod.priorityClassName may name (repeatable; default: *, system-* only "
                     "when listed by name; '' alone: none; chart value policy.allowedPriorityClasses)")
