"""Admission for SpeculativeDeployment: the pure core of the validating and mutating webhooks.

``review(body, configs_lookup=..., webhook="validate"|"mutate")`` takes an AdmissionReview v1
request (a dict, or the raw HTTP body as bytes/str) exactly as the API server sends it and
returns the AdmissionReview response dict. It never raises and never does I/O itself: the only
outside input is ``configs_lookup(namespace, spec)``, which returns both config.json documents
when they are already known (a ``Configs`` or a ``(target_doc, drafter_doc)`` pair), or None /
raises ``ConfigsUnavailable`` when they are not. ``areview`` is the same for an async lookup
(the webhook server's, which may GET a ConfigMap through the API).

What is checked (docs/concepts/admission.md):

- always: the object parses as a SpeculativeDeployment (pydantic, with field paths) and the
  checker's object-level rules (``check_options``: engine/method/version, GPU profile and count,
  ddtree fields, draftWindow vs blockSize, extraArgs owned flags, model references);
- when both configs are known: the full drafter/target check (``analyze``);
- otherwise: admitted with a warning that the drafter/target check runs before rollout.

A SpeculativeBenchmark (``_benchmark_flow``) is validated and checked against the tenancy policy with the
SpeculativeDeployment it measures as stored: the flow asks for it (``_DeploymentStep``), answered by
``deployment_lookup(namespace, name)`` or the configs lookup's ``deployment`` method (the operator's watch cache);
without one, or when it is missing, invalid or refused, the benchmark is refused (core/render/gate.py).

Errors reject (HTTP 200, ``allowed: false``, ``status.code`` 422) with every finding and its path;
warnings go to ``response.warnings``. Malformed reviews get ``allowed: false`` with code 400.
The mutating webhook only adds the documented defaults (api/types.py) that are absent from
``spec``, as a base64 JSONPatch; it never rejects a well-formed review.
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Hashable, NamedTuple

from pydantic import BaseModel

from .. import API_GROUP, API_VERSION, KIND
from ..api.benchmark import BENCH_KIND, BENCH_PLURAL
from ..api.benchmark import validate as validate_benchmark
from ..api.types import SpeculativeDeployment, SpeculativeDeploymentSpec
from ..api.validation import parse as parse_spec
from ..core.checker import Options, analyze, check_options
from ..core.checker.options import options_bytes
from ..core.policy import TenancyPolicy, check_policy
from ..core.findings import Finding, Severity, Source, findings_bytes, has_errors
from ..core.memo import MiB, BoundedLRU, approx_size
from ..core.names import GROUP_VERSION
from specdeploy.core.errors import Retryable

log = logging.getLogger("specdeploy.admission")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
WEBHOOKS = ("validate", "mutate")
WARNING_MAX = 256  # Kubernetes truncates longer warnings; 120 is the recommended length
MESSAGE_MAX = 16384
# An error storm (an object with thousands of refused values) is answered with the first PROBLEMS_MAX problems
# and a line saying more were left out; no work is spent on the rest (api/validation.parse's limit).
PROBLEMS_MAX = 50
WARNINGS_MAX = 20  # warnings per answer (the API server caps the warning headers it relays too)
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
CONFIGS_UNKNOWN_NOTE = "the drafter/target check runs before rollout (condition DrafterCompatible)"


class ConfigsUnavailable(Retryable):
    """Raised by a configs lookup: the configs are not known now (the message says why)."""


class Configs(NamedTuple):
    """Both config.json documents, as a lookup returns them."""

    target: Any
    drafter: Any
    cached: bool = False  # from a cache: a rejection is re-checked with fresh=True first
    sources: tuple[str, str] = ("", "")  # where each came from, for the rejection message
    key: Hashable | None = None  # identifies both documents' content (e.g. uid+resourceVersion): memoizes the check


ConfigsLookup = Callable[..., Any]


# ----------------------------------------------------------------- responses


def _response(uid: Any, allowed: bool, *, status: dict | None = None, warnings: list[str] | None = None,
              patch: list | None = None) -> dict:
    resp: dict[str, Any] = {"uid": uid if isinstance(uid, str) else "", "allowed": allowed}
    if status is not None:
        resp["status"] = status
    if warnings:
        resp["warnings"] = warnings
    if patch:
        resp["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
        resp["patchType"] = "JSONPatch"
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": resp}


def malformed(uid: Any, message: str) -> dict:
    """The answer to a review we cannot read: refused, HTTP 200, code 400."""
    msg = f"malformed AdmissionReview: {message}"
    return _response(uid, False, status={"status": "Failure", "code": 400, "reason": "BadRequest", "message": _clip(msg, MESSAGE_MAX)})


def too_large(uid: Any, message: str) -> dict:
    """The answer to a review whose body is over the server's limit (its uid read from the start): code 413."""
    return _response(uid, False, status={"status": "Failure", "code": 413, "reason": "RequestEntityTooLarge",
                                         "message": _clip(message, MESSAGE_MAX)})


