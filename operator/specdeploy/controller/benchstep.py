"""The benchmark step planner (pure): what one SpeculativeBenchmark reconcile observed -> what it does.

No API client, no asyncio: ``plan_benchmark_step`` takes a ``View`` (the benchmark as stored, its deployment as
the watch cache holds it, the deadlines, the tenancy policy, and whatever the controller has read so far) and
returns either a ``Need`` (what to read next: PVC labels, a config resolution, the ownership claim of child names,
the serving Deployment, the variant's pods, the prompts ConfigMap, the client's log) or a ``Step`` (children to
put and create, children to delete, status to write, Events, the requeue delay; ``failed`` ends the benchmark).
The controller (controller/benchmark.py) loops observe -> plan until it gets a ``Step``, then executes it through
the executor (controller/executor.py). Every decision lives here: the order of variants, the one-at-a-time rule
(``ahead_of``), the tenancy policy on the deployment and on each method drafter before anything is resolved, the
engine start deadline (from the variant Deployment's creationTimestamp), a crash-looping engine, the client Job
(running, failed, timed out from its own creationTimestamp, succeeded: its result line), the results ConfigMap,
the recommendation and the TTL. Unit-tested with tables (tests/controller/test_benchstep.py).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..api import benchmark as B
from ..api.validation import INVALID_SPEC, problems_message, validate as validate_deployment
from ..core import names as N
from ..core.bench.objects import BenchRefused, plan_for, serving_model
from ..core.bench.plan import BenchPlan, Variant, build_client_plan
from ..core.bench.prompts import PromptError, parse_requests_jsonl
from ..core.bench.reco import equal_to_baseline, recommend
from ..core.bench.render import (BENCH_LABEL, BenchOwner, build_client_configmap, build_client_job,
                                build_variant_network_policy, render_variant, variant_object_name)
from ..core.findings import errors as error_findings
from ..core.policy import TenancyPolicy, policy_needs_claims
from ..core.render import (PolicyRefused, RenderError, admit, benchmark_claims, benchmark_refusals, refusal_text,
                           with_drafter)
from . import ownership, status as st

Key = tuple[str, str]
RESULTS_KEY = "results.json"
CONFIGMAP_BUDGET = 900 * 1024  # a ConfigMap holds ~1 MiB
TERMINAL = ("Complete", "Failed")
UNREAD: Any = type("Unread", (), {"__repr__": lambda self: "UNREAD"})()  # a read not made yet


@dataclass(frozen=True)
class Limits:
    """The deadlines (controller/benchmark.py reads them from the environment)."""

    poll: float = 3.0
    ready: float = 3600.0  # a variant's engine start, from its Deployment's creationTimestamp
    client: float = 6 * 3600.0  # a client Job's run, from its creationTimestamp
    crash_restarts: int = 3  # a variant container failing this often fails the benchmark


@dataclass(frozen=True)
class Wait:
    """Not measurable yet (the deployment or its configs are missing): Pending, retried after ``delay``."""

    reason: str
    message: str
    delay: float = 15.0


@dataclass(frozen=True)
class Failed:
    """The end: ``delete`` the variant's children first (then every labelled child this benchmark controls)."""

    reason: str
    message: str
    delete: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Need:
    """What the controller reads next: ``pvcs`` (their labels), ``resolve`` (``role`` of ``admitted``, stored as
    ``View.resolved[label]``), ``claim`` (child names, (kind, name): the live object and why it is not ours),
    ``serving`` (the deployment's own Deployment), ``pods`` (of the variant's engine), ``prompts`` (a ConfigMap),
    ``log`` (the client Job's pod log)."""

    what: str
    names: tuple = ()
    admitted: Any = None
    role: str = ""
    label: str = ""


@dataclass
class StatusWrite:
    """Status fields (None: cleared), the outcome condition (type, status, reason, message), the Running
    condition (status, reason, message) and an Event posted with the write (a stage started)."""

    fields: dict[str, Any]
    condition: tuple[str, str, str, str] | None = None
    running: tuple[str, str, str] | None = None
    event: tuple[str, str, str] | None = None


