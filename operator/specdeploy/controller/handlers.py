"""kopf handlers: thin glue from watch events into the controller's work queue.

No handler here does any work itself: each one hands the event body to the Controller,
whose workers run the one reconcile path. No finalizer is ever needed (children are
owned and garbage-collected through ownerReferences), so none is added.

What the operator runs with comes in kopf's memo (``memo.settings``, controller/settings.py); the running parts
it builds at start-up live on ``memo.operator`` (:class:`Operator`), never in module globals.
"""

from __future__ import annotations

import asyncio
import logging

import kopf

from ..api.crd import API_GROUP, API_VERSION
from ..core import names as N
from .. import PLURAL
from ..api.benchmark import BENCH_PLURAL
from . import metrics
from .errors import kopf_errors
from .kube import Kube, load_api_client
from .monitor import ENGINE_POD_LABELS, ENGINE_POD_SELECTOR, OWNER_SELECTORS, monitor_for
from .reconciler import Controller
from .resolve import Resolver
from .settings import OperatorSettings

MANAGED = N.MANAGED_LABELS


class Operator:
    """The running parts of one operator process, held on kopf's memo (``memo.operator``) with what they run with
    (``memo.settings``, the same object as ``self.settings``): made by controller/main.run before kopf starts, filled
    by the start-up handler, stopped by the clean-up handler. Every handler reaches them through its ``memo``."""

    def __init__(self, settings: OperatorSettings):
        self.settings = settings
        self.identity: str = ""
        self._controller: Controller | None = None
        self.webhook = None  # webhooks.WebhookRuntime when the webhook server is on
        self.elector = None  # leader.LeaderElector when --leader-elect is on
        self.sync = None  # health.CacheSync
        self.health = None  # health.HealthServer when --health-port is set

    @property
    def controller(self) -> Controller:
        assert self._controller is not None, "operator not started"
        return self._controller


def operator_of(memo) -> Operator:
    """The memo's Operator; one made from the environment defaults when kopf was started without one (``kopf run``
    on this module: tests/apiserver, the dev tools)."""
    op = getattr(memo, "operator", None)
    if op is None:
        from .settings import from_env

        settings = getattr(memo, "settings", None) or from_env()
        op = memo.operator = Operator(settings)
        memo.settings = settings
    return op


@kopf.on.login()
def on_login(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs):
    """Credentials for kopf's own watches: the --kubeconfig file when given, else kopf's default.

    kopf's client-based login reads the kubeconfig location the kubernetes library captured
    from KUBECONFIG at import time, so an explicit --kubeconfig would be ignored.
    """
    path = operator_of(memo).settings.kubeconfig
    if not path:
        return kopf.login_via_client(settings=settings, memo=memo, **kwargs)
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=path, client_configuration=cfg)
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
        username=cfg.username or None, password=cfg.password or None, scheme=scheme, token=token,
        certificate_path=cfg.cert_file, private_key_path=cfg.key_file, trust_env=settings.networking.trust_env,
    )


class EventsOnlyDiffBase(kopf.DiffBaseStorage):
    """No diff base: every handler here is ``on.event`` (no create/update/field handlers), so kopf's
    default storage, which deep-copies every watched body (managedFields included) on every event
    to diff it against a last-handled annotation, computes what nothing reads (12% of the
    operator's CPU at 1000 CRs). A test checks that no change-detecting handler is registered."""

    def build(self, *, body, extra_fields=None):
        return {}

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence) -> None:
        return None


# kopf runs one worker task per watched object while its events arrive, and an idle worker keeps the last
# event's body (managedFields included) until it exits, kopf's default 5 s after its last event. Converging
# 1000 CRs, that held the bodies of most of the ~5000 objects at once: peak RSS 192 MiB, 173 MiB with 0.5 s
# (docs/benchmarks.md). A later event of the object starts a new worker; the order of one object's events and
# kopf's batching window are the same either way.
WORKER_IDLE_SECONDS = 0.5


def configure(settings: kopf.OperatorSettings, watch_timeout: int = 300) -> None:
    """The operator's kopf settings (start-up); ``watch_timeout``: OperatorSettings.watch_timeout."""
    settings.posting.enabled = False  # the controller posts its own Events, on transitions only
    settings.persistence.diffbase_storage = EventsOnlyDiffBase()
    settings.watching.server_timeout = int(watch_timeout)
    settings.watching.client_timeout = settings.watching.server_timeout + 30
    settings.networking.request_timeout = 60
    settings.peering.standalone = True
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    # Engine pods only, filtered by the API server: the acceptance monitor's cache (on_engine_pod).
    settings.watching.label_selectors["v1", "pods"] = ENGINE_POD_SELECTOR
    # The owners of engine pods (on_engine_owner): the engine ReplicaSets, the LeaderWorkerSets' StatefulSets.
    for plural, selector in OWNER_SELECTORS.items():
        settings.watching.label_selectors["apps", plural] = selector