def internal_error(uid: Any, exc: BaseException) -> dict:
    """Last resort (a bug): refused with code 500 in the review, still HTTP 200."""
    msg = f"internal error in the specdeploy admission webhook ({type(exc).__name__}: {str(exc)[:200]}); please report it"
    return _response(uid, False, status={"status": "Failure", "code": 500, "reason": "InternalError", "message": msg})


def _clean(text: str) -> str:
    """Printable single-line text (warnings must be printable; user values are quoted in messages)."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else " " for ch in text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _where(f: Finding) -> str:
    return f.path if f.source is Source.SPEC else f"{f.source.value} {f.path}"


def warning_text(f: Finding) -> str:
    return _clip(_clean(f"{_where(f)}: {f.message}"), WARNING_MAX)


# ----------------------------------------------------------------- the request


@dataclass
class Request:
    uid: str
    webhook: str
    operation: str
    namespace: str
    name: str
    obj: Any
    old: Any
    sub_resource: str
    dry_run: bool
    extra: dict = field(default_factory=dict)
    kind: str = KIND  # SpeculativeDeployment, or SpeculativeBenchmark (validated only: _benchmark_review)


def _parse_body(body: Any, webhook: str) -> Request | dict:
    if webhook not in WEBHOOKS:
        return malformed("", f"unknown webhook {webhook!r}; the paths are /validate and /mutate")
    if isinstance(body, (bytes, bytearray, memoryview)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            return malformed("", "the request body is not UTF-8 text; send an admission.k8s.io/v1 AdmissionReview as JSON")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except RecursionError:
            return malformed("", "the request body nests too deeply to be an AdmissionReview")
        except ValueError as e:
            return malformed("", f"the request body is not JSON ({_clip(str(e), 120)}); "
                                 "send an admission.k8s.io/v1 AdmissionReview")
    if not isinstance(body, dict):
        return malformed("", f"the request body is a JSON {type(body).__name__}, not an object; "
                             "send an admission.k8s.io/v1 AdmissionReview")
    req = body.get("request")
    uid = req.get("uid") if isinstance(req, dict) else ""
    if body.get("apiVersion") != ADMISSION_API_VERSION:
        return malformed(uid, f"apiVersion is {_short(body.get('apiVersion'))}, expected {ADMISSION_API_VERSION!r} "
                              "(set admissionReviewVersions: [v1] in the webhook configuration)")
    if body.get("kind") != "AdmissionReview":
        return malformed(uid, f"kind is {_short(body.get('kind'))}, expected 'AdmissionReview'")
    if not isinstance(req, dict):
        return malformed("", "request is missing or not an object")
    if not isinstance(uid, str) or not uid:
        return malformed("", "request.uid is missing or not a non-empty string")
    op = req.get("operation")
    if op not in OPERATIONS:
        return malformed(uid, f"request.operation is {_short(op)}, expected one of {', '.join(OPERATIONS)}")
    sub = req.get("subResource") or ""
    if not isinstance(sub, str):
        return malformed(uid, "request.subResource is not a string")
    kind = req.get("kind")
    if not isinstance(kind, dict):
        return malformed(uid, "request.kind is missing or not an object ({group, version, kind})")
    resource = req.get("resource") if isinstance(req.get("resource"), dict) else {}
    reviewed = "speculativedeployments and speculativebenchmarks"
    if sub:  # status or scale (request.kind is then e.g. autoscaling/v1 Scale): not reviewed
        if resource and resource.get("resource") not in (None, "speculativedeployments", BENCH_PLURAL):
            return malformed(uid, f"request.resource is {_short(resource)}: this webhook reviews "
                                  f"{reviewed} only; fix the rules of the webhook configuration")
    elif kind.get("group") != API_GROUP or kind.get("kind") not in (KIND, BENCH_KIND) or kind.get("version") != API_VERSION:
        return malformed(uid, f"request.kind is {_short(kind)}: this webhook reviews {GROUP_VERSION} {KIND} "
                              f"and {BENCH_KIND} only; fix the rules of the webhook configuration")
    dry = req.get("dryRun", False)
    if dry is not None and not isinstance(dry, bool):
        return malformed(uid, "request.dryRun is not a boolean")
    obj, old = req.get("object"), req.get("oldObject")
    if op in ("CREATE", "UPDATE") and not sub and not isinstance(obj, dict):
        return malformed(uid, f"request.object is {'missing' if obj is None else 'a JSON ' + type(obj).__name__}; "
                              f"a {op} review carries the object")
    if op == "UPDATE" and not sub and old is not None and not isinstance(old, dict):
        return malformed(uid, "request.oldObject is not an object")
    ns = req.get("namespace")
    name = req.get("name")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    if not isinstance(ns, str) or not ns:
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    if not isinstance(name, str) or not name:
        name = meta.get("name") if isinstance(meta.get("name"), str) else ""
        if not name and isinstance(meta.get("generateName"), str):
            name = meta["generateName"] + "(generated)"
    is_bench = (kind.get("kind") == BENCH_KIND) if not sub else (resource.get("resource") == BENCH_PLURAL)
    return Request(uid=uid, webhook=webhook, operation=op, namespace=ns or "default", name=name, obj=obj, old=old,
                   sub_resource=sub, dry_run=bool(dry), kind=BENCH_KIND if is_bench else KIND)


def _short(v: Any) -> str:
    return _clip(repr(v), 80)


# ----------------------------------------------------------------- validation


class _Memo(BoundedLRU):
    """A thread-safe LRU for pure checks (findings are immutable), bounded in entries and bytes (core/memo.py)."""

    def __init__(self, name: str, size: int, max_bytes: int):
        super().__init__(name, size, max_bytes, sizeof=lambda key, findings: _key_bytes(key) + findings_bytes(findings))
        self._missing = object()

    def remember(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        try:
            hit = self.get(key, self._missing)
        except TypeError:  # an unhashable key: not remembered
            return compute()
        if hit is not self._missing:
            return hit
        value = compute()
        self.put(key, value)
        return value


def _key_bytes(key: Any) -> int:
    """An Options value, or (Configs.key, Options): the options at their length (options_bytes), the rest walked."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], Options):
        return approx_size(key[0]) + options_bytes(key[1]) + 64
    return options_bytes(key)