@dataclass
class Step:
    """What one reconcile does, in this order: put (create-only, applied when ours), create (a client Job:
    create-only, a name taken by our own Job waits for it), delete (each only as the object read), the cleanup
    of a failed benchmark, the status, the Events; then requeue after ``requeue`` seconds (None: not)."""

    put: list[dict] = field(default_factory=list)
    create: dict | None = None
    delete: list[tuple[str, str]] = field(default_factory=list)
    failed: Failed | None = None
    status: StatusWrite | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    requeue: float | None = None
    delete_benchmark: bool = False  # its TTL ran out (only the object read: its uid the precondition)


@dataclass
class View:
    """What the controller observed for one benchmark (``UNREAD``/absent keys: not read yet)."""

    key: Key
    body: dict
    now: float  # seconds since the epoch
    limits: Limits = field(default_factory=Limits)
    policy: TenancyPolicy = field(default_factory=TenancyPolicy)
    network_policy: Sequence[str] | None = None  # None: no variant NetworkPolicy; else the other namespaces let in
    synced: bool = True  # the SpeculativeDeployment cache holds every deployment
    others: Mapping[Key, dict] = field(default_factory=dict)  # every benchmark body (one at a time per deployment)
    deployment: dict | None = None  # the SpeculativeDeployment as stored
    pvc_labels: dict[str, dict | None] = field(default_factory=dict)
    resolved: dict[str, Any] = field(default_factory=dict)  # label -> config doc, or Wait
    children: dict[tuple[str, str], tuple[dict | None, str | None]] = field(default_factory=dict)
    serving: Any = UNREAD  # the serving Deployment (None: absent)
    pods: list | None = None  # the variant engine's pods
    prompts: Any = UNREAD  # spec.prompts.configMapRef's ConfigMap (None: absent)
    log: str | None = None  # the client's log
    memo: dict[str, Any] = field(default_factory=dict)  # pure results of this view's fields, kept between rounds


def _memo(v: View, key: str, compute):
    """``compute()`` once per view: the planner runs again after each read, on the same fields and more (a result
    that needed a read is kept only once it was computed: a raised Need, Wait or Failed is not)."""
    if key not in v.memo:
        v.memo[key] = compute()
    return v.memo[key]


class _Stop(Exception):
    """A Need, Wait or Failed ends the planning where it is found."""

    def __init__(self, out):
        self.out = out


def plan_benchmark_step(v: View) -> Step | Need:
    """One step of the benchmark, or what to read first."""
    status = v.body.get("status") or {}
    if status.get("phase") in TERMINAL:
        return plan_expire(v.body, v.now)
    if not v.synced:  # an operator (re)start: a missing deployment may be one the watch has not delivered yet
        return Step(requeue=v.limits.poll)
    try:
        return _measure(v)
    except _Stop as s:
        out = s.out
    if isinstance(out, Need):
        return out
    if isinstance(out, Wait):
        if status.get("phase") == "Running":  # what it measures went away mid-run: stop, leave nothing running
            return failed_step(Failed(out.reason, f"{out.message} (while variant {status.get('current')})"), v.now)
        return Step(status=StatusWrite({"phase": "Pending", "current": f"waiting: {out.message}"},
                                       running=("False", out.reason, out.message)), requeue=out.delay)
    return failed_step(out, v.now)


def failed_step(f: Failed, now: float) -> Step:
    return Step(delete=list(f.delete), failed=f, status=StatusWrite(
        {"phase": "Failed", "current": None, "finishedAt": stamp(now)},
        condition=(N.FAILED, "True", f.reason, f.message), running=("False", f.reason, f.message)))


def plan_expire(body: dict, now: float) -> Step:
    """A finished benchmark: deleted once ``spec.ttlSecondsAfterFinished`` has passed since ``status.finishedAt``."""
    ttl = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
    if not isinstance(ttl, int) or isinstance(ttl, bool):
        return Step()
    left = ttl - age(((body.get("status") or {}).get("finishedAt")), now)
    return Step(requeue=left) if left > 0 else Step(delete_benchmark=True)


def ahead_of(key: Key, body: dict, others: Mapping[Key, dict], deployment: str) -> str | None:
    """The name of an unfinished benchmark of the same deployment that goes first (Running, else the
    oldest by creation time and name), or None: benchmarks of one deployment run one at a time."""
    mine = ((body.get("metadata") or {}).get("creationTimestamp") or "", key[1])
    for (ns, name), other in others.items():
        if ns != key[0] or name == key[1] or ((other.get("spec") or {}).get("deploymentRef") or {}).get("name") != deployment:
            continue
        phase = (other.get("status") or {}).get("phase")
        if phase in TERMINAL or (other.get("metadata") or {}).get("deletionTimestamp"):
            continue
        theirs = ((other.get("metadata") or {}).get("creationTimestamp") or "", name)
        if phase == "Running" or theirs < mine:
            return name
    return None