@kopf.on.startup()
@kopf_errors
async def on_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    await start(operator_of(memo), settings)


async def start(op: Operator, kopf_settings: kopf.OperatorSettings) -> None:
    """Build and start the running parts from ``op.settings``."""
    from .benchmark import BenchmarkController
    from .health import CacheSync
    from .leader import default_identity, new_elector

    cfg = op.settings
    configure(kopf_settings, cfg.watch_timeout)
    api = load_api_client(cfg.kubeconfig)
    op.identity = identity = cfg.identity or default_identity(cfg.pod_name)
    api.user_agent = f"specdeploy-operator/{identity}"  # the API server's audit log (and the tests) tell replicas apart
    base = Kube(api, on_write=metrics.count_write)  # unfenced: Lease, webhook TLS upkeep, reads
    kube = base
    if cfg.election.enabled:
        op.elector = new_elector(cfg.election, identity, user_agent=api.user_agent, kubeconfig=cfg.kubeconfig)
        kube = base.fenced(op.elector.fence())
    resolver = Resolver(kube, hub_endpoint=cfg.hub_endpoint, inspect_deadline=cfg.inspect_deadline)
    ctl = op._controller = Controller(kube, resolver, cfg.reconciler)
    ctl.benchmark_controller = BenchmarkController(kube, resolver, deployments=ctl.bodies, policy=cfg.policy,
                                                   event=ctl.executor.event,
                                                   network_policy=cfg.reconciler.engine_network_policy,
                                                   deadlines=cfg.bench)
    if cfg.acceptance_interval > 0:  # 0: no acceptance monitoring
        # base: reads the engine API key Secret for the canary probe
        monitor_for(ctl, cfg.acceptance_interval, kube=base)
    op.sync = CacheSync(base, cfg.watched, ctl.bodies)
    ctl.benchmark_controller.deployments_synced = op.sync.synced
    asyncio.get_running_loop().create_task(op.sync.run(), name="specdeploy-cache-sync")
    if op.elector is not None:
        op.elector.on_started, op.elector.on_stopped = lambda: _lead(op), ctl.follow
        op.elector.start()
    else:  # a single operator: always the leader
        metrics.LEADER.set(1)
        ctl.start()
    await _start_webhook(op, base, resolver)
    await _start_health(op)
    if cfg.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(cfg.metrics_port, addr=cfg.metrics_addr, registry=metrics.REGISTRY)
        logging.getLogger("specdeploy.operator").info("metrics on http://%s:%s/metrics", cfg.metrics_addr,
                                                      cfg.metrics_port)
    from .webhooks import settle_gc

    settle_gc()  # everything start-up allocated is in place (webhooks.settle_gc)


async def _lead(op: Operator) -> None:
    """Leadership acquired: reconcile once the caches have synced (a cold cache would re-create children)."""
    if op.sync is not None:
        await op.sync.synced.wait()
    await op.controller.lead()


async def _start_health(op: Operator) -> None:
    cfg = op.settings
    if not cfg.health_port:
        return
    from .health import HealthServer

    def checks() -> dict[str, bool]:
        return {"cachesSynced": op.sync is not None and op.sync.synced.is_set(),
                "webhookServing": op.webhook is None or op.webhook.ready.is_set(),
                "webhookCaBundle": op.webhook is None or not op.webhook.ca_mismatches()}

    def details() -> dict:
        out = {"identity": op.identity, "leader": op.elector.leader if op.elector else op.identity,
               "leading": op.elector.leading if op.elector else True}
        mismatched = op.webhook.ca_mismatches() if op.webhook is not None else []
        if mismatched:  # the API server cannot verify this replica's certificate through these webhooks
            out["caBundleMismatch"] = mismatched
        return out

    op.health = HealthServer(cfg.health_port, checks, details, addr=cfg.health_addr)
    await op.health.start()


async def _start_webhook(op: Operator, kube: Kube, resolver: Resolver) -> None:
    """The admission webhook server (admission.py / webhooks.py), when a port is configured."""
    from .webhooks import OperatorConfigs, WebhookRuntime

    cfg = op.settings
    if cfg.webhook.port:
        # benchmarks are admitted against their deployment as stored
        deployments = op._controller.bodies if op._controller is not None else None
        op.webhook = WebhookRuntime(cfg.webhook, kube, OperatorConfigs(kube, resolver, watched=cfg.watched,
                                                                       deployments=deployments),
                                    policy=cfg.policy)
        op.webhook.start()


