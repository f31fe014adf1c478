"""``specdeploy crd`` and ``specdeploy generate``: the generated files of the repository. The CLI
reference among them is written from the ``specdeploy`` parser, handed to the generator here (the
generator never imports the CLI)."""

from __future__ import annotations

import argparse
import functools
import sys

from .common import PROG, UsageError, epilog


CRD_KINDS = ("SpeculativeDeployment", "SpeculativeBenchmark")


def cmd_crd(args: argparse.Namespace) -> int:
    from ..api.crd import render_bench_crd_yaml, render_crd_yaml

    by_kind = {"SpeculativeDeployment": render_crd_yaml, "SpeculativeBenchmark": render_bench_crd_yaml}
    kinds = [args.kind] if args.kind else list(CRD_KINDS)
    if args.output == "json":
        import json

        import yaml

        docs = [yaml.safe_load(by_kind[k]()) for k in kinds]
        print(json.dumps(docs[0] if len(docs) == 1 else {"apiVersion": "v1", "kind": "List", "items": docs},
                         indent=2))
        return 0
    sys.stdout.write("---\n".join(by_kind[k]() for k in kinds))
    return 0


def cmd_generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from pathlib import Path

    root = Path(args.root)
    marker = root / "operator" / "specdeploy" / "api" / "types.py"
    try:
        is_repo = marker.is_file() and 'name = "specdeploy"' in (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        is_repo = False
    if not is_repo:
        raise UsageError(f"{root.resolve()} is not the specdeploy repository (no pyproject.toml of specdeploy with "
                         "operator/specdeploy/api/types.py): run it from the repository root or pass --root; "
                         "nothing was written")
    from .. import generate as generator

    try:
        changed = generator.write_all(root, check=args.check, parser=parser)
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror}") from None
    if args.check and changed:
        print(f"{PROG} generate: out of date: {', '.join(changed)}; run `specdeploy generate`", file=sys.stderr)
        return 1
    for p in changed:
        print(f"wrote {p}")
    return 0


def add_parsers(sub, root: argparse.ArgumentParser) -> None:
    """crd and generate; ``root``: the whole ``specdeploy`` parser, the source of the CLI reference."""
    k = sub.add_parser("crd", help="print the CustomResourceDefinitions",
                       description="Print both CustomResourceDefinitions, SpeculativeDeployment and "
                       "SpeculativeBenchmark, generated from the API types (the same as crds/ and the chart's "
                       "templates), as one YAML stream; --kind prints one.",
                       epilog=epilog(["specdeploy crd | kubectl apply --server-side -f -",
                                      "specdeploy crd --kind SpeculativeBenchmark -o json"], ok="printed", json_errors=True))
    k.add_argument("--kind", choices=CRD_KINDS, help="print only this kind's CRD (default: both)")
    k.add_argument("--output", "-o", choices=["yaml", "json"], default="yaml",
                   help="yaml: one YAML stream; json: a v1 List (one CRD with --kind)")
    k.set_defaults(func=cmd_crd)

    g = sub.add_parser("generate", help="regenerate generated files (CRD, reference docs)",
                       description="Regenerate every generated file of the repository from its one source: the CRD "
                       "(crds/ and the chart), docs/reference/*.md, the check catalog region, the recording rules, the "
                       "dashboards. Refuses to run outside the repository.",
                       epilog=epilog(["specdeploy generate", "specdeploy generate --check   # CI: drift check"],
                                     ok="written (or, with --check, up to date)",
                                     findings="--check: files are out of date (listed on stderr)"))
    g.add_argument("--root", default=".", help="repository root")
    g.add_argument("--check", action="store_true", help="only report files that are out of date (exit 1)")
    g.set_defaults(func=functools.partial(cmd_generate, parser=root))
