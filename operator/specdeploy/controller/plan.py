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

from ..api.types import MemoryFigures, Resolved, SpeculativeDeploymentStatus
from ..core import guard as gd
from ..core.findings import Finding
from ..core.findings import errors as error_findings
from ..core.policy import TenancyPolicy
from ..core import names as N
from ..core.render import RenderError, Rendered, render, selector_labels
from . import ownership, status as st
from .cache import MANAGED_KINDS

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

    def observation(self, body: dict, workload: dict | None, conflicts: list[str] | None = None) -> st.Observation:
        """The status inputs, given the workload as it is after the plan was applied."""
        obs = observe(self.generation, body, workload, self.findings, self.rendered if self.apply else None)
        obs.accepted = list(self.accepted)
        obs.blocked_reason = self.blocked
        obs.resolution_error = self.resolution_error
        obs.conflicts = list(conflicts or [])
        obs.guard = self.guard
        obs.family = self.family
        return obs


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
                   network_policy: Sequence[str] | None = None) -> Plan:
    """The plan for a valid, admitted spec whose configs are resolved (``target``/``drafter``: resolve.Resolved).

    ``children``: the cached children the deployment may own, by (kind, name) (Caches.children_of);
    ``lws``: whether the LeaderWorkerSet API is served (asked only for multi-node specs)."""
    plan = _plan_reconcile(cr, target, drafter, generation=generation, children=children, benchmarks=benchmarks,
                           pod_monitor=pod_monitor, lws=lws, policy=policy, pod_monitor_labels=pod_monitor_labels)
    plan.family = _family_label(drafter.doc if drafter is not None else None)
    return plan


def _family_label(doc) -> str | None:
    from ..core.checker.gates import family_of

    fam = family_of(doc)
    return None if fam is None or fam.name == "unknown" else f"{fam.label} ({fam.format})"


def _plan_reconcile(cr, target, drafter, *, generation, children, benchmarks, pod_monitor, lws, policy,
                    pod_monitor_labels) -> Plan:
    limit, guard_problem = guard_limit(cr, benchmarks or {})
    try:
        rendered = render(cr, target.doc, drafter.doc, pod_monitor=pod_monitor, policy=policy or TenancyPolicy(),
                          pod_monitor_labels=pod_monitor_labels, network_policy=network_policy,
                          guard=limit)
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
    return Plan(generation, apply=list(rendered.objects),
                delete=obsolete(cr.metadata.name, rendered.objects, children, cr.metadata.uid),
                rendered=rendered, findings=findings, accepted=accepted, resolved=resolved,
                guard=rendered.guard.condition if rendered.guard is not None else guard_problem)


def obsolete(name: str, desired: list[dict], children: Mapping[tuple[str, str], dict],
             uid: str | None = None) -> list[tuple[str, str]]:
    """Children of this instance that the desired set no longer has (e.g. the Deployment after switching to
    multi-node). Children are named NAME or NAME-engine, so only those are looked at, and only those this CR
    (``uid``, else the desired children's owner) controls: labels alone never make an object ours."""
    uid = uid or next((ownership.owner_uid(o) for o in desired if ownership.owner_uid(o)), None)
    want = {(o["kind"], o["metadata"]["name"]) for o in desired}
    out = []
    for kind in MANAGED_KINDS:
        for cname in (name, f"{name}-engine"):
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


def observe(gen: int, body: dict, workload: dict | None, findings, rendered: Rendered | None = None) -> st.Observation:
    """The workload's replicas and whether it carries ``rendered``'s config (status.Observation)."""
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
            obs.workload_updated = have == rendered.config_hash and (seen is None or wgen is None or seen >= wgen)
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
                   speculation: dict | None, now: str) -> dict[str, Any]:
    """The status the reconciler wants: its conditions, the monitor's (``speculation``), the replicas, the
    selector, status.resolved, the accepted findings and the monitor's status.acceptance."""
    new = st.compute_conditions(obs)
    if speculation is not None and speculation.get("condition"):
        new.append(speculation["condition"])
    if speculation is not None and speculation.get("profitable"):
        new.append(speculation["profitable"])  # SpeculationProfitable: the monitor's, while a guard is set
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
        desired["acceptance"] = speculation.get("acceptance")  # None: cleared (merge patch null)
    return desired


def plan_status(name: str, current: dict | None, obs: st.Observation, resolved: Resolved | None,
                speculation: dict | None, now: str) -> StatusPlan | None:
    """The status write for an observation, or None when the stored status already says it (times aside)."""
    current = current or {}
    desired = desired_status(name, current, obs, resolved, speculation, now)
    if not st.status_changed(current, desired):
        return None
    patch = dict(desired)
    if isinstance(desired.get("acceptance"), dict):  # a merge patch keeps keys it does not name: null them
        patch["acceptance"] = st.merge_patch_of(current.get("acceptance"), desired["acceptance"])
    cur_resolved = current.get("resolved") if isinstance(current.get("resolved"), dict) else {}
    if isinstance(desired.get("resolved"), dict) and GUARD_RESOLVED in cur_resolved \
            and GUARD_RESOLVED not in desired["resolved"]:  # likewise a guard gone
        patch["resolved"] = {**desired["resolved"], GUARD_RESOLVED: None}
    changed = st.transitions(current.get("conditions"), desired["conditions"])
    events = [(c, ev) for c in changed for ev in (st.event_for(c),) if ev is not None]
    return StatusPlan(patch=patch, status={**current, **desired}, transitions=changed, events=events)