# ----------------------------------------------------------------- the stages (each raises _Stop to end)


def _measure(v: View) -> Step:
    ns, name = v.key
    cr, problems = _memo(v, "benchmark", lambda: B.validate(v.body))
    if cr is None:
        raise _Stop(Failed(INVALID_SPEC, problems_message(problems)))
    owner = BenchOwner(name, ns, (v.body.get("metadata") or {}).get("uid"))
    ref = cr.spec.deployment_ref.name
    ahead = ahead_of(v.key, v.body, v.others, ref)
    if ahead is not None and (v.body.get("status") or {}).get("phase") != "Running":
        raise _Stop(Wait("AnotherBenchmarkRunning", f"SpeculativeBenchmark {ahead} measures SpeculativeDeployment "
                         f"{ref} first (one at a time: their engines would share the nodes)", v.limits.poll * 5))
    dcr, target, drafter, plan = _memo(v, "deployment", lambda: _deployment(v, cr))
    results = _child(v, "ConfigMap", f"{name}-results")
    data = (results or {}).get("data") or {}
    done = {x.name: json.loads(data[f"variant-{x.name}.json"]) for x in plan.variants if f"variant-{x.name}.json" in data}
    todo = [x for x in plan.variants if x.name not in done]
    if not todo:
        return plan_finish(owner, cr.spec.deployment_ref.name, plan, done, data, v.now)
    var = todo[0]
    ctx = _Ctx(v, cr, owner, plan, var, f"{len(done)}/{len(plan.variants)}", data)
    if var.name == "serving":
        return _serving(ctx, dcr, target, drafter)
    return _variant(ctx, dcr, target, _variant_drafter(v, dcr, var, drafter))


@dataclass
class _Ctx:
    """The variant being measured."""

    v: View
    cr: Any
    owner: BenchOwner
    plan: BenchPlan
    var: Variant
    progress: str
    results: dict[str, str]

    def fail(self, reason: str, message: str) -> _Stop:
        """A failure that deletes the variant's objects first."""
        return _Stop(Failed(reason, message, tuple(variant_children(self.owner.name, self.var.name))))

    def running(self, current: str, event: tuple[str, str, str]) -> StatusWrite:
        return StatusWrite({"phase": "Running", "progress": self.progress, "variants": [x.name for x in self.plan.variants],
                            "current": current, "startedAt": stamp(self.v.now)},
                           running=("True", "Measuring", f"{current} ({self.progress} measured)"), event=event)


def _deployment(v: View, cr):
    """The deployment as stored, the tenancy policy on it and on every method drafter, its resolved configs and
    the pure plan of variants (core/bench/objects.plan_for)."""
    ns = v.key[0]
    ref = cr.spec.deployment_ref.name
    if v.deployment is None:
        raise _Stop(Wait("DeploymentNotFound", f"SpeculativeDeployment {ref} does not exist in namespace {ns}; "
                         "create it or fix spec.deploymentRef.name"))
    dcr, problems = validate_deployment(v.deployment)
    if dcr is None:
        raise _Stop(Failed("DeploymentInvalid", f"SpeculativeDeployment {ref}: {problems_message(problems)}"))
    dcr.metadata.namespace = ns
    # the tenancy policy first, as the reconciler applies it: the deployment as stored (a benchmark of a refused
    # deployment would run what was refused) and every spec.matrix.methods[].drafter as its variant carries it;
    # nothing is read (a token Secret, a claim) or created for a refused benchmark
    claims = _pvcs(v, benchmark_claims(cr.spec, dcr, v.policy))
    refused = benchmark_refusals(cr.spec, dcr, v.policy, claims, namespace=ns)
    if refused:
        raise _Stop(Failed("PolicyRefused", refusal_text(refused)))
    admitted = admit(dcr, v.policy, claims, namespace=ns)
    target = _resolved(v, admitted, "target", "target", f"SpeculativeDeployment {ref}: ")
    drafter = _resolved(v, admitted, "drafter", "drafter", f"SpeculativeDeployment {ref}: ")
    try:  # the pure planning (core/bench/objects.py; `specdeploy render` of a benchmark plans the same)
        plan = plan_for(cr.spec, dcr, target, drafter)
    except BenchRefused as e:
        raise _Stop(Failed(e.reason, e.message)) from None
    return dcr, target, drafter, plan


