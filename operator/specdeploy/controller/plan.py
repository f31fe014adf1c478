"""The reconcile planner (pure): typed CR + observed children + resolved configs -> the plan.

No API client, no asyncio: every function here takes what the reconciler gathered (from the
watch-fed caches or the API) and returns what to do. The executor (controller/executor.py)
carries a plan out; the reconciler (controller/reconciler.py) reads like
parse -> observe -> plan -> apply -> status. Unit-tested with tables (tests/controller/test_plan.py).

- ``plan_reconcile``: the children to apply and to delete for a spec that passed validation,
  the tenancy policy and config resolution; or, when the check fails or a needed API is missing,
  why nothing is applied. ``blocked`` covers the earlier stops (invalid spec, policy refusal,
  unresolved configs).
- ``Plan.observation``: the status inputs once the children are applied (status.Observation).
- ``plan_status``: the status to write (None: nothing changed), the merge patch, and the
  condition transitions worth an Event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..api.types import MemoryFigures, Resolved, RolloutStatus, SpeculativeDeploymentStatus
from ..core.rollout import baseline as bl
from ..core.rollout import guard as gd
from ..core.findings import Finding
from ..core.findings import errors as error_findings
from ..core.policy import TenancyPolicy
from ..core import names as N
from ..core.render import RenderError, Rendered, build_canary, names, render, selector_labels
from . import ownership, status as st
from .cache import MANAGED_KINDS
from .reports import AcceptanceReport, CanaryReport

LWS = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
PODMONITOR = ("monitoring.coreos.com/v1", "podmonitors")
GUARD_RESOLVED = "guardMaxConcurrency"  # status.resolved: spec.speculation.guard's limit in use


@dataclass
class Plan:
    """What one reconcile does: children to apply (server-side apply) and delete, and the status inputs."""

    generation: int
    apply: list[dict] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) of obsolete children
    rendered: Rendered | None = None  # set when the check passed (its tuning Job, its config hash)
    findings: list[Finding] | None = None  # None: not checked
    accepted: list[Finding] = field(default_factory=list)
    blocked: tuple[str, str] | None = None  # (reason, message): nothing is applied
    resolution_error: tuple[str, str] | None = None
    guard: tuple[bool | None, str, str] | None = None  # SpeculationGuarded (status, reason, message)
    resolved: Resolved | None = None  # status.resolved (None: not resolved)
    check_failure: str | None = None  # the first error code when the check failed (a metric)
    family: str | None = None  # the drafter's family and format as the check read them (status message)
    rollout: "RolloutPlan | None" = None  # spec.rollout's part (None: not planned this time, e.g. blocked)

    def observation(self, body: dict, workload: dict | None, conflicts: list[str] | None = None) -> st.Observation:
        """The status inputs, given the workload as it is after the plan was applied."""
        rp = self.rollout
        want = rp.stable_hash if rp is not None and rp.stable_live else None
        obs = observe(self.generation, body, workload, self.findings, self.rendered if self.apply else None, want)
        if rp is not None:
            obs.rollout_off = rp.step is None
            obs.rollout_status = rp.status
            obs.rollout_condition = rp.condition
            if not conflicts:
                obs.promoted_baseline = self.promoted_baseline(body)
        obs.accepted = list(self.accepted)
        obs.blocked_reason = self.blocked
        obs.resolution_error = self.resolution_error
        obs.conflicts = list(conflicts or [])
        obs.guard = self.guard
        obs.family = self.family
        return obs

    def promoted_baseline(self, body: dict) -> dict[str, Any] | None:
        """On a promotion decided now: status.acceptance.baseline of the promoted revision (the canary's measured
        tau, for the revision the monitor computes from the stored spec and the status.resolved written now)."""
        rp = self.rollout
        if rp is None or rp.decision is None or rp.baseline is None or self.resolved is None:
            return None
        revision = bl.speculation_revision(body.get("spec"), self.resolved.model_dump(by_alias=True,
                                                                                       exclude_none=True))
        return {**rp.baseline, "revision": revision}


def blocked(generation: int, reason: str, message: str, *, unresolved: bool = True) -> Plan:
    """Nothing resolved, checked or applied: an invalid spec, a policy refusal (``unresolved``: both say so in
    DrafterCompatible and Progressing), or configs that could not be resolved (``unresolved=False``: the
    resolution error only)."""
    if unresolved:
        return Plan(generation, blocked=(reason, message), resolution_error=(reason, message))
    return Plan(generation, resolution_error=(reason, message))


def guard_limit(cr, benchmarks: Mapping[tuple[str, str], dict]) -> tuple[gd.GuardLimit | None, tuple | None]:
    """spec.speculation.guard.fromBenchmark: the benchmark's measured crossover (limit, None), or (None, the
    SpeculationGuarded condition saying why not); (None, None) without fromBenchmark (maxConcurrency is
    rendered from the spec itself)."""
    g = cr.spec.speculation.guard
    if g is None or g.from_benchmark is None:
        return None, None
    return gd.limit_from_benchmark(g.from_benchmark, benchmarks.get((cr.metadata.namespace or "default",
                                                                      g.from_benchmark)),
                                   deployment=cr.metadata.name)


def plan_reconcile(cr, target, drafter, *, generation: int, children: Mapping[tuple[str, str], dict],
                   benchmarks: Mapping[tuple[str, str], dict] | None = None, pod_monitor: bool = False,
                   lws: bool = True, policy: TenancyPolicy | None = None,
                   pod_monitor_labels: Mapping[str, str] | None = None,
                   network_policy: Sequence[str] | None = None, status: Mapping | None = None,
                   rollout: CanaryReport | None = None, now: float = 0.0) -> Plan:
    """The plan for a valid, admitted spec whose configs are resolved (``target``/``drafter``: resolve.Resolved).

    ``children``: the cached children the deployment may own, by (kind, name) (Caches.children_of);
    ``lws``: whether the LeaderWorkerSet API is served (asked only for multi-node specs); ``status``: the CR's
    stored status (status.rollout's refusedRevision and requestHandled); ``rollout``: the canary analysis' report
    (cache.canaries, controller/canary.py); ``now``: the wall clock (seconds since the epoch)."""
    plan = _plan_reconcile(cr, target, drafter, generation=generation, children=children, benchmarks=benchmarks,
                           pod_monitor=pod_monitor, lws=lws, policy=policy, pod_monitor_labels=pod_monitor_labels,
                           network_policy=network_policy, status=status, rollout=rollout, now=now)
    plan.family = _family_label(drafter.doc if drafter is not None else None)
    return plan


def _family_label(doc) -> str | None:
    from ..core.checker.gates import family_of

    fam = family_of(doc)
    return None if fam is None or fam.name == "unknown" else f"{fam.label} ({fam.format})"


def _plan_reconcile(cr, target, drafter, *, generation, children, benchmarks, pod_monitor, lws, policy,
                    pod_monitor_labels, network_policy, status=None, rollout=None, now=0.0) -> Plan:
    limit, guard_problem = guard_limit(cr, benchmarks or {})
    try:
        rendered = render(cr, target.doc, drafter.doc, pod_monitor=pod_monitor, policy=policy,
                          pod_monitor_labels=pod_monitor_labels, network_policy=network_policy,
                          guard=limit, commits=(target.commit or None, drafter.commit or None))
    except RenderError as e:
        errors = error_findings(e.findings)
        return Plan(generation, findings=e.findings, accepted=list(e.accepted),
                    resolved=build_resolved(target, drafter, None, cr),
                    check_failure=errors[0].code if errors else "Unknown")
    resolved = build_resolved(target, drafter, rendered, cr)
    findings, accepted = rendered.analysis.findings, list(rendered.analysis.accepted)
    if rendered.objects[1]["kind"] == "LeaderWorkerSet" and not lws:
        return Plan(generation, findings=findings, accepted=accepted, resolved=resolved, blocked=(
            "LeaderWorkerSetMissing", f"spec.nodes={cr.spec.nodes} needs a LeaderWorkerSet, but the "
            "leaderworkerset.x-k8s.io/v1 API is not installed; install LeaderWorkerSet or set spec.nodes: 1"))
    rp = plan_rollout(cr, rendered, children, status, rollout, now)
    apply = apply_rollout(list(rendered.objects), rp, children, cr.metadata.name)
    return Plan(generation, apply=apply, delete=obsolete(cr.metadata.name, apply, children, cr.metadata.uid),
                rendered=rendered, findings=findings, accepted=accepted, resolved=resolved,
                guard=rendered.guard.condition if rendered.guard is not None else guard_problem, rollout=rp)


def obsolete(name: str, desired: list[dict], children: Mapping[tuple[str, str], dict],
             uid: str | None = None) -> list[tuple[str, str]]:
    """Children of this instance that the desired set no longer has (e.g. the Deployment after switching to
    multi-node, or the canary's after a decision). Children are named NAME, NAME-engine, NAME-canary or
    NAME-canary-engine, so only those are looked at, and only those this CR (``uid``, else the desired children's
    owner) controls: labels alone never make an object ours."""
    uid = uid or next((ownership.owner_uid(o) for o in desired if ownership.owner_uid(o)), None)
    want = {(o["kind"], o["metadata"]["name"]) for o in desired}
    out = []
    for kind in MANAGED_KINDS:
        for cname in child_names(name):
            if (kind, cname) in want:
                continue
            body = children.get((kind, cname))
            if body is None or ownership.conflict(body, uid) is not None:
                continue
            labels = (body.get("metadata") or {}).get("labels") or {}
            if labels.get(N.LABEL_INSTANCE) == name and labels.get(N.LABEL_MANAGED_BY) == N.MANAGED_BY \
                    and labels.get(N.LABEL_COMPONENT) == N.COMPONENT_ENGINE:
                out.append((kind, cname))
    return out


# ----------------------------------------------------------------- observation


def workload_template(workload: dict) -> dict:
    spec = workload.get("spec") or {}
    if workload.get("kind") == "LeaderWorkerSet":
        return (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
    return spec.get("template") or {}


def child_names(name: str) -> tuple[str, ...]:
    """The names a SpeculativeDeployment's children may have (core/render names): NAME, NAME-engine and the
    canary's NAME-canary and NAME-canary-engine."""
    n = names(name)
    return (name, n["configmap"], n["canary"], n["canaryconfigmap"])


def observe(gen: int, body: dict, workload: dict | None, findings, rendered: Rendered | None = None,
            want_hash: str | None = None) -> st.Observation:
    """The workload's replicas and whether it carries ``rendered``'s config (status.Observation); ``want_hash``:
    the config hash it should carry instead (a canary runs: the stable Deployment keeps its live template)."""
    spec = body.get("spec") or {}
    desired = int(spec.get("replicas", 1) if isinstance(spec.get("replicas", 1), int) else 1)
    obs = st.Observation(generation=gen, findings=findings, desired_replicas=desired)
    if workload is not None:
        ws = workload.get("status") or {}
        obs.workload_exists = True
        obs.replicas = int(ws.get("replicas") or 0)
        obs.ready_replicas = int(ws.get("readyReplicas") or 0)
        obs.updated_replicas = int(ws.get("updatedReplicas") or 0)
        if rendered is not None:
            tmpl = workload_template(workload)
            have = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(N.CONFIG_HASH_ANNOTATION)
            wgen = (workload.get("metadata") or {}).get("generation")
            seen = ws.get("observedGeneration")
            obs.workload_updated = have == (want_hash or rendered.config_hash) and (seen is None or wgen is None or seen >= wgen)
    return obs


def build_resolved(target, drafter, rendered: Rendered | None, cr) -> Resolved:
    """status.resolved: the configs checked, and what the render derived from them."""
    out = Resolved(target_config_digest=target.digest, drafter_config_digest=drafter.digest or None, profile=cr.spec.gpu.type,
                   target_revision=target.commit or None, drafter_revision=drafter.commit or None)
    if rendered is None:
        return out
    from ..core.cache import weight_source
    from ..core.gpus import get_profile

    ec = rendered.engine_config
    tmpl = workload_template(rendered.objects[1])
    served = rendered.analysis.derived.served_context if rendered.analysis.derived else None
    out.method = ec.speculation.method
    out.engine_method = ec.speculation.engine_method
    out.block_size = ec.speculation.block_size
    out.num_speculative_tokens = ec.speculation.num_speculative_tokens
    out.config_hash = rendered.config_hash
    out.image = tmpl["spec"]["containers"][0]["image"]
    out.draft_window = ec.speculation.draft_window
    out.native_window = ec.speculation.native_window
    out.served_context = served
    out.gpu_product = get_profile(cr.spec.gpu.type).product_label
    out.cache = rendered.cache.label()
    out.target_weights = weight_source(cr.spec.target, "target", rendered.cache)
    if cr.spec.drafter is not None:
        out.drafter_weights = weight_source(cr.spec.drafter, "drafter", rendered.cache,
                                            rendered.image if rendered.baked_drafter is not None else None)
    if rendered.guard is not None:
        out.guard_max_concurrency = rendered.guard.limit.max_concurrency
    plan = rendered.analysis.derived.memory if rendered.analysis.derived else None
    if plan is not None:
        out.memory = MemoryFigures.model_validate(plan.to_dict())
    return out


# ----------------------------------------------------------------- status


@dataclass
class StatusPlan:
    """A status write: the merge patch, the status as it will read, the condition transitions and their Events."""

    patch: dict[str, Any]
    status: dict[str, Any]
    transitions: list[dict]
    events: list[tuple[dict, tuple[str, str, str]]]  # (condition, (type, reason, message))


def desired_status(name: str, current: dict, obs: st.Observation, resolved: Resolved | None,
                   speculation: AcceptanceReport | None, now: str) -> dict[str, Any]:
    """The status the reconciler wants: its conditions, the monitor's (``speculation``: its report), the
    replicas, the selector, status.resolved, the accepted findings and the monitor's status.acceptance (with the
    baseline of a promotion decided now: ``obs.promoted_baseline``)."""
    if obs.promoted_baseline is not None:
        speculation = (speculation or AcceptanceReport()).with_baseline(obs.promoted_baseline)
    new = st.compute_conditions(obs)
    if obs.rollout_off:  # spec.rollout is not Canary (any more): no Rollout condition
        current = {**current, "conditions": [c for c in current.get("conditions") or []
                                             if not (isinstance(c, dict) and c.get("type") == N.ROLLOUT)]}
    if speculation is not None and speculation.condition:
        new.append(speculation.condition)
    if speculation is not None and speculation.profitable:
        new.append(speculation.profitable)  # SpeculationProfitable: the monitor's, while a guard is set
    accepted = st.accepted_findings(obs)
    typed = SpeculativeDeploymentStatus(
        observed_generation=obs.generation, replicas=obs.replicas, ready_replicas=obs.ready_replicas,
        ready=f"{obs.ready_replicas}/{obs.desired_replicas}",
        selector=",".join(f"{k}={v}" for k, v in selector_labels(name).items()), resolved=resolved,
        **({"accepted_findings": accepted} if accepted is not None else {}))  # unset: not checked this time
    desired: dict[str, Any] = {
        "conditions": st.merge_conditions(current.get("conditions"), new, obs.generation, now),
        **typed.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, exclude={"conditions", "acceptance"}),
    }
    if speculation is not None:
        desired["acceptance"] = speculation.acceptance  # None: cleared (merge patch null)
    if obs.rollout_status is not None:
        desired["rollout"] = obs.rollout_status
    elif obs.rollout_off and current.get("rollout") is not None:
        desired["rollout"] = None  # merge patch null: RollingUpdate keeps no rollout status
    return desired


def plan_status(name: str, current: dict | None, obs: st.Observation, resolved: Resolved | None,
                speculation: AcceptanceReport | None, now: str) -> StatusPlan | None:
    """The status write for an observation, or None when the stored status already says it (times aside)."""
    current = current or {}
    desired = desired_status(name, current, obs, resolved, speculation, now)
    if not st.status_changed(current, desired):
        return None
    patch = dict(desired)
    if isinstance(desired.get("acceptance"), dict):  # a merge patch keeps keys it does not name: null them
        patch["acceptance"] = st.merge_patch_of(current.get("acceptance"), desired["acceptance"])
    if isinstance(desired.get("rollout"), dict):
        patch["rollout"] = st.merge_patch_of(current.get("rollout"), desired["rollout"])
    cur_resolved = current.get("resolved") if isinstance(current.get("resolved"), dict) else {}
    if isinstance(desired.get("resolved"), dict) and GUARD_RESOLVED in cur_resolved \
            and GUARD_RESOLVED not in desired["resolved"]:  # likewise a guard gone
        patch["resolved"] = {**desired["resolved"], GUARD_RESOLVED: None}
    changed = st.transitions(current.get("conditions"), desired["conditions"])
    events = [(c, ev) for c in changed for ev in (st.event_for(c),) if ev is not None]
    return StatusPlan(patch=patch, status={**current, **desired}, transitions=changed, events=events)


# ----------------------------------------------------------------- rollouts (spec.rollout Canary)

ANALYZING_REQUEUE_S = 10.0  # while a canary runs: deadlines fire without traffic, the verdict is re-read


@dataclass
class RolloutPlan:
    """What spec.rollout does to this reconcile (core/rollout/canary.step on what was observed)."""

    step: "ro.Step | None"  # None: RollingUpdate (nothing to decide)
    observed: "ro.Observed | None" = None
    status: dict[str, Any] | None = None  # status.rollout (camelCase); None: none (RollingUpdate)
    condition: tuple[str, str, str] | None = None  # the Rollout condition (status, reason, message)
    stable_live: bool = False  # the stable Deployment and ConfigMap keep their live template and data
    stable_hash: str | None = None  # the config hash the stable Deployment carries (live) when stable_live
    canary_objects: list[dict] = field(default_factory=list)  # applied (empty: the canary children are deleted)
    baseline: dict[str, Any] | None = None  # on a promotion: status.acceptance.baseline = the canary's tau
    decision: dict[str, Any] | None = None  # a decision taken now (status.rollout.decision), for the metric
    requeue: float | None = None  # seconds: the canary is being analysed


def _rfc3339_epoch(ts: Any) -> float | None:
    import datetime as dt

    if not isinstance(ts, str) or not ts:
        return None
    try:
        t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _epoch_rfc3339(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def template_revision(workload: dict | None) -> str | None:
    """The rollout revision a Deployment's pod template carries (REVISION_ANNOTATION), if any."""
    if workload is None:
        return None
    ann = ((workload_template(workload).get("metadata") or {}).get("annotations") or {})
    v = ann.get(N.REVISION_ANNOTATION)
    return v if isinstance(v, str) and v else None


def _engine_identity(cm: dict | None) -> tuple | None:
    """(engine, version, target model, target revision) of an engine ConfigMap's document; None: unreadable."""
    from ..core.engineconfig import ENGINE_CONFIG_KEY

    text = ((cm or {}).get("data") or {}).get(ENGINE_CONFIG_KEY)
    if not isinstance(text, str):
        return None
    try:
        import json

        doc = json.loads(text)
        t = doc.get("target") or {}
        return doc.get("engine"), doc.get("engineVersion"), t.get("model"), t.get("revision")
    except (ValueError, AttributeError):
        return None


def _image(workload: dict | None) -> str | None:
    cs = (workload_template(workload or {}).get("spec") or {}).get("containers") or []
    return cs[0].get("image") if cs and isinstance(cs[0], dict) else None


def stable_rolled(workload: dict | None, revision: str, replicas: int) -> bool:
    """The stable Deployment carries ``revision`` and all its replicas are updated and ready."""
    if workload is None or template_revision(workload) != revision:
        return False
    ws = workload.get("status") or {}
    gen, seen = (workload.get("metadata") or {}).get("generation"), ws.get("observedGeneration")
    if gen is not None and seen is not None and seen < gen:
        return False
    return int(ws.get("updatedReplicas") or 0) >= replicas and int(ws.get("readyReplicas") or 0) >= replicas


def _request(annotations: Any) -> str | None:
    v = annotations.get(N.ROLLOUT_ANNOTATION) if isinstance(annotations, Mapping) else None
    return v[:256] if isinstance(v, str) and v else None


def plan_rollout(cr, rendered: Rendered, children: Mapping[tuple[str, str], dict], status: Mapping | None,
                 monitor: CanaryReport | None, now: float) -> RolloutPlan:
    """The rollout's part of a reconcile (pure): core.rollout.Observed from the typed spec, the cached children
    (the live stable Deployment's revision, the canary Deployment and its creationTimestamp), the CR's
    ROLLOUT_ANNOTATION, status.rollout (refusedRevision, requestHandled) and the canary analysis' report
    (``monitor``: cache.canaries, controller/canary.py), then core.rollout.step, then what it means for the
    children and the status. Everything it needs after an operator restart is in the canary Deployment and
    the status."""
    from ..core.rollout import canary as ro

    name = cr.metadata.name
    n = names(name)
    stable = children.get(("Deployment", n["workload"]))
    canary = children.get(("Deployment", n["canary"]))
    prev = (status or {}).get("rollout") if isinstance((status or {}).get("rollout"), Mapping) else {}
    spec = cr.spec
    if not spec.canary():
        return RolloutPlan(step=None)
    desired = rendered.revision or ""
    stable_rev = template_revision(stable)
    if stable is not None and stable_rev is None:
        stable_rev = ""  # a template from before Canary (no revision recorded): the change goes through a canary
    canary_rev = template_revision(canary)
    created = _rfc3339_epoch((canary or {}).get("metadata", {}).get("creationTimestamp")) if canary else None
    params = ro.params_from_spec(spec.rollout)
    verdict = None
    analysis = monitor if isinstance(monitor, CanaryReport) and monitor.revision == desired else None
    if canary is not None and canary_rev == desired:
        elapsed = max(0.0, now - created) if created is not None else 0.0
        live_cm = children.get(("ConfigMap", n["configmap"]))
        desired_cm = next((o for o in rendered.objects if o["kind"] == "ConfigMap"), None)
        same_target = _engine_identity(live_cm) is not None and _engine_identity(live_cm) == _engine_identity(desired_cm) \
            and _image(stable) == _image(rendered.objects[1])
        revs = {"stable_revision": stable_rev or None, "canary_revision": desired}
        if analysis is not None:
            verdict = ro.judge(params, analysis.stable, analysis.canary, analysis.health,
                               analysis.probe if params.probe else None, elapsed, compare_outputs=same_target, **revs)
        elif elapsed >= params.deadline_s:  # no analysis at all (the monitor is off or saw nothing): the deadline
            verdict = ro.judge(params, ro.Totals(), ro.Totals(), ro.Health(pods=0, ready=0, restarts=0,
                                                                             crash_looping=False),
                               None, elapsed, compare_outputs=False, **revs)
    request, handled = _request(cr.metadata.annotations), prev.get("requestHandled")
    o = ro.Observed(strategy=spec.rollout.strategy, desired_revision=desired, stable_revision=stable_rev,
                    canary_revision=canary_rev, canary_created=created,
                    stable_rolled=stable_rolled(stable, desired, spec.replicas),
                    refused_revision=prev.get("refusedRevision"), request=request, request_handled=handled,
                    verdict=verdict, now=now, replicas=spec.replicas, last_phase=prev.get("phase"),
                    last_decision=prev.get("decision") if isinstance(prev.get("decision"), Mapping) else None)
    s = ro.step(o)
    out = RolloutPlan(step=s, observed=o, condition=s.condition)
    out.stable_live = s.stable_template == "live" and stable is not None
    if out.stable_live:
        out.stable_hash = ((workload_template(stable).get("metadata") or {}).get("annotations") or {}).get(
            N.CONFIG_HASH_ANNOTATION)
    if s.canary:
        out.canary_objects = build_canary(cr, rendered)
        if s.phase in ("Progressing", "Analyzing"):
            out.requeue = ANALYZING_REQUEUE_S
    decision = s.decision
    if decision is not None:
        out.decision = decision
        if decision.get("result") == "Promote" and analysis is not None:
            tau = analysis.canary.tau()
            if tau is not None and tau >= 1.0:
                out.baseline = {"length": round(float(tau), 2), "since": _epoch_rfc3339(now),
                                "drafts": int(analysis.canary.drafts)}
    rs: dict[str, Any] = {"phase": s.phase,
                          # what the stable Deployment serves once this reconcile applied it
                          "stableRevision": desired if s.stable_template == "desired" else (stable_rev or None),
                          "canaryRevision": desired if s.canary else None,
                          "refusedRevision": s.refused_revision,
                          "startedAt": _epoch_rfc3339(created) if s.canary and created is not None else None,
                          "decision": decision or prev.get("decision"),
                          # the table the decision was taken on stays as it was: once the stable Deployment rolls to
                          # the promoted revision, a new table would label the old stable's figures with the new one
                          "analysis": verdict.table if verdict is not None and verdict.table
                          and (s.phase in (ro.PHASE_PROGRESSING, ro.PHASE_ANALYZING) or decision is not None)
                          else prev.get("analysis"),
                          "probe": _probe_status(analysis.probe if analysis is not None else None)
                          or (prev.get("probe") if s.canary else None),
                          "requestHandled": s.request_handled}
    out.status = _rollout_status(rs)
    return out


def _rollout_status(rs: dict[str, Any]) -> dict[str, Any]:
    """status.rollout as the typed model writes it; what was carried over from the stored status and does not
    parse (a hand-edited status) is dropped rather than failing the reconcile."""
    import pydantic

    doc = {k: v for k, v in rs.items() if v is not None}
    for attempt in range(2):
        try:
            out = RolloutStatus.model_validate(doc).model_dump(by_alias=True, exclude_none=True)
            return {k: v for k, v in out.items() if v != []}  # no analysis yet: no empty table
        except pydantic.ValidationError as e:
            bad = {str(err["loc"][0]) for err in e.errors() if err.get("loc")}
            doc = {k: v for k, v in doc.items() if k not in bad}
    return {"phase": rs["phase"]}


def _probe_status(p: Any) -> dict | None:
    if p is None:
        return None
    return {"prompts": int(getattr(p, "prompts", 0)), "identical": int(getattr(p, "identical", 0)),
            "message": str(getattr(p, "message", "") or "")[:4096]}


def apply_rollout(objects: list[dict], rp: RolloutPlan, children: Mapping[tuple[str, str], dict],
                  name: str) -> list[dict]:
    """The children to apply under a rollout plan: while a canary runs (or after a rollback) the stable
    Deployment and its ConfigMap carry their LIVE pod template and data (only replicas follow the spec: the
    stable pods keep their uids), and the canary's children are added while it is wanted."""
    if rp.step is None:
        return objects
    n = names(name)
    out = []
    for obj in objects:
        if rp.stable_live and obj["kind"] == "Deployment" and obj["metadata"]["name"] == n["workload"]:
            live = children[("Deployment", n["workload"])]
            obj = {**obj, "spec": {**obj["spec"], "template": workload_template(live)}}
        elif rp.stable_live and obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == n["configmap"]:
            live_cm = children.get(("ConfigMap", n["configmap"]))
            if live_cm is not None and isinstance(live_cm.get("data"), dict):
                obj = {**obj, "data": dict(live_cm["data"])}
        out.append(obj)
    return out + list(rp.canary_objects)