# docs/concepts/security.md "Bounded memory": an Options value holds the spec's extraArgs (up to 128 x 4 KiB)
_OPTIONS_MEMO = _Memo("admission.options", 2048, 8 * MiB)  # Options -> check_options findings
_PAIR_MEMO = _Memo("admission.pair", 512, 8 * MiB)  # (Configs.key, Options) -> analyze findings


def _check_options(opts: Options) -> list[Finding]:
    return list(_OPTIONS_MEMO.remember(opts, lambda: tuple(check_options(opts))))


def _analyze(configs: "Configs", opts: Options) -> list[Finding]:
    if configs.key is None:
        return analyze(configs.drafter, configs.target, opts).findings
    return list(_PAIR_MEMO.remember((configs.key, opts), lambda: tuple(analyze(configs.drafter, configs.target, opts).findings)))


def _parse_cr(req: Request) -> tuple[SpeculativeDeployment | None, list[tuple[str, str, str]]]:
    """(parsed CR, []) or (None, [(path, message, code)...]) in the spec message catalog's words
    (api/validation.py: the same the status and the CLI show)."""
    obj = dict(req.obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and not meta.get("name") and req.name:
        obj["metadata"] = {**meta, "name": req.name}  # generateName: not named yet at mutation time
    cr, problems = parse_spec(obj, limit=PROBLEMS_MAX + 1)  # one more: says whether any were left out
    return cr, [(p.path, p.message, p.code) for p in problems]


def _rejection(req: Request, problems: list[tuple[str, str, str]], header_extra: str = "",
               counted: bool = True) -> dict:
    """Refused with the problems, the first PROBLEMS_MAX of them listed. ``counted``: ``problems`` is all of them
    (else the list stopped at PROBLEMS_MAX + 1: "at least")."""
    who = f"{req.kind} {req.namespace}/{req.name}" if req.name else req.kind
    n = len(problems)
    shown = problems[:PROBLEMS_MAX]
    count = f"{n} error{'s' if n != 1 else ''}" if counted or n <= PROBLEMS_MAX else f"more than {PROBLEMS_MAX} errors"
    if len(shown) < n:
        count += f"; the first {len(shown)} are listed"
    lines = [f"{who} is invalid ({count}){header_extra}:"]
    for path, msg, code in shown:
        lines.append(f"- {path}: {msg} [{code}]")
    if len(shown) < n:
        lines.append(f"- ... and {f'{n - len(shown)} more' if counted else 'more'}: fix these and apply again")
    message = _clip("\n".join(lines), MESSAGE_MAX)
    causes = [{"field": p, "message": _clip(m, 1024), "reason": "FieldValueInvalid"} for p, m, _ in shown]
    details: dict[str, Any] = {"group": API_GROUP, "kind": req.kind, "causes": causes}
    if req.name:
        details["name"] = req.name
    return _response(req.uid, False, status={"status": "Failure", "code": 422, "reason": "Invalid",
                                             "message": message, "details": details})


def _reject_findings(req: Request, findings: list[Finding], sources: tuple[str, str] = ("", "")) -> dict:
    errs = [f for f in findings if f.severity is Severity.ERROR]
    extra = ""
    if any(f.source is not Source.SPEC for f in errs) and any(sources):
        extra = f" (target config from {sources[0] or '?'}, drafter config from {sources[1] or '?'})"
    return _rejection(req, [(_where(f), f.message, f.code) for f in errs], extra)


def _warnings(findings: list[Finding]) -> list[str]:
    return _capped_warnings([f for f in findings if f.severity is Severity.WARNING])


def _capped_warnings(findings: list[Finding]) -> list[str]:
    """At most WARNINGS_MAX warnings, the last one saying how many were left out."""
    out = [warning_text(f) for f in findings[:WARNINGS_MAX]]
    if len(findings) > WARNINGS_MAX:
        out[-1] = f"... and {len(findings) - WARNINGS_MAX + 1} more warnings"
    return out


def _as_configs(got: Any) -> Configs | None:
    """A lookup's answer as Configs; None for "not known" (None, an exception, anything unexpected)."""
    if isinstance(got, Configs):
        return got
    if isinstance(got, (tuple, list)) and len(got) == 2:
        return Configs(got[0], got[1])
    if got is not None and not isinstance(got, BaseException):
        log.warning("configs lookup returned %s; expected (target_doc, drafter_doc) or None", type(got).__name__)
    return None


# A lookup step: the flow yields (namespace, spec, fresh) and is sent back the lookup's result
# (Configs/pair/None) or the exception it raised. One flow serves the sync and async drivers.
_Flow = Generator[tuple[str, SpeculativeDeploymentSpec, bool], Any, dict]


def _validate_flow(req: Request, policy: TenancyPolicy | None = None) -> _Flow:
    if req.operation in ("DELETE", "CONNECT") or req.sub_resource:
        return _response(req.uid, True)
    meta = req.obj.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):
        return _response(req.uid, True)  # finalizer removal and the like must never be blocked
    ratchet = req.operation == "UPDATE" and isinstance(req.old, dict) and req.old.get("spec") == req.obj.get("spec")
    cr, problems = _parse_cr(req)
    if cr is None:
        if ratchet:  # an object that was invalid before this update: do not block metadata-only updates
            return _response(req.uid, True, warnings=[_clip(_clean(f"{p}: {m} (spec unchanged by this update)"), WARNING_MAX)
                                                      for p, m, _ in problems][:WARNINGS_MAX])
        return _rejection(req, problems, counted=len(problems) <= PROBLEMS_MAX)
    refused = check_policy(cr.spec, policy if policy is not None else TenancyPolicy(),
                           namespace=req.namespace or cr.metadata.namespace)
    opts = cr.spec.options()
    findings = _check_options(opts)
    if ratchet:  # a metadata-only update: the reconciler refuses what the policy or the check do not allow
        return _response(req.uid, True, warnings=[warning_text(f) for f in refused + findings
                                                  if f.severity is not Severity.INFO][:WARNINGS_MAX])
    if refused:  # before any config is read on the object's behalf
        return _reject_findings(req, refused)

    got = yield (req.namespace, cr.spec, False)
    unknown = None
    configs = None
    if isinstance(got, BaseException):
        unknown = str(got) if isinstance(got, ConfigsUnavailable) else f"the configs could not be read ({type(got).__name__})"
    else:
        configs = _as_configs(got)
    if configs is not None:
        full = _analyze(configs, opts)
        if has_errors(full) and configs.cached:
            fresh = _as_configs((yield (req.namespace, cr.spec, True)))
            if fresh is not None:
                configs = fresh
                full = _analyze(configs, opts)
        if has_errors(full):
            return _reject_findings(req, full, configs.sources)
        return _response(req.uid, True, warnings=_warnings(full))
    if any(f.severity is Severity.ERROR for f in findings):
        return _reject_findings(req, findings)
    warnings = _warnings(findings)
    note = "spec.target/spec.drafter: config.json not known at admission"
    if unknown:  # the reason is clipped, never the note on what happens next
        note += f" ({_clip(str(unknown), WARNING_MAX - len(note) - len(CONFIGS_UNKNOWN_NOTE) - 5)})"
    warnings.append(_clip(_clean(f"{note}; {CONFIGS_UNKNOWN_NOTE}"), WARNING_MAX))
    return _response(req.uid, True, warnings=warnings)