def _pvcs(v: View, names) -> dict[str, dict | None]:
    missing = tuple(n for n in names if n not in v.pvc_labels)
    if missing:
        raise _Stop(Need("pvcs", missing))
    return {n: v.pvc_labels[n] for n in names}


def _resolved(v: View, admitted, role: str, label: str, prefix: str):
    got = v.resolved.get(label, UNREAD)
    if got is UNREAD:
        raise _Stop(Need("resolve", admitted=admitted, role=role, label=label))
    if isinstance(got, Wait):
        raise _Stop(Wait(got.reason, prefix + got.message, got.delay))
    return got


def _child(v: View, kind: str, name: str) -> dict | None:
    """The live object of a child's name when this benchmark controls it (None: absent). Any other object of
    that name (unowned, another's, owned without the controller flag) ends the benchmark, untouched."""
    if (kind, name) not in v.children:
        raise _Stop(Need("claim", ((kind, name),)))
    obj, why = v.children[(kind, name)]
    if why is not None:
        raise _Stop(Failed("ChildConflict", taken([f"{kind}/{name} ({why})"])))
    return obj


def _variant_drafter(v: View, dcr, var: Variant, drafter):
    """The drafter doc a variant runs: the deployment's, none, or another method's own (admitted, then resolved)."""
    if var.method_speculation is None:
        return drafter
    if not var.drafter:
        return None
    from ..api.types import ModelSource

    vdcr = with_drafter(dcr, ModelSource.model_validate(var.drafter))
    claims = _pvcs(v, policy_needs_claims(vdcr.spec, v.policy))
    try:  # the variant's spec as it will run: admitted before its token or claim is touched
        admitted = admit(vdcr, v.policy, claims, namespace=v.key[0])
    except PolicyRefused as e:
        raise _Stop(Failed("PolicyRefused", f"variant {var.name}: {refusal_text(e.findings)}")) from None
    return _resolved(v, admitted, "drafter", f"drafter:{var.name}", f"variant {var.name}: ")


def _variant(c: _Ctx, dcr, target, drafter_doc) -> Step:
    """A variant of its own: its objects put, its engine Ready (or crashing, or late), then its client."""
    v, var, ns = c.v, c.var, c.v.key[0]
    try:
        vo = _memo(v, f"variant:{var.name}", lambda: render_variant(dcr, target, drafter_doc, c.owner, var,
                                                                     policy=v.policy))
    except PolicyRefused as e:  # the variant's own spec (core/render/gate.py): nothing of it is created
        raise _Stop(Failed("PolicyRefused", f"variant {var.name}: {refusal_text(e.findings)}")) from None
    except RenderError as e:
        raise _Stop(Failed("VariantNotRenderable", f"variant {var.name}: " + "; ".join(
            f.one_line() for f in error_findings(e.findings)))) from None
    except ValueError as e:
        raise _Stop(Failed("VariantNotRenderable", f"variant {var.name}: {e}")) from None
    objects = list(vo.objects)
    if v.network_policy is not None:
        objects.append(build_variant_network_policy(c.owner, vo, v.network_policy))
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    live = {}
    for i, (kind, cname) in enumerate(names):  # claimed in order: the first name taken ends it
        if (kind, cname) not in v.children:
            raise _Stop(Need("claim", tuple(names[i:])))
        live[kind] = _child(v, kind, cname)
    dep = live.get("Deployment")
    if dep is None:
        return Step(put=objects, requeue=v.limits.poll, status=c.running(f"{var.name}: starting the engine", (
            "Normal", "VariantStarting", f"variant {var.name} ({c.progress} measured): engine Deployment {vo.name} starting")))
    if int(((dep.get("status") or {}).get("readyReplicas")) or 0) < 1:
        if v.pods is None:
            raise _Stop(Need("pods", (N.selector({N.LABEL_INSTANCE: vo.name}),)))
        crash = crash_message(v.pods, v.limits.crash_restarts)
        if crash:
            raise c.fail("VariantCrashing", f"variant {var.name}: {crash}")
        if age(_created(dep), v.now) > v.limits.ready:  # the variant's own Deployment: a deadline nobody can move
            raise c.fail("VariantNotReady", f"variant {var.name}: Deployment {vo.name} not Ready after "
                         f"{v.limits.ready:.0f}s; see kubectl describe deployment {vo.name} and its pods' logs")
        return Step(requeue=v.limits.poll)
    return _client(c, image=vo.image, base_url=vo.url(ns), model=vo.model, engine=vo.engine_config.engine,
                   engine_version=vo.engine_config.engine_version, api_key=dcr.spec.engine.api_key)


