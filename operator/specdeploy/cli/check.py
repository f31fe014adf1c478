"""``specdeploy check`` and ``specdeploy render``: a drafter/target pair checked, a SpeculativeDeployment
rendered, in-process (no cluster)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import OUTPUTS, PROG, UsageError, epilog, known_engine_versions, positive_int, print_doc


def _load_json_config(path: str, what: str) -> Any:
    import json
    import os

    from ..core import safejson

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


def _load_cr(path: str, docs: list | None = None) -> Any:
    """The one SpeculativeDeployment of a file (or of ``docs`` read from ``path``), validated."""
    from ..api.validation import problems_message, validate
    from .manifests import load_file

    if docs is None:
        docs = load_file(path)
    crs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SpeculativeDeployment"]
    if len(crs) != 1:
        raise UsageError(f"{path} must hold exactly one SpeculativeDeployment, found {len(crs)}")
    cr, problems = validate(crs[0])
    if cr is None:
        # the spec message catalog's words, as the webhook and the status give them
        raise UsageError(f"{path}: invalid SpeculativeDeployment: {problems_message(problems)}")
    return cr


# The spec field each `specdeploy check` flag stands for: a finding printed by `check` names the flag, as the
# same finding from admission or in the status names the field (core/findings.worded).
CHECK_FLAGS = {
    "spec.speculation.method": "--method", "spec.drafter": "--drafter", "spec.target": "--target",
    "spec.engine.name": "--engine", "spec.engine.version": "--engine-version", "spec.gpu.type": "--gpu",
    "spec.gpu.count": "--gpu-count", "spec.nodes": "--nodes", "spec.engine.maxModelLen": "--max-model-len",
    "spec.speculation.draftWindow": "--draft-window", "spec.checks.accept": "--accept",
    "spec.target.trustRemoteCode": "--trust-remote-code", "spec.speculation.guard.maxConcurrency": "--concurrency",
    "spec.speculation.eagle.steps": "--steps", "spec.speculation.mtp.steps": "--steps",
    "spec.speculation.eagle.topk": "--topk", "spec.speculation.mtp.topk": "--topk",
    "spec.speculation.eagle.draftTokens": "--draft-tokens", "spec.speculation.mtp.draftTokens": "--draft-tokens",
    "spec.speculation.ngram.lookupMin": "--lookup-min", "spec.speculation.ngram.lookupMax": "--lookup-max",
    "spec.speculation.ngram.numSpeculativeTokens": "--ngram-tokens", "maxModelLen": "--max-model-len", "gpu.count": "--gpu-count",
}


def _print_findings(findings, out) -> None:
    for f in findings:
        where = "flag" if f.path.startswith("--") else f.source.value
        print(f"{f.severity.value:<8}{f.code}  [{where}] {f.path}", file=out)
        print(f"        {f.message}", file=out)


def _method_of(args: argparse.Namespace, drafter: Any, target: Any) -> tuple[str, str]:
    """The method to check with and where it came from: --method, else the drafter's detected family, else (no
    drafter) MTP when the target has MTP layers."""
    from ..core import methods
    from ..core.checker import detect_family, serving_method, target_mtp_layers

    if args.method:  # checked against --drafter before the files are read (cmd_check)
        return args.method, "--method"
    if drafter is None:
        layers = target_mtp_layers(target)
        if layers:
            return "mtp", f"the target has {layers} MTP layer(s); --method ngram or suffix checks those instead"
        raise UsageError("no --drafter: give the drafter's config.json with --drafter D, or check the target alone "
                         "with --method mtp (its own MTP layers), ngram or suffix")
    fam = detect_family(drafter)
    method = serving_method(fam)
    if method is None:
        return methods.DEFAULT_METHOD, (f"the drafter's family is {fam.label if fam.name != 'unknown' else 'unknown'}"
                                        f": checked as {methods.DEFAULT_METHOD}; pass --method to choose")
    return method, f"detected from the drafter: {fam.label}; --method overrides"


def cmd_check(args: argparse.Namespace) -> int:
    import json

    from ..core.checker import Options, analyze
    from ..core.engines import get_engine
    from ..core.findings import report, worded

    from ..core import methods

    if args.method and methods.needs_drafter(args.method) and not args.drafter:
        raise UsageError(f"--method {args.method} needs --drafter (the drafter's config.json)")
    if args.method and not methods.needs_drafter(args.method) and args.drafter:
        raise UsageError(f"--method {args.method} takes no --drafter (the target drafts for itself or nothing does)")
    drafter = _load_json_config(args.drafter, "drafter") if args.drafter else None
    target = _load_json_config(args.target, "target")
    method, method_from = _method_of(args, drafter, target)
    version = args.engine_version
    if args.engine and not version:
        version = get_engine(args.engine).newest_verified
    elif args.engine and not args.allow_unverified_engine:
        _known_engine_version(args.engine, version, args.gpu)
    elif version and not args.engine:
        raise UsageError("--engine-version needs --engine")
    opts = Options(engine=args.engine, engine_version=version, gpu=args.gpu, gpu_count=args.gpu_count,
                   nodes=args.nodes, method=method, max_model_len=args.max_model_len,
                   draft_window=_window_arg(args.draft_window), accept=tuple(args.accept or ()),
                   trust_remote_code=args.trust_remote_code, concurrency=args.concurrency, steps=args.steps,
                   topk=args.topk, draft_tokens=args.draft_tokens, ngram_min=args.lookup_min,
                   ngram_max=args.lookup_max, ngram_tokens=args.ngram_tokens)
    a = analyze(drafter, target, opts)
    # JSON keeps each finding's path (the spec field: stable for scripts) and adds the flag that sets it
    as_json = args.output in ("json", "yaml")
    findings, accepted = (worded(a.findings, CHECK_FLAGS, paths=not as_json),
                          worded(a.accepted, CHECK_FLAGS, paths=not as_json))
    if as_json:
        doc = report(findings)
        for f in doc["findings"]:
            if f["path"] in CHECK_FLAGS:
                f["flag"] = CHECK_FLAGS[f["path"]]
        doc["method"] = {"name": method, "from": method_from}
        if args.engine:
            info = get_engine(args.engine)
            doc["engine"] = {"name": args.engine, "version": version, "verified": info.is_verified(version),
                             "versionFrom": "--engine-version" if args.engine_version else "newest verified"}
        doc["accepted"] = [{**f.to_dict(), **({"flag": CHECK_FLAGS[f.path]} if f.path in CHECK_FLAGS else {})}
                           for f in accepted]
        if a.derived is not None:
            doc["derived"] = a.derived.to_dict()
        if a.family is not None:
            doc["family"] = a.family.to_dict()
        print_doc(doc, args.output)
    else:
        ctx = f"{args.engine} {version}" if args.engine else "no engine given"
        if args.gpu:
            ctx += f", {args.gpu_count} x {args.gpu}"
        n_err = sum(1 for f in a.findings if f.severity.value == "error")
        n_warn = sum(1 for f in a.findings if f.severity.value == "warning")
        who = f"{args.drafter} vs {args.target}" if args.drafter else f"{args.target} ({method}, no drafter)"
        print(f"{'OK' if a.ok else 'INCOMPATIBLE'}: {who} ({ctx}): "
              f"{n_err} error(s), {n_warn} warning(s)")
        print(f"method: {method} ({method_from})")
        if a.family is not None:
            print(f"drafter family: {a.family.label} (format {a.family.format}; {'; '.join(a.family.evidence)})")
        _print_findings(findings, sys.stdout)
        if a.derived is not None and a.ok and not methods.uses_dflash_path(method):
            d = a.derived
            extra = f", {d.steps} steps, top-k {d.topk}" if d.steps is not None else ""
            print(f"derived: method {method}, {d.num_speculative_tokens} draft tokens per step, "
                  f"{d.block_size} verified per step{extra}")
        elif a.derived is not None and a.ok:
            d = a.derived
            window = (f"compact cache {d.draft_window}" if d.draft_window is not None else
                      f"native {d.native_window}" if d.native_window is not None else "none")
            print(f"derived: block size {d.block_size}, {d.num_speculative_tokens} draft tokens per step, "
                  f"draft window {window}, "
                  f"layers {','.join('S' if x == 'sliding_attention' else 'F' for x in d.layer_types)}, "
                  f"target layer ids {list(d.target_layer_ids)}")
        if a.derived is not None and a.derived.memory is not None:
            _print_memory(a.derived.memory)
    return 0 if a.ok else 1


def _print_memory(p) -> None:
    from ..core.memory import gib, tokens

    ctx = p.context
    print(f"memory: KV pool {gib(max(p.pool_bytes, 0))} on {p.gpu_count} GPU(s) after the weights "
          f"(target {p.target_weight_bytes / 1e9:.1f} GB + drafter {p.drafter_weight_bytes / 1e9:.2f} GB); "
          f"KV per token at {ctx} tokens: target {p.target.bytes_for(ctx) / ctx / 1024:.1f} KiB, "
          f"drafter {p.drafter.bytes_for(ctx) / ctx / 1024:.1f} KiB")
    largest = (f"{tokens(p.largest_context())} tokens (the served context: the model's limit or --max-model-len, "
               "not the pool, bounds it)" if p.context_limited() else f"{tokens(p.largest_context())} tokens")
    print(f"        capacity {tokens(p.capacity_tokens)} tokens over all sequences "
          f"({tokens(p.capacity_tokens_without_drafter)} without the drafter: {p.drafter_capacity_share:.0%} to the "
          f"drafter); largest context at concurrency {p.concurrency}: {largest}")


def _known_engine_version(engine: str, version: str, gpu: str | None) -> None:
    from ..core.versions import parse_version

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

    from ..core.policy import check_policy
    from ..core.render import RenderError, render
    from .common import policy_args

    from .manifests import config_from_manifests, load_file, load_kustomization

    policy = policy_args(args)
    where = f"-k {args.kustomize}" if args.kustomize else ("stdin" if args.filename == "-" else args.filename)
    docs = load_kustomization(args.kustomize) if args.kustomize else load_file(args.filename)
    if any(isinstance(d, dict) and d.get("kind") == "SpeculativeBenchmark" for d in docs):
        return _render_benchmark(args, policy, where, docs)
    if args.deployment or args.method_drafter_config:
        raise UsageError(f"--deployment and --method-drafter-config render a SpeculativeBenchmark; {where} holds none")
    cr = _load_cr(where, docs)
    cr.metadata.namespace = cr.metadata.namespace or "default"
    # the tenancy policy first, as the webhook and the reconciler apply it (claims by label: undecidable here)
    refused = check_policy(cr.spec, policy, namespace=cr.metadata.namespace)
    if refused:
        print(f"{PROG} render: {cr.metadata.name}: refused by the tenancy policy; nothing rendered", file=sys.stderr)
        _print_findings(refused, sys.stderr)
        if args.output == "json":
            from ..core.findings import report

            print(json.dumps({**report(refused), "rendered": False, "exitCode": 1}, indent=2))
        return 1
    if cr.spec.drafter is None and args.drafter_config:
        raise UsageError(f"method {cr.spec.speculation.method} has no drafter: drop --drafter-config")
    configs = {"drafter": None}
    for role, given in (("drafter", args.drafter_config), ("target", args.target_config)):
        if getattr(cr.spec, role) is None:
            continue  # mtp, ngram, suffix: no drafter
        if given:
            configs[role] = _load_json_config(given, role)
            continue
        doc = config_from_manifests(cr, docs, role, where)
        if doc is None:
            raise UsageError(f"spec.{role} has no configFrom ConfigMap (the operator reads its config.json from "
                             f"{'a PVC' if getattr(cr.spec, role).pvc is not None else 'the hub'}): pass --{role}-config")
        configs[role] = doc
    drafter, target = configs["drafter"], configs["target"]
    try:
        r = render(cr, target, drafter, pod_monitor=args.pod_monitor, policy=policy)
    except RenderError as e:
        print(f"{PROG} render: {cr.metadata.name}: the drafter/target check failed; nothing rendered", file=sys.stderr)
        _print_findings(e.findings, sys.stderr)
        if args.output == "json":
            from ..core.findings import report

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


def _refused(name: str, findings, output: str, what: str = "refused by the tenancy policy") -> int:
    import json

    print(f"{PROG} render: {name}: {what}; nothing rendered", file=sys.stderr)
    _print_findings(findings, sys.stderr)
    if output == "json":
        from ..core.findings import report

        print(json.dumps({**report(findings), "rendered": False, "exitCode": 1}, indent=2))
    return 1


def _method_drafter_configs(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        name, eq, path = item.partition("=")
        if not eq or not name or not path:
            raise UsageError(f"--method-drafter-config {item!r}: expected VARIANT=FILE (the variant is the method's "
                             "name, e.g. eagle3, or eagle3-2 for the second eagle3 of spec.matrix.methods)")
        if name in out:
            raise UsageError(f"--method-drafter-config {name} is given twice")
        out[name] = _load_json_config(path, "drafter")
    return out


def _render_benchmark(args: argparse.Namespace, policy, where: str, docs: list) -> int:
    """``specdeploy render`` of a SpeculativeBenchmark: the tenancy policy on its deployment (as in --deployment or
    the same file) and each method drafter first (exit 1 with the policy's codes), then every object the operator
    would create for it, variant after variant (core/bench/objects.render_benchmark)."""
    import json

    import yaml

    from ..api.benchmark import validate as validate_benchmark
    from ..api.validation import problems_message
    from ..core.bench.objects import BenchRefused, render_benchmark
    from ..core.bench.plan import PlanError
    from ..core.findings import Finding, Severity, Source
    from ..core.render import PolicyRefused, RenderError, with_drafter
    from .manifests import config_from_manifests, load_file

    benches = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SpeculativeBenchmark"]
    if len(benches) != 1:
        raise UsageError(f"{where} must hold exactly one SpeculativeBenchmark, found {len(benches)}")
    bench, problems = validate_benchmark(benches[0])
    if bench is None:
        raise UsageError(f"{where}: invalid SpeculativeBenchmark: {problems_message(problems)}")
    ns = bench.metadata.namespace or "default"
    dep_docs, dep_where = docs, where
    if args.deployment:
        dep_where = "stdin" if args.deployment == "-" else args.deployment
        dep_docs = load_file(args.deployment)
    ref = bench.spec.deployment_ref.name
    crs = [d for d in dep_docs if isinstance(d, dict) and d.get("kind") == "SpeculativeDeployment"
           and (d.get("metadata") or {}).get("name") == ref]
    if len(crs) != 1:
        raise UsageError(f"spec.deploymentRef.name is {ref}: {dep_where} must hold that SpeculativeDeployment "
                         f"(found {len(crs)}); pass it with --deployment SD.yaml")
    dcr = _load_cr(dep_where, crs)
    if (dcr.metadata.namespace or ns) != ns:
        raise UsageError(f"SpeculativeDeployment {ref} is in namespace {dcr.metadata.namespace}, the benchmark in {ns}: "
                         "a benchmark measures a deployment of its own namespace")
    dcr.metadata.namespace = ns
    cms = list(docs) + (list(dep_docs) if dep_docs is not docs else [])
    configs: dict[str, Any] = {"drafter": None}
    for role, given in (("drafter", args.drafter_config), ("target", args.target_config)):
        if getattr(dcr.spec, role) is None:
            if given:
                raise UsageError(f"method {dcr.spec.speculation.method} has no drafter: drop --drafter-config")
            continue
        doc = _load_json_config(given, role) if given else config_from_manifests(dcr, cms, role, dep_where)
        if doc is None:
            raise UsageError(f"spec.{role} of SpeculativeDeployment {ref} has no configFrom ConfigMap: "
                             f"pass --{role}-config")
        configs[role] = doc
    given = _method_drafter_configs(args.method_drafter_config)
    method_drafters: dict[str, Any] = {}
    try:
        from ..core.bench.objects import plan_for

        # the policy first: a refused benchmark reads no method drafter's config
        from ..core.render import benchmark_refusals

        refused = benchmark_refusals(bench.spec, dcr, policy, namespace=ns)
        if refused:
            return _refused(bench.metadata.name, refused, args.output)
        plan = plan_for(bench.spec, dcr, configs["target"], configs["drafter"])
        for v in plan.variants:
            if v.method_speculation is None or not v.drafter:
                continue
            if v.name in given:
                method_drafters[v.name] = given.pop(v.name)
                continue
            from ..api.types import ModelSource

            doc = config_from_manifests(with_drafter(dcr, ModelSource.model_validate(v.drafter)), cms, "drafter", where)
            if doc is None:
                raise UsageError(f"variant {v.name} (spec.matrix.methods, drafter {v.drafter.get('model')}): pass "
                                 f"--method-drafter-config {v.name}=FILE, or give its drafter a configFrom ConfigMap "
                                 f"in {where}")
            method_drafters[v.name] = doc
        if given:
            raise UsageError(f"--method-drafter-config {', '.join(sorted(given))}: no such drafter-method variant "
                             f"(variants: {', '.join(v.name for v in plan.variants)})")
        objects = render_benchmark(bench, dcr, configs["target"], configs["drafter"], method_drafters, policy, ns)
    except PolicyRefused as e:
        return _refused(bench.metadata.name, e.findings, args.output)
    except (BenchRefused, PlanError) as e:
        reason = getattr(e, "reason", "InvalidMatrix")
        return _refused(bench.metadata.name, [Finding(Severity.ERROR, reason, Source.SPEC, "spec",
                                                      getattr(e, "message", str(e)))],
                        args.output, "the benchmark cannot be planned")
    except RenderError as e:
        return _refused(bench.metadata.name, e.findings, args.output, "a variant's check failed")
    except ValueError as e:
        return _refused(bench.metadata.name, [Finding(Severity.ERROR, "VariantNotRenderable", Source.SPEC, "spec",
                                                      str(e))], args.output, "a variant does not render")
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.safe_dump_all(objects, sort_keys=False, width=1000), end="")
    return 0


def add_parsers(sub) -> None:
    # The tables are standard-library only: cheap to import for choices.
    from ..core.engines import ENGINE_NAMES
    from ..core.gpus import PROFILE_KEYS
    from ..core.methods import DEFAULT_METHOD, METHODS

    c = sub.add_parser("check", help="check a drafter config.json against its target's",
                       description="Check a drafter config.json against the target's (no drafter for --method mtp, "
                       "ngram, suffix), and with --engine and --gpu also against the engine release and the GPU pool. "
                       "Every finding names the field and the fix.",
                       epilog=epilog(["specdeploy check --drafter z-lab/Qwen3.6-27B-DFlash/ --target Qwen3.6-27B/",
                                      "specdeploy check --drafter d.json --target t.json --engine sglang "
                                      "--gpu rtx-pro-6000 --gpu-count 8 -o json",
                                      "specdeploy check --drafter d.json --target t.json --engine vllm "
                                      "--engine-version 0.32.0 --gpu cpu",
                                      "specdeploy check --method mtp --target DeepSeek-V3/ --engine sglang"],
                                     ok="no errors (warnings may be printed)", findings="the check found errors",
                                     json_errors=True))
    c.add_argument("--drafter", metavar="D", help="drafter config.json, or a directory holding one (required for "
                   "drafter methods; refused for mtp, ngram and suffix)")
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
    c.add_argument("--gpu-count", type=positive_int, default=1, metavar="N", help="GPUs per replica (tensor parallel)")
    c.add_argument("--nodes", type=positive_int, default=1, metavar="N", help="nodes per replica")
    c.add_argument("--method", choices=METHODS,
                   help="speculative method (spec.speculation.method); default: the one that serves the drafter's "
                   f"detected family (EAGLE-3: eagle3, DFlash2: dflash2, DSpark: dspark, ...; {DEFAULT_METHOD} when "
                   "the family is unknown), without --drafter mtp when the target has MTP layers")
    c.add_argument("--steps", type=positive_int, metavar="N", help="draft steps (spec.speculation.eagle/mtp.steps)")
    c.add_argument("--topk", type=positive_int, metavar="N", help="top-k per step (spec.speculation.eagle/mtp.topk)")
    c.add_argument("--draft-tokens", type=positive_int, metavar="N",
                   help="tokens verified per step (spec.speculation.eagle/mtp.draftTokens)")
    c.add_argument("--lookup-min", type=positive_int, metavar="N", help="spec.speculation.ngram.lookupMin")
    c.add_argument("--lookup-max", type=positive_int, metavar="N", help="spec.speculation.ngram.lookupMax")
    c.add_argument("--ngram-tokens", type=positive_int, metavar="N",
                   help="spec.speculation.ngram.numSpeculativeTokens")
    c.add_argument("--max-model-len", type=positive_int, metavar="N",
                   help="context the engine serves (spec.engine.maxModelLen; default: the target's limit)")
    c.add_argument("--concurrency", type=positive_int, metavar="N",
                   help="running requests the memory figures are taken at (default 1; a deployment uses "
                   "spec.speculation.guard.maxConcurrency)")
    c.add_argument("--draft-window", metavar="N|off", help="spec.speculation.draftWindow: SGLang's compact draft cache")
    c.add_argument("--accept", action="append", metavar="CODE",
                   help="accept this finding code (spec.checks.accept): a warning or judgement error becomes info "
                   "(repeatable)")
    c.add_argument("--output", "-o", choices=OUTPUTS, default="text")
    c.set_defaults(func=cmd_check)

    r = sub.add_parser("render", help="print the objects the operator would create for a SpeculativeDeployment or a "
                       "SpeculativeBenchmark",
                       description="Check a SpeculativeDeployment against the tenancy policy (the operator's defaults, "
                       "or the policy flags below, as the chart passes them to the operator: the same verdicts as the "
                       "admission webhook) and its drafter/target pair, and print every object the "
                       "operator would create for it (engine ConfigMap, Deployment or LeaderWorkerSet, Service, "
                       "PodDisruptionBudget, optionally the PodMonitor), as YAML or a JSON List. Warnings go to stderr. "
                       "The drafter's and target's config.json come from --drafter-config/--target-config, else from "
                       "the ConfigMaps their configFrom names in the -f file or the -k kustomization. "
                       "A file holding a SpeculativeBenchmark renders the benchmark: the policy on the deployment it "
                       "measures (--deployment, or the same file) and on each spec.matrix.methods[].drafter, then each "
                       "variant's engine ConfigMap, Deployment and Service, client plan ConfigMap and client Job (the "
                       "operator creates one variant at a time); --drafter-config/--target-config are the deployment's "
                       "and --method-drafter-config VARIANT=FILE a drafter method's (else its configFrom ConfigMap).",
                       epilog=epilog(["specdeploy render -f examples/qwen3.6-27b-b300-vllm/speculativedeployment.yaml "
                                      "--drafter-config examples/qwen3.6-27b-b300-vllm/drafter.config.json "
                                      "--target-config examples/qwen3.6-27b-b300-vllm/target.config.json",
                                      "specdeploy render -k examples/qwen3.6-27b-b300-vllm",
                                      "cat cr.yaml | specdeploy render -f - --drafter-config d/ --target-config t/ -o json",
                                      "specdeploy render -k examples/kimi-k2.6-rtx-pro-6000-sglang "
                                      "--allow-trust-remote-code-model moonshotai",
                                      "specdeploy render -f examples/dev/tiny-benchmark.yaml --deployment "
                                      "examples/dev/tiny-cpu.yaml --drafter-config d/ --target-config t/"],
                                     ok="rendered", findings="the tenancy policy refused the spec or the check failed: "
                                     "nothing rendered (findings on stderr; with -o json also on stdout)",
                                     json_errors=True))
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument("-f", "--filename", help="YAML with the SpeculativeDeployment, and optionally the ConfigMaps its "
                     "configFrom names ('-' for stdin)")
    src.add_argument("-k", "--kustomize", metavar="DIR", help="a kustomization directory, as `kubectl apply -k DIR` "
                     "takes it: resources and configMapGenerator are read in-process, anything else is built by "
                     "`kubectl kustomize DIR` (kubectl on the PATH)")
    r.add_argument("--drafter-config", metavar="D", help="drafter config.json or directory (default: the ConfigMap "
                   "spec.drafter.configFrom names, from -f/-k; not for mtp, ngram, suffix)")
    r.add_argument("--target-config", metavar="T", help="target config.json or directory (default: the ConfigMap "
                   "spec.target.configFrom names, from -f/-k)")
    r.add_argument("--deployment", metavar="SD.yaml", help="a SpeculativeBenchmark's SpeculativeDeployment as stored "
                   "(and the ConfigMaps its configFrom names; default: the -f file)")
    r.add_argument("--method-drafter-config", action="append", metavar="VARIANT=FILE",
                   help="a SpeculativeBenchmark's drafter-method variant (eagle3, eagle3-2, ...): its drafter's "
                   "config.json or directory (default: the ConfigMap its configFrom names; repeatable)")
    r.add_argument("--output", "-o", choices=["yaml", "json"], default="yaml")
    r.add_argument("--pod-monitor", action="store_true", help="include the PodMonitor (prometheus-operator)")
    from .common import add_policy_args

    add_policy_args(r.add_argument_group("tenancy policy (default: the operator's; pass the flags the chart passes "
                                         "to `specdeploy operator run` to render as that installation would)"))
    r.set_defaults(func=cmd_render)