# ----------------------------------------------------------------- mutation


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(model class, is a list of it) for a field annotation, or (None, False)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation, False
    if origin is list and args:
        m, _ = _model_of(args[0])
        return m, m is not None
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for a in args:
            if a is not type(None):
                m, is_list = _model_of(a)
                if m is not None:
                    return m, is_list
    return None, False


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _prune(v: Any) -> Any:
    """A default value as JSON, without empty collections (they add nothing)."""
    if isinstance(v, dict):
        out = {k: _prune(x) for k, x in v.items() if x is not None}
        return {k: x for k, x in out.items() if x not in ({}, [])}
    if isinstance(v, list):
        return [_prune(x) for x in v]
    return v


def _fill_defaults(model: type[BaseModel], data: dict, ptr: str, ops: list) -> None:
    for name, f in model.model_fields.items():
        alias = f.alias or name
        present = alias if alias in data else (name if name in data else None)
        sub_model, is_list = _model_of(f.annotation)
        if present is None:
            if f.is_required():
                continue
            default = f.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                value = _prune(default.model_dump(mode="json", by_alias=True))
            else:
                value = _prune(default)
            if value is None or value in ({}, []):
                continue
            ops.append({"op": "add", "path": f"{ptr}/{_escape(alias)}", "value": value})
        elif sub_model is not None:
            v = data[present]
            if is_list and isinstance(v, list):
                for idx, item in enumerate(v):
                    if isinstance(item, dict):
                        _fill_defaults(sub_model, item, f"{ptr}/{_escape(present)}/{idx}", ops)
            elif not is_list and isinstance(v, dict):
                _fill_defaults(sub_model, v, f"{ptr}/{_escape(present)}", ops)