def _serving(c: _Ctx, dcr, target, drafter) -> Step:
    """spec.useServingDeployment: the deployment's own Deployment, Ready and its own, measured as it serves."""
    v, ns, ref = c.v, c.v.key[0], dcr.metadata.name
    if v.serving is UNREAD:
        raise _Stop(Need("serving", (ref,)))
    dep = v.serving
    if dep is not None and ownership.conflict(dep, dcr.metadata.uid) is not None:
        dep = None  # not the SpeculativeDeployment's own workload (its reconcile reports the ChildConflict)
    image = serving_image(dcr, target, drafter, v.policy)
    if dep is None or not int((dep.get("status") or {}).get("readyReplicas") or 0) or not image:
        raise _Stop(Failed("ServingNotReady", f"spec.useServingDeployment: the Deployment of SpeculativeDeployment "
                           f"{ref} is not Ready; measure it when it serves, or set useServingDeployment: false"))
    from ..core import engines as eng

    port = eng.get_engine(dcr.spec.engine.name).port
    return _client(c, image=image, base_url=f"http://{ref}.{ns}.svc:{port}", model=serving_model(dcr),
                   engine=dcr.spec.engine.name, engine_version=dcr.spec.engine.version, api_key=dcr.spec.engine.api_key)


def serving_image(dcr, target, drafter, policy: TenancyPolicy) -> str | None:
    """The image the serving deployment runs, from rendering its spec as the reconciler does (never read
    back from its status: whoever may write ``/status`` would choose the image the client Job runs)."""
    from ..core.render import render

    try:
        return render(dcr, target, drafter, policy=policy).image or None
    except PolicyRefused as e:
        raise _Stop(Failed("PolicyRefused", f"SpeculativeDeployment {dcr.metadata.name}: "
                           + refusal_text(e.findings))) from None
    except RenderError as e:
        raise _Stop(Failed("DeploymentNotServable", f"SpeculativeDeployment {dcr.metadata.name} does not render: "
                           + "; ".join(f.one_line() for f in error_findings(e.findings)))) from None


def _client(c: _Ctx, *, image: str, base_url: str, model: str, engine: str, engine_version: str,
            api_key=None) -> Step:
    """The variant's client Job: created once (with its plan ConfigMap), waited for, its result recorded."""
    v, var, (ns, name) = c.v, c.var, c.v.key
    job_name = f"{name}-{var.name}-client"
    job = _child(v, "Job", job_name)
    if job is None:
        doc = build_client_plan(benchmark=name, variant=var.name, engine=engine, engine_version=engine_version,
                                base_url=base_url, metrics_url=f"{base_url}/metrics", model=model, tokenizer=model,
                                prompts=c.cr.spec.prompts.plan(), points=c.plan.points_of(var.name))
        cm = build_client_configmap(c.owner, var.name, doc, _prompts(c))
        _child(v, "ConfigMap", cm["metadata"]["name"])
        current = f"{var.name}: client running"
        return Step(put=[cm], create=build_client_job(c.owner, var.name, image, api_key=api_key, service_account=None),
                    requeue=v.limits.poll, status=c.running(current, (
                        "Normal", "ClientStarted", f"variant {var.name}: client Job {job_name} measuring "
                        f"{len(c.plan.points_of(var.name))} point(s)")))
    js = job.get("status") or {}
    if js.get("succeeded"):
        return _measured(c, job_name)
    if js.get("failed") or any(x.get("type") == N.FAILED and x.get("status") == "True" for x in js.get("conditions") or []):
        tail = " | ".join(line.strip() for line in _log(v, job_name).strip().splitlines()[-5:])[-800:]
        raise c.fail("ClientFailed", f"variant {var.name}: the client Job {job_name} failed; its log ends: "
                     f"{tail or '(empty)'}")
    if age(_created(job), v.now) > v.limits.client:  # the Job's own creation: a deadline nobody can move
        raise c.fail("ClientTimedOut", f"variant {var.name}: the client Job {job_name} ran past {v.limits.client:.0f}s")
    return Step(requeue=v.limits.poll)


