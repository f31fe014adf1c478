"""What the operator runs with: one typed object, :class:`OperatorSettings`.

``specdeploy operator run`` (cli/operator.py) builds it from its flags over the documented environment defaults
read here (:func:`from_env`), and hands it to kopf as ``memo.settings`` (controller/main.py); the start-up handler
builds the running parts from it and keeps them on ``memo.operator`` (controller/handlers.py). Nothing is written
into the environment, and no other module of the product reads it (the CLI entry aside): the environment names the
operator honours are the ones in :data:`ENV` (tests/unit/test_settings_home.py keeps it so).

A test runs an operator in-process by constructing this object (``OperatorSettings(namespaces=("models",), ...)``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..core.acceptance import DEFAULT_MONITOR_INTERVAL as DEFAULT_INTERVAL
from ..core.errors import Permanent
from .benchmark import BenchDeadlines
from .leader import LeaderElectionSettings
from .reconciler import Settings
from .resolve import INSPECT_DEADLINE
from .webhooks import WebhookSettings

# The environment the operator reads, each a default its flags (when it has one) override. The chart sets
# SPECDEPLOY_ACCEPTANCE_INTERVAL, SPECDEPLOY_POD_MONITOR_LABELS, HF_ENDPOINT, POD_NAME and POD_NAMESPACE; the rest
# are tuning knobs (the dev loop and the e2e tests set some of them).
ENV = {
    "POD_NAME": "the replica's identity in the leader Lease (plus a random suffix; default: the host name)",
    "POD_NAMESPACE": "the operator's namespace (--operator-namespace)",
    "HF_ENDPOINT": "the Hugging Face hub endpoint (chart value hub.endpoint)",
    "SPECDEPLOY_IDENTITY": "the replica's identity as is (no suffix): its Lease holder and API User-Agent",
    "SPECDEPLOY_RESYNC_SECONDS": "full resync period (--resync-seconds; default 60)",
    "SPECDEPLOY_WORKERS": "reconcile workers (default 4)",
    "SPECDEPLOY_CAPABILITY_TTL": "seconds an API discovery answer is kept (default 60)",
    "SPECDEPLOY_WATCH_TIMEOUT": "kopf's watch server timeout in seconds (default 300)",
    "SPECDEPLOY_ACCEPTANCE_INTERVAL": "acceptance monitor period in seconds; 0: off (chart value "
                                      "acceptanceIntervalSeconds; default 30)",
    "SPECDEPLOY_POD_MONITOR_LABELS": "extra labels on every operator-made PodMonitor, a JSON object (chart value "
                                     "podMonitor.labels)",
    "SPECDEPLOY_ENGINE_NETWORK_POLICY": "a NetworkPolicy per SpeculativeDeployment: the comma-separated namespaces "
                                        "besides the CR's and the operator's that reach its engines "
                                        "(--engine-network-policy, --engine-ingress-namespace)",
    "SPECDEPLOY_WEBHOOK_PORT": "the webhook server's port with --webhook (--webhook-port; default 9443)",
    "SPECDEPLOY_WEBHOOK_RESYNC_SECONDS": "caBundle re-check period (default 300)",
    "SPECDEPLOY_WEBHOOK_CERT_CHECK_SECONDS": "--webhook-cert-dir re-read period (default 60)",
    "SPECDEPLOY_INSPECT_SECONDS": "deadline of the PVC inspector Job (default 900)",
    "SPECDEPLOY_BENCH_POLL_SECONDS": "a running benchmark's poll period (default 3)",
    "SPECDEPLOY_BENCH_READY_SECONDS": "deadline of a benchmark variant's engine becoming Ready (default 3600)",
    "SPECDEPLOY_BENCH_CLIENT_SECONDS": "deadline of a benchmark's client Job (default 21600)",
    "SPECDEPLOY_BENCH_CRASH_RESTARTS": "restarts after which a crash-looping variant fails its benchmark (default 3)",
}
POD_MONITOR_LABELS_ENV = "SPECDEPLOY_POD_MONITOR_LABELS"
ENGINE_NETWORK_POLICY_ENV = "SPECDEPLOY_ENGINE_NETWORK_POLICY"
INTERVAL_ENV = "SPECDEPLOY_ACCEPTANCE_INTERVAL"
WEBHOOK_PORT_ENV = "SPECDEPLOY_WEBHOOK_PORT"


class SettingsError(Permanent, ValueError):
    """An environment default that cannot be used: the message names the variable and the fix."""


@dataclass(frozen=True)
class OperatorSettings:
    """Everything ``specdeploy operator run`` runs with. The defaults are an operator for tests: namespace
    ``default``, no listener (metrics, health, webhook off), no leader election."""

    namespaces: tuple[str, ...] = ("default",)  # (): every namespace (--all-namespaces)
    kubeconfig: str | None = None  # None: in-cluster, else KUBECONFIG (the kubernetes library's own lookup)
    identity: str | None = None  # None: POD_NAME or the host name, plus a random suffix (leader.default_identity)
    pod_name: str | None = None
    hub_endpoint: str | None = None  # None: huggingface.co
    metrics_port: int = 0  # 0: no /metrics
    metrics_addr: str = "127.0.0.1"
    health_port: int = 0  # 0: no /healthz, /readyz
    health_addr: str = "127.0.0.1"
    liveness: str | None = None  # kopf's liveness endpoint URL
    verbose: bool = False
    watch_timeout: int = 300
    acceptance_interval: float = DEFAULT_INTERVAL  # 0: no acceptance monitoring
    inspect_deadline: float = INSPECT_DEADLINE
    reconciler: Settings = field(default_factory=Settings)  # resync, workers, tenancy policy, PodMonitor labels, ...
    webhook: WebhookSettings = field(default_factory=WebhookSettings)  # port 0: no admission webhook server
    election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    bench: BenchDeadlines = field(default_factory=BenchDeadlines)

    @property
    def all_namespaces(self) -> bool:
        return not self.namespaces

    @property
    def watched(self) -> list[str] | None:
        """The namespaces the caches must hold before this replica is ready (None: every namespace)."""
        return list(self.namespaces) or None

    @property
    def policy(self):
        """The tenancy policy (core/policy.py), the reconciler's and the webhook server's alike."""
        return self.reconciler.policy


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name) or ""
    if not text:
        return float(default)
    try:
        return float(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a number; unset it or give seconds, e.g. {default:g}") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name) or ""
    if not text:
        return int(default)
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a whole number; unset it or give one, e.g. {default}") from None


def engine_network_policy(listed: list[str] | tuple[str, ...] | None, own: str | None) -> tuple[str, ...] | None:
    """The namespaces whose pods may reach engine pods besides the CR's own, the operator's among them; None: the
    operator renders no NetworkPolicy."""
    if listed is None:
        return None
    return tuple(sorted(set(list(listed) + ([own] if own else []))))


def engine_ingress_from_env(env: Mapping[str, str]) -> list[str] | None:
    """SPECDEPLOY_ENGINE_NETWORK_POLICY: unset, no NetworkPolicy; else the listed namespaces (maybe none)."""
    text = env.get(ENGINE_NETWORK_POLICY_ENV)
    return None if text is None else [n for n in text.split(",") if n]


def pod_monitor_labels(text: str | None) -> dict[str, str]:
    """The extra PodMonitor labels the chart hands over (a JSON object of strings)."""
    if not text:
        return {}
    try:
        labels = json.loads(text)
    except ValueError:
        labels = None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise SettingsError(f"{POD_MONITOR_LABELS_ENV} must be a JSON object of string labels (chart value "
                            f"podMonitor.labels), got {text!r}")
    return labels


def from_env(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """The settings from the environment defaults alone (:data:`ENV`): what ``operator run``'s flags start from."""
    env = os.environ if env is None else env
    own = env.get("POD_NAMESPACE") or None
    base = Settings()
    return OperatorSettings(
        identity=env.get("SPECDEPLOY_IDENTITY") or None,
        pod_name=env.get("POD_NAME") or None,
        hub_endpoint=env.get("HF_ENDPOINT") or None,
        watch_timeout=_int(env, "SPECDEPLOY_WATCH_TIMEOUT", 300),
        acceptance_interval=_float(env, INTERVAL_ENV, DEFAULT_INTERVAL),
        inspect_deadline=_float(env, "SPECDEPLOY_INSPECT_SECONDS", INSPECT_DEADLINE),
        reconciler=replace(
            base, resync_seconds=_float(env, "SPECDEPLOY_RESYNC_SECONDS", base.resync_seconds),
            workers=_int(env, "SPECDEPLOY_WORKERS", base.workers),
            capability_ttl=_float(env, "SPECDEPLOY_CAPABILITY_TTL", base.capability_ttl),
            pod_monitor_labels=pod_monitor_labels(env.get(POD_MONITOR_LABELS_ENV)),
            engine_network_policy=engine_network_policy(engine_ingress_from_env(env), own)),
        webhook=WebhookSettings(
            namespace=own,
            resync_seconds=_float(env, "SPECDEPLOY_WEBHOOK_RESYNC_SECONDS", WebhookSettings.resync_seconds),
            cert_check_seconds=_float(env, "SPECDEPLOY_WEBHOOK_CERT_CHECK_SECONDS",
                                      WebhookSettings.cert_check_seconds)),
        bench=BenchDeadlines(
            poll_seconds=_float(env, "SPECDEPLOY_BENCH_POLL_SECONDS", BenchDeadlines.poll_seconds),
            ready_seconds=_float(env, "SPECDEPLOY_BENCH_READY_SECONDS", BenchDeadlines.ready_seconds),
            client_seconds=_float(env, "SPECDEPLOY_BENCH_CLIENT_SECONDS", BenchDeadlines.client_seconds),
            crash_restarts=_int(env, "SPECDEPLOY_BENCH_CRASH_RESTARTS", BenchDeadlines.crash_restarts)),
    )


def webhook_port_default(env: Mapping[str, str] | None = None, default: int = 9443) -> int:
    """--webhook-port when not given: SPECDEPLOY_WEBHOOK_PORT, else 9443 (a value that is not a number: 9443)."""
    env = os.environ if env is None else env
    try:
        return int(env.get(WEBHOOK_PORT_ENV) or default)
    except ValueError:
        return default

