"""Issue 37 item 5 (holes 5 and 8): what the acceptance monitor trusts and what one scrape may cost.

- **Ownership, not labels**: a pod with the engine labels is scraped, probed and counted in a canary's health only
  when its controller chain leads, uid by uid, to the SpeculativeDeployment's own workload (Pod -> ReplicaSet ->
  Deployment, Pod -> StatefulSet -> LeaderWorkerSet; tests/controller/owners.py builds the chains).
- **Bounded bodies**: at most MAX_METRICS_BYTES of a /metrics body are read (a 200 MB body is a failed scrape with
  its reason, read no further); the engine's series are picked out off the event loop and bounded in number.
- **The engine API key** is read only for an admitted spec whose Secret name and key the policy allows.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import tracemalloc

import pytest
from aiohttp import web

from specdeploy.controller import monitor as mon
from specdeploy.controller.monitor import pod_target
from specdeploy.controller.scrape import (MAX_ENGINE_SERIES, MAX_METRICS_BYTES, MAX_SERIES_LINE, ScrapeRejected,
                                          engine_series, read_bounded)
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.controller.reports import Admission
from specdeploy.core.names import TRACK_CANARY, TRACK_LABEL
from specdeploy.core.policy import TenancyPolicy
from specdeploy_dev.engine_standin import EngineStandin

from owners import adopt, controller_ref, owner_uid, pod_owner, pod_owner_refs, workload
from test_monitor import KEY, NAME, NS, FakeKube, Rig, cr, pod, reports, run
import test_monitor_rollout as ro_t

# ----------------------------------------------------------------- ownership, not labels


def forged_pods() -> dict[str, dict]:
    """Ready pods with the engine labels of NAME and an http port, none owned through the uid chain."""
    other_ns_rs = "uid-replicaset-elsewhere"
    return {
        "no owner": pod("f-none", ip="10.0.1.1", owners=[]),
        "an unknown ReplicaSet": pod("f-unknown", ip="10.0.1.2",
                                     owners=[controller_ref("ReplicaSet", f"{NAME}-7d4b9c", "uid-rs-never-seen")]),
        # a tenant's ReplicaSet named like ours, controlled by the tenant's own Deployment named like ours
        "a ReplicaSet and Deployment named like ours": pod(
            "f-named", ip="10.0.1.3", owners=[controller_ref("ReplicaSet", f"{NAME}-7d4b9c", "uid-rs-tenant")]),
        "a ReplicaSet of our Deployment in another namespace": pod(
            "f-ns", ip="10.0.1.4", owners=[controller_ref("ReplicaSet", f"{NAME}-7d4b9c", other_ns_rs)]),
        "a pod controlled by the Deployment itself": pod(
            "f-direct", ip="10.0.1.5", owners=[controller_ref("Deployment", NAME, "uid-deployment-team-qwen")]),
        "a ReplicaSet of another deployment's Deployment": pod("f-other", ip="10.0.1.6",
                                                               owners=pod_owner_refs(NS, "other")),
        "a stable ReplicaSet's pod labelled canary": {**pod("f-canary", ip="10.0.1.7")},
        "an owner reference that is not the controller": pod(
            "f-notctl", ip="10.0.1.8", owners=[{**pod_owner_refs(NS, NAME)[0], "controller": False}]),
    }


def forge_owners(r: Rig) -> None:
    """The tenant's objects the forged pods point at, as the watches would show them."""
    tenant_dep = {"kind": "Deployment", "metadata": {"name": NAME, "namespace": NS, "uid": "uid-tenant-dep"}}
    r.m.observe_owner("ADDED", {"kind": "ReplicaSet", "metadata": {
        "name": f"{NAME}-7d4b9c", "namespace": NS, "uid": "uid-rs-tenant",
        "ownerReferences": [controller_ref("Deployment", NAME, tenant_dep["metadata"]["uid"])]}})
    ours = r.c.children[("Deployment", NS, NAME)]["metadata"]["uid"]
    r.m.observe_owner("ADDED", {"kind": "ReplicaSet", "metadata": {
        "name": f"{NAME}-7d4b9c", "namespace": "elsewhere", "uid": "uid-replicaset-elsewhere",
        "ownerReferences": [controller_ref("Deployment", NAME, ours)]}})