def _prompts(c: _Ctx) -> str | None:
    """spec.prompts.configMapRef's text (None: another prompt source), from a ConfigMap marked as a prompt set."""
    ref, ns = c.cr.spec.prompts.config_map_ref, c.v.key[0]
    if ref is None:
        return None
    if c.v.prompts is UNREAD:
        raise _Stop(Need("prompts", (ref.name,)))
    cm = c.v.prompts
    if not prompts_marked(cm):  # absent or not marked: the same answer (no oracle of other ConfigMaps)
        raise c.fail("PromptsNotFound", f"spec.prompts.configMapRef: no ConfigMap {ref.name} labelled "
                     f"{N.PROMPTS_LABEL}={N.PROMPTS_LABEL_VALUE} in namespace {ns}; only ConfigMaps marked as prompt "
                     f"sets are read: create it, and label it (kubectl label configmap {ref.name} "
                     f"{N.PROMPTS_LABEL}={N.PROMPTS_LABEL_VALUE} -n {ns}), or use spec.prompts.bundled or generated")
    text = ((cm or {}).get("data") or {}).get(ref.key)
    if text is None:
        raise c.fail("PromptsNotFound", f"spec.prompts.configMapRef: ConfigMap {ref.name} has no key "
                     f"{ref.key} in namespace {ns}; create it (JSON lines {{\"prompt\": \"...\"}})")
    try:  # a broken request set fails here with the line and the field, not in the client's log
        if ref.format == "requests":
            parse_requests_jsonl(text, source=f"ConfigMap {ref.name} key {ref.key}")
    except PromptError as e:
        raise c.fail("PromptsInvalid", f"spec.prompts.configMapRef: {e}") from None
    return text


def _log(v: View, job_name: str) -> str:
    if v.log is None:
        raise _Stop(Need("log", (job_name,)))
    return v.log


def _measured(c: _Ctx, job_name: str) -> Step:
    """The client succeeded: its last result line recorded in the results ConfigMap, the variant deleted."""
    from ..core.bench.result import BenchResultError, parse_result_line

    var = c.var
    try:
        result = parse_result_line(_log(c.v, job_name))
    except BenchResultError as e:
        raise c.fail("ClientResultInvalid", f"variant {var.name}: {e}") from None
    if result.variant != var.name:
        raise c.fail("ClientResultInvalid", f"the client Job {job_name} reported variant {result.variant}, not {var.name}")
    data = {**c.results, f"variant-{var.name}.json": record_text(c.plan, var, result.to_doc())}
    done = int(c.progress.split("/")[0]) + 1
    return Step(put=[results_configmap(c.owner, data)], delete=variant_children(c.owner.name, var.name),
                events=[("Normal", "VariantMeasured", f"variant {var.name} measured ({done}/{len(c.plan.variants)})")],
                requeue=0.05)  # the next variant


# ----------------------------------------------------------------- results, the end


def record_text(plan: BenchPlan, v: Variant, doc: dict) -> str:
    """One variant's result as stored (its points with the plan's shape, the variant's settings)."""
    planned = {p.id: p for p in plan.points_of(v.name)}
    points = []
    for p in doc.get("points") or []:
        want = planned.get(p.get("id"))
        if want is None:
            continue  # a point the plan did not ask for
        points.append({**p, "variant": v.name, "numPrompts": p.get("numPrompts") or want.num_prompts,
                       "maxOutputTokens": p.get("maxOutputTokens") or want.max_output_tokens})
    return json.dumps({**doc, "points": points, "settings": v.to_doc()}, sort_keys=True, separators=(",", ":"))


