"""SpeculativeBenchmark reconcile: one step per call, every state in the API (restart-safe).

observe -> plan -> execute, as the deployment reconciler: the pure step planner (controller/benchstep.py) decides
everything from a ``View`` of what was observed, and says what to read next (``Need``) until it can return the
``Step``; this module makes those reads (the watch-fed SpeculativeDeployment cache, the resolver, GETs and lists
of what the benchmark controls, the client's log) and carries the step out through the reconciler's executor
(controller/executor.py). What a step is: the tenancy policy on the deployment as stored and on each method
drafter (``Failed``, reason ``PolicyRefused``, nothing read or created) -> resolve the deployment and its configs ->
plan (core/bench/objects.plan_for, core/bench/plan.py) -> for the first variant without a result: its
Deployment/Service/ConfigMap (core/bench/render.py), wait until it is Ready, write the client plan ConfigMap and
create the client Job, wait for it, read its pod's log and parse the last ``SPECDEPLOY_BENCH_RESULT`` line
(core/bench/result.py), store the result in the ``<bench>-results`` ConfigMap, delete the variant -> when every
variant has a result: greedy-output equality and the recommendation (core/bench/reco.py), ``results.json``, status
``Complete``.

What has been measured lives in the results ConfigMap (key ``variant-<name>.json`` per variant),
where the benchmark is lives in ``status``, and the variant's objects are looked up by name, so an
operator restart continues with the variant it was measuring (an already created client Job is
waited for, not created again). Every failure ends in ``phase: Failed`` with a condition whose
message says what failed and what to do; the variant's objects are deleted (nothing is left
running), the results measured so far stay in the ConfigMap.

Only what this benchmark controls is read, written or deleted, through the executor (with ``Unwatched`` caches:
every claim reads the live object): a child's name is claimed (``Executor.claim``) before it is read for a
decision; a child not there is created with a POST (``Executor.apply``; refused when the name is taken, never an
apply after a GET), one this benchmark controls is applied; every delete (``Executor.delete_child``,
``Executor.delete_owned``) carries the object's uid as its precondition, so an object created under the same name
since it was read is never deleted. An object of a child's name that is not controlled by this
SpeculativeBenchmark (its uid in a controller ownerReference) ends the benchmark as ``Failed``, reason
``ChildConflict``, naming it, untouched (what the refused pass created is deleted again). No decision reads
``status`` back for what the operator chose: the deadlines count from the ``creationTimestamp`` of the owned
variant Deployment and client Job, the serving client's image comes from rendering the SpeculativeDeployment
(never its ``status.resolved.image``). ``status.phase`` still says whether the benchmark finished (and its TTL
counts from ``status.finishedAt``): a forged phase steers only that benchmark, never an object or an image
(docs/concepts/security.md).

Conditions: ``Running`` (True while measuring; False with the reason it waits, failed or finished:
the STATUS printer column), ``Complete``, ``Failed``. Events: each variant's engine starting, its
client starting, it being measured, a wait, and the end (Measured, or the failure's reason).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Sequence

from ..core import names as N
from ..core.bench.render import BENCH_LABEL
from ..core.policy import TenancyPolicy
from . import benchstep as bs
from .benchstep import RESULTS_KEY, Need, Step, StatusWrite, View
from .executor import Executor
from .kube import Kube, KubeError
from .queue import WorkQueue
from .resolve import ResolutionError, Resolver

log = logging.getLogger("specdeploy.benchmark")

Key = tuple[str, str]
POLL_SECONDS = 3.0
READY_DEADLINE = 3600.0  # a variant's engine start
CLIENT_DEADLINE = 6 * 3600.0
LOG_TAIL_LINES = 2000
CRASH_RESTARTS = 3  # a variant container failing this often fails the benchmark


@dataclass(frozen=True)
class BenchDeadlines:
    """A running benchmark's poll period and deadlines (settings.OperatorSettings.bench)."""

    poll_seconds: float = POLL_SECONDS
    ready_seconds: float = READY_DEADLINE  # a variant's engine becoming Ready, from its Deployment's creation
    client_seconds: float = CLIENT_DEADLINE  # the client Job, from its creation
    crash_restarts: int = CRASH_RESTARTS  # a variant container restarting this often fails the benchmark

CHILD_KINDS = ("Job", "Deployment", "Service", "ConfigMap", "NetworkPolicy")  # what _cleanup looks for
MAX_READS = 64  # observe -> plan rounds of one step (each answers one Need; a bound against a planner bug)


