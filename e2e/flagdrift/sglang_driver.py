"""Flag-drift driver for SGLang: run with the python of .venv-engines/sglang.

1. Builds SGLang's own parser (ServerArgs.add_cli_args) and writes the flag
   snapshot.
2. For every rendered sglang command of this version:
   - parse_args with that parser;
   - prepare_server_args(argv) (what `python -m sglang.launch_server` does);
   - the model-independent part of the resolution pipeline
     (ServerArgs.resolve_once with --model-path dummy: every validation hook
     that runs before the engine loads the model config);
   - the DFLASH handler (speculative_hook._handle_dflash) on a copy with
     --device cuda, which checks pp/dp-attention restrictions, block size vs
     --speculative-dflash-block-size, window size >= block size.
   Steps that need a model's config.json from the hub are reported as skipped.

No network: HF_HUB_OFFLINE=1 and an empty throw-away HF cache.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="flagdrift-hf-")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _introspect as ix  # noqa: E402

# Exceptions meaning "this needs files from the hub", not "the flags are wrong".
_NEEDS_HUB_NAMES = (
    "OSError",
    "LocalEntryNotFoundError",
    "EntryNotFoundError",
    "RepositoryNotFoundError",
    "OfflineModeIsEnabled",
    "HFValidationError",
    "FileNotFoundError",
)


def needs_hub(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in _NEEDS_HUB_NAMES:
            return True
        if "huggingface.co" in str(exc) or "offline mode" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def with_flag(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    for i, tok in enumerate(out):
        if tok == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if tok.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return out + [flag, value]


def build_parser():
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def speculative_algorithms() -> list[str] | None:
    try:
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    except ImportError:
        return None
    names = {m.name for m in SpeculativeAlgorithm if m.name != "NONE"}
    try:
        from sglang.srt.speculative.spec_registry import _RESERVED_ALIASES

        names |= set(_RESERVED_ALIASES)
    except ImportError:
        pass
    return sorted(names)


def draft_attention_backends(from_parser):
    if from_parser:
        return from_parser
    try:
        from sglang.srt.arg_groups.choices import DRAFT_ATTENTION_BACKEND_CHOICES
    except ImportError:
        return None
    return list(DRAFT_ATTENTION_BACKEND_CHOICES)


def make_snapshot(parser, version: str) -> dict:
    from sglang.srt.environ import envs

    options = ix.snapshot_options(parser)

    def choices_of(flag: str):
        entry = options.get(flag)
        return None if entry is None else entry.get("choices")

    env_names = sorted(n for n in dir(type(envs)) if n.startswith("SGLANG_"))
    return {
        "format": ix.SNAPSHOT_FORMAT,
        "engine": "sglang",
        "version": version,
        "entrypoint": ["python3", "-m", "sglang.launch_server"],
        "positionals": ix.positionals(parser),
        "options": options,
        "speculative": {
            # --speculative-algorithm has no argparse choices: the engine
            # resolves it case-insensitively with SpeculativeAlgorithm.from_string.
            "algorithms": speculative_algorithms(),
            "algorithms_case_insensitive": True,
            # --speculative-draft-attention-backend has no argparse choices
            # either: an unsupported value silently falls back (DFLASH).
            "draft_attention_backends": draft_attention_backends(
                choices_of("--speculative-draft-attention-backend")
            ),
            "attention_backends": choices_of("--attention-backend"),
        },
        "env": {
            "known": env_names,
            "mentioned_in_source": [
                n for n in ix.env_literals(os.path.dirname(os.path.dirname(
                    sys.modules["sglang.srt.environ"].__file__)), "SGLANG_")
                if n not in env_names
            ],
        },
    }


def check_command(parser, cmd: dict, options: dict, report: ix.Report) -> None:
    from sglang.srt.server_args import prepare_server_args

    rec = report.start(cmd.get("name", "?"))
    argv = [str(a) for a in cmd.get("argv", [])]
    env = {str(k): str(v) for k, v in (cmd.get("env") or {}).items()}
    ix.check_deprecated_or_hidden(rec, argv, options)

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        try:
            ns = parser.parse_args(argv)
        except ix.CapturedParseError as exc:
            ix.Report.fail(rec, "parse_args", str(exc), ix.first_flag_in(str(exc), argv))
            return
        rec["passed"].append("parse_args")

        try:
            server_args = prepare_server_args(argv)
        except SystemExit as exc:
            ix.Report.fail(rec, "prepare_server_args", f"exited ({exc.code})")
            return
        except Exception as exc:
            ix.Report.fail(rec, "prepare_server_args", f"{type(exc).__name__}: {ix.truncate(exc)}",
                           ix.first_flag_in(str(exc), argv))
            return
        rec["passed"].append("prepare_server_args")

        # Model-independent resolution hooks (they run before the pipeline's
        # early return for --model-path dummy).
        try:
            dummy = prepare_server_args(with_flag(argv, "--model-path", "dummy"))
            dummy.resolve_once()
            rec["passed"].append("resolve_once(model-independent hooks)")
        except Exception as exc:
            if needs_hub(exc):
                ix.Report.skip(rec, "resolve_once(model-independent hooks)", ix.truncate(exc, 200))
            else:
                ix.Report.fail(rec, "resolve_once(model-independent hooks)",
                               f"{type(exc).__name__}: {ix.truncate(exc)}",
                               ix.first_flag_in(str(exc), argv))
        ix.Report.skip(
            rec,
            "resolve_once(full)",
            "the rest of the resolution pipeline reads the target's config.json "
            "from the hub and probes the GPU",
        )

        algo = (getattr(server_args, "speculative_algorithm", None) or "").upper()
        if algo:
            try:
                from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

                SpeculativeAlgorithm.from_string(algo)
                rec["passed"].append("SpeculativeAlgorithm.from_string")
            except ImportError:
                pass
            except Exception as exc:
                ix.Report.fail(rec, "SpeculativeAlgorithm.from_string", ix.truncate(exc),
                               "--speculative-algorithm")
        if algo == "DFLASH":
            check_dflash(rec, argv)
        _ = ns
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_dflash(rec: dict, argv: list[str]) -> None:
    from sglang.srt.server_args import prepare_server_args

    try:
        from sglang.srt.arg_groups import speculative_hook
    except ImportError as exc:
        ix.Report.skip(rec, "_handle_dflash", f"speculative_hook not importable: {exc}")
        return
    handler = getattr(speculative_hook, "_handle_dflash", None)
    if handler is None:
        ix.Report.skip(rec, "_handle_dflash", "no _handle_dflash in this sglang version")
        return
    sa = None
    try:
        sa = prepare_server_args(with_flag(argv, "--device", "cuda"))
        # resolve_once freezes inputs while handlers run; mirror that.
        sa._input_frozen = True
        handler(sa)
        rec["passed"].append("_handle_dflash")
    except Exception as exc:
        if needs_hub(exc):
            ix.Report.skip(rec, "_handle_dflash", "needs the drafter config.json: "
                           + ix.truncate(exc, 200))
        else:
            ix.Report.fail(rec, "_handle_dflash", f"{type(exc).__name__}: {ix.truncate(exc)}",
                           ix.first_flag_in(str(exc), argv))
    finally:
        if sa is not None:
            sa._input_frozen = False


def main() -> int:
    opts = ix.common_args(__doc__.splitlines()[0])
    from importlib.metadata import version as dist_version

    installed = dist_version("sglang")
    if installed != opts.version:
        print(f"sglang {installed} is installed in this venv, expected {opts.version}",
              file=sys.stderr)
        return 2
    parser = ix.capture_errors(build_parser())
    snapshot = make_snapshot(parser, opts.version)
    if opts.snapshot_out:
        ix.write_snapshot(opts.snapshot_out, snapshot)
    report = ix.Report("sglang", opts.version, opts.snapshot_out)
    if opts.commands:
        for cmd in ix.load_commands(opts.commands, "sglang", opts.version):
            check_command(parser, cmd, snapshot["options"], report)
    return report.emit()


if __name__ == "__main__":
    sys.exit(main())