def results_configmap(owner: BenchOwner, data: dict[str, str]) -> dict:
    meta: dict[str, Any] = {"name": f"{owner.name}-results", "namespace": owner.namespace,
                            "labels": {N.LABEL_MANAGED_BY: N.MANAGED_BY, N.LABEL_PART_OF: N.MANAGED_BY,
                                       N.LABEL_COMPONENT: N.COMPONENT_BENCH_RESULTS, BENCH_LABEL: owner.name}}
    if owner.reference():
        meta["ownerReferences"] = owner.reference()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def plan_finish(owner: BenchOwner, deployment: str, plan: BenchPlan, done: dict[str, dict], data: dict[str, str],
                now: float) -> Step:
    """Every variant measured: greedy-output equality, the recommendation, results.json, status Complete."""
    name = owner.name
    order = [v.name for v in plan.variants]
    points = [p for v in order for p in done[v].get("points") or []]
    eq = equal_to_baseline(points)
    for p in points:
        p["equalToBaseline"] = eq.get(p["id"])
    reco = recommend(points, order, {v.name: v.method for v in plan.variants if v.method})
    full = {"benchmark": name, "deployment": deployment,
            "variantSettings": [done[v].get("settings") or {"name": v} for v in order],
            "clients": {v: {"client": done[v].get("client"), "clientVersion": done[v].get("clientVersion")} for v in order},
            "points": points, "recommendation": reco}
    text = json.dumps(full, indent=1, sort_keys=True)
    if len(text.encode()) > CONFIGMAP_BUDGET:  # the digests are what grows: equality is already computed
        for p in full["points"]:
            p.pop("outputDigests", None)
        full["digestsOmitted"] = True
        text = json.dumps(full, separators=(",", ":"), sort_keys=True)
    data = {**data, RESULTS_KEY: text}
    if len(json.dumps(data).encode()) > CONFIGMAP_BUDGET:
        data = {RESULTS_KEY: text}
    message = reco["summary"]
    return Step(put=[results_configmap(owner, data)], status=StatusWrite({
        "phase": "Complete", "progress": f"{len(order)}/{len(order)}", "variants": order, "current": None,
        "points": [compact_point(p) for p in points], "recommendation": reco, "resultsConfigMap": f"{name}-results",
        "crossoverConcurrency": reco["guard"]["maxConcurrency"], "finishedAt": stamp(now)},
        condition=(N.COMPLETE, "True", "Measured", message), running=("False", "Measured", message)))


def compact_point(p: dict) -> dict:
    """A point as status.points shows it (rounded, nulls left out)."""
    costs, ttft = p.get("costs") or {}, p.get("ttftMs") or {}
    return {k: v for k, v in {
        "variant": p["variant"], "context": p["context"], "concurrency": p["concurrency"],
        "outputTokensPerSecond": _r(p.get("outputTokensPerSecond")), "tau": _r((p.get("acceptance") or {}).get("length")),
        "ttftP50Ms": _r(ttft.get("p50")), "itlP50Ms": _r((p.get("itlMs") or {}).get("p50")),
        "tpotP50Ms": _r((p.get("tpotMs") or {}).get("p50")), "ttftP99Ms": _r(ttft.get("p99")),
        "prefixCacheHitRate": _r(costs.get("prefixCacheHitRate")), "kvCapacityTokens": costs.get("kvCapacityTokens"),
        "kvUsagePeak": _r(costs.get("kvUsagePeak")), "failed": p.get("failed"),
        "equalToBaseline": p.get("equalToBaseline")}.items() if v is not None}


# ----------------------------------------------------------------- status


@dataclass
class StatusPatch:
    patch: dict  # the status merge patch
    status: dict  # the status after it
    events: list[tuple[str, str, str]]  # (type, reason, message), in order


def plan_status(current: dict | None, generation: int, w: StatusWrite, now: float) -> StatusPatch | None:
    """The status to write (None: nothing changed). ``condition`` (Complete/Failed) posts an Event when it
    transitions; ``running`` is the Running condition (its transition to False posts one only for a wait, as
    the end has its own); ``event`` is posted with the write (a stage started)."""
    current = current or {}
    desired = {k: (_pruned(x) if x is not None else None) for k, x in {**w.fields, "observedGeneration": generation}.items()}
    new = []  # the outcome (Complete/Failed) first: kubectl describe lists it above Running
    if w.condition is not None:
        ctype, cstatus, reason, message = w.condition
        new.append({"type": ctype, "status": cstatus, "reason": reason, "message": message[:32768]})
    if w.running is not None:
        new.append({"type": N.RUNNING, "status": w.running[0], "reason": w.running[1], "message": w.running[2][:32768]})
    transitioned = st.transitions(current.get("conditions"), new) if new else []
    if new:
        desired["conditions"] = st.merge_conditions(list(current.get("conditions") or []), new, generation, stamp(now))
    if all(current.get(k) == x for k, x in desired.items() if k != "startedAt"):
        return None  # startedAt only ever changes with the stage (current)
    events = []
    changed = {c["type"] for c in transitioned}
    if w.condition is not None and w.condition[0] in changed:
        ctype, _, reason, message = w.condition
        events.append(("Warning" if ctype == N.FAILED else "Normal", reason, message))
    elif w.running is not None and N.RUNNING in changed and w.running[0] == "False":
        events.append(("Normal", w.running[1], w.running[2]))
    if w.event is not None:
        events.append(w.event)
    return StatusPatch({"status": desired}, {k: x for k, x in {**current, **desired}.items() if x is not None}, events)


