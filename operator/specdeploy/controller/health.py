"""Probes of every replica: ``/healthz`` (liveness) and ``/readyz`` (readiness), plain HTTP.

Ready means this replica can do its part whether or not it leads: the admission webhook server
is serving (when one is configured) and the watch caches have synced (``CacheSync``). The chart's
readiness probe points here, so a replica enters the webhook Service's endpoints only then, and a
rolling update (maxUnavailable 0) waits for it before stopping an old one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from aiohttp import web

from .kube import Kube, KubeError

log = logging.getLogger("specdeploy.health")


class CacheSync:
    """The CR cache has synced once it holds every SpeculativeDeployment a list taken after start names.

    kopf's watches list first and then stream, but tell handlers nothing when the initial list is
    done; so one list of our own, and a wait until the cache (``bodies``) has each of its keys."""

    def __init__(self, kube: Kube, namespaces: list[str] | None, bodies: dict, poll: float = 0.2):
        self.kube, self.namespaces, self.bodies, self.poll = kube, namespaces, bodies, poll
        self.synced = asyncio.Event()
        self.missing: int | None = None

    async def run(self) -> None:
        want: set | None = None
        while want is None:
            try:
                want = set()
                for ns in self.namespaces or [None]:
                    try:
                        items = await self.kube.list("SpeculativeDeployment", ns)
                    except KubeError as e:
                        if e.status != 404:  # 404: the CRD is not installed yet, so there is nothing to cache
                            raise
                        items = []
                    for o in items:
                        meta = o.get("metadata") or {}
                        want.add((meta.get("namespace") or "default", meta.get("name")))
            except Exception as e:  # noqa: BLE001 - API errors, broken connections: retried
                log.info("cache sync: listing SpeculativeDeployments failed (%s); retrying", e)
                want = None
                await asyncio.sleep(1.0)
        while True:
            self.missing = len([k for k in want if k not in self.bodies])
            if not self.missing:
                break
            await asyncio.sleep(self.poll)
        log.info("cache sync: %d SpeculativeDeployments cached", len(want))
        self.synced.set()


class HealthServer:
    def __init__(self, port: int, checks: Callable[[], dict[str, bool]], details: Callable[[], dict[str, Any]],
                 addr: str = "0.0.0.0"):
        self.port, self.addr, self.checks, self.details = port, addr, checks, details
        self._runner: web.AppRunner | None = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        checks = self.checks()
        ok = all(checks.values())
        body = {"ready": ok, "checks": checks, **self.details()}
        return web.Response(status=200 if ok else 503, text=json.dumps(body), content_type="application/json")

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)])
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.addr, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        if not self.port:
            server = site._server  # noqa: SLF001 - aiohttp exposes no public accessor
            if server is not None and server.sockets:
                self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
