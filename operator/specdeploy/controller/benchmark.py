"""SpeculativeBenchmark reconcile: one step per call, every state in the API (restart-safe).

parse -> the tenancy policy on the deployment as stored and on each method drafter (core/render/gate.py:
``Failed``, reason ``PolicyRefused``, nothing read or created) -> resolve the deployment and its configs ->
plan (core/bench/objects.plan_for, core/bench/plan.py) -> for the first
variant without a result: apply its Deployment/Service/ConfigMap (core/bench/render.py), wait
until it is Ready, write the client plan ConfigMap and create the client Job, wait for it, read
its pod's log and parse the last ``SPECDEPLOY_BENCH_RESULT`` line (core/bench/result.py), store the
result in the ``<bench>-results`` ConfigMap, delete the variant -> when every variant has a result:
greedy-output equality and the recommendation (core/bench/reco.py), ``results.json``, status
``Complete``.

What has been measured lives in the results ConfigMap (key ``variant-<name>.json`` per variant),
where the benchmark is lives in ``status``, and the variant's objects are looked up by name, so an
operator restart continues with the variant it was measuring (an already created client Job is
waited for, not created again). Every failure ends in ``phase: Failed`` with a condition whose
message says what failed and what to do; the variant's objects are deleted (nothing is left
running), the results measured so far stay in the ConfigMap.

Only what this benchmark controls is read, written or deleted, through the reconciler's executor
(controller/executor.py, with ``Unwatched`` caches: every claim reads the live object): ``_claim`` is
``Executor.claim``; a child not there is created with a POST (``_put``: ``Executor.apply``; refused when the
name is taken, never an apply after a GET), one this benchmark controls is applied; every delete
(``_delete_owned``, ``_cleanup``: ``Executor.delete_owned``) carries the object's uid as its precondition, so an
object created under the same name since it was read is never deleted. An object of a child's name that is
not controlled by this SpeculativeBenchmark (its uid in a controller ownerReference) ends the benchmark as
``Failed``, reason ``ChildConflict``, naming it, untouched (what the refused pass created is deleted again). No
decision reads ``status`` back for what the operator chose: the deadlines count from the
``creationTimestamp`` of the owned variant Deployment and client Job, the serving client's image comes
from rendering the SpeculativeDeployment (never its ``status.resolved.image``). ``status.phase`` still
says whether the benchmark finished (and its TTL counts from ``status.finishedAt``): a forged phase steers
only that benchmark, never an object or an image (docs/concepts/security.md).

Conditions: ``Running`` (True while measuring; False with the reason it waits, failed or finished:
the STATUS printer column), ``Complete``, ``Failed``. Events: each variant's engine starting, its
client starting, it being measured, a wait, and the end (Measured, or the failure's reason).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Sequence

from ..api import benchmark as B
from ..api.validation import INVALID_SPEC, problems_message, validate as validate_deployment
from ..core.bench.prompts import PromptError, parse_requests_jsonl
from ..core.bench.objects import BenchRefused, plan_for, serving_model
from ..core.bench.plan import BenchPlan, Variant, build_client_plan
from ..core.bench.reco import equal_to_baseline, recommend
from ..core.bench.render import (BENCH_LABEL, BenchOwner, VariantObjects, build_client_configmap, build_client_job,
                                build_variant_network_policy, render_variant, variant_object_name)
from ..core import names as N
from ..core.findings import errors as error_findings
from ..core.policy import TenancyPolicy, policy_needs_claims
from ..core.render import PolicyRefused, RenderError, admit, benchmark_claims, benchmark_refusals, refusal_text, with_drafter
from . import status as st
from . import ownership
from .executor import Executor
from .status import age_seconds, now_rfc3339
from .kube import Kube, KubeError
from .queue import WorkQueue
from .resolve import ResolutionError, Resolver

log = logging.getLogger("specdeploy.benchmark")

Key = tuple[str, str]
RESULTS_KEY = "results.json"
POLL_SECONDS = float(os.environ.get("SPECDEPLOY_BENCH_POLL_SECONDS", "3"))
READY_DEADLINE = float(os.environ.get("SPECDEPLOY_BENCH_READY_SECONDS", "3600"))  # a variant's engine start
CLIENT_DEADLINE = float(os.environ.get("SPECDEPLOY_BENCH_CLIENT_SECONDS", str(6 * 3600)))
LOG_TAIL_LINES = 2000
CRASH_RESTARTS = int(os.environ.get("SPECDEPLOY_BENCH_CRASH_RESTARTS", "3"))  # a variant container failing this often fails the benchmark
CONFIGMAP_BUDGET = 900 * 1024  # a ConfigMap holds ~1 MiB
CONDITIONS = (N.RUNNING, N.COMPLETE, N.FAILED)
CHILD_KINDS = ("Job", "Deployment", "Service", "ConfigMap", "NetworkPolicy")  # what _cleanup looks for


_age = age_seconds


def _created_age(obj: dict | None) -> float:
    """Seconds since an object's creationTimestamp (set by the API server, never by a tenant)."""
    return age_seconds(((obj or {}).get("metadata") or {}).get("creationTimestamp"))


