"""Readiness (controller/health.py): ready only when the CR cache holds what a list returned and the webhook serves."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

from specdeploy.controller.health import CacheSync, HealthServer
from specdeploy.controller.kube import KubeError


class ListKube:
    def __init__(self, items=None, fail: list[int] | None = None):
        self.items, self.fail, self.calls = items or [], list(fail or []), []

    async def list(self, kind, ns, label_selector=None):
        self.calls.append((kind, ns))
        if self.fail:
            raise KubeError(self.fail.pop(0), "x", "y")
        return [o for o in self.items if ns is None or o["metadata"]["namespace"] == ns]


def cr(ns, name):
    return {"metadata": {"namespace": ns, "name": name}}


def test_cache_sync_waits_for_every_listed_cr():
    async def main():
        bodies: dict = {}
        kube = ListKube([cr("a", "x"), cr("b", "y"), cr("c", "z")], fail=[500])
        sync = CacheSync(kube, ["a", "b"], bodies, poll=0.01)
        task = asyncio.create_task(sync.run())
        await asyncio.sleep(1.2)  # the first list failed (retried after 1 s), the second one worked
        assert not sync.synced.is_set() and sync.missing == 2
        bodies[("a", "x")] = {}
        await asyncio.sleep(0.05)
        assert not sync.synced.is_set() and sync.missing == 1
        bodies[("b", "y")] = {}
        await asyncio.wait_for(sync.synced.wait(), 5)
        await task
        return kube.calls

    calls = asyncio.run(main())
    assert calls[-2:] == [("SpeculativeDeployment", "a"), ("SpeculativeDeployment", "b")]  # c is not watched


def test_cache_sync_without_the_crd_is_synced_and_all_namespaces_lists_once():
    async def main():
        a = CacheSync(ListKube(fail=[404]), ["a"], {}, poll=0.01)
        await asyncio.wait_for(a.run(), 5)
        kube = ListKube([cr("a", "x")])
        b = CacheSync(kube, None, {("a", "x"): {}}, poll=0.01)
        await asyncio.wait_for(b.run(), 5)
        return a.synced.is_set(), b.synced.is_set(), kube.calls

    assert asyncio.run(main()) == (True, True, [("SpeculativeDeployment", None)])


def test_readyz_reports_each_check():
    state = {"cachesSynced": False, "webhookServing": True}

    async def main():
        srv = HealthServer(0, lambda: dict(state), lambda: {"identity": "me", "leading": False}, addr="127.0.0.1")
        await srv.start()

        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        out = [await asyncio.to_thread(get, "/healthz"), await asyncio.to_thread(get, "/readyz")]
        state["cachesSynced"] = True
        out.append(await asyncio.to_thread(get, "/readyz"))
        await srv.stop()
        return out

    (hz, _), (s1, b1), (s2, b2) = asyncio.run(main())
    assert hz == 200 and s1 == 503 and s2 == 200
    assert json.loads(b1) == {"ready": False, "checks": {"cachesSynced": False, "webhookServing": True},
                              "identity": "me", "leading": False}
    assert json.loads(b2)["ready"] is True