class BenchmarkController:
    def __init__(self, kube: Kube, resolver: Resolver, *, deployments: dict | None = None, policy=None, event=None,
                 workers: int = 2, network_policy: Sequence[str] | None = None,
                 deadlines: BenchDeadlines | None = None):
        self.kube, self.resolver = kube, resolver
        self.deadlines = deadlines if deadlines is not None else BenchDeadlines()  # the settings' (OperatorSettings.bench)
        # the tenancy policy the reconciler applies (core/policy.py): the deployment as stored and every method drafter
        # pass it before anything is read or created (core/render/gate.py)
        self.policy: TenancyPolicy = policy if policy is not None else TenancyPolicy()
        # the children's one ownership path (claim, create-only, uid-preconditioned deletes); nothing cached
        self.executor = Executor(kube, note=lambda key, change: log.info("benchmark %s/%s: %s", *key, change))
        # the engine NetworkPolicy setting (reconciler.Settings.engine_network_policy): None, none; else the
        # namespaces besides the benchmark's that may reach a variant (build_variant_network_policy)
        self.network_policy = network_policy
        # the SpeculativeDeployment bodies the reconciler's watch keeps ((namespace, name) -> body): read, never written
        self.deployments: dict = deployments if deployments is not None else {}
        self.event = event  # async (body, type, reason, message): Executor.event
        self.workers = workers
        # set once the SpeculativeDeployment cache holds every deployment (health.CacheSync.synced; None: always):
        # until then a missing deployment may only be one the watch has not delivered yet (an operator start)
        self.deployments_synced: asyncio.Event | None = None
        self.queue = WorkQueue()
        self.bodies: dict[Key, dict] = {}
        self._tasks: list = []

    # ------------------------------------------------------------- feeds and workers
    async def observe(self, event_type: str | None, body: dict) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name"))
        if event_type == "DELETED":
            self.bodies.pop(key, None)
            return
        self.bodies[key] = body
        await self.queue.add(key)

    async def observe_job(self, body: dict) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        key = ((body.get("metadata") or {}).get("namespace") or "default", labels.get(BENCH_LABEL))
        if key in self.bodies:
            await self.queue.add(key)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._tasks:
            return
        self.queue = WorkQueue()
        self._tasks = [loop.create_task(self._worker(self.queue)) for _ in range(self.workers)]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await self.queue.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def requeue_all(self) -> None:
        for key in list(self.bodies):
            await self.queue.add(key)

    async def _worker(self, queue: WorkQueue) -> None:
        while True:
            key = await queue.get()
            if key is None:
                return
            delay: float | None
            try:
                delay = await self.reconcile(key)
            except KubeError as e:
                log.warning("benchmark %s/%s: %s; retrying", key[0], key[1], e)
                delay = 10.0
            except Exception as e:  # noqa: BLE001 - a bug: say so in status, retry later
                log.exception("benchmark %s/%s: internal error", *key)
                delay = 30.0
                body = self.bodies.get(key)
                if body is not None:
                    try:
                        await self._write_status(key, body, StatusWrite(
                            {"current": f"internal error: {type(e).__name__}: {str(e)[:200]}"}))
                    except Exception:  # noqa: BLE001
                        pass
            finally:
                await queue.done(key)
            if delay:
                await queue.add(key, delay)

    # ------------------------------------------------------------- reconcile: observe -> plan -> execute
    async def reconcile(self, key: Key) -> float | None:
        body = self.bodies.get(key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        view = self._view(key, body)
        for _ in range(MAX_READS):
            out = bs.plan_benchmark_step(view)
            if isinstance(out, Step):
                return await self._execute(key, body, out)
            await self._read(key, view, out)
        raise RuntimeError(f"the benchmark step planner asked for more than {MAX_READS} reads")

    def _view(self, key: Key, body: dict) -> View:
        """What is known without a request: the benchmark, its deployment as the watch cache holds it, the
        other benchmarks (one at a time per deployment), the settings."""
        ref = ((body.get("spec") or {}).get("deploymentRef") or {}).get("name")
        return View(key, body, now=time.time(), policy=self.policy, network_policy=self.network_policy,
                    limits=bs.Limits(self.deadlines.poll_seconds, self.deadlines.ready_seconds,
                                     self.deadlines.client_seconds, self.deadlines.crash_restarts),
                    synced=self.deployments_synced is None or self.deployments_synced.is_set(),
                    others=self.bodies, deployment=self.deployments.get((key[0], ref)) if ref else None)

    async def _read(self, key: Key, view: View, need: Need) -> None:
        """One read the planner asked for, into the view."""
        ns, uid = key[0], self._uid(*key)
        if need.what == "pvcs":
            view.pvc_labels.update(await self.executor.policy_labels(ns, need.names))
        elif need.what == "resolve":
            try:
                view.resolved[need.label] = (await self.resolver.resolve(need.admitted, need.role)).doc
            except ResolutionError as e:
                view.resolved[need.label] = bs.Wait(e.reason, e.message, e.delay or 15.0)
        elif need.what == "claim":
            for kind, cname in need.names:  # in order: the first name taken ends the step
                view.children[(kind, cname)] = await self.executor.claim(kind, ns, cname, uid)
                if view.children[(kind, cname)][1] is not None:
                    break
        elif need.what == "serving":
            view.serving = await self.kube.get("Deployment", ns, need.names[0])
        elif need.what == "pods":
            view.pods = await self.kube.list("Pod", ns, need.names[0])
        elif need.what == "prompts":
            view.prompts = await self.kube.get("ConfigMap", ns, need.names[0])
        elif need.what == "log":
            view.log = await self._client_log(ns, need.names[0])
        else:
            raise ValueError(f"unknown read {need.what}")

    async def _execute(self, key: Key, body: dict, step: Step) -> float | None:
        """Carry a step out: children, deletes, the cleanup of a failure, status, Events. A name found taken while
        writing ends the benchmark as ChildConflict (bs.failed_step), what this pass created deleted again."""
        ns, name = key
        uid = self._uid(ns, name)
        if step.delete_benchmark:
            return await self._expire(key, body)
        conflicts = await self.executor.apply(ns, name, step.put, [], uid) if step.put else []
        if not conflicts and step.create is not None and await self.executor.create_child(ns, step.create) is None:
            # the name was taken since the claim: ours (an earlier attempt) waits, another's fails
            kind, cname = step.create["kind"], step.create["metadata"]["name"]
            why = (await self.executor.claim(kind, ns, cname, uid))[1]
            conflicts = [f"{kind}/{cname} ({why})"] if why is not None else []
        if conflicts:
            step = bs.failed_step(bs.Failed("ChildConflict", bs.taken(conflicts)), time.time())
        for kind, cname in step.delete:
            await self.executor.delete_child(ns, kind, cname, uid)
        if step.failed is not None:
            await self._cleanup(ns, name)
        if step.status is not None:
            await self._write_status(key, body, step.status)
        for event in step.events:
            await self._post(body, *event)
        return step.requeue

    async def _expire(self, key: Key, body: dict) -> None:
        """Delete the finished benchmark whose TTL ran out: only the one read (one created again under its name
        since is not deleted)."""
        try:
            await self.kube.delete("SpeculativeBenchmark", key[0], key[1], uid=(body.get("metadata") or {}).get("uid"))
        except KubeError as e:
            if e.status != 409:
                raise
        return None

    async def _client_log(self, ns: str, job_name: str) -> str:
        pods = await self.kube.list("Pod", ns, f"job-name={job_name}")
        if not pods:
            return ""
        pods.sort(key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        try:
            return await self.kube.log(ns, pods[-1]["metadata"]["name"], "client", tail_lines=LOG_TAIL_LINES)
        except KubeError as e:
            return f"(log unavailable: {e})"

    def _uid(self, ns: str, bench: str) -> str | None:
        return ((self.bodies.get((ns, bench)) or {}).get("metadata") or {}).get("uid")

    async def _put(self, ns: str, bench: str, objects: list[dict]) -> list[str]:
        """Children on the executor's create-only path (``Executor.apply``); the names another object holds."""
        return await self.executor.apply(ns, bench, objects, [], self._uid(ns, bench))

    async def _cleanup(self, ns: str, bench: str) -> None:
        """Delete every variant object and client Job of this benchmark (the results ConfigMap stays): those with
        its label that it controls (a label alone never makes an object ours), each only as the object listed (its
        uid the delete's precondition)."""
        uid = self._uid(ns, bench)
        for kind in CHILD_KINDS:
            for obj in await self.kube.list(kind, ns, N.selector({BENCH_LABEL: bench})):
                if bs.cleanup_target(obj):
                    await self.executor.delete_owned(ns, {**obj, "kind": kind}, uid)

    async def _write_status(self, key: Key, body: dict, write: StatusWrite) -> None:
        """The status patch when it differs (bs.plan_status), then its Events."""
        gen = (body.get("metadata") or {}).get("generation") or 1
        change = bs.plan_status(body.get("status"), gen, write, time.time())
        if change is None:
            return
        await self.kube.patch("SpeculativeBenchmark", key[0], key[1], change.patch, sub="status")
        body["status"] = change.status
        for event in change.events:
            await self._post(body, *event)

    async def _post(self, body: dict, kind: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        log.log(logging.WARNING if kind == "Warning" else logging.INFO, "benchmark %s/%s: %s: %s",
                meta.get("namespace"), meta.get("name"), reason, message)
        if self.event is not None:
            await self.event(body, kind, reason, message)


prompts_marked = bs.prompts_marked

__all__ = ["BenchmarkController", "RESULTS_KEY"]