class BenchFailed(Exception):
    def __init__(self, reason: str, message: str):
        self.reason, self.message = reason, message
        super().__init__(f"{reason}: {message}")


class Waiting(Exception):
    """Not measurable yet (the deployment or its configs are missing): Pending, retried."""

    def __init__(self, reason: str, message: str, delay: float = 15.0):
        self.reason, self.message, self.delay = reason, message, delay
        super().__init__(message)


class BenchmarkController:
    def __init__(self, kube: Kube, resolver: Resolver, *, deployments: dict | None = None, policy=None, event=None,
                 workers: int = 2, network_policy: Sequence[str] | None = None):
        self.kube, self.resolver = kube, resolver
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
        import asyncio

        loop = asyncio.get_running_loop()
        if self._tasks:
            return
        self.queue = WorkQueue()
        self._tasks = [loop.create_task(self._worker(self.queue)) for _ in range(self.workers)]

    async def stop(self) -> None:
        import asyncio

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
                        await self._status(key, body, {"current": f"internal error: {type(e).__name__}: {str(e)[:200]}"})
                    except Exception:  # noqa: BLE001
                        pass
            finally:
                await queue.done(key)
            if delay:
                await queue.add(key, delay)

    # ------------------------------------------------------------- reconcile
    async def reconcile(self, key: Key) -> float | None:
        body = self.bodies.get(key)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        status = body.get("status") or {}
        if status.get("phase") in ("Complete", "Failed"):
            return await self._expire(key, body)
        if self.deployments_synced is not None and not self.deployments_synced.is_set():
            # an operator (re)start: a Running benchmark whose deployment the watch has not delivered yet would
            # be failed as DeploymentNotFound; judge nothing until the cache is complete
            return POLL_SECONDS
        try:
            return await self._step(key, body)
        except Waiting as w:
            if status.get("phase") == "Running":  # what it measures went away mid-run: stop, leave nothing running
                await self._fail(key, body, w.reason, f"{w.message} (while variant {status.get('current')})")
                return None
            await self._status(key, body, {"phase": "Pending", "current": f"waiting: {w.message}"},
                               running=("False", w.reason, w.message))
            return w.delay
        except BenchFailed as f:
            await self._fail(key, body, f.reason, f.message)
            return None

    async def _expire(self, key: Key, body: dict) -> float | None:
        ttl = (body.get("spec") or {}).get("ttlSecondsAfterFinished")
        if not isinstance(ttl, int) or isinstance(ttl, bool):
            return None
        left = ttl - _age((body.get("status") or {}).get("finishedAt"))
        if left > 0:
            return left
        try:  # only the benchmark that finished: one created again under its name since is not deleted
            await self.kube.delete("SpeculativeBenchmark", key[0], key[1], uid=(body.get("metadata") or {}).get("uid"))
        except KubeError as e:
            if e.status != 409:
                raise
        return None

    async def _step(self, key: Key, body: dict) -> float | None:
        ns, name = key
        cr, problems = B.validate(body)
        if cr is None:
            raise BenchFailed(INVALID_SPEC, problems_message(problems))
        owner = BenchOwner(name, ns, (body.get("metadata") or {}).get("uid"))
        ahead = self._ahead_of(key, body, cr.spec.deployment_ref.name)
        if ahead is not None and (body.get("status") or {}).get("phase") != "Running":
            raise Waiting("AnotherBenchmarkRunning", f"SpeculativeBenchmark {ahead} measures SpeculativeDeployment "
                          f"{cr.spec.deployment_ref.name} first (one at a time: their engines would share the nodes)",
                          delay=POLL_SECONDS * 5)
        dcr, target, drafter, plan = await self._plan(ns, cr)
        results = await self._claim("ConfigMap", ns, f"{name}-results", owner)
        data = (results or {}).get("data") or {}
        done = {v.name: json.loads(data[f"variant-{v.name}.json"]) for v in plan.variants if f"variant-{v.name}.json" in data}
        todo = [v for v in plan.variants if v.name not in done]
        progress = f"{len(done)}/{len(plan.variants)}"
        if not todo:
            return await self._finish(key, body, cr, plan, done)
        v = todo[0]
        if v.name == "serving":
            return await self._measure_serving(key, body, cr, dcr, owner, plan, v, progress, target, drafter)
        drafter_doc = drafter.doc
        if v.method_speculation is not None:  # another method: its own drafter (resolved like spec.drafter), or none
            drafter_doc = None
            if v.drafter:
                from ..api.types import ModelSource

                vdcr = with_drafter(dcr, ModelSource.model_validate(v.drafter))
                try:  # the variant's spec as it will run: admitted before its token or claim is touched
                    admitted = admit(vdcr, self.policy, await self._claim_labels(
                        ns, policy_needs_claims(vdcr.spec, self.policy)), namespace=ns)
                except PolicyRefused as e:
                    raise BenchFailed("PolicyRefused", f"variant {v.name}: {refusal_text(e.findings)}") from None
                try:
                    drafter_doc = (await self.resolver.resolve(admitted, "drafter")).doc
                except ResolutionError as e:
                    raise Waiting(e.reason, f"variant {v.name}: {e.message}", e.delay or 15.0) from None
        try:
            vo = render_variant(dcr, target.doc, drafter_doc, owner, v, policy=self.policy)
        except PolicyRefused as e:  # the variant's own spec (core/render/gate.py): nothing of it is created
            raise BenchFailed("PolicyRefused", f"variant {v.name}: {refusal_text(e.findings)}") from None
        except RenderError as e:
            raise BenchFailed("VariantNotRenderable", f"variant {v.name}: " + "; ".join(
                f.one_line() for f in error_findings(e.findings)))
        except ValueError as e:
            raise BenchFailed("VariantNotRenderable", f"variant {v.name}: {e}")
        objects = self._variant_objects(owner, vo)
        live = {obj["kind"]: await self._claim(obj["kind"], ns, obj["metadata"]["name"], owner) for obj in objects}
        dep = live.get("Deployment")
        if dep is None:
            await self._put(ns, name, objects, owner)
            current = f"{v.name}: starting the engine"
            await self._status(key, body, {"phase": "Running", "progress": progress, "variants": [x.name for x in plan.variants],
                                           "current": current, "startedAt": now_rfc3339()},
                               running=("True", "Measuring", f"{current} ({progress} measured)"),
                               event=("Normal", "VariantStarting", f"variant {v.name} ({progress} measured): engine "
                                      f"Deployment {vo.name} starting"))
            return POLL_SECONDS
        ready = int(((dep.get("status") or {}).get("readyReplicas")) or 0) >= 1
        stage_age = _created_age(dep)  # the variant's own Deployment: a deadline nobody can move
        if not ready:
            crash = await self._crashing(ns, vo.name)
            if crash:
                await self._delete_variant(ns, name, v.name)
                raise BenchFailed("VariantCrashing", f"variant {v.name}: {crash}")
            if stage_age > READY_DEADLINE:
                await self._delete_variant(ns, name, v.name)
                raise BenchFailed("VariantNotReady", f"variant {v.name}: Deployment {vo.name} not Ready after "
                                  f"{READY_DEADLINE:.0f}s; see kubectl describe deployment {vo.name} and its pods' logs")
            return POLL_SECONDS
        return await self._client(key, body, cr, owner, plan, v, progress, image=vo.image, base_url=vo.url(ns),
                                  model=vo.model, engine=vo.engine_config.engine,
                                  engine_version=vo.engine_config.engine_version, api_key=dcr.spec.engine.api_key)

    def _ahead_of(self, key: Key, body: dict, deployment: str) -> str | None:
        """The name of an unfinished benchmark of the same deployment that goes first (Running, else the
        oldest by creation time and name), or None: benchmarks of one deployment run one at a time."""
        mine = ((body.get("metadata") or {}).get("creationTimestamp") or "", key[1])
        for (ns, name), other in self.bodies.items():
            if ns != key[0] or name == key[1] or ((other.get("spec") or {}).get("deploymentRef") or {}).get("name") != deployment:
                continue
            phase = (other.get("status") or {}).get("phase")
            if phase in ("Complete", "Failed") or (other.get("metadata") or {}).get("deletionTimestamp"):
                continue
            theirs = ((other.get("metadata") or {}).get("creationTimestamp") or "", name)
            if phase == "Running" or theirs < mine:
                return name
        return None

    async def _crashing(self, ns: str, deployment: str) -> str | None:
        """A container of the variant's pod that keeps failing (CRASH_RESTARTS restarts), in words; else None."""
        pods = await self.kube.list("Pod", ns, N.selector({N.LABEL_INSTANCE: deployment}))
        for p in pods:
            st = p.get("status") or {}
            for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                last = ((cs.get("lastState") or {}).get("terminated") or {})
                if (cs.get("restartCount") or 0) >= CRASH_RESTARTS and last:
                    msg = " ".join(str(last.get("message") or "").split())[-600:]
                    return (f"container {cs.get('name')} of pod {p['metadata']['name']} restarted {cs['restartCount']} "
                            f"times (last exit code {last.get('exitCode')}, {last.get('reason') or 'no reason'})"
                            + (f": {msg}" if msg else "") + f"; see kubectl logs {p['metadata']['name']} -c {cs.get('name')} "
                            "--previous")
        return None

    async def _plan(self, ns: str, cr):
        ref = cr.spec.deployment_ref.name
        dep_body = self.deployments.get((ns, ref))
        if dep_body is None:
            raise Waiting("DeploymentNotFound", f"SpeculativeDeployment {ref} does not exist in namespace {ns}; "
                          "create it or fix spec.deploymentRef.name")
        dcr, problems = validate_deployment(dep_body)
        if dcr is None:
            raise BenchFailed("DeploymentInvalid", f"SpeculativeDeployment {ref}: {problems_message(problems)}")
        dcr.metadata.namespace = ns
        # the tenancy policy first, as the reconciler applies it: the deployment as stored (a benchmark of a refused
        # deployment would run what was refused) and every spec.matrix.methods[].drafter as its variant carries it;
        # nothing is read (a token Secret, a claim) or created for a refused benchmark
        claims = await self._claim_labels(ns, benchmark_claims(cr.spec, dcr, self.policy))
        refused = benchmark_refusals(cr.spec, dcr, self.policy, claims, namespace=ns)
        if refused:
            raise BenchFailed("PolicyRefused", refusal_text(refused))
        admitted = admit(dcr, self.policy, claims, namespace=ns)
        try:
            target = await self.resolver.resolve(admitted, "target")
            drafter = await self.resolver.resolve(admitted, "drafter")
        except ResolutionError as e:
            raise Waiting(e.reason, f"SpeculativeDeployment {ref}: {e.message}", e.delay or 15.0) from None
        try:  # the pure planning (core/bench/objects.py; `specdeploy render` of a benchmark plans the same)
            plan = plan_for(cr.spec, dcr, target.doc, drafter.doc)
        except BenchRefused as e:
            raise BenchFailed(e.reason, e.message) from None
        return dcr, target, drafter, plan

    async def _measure_serving(self, key, body, cr, dcr, owner, plan, v, progress, target, drafter) -> float | None:
        ns = key[0]
        ref = dcr.metadata.name
        dep = await self.kube.get("Deployment", ns, ref)
        if dep is not None and ownership.conflict(dep, dcr.metadata.uid) is not None:
            dep = None  # not the SpeculativeDeployment's own workload (its reconcile reports the ChildConflict)
        image = self._serving_image(dcr, target, drafter)
        if dep is None or not int((dep.get("status") or {}).get("readyReplicas") or 0) or not image:
            raise BenchFailed("ServingNotReady", f"spec.useServingDeployment: the Deployment of SpeculativeDeployment "
                              f"{ref} is not Ready; measure it when it serves, or set useServingDeployment: false")
        from ..core import engines as eng

        port = eng.get_engine(dcr.spec.engine.name).port
        model = serving_model(dcr)
        return await self._client(key, body, cr, owner, plan, v, progress, image=image,
                                  base_url=f"http://{ref}.{ns}.svc:{port}", model=model, engine=dcr.spec.engine.name,
                                  engine_version=dcr.spec.engine.version, api_key=dcr.spec.engine.api_key)

    async def _claim_labels(self, ns: str, claims: list[str]) -> dict[str, dict | None]:
        """The labels of the claims the tenancy policy's label rule needs (None: the claim does not exist)."""
        out: dict[str, dict | None] = {}
        for claim in claims:
            pvc = await self.kube.get("PersistentVolumeClaim", ns, claim)
            out[claim] = ((pvc.get("metadata") or {}).get("labels") or {}) if pvc else None
        return out

    def _serving_image(self, dcr, target, drafter) -> str | None:
        """The image the serving deployment runs, from rendering its spec as the reconciler does (never read
        back from its status: whoever may write ``/status`` would choose the image the client Job runs)."""
        from ..core.render import render

        try:
            return render(dcr, target.doc, drafter.doc, policy=self.policy).image or None
        except PolicyRefused as e:
            raise BenchFailed("PolicyRefused", f"SpeculativeDeployment {dcr.metadata.name}: "
                              + refusal_text(e.findings)) from None
        except RenderError as e:
            raise BenchFailed("DeploymentNotServable", f"SpeculativeDeployment {dcr.metadata.name} does not render: "
                              + "; ".join(f.one_line() for f in error_findings(e.findings))) from None

    def _variant_objects(self, owner: BenchOwner, vo: VariantObjects) -> list[dict]:
        """The variant's objects, with its NetworkPolicy when the engine NetworkPolicy is on."""
        if self.network_policy is None:
            return list(vo.objects)
        return [*vo.objects, build_variant_network_policy(owner, vo, self.network_policy)]

    async def _claim(self, kind: str, ns: str, name: str, owner: BenchOwner) -> dict | None:
        """The live object of a child's name when this benchmark controls it (None: absent). Any other object
        of that name (unowned, another's, owned without the controller flag) ends the benchmark untouched."""
        obj, why = await self.executor.claim(kind, ns, name, owner.uid)
        if why is not None:
            raise BenchFailed("ChildConflict", _taken([f"{kind}/{name} ({why})"]))
        return obj

    async def _put(self, ns: str, bench: str, objects: list[dict], owner: BenchOwner) -> None:
        """Write children on the executor's create-only path (``Executor.apply``): one not there is created with a
        POST (the server refuses a name taken meanwhile: claimed, and what this call created is deleted again),
        one this benchmark controls is applied. Any name another object holds ends the benchmark, untouched."""
        conflicts = await self.executor.apply(ns, bench, objects, [], owner.uid)
        if conflicts:
            raise BenchFailed("ChildConflict", _taken(conflicts))

    async def _delete_owned(self, kind: str, ns: str, name: str, uid: str | None) -> None:
        """Delete a child only when this benchmark (``uid``) controls it, and only the object read (its uid the
        delete's precondition): ``Executor.delete_child``."""
        await self.executor.delete_child(ns, kind, name, uid)

    async def _client(self, key, body, cr, owner: BenchOwner, plan: BenchPlan, v: Variant, progress: str, *, image: str,
                      base_url: str, model: str, engine: str, engine_version: str, api_key=None) -> float | None:
        ns, name = key
        job_name = f"{name}-{v.name}-client"
        job = await self._claim("Job", ns, job_name, owner)
        if job is None:
            prompts_jsonl = None
            ref = cr.spec.prompts.config_map_ref
            if ref is not None:
                cm = await self.kube.get("ConfigMap", ns, ref.name)
                if not prompts_marked(cm):  # absent or not marked: the same answer (no oracle of other ConfigMaps)
                    await self._delete_variant(ns, name, v.name)
                    raise BenchFailed("PromptsNotFound", f"spec.prompts.configMapRef: no ConfigMap {ref.name} labelled "
                                      f"{N.PROMPTS_LABEL}={N.PROMPTS_LABEL_VALUE} in namespace {ns}; only ConfigMaps "
                                      "marked as prompt sets are read: create it, and label it (kubectl label "
                                      f"configmap {ref.name} {N.PROMPTS_LABEL}={N.PROMPTS_LABEL_VALUE} -n {ns}), or use "
                                      "spec.prompts.bundled or generated")
                prompts_jsonl = ((cm or {}).get("data") or {}).get(ref.key)
                if prompts_jsonl is None:
                    await self._delete_variant(ns, name, v.name)
                    raise BenchFailed("PromptsNotFound", f"spec.prompts.configMapRef: ConfigMap {ref.name} has no key "
                                      f"{ref.key} in namespace {ns}; create it (JSON lines {{\"prompt\": \"...\"}})")
                try:  # a broken request set fails here with the line and the field, not in the client's log
                    if ref.format == "requests":
                        parse_requests_jsonl(prompts_jsonl, source=f"ConfigMap {ref.name} key {ref.key}")
                except PromptError as e:
                    await self._delete_variant(ns, name, v.name)
                    raise BenchFailed("PromptsInvalid", f"spec.prompts.configMapRef: {e}") from None
            doc = build_client_plan(benchmark=name, variant=v.name, engine=engine, engine_version=engine_version,
                                    base_url=base_url, metrics_url=f"{base_url}/metrics", model=model, tokenizer=model,
                                    prompts=cr.spec.prompts.plan(), points=plan.points_of(v.name))
            cm = build_client_configmap(owner, v.name, doc, prompts_jsonl)
            await self._claim("ConfigMap", ns, cm["metadata"]["name"], owner)
            await self._put(ns, name, [cm], owner)
            made = await self.executor.create_child(ns, build_client_job(owner, v.name, image, api_key=api_key,
                                                                         service_account=None))
            if made is None:  # the name was taken since the claim: ours (an earlier attempt) waits, another's fails
                await self._claim("Job", ns, job_name, owner)
            current = f"{v.name}: client running"
            await self._status(key, body, {"phase": "Running", "progress": progress,
                                           "variants": [x.name for x in plan.variants],
                                           "current": current, "startedAt": now_rfc3339()},
                               running=("True", "Measuring", f"{current} ({progress} measured)"),
                               event=("Normal", "ClientStarted", f"variant {v.name}: client Job {job_name} measuring "
                                      f"{len(plan.points_of(v.name))} point(s)"))
            return POLL_SECONDS
        js = job.get("status") or {}
        if js.get("succeeded"):
            text = await self._client_log(ns, job_name)
            from ..core.bench.result import BenchResultError, parse_result_line

            try:
                result = parse_result_line(text)
            except BenchResultError as e:
                await self._delete_variant(ns, name, v.name)
                raise BenchFailed("ClientResultInvalid", f"variant {v.name}: {e}") from None
            if result.variant != v.name:
                await self._delete_variant(ns, name, v.name)
                raise BenchFailed("ClientResultInvalid", f"the client Job {job_name} reported variant {result.variant}, "
                                  f"not {v.name}")
            await self._record(owner, plan, v, result.to_doc())
            await self._delete_variant(ns, name, v.name)
            done = int(progress.split("/")[0]) + 1
            await self._post(body, "Normal", "VariantMeasured",
                             f"variant {v.name} measured ({done}/{len(plan.variants)})")
            return 0.05  # the next variant
        failed = js.get("failed") or any(c.get("type") == N.FAILED and c.get("status") == "True"
                                         for c in js.get("conditions") or [])
        if failed:
            text = await self._client_log(ns, job_name)
            tail = " | ".join(line.strip() for line in text.strip().splitlines()[-5:])[-800:]
            await self._delete_variant(ns, name, v.name)
            raise BenchFailed("ClientFailed", f"variant {v.name}: the client Job {job_name} failed; its log ends: "
                              f"{tail or '(empty)'}")
        if _created_age(job) > CLIENT_DEADLINE:  # the Job's own creation: a deadline nobody can move
            await self._delete_variant(ns, name, v.name)
            raise BenchFailed("ClientTimedOut", f"variant {v.name}: the client Job {job_name} ran past {CLIENT_DEADLINE:.0f}s")
        return POLL_SECONDS

    async def _client_log(self, ns: str, job_name: str) -> str:
        pods = await self.kube.list("Pod", ns, f"job-name={job_name}")
        if not pods:
            return ""
        pods.sort(key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
        try:
            return await self.kube.log(ns, pods[-1]["metadata"]["name"], "client", tail_lines=LOG_TAIL_LINES)
        except KubeError as e:
            return f"(log unavailable: {e})"

    async def _record(self, owner: BenchOwner, plan: BenchPlan, v: Variant, doc: dict) -> None:
        """Store one variant's result (its points with the plan's shape) in the results ConfigMap."""
        planned = {p.id: p for p in plan.points_of(v.name)}
        points = []
        for p in doc.get("points") or []:
            want = planned.get(p.get("id"))
            if want is None:
                continue  # a point the plan did not ask for
            points.append({**p, "variant": v.name, "numPrompts": p.get("numPrompts") or want.num_prompts,
                           "maxOutputTokens": p.get("maxOutputTokens") or want.max_output_tokens})
        doc = {**doc, "points": points, "settings": v.to_doc()}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        cm = await self._claim("ConfigMap", owner.namespace, f"{owner.name}-results", owner)
        data = dict(((cm or {}).get("data")) or {})
        data[f"variant-{v.name}.json"] = text
        await self._put(owner.namespace, owner.name, [self._results_cm(owner, data)], owner)

    def _results_cm(self, owner: BenchOwner, data: dict[str, str]) -> dict:
        meta: dict[str, Any] = {"name": f"{owner.name}-results", "namespace": owner.namespace,
                                "labels": {N.LABEL_MANAGED_BY: N.MANAGED_BY, N.LABEL_PART_OF: N.MANAGED_BY,
                                           N.LABEL_COMPONENT: N.COMPONENT_BENCH_RESULTS, BENCH_LABEL: owner.name}}
        if owner.reference():
            meta["ownerReferences"] = owner.reference()
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    def _uid(self, ns: str, bench: str) -> str | None:
        return ((self.bodies.get((ns, bench)) or {}).get("metadata") or {}).get("uid")

    async def _delete_variant(self, ns: str, bench: str, variant: str) -> None:
        name, uid = variant_object_name(bench, variant), self._uid(ns, bench)
        await self._delete_owned("Job", ns, f"{name}-client", uid)
        await self._delete_owned("ConfigMap", ns, f"{name}-plan", uid)
        if variant != "serving":
            await self._delete_owned("Deployment", ns, name, uid)
            await self._delete_owned("Service", ns, name, uid)
            await self._delete_owned("ConfigMap", ns, f"{name}-engine", uid)
            await self._delete_owned("NetworkPolicy", ns, name, uid)

    async def _finish(self, key: Key, body: dict, cr, plan: BenchPlan, done: dict[str, dict]) -> None:
        ns, name = key
        owner = BenchOwner(name, ns, (body.get("metadata") or {}).get("uid"))
        order = [v.name for v in plan.variants]
        points = [p for v in order for p in done[v].get("points") or []]
        eq = equal_to_baseline(points)
        for p in points:
            p["equalToBaseline"] = eq.get(p["id"])
        reco = recommend(points, order, {v.name: v.method for v in plan.variants if v.method})
        full = {"benchmark": name, "deployment": cr.spec.deployment_ref.name,
                "variantSettings": [done[v].get("settings") or {"name": v} for v in order],
                "clients": {v: {"client": done[v].get("client"), "clientVersion": done[v].get("clientVersion")} for v in order},
                "points": points, "recommendation": reco}
        text = json.dumps(full, indent=1, sort_keys=True)
        if len(text.encode()) > CONFIGMAP_BUDGET:  # the digests are what grows: equality is already computed
            for p in full["points"]:
                p.pop("outputDigests", None)
            full["digestsOmitted"] = True
            text = json.dumps(full, separators=(",", ":"), sort_keys=True)
        cm = await self._claim("ConfigMap", ns, f"{name}-results", owner)
        data = {k: v for k, v in (((cm or {}).get("data")) or {}).items()}
        data[RESULTS_KEY] = text
        if len(json.dumps(data).encode()) > CONFIGMAP_BUDGET:
            data = {RESULTS_KEY: text}
        await self._put(ns, name, [self._results_cm(owner, data)], owner)
        compact = [{k: v for k, v in {
            "variant": p["variant"], "context": p["context"], "concurrency": p["concurrency"],
            "outputTokensPerSecond": _r(p.get("outputTokensPerSecond")),
            "tau": _r((p.get("acceptance") or {}).get("length")),
            "ttftP50Ms": _r((p.get("ttftMs") or {}).get("p50")), "itlP50Ms": _r((p.get("itlMs") or {}).get("p50")),
            "tpotP50Ms": _r((p.get("tpotMs") or {}).get("p50")),
            "ttftP99Ms": _r((p.get("ttftMs") or {}).get("p99")),
            "prefixCacheHitRate": _r((p.get("costs") or {}).get("prefixCacheHitRate")),
            "kvCapacityTokens": (p.get("costs") or {}).get("kvCapacityTokens"),
            "kvUsagePeak": _r((p.get("costs") or {}).get("kvUsagePeak")),
            "failed": p.get("failed"), "equalToBaseline": p.get("equalToBaseline")}.items() if v is not None}
            for p in points]
        message = reco["summary"]
        await self._status(key, body, {
            "phase": "Complete", "progress": f"{len(order)}/{len(order)}", "variants": order, "current": None,
            "points": compact, "recommendation": reco, "resultsConfigMap": f"{name}-results",
            "crossoverConcurrency": reco["guard"]["maxConcurrency"], "finishedAt": now_rfc3339()},
            condition=(N.COMPLETE, "True", "Measured", message), running=("False", "Measured", message))
        return None

    async def _fail(self, key: Key, body: dict, reason: str, message: str) -> None:
        await self._cleanup(*key)
        await self._status(key, body, {"phase": "Failed", "current": None, "finishedAt": now_rfc3339()},
                           condition=(N.FAILED, "True", reason, message), running=("False", reason, message))

    async def _cleanup(self, ns: str, bench: str) -> None:
        """Delete every variant object and client Job of this benchmark (the results ConfigMap stays): those with
        its label that it controls (a label alone never makes an object ours), each only as the object listed (its
        uid the delete's precondition)."""
        uid = self._uid(ns, bench)
        for kind in CHILD_KINDS:
            for obj in await self.kube.list(kind, ns, N.selector({BENCH_LABEL: bench})):
                labels = (obj.get("metadata") or {}).get("labels") or {}
                if labels.get(N.LABEL_COMPONENT) != N.COMPONENT_BENCH_RESULTS:
                    await self.executor.delete_owned(ns, {**obj, "kind": kind}, uid)

    async def _status(self, key: Key, body: dict, fields: dict[str, Any],
                      condition: tuple[str, str, str, str] | None = None,
                      running: tuple[str, str, str] | None = None,
                      event: tuple[str, str, str] | None = None) -> None:
        """Patch status when it differs. ``condition`` (Complete/Failed) posts an Event when it transitions;
        ``running`` is the Running condition (its transition to False posts one only for a wait, as the
        end has its own); ``event`` is posted with the write (a stage started)."""
        ns, name = key
        current = body.get("status") or {}
        gen = (body.get("metadata") or {}).get("generation") or 1
        desired = {k: (_pruned(v) if v is not None else None) for k, v in {**fields, "observedGeneration": gen}.items()}
        new = []  # the outcome (Complete/Failed) first: kubectl describe lists it above Running
        if condition is not None:
            ctype, cstatus, reason, message = condition
            new.append({"type": ctype, "status": cstatus, "reason": reason, "message": message[:32768]})
        if running is not None:
            new.append({"type": N.RUNNING, "status": running[0], "reason": running[1], "message": running[2][:32768]})
        transitioned = st.transitions(current.get("conditions"), new) if new else []
        if new:
            desired["conditions"] = st.merge_conditions(list(current.get("conditions") or []), new, gen, now_rfc3339())
        if all(current.get(k) == v for k, v in desired.items() if k != "startedAt"):
            return  # startedAt only ever changes with the stage (current)
        await self.kube.patch("SpeculativeBenchmark", ns, name, {"status": desired}, sub="status")
        body["status"] = {k: v for k, v in {**current, **desired}.items() if v is not None}
        changed = {c["type"] for c in transitioned}
        if condition is not None and condition[0] in changed:
            ctype, cstatus, reason, message = condition
            await self._post(body, "Warning" if ctype == N.FAILED else "Normal", reason, message)
        elif running is not None and N.RUNNING in changed and running[0] == "False":
            await self._post(body, "Normal", running[1], running[2])
        if event is not None:
            await self._post(body, *event)

    async def _post(self, body: dict, kind: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        log.log(logging.WARNING if kind == "Warning" else logging.INFO, "benchmark %s/%s: %s: %s",
                meta.get("namespace"), meta.get("name"), reason, message)
        if self.event is not None:
            await self.event(body, kind, reason, message)


def prompts_marked(configmap: dict | None) -> bool:
    """Whether a ConfigMap may be read as a benchmark's prompt set (spec.prompts.configMapRef): one its namespace's
    admins labelled ``specdeploy.io/prompts: "true"``. Any other ConfigMap of the namespace may hold what the
    benchmark's author may not read; the operator would copy it into the plan ConfigMap and the client's requests."""
    labels = ((configmap or {}).get("metadata") or {}).get("labels") or {}
    return configmap is not None and labels.get(N.PROMPTS_LABEL) == N.PROMPTS_LABEL_VALUE


def _taken(conflicts: list[str]) -> str:
    """The ChildConflict message: the names (``Kind/name (why)``) held by objects this benchmark does not control."""
    return (f"{', '.join(conflicts)}: the name is taken by an object this benchmark does not control; the benchmark "
            "neither reads, writes nor deletes it: rename or delete that object, or give the benchmark another name")


def _pruned(x: Any) -> Any:
    """Without null fields: a merge patch keeps nulls inside lists, which the schema refuses (top-level
    nulls, which clear a field, are kept by the caller)."""
    if isinstance(x, dict):
        return {k: _pruned(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_pruned(v) for v in x]
    return x


def _r(x: Any, digits: int = 3) -> Any:
    return round(float(x), digits) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


__all__ = ["BenchmarkController", "RESULTS_KEY"]