def defaults_patch(obj: Any) -> list[dict]:
    """JSONPatch ops adding the documented spec defaults that are absent (never touches status)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
        return []
    ops: list[dict] = []
    _fill_defaults(SpeculativeDeploymentSpec, obj["spec"], "/spec", ops)
    return ops


def _mutate(req: Request) -> dict:
    if req.operation not in ("CREATE", "UPDATE") or req.sub_resource:
        return _response(req.uid, True)
    meta = req.obj.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):
        return _response(req.uid, True)
    return _response(req.uid, True, patch=defaults_patch(req.obj))


# ----------------------------------------------------------------- drivers


class _DeploymentStep(NamedTuple):
    """A flow step asking for the stored SpeculativeDeployment ``name`` of ``namespace`` (a benchmark's
    deploymentRef): answered with its body, None (not found) or the exception the lookup raised."""

    namespace: str
    name: str


_NO_DEPLOYMENT_LOOKUP = ConfigsUnavailable("this webhook has no lookup of stored SpeculativeDeployments")


class NotRead(NamedTuple):
    """A deployment lookup's answer for a caller that may not be told what is stored (no verified API-server client
    certificate: controller/webhooks.unverified_lookup): nothing was read, so the benchmark is answered from its own
    object (validation) and the policy is applied by the benchmark controller at reconcile."""

    why: str


def _benchmark_flow(req: Request, policy: TenancyPolicy | None = None) -> Generator[Any, Any, dict]:
    """A SpeculativeBenchmark: validated (api/benchmark.validate, the words the operator's status uses), then the
    tenancy policy (core/render/gate.benchmark_refusals) applied to the deployment it measures AS STORED (looked up:
    a benchmark of a deployment that is not there, is invalid or is refused is refused with that deployment's
    findings) and to each spec.matrix.methods[].drafter as its variant would carry it. Never mutated (its defaults
    are the CRD schema's). Subresources, DELETE and objects being deleted pass; an update that leaves the spec
    unchanged passes with the refusals as warnings (the spec is immutable; the controller refuses at reconcile)."""
    if req.webhook == "mutate" or req.operation in ("DELETE", "CONNECT") or req.sub_resource:
        return _response(req.uid, True)
    meta = req.obj.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):
        return _response(req.uid, True)
    obj = dict(req.obj)
    if isinstance(meta, dict) and not meta.get("name") and req.name:
        obj["metadata"] = {**meta, "name": req.name}
    ratchet = req.operation == "UPDATE" and isinstance(req.old, dict) and req.old.get("spec") == req.obj.get("spec")
    bench, problems = validate_benchmark(obj)
    triples = [(p.path, p.message, p.code) for p in problems]
    if bench is not None:
        ref = bench.spec.deployment_ref.name
        got = yield _DeploymentStep(req.namespace, ref)
        if isinstance(got, NotRead):  # answered from the object alone: the same answer whatever is stored
            return _response(req.uid, True, warnings=[_clip(_clean(
                f"spec.deploymentRef.name: the tenancy policy is applied when the benchmark runs ({got.why})"),
                WARNING_MAX)])
        if got is None and not triples:  # not there yet (applied together, or before it): the benchmark waits
            return _response(req.uid, True, warnings=[_clip(_clean(
                f"spec.deploymentRef.name: SpeculativeDeployment {ref} does not exist in namespace {req.namespace} "
                "yet (or the operator has not seen it): the benchmark waits for it, and the tenancy policy is "
                "applied to it and to spec.matrix.methods when it runs"), WARNING_MAX)])
        triples = _benchmark_policy(req, bench, ref, got, policy if policy is not None else TenancyPolicy())
    if not triples:
        return _response(req.uid, True)
    if ratchet:
        return _response(req.uid, True, warnings=[_clip(_clean(f"{p}: {m} (spec unchanged by this update)"), WARNING_MAX)
                                                  for p, m, _ in triples][:20])
    return _rejection(req, triples)


def _benchmark_policy(req: Request, bench, ref: str, got: Any, policy: TenancyPolicy) -> list[tuple[str, str, str]]:
    """(path, message, code) of every reason the benchmark may not run: its deployment missing, unreadable, invalid,
    or refused by the policy, and each method drafter the policy refuses."""
    from ..api.validation import validate as validate_deployment
    from ..core.render import benchmark_refusals

    where = "spec.deploymentRef.name"
    if isinstance(got, BaseException):
        why = str(got) if isinstance(got, ConfigsUnavailable) else f"{type(got).__name__}"
        return [(where, f"SpeculativeDeployment {ref} could not be looked up ({_clip(why, 200)}); a benchmark is "
                 "admitted only against the deployment as stored: retry", "DeploymentUnavailable")]
    if got is None:
        return [(where, f"SpeculativeDeployment {ref} does not exist in namespace {req.namespace} (or the operator "
                 "has not seen it yet): create it first, or fix spec.deploymentRef.name", "DeploymentNotFound")]
    dcr, problems = validate_deployment(got)
    if dcr is None:
        return [(where, f"SpeculativeDeployment {ref} is invalid, nothing of it can be benchmarked: "
                 + "; ".join(f"{p.path}: {p.message}" for p in problems[:5]), "DeploymentInvalid")]
    dcr.metadata.namespace = req.namespace
    return [(_where(f), f.message, f.code) for f in benchmark_refusals(bench.spec, dcr, policy, namespace=req.namespace)]


def _start(body: Any, webhook: str, policy: TenancyPolicy | None = None) -> tuple[Request | None, dict | _Flow]:
    parsed = _parse_body(body, webhook)
    if isinstance(parsed, dict):
        return None, parsed
    if parsed.kind == BENCH_KIND:
        return parsed, _benchmark_flow(parsed, policy)
    if parsed.webhook == "mutate":
        return parsed, _mutate(parsed)
    return parsed, _validate_flow(parsed, policy)


def _call(lookup: ConfigsLookup | None, step: tuple, deployments: Callable[..., Any] | None = None) -> Any:
    if isinstance(step, _DeploymentStep):  # a benchmark's deploymentRef, as stored
        find = deployments if deployments is not None else getattr(lookup, "deployment", None)
        if find is None:
            return _NO_DEPLOYMENT_LOOKUP
        try:
            return find(step.namespace, step.name)
        except Exception as e:  # noqa: BLE001 - a failing lookup: the benchmark is refused, saying so
            return _detached(e)
    ns, spec, fresh = step
    if lookup is None:
        return None
    try:
        return lookup(ns, spec, fresh=True) if fresh else lookup(ns, spec)
    except Exception as e:  # noqa: BLE001 - a failing lookup only means "configs not known"
        return _detached(e)


def _detached(e: Exception) -> Exception:
    """A lookup's exception without its traceback: only its type and message are used, and the traceback's frames
    (this one's, the lookup's: the parsed spec, the request) would form a reference cycle with it that only the
    garbage collector frees. Every review whose configs are not known raises one."""
    return e.with_traceback(None)


def review(body: Any, *, configs_lookup: ConfigsLookup | None = None, webhook: str = "validate",
           policy: TenancyPolicy | None = None, deployment_lookup: Callable[..., Any] | None = None) -> dict:
    """The AdmissionReview v1 response for a request body (dict, bytes or str). Never raises.
    ``policy``: the tenancy policy (core/policy.py); None: the default policy. ``deployment_lookup(namespace,
    name)``: the stored SpeculativeDeployment body or None (a benchmark's deploymentRef); default: the configs
    lookup's ``deployment`` method; none: every benchmark is refused (it cannot be checked)."""
    uid: Any = ""
    try:
        req, flow = _start(body, webhook, policy)
        if req is None or isinstance(flow, dict):
            return flow  # type: ignore[return-value]
        uid = req.uid
        try:
            step = next(flow)
            while True:
                got = _call(configs_lookup, step, deployment_lookup)
                if inspect.isawaitable(got):
                    got.close() if hasattr(got, "close") else None  # type: ignore[union-attr]
                    got = TypeError("an async configs lookup needs areview()")
                step = flow.send(got)
        except StopIteration as stop:
            return stop.value
    except Exception as e:  # noqa: BLE001 - admission must answer, whatever it is sent
        log.exception("admission review failed")
        return internal_error(uid, e)


async def areview(body: Any, *, configs_lookup: ConfigsLookup | None = None, webhook: str = "validate",
                  policy: TenancyPolicy | None = None, deployment_lookup: Callable[..., Any] | None = None) -> dict:
    """``review`` with a lookup that may be async (the webhook server's). Never raises."""
    uid: Any = ""
    try:
        req, flow = _start(body, webhook, policy)
        if req is None or isinstance(flow, dict):
            return flow  # type: ignore[return-value]
        uid = req.uid
        try:
            step = next(flow)
            while True:
                got = _call(configs_lookup, step, deployment_lookup)
                if inspect.isawaitable(got):
                    try:
                        got = await got
                    except Exception as e:  # noqa: BLE001
                        got = _detached(e)
                step = flow.send(got)
        except StopIteration as stop:
            return stop.value
    except Exception as e:  # noqa: BLE001
        log.exception("admission review failed")
        return internal_error(uid, e)


def decode_patch(response: dict) -> list[dict]:
    """The JSONPatch ops of a review response ([] when none)."""
    raw = (response.get("response") or {}).get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []
