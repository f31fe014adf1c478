"""``specdeploy operator run``: start kopf with the handlers, in-cluster or from KUBECONFIG."""

from __future__ import annotations

import logging
import os


def run(namespaces: list[str], all_namespaces: bool, *, kubeconfig: str | None = None, metrics_port: int = 8080,
        metrics_addr: str = "127.0.0.1", bind_addr: str = "127.0.0.1", liveness: str | None = None, resync_seconds: float | None = None,
        verbose: bool = False, webhook=None, policy=None, election=None, health_port: int = 0,
        engine_network_policy: list[str] | None = None) -> int:
    """``webhook``: a ``webhooks.WebhookSettings`` (port 0 or None: no admission webhook server).
    ``metrics_addr``: where /metrics listens; ``bind_addr``: where the health probes listen (the
    webhook server's address is ``webhook.addr``)."""
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
        os.environ["SPECDEPLOY_KUBECONFIG"] = kubeconfig
    os.environ["SPECDEPLOY_METRICS_PORT"] = str(metrics_port)
    os.environ["SPECDEPLOY_METRICS_ADDR"] = metrics_addr
    if resync_seconds is not None:
        os.environ["SPECDEPLOY_RESYNC_SECONDS"] = str(resync_seconds)
    if webhook is not None:
        os.environ.update(webhook.to_env())
    if election is not None:  # a leader.LeaderElectionSettings
        os.environ.update(election.to_env())
    if health_port:
        os.environ["SPECDEPLOY_HEALTH_PORT"] = str(health_port)
        os.environ["SPECDEPLOY_HEALTH_ADDR"] = bind_addr
    # the namespaces the CR cache must hold before this replica is ready ("" : all)
    os.environ["SPECDEPLOY_WATCH_NAMESPACES"] = "" if all_namespaces else ",".join(namespaces or ["default"])
    if engine_network_policy is not None:  # a NetworkPolicy per SpeculativeDeployment (reconciler.py)
        from .reconciler import ENGINE_NETWORK_POLICY_ENV

        os.environ[ENGINE_NETWORK_POLICY_ENV] = ",".join(engine_network_policy)
    if policy is not None:
        from ..core.policy import POLICY_ENV

        os.environ[POLICY_ENV] = policy.to_env()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .optional_apis import install as quiet_optional_apis

    quiet_optional_apis()  # LeaderWorkerSet and PodMonitor missing: one INFO line, not kopf's WARNING each scan
    import kopf

    from . import handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        clusterwide=all_namespaces,
        namespaces=[] if all_namespaces else (namespaces or ["default"]),
        standalone=True,
        liveness_endpoint=liveness,
    )
    return 0