def test_a_labelled_pod_not_owned_by_the_workload_is_never_scraped():
    async def scenario():
        r = Rig(cr(), cr(name="other"))
        forge_owners(r)
        ours = r.serve(pod("qwen-0", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        forged = forged_pods()
        forged["a stable ReplicaSet's pod labelled canary"]["metadata"]["labels"][TRACK_LABEL] = TRACK_CANARY
        for p in forged.values():
            r.serve(p, EngineStandin("vllm", "collapsed"))
        await r.tick()
        assert await r.tick() == [KEY]
        assert r.fetched and set(r.fetched) == {pod_target(pod("qwen-0", ip="10.0.0.1")).url}
        assert r.acceptance()["podsReporting"] == 1 and r.cond()["reason"] == "Healthy"
        assert r.acceptance()["length"] == round(ours.expected_length(), 2)
        assert "rollout" not in reports(r.c)  # the canary-labelled stable pod makes no canary
        assert r.m.untrusted == {KEY: len(forged)}

    run(scenario())


@pytest.mark.parametrize("what", sorted(forged_pods()))
def test_each_forgery_alone_is_refused(what):
    async def scenario():
        r = Rig(cr(), cr(name="other"))
        forge_owners(r)
        p = forged_pods()[what]
        if what == "a stable ReplicaSet's pod labelled canary":
            p["metadata"]["labels"][TRACK_LABEL] = TRACK_CANARY
        r.serve(p, EngineStandin("vllm", "healthy"))
        for _ in range(3):
            await r.tick()
        assert r.fetched == [] and r.cond() is None

    run(scenario())


def test_the_workload_must_be_controlled_by_the_speculativedeployment_itself():
    async def scenario():
        r = Rig()
        p = pod("qwen-0", ip="10.0.0.1")
        r.serve(p, EngineStandin("vllm", "healthy"))
        await r.tick()
        assert len(r.fetched) == 1
        dep = r.c.children[("Deployment", NS, NAME)]
        # the same Deployment, now controlled by another object (or a deleted and re-created CR's old uid)
        dep["metadata"]["ownerReferences"] = [controller_ref("SpeculativeDeployment", NAME, "uid-of-another")]
        await r.tick()
        assert len(r.fetched) == 1
        del r.c.children[("Deployment", NS, NAME)]  # and without it in the cache
        adopt(r.m, r.c.children, cr())
        r.m.observe_owner("DELETED", pod_owner(workload(cr())))  # its ReplicaSet went
        await r.tick()
        assert len(r.fetched) == 1

    run(scenario())


def test_a_multi_node_leader_is_trusted_through_its_statefulset():
    async def scenario():
        r = Rig()
        del r.c.children[("Deployment", NS, NAME)]
        lws = adopt(r.m, r.c.children, cr(), kind="LeaderWorkerSet")
        leader = pod("qwen-0", ip="10.0.0.1", owners=pod_owner_refs(NS, NAME, "LeaderWorkerSet"))
        r.serve(leader, EngineStandin("vllm", "healthy"))
        # a pod naming the leader StatefulSet's uid with the wrong kind is not its pod
        r.serve(pod("f-kind", ip="10.0.0.2", owners=[controller_ref(
            "ReplicaSet", NAME, owner_uid(NS, NAME, "LeaderWorkerSet"))]), EngineStandin("vllm", "collapsed"))
        # a ReplicaSet that names the LeaderWorkerSet's uid as a Deployment's: not a link of the chain
        r.m.observe_owner("ADDED", {"kind": "ReplicaSet", "metadata": {
            "name": f"{NAME}-lws", "namespace": NS, "uid": "uid-rs-lws",
            "ownerReferences": [controller_ref("Deployment", NAME, lws["metadata"]["uid"])]}})
        r.serve(pod("f-rs", ip="10.0.0.3", owners=[controller_ref("ReplicaSet", f"{NAME}-lws", "uid-rs-lws")]),
                EngineStandin("vllm", "collapsed"))
        await r.tick()
        assert await r.tick() == [KEY] and r.acceptance()["podsReporting"] == 1
        assert {u for u in r.fetched} == {pod_target(leader).url}
        assert r.m.owners[owner_uid(NS, NAME, "LeaderWorkerSet")][2:] == ("LeaderWorkerSet", lws["metadata"]["uid"])

    run(scenario())


def test_owners_kept_are_replicasets_of_deployments_and_statefulsets_of_leaderworkersets_only():
    m = Rig().m
    before = dict(m.owners)
    for kind, ctl in (("ReplicaSet", "StatefulSet"), ("StatefulSet", "Deployment"), ("Job", "CronJob")):
        m.observe_owner("ADDED", {"kind": kind, "metadata": {"name": "x", "namespace": NS, "uid": f"uid-{kind}",
                                                             "ownerReferences": [controller_ref(ctl, "y", "uid-y")]}})
    m.observe_owner("ADDED", {"kind": "ReplicaSet", "metadata": {"name": "bare", "namespace": NS, "uid": "uid-bare"}})
    assert m.owners == before
    rs = pod_owner(workload(cr()))
    m.observe_owner("DELETED", rs)
    assert rs["metadata"]["uid"] not in m.owners


def test_only_unowned_pods_left_says_so():
    async def scenario():
        r = Rig()
        p = pod("qwen-0", ip="10.0.0.1")
        r.serve(p, EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        assert r.cond()["reason"] == "Healthy"
        r.m.observe_pod("DELETED", p)
        r.serve(pod("f-none", ip="10.0.1.1", owners=[]), EngineStandin("vllm", "healthy"))
        assert await r.tick() == [KEY]
        c = r.cond()
        assert (c["status"], c["reason"]) == ("Unknown", "NoReadyPods")
        assert "1 labelled engine pod(s) not owned by its Deployment or LeaderWorkerSet ignored" in c["message"]

    run(scenario())


def test_an_unowned_canary_pod_is_neither_scraped_nor_probed_nor_counted():
    """A tenant's pod labelled as the canary (owned by nothing of ours, or by the stable ReplicaSet) while a canary
    Deployment exists: no scrape, no probe (no API key sent to it), not in the canary's health; an owned one is."""
    async def scenario(s, forged, c):
        r = ro_t.Rig(ro_t.cr())
        adopt(r.m, r.c.children, r.c.bodies[ro_t.KEY], TRACK_CANARY)
        r.serve(ro_t.pod("qwen-a", ip="127.0.0.1", port=s.port), s)
        for i, owners in enumerate(([], pod_owner_refs(NS, NAME))):  # none; the stable ReplicaSet
            f = ro_t.pod(f"forged-{i}", canary=True, ip="127.0.0.1", port=forged.port)
            f["metadata"]["ownerReferences"] = owners
            r.serve(f, forged)
        for _ in range(2):
            await r.tick()
            await r.m.canary.settle()
        assert forged.steps == 0 and forged.requests == 0
        assert r.rollout["probe"] is None and r.rollout["health"].pods == 0
        r.serve(ro_t.pod("qwen-canary-a", canary=True, ip="127.0.0.1", port=c.port), c)
        await r.tick()
        await r.m.canary.settle()
        assert r.rollout["probe"].identical == 4 and r.rollout["health"].pods == 1
        assert forged.requests == 0

    s, forged, c = ro_t.standin(), ro_t.standin(), ro_t.standin()
    try:
        run(scenario(s, forged, c))
    finally:
        for x in (s, forged, c):
            x.stop()


# ----------------------------------------------------------------- bounded bodies, parsed off the loop


LINE = b'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.0\n'
BIG = 200 * 1024 * 1024  # the body of the attack (issue 37, hole 5)


class BigMetrics:
    """A /metrics endpoint answering 200 MB of repeated engine lines, generated while it is sent (streamed, or with
    its Content-Length announced); counts the bytes it managed to hand to the socket, per request."""

    def __init__(self, announce: bool):
        self.announce, self.served = announce, []

    @property
    def requests(self) -> int:
        return len(self.served)

    async def handle(self, request):
        self.served.append(0)
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        if self.announce:
            resp.content_length = BIG
        await resp.prepare(request)
        chunk = LINE * (65536 // len(LINE))
        try:
            while self.served[-1] < BIG:
                await resp.write(chunk)
                self.served[-1] += len(chunk)
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            pass  # the monitor stopped reading and closed the connection
        return resp

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return site._server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("announce", [False, True], ids=["streamed", "content-length"])
def test_a_200_mb_body_is_a_failed_scrape_read_no_further(announce):
    async def scenario():
        big = BigMetrics(announce)
        port = await big.start()
        c = Controller(FakeKube(), resolver=None, settings=Settings(workers=0))
        c.bodies[KEY] = cr()
        m = mon.AcceptanceMonitor(c.cache, 30, timeout=30)
        adopt(m, c.children, c.bodies[KEY])
        m.observe_pod("ADDED", pod(ip="127.0.0.1", port=port))
        try:
            tracemalloc.start()
            _, text, err = await m._scrape(m.targets[(NS, "qwen-0")])
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            for _ in range(mon.SCRAPE_FAILED_TICKS):  # the same failure through the monitor's ticks
                await m.tick()
        finally:
            await m.close()
            await big.runner.cleanup()
        assert text is None and "MAX_METRICS_BYTES" in err and str(MAX_METRICS_BYTES) in err
        assert ("Content-Length" in err) == announce
        # the bound, not the body: what the server could hand over is the bound plus the sockets' buffers
        assert max(big.served) < MAX_METRICS_BYTES + 32 * 1024 * 1024 < BIG, big.served
        assert peak < 3 * MAX_METRICS_BYTES, peak
        cond = c.cache.acceptances[KEY].condition
        assert (cond["reason"], big.requests) == ("ScrapeFailed", 1 + mon.SCRAPE_FAILED_TICKS)
        assert "MAX_METRICS_BYTES" in cond["message"]

    run(scenario())


class Chunks:
    """A StreamReader stand-in: ``n`` chunks of ``size`` bytes; counts what was taken."""

    def __init__(self, n: int, size: int):
        self.n, self.size, self.taken = n, size, 0

    async def iter_any(self):
        for _ in range(self.n):
            self.taken += self.size
            yield b"x" * self.size


def test_read_bounded_stops_at_the_bound():
    small = Chunks(4, 1000)
    assert run(read_bounded(small, None, limit=4000)) == b"x" * 4000
    big = Chunks(10_000, 64 * 1024)  # 640 MiB if read to the end
    with pytest.raises(ScrapeRejected, match="larger than the 1048576 bytes"):
        run(read_bounded(big, None, limit=1024 * 1024))
    assert big.taken <= 1024 * 1024 + 64 * 1024
    announced = Chunks(10, 10)
    with pytest.raises(ScrapeRejected, match="Content-Length"):
        run(read_bounded(announced, 5000, limit=4000))
    assert announced.taken == 0


def test_engine_series_keeps_the_engines_lines_only():
    body = (b"# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
            b'vllm:num_requests_running{engine="0"} 3.0\r\n'
            b'sglang:spec_accept_length{tp_rank="0"} 3.5\n'
            b"process_start_time_seconds 1.7e9\n"
            b"process_start_time_seconds_other 1\n"
            b'python_gc_objects_collected_total{generation="0"} 12\n'
            b'vllm:time_to_first_token_seconds_bucket{le="0.1"} 4\n'
            b'vllm:time_to_first_token_seconds_sum 4.5\n'
            b"vllm:long{x=\"" + b"a" * MAX_SERIES_LINE + b"\"} 1\n")
    assert engine_series(body).splitlines() == [
        'vllm:num_requests_running{engine="0"} 3.0', 'sglang:spec_accept_length{tp_rank="0"} 3.5',
        "process_start_time_seconds 1.7e9", "vllm:time_to_first_token_seconds_sum 4.5"]
    assert engine_series(body.decode()) == engine_series(body)  # an injected fetch's text: the same


def test_engine_series_is_bounded():
    assert len(engine_series(LINE * MAX_ENGINE_SERIES).splitlines()) == MAX_ENGINE_SERIES
    with pytest.raises(ScrapeRejected, match="more than 5000 engine series"):
        engine_series(LINE * (MAX_ENGINE_SERIES + 1))
    with pytest.raises(ScrapeRejected, match="MAX_METRICS_BYTES"):
        engine_series(b"#" * (MAX_METRICS_BYTES + 1))


def test_the_series_are_picked_off_the_event_loop(monkeypatch):
    threads = []
    real = mon.engine_series

    def spy(body):
        threads.append(threading.current_thread())
        return real(body)

    monkeypatch.setattr(mon, "engine_series", spy)

    async def scenario():
        r = Rig()
        r.serve(pod("qwen-0", ip="10.0.0.1"), EngineStandin("vllm", "healthy"))
        await r.tick()
        await r.tick()
        return threading.current_thread(), r.cond()

    loop_thread, cond = run(scenario())
    assert cond["reason"] == "Healthy" and len(threads) == 2
    assert all(t is not loop_thread and t.name.startswith("specdeploy-metrics") for t in threads)


# ----------------------------------------------------------------- the engine API key


KEY_VALUE = "sk-engine-4242"
SECRET = {"data": {"key": base64.b64encode(KEY_VALUE.encode()).decode()}}


def _keyed_rig(**kw):
    kube = ro_t.Kube({(NS, "engine-key"): SECRET})
    return ro_t.Rig(ro_t.cr(api_key=True), kube=kube, **kw), kube


@pytest.mark.parametrize("why, kw", [
    ("refused by the policy (PolicyRefused): never admitted", {"admitted": False}),
    ("the policy no longer allows the key", {"policy": TenancyPolicy(token_secrets=("engine-key",))}),
    ("the policy no longer allows the Secret", {"policy": TenancyPolicy(api_key_secret_keys=("key",))}),
])
def test_the_secret_is_not_read_unless_admitted_and_allowed(why, kw):
    async def scenario(s, c):
        r, kube = _keyed_rig(**kw)
        await ro_t._two_tracks(r, s, c)
        for _ in range(3):
            await r.tick()
            await r.m.canary.settle()
        assert kube.reads == [], why
        assert r.rollout["probe"] is None and s.requests == c.requests == 0  # scrapes are in-process: no request
        refusal = r.m.canary.api_key_refusal(ro_t.KEY, r.c.bodies[ro_t.KEY])
        assert refusal and "not read" in refusal and KEY_VALUE not in refusal
        assert (await r.m.canary._api_key(ro_t.KEY, r.c.bodies[ro_t.KEY])) == (None, refusal)
        assert kube.reads == []

    s, c = ro_t.standin(api_key=KEY_VALUE), ro_t.standin(api_key=KEY_VALUE)
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def test_the_secret_is_read_once_the_generation_is_admitted():
    async def scenario(s, c):
        r, kube = _keyed_rig(admitted=False)
        body = r.c.bodies[ro_t.KEY]
        r.c.cache.admitted.put(ro_t.KEY, Admission(body["metadata"]["uid"], 0))  # an older generation was admitted
        await ro_t._two_tracks(r, s, c)
        await r.tick()
        await r.m.canary.settle()
        assert kube.reads == [] and r.rollout["probe"] is None
        r.c.cache.admitted.put(ro_t.KEY, Admission(body["metadata"]["uid"], body["metadata"]["generation"]))  # the reconciler
        await r.tick()
        await r.m.canary.settle()
        assert kube.reads == [("Secret", NS, "engine-key")] and r.rollout["probe"].identical == 4

    s, c = ro_t.standin(api_key=KEY_VALUE), ro_t.standin(api_key=KEY_VALUE)
    try:
        run(scenario(s, c))
    finally:
        s.stop()
        c.stop()


def _api_key_cr(key: str) -> dict:
    body = cr()
    body["spec"]["engine"]["apiKey"] = {"secretKeyRef": {"name": "engine-key", "key": key}}
    return body


class StopResolver:
    """Resolution ends the reconcile (the admission decision comes before it)."""

    configmaps: dict = {}

    async def resolve(self, cr_, role):
        from specdeploy.controller.resolve import ResolutionError

        raise ResolutionError("ConfigNotFound", "stop here", retryable=False, delay=60)


def test_the_reconciler_admits_only_what_the_policy_allows():
    policy = TenancyPolicy(token_secrets=("engine-key",), api_key_secret_keys=("api-key",))

    async def scenario():
        kube = FakeKube()
        c = Controller(kube, resolver=StopResolver(), settings=Settings(workers=0, policy=policy))
        c.bodies[KEY] = _api_key_cr("api-key")
        await c.reconcile(KEY)
        assert c.cache.admitted[KEY] == Admission("uid-qwen", 1)
        refused = _api_key_cr("aws-secret-access-key")
        refused["metadata"]["generation"] = 2
        c.bodies[KEY] = refused
        await c.reconcile(KEY)
        assert KEY not in c.cache.admitted  # refused: the monitor reads no Secret for it
        progressing = [x for x in kube.patches[-1]["status"]["conditions"] if x["type"] == "Progressing"]
        assert progressing[0]["reason"] == "PolicyRefused"
        assert "spec.engine.apiKey.secretKeyRef.key" in progressing[0]["message"]
        assert mon.monitor_for(c, 30).policy is policy  # the monitor asks the same policy
        await c.observe_cr("DELETED", c.bodies[KEY])
        assert KEY not in c.cache.admitted

    run(scenario())


def test_the_owner_watches_are_label_selected_by_the_api_server():
    """Only the engine ReplicaSets and the LeaderWorkerSets' StatefulSets reach the operator (RBAC: list, watch;
    tests/chart/test_chart_rbac.py derives the rule from these handlers)."""
    import kopf
    from kopf._cogs.structs.references import Resource

    from specdeploy.controller import handlers
    from specdeploy.core import names as N

    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    selectors = settings.watching.label_selectors
    assert selectors.collect(Resource("apps", "v1", "replicasets", kind="ReplicaSet")) == [mon.ENGINE_POD_SELECTOR]
    assert selectors.collect(Resource("apps", "v1", "statefulsets", kind="StatefulSet")) == [N.LWS_NAME_LABEL]
    assert selectors.collect(Resource("", "v1", "pods", kind="Pod")) == [mon.ENGINE_POD_SELECTOR]
    watched = {(h.selector.group, h.selector.plural or h.selector.any_name)
               for h in kopf.get_default_registry()._watching.get_all_handlers()}
    assert {("apps", "replicasets"), ("apps", "statefulsets")} <= watched
