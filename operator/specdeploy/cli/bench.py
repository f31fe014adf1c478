"""`specdeploy bench report NAME`: a SpeculativeBenchmark's table, recommendation, plots and HTML page.

    specdeploy bench report NAME [-n NAMESPACE] [--out DIR] [--from-file results.json] [-o text|json]

Reads the benchmark (``kubectl get speculativebenchmark``: status.recommendation and
status.resultsConfigMap) and its results ConfigMap (key ``results.json``, default name
``NAME-results``) with kubectl (KUBECONFIG and the current context apply), or a local file with
``--from-file`` (a copy of ``results.json``). Writes tokens_per_s.png/.svg, tau.png/.svg and
report.html into ``--out`` (default ``./NAME-report``).

Exit: 0 written; 2 unusable input (no such benchmark or ConfigMap, invalid results, kubectl
missing): one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess

from .common import OUTPUTS, UsageError, camel_keys, epilog, need_action, print_doc

RESULTS_KEY = "results.json"
KUBECTL_TIMEOUT = 60


class BenchInputError(UsageError):
    """Unusable input: one line, exit 2."""


def _kubectl_json(args: list[str]) -> dict | None:
    """``kubectl get ... -o json`` as a document; None when the object does not exist."""
    exe = shutil.which("kubectl")
    if exe is None:
        raise BenchInputError("kubectl is not on PATH: install it, or give the results with --from-file")
    try:
        p = subprocess.run([exe, "get", *args, "-o", "json"], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise BenchInputError(f"kubectl get {' '.join(args)} did not answer in {KUBECTL_TIMEOUT} s") from None
    if p.returncode != 0:
        if "NotFound" in p.stderr or "not found" in p.stderr:
            return None
        raise BenchInputError(f"kubectl get {' '.join(args)}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    try:
        return json.loads(p.stdout)
    except ValueError:
        raise BenchInputError(f"kubectl get {' '.join(args)} did not print JSON") from None


def read_from_cluster(name: str, namespace: str | None) -> tuple[str, dict | None]:
    """(results.json text, status.recommendation or None)."""
    ns = ["-n", namespace] if namespace else []
    cr = _kubectl_json(["speculativebenchmarks.specdeploy.io", name, *ns])
    status = (cr or {}).get("status") or {}
    cm_name = status.get("resultsConfigMap") or f"{name}-results"
    cm = _kubectl_json(["configmap", cm_name, *ns])
    where = f" in namespace {namespace}" if namespace else ""
    if cm is None:
        if cr is None:
            raise BenchInputError(f"no SpeculativeBenchmark {name}{where} and no ConfigMap {cm_name}")
        phase = status.get("phase") or "Pending"
        raise BenchInputError(f"SpeculativeBenchmark {name}{where} has no results ConfigMap {cm_name} yet "
                              f"(phase {phase}, progress {status.get('progress') or '-'})")
    text = (cm.get("data") or {}).get(RESULTS_KEY)
    if text is None:
        raise BenchInputError(f"ConfigMap {cm_name}{where} has no key {RESULTS_KEY}")
    reco = status.get("recommendation")
    return text, reco if isinstance(reco, dict) else None


def cmd_report(args: argparse.Namespace) -> int:
    from .. import benchreport as rep

    if args.from_file:
        try:
            with open(args.from_file, encoding="utf-8") as fh:
                text = fh.read(64 * 1024 * 1024)
        except FileNotFoundError:
            raise BenchInputError(f"file not found: {args.from_file}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise BenchInputError(f"cannot read {args.from_file}: {getattr(e, 'strerror', None) or e}") from None
        source, status_reco = args.from_file, None
    else:
        text, status_reco = read_from_cluster(args.name, args.namespace)
        source = f"ConfigMap {args.name}-results key {RESULTS_KEY}"
    try:
        doc = rep.parse_json_text(text, source)
        results, reco = rep.load_results(doc)
        rs = rep.rows(results, rep.given_equality(doc))
        reco = rep.recommendation(results, reco or status_reco)
        files = rep.write_report(args.name, rs, reco, args.out or f"{args.name}-report")
    except rep.ReportError as e:
        raise BenchInputError(str(e)) from None
    if args.output in ("json", "yaml"):
        doc = camel_keys(rep.report_doc(args.name, rs, reco, {}))
        doc["files"] = files  # file names as they are
        print_doc(doc, args.output)
        return 0
    print(rep.format_table(rs))
    costs = rep.format_costs(rs)
    if costs:
        print()
        print(costs)
    print()
    print(rep.format_recommendation(reco))
    print()
    print("wrote " + ", ".join(files[k] for k in ("tokens_per_s.png", "tau.png", "costs.png", "report.html") if k in files))
    return 0


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="SpeculativeBenchmark results", description="SpeculativeBenchmark results.",
                       epilog=epilog(["specdeploy bench report qwen-sweep -n team-a"], None))
    bsub = b.add_subparsers(dest="bench_command", metavar="ACTION")
    b.set_defaults(func=need_action(b, "an action: report"))
    r = bsub.add_parser(
        "report", help="print a benchmark's table and recommendation; write PNG/SVG plots and an HTML page",
        description="Print the table (tokens/s, speedup over speculation off, TTFT/ITL, tau, greedy outputs equal to "
                    "the baseline's) and the recommendation of a SpeculativeBenchmark, and write tokens_per_s.png, "
                    "tau.png (and .svg: tokens/s and tau vs concurrency, one panel per context, one line per "
                    "variant, speculation off dashed) and report.html into --out. Reads the benchmark and its "
                    "results ConfigMap with kubectl, or --from-file.",
        epilog=epilog(["specdeploy bench report qwen-sweep -n team-a --out ./qwen-sweep-report",
                       "specdeploy bench report qwen-sweep --from-file results.json -o json"],
                      "the report was written", json_errors=True))
    r.add_argument("name", metavar="NAME", help="the SpeculativeBenchmark")
    r.add_argument("-n", "--namespace", default=None, help="its namespace (default: kubectl's)")
    r.add_argument("--out", default=None, metavar="DIR", help="where the files go (default ./NAME-report)")
    r.add_argument("--from-file", default=None, metavar="FILE", help="a local copy of the results ConfigMap's results.json")
    r.add_argument("-o", "--output", choices=OUTPUTS, default="text")
    r.set_defaults(func=cmd_report)
