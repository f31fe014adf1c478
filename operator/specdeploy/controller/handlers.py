"""kopf handlers: thin glue from watch events into the controller's work queue.

No handler here does any work itself: each one hands the event body to the Controller,
whose workers run the one reconcile path. No finalizer is ever needed (children are
owned and garbage-collected through ownerReferences), so none is added.
"""

from __future__ import annotations

import asyncio
import logging
import os

import kopf

from ..api.crd import API_GROUP, API_VERSION
from ..core import names as N
from ..core.policy import POLICY_ENV, TenancyPolicy
from .. import PLURAL
from ..api.benchmark import BENCH_PLURAL
from . import metrics
from .errors import kopf_errors
from .kube import Kube, load_api_client
from .monitor import (DEFAULT_INTERVAL, ENGINE_POD_LABELS, ENGINE_POD_SELECTOR, INTERVAL_ENV, OWNER_SELECTORS,
                      monitor_for)
from .leader import LeaderElectionSettings
from .reconciler import Controller, Settings, engine_network_policy_from_env, pod_monitor_labels_from_env
from .resolve import Resolver

MANAGED = N.MANAGED_LABELS
_controller: Controller | None = None
_webhook = None  # webhooks.WebhookRuntime when --webhook-port is set
_elector = None  # leader.LeaderElector when --leader-elect is on
_sync = None  # health.CacheSync
_health = None  # health.HealthServer when --health-port is set


def controller() -> Controller:
    assert _controller is not None, "operator not started"
    return _controller


@kopf.on.login()
def on_login(settings: kopf.OperatorSettings, **kwargs):
    """Credentials for kopf's own watches: the --kubeconfig file when given, else kopf's default.

    kopf's client-based login reads the kubeconfig location the kubernetes library captured
    from KUBECONFIG at import time, so an explicit --kubeconfig would be ignored.
    """
    path = os.environ.get("SPECDEPLOY_KUBECONFIG")
    if not path:
        return kopf.login_via_client(settings=settings, **kwargs)
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


def configure(settings: kopf.OperatorSettings) -> None:
    """The operator's kopf settings (start-up)."""
    settings.posting.enabled = False  # the controller posts its own Events, on transitions only
    settings.persistence.diffbase_storage = EventsOnlyDiffBase()
    settings.watching.server_timeout = int(os.environ.get("SPECDEPLOY_WATCH_TIMEOUT", "300"))
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
async def on_startup(settings: kopf.OperatorSettings, **_) -> None:
    global _controller, _elector, _sync
    from .health import CacheSync
    from .leader import default_identity, new_elector

    configure(settings)
    api = load_api_client(os.environ.get("SPECDEPLOY_KUBECONFIG") or None)
    identity = os.environ.get("SPECDEPLOY_IDENTITY") or default_identity()
    api.user_agent = f"specdeploy-operator/{identity}"  # the API server's audit log (and the tests) tell replicas apart
    base = Kube(api, on_write=metrics.count_write)  # unfenced: Lease, webhook TLS upkeep, reads
    election = LeaderElectionSettings.from_env()
    kube = base
    if election.enabled:
        _elector = new_elector(election, identity, user_agent=api.user_agent)
        kube = base.fenced(_elector.fence())
    resolver = Resolver(kube, hub_endpoint=os.environ.get("HF_ENDPOINT") or None)
    _controller = Controller(kube, resolver, Settings(
        resync_seconds=float(os.environ.get("SPECDEPLOY_RESYNC_SECONDS", "60")),
        workers=int(os.environ.get("SPECDEPLOY_WORKERS", "4")),
        capability_ttl=float(os.environ.get("SPECDEPLOY_CAPABILITY_TTL", "60")),
        policy=TenancyPolicy.from_env(os.environ.get(POLICY_ENV)),
        pod_monitor_labels=pod_monitor_labels_from_env(),
        engine_network_policy=engine_network_policy_from_env(),
    ))
    from .benchmark import BenchmarkController

    _controller.benchmark_controller = BenchmarkController(kube, resolver, deployments=_controller.bodies,
                                                 policy=_controller.settings.policy,
                                                 event=_controller.executor.event,
                                                 network_policy=_controller.settings.engine_network_policy)
    interval = float(os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL)
    if interval > 0:  # 0: no acceptance monitoring
        monitor_for(_controller, interval, kube=base)  # base: reads the engine API key Secret for the canary probe
    watched = [n for n in (os.environ.get("SPECDEPLOY_WATCH_NAMESPACES") or "").split(",") if n]
    _sync = CacheSync(base, watched or None, _controller.bodies)
    _controller.benchmark_controller.deployments_synced = _sync.synced
    asyncio.get_running_loop().create_task(_sync.run(), name="specdeploy-cache-sync")
    if _elector is not None:
        _elector.on_started, _elector.on_stopped = _lead, _controller.follow
        _elector.start()
    else:  # a single operator: always the leader
        metrics.LEADER.set(1)
        _controller.start()
    await _start_webhook(base, resolver)
    await _start_health(identity)
    port = int(os.environ.get("SPECDEPLOY_METRICS_PORT", "0"))
    if port:
        from prometheus_client import start_http_server

        addr = os.environ.get("SPECDEPLOY_METRICS_ADDR") or "127.0.0.1"
        start_http_server(port, addr=addr, registry=metrics.REGISTRY)
        logging.getLogger("specdeploy.operator").info("metrics on http://%s:%s/metrics", addr, port)
    from .webhooks import settle_gc

    settle_gc()  # everything start-up allocated is in place (webhooks.settle_gc)


