"""The acceptance monitor: scrape ready engine pods, judge speculation, feed the status.

A loop of its own in the operator (started with the Controller; every
``SPECDEPLOY_ACCEPTANCE_INTERVAL`` seconds, default 30; 0 turns it off):

1. **Pods** come from a watch-fed cache (``handlers.on_engine_pod``; kopf watches pods with
   the server-side label selector ``ENGINE_POD_SELECTOR``): a pod is a scrape target while
   it is Ready, has a ``podIP`` and a container port named ``http`` (the engine's API port,
   which serves ``/metrics`` for both engines; multi-node workers have none and are never
   scraped). No API reads per tick.
   **Ownership, not labels** (issue 37): anyone who may create a pod can give it the engine labels, so a
   labelled pod is scraped, probed or counted in a canary's health only when it is owned, by uid, by one of
   the SpeculativeDeployment's own workloads: its controller is a ReplicaSet whose controller is the
   deployment's Deployment (``NAME``; the canary track: ``NAME-canary``), or a StatefulSet whose controller is
   its LeaderWorkerSet (multi-node leaders), and that workload's controller is the SpeculativeDeployment (its
   uid). The workloads come from the controller's watch-fed children cache; the ReplicaSets and StatefulSets
   from watches of their own (``handlers.on_engine_owner``: ReplicaSets with the engine labels their
   Deployment's template gives them, StatefulSets with the LeaderWorkerSet controller's ``LWS_NAME_LABEL``).
   A name match is never enough (a tenant may create a ReplicaSet named like ours): every link is a uid.
2. **Scrapes** ``http://<podIP>:<http port><metrics path>`` of every target, ``SCRAPE_CONCURRENCY`` at a
   time, reading at most ``scrape.MAX_METRICS_BYTES`` of each body (more is a failed scrape, read no further). The
   engine's series are picked out of the body off the event loop (``engine_series`` in a small thread pool:
   the lines named ``vllm:*``, ``sglang:*`` and ``process_start_time_seconds``, at most
   ``MAX_ENGINE_SERIES``); only those are kept and parsed.
   vLLM counters need two scrapes: the previous scrape of each pod (by uid) is kept, and a
   pod's first scrape only primes it. SGLang gauges count from the first scrape.
3. **Combines** the pods of each SpeculativeDeployment (``acceptance.combine``) and judges
   them with its ``spec.monitoring`` thresholds (``status.speculation_condition``): the floor
   ``minAcceptanceLength`` and the learned baseline (``core/rollout/baseline.py``: per speculation
   revision, stored in ``status.acceptance.baseline``, carried over to a new revision until
   that one settles within ``regressionFraction`` of it; the annotation
   ``specdeploy.io/reset-acceptance-baseline`` asks for a new one). Windows are averaged into
   a baseline only while every reporting pod carries the config hash in ``status.resolved``.
4. **Exports** ``specdeploy_acceptance_length``, ``_rate``, ``_per_position``,
   ``_baseline_length`` and ``_regression_fraction`` (labels namespace, deployment, engine,
   drafter; position) on every tick.
5. **Guard** (``spec.speculation.guard``): the engine's live running-requests gauge of each pod
   (``acceptance.running_requests``, the most loaded pod counts: the batch is per engine) against the
   guard's limit (``maxConcurrency``, or the Complete SpeculativeBenchmark's crossover from the
   Controller's watch-fed cache): ``SpeculationProfitable`` False ``PastCrossover`` at or above it,
   True ``BelowCrossover`` under it (the peak of the last ``guard.LOAD_HOLD_SCRAPES`` samples: no flapping); False ``TauBelowBenchmark`` when the window's tau is below the lowest tau at
   which the benchmark measured speculation paying (``status.profitable_condition``; kept while its verdict holds).
6. **Reports** status.acceptance, SpeculationHealthy and SpeculationProfitable as an ``AcceptanceReport``
   (controller/reports.py) in the shared caches (``Caches.acceptances``, written here only) and asks for a
   reconcile of the key (``notify``), only when they changed: the reconciler's one status path
   (``Controller._write_status``, ``plan.plan_status``) writes them together with its own conditions, and posts
   the Events of SpeculationHealthy transitions. The reconciler never writes the report: a promotion's baseline
   is asked for through ``promoted`` (a command), a deleted CR through ``forget``. The monitor knows the caches
   and the callback, never the Controller (which holds the monitor).

7. **Canary rollouts** (``spec.rollout`` Canary): every engine pod is kept (``pods``, ready or not); the canary
   track's scrapes feed the canary analysis (controller/canary.py, its own report ``Caches.canaries``).

Each tick reads every SpeculativeDeployment once through the API models (``read_deployment``:
the spec, status.resolved, status.acceptance and the conditions it owns).

Write policy (no writes while nothing changes): figures are rounded to 2 decimals and
``sampledAt`` moves only when a figure moves (``status.acceptance_status``); no traffic keeps
the previous verdict and figures; a deployment without ready engine pods that was never
judged gets nothing (no condition, no status.acceptance); one that was judged before becomes
Unknown ``NoReadyPods`` once, with status.acceptance cleared. When no pod answers a scrape,
nothing changes until that lasts ``SCRAPE_FAILED_TICKS`` ticks: then Unknown ``ScrapeFailed``.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from pydantic import ValidationError

from ..api.types import Acceptance, Condition, Resolved, SpeculativeDeploymentSpec
from ..core import acceptance as acc
from ..core.rollout import baseline as bl
from ..core.rollout import guard as gd
from ..core.engines import ENGINES
from ..core import names as N
from ..core.names import CONFIG_HASH_ANNOTATION, ENGINE_LABEL, TRACK_CANARY
from ..core.policy import TenancyPolicy
from . import metrics
from . import probe as pr
from . import status as st
from .canary import CanaryAnalysis, canary_name, of_revision
from .pods import controller_of, http_port, is_ready, pod_revision, pod_track, slim
from .reports import AcceptanceReport, Admission, CanaryReport, Reports
from .scrape import SCRAPE_CONCURRENCY, ScrapeRejected, engine_series, new_parse_pool, read_bounded
from .status import now_rfc3339

log = logging.getLogger("specdeploy.monitor")

Key = tuple[str, str]  # (namespace, SpeculativeDeployment name)
INSTANCE = N.LABEL_INSTANCE
ENGINE_POD_LABELS = {N.LABEL_MANAGED_BY: N.MANAGED_BY, N.LABEL_COMPONENT: N.COMPONENT_ENGINE}
ENGINE_POD_SELECTOR = N.selector(ENGINE_POD_LABELS)
DEFAULT_INTERVAL = acc.DEFAULT_MONITOR_INTERVAL
INTERVAL_ENV = "SPECDEPLOY_ACCEPTANCE_INTERVAL"
SCRAPE_FAILED_TICKS = 3  # ticks in a row without any answer before SpeculationHealthy is Unknown ScrapeFailed
# A pod's controller kind -> the kind of that controller's controller, which must be one of the deployment's
# workloads: Deployment -> ReplicaSet -> Pod, LeaderWorkerSet -> (leader) StatefulSet -> Pod.
POD_OWNERS = {"ReplicaSet": "Deployment", "StatefulSet": "LeaderWorkerSet"}
OWNER_SELECTORS = {"replicasets": ENGINE_POD_SELECTOR, "statefulsets": N.LWS_NAME_LABEL}  # server-side, per watch

# (url, timeout seconds) -> body; raises on failure
Fetch = Callable[[str, float], Awaitable["bytes | bytearray | str"]]
Notify = Callable[[Key], Awaitable[None]]  # a key's part of the status changed: reconcile it


class Deployments(Protocol):
    """What the monitor reads of the controller's caches, and the reports it writes (cache.Caches)."""

    bodies: Mapping[Key, dict]  # SpeculativeDeployments, watch-fed
    children: Mapping[tuple[str, str, str], dict]  # their workloads (Deployment, LeaderWorkerSet), watch-fed
    admitted: Mapping[Key, Admission]  # the reconciler's report: generations it admitted (policy included)
    benchmarks: Mapping[tuple[str, str], dict]  # SpeculativeBenchmarks that a guard's fromBenchmark may name
    acceptances: Reports[AcceptanceReport]  # the monitor's report: its part of each status (written here only)
    canaries: Reports[CanaryReport]  # the canary analysis' report (written by canary.py only)