@kopf.on.cleanup()
@kopf_errors
async def on_cleanup(memo: kopf.Memo, **_) -> None:
    op = operator_of(memo)
    if op._controller is not None:
        await op._controller.stop()
    if op.elector is not None:  # after the workers stopped: hand the Lease over at once (client-go ReleaseOnCancel)
        await op.elector.stop(release=True)
    if op.webhook is not None:
        await op.webhook.stop()
    if op.health is not None:
        await op.health.stop()


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
@kopf_errors
async def on_speculativedeployment(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_cr(event.get("type"), event["object"])


@kopf.on.event("configmaps")
@kopf_errors
async def on_configmap(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_configmap(event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf_errors
async def on_deployment(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "Deployment"})


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
@kopf_errors
async def on_leaderworkerset(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "LeaderWorkerSet"})


@kopf.on.event("v1", "services", labels=MANAGED)
@kopf_errors
async def on_service(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "Service"})


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
@kopf_errors
async def on_pdb(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"),
                                                     {**event["object"], "kind": "PodDisruptionBudget"})


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=MANAGED)
@kopf_errors
async def on_networkpolicy(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "NetworkPolicy"})


@kopf.on.event("monitoring.coreos.com", "v1", "podmonitors", labels=MANAGED)
@kopf_errors
async def on_podmonitor(event, memo, **_) -> None:
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "PodMonitor"})


@kopf.on.event("v1", "pods", labels=ENGINE_POD_LABELS)
@kopf_errors
async def on_engine_pod(event, memo, **_) -> None:
    # the acceptance monitor's target cache (ready engine pods); never a reconcile by itself
    monitor = operator_of(memo).controller.monitor
    if monitor is not None:
        monitor.observe_pod(event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "replicasets", labels=ENGINE_POD_LABELS)
@kopf_errors
async def on_engine_replicaset(event, memo, **_) -> None:
    # an engine pod's owner: the monitor trusts a pod through its ReplicaSet's uid, never its labels alone
    on_engine_owner(event, "ReplicaSet", memo)


@kopf.on.event("apps", "v1", "statefulsets", labels={N.LWS_NAME_LABEL: kopf.PRESENT})
@kopf_errors
async def on_lws_statefulset(event, memo, **_) -> None:
    # a multi-node leader pod's owner (the LeaderWorkerSet controller's StatefulSet)
    on_engine_owner(event, "StatefulSet", memo)


def on_engine_owner(event, kind: str, memo) -> None:
    monitor = operator_of(memo).controller.monitor
    if monitor is not None:
        monitor.observe_owner(event.get("type"), {**event["object"], "kind": kind})


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_TUNING})
@kopf_errors
async def on_tuning_job(event, memo, **_) -> None:
    # the tuning Job's progress (its result becomes the tuned-kernels ConfigMap)
    await operator_of(memo).controller.observe_child(event.get("type"), {**event["object"], "kind": "Job"})


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_INSPECTOR})
@kopf_errors
async def on_inspector_job(event, memo, **_) -> None:
    # an inspector finishing is a reason to reconcile its owner; it is not a managed child
    body = event["object"]
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        key = (meta.get("namespace") or "default", ref.get("name"))
        if ref.get("kind") == "SpeculativeDeployment" and key in operator_of(memo).controller.bodies:
            await operator_of(memo).controller.queue.add(key)


@kopf.on.event(API_GROUP, API_VERSION, BENCH_PLURAL)
@kopf_errors
async def on_speculativebenchmark(event, memo, **_) -> None:
    # one watch, two readers: spec.speculation.guard.fromBenchmark reads the benchmarks' recommendation
    # (watch-fed: an idle reconcile reads nothing), and the benchmark controller runs them
    await operator_of(memo).controller.observe_benchmark(event.get("type"), event["object"])
    benchmarks = operator_of(memo).controller.benchmark_controller
    if benchmarks is not None:
        await benchmarks.observe(event.get("type"), event["object"])


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_BENCH_CLIENT})
@kopf_errors
async def on_bench_client_job(event, memo, **_) -> None:
    # a client Job finishing is the benchmark's next step
    benchmarks = operator_of(memo).controller.benchmark_controller
    if benchmarks is not None and event.get("type") != "DELETED":
        await benchmarks.observe_job(event["object"])


logging.getLogger("kopf.objects").setLevel(logging.WARNING)