async def _lead() -> None:
    """Leadership acquired: reconcile once the caches have synced (a cold cache would re-create children)."""
    if _sync is not None:
        await _sync.synced.wait()
    await controller().lead()


async def _start_health(identity: str) -> None:
    global _health
    port = os.environ.get("SPECDEPLOY_HEALTH_PORT")
    if not port:
        return
    from .health import HealthServer

    def checks() -> dict[str, bool]:
        return {"cachesSynced": _sync is not None and _sync.synced.is_set(),
                "webhookServing": _webhook is None or _webhook.ready.is_set(),
                "webhookCaBundle": _webhook is None or not _webhook.ca_mismatches()}

    def details() -> dict:
        out = {"identity": identity, "leader": _elector.leader if _elector else identity,
               "leading": _elector.leading if _elector else True}
        mismatched = _webhook.ca_mismatches() if _webhook is not None else []
        if mismatched:  # the API server cannot verify this replica's certificate through these webhooks
            out["caBundleMismatch"] = mismatched
        return out

    _health = HealthServer(int(port), checks, details, addr=os.environ.get("SPECDEPLOY_HEALTH_ADDR") or "127.0.0.1")
    await _health.start()


async def _start_webhook(kube: Kube, resolver: Resolver) -> None:
    """The admission webhook server (admission.py / webhooks.py), when a port is configured."""
    global _webhook
    from .webhooks import OperatorConfigs, WebhookRuntime, WebhookSettings

    ws = WebhookSettings.from_env()
    if ws.port:
        watched = [n for n in (os.environ.get("SPECDEPLOY_WATCH_NAMESPACES") or "").split(",") if n]
        deployments = _controller.bodies if _controller is not None else None  # benchmarks: their deployment as stored
        _webhook = WebhookRuntime(ws, kube, OperatorConfigs(kube, resolver, watched=watched or None,
                                                            deployments=deployments))
        _webhook.start()


@kopf.on.cleanup()
@kopf_errors
async def on_cleanup(**_) -> None:
    if _controller is not None:
        await _controller.stop()
    if _elector is not None:  # after the workers stopped: hand the Lease over at once (client-go ReleaseOnCancel)
        await _elector.stop(release=True)
    if _webhook is not None:
        await _webhook.stop()
    if _health is not None:
        await _health.stop()


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
@kopf_errors
async def on_speculativedeployment(event, **_) -> None:
    await controller().observe_cr(event.get("type"), event["object"])