@dataclass(frozen=True)
class Target:
    """One ready engine pod to scrape."""

    namespace: str
    name: str
    uid: str
    instance: str  # the SpeculativeDeployment's name
    engine: str | None  # the pod's specdeploy.io/engine label
    url: str
    config_hash: str | None = None  # the pod's specdeploy.io/config-hash annotation (core/render)
    track: str = "stable"  # "canary" on a canary pod (TRACK_LABEL), else "stable"
    revision: str | None = None  # the pod's rollout revision (REVISION_ANNOTATION; Canary strategy only)
    owner: tuple[str, str] | None = None  # (kind, uid) of the pod's controller (ownerReferences)


def pod_target(pod: dict) -> Target | None:
    """The pod's scrape target, or None while it is not a ready engine pod with an IP and an http port."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    instance = labels.get(INSTANCE)
    ip = (pod.get("status") or {}).get("podIP")
    port = http_port(pod)
    if not instance or not ip or port is None or not is_ready(pod):
        return None
    engine = labels.get(ENGINE_LABEL)
    path = ENGINES[engine].metrics_path if engine in ENGINES else "/metrics"
    host = f"[{ip}]" if ":" in ip else ip
    config_hash = (meta.get("annotations") or {}).get(CONFIG_HASH_ANNOTATION)
    return Target(namespace=meta.get("namespace") or "default", name=meta.get("name") or "", uid=meta.get("uid") or "",
                  instance=instance, engine=engine, url=f"http://{host}:{port}{path}",
                  config_hash=config_hash if isinstance(config_hash, str) else None,
                  track=pod_track(pod), revision=pod_revision(pod), owner=controller_of(meta))


def workloads_of(key: Key, body: Mapping[str, Any], children: Mapping[tuple[str, str, str], dict]) \
        -> dict[str, tuple[str, str]]:
    """The SpeculativeDeployment's own workloads in the children cache, by uid: (kind, track). Each is named as
    the render names it (``NAME``, the canary's ``NAME-canary``) and its controller is this SpeculativeDeployment,
    by uid (an object of that name that another controls, or one of a deleted and re-created CR, is not)."""
    ns, name = key
    sd_uid = (body.get("metadata") or {}).get("uid")
    out: dict[str, tuple[str, str]] = {}
    if not sd_uid:
        return out
    for kind, cname, track in (("Deployment", name, "stable"), ("LeaderWorkerSet", name, "stable"),
                               ("Deployment", canary_name(name), TRACK_CANARY)):
        w = children.get((kind, ns, cname))
        meta = (w or {}).get("metadata") or {}
        if controller_of(meta) == (N.KIND, sd_uid) and isinstance(meta.get("uid"), str) and meta["uid"]:
            out[meta["uid"]] = (kind, track)
    return out


def _fmt_seconds(s: float) -> str:
    return f"{s:g}s" if s < 120 or s % 60 else f"{s / 60:g}m"


@dataclass(frozen=True)
class Deployment:
    """What the monitor reads of one SpeculativeDeployment, parsed once per tick with the API models."""

    spec: SpeculativeDeploymentSpec
    resolved: Resolved | None  # status.resolved
    acceptance: dict[str, Any] | None  # status.acceptance as stored (parsed with the Acceptance model)
    conditions: dict[str, Condition]  # status.conditions by type
    annotations: Mapping[str, Any]
    revision: str  # the speculation revision (core/rollout/baseline.py: a digest of the stored spec and status.resolved)
    params: bl.Params

    @property
    def engine(self) -> str | None:
        return self.spec.engine.name if self.spec.engine.name in acc.ENGINES else None

    @property
    def config_hash(self) -> str | None:
        return self.resolved.config_hash if self.resolved is not None else None

    def stored(self) -> AcceptanceReport:
        """What the stored status says the monitor last reported (after an operator restart)."""
        def cond(type_: str) -> dict | None:
            c = self.conditions.get(type_)
            return st.strip_condition(c.model_dump(by_alias=True, exclude_unset=True)) if c is not None else None

        return AcceptanceReport(acceptance=self.acceptance, condition=cond(st.SPECULATION_HEALTHY),
                                profitable=cond(st.SPECULATION_PROFITABLE))


def _parse(model, doc: Any):
    if not isinstance(doc, dict):
        return None
    try:
        return model.model_validate(doc)
    except ValidationError:
        return None


def read_deployment(body: dict) -> Deployment | None:
    """The typed view of a SpeculativeDeployment body; None when its spec does not parse (then nothing of it is
    judged: an invalid spec is not applied either). Status fields that do not parse read as absent (a
    status.acceptance that does not parse is kept as stored: the monitor's next write replaces it)."""
    spec = _parse(SpeculativeDeploymentSpec, body.get("spec"))
    if spec is None:
        return None
    status = body.get("status") if isinstance(body.get("status"), dict) else {}
    resolved = status.get("resolved") if isinstance(status.get("resolved"), dict) else {}
    raw_acc = status.get("acceptance") if isinstance(status.get("acceptance"), dict) else None
    typed_acc = _parse(Acceptance, raw_acc)
    conditions: dict[str, Condition] = {}
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") in (st.SPECULATION_HEALTHY, st.SPECULATION_PROFITABLE):
            parsed = _parse(Condition, {"lastTransitionTime": "", **c})  # the time is not read here
            if parsed is not None:
                conditions.setdefault(parsed.type, parsed)
    return Deployment(
        spec=spec, resolved=_parse(Resolved, resolved), conditions=conditions,
        acceptance=typed_acc.model_dump(by_alias=True, exclude_none=True, exclude_unset=True)
        if typed_acc is not None else raw_acc,
        annotations=(body.get("metadata") or {}).get("annotations") or {},
        revision=bl.speculation_revision(body.get("spec"), resolved), params=bl.params_from_spec(body.get("spec")))


def guard_of(key: Key, spec: SpeculativeDeploymentSpec, benchmarks: Mapping) -> gd.GuardLimit | None:
    """The guard's limit: ``maxConcurrency``, or the crossover of the Complete SpeculativeBenchmark
    ``fromBenchmark`` names (the same reading as the reconciler's, plan.guard_limit); None without one."""
    g = spec.speculation.guard
    if g is None:
        return None
    if g.max_concurrency is not None:
        return gd.GuardLimit(g.max_concurrency, "spec.speculation.guard.maxConcurrency")
    if g.from_benchmark is not None:
        return gd.limit_from_benchmark(g.from_benchmark, benchmarks.get((key[0], g.from_benchmark)),
                                       deployment=key[1])[0]
    return None


def body_guard_limit(key: Key, body: dict, benchmarks: Mapping) -> gd.GuardLimit | None:
    """``guard_of`` for a raw SpeculativeDeployment body (None when its spec does not parse)."""
    d = read_deployment(body)
    return guard_of(key, d.spec, benchmarks) if d is not None else None


def monitor_for(controller: Any, interval: float, **kwargs) -> "AcceptanceMonitor":
    """The wiring (handlers.py, tests): a monitor on a Controller's caches, asking it for reconciles (``enqueue``),
    with its tenancy policy, attached to it (which starts it and asks it to ``forget`` and take ``promoted``)."""
    kwargs.setdefault("policy", controller.settings.policy)  # the canary probe's engine API key rule
    return controller.attach_monitor(AcceptanceMonitor(controller.cache, interval, notify=controller.enqueue, **kwargs))


class AcceptanceMonitor:
    def __init__(self, deployments: Deployments, interval: float = DEFAULT_INTERVAL, *, notify: Notify | None = None,
                 fetch: Fetch | None = None, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], str] = now_rfc3339, timeout: float | None = None, kube: Any = None,
                 probe_request: pr.Request | None = None, probe_timeout: float = pr.DEFAULT_TIMEOUT,
                 policy: TenancyPolicy | None = None):
        self.deployments = deployments
        # the tenancy policy: the engine API key Secret is read only when it allows its name and key (None: the
        # defaults, which allow no Secret)
        self.policy = policy if policy is not None else TenancyPolicy()
        self.notify = notify
        self.interval = float(interval)
        self.timeout = timeout if timeout is not None else min(10.0, max(1.0, self.interval))
        self.clock, self.now = clock, now
        self._fetch = fetch
        self._session = None  # aiohttp.ClientSession, made on the first default fetch
        self._parse_pool = None  # scrape.new_parse_pool(), made on the first scrape, shut down by close
        self.targets: dict[tuple[str, str], Target] = {}  # (namespace, pod) -> target: the watch-fed cache
        self._prev: dict[str, tuple[str, float]] = {}  # pod uid -> (last scrape text, clock)
        self._series: dict[Key, tuple[tuple[str, ...], int]] = {}  # key -> (labels, positions) exported
        self._settling: dict[Key, bl.Settling] = {}  # a revision's baseline being learned (in memory only)
        self._reset_done: dict[Key, str] = {}  # the reset annotation value this process acted on
        self._unanswered: dict[Key, int] = {}  # consecutive ticks in which no pod of the key answered
        # the last guard.LOAD_HOLD_SCRAPES running-requests samples (most loaded pod) per key: SpeculationProfitable
        # judges their peak, so a load around the guard's limit does not flip the condition on every tick
        self._load: dict[Key, collections.deque] = {}
        self._guard_series: dict[Key, tuple[str, ...]] = {}  # key -> labels of its exported guard limit
        self.ticks = 0
        # every engine pod as the watch shows it, ready or not (the canary's health reads the ones that are not)
        self.pods: dict[tuple[str, str], dict] = {}  # (namespace, pod) -> the pod (pods.slim)
        # ReplicaSets and StatefulSets that may own engine pods (handlers.on_engine_owner): uid -> (kind, namespace,
        # their controller's kind, its uid); the links of the ownership chain a pod is trusted through
        self.owners: dict[str, tuple[str, str, str, str]] = {}
        self.untrusted: dict[Key, int] = {}  # labelled ready pods not owned by the key's workloads (last tick)
        # the canary analysis (controller/canary.py): fed by this loop's scrapes and pod cache, its own report
        children = getattr(deployments, "children", None)
        self.canary = CanaryAnalysis(deployments.canaries, children=children if children is not None else {},
                                     admitted=deployments.admitted, pods=self.pods, clock=clock, notify=notify,
                                     policy=self.policy, kube=kube, probe_request=probe_request,
                                     probe_timeout=probe_timeout)

    # ------------------------------------------------------------- watch feed

    def observe_pod(self, event_type: str | None, pod: dict) -> None:
        meta = pod.get("metadata") or {}
        pk = (meta.get("namespace") or "default", meta.get("name") or "")
        target = None if event_type == "DELETED" else pod_target(pod)
        if target is None:
            self.targets.pop(pk, None)
        else:
            self.targets[pk] = target
        if event_type == "DELETED":
            gone = self.pods.pop(pk, None)
            uid = meta.get("uid") or ((gone or {}).get("metadata") or {}).get("uid")
            if uid:
                self.canary.forget_pod(uid)
        else:
            self.pods[pk] = slim(pod)

    def observe_owner(self, event_type: str | None, body: dict) -> None:
        """A ReplicaSet or StatefulSet event (``body["kind"]`` set by the handler): kept while its controller is a
        Deployment (a ReplicaSet's) or a LeaderWorkerSet (a StatefulSet's); whether it is one of ours is decided
        at each tick (workloads_of), by uid."""
        meta = body.get("metadata") or {}
        uid, kind = meta.get("uid"), body.get("kind")
        if not isinstance(uid, str) or not uid:
            return
        ctl = controller_of(meta)
        if event_type == "DELETED" or kind not in POD_OWNERS or ctl is None or ctl[0] != POD_OWNERS[kind]:
            self.owners.pop(uid, None)
            return
        self.owners[uid] = (kind, meta.get("namespace") or "default", ctl[0], ctl[1])

    def owned(self, namespace: str, owner: tuple[str, str] | None, track: str,
              workloads: Mapping[str, tuple[str, str]]) -> bool:
        """Whether a pod of ``namespace`` whose controller is ``owner`` (kind, uid) belongs, through uids, to one
        of ``workloads`` (workloads_of) of its ``track``: Pod -> ReplicaSet -> Deployment, or Pod -> StatefulSet
        -> LeaderWorkerSet, all in the pod's namespace."""
        if owner is None:
            return False
        o = self.owners.get(owner[1])
        if o is None or o[0] != owner[0] or o[1] != namespace:
            return False
        return workloads.get(o[3]) == (o[2], track)

    def forget(self, key: Key) -> None:
        """The SpeculativeDeployment is gone: drop its series, state and reports (a command of the reconciler's)."""
        self.canary.drop(key)
        self._unexport(key)
        self._export_guard(key, (), None)
        self._unanswered.pop(key, None)
        self._settling.pop(key, None)
        self._load.pop(key, None)
        self._reset_done.pop(key, None)
        self.deployments.acceptances.drop(key)

    def promoted(self, key: Key, baseline: dict[str, Any]) -> None:
        """A canary was promoted (the planner's decision, a command of the reconciler's): report ``baseline`` (the
        canary's measured tau for the promoted revision) as status.acceptance.baseline from now on; the next
        ticks carry it over (``bl.step``)."""
        report = self.deployments.acceptances.get(key) or AcceptanceReport()
        self.deployments.acceptances.put(key, report.with_baseline(baseline))

    # ------------------------------------------------------------- loop

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.interval)
                try:
                    await self.tick()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - a bad tick must not end the monitor
                    log.exception("acceptance monitor tick failed")
        finally:
            await self.close()

    async def close(self) -> None:
        self.canary.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._parse_pool is not None:
            self._parse_pool.shutdown(wait=False)
            self._parse_pool = None

    def _pool(self):
        if self._parse_pool is None:
            self._parse_pool = new_parse_pool()
        return self._parse_pool

    async def fetch(self, url: str, timeout: float) -> bytes | bytearray | str:
        """The body of ``url``, at most MAX_METRICS_BYTES (read_bounded); raises on any failure."""
        if self._fetch is not None:
            return await self._fetch(url, timeout)
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.get(url, headers={"Accept": "text/plain"},
                                     timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}")
            return await read_bounded(r.content, r.content_length)

    async def _scrape(self, t: Target) -> tuple[Target, str | None, str | None]:
        """(target, the engine's series as text, None) or (target, None, why the scrape failed)."""
        try:
            body = await self.fetch(t.url, self.timeout)
            return t, await asyncio.get_running_loop().run_in_executor(self._pool(), engine_series, body), None
        except asyncio.CancelledError:
            raise
        except ScrapeRejected as e:
            return t, None, str(e)
        except Exception as e:  # noqa: BLE001 - unreachable pod, timeout, HTTP error
            return t, None, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

    async def tick(self) -> None:
        """One pass: scrape every target of a known SpeculativeDeployment, judge each one."""
        self.ticks += 1
        bodies = self.deployments.bodies
        live = {t.uid for t in self.targets.values()}
        for uid in [u for u in self._prev if u not in live]:
            del self._prev[uid]
        for key in [k for k in self._series if k not in bodies]:
            self._unexport(key)
        views = {key: read_deployment(body) for key, body in list(bodies.items())}  # each body parsed once per tick
        children = getattr(self.deployments, "children", None) or {}
        workloads = {key: workloads_of(key, body, children) for key, body in list(bodies.items())}
        canary_pods: dict[Key, list[dict]] = {}
        for p in self.pods.values():
            meta = p["metadata"]
            if pod_track(p) == TRACK_CANARY and not meta.get("deletionTimestamp"):
                key = (meta.get("namespace") or "default", (meta.get("labels") or {}).get(INSTANCE))
                if key in workloads and self.owned(key[0], controller_of(meta), TRACK_CANARY, workloads[key]):
                    canary_pods.setdefault(key, []).append(p)
        # key -> (revision, its canary pods) or None
        canaries = {key: self.canary.of(key, canary_pods.get(key, [])) for key in bodies}
        by_key: dict[Key, list[Target]] = {}  # stable pods: the deployment's acceptance, baseline and guard
        canary_targets: dict[Key, list[Target]] = {}  # ready canary pods of the revision under analysis
        self.untrusted = {}
        for t in self.targets.values():
            key = (t.namespace, t.instance)
            if key not in bodies:
                continue
            if not self.owned(t.namespace, t.owner, t.track, workloads[key]):
                self.untrusted[key] = self.untrusted.get(key, 0) + 1  # labelled, not ours: never scraped
                continue
            if t.track != TRACK_CANARY:
                by_key.setdefault(key, []).append(t)
            elif canaries[key] is not None and of_revision(t.revision, canaries[key][0]):
                canary_targets.setdefault(key, []).append(t)
        wanted: list[Target] = []
        for key in set(by_key) | set(canary_targets):
            view = views.get(key)
            engine = view.engine if view is not None else None
            by_key[key] = [t for t in by_key.get(key, []) if t.engine in (None, engine)]
            canary_targets[key] = [t for t in canary_targets.get(key, []) if t.engine in (None, engine)]
            wanted += by_key[key] + canary_targets[key]
        limit = asyncio.Semaphore(SCRAPE_CONCURRENCY)

        async def scrape(t: Target) -> tuple[Target, str | None, str | None]:
            async with limit:
                return await self._scrape(t)

        scraped = await asyncio.gather(*(scrape(t) for t in wanted))
        results = {t.uid: (text, err) for t, text, err in scraped}
        for key, view in views.items():
            body = bodies.get(key)
            if body is None or (body.get("metadata") or {}).get("deletionTimestamp") or view is None \
                    or view.engine is None:
                self.canary.drop(key)
                continue
            stable = [(t, *results[t.uid]) for t in by_key.get(key, [])]
            changed = await self._judge(key, view, stable)
            canary = [(t, *results[t.uid]) for t in canary_targets.get(key, [])]
            changed = self.canary.observe(key, view.engine, body, canaries[key], stable, canary) or changed
            if changed and self.notify is not None:
                await self.notify(key)

    @staticmethod
    def _running(engine: str, scrapes: list[tuple[Target, str | None, str | None]]) -> float | None:
        """Running requests of the most loaded pod that answered (None: no pod exports the gauge)."""
        vals = [r for _, text, _ in scrapes if text is not None
                for r in (acc.running_requests(engine, text),) if r is not None]
        return max(vals) if vals else None

    # ------------------------------------------------------------- judging

    def _baseline(self, key: Key, d: Deployment, prev_acc: Any) -> bl.Baseline | None:
        """The stored baseline, or None while the reset annotation asks for a new one."""
        stored = bl.Baseline.from_status(prev_acc.get("baseline") if isinstance(prev_acc, dict) else None)
        token = bl.reset_token(d.annotations)
        baseline, news = bl.apply_reset(stored, token, self._reset_done.get(key))
        if news:
            assert token is not None
            log.info("acceptance baseline of %s/%s reset by %s=%s", key[0], key[1], bl.RESET_ANNOTATION, token)
            self._reset_done[key] = token
            self._settling.pop(key, None)
        return baseline

    async def _judge(self, key: Key, d: Deployment, scrapes: list[tuple[Target, str | None, str | None]]) -> bool:
        """Judge the stable pods' scrapes; whether the monitor's part of the status changed (the caller notifies)."""
        engine = d.engine
        assert engine is not None
        labels = (key[0], key[1], engine, d.spec.drafter.model if d.spec.drafter is not None else "")
        previous = self.deployments.acceptances.get(key) or d.stored()
        prev_acc, prev_cond = previous.acceptance, previous.condition
        revision, params = d.revision, d.params
        min_length = d.spec.monitoring.min_acceptance_length
        baseline = self._baseline(key, d, prev_acc)
        live_tau: float | None = None  # this window's tau (None: no drafts now), for SpeculationProfitable

        if not scrapes:
            self._unanswered.pop(key, None)
            self._unexport(key)
            if prev_cond is None:
                return False  # never judged: nothing to say (and nothing to write)
            ignored = self.untrusted.get(key, 0)
            why = f" ({ignored} labelled engine pod(s) not owned by its Deployment or LeaderWorkerSet ignored)" \
                if ignored else ""
            new = {"acceptance": {"baseline": baseline.to_status()} if baseline is not None else None,
                   "condition": st.speculation_unknown(st.NO_READY_PODS,
                                                       f"no ready engine pod to read acceptance from{why}")}
        else:
            items: list[acc.Acceptance] = []
            reporting: list[Target] = []
            answered = primed = 0
            errors = []
            for t, text, err in scrapes:
                if text is None:
                    errors.append(f"{t.name}: {err}")
                    continue
                answered += 1
                t_now = self.clock()
                prev = self._prev.get(t.uid)
                self._prev[t.uid] = (text, t_now)
                a = acc.acceptance_from_scrapes(engine, prev[0] if prev else None, text,
                                                (t_now - prev[1]) if prev else None)
                if a is None:
                    continue  # this pod exports no speculative-decoding series
                if prev is None and a.window == "cumulative":
                    primed += 1  # counters since the engine started (vLLM, SGLang's verify counter): wait for a window
                    continue
                items.append(a)
                reporting.append(t)
            self._unanswered[key] = 0 if answered else self._unanswered.get(key, 0) + 1
            if not answered and self._unanswered[key] < SCRAPE_FAILED_TICKS:
                return False  # a missed scrape or two is no news: keep everything as it is
            now = self.now()
            if not answered:
                self._unexport(key)
                new = {"acceptance": st.acceptance_status(None, 0, "", prev_acc, now, baseline=baseline),
                       "condition": st.speculation_unknown(
                           st.SCRAPE_FAILED, f"no ready engine pod's metrics answered: {'; '.join(errors)}"[:1000])}
            elif not items and primed:
                return False  # the first scrape of every pod with metrics: judge at the next tick
            else:
                combined = acc.combine(items)
                live_tau = combined.length if combined is not None else None
                want_hash = d.config_hash
                current = all(t.config_hash == want_hash for t in reporting)
                baseline, settling = bl.step(baseline, self._settling.get(key), combined, revision=revision,
                                             now=self.clock(), now_text=now, params=params, current_config=current,
                                             token=bl.reset_token(d.annotations), min_length=min_length)
                if settling is None:
                    self._settling.pop(key, None)
                else:
                    self._settling[key] = settling
                self._export(key, labels, combined, baseline, params.regression_fraction)
                window = _fmt_seconds(self.interval) if combined is not None and combined.window == "interval" \
                    else (combined.window if combined is not None else _fmt_seconds(self.interval))
                new = {"acceptance": st.acceptance_status(combined, len(items), window, prev_acc, now,
                                                          revision=revision, baseline=baseline),
                       "condition": st.speculation_condition(combined, min_length, prev_cond, baseline=baseline,
                                                             revision=revision,
                                                             regression_fraction=params.regression_fraction)}
        limit = guard_of(key, d.spec, self.deployments.benchmarks)
        self._export_guard(key, labels, limit)
        recent = self._load.setdefault(key, collections.deque(maxlen=gd.LOAD_HOLD_SCRAPES))
        recent.append(self._running(engine, scrapes))
        new["profitable"] = st.profitable_condition(gd.peak_load(recent), limit, previous.profitable,
                                                    tau=live_tau)
        report = AcceptanceReport(**new)
        if report == previous:
            self.deployments.acceptances.put(key, report)
            return False
        log.info("acceptance of %s/%s: %s %s%s", key[0], key[1], (new["condition"] or {}).get("reason"),
                 (new["acceptance"] or {}).get("length"),
                 f"; {new['profitable']['reason']}" if new["profitable"] else "")
        self.deployments.acceptances.put(key, report)
        return True

    # ------------------------------------------------------------- metrics

    def _export(self, key: Key, labels: tuple[str, ...], a: acc.Acceptance | None,
                baseline: bl.Baseline | None = None, fraction: float = bl.DEFAULT_REGRESSION_FRACTION) -> None:
        old = self._series.get(key)
        if old is not None and old[0] != labels:
            self._unexport(key)
            old = None
        if a is None or a.length is None:
            self._unexport(key)
            return
        metrics.ACCEPTANCE_LENGTH.labels(*labels).set(a.length)
        if a.rate is not None:
            metrics.ACCEPTANCE_RATE.labels(*labels).set(a.rate)
        else:
            metrics.ACCEPTANCE_RATE.remove(*labels)
        for i, r in enumerate(a.per_position):
            metrics.ACCEPTANCE_PER_POSITION.labels(*labels, str(i)).set(r)
        for i in range(len(a.per_position), old[1] if old else 0):
            metrics.ACCEPTANCE_PER_POSITION.remove(*labels, str(i))
        if baseline is not None:
            metrics.ACCEPTANCE_BASELINE.labels(*labels).set(baseline.length)
            metrics.ACCEPTANCE_REGRESSION_FRACTION.labels(*labels).set(fraction)
        else:
            _remove(metrics.ACCEPTANCE_BASELINE, labels)
            _remove(metrics.ACCEPTANCE_REGRESSION_FRACTION, labels)
        self._series[key] = (labels, len(a.per_position))

    def _export_guard(self, key: Key, labels: tuple[str, ...], limit: gd.GuardLimit | None) -> None:
        old = self._guard_series.pop(key, None)
        if old is not None and (limit is None or limit.max_concurrency is None or old != labels):
            _remove(metrics.GUARD_MAX_CONCURRENCY, old)
        if limit is not None and limit.max_concurrency is not None:
            metrics.GUARD_MAX_CONCURRENCY.labels(*labels).set(limit.max_concurrency)
            self._guard_series[key] = labels

    def _unexport(self, key: Key) -> None:
        old = self._series.pop(key, None)
        if old is None:
            return
        labels, n = old
        for g in (metrics.ACCEPTANCE_LENGTH, metrics.ACCEPTANCE_RATE, metrics.ACCEPTANCE_BASELINE,
                  metrics.ACCEPTANCE_REGRESSION_FRACTION):
            _remove(g, labels)
        for i in range(n):
            metrics.ACCEPTANCE_PER_POSITION.remove(*labels, str(i))


def _remove(gauge, labels: tuple[str, ...]) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:  # never set
        pass
