"""The reconciler: the work queue, its workers, and one reconcile path.

parse -> observe -> plan -> apply -> status: the spec is parsed and checked (api/validation.py),
what the operator knows comes from the watch-fed caches (controller/cache.py), the pure planner
(controller/plan.py) says which children to apply and delete and which status to write, and the
executor (controller/executor.py) does it through the API client.

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

from ..api.types import Resolved
from ..api.validation import INVALID_SPEC, problems_message, validate
from ..core.rollout import baseline as bl
from ..core.policy import TenancyPolicy, policy_needs_claims
from ..core.render import PolicyRefused, admit
from . import metrics, plan as pl, status as st
from .cache import MANAGED_KINDS, WORKLOAD_KINDS, Caches, Key, is_child  # noqa: F401 - the RBAC audit reads MANAGED_KINDS here
from .executor import Executor
from .kube import Kube, KubeError
from .monitor import AcceptanceMonitor
from .queue import Backoff, WorkQueue
from .resolve import ResolutionError, Resolver
from .status import now_rfc3339

log = logging.getLogger("specdeploy.controller")

LWS, PODMONITOR, GUARD_RESOLVED = pl.LWS, pl.PODMONITOR, pl.GUARD_RESOLVED


@dataclass
class Settings:
    resync_seconds: float = 60.0
    workers: int = 4
    backoff_min: float = 5.0
    backoff_max: float = 300.0
    capability_ttl: float = 60.0
    policy: TenancyPolicy = field(default_factory=TenancyPolicy)
    pod_monitor_labels: dict[str, str] = field(default_factory=dict)  # extra labels on every PodMonitor
    # a NetworkPolicy per SpeculativeDeployment (None: none): the namespaces besides the CR's that reach its engines
    engine_network_policy: tuple[str, ...] | None = None


POD_MONITOR_LABELS_ENV = "SPECDEPLOY_POD_MONITOR_LABELS"  # chart value podMonitor.labels, as a JSON object
# chart value engineNetworkPolicy (operator flags --engine-network-policy, --engine-ingress-namespace): unset, no
# NetworkPolicy; else a comma-separated list (maybe empty) of the namespaces besides the CR's own and the operator's
ENGINE_NETWORK_POLICY_ENV = "SPECDEPLOY_ENGINE_NETWORK_POLICY"


def engine_network_policy_from_env(env: Any = None) -> tuple[str, ...] | None:
    """The namespaces whose pods may reach engine pods besides the CR's own, the operator's among them; None: the
    operator renders no NetworkPolicy."""
    env = os.environ if env is None else env
    text = env.get(ENGINE_NETWORK_POLICY_ENV)
    if text is None:
        return None
    own = env.get("SPECDEPLOY_OPERATOR_NAMESPACE") or env.get("POD_NAMESPACE")
    listed = [n for n in text.split(",") if n]
    return tuple(sorted(set(listed + ([own] if own else []))))


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


class Controller:
    def __init__(self, kube: Kube, resolver: Resolver, settings: Settings | None = None, clock=time.monotonic,
                 wall=time.time):
        self.kube = kube
        self.resolver = resolver
        self.settings = settings or Settings()
        self.clock = clock
        self.wall = wall  # seconds since the epoch: a canary's age (its Deployment's creationTimestamp) and decisions
        self.queue = WorkQueue(clock)
        self.backoff = Backoff(self.settings.backoff_min, self.settings.backoff_max)
        # the watch-fed caches, shared with the acceptance monitor (which reads them and never this object)
        self.cache = Caches(resolver.configmaps if resolver is not None else None)
        self.bodies = self.cache.bodies
        self.children = self.cache.children
        self.benchmarks = self.cache.benchmarks
        # the acceptance monitor's part of each status (monitor.py writes it, _write_status writes it out)
        self.speculation = self.cache.speculation
        self.executor = Executor(kube, self.cache, note=self._note, capability_ttl=self.settings.capability_ttl,
                                 clock=clock)
        self.state: dict[Key, _State] = {}
        self._tasks: list[asyncio.Task] = []
        # The acceptance monitor (monitor.py; started with the workers when set: attach_monitor)
        self.monitor: AcceptanceMonitor | None = None
        # SpeculativeBenchmarks (benchmark.py): its own queue and workers, started and stopped with these
        self.benchmark_controller = None
        # What the running reconcile of each key changed (children written, status transitions)
        # and the errors it reported: logged as one line when it ends (_log_outcome).
        self._changes: dict[Key, list[str]] = {}
        self._errors: dict[Key, list[tuple[str, str]]] = {}
        # child events (ChildKey, resourceVersion) that came while their owner's reconcile ran (observe_child)
        self._echoes: dict[Key, list[tuple[tuple[str, str, str], str]]] = {}

    def attach_monitor(self, interval: float, **kwargs) -> AcceptanceMonitor:
        """The acceptance monitor, reading the shared caches and queueing a key when its part of a status changed."""
        kwargs.setdefault("policy", self.settings.policy)  # its engine API key rule (monitor._api_key_refusal)
        self.monitor = AcceptanceMonitor(self.cache, interval, notify=self.enqueue, **kwargs)
        return self.monitor

    async def enqueue(self, key: Key) -> None:
        await self.queue.add(key)

    # ------------------------------------------------------------- watch feeds (cache.py decides, the queue gets)

    async def observe_cr(self, event_type: str | None, body: dict) -> None:
        key, due = self.cache.observe_cr(event_type, body)
        if event_type == "DELETED":
            self.state.pop(key, None)
            metrics.export_rollout(key[0], key[1], None)  # its rollout series go with it
            if self.monitor is not None:
                self.monitor.forget(key)
        if due:
            await self.queue.add(key)

    async def observe_child(self, event_type: str | None, body: dict) -> None:
        meta = body.get("metadata") or {}
        rv = meta.get("resourceVersion")
        for key in self.cache.observe_child(event_type, body):
            if event_type != "DELETED" and rv and self.queue.active(key):
                # maybe the echo of a write the running reconcile is making: decided when it ends (_echoes_only)
                self._echoes.setdefault(key, []).append(((body.get("kind"), meta.get("namespace") or "default",
                                                          meta.get("name")), rv))
            else:
                await self.queue.add(key)

    def _echoes_only(self, key: Key) -> bool:
        """Whether every child event that came while ``key`` was being reconciled carried a version of the child
        that this operator wrote or checked against its intent (cache.verified): the echo of its own writes,
        delivered before their responses, that a new reconcile would find in sync again."""
        return all((self.cache.verified.get(ck) or (None,))[0] == rv for ck, rv in self._echoes.pop(key, ()))

    async def observe_benchmark(self, event_type: str | None, body: dict) -> None:
        """A SpeculativeBenchmark changed: queue the deployments whose guard reads it, when what the guard reads
        (phase, recommendation.guard) changed."""
        for key in self.cache.observe_benchmark(event_type, body):
            await self.queue.add(key)

    async def observe_configmap(self, event_type: str | None, body: dict) -> None:
        if is_child(body):
            await self.observe_child(event_type, {**body, "kind": "ConfigMap"})
        for key in self.cache.observe_configmap(event_type, body, child=False):
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
                if not self._echoes_only(key):
                    await queue.add(key)  # a child changed while it ran: again, after done
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
        obs = pl.observe(gen, body, self.cache.workload(*key), None)
        obs.internal_error = (type(exc).__name__, text)
        try:
            await self._write_status(key, body, obs, resolved=None)
        except Exception:  # noqa: BLE001 - the API itself fails: the next retry writes it
            log.warning("could not write the InternalError status of %s/%s", *key)

    # ------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> float | None:
        """Close the gap for one SpeculativeDeployment: parse -> observe -> plan -> apply -> status.

        Returns a requeue delay or None."""
        body = self.bodies.get(key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        ns, name = key
        gen = (body.get("metadata") or {}).get("generation") or 1
        state = self.state.setdefault(key, _State())

        # every spec problem (the schema's or the object-level check's) lands here, in the words of the
        # spec message catalog (api/validation.py) the webhook and the CLI use: DrafterCompatible=Unknown and
        # Progressing=False, reason InvalidSpec; nothing is resolved or applied
        cr, problems = validate(body)
        if cr is None:
            self.cache.admitted.pop(key, None)
            return await self._finish(key, body, pl.blocked(gen, INVALID_SPEC, problems_message(problems)))
        cr.metadata.namespace = ns

        # tenancy policy: before anything is read or written on the CR's behalf (a hub token Secret included)
        policy = self.settings.policy
        claims = await self.executor.policy_labels(ns, policy_needs_claims(cr.spec, policy))
        try:  # the one gate (core/render/gate.py): the resolver takes an admitted spec only
            admitted = admit(cr, policy, claims, namespace=ns)
        except PolicyRefused as e:
            self.cache.admitted.pop(key, None)
            msg = "; ".join(f"{f.path}: {f.message}" for f in e.findings)
            return await self._finish(key, body, pl.blocked(gen, "PolicyRefused", msg))
        self.cache.admitted[key] = ((body.get("metadata") or {}).get("uid"), gen)  # the monitor's Secret rule

        # resolve both configs
        try:
            target = await self.resolver.resolve(admitted, "target")
            drafter = await self.resolver.resolve(admitted, "drafter")
        except ResolutionError as e:  # e.conflict: the inspector Job's name is taken (ChildConflict)
            await self._finish(key, body, pl.blocked(gen, e.reason, e.message, unresolved=False),
                               [e.conflict] if e.conflict else None)
            if e.reason == "InspectionPending":
                raise  # short, fixed wait; not a failure
            return e.delay or self.backoff.failed(key)

        # plan (pure): check, render, the children to apply and delete
        plan = pl.plan_reconcile(cr, target, drafter, generation=gen, children=self.cache.children_of(ns, name),
                                 benchmarks=self.benchmarks, pod_monitor=await self.executor.has(PODMONITOR),
                                 lws=await self.executor.has(LWS) if cr.spec.nodes > 1 else True, policy=policy,
                                 pod_monitor_labels=self.settings.pod_monitor_labels,
                                 network_policy=self.settings.engine_network_policy, status=body.get("status"),
                                 rollout=(self.speculation.get(key) or {}).get("rollout"), now=self.wall())
        if plan.check_failure is not None and state.last_generation_seen != gen:
            metrics.CHECK_FAILURES.labels(code=plan.check_failure).inc()
        state.last_generation_seen = gen

        # apply
        conflicts: list[str] = []
        if plan.apply:
            tuning = plan.rendered.tuning if plan.rendered is not None else None
            claims = [] if tuning is None else [("Job", tuning.job_name)] + (
                [("ConfigMap", tuning.configmap_name)] if tuning.storage == "configMap" else [])
            conflicts = await self.executor.apply(ns, name, plan.apply, plan.delete, uid=cr.metadata.uid, claims=claims)
            if tuning is not None and not conflicts:
                conflicts += await self.executor.tuning(ns, cr, plan.rendered)
        rp = plan.rollout
        if rp is not None and not conflicts:
            self._rollout_decided(key, body, plan, rp)
        await self._finish(key, body, plan, conflicts)
        return rp.requeue if rp is not None and not conflicts else None

    def _rollout_decided(self, key: Key, body: dict, plan: pl.Plan, rp: pl.RolloutPlan) -> None:
        """A rollout decision taken now: its metric, and on a promotion the acceptance baseline of the promoted
        revision (the canary's measured tau) handed to the status path the way the monitor hands its part."""
        if rp.decision is None:
            return
        metrics.count_rollout_decision(key[0], key[1], rp.decision.get("result", ""), rp.decision.get("reason", ""))
        if rp.baseline is not None and plan.resolved is not None:
            # the revision the monitor computes from the stored spec and the status.resolved written below
            revision = bl.speculation_revision(body.get("spec"), plan.resolved.model_dump(by_alias=True,
                                                                                          exclude_none=True))
            part = dict(self.speculation.get(key) or {})
            acc = dict(part.get("acceptance") or {})
            acc["baseline"] = {**rp.baseline, "revision": revision}
            part["acceptance"] = acc
            self.speculation[key] = part

    async def _finish(self, key: Key, body: dict, plan: pl.Plan, conflicts: list[str] | None = None) -> None:
        """Status: what the plan observed, with the workload as it is now."""
        obs = plan.observation(body, self.cache.workload(*key), conflicts)
        await self._write_status(key, body, obs, resolved=plan.resolved)
        return None

    async def _write_status(self, key: Key, body: dict, obs: st.Observation, resolved: Resolved | None) -> None:
        """The one status path: the reconciler's conditions with the acceptance monitor's part (one writer per key)."""
        change = pl.plan_status(key[1], body.get("status"), obs, resolved, self.speculation.get(key), now_rfc3339())
        if obs.rollout_status is not None or obs.rollout_off:  # the rollout series (controller/metrics.py)
            metrics.export_rollout(key[0], key[1], obs.rollout_status)
        if change is None:
            return
        await self.executor.write_status(key, body, change)
        in_reconcile = key in self._changes
        if change.transitions:
            self._note(key, "status " + ", ".join(f"{c['type']}={c['status']} ({c['reason']})" for c in change.transitions))
        for c, ev in change.events:
            if ev[0] == "Warning":
                self._errors.setdefault(key, []).append((f"{c['type']}={c['status']} {ev[1]}", ev[2]))
        if not in_reconcile:  # written outside a reconcile: log it now
            self._log_outcome(key)
