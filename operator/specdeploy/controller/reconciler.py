"""One reconcile path: parse -> resolve configs -> check -> render -> apply children -> status.

Level-based: every call looks at the whole desired state and closes the gap; an idle
reconcile (nothing drifted) makes no API writes. Watches feed the caches (the CR bodies,
the children, referenced ConfigMaps) so that an idle reconcile makes no reads either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any


from ..api.validation import INVALID_SPEC, problems_message, validate
from ..core import guard as gd
from ..core import names as N
from ..core.findings import errors as error_findings
from ..core.policy import TenancyPolicy, check_policy, policy_needs_claims
from ..core.render import RenderError, Rendered, build_tuned_configmap, render, selector_labels
from . import metrics, ownership, status as st
from .status import now_rfc3339
from .kube import Kube, KubeError
from .queue import Backoff, WorkQueue
from .resolve import ResolutionError, Resolver

log = logging.getLogger("specdeploy.controller")

Key = tuple[str, str]  # (namespace, name)
MANAGED_KINDS = ("ConfigMap", "Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget", "PodMonitor")
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")
LWS = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
PODMONITOR = ("monitoring.coreos.com/v1", "podmonitors")
GUARD_RESOLVED = "guardMaxConcurrency"  # status.resolved: spec.speculation.guard's limit in use


@dataclass
class Settings:
    resync_seconds: float = 60.0
    workers: int = 4
    backoff_min: float = 5.0
    backoff_max: float = 300.0
    capability_ttl: float = 60.0
    policy: TenancyPolicy = field(default_factory=TenancyPolicy)
    pod_monitor_labels: dict[str, str] = field(default_factory=dict)  # extra labels on every PodMonitor


POD_MONITOR_LABELS_ENV = "SPECDEPLOY_POD_MONITOR_LABELS"  # chart value podMonitor.labels, as a JSON object


def pod_monitor_labels_from_env(env: Any = None) -> dict[str, str]:
    """The extra PodMonitor labels the chart hands over (a JSON object of strings); a bad value stops start-up."""
    text = (os.environ if env is None else env).get(POD_MONITOR_LABELS_ENV) or ""
    if not text:
        return {}
    try:
        labels = json.loads(text)
    except ValueError:
        labels = None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError(f"{POD_MONITOR_LABELS_ENV} must be a JSON object of string labels (chart value "
                         f"podMonitor.labels), got {text!r}")
    return labels


@dataclass
class _State:
    """What the operator remembers per SpeculativeDeployment between reconciles."""

    last_generation_seen: int = 0
    resolved: dict[str, Any] = field(default_factory=dict)


class Controller:
    def __init__(self, kube: Kube, resolver: Resolver, settings: Settings | None = None, clock=time.monotonic):
        self.kube = kube
        self.resolver = resolver
        self.settings = settings or Settings()
        self.clock = clock
        self.queue = WorkQueue(clock)
        self.backoff = Backoff(self.settings.backoff_min, self.settings.backoff_max)
        self.bodies: dict[Key, dict] = {}
        self.children: dict[tuple[str, str, str], dict] = {}  # (kind, ns, name) -> body
        # (kind, ns, name) -> (resourceVersion, applied digest) of a child known to hold that intent
        self._verified: dict[tuple[str, str, str], tuple[str | None, str]] = {}
        self.cm_refs: dict[tuple[str, str], set[Key]] = {}  # ConfigMap -> CRs referencing it
        self._refs_of: dict[Key, set[tuple[str, str]]] = {}  # CR -> ConfigMaps it references
        self.state: dict[Key, _State] = {}
        self._caps: dict[tuple[str, str], tuple[float, bool]] = {}
        self._tasks: list[asyncio.Task] = []
        # The acceptance monitor (monitor.py; started with the workers when set) and what it wants
        # in each status: {"acceptance": dict | None, "condition": SpeculationHealthy | None}.
        # _write_status writes it with the reconciler's own conditions: one status writer per key.
        self.monitor = None
        # SpeculativeBenchmarks (benchmark.py): its own queue and workers, started and stopped with these
        self.benchmark_controller = None
        self.speculation: dict[Key, dict[str, Any]] = {}
        # What the running reconcile of each key changed (children written, status transitions)
        # and the errors it reported: logged as one line when it ends (_log_outcome).
        self._changes: dict[Key, list[str]] = {}
        self._errors: dict[Key, list[tuple[str, str]]] = {}
        # SpeculativeBenchmarks (watch-fed) that spec.speculation.guard.fromBenchmark may name: (ns, name) -> body
        self.benchmarks: dict[tuple[str, str], dict] = {}

    # ------------------------------------------------------------- watch feeds

    async def observe_cr(self, event_type: str | None, body: dict) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name"))
        if event_type == "DELETED":
            self.bodies.pop(key, None)
            self.state.pop(key, None)
            if self.monitor is not None:
                self.monitor.forget(key)
            self.speculation.pop(key, None)
            self._unindex_refs(key)
            metrics.MANAGED.set(len(self.bodies))
            return
        old = self.bodies.get(key)
        self.bodies[key] = body = ownership.for_cache(body)
        metrics.MANAGED.set(len(self.bodies))
        self._index_refs(key, body)
        gen = meta.get("generation") or 1
        observed = (body.get("status") or {}).get("observedGeneration")
        # Our own status writes come back as MODIFIED events: nothing to do for those.
        if old is not None and event_type == "MODIFIED" and observed == gen and \
                (old.get("metadata") or {}).get("generation") == gen and old.get("spec") == body.get("spec"):
            return
        await self.queue.add(key)

    def _unindex_refs(self, key: Key) -> None:
        for cm in self._refs_of.pop(key, set()):
            refs = self.cm_refs.get(cm)
            if refs is not None:
                refs.discard(key)
                if not refs:
                    del self.cm_refs[cm]

    def _index_refs(self, key: Key, body: dict) -> None:
        self._unindex_refs(key)
        spec = body.get("spec") or {}
        mine: set[tuple[str, str]] = set()
        for role in ("target", "drafter"):
            src = spec.get(role) if isinstance(spec.get(role), dict) else {}
            ref = ((src.get("configFrom") or {}) if isinstance(src.get("configFrom"), dict) else {}).get("configMapKeyRef") or {}
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                mine.add((key[0], ref["name"]))
        for cm in mine:
            self.cm_refs.setdefault(cm, set()).add(key)
        self._refs_of[key] = mine

    async def observe_child(self, event_type: str | None, body: dict) -> None:
        meta = body.get("metadata") or {}
        ck = (body.get("kind"), meta.get("namespace") or "default", meta.get("name"))
        if event_type == "DELETED":
            self.children.pop(ck, None)
            self._verified.pop(ck, None)
        else:
            self.children[ck] = body = ownership.for_cache(body)
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "SpeculativeDeployment" and ref.get("controller"):
                key = (ck[1], ref.get("name"))
                if key in self.bodies:
                    await self.queue.add(key)

    async def observe_benchmark(self, event_type: str | None, body: dict) -> None:
        """A SpeculativeBenchmark changed: queue the deployments whose guard reads it, when what the guard reads
        (phase, recommendation.guard) changed."""
        meta = body.get("metadata") or {}
        bk = (meta.get("namespace") or "default", meta.get("name"))
        old = self.benchmarks.get(bk)
        if event_type == "DELETED":
            self.benchmarks.pop(bk, None)
        else:
            self.benchmarks[bk] = body
        if old is not None and event_type != "DELETED" and _guard_view(old) == _guard_view(body):
            return
        for key, cr in list(self.bodies.items()):
            if key[0] == bk[0] and _from_benchmark(cr) == bk[1]:
                await self.queue.add(key)

    async def observe_configmap(self, event_type: str | None, body: dict) -> None:
        meta = body.get("metadata") or {}
        ck = (meta.get("namespace") or "default", meta.get("name"))
        labels = meta.get("labels") or {}
        if labels.get(N.LABEL_MANAGED_BY) == N.MANAGED_BY:
            await self.observe_child(event_type, {**body, "kind": "ConfigMap"})
        refs = self.cm_refs.get(ck)
        if not refs:
            self.resolver.configmaps.pop(ck, None)
            return
        if event_type == "DELETED":
            self.resolver.configmaps.pop(ck, None)
        else:
            self.resolver.configmaps[ck] = body
        for key in list(refs):
            await self.queue.add(key)

    # ------------------------------------------------------------- workers

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._worker(i, self.queue)) for i in range(self.settings.workers)]
        self._tasks.append(loop.create_task(self._resync()))
        if self.monitor is not None:
            self._tasks.append(loop.create_task(self.monitor.run()))
        if self.benchmark_controller is not None:
            self.benchmark_controller.start()

    async def stop(self) -> None:
        if self.benchmark_controller is not None:
            await self.benchmark_controller.stop()
        await self.queue.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    async def lead(self) -> None:
        """This replica became the leader: start the workers and the monitor, reconcile every cached CR.

        The caches (CR bodies, children, ConfigMaps, engine pods) were kept warm by the watches
        while following, so the first reconciles read nothing and write only what drifted."""
        if not self._tasks:
            self.start()
        for key in list(self.bodies):
            await self.queue.add(key)
        if self.benchmark_controller is not None:
            await self.benchmark_controller.requeue_all()

    async def follow(self) -> None:
        """This replica lost (or never had) the lead: stop the workers and the monitor, keep the caches.

        Writes are already refused by the fence (kube.Fence) at this point; this stops the work."""
        tasks, self._tasks = self._tasks, []
        if self.benchmark_controller is not None:
            await self.benchmark_controller.stop()
        # Close the workers' queue first: its get() returns None and each worker ends after its current
        # key, even when a cancellation is lost (Python 3.11's asyncio.wait_for can swallow one).
        old, self.queue = self.queue, WorkQueue(self.clock)
        await old.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            for key in list(self.bodies):
                await self.queue.add(key)

    async def _worker(self, i: int, queue: WorkQueue) -> None:
        while True:
            key = await queue.get()
            if key is None:
                return
            metrics.QUEUE_DEPTH.set(len(queue))
            try:
                delay = await self.run_once(key)
            finally:
                await queue.done(key)
            if delay:
                await queue.add(key, delay)

    async def run_once(self, key: Key) -> float | None:
        """One reconcile with the worker's error handling; returns the requeue delay, if any."""
        t0 = time.perf_counter()
        self._changes[key], self._errors[key] = [], []
        try:
            delay = await self.reconcile(key)
            if delay is None:  # a returned delay is a retry (e.g. a resolution failure): keep the backoff growing
                self.backoff.succeeded(key)
            metrics.RECONCILES.labels(result="ok").inc()
        except ResolutionError as e:  # raised only for transient resolution waits
            delay = e.delay or self.backoff.failed(key)
            metrics.RECONCILES.labels(result="waiting").inc()
        except Exception as e:  # API errors, conflicts: retry with backoff; anything else is a bug: status says so
            reason = type(e).__name__ if not isinstance(e, KubeError) else f"Api{e.status}"
            metrics.ERRORS.labels(reason=reason).inc()
            metrics.RECONCILES.labels(result="error").inc()
            delay = self.backoff.failed(key)
            if isinstance(e, KubeError):
                log.warning("reconcile %s/%s failed (%s); retrying in %.0fs", key[0], key[1], e, delay)
            else:
                log.exception("reconcile %s/%s: internal error; retrying in %.0fs", key[0], key[1], delay)
                await self._internal_error(key, e)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - t0)
            self._log_outcome(key)
        return delay

    def _note(self, key: Key, change: str) -> None:
        self._changes.setdefault(key, []).append(change)

    def _log_outcome(self, key: Key) -> None:
        """One INFO line per reconcile that changed something (children written, condition
        transitions), or instead one WARNING line per error it reported (a condition turning bad,
        with its reason and message). Quiet otherwise: an idle resync or a failure that is
        already in the status logs nothing."""
        changes, errors = self._changes.pop(key, []), self._errors.pop(key, [])
        who = f"{key[0]}/{key[1]}"
        for reason, message in errors:
            log.warning("%s: %s: %s", who, reason, " ".join(message.split())[:600])
        if errors:  # the warning says what the status says; the writes, if any, still get their line
            changes = [c for c in changes if not c.startswith("status ")]
        if changes:
            log.info("%s: %s", who, "; ".join(changes))

    async def _internal_error(self, key: Key, exc: BaseException) -> None:
        """An unexpected error becomes status: Ready=False reason InternalError, with an Event (never raises)."""
        body = self.bodies.get(key)
        if body is None:
            return
        gen = (body.get("metadata") or {}).get("generation") or 1
        text = " ".join(str(exc).split())[:300]
        obs = self._observation(gen, body, self._workload(*key), None)
        obs.internal_error = (type(exc).__name__, text)
        try:
            await self._write_status(key, body, obs, resolved=None)
        except Exception:  # noqa: BLE001 - the API itself fails: the next retry writes it
            log.warning("could not write the InternalError status of %s/%s", *key)

    # ------------------------------------------------------------- capabilities

    async def has(self, api: tuple[str, str]) -> bool:
        hit = self._caps.get(api)
        if hit and self.clock() - hit[0] < self.settings.capability_ttl:
            return hit[1]
        ok = await self.kube.has_api(*api)
        self._caps[api] = (self.clock(), ok)
        return ok

    # ------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> float | None:
        """Close the gap for one SpeculativeDeployment; returns a requeue delay or None."""
        body = self.bodies.get(key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        ns, name = key
        meta = body.get("metadata") or {}
        gen = meta.get("generation") or 1
        state = self.state.setdefault(key, _State())
        workload = self._workload(ns, name)

        # every spec problem (the schema's or the object-level check's) lands here, in the words of the
        # spec message catalog (api/validation.py) the webhook and the CLI use: DrafterCompatible=Unknown and
        # Progressing=False, reason InvalidSpec; nothing is resolved or applied
        cr, problems = validate(body)
        if cr is None:
            msg = problems_message(problems)
            obs = self._observation(gen, body, workload, None)
            obs.blocked_reason = (INVALID_SPEC, msg)
            obs.resolution_error = (INVALID_SPEC, msg)
            await self._write_status(key, body, obs, resolved=None)
            return None
        cr.metadata.namespace = ns

        # tenancy policy: before anything is read or written on the CR's behalf (a hub token Secret included)
        refusals = await self._policy(ns, cr)
        if refusals:
            msg = "; ".join(f"{f.path}: {f.message}" for f in refusals)
            obs = self._observation(gen, body, workload, None)
            obs.blocked_reason = ("PolicyRefused", msg)
            obs.resolution_error = ("PolicyRefused", msg)
            await self._write_status(key, body, obs, resolved=None)
            return None

        # resolve both configs
        try:
            target = await self.resolver.resolve(cr, "target")
            drafter = await self.resolver.resolve(cr, "drafter")
        except ResolutionError as e:
            obs = self._observation(gen, body, workload, None)
            obs.resolution_error = (e.reason, e.message)
            await self._write_status(key, body, obs, resolved=None)
            if e.reason == "InspectionPending":
                raise  # short, fixed wait; not a failure
            return e.delay or self.backoff.failed(key)

        # spec.speculation.guard.fromBenchmark: the benchmark's measured crossover, from the watch-fed cache
        guard_limit, guard_problem = None, None
        g = cr.spec.speculation.guard
        if g is not None and g.from_benchmark is not None:
            guard_limit, guard_problem = gd.limit_from_benchmark(
                g.from_benchmark, self.benchmarks.get((ns, g.from_benchmark)), deployment=name)

        # check + render (pure)
        monitoring = await self.has(PODMONITOR)
        try:
            rendered = render(cr, target.doc, drafter.doc, pod_monitor=monitoring, policy=self.settings.policy,
                              pod_monitor_labels=self.settings.pod_monitor_labels,
                              guard=guard_limit)
        except RenderError as e:
            obs = self._observation(gen, body, workload, e.findings)
            obs.accepted = e.accepted
            first = error_findings(e.findings)[0].code if error_findings(e.findings) else "Unknown"
            if state.last_generation_seen != gen:
                metrics.CHECK_FAILURES.labels(code=first).inc()
            state.last_generation_seen = gen
            await self._write_status(key, body, obs, resolved=self._resolved(target, drafter, None, cr))
            return None
        state.last_generation_seen = gen

        desired = rendered.objects
        kind_needed = desired[1]["kind"]
        if kind_needed == "LeaderWorkerSet" and not await self.has(LWS):
            obs = self._observation(gen, body, workload, rendered.analysis.findings)
            obs.accepted = rendered.analysis.accepted
            obs.blocked_reason = ("LeaderWorkerSetMissing",
                                  f"spec.nodes={cr.spec.nodes} needs a LeaderWorkerSet, but the leaderworkerset.x-k8s.io/v1 "
                                  "API is not installed; install LeaderWorkerSet or set spec.nodes: 1")
            await self._write_status(key, body, obs, resolved=self._resolved(target, drafter, rendered, cr))
            return None

        conflicts = await self._apply(ns, name, desired)
        if rendered.tuning is not None:
            await self._tuning(ns, cr, rendered)
        workload = self._workload(ns, name)
        obs = self._observation(gen, body, workload, rendered.analysis.findings, rendered)
        obs.accepted = rendered.analysis.accepted
        obs.conflicts = conflicts
        obs.guard = rendered.guard.condition if rendered.guard is not None else guard_problem
        await self._write_status(key, body, obs, resolved=self._resolved(target, drafter, rendered, cr))
        return None

    async def _policy(self, ns: str, cr) -> list:
        policy = self.settings.policy
        labels: dict[str, dict | None] = {}
        for claim in policy_needs_claims(cr.spec, policy):
            pvc = await self.kube.get("PersistentVolumeClaim", ns, claim)
            labels[claim] = ((pvc.get("metadata") or {}).get("labels") or {}) if pvc else None
        return check_policy(cr.spec, policy, labels)

    def _workload(self, ns: str, name: str) -> dict | None:
        for kind in WORKLOAD_KINDS:
            w = self.children.get((kind, ns, name))
            if w is not None:
                return w
        return None

    def _observation(self, gen: int, body: dict, workload: dict | None, findings, rendered: Rendered | None = None) -> st.Observation:
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
                tmpl = self._template(workload)
                have = ((tmpl.get("metadata") or {}).get("annotations") or {}).get(N.CONFIG_HASH_ANNOTATION)
                wgen = (workload.get("metadata") or {}).get("generation")
                seen = ws.get("observedGeneration")
                obs.workload_updated = have == rendered.config_hash and (seen is None or wgen is None or seen >= wgen)
        return obs

    @staticmethod
    def _template(workload: dict) -> dict:
        spec = workload.get("spec") or {}
        if workload.get("kind") == "LeaderWorkerSet":
            return (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
        return spec.get("template") or {}

    @staticmethod
    def _resolved(target, drafter, rendered: Rendered | None, cr) -> dict:
        out: dict[str, Any] = {"targetConfigDigest": target.digest, "drafterConfigDigest": drafter.digest,
                               "profile": cr.spec.gpu.type}
        if target.commit:
            out["targetRevision"] = target.commit
        if drafter.commit:
            out["drafterRevision"] = drafter.commit
        if rendered is not None:
            ec = rendered.engine_config
            workload = rendered.objects[1]
            tmpl = workload["spec"]["template"] if workload["kind"] == "Deployment" else \
                workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
            out.update({"blockSize": ec.speculation.block_size, "numSpeculativeTokens": ec.speculation.num_speculative_tokens,
                        "configHash": rendered.config_hash, "image": tmpl["spec"]["containers"][0]["image"]})
            if ec.speculation.draft_window is not None:
                out["draftWindow"] = ec.speculation.draft_window
            if ec.speculation.native_window is not None:
                out["nativeWindow"] = ec.speculation.native_window
            served = rendered.analysis.derived.served_context if rendered.analysis.derived else None
            if served is not None:
                out["servedContext"] = served
            from ..core.gpus import get_profile
            out["gpuProduct"] = get_profile(cr.spec.gpu.type).product_label
            from ..core.cache import weight_source
            out["cache"] = rendered.cache.label()
            out["targetWeights"] = weight_source(cr.spec.target, "target", rendered.cache)
            out["drafterWeights"] = weight_source(cr.spec.drafter, "drafter", rendered.cache,
                                                  rendered.image if rendered.baked_drafter is not None else None)
            if rendered.guard is not None and rendered.guard.limit.max_concurrency is not None:
                out[GUARD_RESOLVED] = rendered.guard.limit.max_concurrency
        return out

    async def _apply(self, ns: str, name: str, desired: list[dict]) -> list[str]:
        """Apply drifted or missing children (server-side apply), delete obsolete ones. Returns conflicts."""
        conflicts: list[str] = []
        want = {(o["kind"], o["metadata"]["name"]) for o in desired}
        for obj in desired:
            kind, cname = obj["kind"], obj["metadata"]["name"]
            actual = self.children.get((kind, ns, cname))
            if actual is not None and self._foreign(obj, actual):
                conflicts.append(f"{kind}/{cname}")
                continue
            applied = await self._apply_child(ns, obj, actual)
            if applied is None:
                conflicts.append(f"{kind}/{cname}")
            elif applied is not actual:  # a request was made: the child was created or changed
                self._note((ns, name), f"{'created' if actual is None else 'updated'} {kind}/{cname}")
        # obsolete children of this instance (e.g. the Deployment after switching to multi-node):
        # children are named NAME or NAME-engine, so look those up instead of scanning all.
        for kind in MANAGED_KINDS:
            for cname in (name, f"{name}-engine"):
                if (kind, cname) in want:
                    continue
                body = self.children.get((kind, ns, cname))
                if body is None:
                    continue
                labels = (body.get("metadata") or {}).get("labels") or {}
                if labels.get(N.LABEL_INSTANCE) == name and labels.get(N.LABEL_MANAGED_BY) == N.MANAGED_BY \
                        and labels.get(N.LABEL_COMPONENT) == N.COMPONENT_ENGINE:
                    await self.kube.delete(kind, ns, cname)
                    self.children.pop((kind, ns, cname), None)
                    self._note((ns, name), f"deleted obsolete {kind}/{cname}")
        return conflicts

    @staticmethod
    def _foreign(obj: dict, actual: dict) -> bool:
        """The live child is controlled by another object (not this SpeculativeDeployment)."""
        uid = obj["metadata"].get("ownerReferences", [{}])[0].get("uid")
        owners = [r.get("uid") for r in (actual.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")]
        return bool(uid and owners and uid not in owners)

    async def _apply_child(self, ns: str, obj: dict, actual: dict | None) -> dict | None:
        """One child through server-side apply (ownership.py); no request when it is in sync.

        Conflicts (another manager changed a field specdeploy applies) are forced, with a Warning
        Event naming the other managers. Returns the live child, or None when the name is taken
        by an object another controller owns.
        """
        kind, cname = obj["kind"], obj["metadata"]["name"]
        digest = ownership.digest(obj)
        if actual is not None:
            seen = ((actual.get("metadata") or {}).get("resourceVersion"), digest)
            if self._verified.get((kind, ns, cname)) == seen:
                return actual  # this version of the child was found in sync with this intent already
            if ownership.in_sync(actual, obj, digest):
                self._verified[(kind, ns, cname)] = seen
                return actual
        body, _ = ownership.intent(obj, digest)
        if actual is not None:
            takeover = ownership.takeover_patch(actual)
            if takeover is not None:  # children of a version before server-side apply: fields move to our entry
                await self.kube.patch(kind, ns, cname, takeover, content_type="application/json-patch+json")
        try:
            live = await self.kube.apply(body)
        except KubeError as e:
            if e.status == 422 and "Only one reference can have Controller set to true" in str(e):
                return None  # the name belongs to an object another controller owns
            if e.status != 409:
                raise
            managers = ownership.conflict_managers(str(e))
            owner = self._owner_body(obj)
            if owner is not None:
                await self._event(owner, "Warning", "FieldOwnershipConflict",
                                  f"{kind}/{cname}: fields specdeploy applies were changed by "
                                  f"{', '.join(managers) or 'another field manager'}; applying them again "
                                  f"(force): {' '.join(str(e).split())[:600]}")
            live = await self.kube.apply(body, force=True)
        live = {**live, "kind": kind} if isinstance(live, dict) else body
        self.children[(kind, ns, cname)] = live = ownership.for_cache(live)
        self._verified[(kind, ns, cname)] = ((live.get("metadata") or {}).get("resourceVersion"), digest)
        return live

    def _owner_body(self, obj: dict) -> dict | None:
        ref = (obj["metadata"].get("ownerReferences") or [{}])[0]
        return self.bodies.get((obj["metadata"].get("namespace") or "default", ref.get("name")))

    async def _tuning(self, ns: str, cr, rendered: Rendered) -> None:
        """spec.tuning: run the tuning Job once; publish its result as the ConfigMap the engine pods mount.

        The Job is created and never patched (its pod template is immutable); a new tuning key
        (another GPU, engine, image or model) names a new Job. Engine pods mount the ConfigMap as
        an optional volume, so pods started before the result exists run with default kernels.
        """
        plan = rendered.tuning
        job = self.children.get(("Job", ns, plan.job_name))
        if job is None:
            job = await self.kube.get("Job", ns, plan.job_name)
            if job is None:  # created once: a Job's pod template is immutable, a new key names a new Job
                created = await self.kube.create(rendered.tuning_objects[0])
                self.children[("Job", ns, plan.job_name)] = {**(created or rendered.tuning_objects[0]), "kind": "Job"}
                self._note((ns, cr.metadata.name), f"created tuning Job/{plan.job_name}")
                return
            self.children[("Job", ns, plan.job_name)] = {**job, "kind": "Job"}
        if plan.storage != "configMap" or not (job.get("status") or {}).get("succeeded"):
            return  # running, failed (its pod status says why), or written to the PVC directly
        existing = self.children.get(("ConfigMap", ns, plan.configmap_name))
        if existing is not None and ((existing.get("metadata") or {}).get("annotations") or {}).get(N.TUNING_KEY_ANNOTATION) == plan.key:
            return
        pods = await self.kube.list("Pod", ns, f"job-name={plan.job_name}")
        messages = [((c.get("state") or {}).get("terminated") or {}).get("message")
                    for p in pods for c in ((p.get("status") or {}).get("containerStatuses") or [])]
        messages = [m for m in messages if m]
        if not messages:
            return
        try:
            cm = build_tuned_configmap(cr, plan, messages[-1])
        except ValueError as e:
            log.warning("tuning Job %s/%s produced an unusable result: %s", ns, plan.job_name, e)
            return
        await self._apply_child(ns, cm, existing)

    async def _write_status(self, key: Key, body: dict, obs: st.Observation, resolved: dict | None) -> None:
        ns, name = key
        current = body.get("status") or {}
        new = st.compute_conditions(obs)
        spec_status = self.speculation.get(key)  # the acceptance monitor's part, if it has judged
        if spec_status is not None and spec_status.get("condition"):
            new.append(spec_status["condition"])
        if spec_status is not None and spec_status.get("profitable"):
            new.append(spec_status["profitable"])  # SpeculationProfitable: the monitor's, while a guard is set
        conds = st.merge_conditions(current.get("conditions"), new, obs.generation, now_rfc3339())
        desired: dict[str, Any] = {
            "conditions": conds,
            "observedGeneration": obs.generation,
            "replicas": obs.replicas,
            "readyReplicas": obs.ready_replicas,
            "selector": ",".join(f"{k}={v}" for k, v in selector_labels(name).items()),
        }
        if resolved is not None:
            desired["resolved"] = resolved
        accepted = st.accepted_findings(obs)
        if accepted is not None:
            desired["acceptedFindings"] = accepted
        if spec_status is not None:
            desired["acceptance"] = spec_status.get("acceptance")  # None: cleared (merge patch null)
        if not st.status_changed(current, desired):
            return
        patch = dict(desired)
        if isinstance(desired.get("acceptance"), dict):  # a merge patch keeps keys it does not name: null them
            patch["acceptance"] = st.merge_patch_of(current.get("acceptance"), desired["acceptance"])
        cur_resolved = current.get("resolved") if isinstance(current.get("resolved"), dict) else {}
        if isinstance(desired.get("resolved"), dict) and GUARD_RESOLVED in cur_resolved \
                and GUARD_RESOLVED not in desired["resolved"]:  # likewise a guard gone
            patch["resolved"] = {**desired["resolved"], GUARD_RESOLVED: None}
        await self.kube.patch("SpeculativeDeployment", ns, name, {"status": patch}, sub="status")
        body["status"] = {**current, **desired}  # our view until the watch delivers the write
        in_reconcile = key in self._changes
        changed = st.transitions(current.get("conditions"), conds)
        if changed:
            self._note(key, "status " + ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in changed))
        for c in changed:
            ev = st.event_for(c)
            if ev is not None:
                if ev[0] == "Warning":
                    self._errors.setdefault(key, []).append((f"{c['type']}={c['status']} {ev[1]}", ev[2]))
                await self._event(body, *ev)
        if not in_reconcile:  # written outside a reconcile: log it now
            self._log_outcome(key)

    async def _event(self, body: dict, type_: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        ts = now_rfc3339()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace") or "default"},
            "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "name": meta.get("name"),
                               "namespace": meta.get("namespace") or "default", "uid": meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": "specdeploy-operator"}, "reportingComponent": "specdeploy-operator",
            "reportingInstance": "specdeploy-operator",
            "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
        }
        try:
            await self.kube.create(event)
        except KubeError as e:  # an Event is best effort; never fail a reconcile for it
            log.info("could not post event %s: %s", reason, e)


def _from_benchmark(body: dict) -> str | None:
    """spec.speculation.guard.fromBenchmark of a raw SpeculativeDeployment body."""
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    s = spec.get("speculation") if isinstance(spec.get("speculation"), dict) else {}
    g = s.get("guard") if isinstance(s.get("guard"), dict) else {}
    name = g.get("fromBenchmark")
    return name if isinstance(name, str) else None


def _guard_view(body: dict) -> tuple:
    """What the guard reads of a SpeculativeBenchmark (its progress updates are not worth a reconcile)."""
    status = body.get("status") if isinstance(body.get("status"), dict) else {}
    reco = status.get("recommendation") if isinstance(status.get("recommendation"), dict) else {}
    ref = (body.get("spec") or {}).get("deploymentRef") if isinstance(body.get("spec"), dict) else None
    return status.get("phase"), repr(reco.get("guard")), repr(ref)
