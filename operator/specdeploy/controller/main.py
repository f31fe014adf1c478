"""``specdeploy operator run``: start kopf with the handlers, in-cluster or from a kubeconfig.

What it runs with is one object, settings.OperatorSettings (built by cli/operator.py from the flags), handed to
kopf's memo: ``memo.settings``, and ``memo.operator`` (handlers.Operator) for the running parts. Nothing goes
through the environment."""

from __future__ import annotations

import logging

from .settings import OperatorSettings


def run(settings: OperatorSettings) -> int:
    logging.basicConfig(level=logging.DEBUG if settings.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .optional_apis import install as quiet_optional_apis

    quiet_optional_apis()  # LeaderWorkerSet and PodMonitor missing: one INFO line, not kopf's WARNING each scan
    import kopf

    from . import handlers  # registers the handlers

    kopf.run(
        clusterwide=settings.all_namespaces,
        namespaces=list(settings.namespaces),
        standalone=True,
        liveness_endpoint=settings.liveness,
        memo=kopf.Memo(settings=settings, operator=handlers.Operator(settings)),
    )
    return 0