# ----------------------------------------------------------------- small pure helpers


def variant_children(bench: str, variant: str) -> list[tuple[str, str]]:
    """A variant's children, by (kind, name): its client Job and plan, and its own engine's objects."""
    name = variant_object_name(bench, variant)
    out = [("Job", f"{name}-client"), ("ConfigMap", f"{name}-plan")]
    if variant != "serving":
        out += [("Deployment", name), ("Service", name), ("ConfigMap", f"{name}-engine"), ("NetworkPolicy", name)]
    return out


def cleanup_target(obj: dict) -> bool:
    """Whether a failed benchmark's cleanup deletes a listed child of its label (the results ConfigMap stays;
    the executor deletes only what the benchmark controls)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(N.LABEL_COMPONENT) != N.COMPONENT_BENCH_RESULTS


def crash_message(pods: list[dict], restarts: int) -> str | None:
    """A container of the variant's pods that keeps failing (``restarts`` restarts), in words; else None."""
    for p in pods:
        pst = p.get("status") or {}
        for cs in (pst.get("initContainerStatuses") or []) + (pst.get("containerStatuses") or []):
            last = ((cs.get("lastState") or {}).get("terminated") or {})
            if (cs.get("restartCount") or 0) >= restarts and last:
                msg = " ".join(str(last.get("message") or "").split())[-600:]
                return (f"container {cs.get('name')} of pod {p['metadata']['name']} restarted {cs['restartCount']} "
                        f"times (last exit code {last.get('exitCode')}, {last.get('reason') or 'no reason'})"
                        + (f": {msg}" if msg else "") + f"; see kubectl logs {p['metadata']['name']} -c {cs.get('name')} "
                        "--previous")
    return None


def prompts_marked(configmap: dict | None) -> bool:
    """Whether a ConfigMap may be read as a benchmark's prompt set (spec.prompts.configMapRef): one its namespace's
    admins labelled ``specdeploy.io/prompts: "true"``. Any other ConfigMap of the namespace may hold what the
    benchmark's author may not read; the operator would copy it into the plan ConfigMap and the client's requests."""
    labels = ((configmap or {}).get("metadata") or {}).get("labels") or {}
    return configmap is not None and labels.get(N.PROMPTS_LABEL) == N.PROMPTS_LABEL_VALUE


def taken(conflicts: list[str]) -> str:
    """The ChildConflict message: the names (``Kind/name (why)``) held by objects this benchmark does not control."""
    return (f"{', '.join(conflicts)}: the name is taken by an object this benchmark does not control; the benchmark "
            "neither reads, writes nor deletes it: rename or delete that object, or give the benchmark another name")


def stamp(now: float) -> str:
    """RFC 3339, UTC, seconds (status.now_rfc3339 at ``now``)."""
    return dt.datetime.fromtimestamp(int(now), dt.timezone.utc).isoformat().replace("+00:00", "Z")


def age(ts: str | None, now: float) -> float:
    """Seconds from an RFC 3339 time stamp to ``now``; 0 when absent or unreadable (status.age_seconds at ``now``)."""
    if not ts:
        return 0.0
    try:
        t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return now - t.timestamp()


def _created(obj: dict | None) -> str | None:
    """An object's creationTimestamp (set by the API server, never by a tenant)."""
    return ((obj or {}).get("metadata") or {}).get("creationTimestamp")


def _pruned(x: Any) -> Any:
    """Without null fields: a merge patch keeps nulls inside lists, which the schema refuses (top-level
    nulls, which clear a field, are kept by the caller)."""
    if isinstance(x, dict):
        return {k: _pruned(y) for k, y in x.items() if y is not None}
    if isinstance(x, list):
        return [_pruned(y) for y in x]
    return x


def _r(x: Any, digits: int = 3) -> Any:
    return round(float(x), digits) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