@kopf.on.event("configmaps")
@kopf_errors
async def on_configmap(event, **_) -> None:
    await controller().observe_configmap(event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf_errors
async def on_deployment(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "Deployment"})


@kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels=MANAGED)
@kopf_errors
async def on_leaderworkerset(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "LeaderWorkerSet"})


@kopf.on.event("v1", "services", labels=MANAGED)
@kopf_errors
async def on_service(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "Service"})


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
@kopf_errors
async def on_pdb(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "PodDisruptionBudget"})


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=MANAGED)
@kopf_errors
async def on_networkpolicy(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "NetworkPolicy"})


@kopf.on.event("monitoring.coreos.com", "v1", "podmonitors", labels=MANAGED)
@kopf_errors
async def on_podmonitor(event, **_) -> None:
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "PodMonitor"})


@kopf.on.event("v1", "pods", labels=ENGINE_POD_LABELS)
@kopf_errors
async def on_engine_pod(event, **_) -> None:
    # the acceptance monitor's target cache (ready engine pods); never a reconcile by itself
    monitor = controller().monitor
    if monitor is not None:
        monitor.observe_pod(event.get("type"), event["object"])


@kopf.on.event("apps", "v1", "replicasets", labels=ENGINE_POD_LABELS)
@kopf_errors
async def on_engine_replicaset(event, **_) -> None:
    # an engine pod's owner: the monitor trusts a pod through its ReplicaSet's uid, never its labels alone
    on_engine_owner(event, "ReplicaSet")


@kopf.on.event("apps", "v1", "statefulsets", labels={N.LWS_NAME_LABEL: kopf.PRESENT})
@kopf_errors
async def on_lws_statefulset(event, **_) -> None:
    # a multi-node leader pod's owner (the LeaderWorkerSet controller's StatefulSet)
    on_engine_owner(event, "StatefulSet")


def on_engine_owner(event, kind: str) -> None:
    monitor = controller().monitor
    if monitor is not None:
        monitor.observe_owner(event.get("type"), {**event["object"], "kind": kind})


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_TUNING})
@kopf_errors
async def on_tuning_job(event, **_) -> None:
    # the tuning Job's progress (its result becomes the tuned-kernels ConfigMap)
    await controller().observe_child(event.get("type"), {**event["object"], "kind": "Job"})


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_INSPECTOR})
@kopf_errors
async def on_inspector_job(event, **_) -> None:
    # an inspector finishing is a reason to reconcile its owner; it is not a managed child
    body = event["object"]
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        key = (meta.get("namespace") or "default", ref.get("name"))
        if ref.get("kind") == "SpeculativeDeployment" and key in controller().bodies:
            await controller().queue.add(key)


@kopf.on.event(API_GROUP, API_VERSION, BENCH_PLURAL)
@kopf_errors
async def on_speculativebenchmark(event, **_) -> None:
    # one watch, two readers: spec.speculation.guard.fromBenchmark reads the benchmarks' recommendation
    # (watch-fed: an idle reconcile reads nothing), and the benchmark controller runs them
    await controller().observe_benchmark(event.get("type"), event["object"])
    benchmarks = controller().benchmark_controller
    if benchmarks is not None:
        await benchmarks.observe(event.get("type"), event["object"])


@kopf.on.event("batch", "v1", "jobs", labels={**MANAGED, N.LABEL_COMPONENT: N.COMPONENT_BENCH_CLIENT})
@kopf_errors
async def on_bench_client_job(event, **_) -> None:
    # a client Job finishing is the benchmark's next step
    benchmarks = controller().benchmark_controller
    if benchmarks is not None and event.get("type") != "DELETED":
        await benchmarks.observe_job(event["object"])


logging.getLogger("kopf.objects").setLevel(logging.WARNING)
