"""Pure parts of the operator: conditions, status diffing, the work queue, drift comparison, inspection."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json

import pytest

from testkit import pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.controller import status as st
from specdeploy.controller.queue import Backoff, WorkQueue
from specdeploy.controller.resolve import ResolutionError, build_inspector_job, decode_inspection
from specdeploy.core.checker import check
from specdeploy.core.engineconfig import config_digest
from specdeploy.core import names as N
from specdeploy.core.findings import Finding, Severity, Source


def _types(conds):
    return {c["type"]: (c["status"], c["reason"]) for c in conds}


def test_compatible_and_rolling_out():
    d, t = pair("qwen3.6-27b")
    obs = st.Observation(generation=3, findings=check(d, t), workload_exists=True, workload_updated=True,
                         desired_replicas=2, replicas=2, ready_replicas=1, updated_replicas=2)
    got = _types(st.compute_conditions(obs))
    assert got["DrafterCompatible"] == ("True", "Compatible")
    assert got["Progressing"] == ("True", "RollingOut")
    assert got["Ready"] == ("False", "ReplicasNotReady")
    assert got["Degraded"] == ("True", "ReplicasUnavailable")


def test_all_ready_is_rolled_out():
    obs = st.Observation(generation=1, findings=[], workload_exists=True, workload_updated=True,
                         desired_replicas=1, replicas=1, ready_replicas=1, updated_replicas=1)
    got = _types(st.compute_conditions(obs))
    assert got["Progressing"] == ("False", "RolledOut") and got["Ready"] == ("True", "AllReplicasReady")
    assert got["Degraded"] == ("False", "AsExpected")


def test_incompatible_without_workload_blocks():
    d, t = pair("qwen3.6-27b")
    d["dflash_config"]["target_layer_ids"][4] = 64
    obs = st.Observation(generation=1, findings=check(d, t))
    conds = st.compute_conditions(obs)
    got = _types(conds)
    assert got["DrafterCompatible"] == ("False", "TargetLayerOutOfRange")
    assert "$.dflash_config.target_layer_ids[4]" in conds[0]["message"]
    assert got["Progressing"] == ("False", "BlockedByCheck")
    assert got["Ready"] == ("False", "Blocked")
    assert got["Degraded"] == ("False", "AsExpected")


def test_incompatible_with_running_workload_is_degraded_not_torn_down():
    f = Finding(Severity.ERROR, "HiddenSizeMismatch", Source.DRAFTER, "$.hidden_size", "x")
    obs = st.Observation(generation=2, findings=[f], workload_exists=True, desired_replicas=1, ready_replicas=1)
    got = _types(st.compute_conditions(obs))
    assert got["Degraded"] == ("True", "RunningPreviousConfig")
    assert got["Ready"] == ("True", "AllReplicasReady")


def test_resolution_error_is_unknown():
    obs = st.Observation(generation=1, resolution_error=("ConfigMapNotFound", "ConfigMap default/x does not exist"))
    got = _types(st.compute_conditions(obs))
    assert got["DrafterCompatible"] == ("Unknown", "ConfigMapNotFound")
    assert got["Progressing"][1] == "ConfigMapNotFound"


def test_blocked_reason_wins():
    obs = st.Observation(generation=1, findings=[], blocked_reason=("LeaderWorkerSetMissing", "install LWS"))
    got = _types(st.compute_conditions(obs))
    assert got["Progressing"] == ("False", "LeaderWorkerSetMissing")


def test_transition_time_kept_while_status_unchanged_and_other_types_kept():
    prev = [{"type": "Ready", "status": "False", "reason": "A", "message": "", "lastTransitionTime": "T0"},
            {"type": "SpeculationHealthy", "status": "True", "reason": "Healthy", "message": "", "lastTransitionTime": "T0"}]
    new = [{"type": "Ready", "status": "False", "reason": "B", "message": "m"}]
    merged = st.merge_conditions(prev, new, 5, "T1")
    assert merged[0]["lastTransitionTime"] == "T0" and merged[0]["observedGeneration"] == 5
    assert any(c["type"] == "SpeculationHealthy" for c in merged)
    flipped = st.merge_conditions(prev, [{"type": "Ready", "status": "True", "reason": "C", "message": ""}], 5, "T1")
    assert flipped[0]["lastTransitionTime"] == "T1"


def test_status_changed_ignores_times_only():
    conds = [{"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "T0", "observedGeneration": 1}]
    cur = {"conditions": conds, "observedGeneration": 1, "readyReplicas": 1}
    same = {"conditions": [{**conds[0], "lastTransitionTime": "T9"}], "observedGeneration": 1, "readyReplicas": 1}
    assert not st.status_changed(cur, same)
    assert st.status_changed(cur, {**same, "readyReplicas": 0})
    assert st.status_changed(cur, {**same, "conditions": [{**conds[0], "message": "new"}]})


@pytest.mark.parametrize("cond,want", [
    ({"type": "DrafterCompatible", "status": "False", "reason": "X", "message": "m"}, ("Warning", "X")),
    ({"type": "DrafterCompatible", "status": "Unknown", "reason": "ModelNotFound", "message": "m"}, ("Warning", "ModelNotFound")),
    ({"type": "DrafterCompatible", "status": "Unknown", "reason": "ConfigsPending", "message": "m"}, None),
    ({"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "m"}, ("Normal", "AllReplicasReady")),
    ({"type": "Progressing", "status": "True", "reason": "RollingOut", "message": "m"}, None),
    ({"type": "Degraded", "status": "True", "reason": "RunningPreviousConfig", "message": "m"}, ("Warning", "RunningPreviousConfig")),
])
def test_events_on_transitions(cond, want):
    ev = st.event_for(cond)
    assert (ev[:2] if ev else None) == want


def test_work_queue_serialises_a_key_and_requeues_while_active():
    async def scenario():
        now = [0.0]
        q = WorkQueue(clock=lambda: now[0])
        await q.add("a")
        await q.add("b")
        k1 = await q.get()
        await q.add(k1)  # changed while being processed
        k2 = await q.get()
        assert {k1, k2} == {"a", "b"}
        got = asyncio.ensure_future(q.get())
        await asyncio.sleep(0)
        assert not got.done()  # k1 is active: not handed out twice
        await q.done(k1)
        assert await asyncio.wait_for(got, 1) == k1
        await q.close()
        assert await q.get() is None

    asyncio.run(scenario())


def test_work_queue_delay():
    async def scenario():
        now = [100.0]
        q = WorkQueue(clock=lambda: now[0])
        await q.add("k", delay=30)
        waiter = asyncio.ensure_future(q.get())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        now[0] = 131.0
        await q.add("other", delay=1000)  # wakes the waiter to re-check the clock
        assert await asyncio.wait_for(waiter, 1) == "k"

    asyncio.run(scenario())


def test_work_queue_earliest_due_first_skipping_active_keys():
    """The heap order: earliest due time first, a lowered due time counts, a key being processed is passed
    over (and handed out once done), a key taken leaves no stale entry behind."""
    async def scenario():
        now = [0.0]
        q = WorkQueue(clock=lambda: now[0])
        await q.add("late", delay=5)
        await q.add("soon", delay=2)
        await q.add("later", delay=9)
        await q.add("later", delay=1)  # lowered: now the earliest
        now[0] = 10.0
        assert await q.get() == "later"
        await q.add("later")  # due again (now) while active: passed over
        assert await q.get() == "soon"
        assert await q.get() == "late"
        waiter = asyncio.ensure_future(q.get())
        await asyncio.sleep(0)
        assert not waiter.done()  # only "later" is due, and it is active
        await q.done("later")
        assert await asyncio.wait_for(waiter, 1) == "later"
        assert len(q) == 0
        await q.done("later")
        await q.add("again", delay=1)
        now[0] = 11.0
        assert await q.get() == "again"

    asyncio.run(scenario())


def test_child_echo_of_the_cached_version_queues_nothing():
    """A child event carrying the resourceVersion the cache holds (the echo of our own apply, cached from its
    response) is no reason to reconcile; any other version, or a deletion, is."""
    from specdeploy.controller.cache import Caches

    c = Caches()
    c.bodies[("ns", "a")] = {"metadata": {"name": "a", "namespace": "ns"}}
    ref = [{"kind": "SpeculativeDeployment", "name": "a", "uid": "u1", "controller": True}]

    def child(rv):
        return {"kind": "Service", "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                                                "ownerReferences": ref}}

    assert c.observe_child("ADDED", child("5")) == [("ns", "a")]
    assert c.observe_child("MODIFIED", child("5")) == []  # what the cache holds already
    assert c.observe_child("MODIFIED", child("6")) == [("ns", "a")]
    assert c.children[("Service", "ns", "a")]["metadata"]["resourceVersion"] == "6"
    assert c.observe_child("DELETED", child("6")) == [("ns", "a")]
    assert ("Service", "ns", "a") not in c.children
    assert c.observe_child("ADDED", child("6")) == [("ns", "a")]  # re-created after the deletion: not cached


def test_backoff():
    b = Backoff(5, 60)
    assert [b.failed("k") for _ in range(6)] == [5, 10, 20, 40, 60, 60]
    b.succeeded("k")
    assert b.failed("k") == 5


def test_inspection_round_trip(tmp_path):
    _, t = pair("kimi-k2.6")
    canonical = json.dumps(t, sort_keys=True, separators=(",", ":")).encode()
    msg = json.dumps({"digest": config_digest(t), "gz": base64.b64encode(gzip.compress(canonical)).decode()})
    assert len(msg) < 4096
    doc, digest = decode_inspection(msg)
    assert doc == t and digest == config_digest(t)
    with pytest.raises(ResolutionError) as e:
        decode_inspection("not json")
    assert e.value.reason == "InspectionInvalid"


def _admitted(cr):
    """``cr`` through the one gate (core/render/gate.admit) under a policy listing its claim."""
    from specdeploy.core.policy import TenancyPolicy
    from specdeploy.core.render import admit

    return admit(cr, TenancyPolicy(pvcs=("models",)))


def test_a_raw_cr_is_neither_resolved_nor_inspected():
    """The resolver and the inspector Job take an admitted spec only: nothing reads a token or mounts a claim for a
    spec the tenancy policy did not pass (issue 37 hole 1)."""
    from specdeploy.controller.resolve import Resolver
    from specdeploy.core.policy import TenancyPolicy
    from specdeploy.core.render import PolicyRefused, admit

    cr = _pvc_cr()
    kube = _Kube()
    with pytest.raises(TypeError, match="Admitted"):
        asyncio.run(Resolver(kube).resolve(cr, "target"))
    with pytest.raises(TypeError, match="Admitted"):
        build_inspector_job(cr, "target", "img:1")
    with pytest.raises(PolicyRefused) as e:  # the claim is not listed
        admit(cr, TenancyPolicy())
    assert [f.code for f in e.value.findings] == ["PolicyClaimNotAllowed"] and kube.writes == []


def test_inspector_job_is_read_only_and_owned():
    cr = SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
        "spec": {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "qwen/27b", "pvc": {"claimName": "models"}},
                 "drafter": {"model": "z/d"}, "gpu": {"type": "b300"}}})
    job = build_inspector_job(_admitted(cr), "target", "img:1")
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == "m-inspect-target" and job["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert pod["containers"][0]["command"] == ["specdeploy-runtime", "inspect-config", "--path", "/models/target/qwen/27b"]
    assert pod["containers"][0]["volumeMounts"][0]["readOnly"] is True


def test_worker_keeps_backoff_growing_across_failed_resolutions():
    """A reconcile that returns a retry delay must not reset the key's backoff (regression)."""
    from specdeploy.controller.reconciler import Controller, Settings

    class Stub(Controller):
        async def reconcile(self, key):
            self.calls += 1
            if self.calls == 4:
                await self.queue.close()  # the worker exits at its next get()
            return self.backoff.failed(key)  # what a resolution failure returns

    async def scenario():
        now = [0.0]
        c = Stub(kube=None, resolver=None, settings=Settings(workers=1, backoff_min=5, backoff_max=300),
                 clock=lambda: now[0])
        c.calls = 0
        delays = []
        real_add = c.queue.add

        async def add(key, delay=0.0):
            if delay:
                delays.append(delay)
                now[0] += delay  # jump the clock by the delay instead of waiting for it
            await real_add(key)

        c.queue.add = add
        c.bodies[("ns", "x")] = {}
        await real_add(("ns", "x"))
        await asyncio.wait_for(c._worker(0, c.queue), 10)
        return delays

    assert asyncio.run(scenario()) == [5, 10, 20, 40]


# ----------------------------------------------------------------- issue 24: the inspector and the tuning Job


class _Kube:
    """Objects by (kind, name) in one namespace; writes recorded."""

    def __init__(self, *objs: dict):
        self.objs = {(o["kind"], o["metadata"]["name"]): o for o in objs}
        self.writes: list[tuple[str, str, str]] = []

    async def get(self, kind, ns, name):
        return self.objs.get((kind, name))

    async def list(self, kind, ns, label_selector=None):
        return [o for (k, _), o in self.objs.items() if k == kind]

    async def create(self, obj):
        self.writes.append(("create", obj["kind"], obj["metadata"]["name"]))
        self.objs[(obj["kind"], obj["metadata"]["name"])] = obj
        return obj

    async def delete(self, kind, ns, name, propagation="Background", uid=None):
        self.writes.append(("delete", kind, name))
        self.objs.pop((kind, name), None)

    async def apply(self, obj, force=False):
        self.writes.append(("apply", obj["kind"], obj["metadata"]["name"]))
        return obj


def _pvc_cr():
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
        "spec": {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "qwen/27b", "pvc": {"claimName": "models"}},
                 "drafter": {"model": "z/d"}, "gpu": {"type": "b300"}}})


def _job(refs, created="2020-01-01T00:00:00Z", status=None, annotations=None) -> dict:
    return {"kind": "Job", "metadata": {"name": "m-inspect-target", "uid": "j1", "creationTimestamp": created,
                                        "ownerReferences": refs, "annotations": annotations or {}},
            "status": status or {}}


@pytest.mark.parametrize("refs", [[], [{"uid": "other", "controller": True}], [{"uid": "u1", "controller": False}]])
def test_an_inspector_job_not_ours_is_neither_read_nor_replaced(refs):
    from specdeploy.controller.resolve import Resolver

    kube = _Kube(_job(refs, status={"succeeded": 1}))
    with pytest.raises(ResolutionError) as e:
        asyncio.run(Resolver(kube).resolve(_admitted(_pvc_cr()), "target"))
    assert e.value.reason == "ChildConflict" and e.value.conflict.startswith("Job/m-inspect-target (")
    assert "m-inspect-target" in e.value.message and kube.writes == []


def test_an_own_inspector_job_that_never_finishes_times_out_and_is_replaced_later():
    from specdeploy.controller import resolve

    cr = _pvc_cr()
    image = cr.spec.engine.image or resolve.eng.get_engine("vllm").default_image("0.33.0")
    want = resolve.build_inspector_job(_admitted(cr), "target", image)
    inputs = want["metadata"]["annotations"]
    kube = _Kube(_job([{"uid": "u1", "controller": True}], annotations=inputs))
    with pytest.raises(ResolutionError) as e:
        asyncio.run(resolve.Resolver(kube).resolve(_admitted(cr), "target"))
    assert e.value.reason == "InspectionTimedOut" and e.value.delay == resolve.INSPECT_RETRY
    assert f"{resolve.INSPECT_DEADLINE:.0f}s" in e.value.message
    assert kube.writes == [("delete", "Job", "m-inspect-target")]
    # a young one is only pending
    kube = _Kube(_job([{"uid": "u1", "controller": True}], created=st.now_rfc3339(), annotations=inputs))
    with pytest.raises(ResolutionError) as e:
        asyncio.run(resolve.Resolver(kube).resolve(_admitted(cr), "target"))
    assert e.value.reason == "InspectionPending" and kube.writes == []


def test_a_tuning_job_not_ours_publishes_nothing():
    """A succeeded Job of the tuning Job's name, with a result in its pod's termination message: its result is
    never applied as the tuned-kernels ConfigMap the engine pods mount."""
    from types import SimpleNamespace

    from specdeploy.controller.cache import Caches
    from specdeploy.controller.executor import Executor

    plan = SimpleNamespace(job_name="m-tune-abc", configmap_name="m-tuned-abc", storage="configMap", key="k")
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"message": "{}"}}}]}}
    for refs in ([], [{"uid": "other", "controller": True}]):
        kube = _Kube({"kind": "Job", "metadata": {"name": "m-tune-abc", "ownerReferences": refs},
                      "status": {"succeeded": 1}}, pod)
        ex = Executor(kube, Caches())
        cr = SimpleNamespace(metadata=SimpleNamespace(uid="u1", name="m"))
        got = asyncio.run(ex.tuning("ns", cr, SimpleNamespace(tuning=plan, tuning_objects=[])))
        assert got and got[0].startswith("Job/m-tune-abc (") and kube.writes == []


# ----------------------------------------------------------------- issue 23 item 7: the reconcile's CPU


def _cm_cr():
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
        "spec": {"engine": {"name": "vllm", "version": "0.33.0"},
                 "target": {"model": "qwen/27b", "configFrom": {"configMapKeyRef": {"name": "t", "key": "config.json"}}},
                 "drafter": {"model": "z/d"}, "gpu": {"type": "b300"}}})


def test_a_configmap_text_is_parsed_once_and_its_document_is_read_only():
    """The same ConfigMap text resolves to the same Resolved (one parse and digest, one document object the
    checker's memo recognises); a changed text (the watch delivers a new body) is parsed again."""
    from specdeploy.controller.resolve import Resolver
    from specdeploy.core import memo

    r = Resolver(_Kube())
    r.configmaps[("ns", "t")] = {"data": {"config.json": json.dumps({"num_hidden_layers": 4})}}
    cr = _admitted(_cm_cr())
    first = asyncio.run(r.resolve(cr, "target"))
    r.configmaps[("ns", "t")] = {"data": {"config.json": json.dumps({"num_hidden_layers": 4})}}  # same text, new body
    again = asyncio.run(r.resolve(cr, "target"))
    assert again is first and memo.is_read_only(first.doc)
    assert first.doc == {"num_hidden_layers": 4} and first.digest == config_digest({"num_hidden_layers": 4})
    r.configmaps[("ns", "t")] = {"data": {"config.json": json.dumps({"num_hidden_layers": 5})}}
    changed = asyncio.run(r.resolve(cr, "target"))
    assert changed.doc == {"num_hidden_layers": 5} and changed.digest == config_digest({"num_hidden_layers": 5})


def test_the_api_key_refresh_hook_runs_at_most_once_a_second():
    """The kubernetes client calls the refresh hook before every request; the loaders' hooks set the host again,
    which scans the environment each time. Throttled: a refresh due now happens within a second."""
    from specdeploy.controller.kube import _at_most_every

    class Cfg:
        refresh_api_key_hook = None

    now = [0.0]
    calls = []

    def loader_hook(cfg):  # as kube_config's: runs, then installs itself again (a new closure each time)
        calls.append(now[0])
        cfg.refresh_api_key_hook = lambda c: loader_hook(c)

    cfg = Cfg()
    cfg.refresh_api_key_hook = hook = _at_most_every(loader_hook, 1.0, clock=lambda: now[0])
    for t in (0.0, 0.2, 0.9, 1.0, 1.5, 2.1):
        now[0] = t
        cfg.refresh_api_key_hook(cfg)
        assert cfg.refresh_api_key_hook is hook
    assert calls == [0.0, 1.0, 2.1]


def test_load_api_client_throttles_the_kubeconfig_token_hook(tmp_path):
    from specdeploy.controller.kube import load_api_client

    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    api = load_api_client(str(kc))
    cfg = api.configuration
    assert cfg.refresh_api_key_hook is not None and cfg.refresh_api_key_hook.__name__ == "throttled"
    for _ in range(3):  # the loader's hook re-installs itself when it runs: still throttled afterwards
        assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer abc"
        assert cfg.refresh_api_key_hook.__name__ == "throttled"


def test_child_events_during_a_reconcile_rerun_it_unless_they_echo_its_writes():
    """A child event for a key being reconciled waits for the reconcile to end: the echo of a version it wrote or
    verified (the watch came before the apply's response) queues nothing, any other version queues the key again,
    and so does a deletion (at once); a key not being reconciled is queued at once."""
    from specdeploy.controller.reconciler import Controller

    async def scenario():
        c = Controller(None, None)
        key = ("ns", "a")
        c.bodies[key] = {"metadata": {"name": "a", "namespace": "ns"}}
        ref = [{"kind": "SpeculativeDeployment", "name": "a", "uid": "u1", "controller": True}]

        def child(kind, rv):
            return {"kind": kind, "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                                               "ownerReferences": ref, "labels": {N.LABEL_MANAGED_BY: N.MANAGED_BY}}}

        await c.queue.add(key)
        assert await c.queue.get() == key  # being reconciled now
        await c.observe_child("ADDED", child("Service", "5"))  # before the apply's response
        await c.observe_configmap("ADDED", child("ConfigMap", "7"))
        assert len(c.queue) == 0
        c.cache.verified[("Service", "ns", "a")] = ("5", "d1")  # the response: what the executor wrote
        c.cache.verified[("ConfigMap", "ns", "a")] = ("7", "d2")
        assert c._echoes_only(key)
        await c.observe_child("MODIFIED", child("Service", "6"))  # someone else's change
        assert not c._echoes_only(key)
        assert c._echoes_only(key)  # decided once
        await c.observe_child("DELETED", child("Service", "6"))
        assert len(c.queue) == 1  # queued at once (handed out after done)
        await c.queue.done(key)
        assert await c.queue.get() == key
        await c.queue.done(key)
        await c.observe_child("MODIFIED", child("Service", "8"))  # not being reconciled: queued at once
        assert len(c.queue) == 1

    asyncio.run(scenario())


class _BatchKube(_Kube):
    """_Kube with the one-hand-off GETs the real client has (Kube.get_many), its batches recorded, and the
    server's create: 409 AlreadyExists when the name is taken (nothing written)."""

    def __init__(self, *objs: dict):
        super().__init__(*objs)
        self.batches: list[list[tuple[str, str]]] = []

    async def get_many(self, objects):
        self.batches.append([(kind, name) for kind, _, name in objects])
        return [self.objs.get((kind, name)) for kind, _, name in objects]

    async def create(self, obj):
        from specdeploy.controller.kube import KubeError

        if (obj["kind"], obj["metadata"]["name"]) in self.objs:
            self.writes.append(("create refused", obj["kind"], obj["metadata"]["name"]))
            raise KubeError(409, "AlreadyExists", f'{obj["kind"]} "{obj["metadata"]["name"]}" already exists')
        return await super().create(obj)


def _child(kind: str, name: str, refs: list | None = None) -> dict:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns",
                                                           "ownerReferences": refs or []}}


_OURS = [{"uid": "u1", "controller": True, "kind": "SpeculativeDeployment", "name": "m"}]


def test_uncached_children_are_created_without_a_read_and_the_workload_last():
    """A desired child the watch-fed cache does not hold is created (a POST, refused by the server when the name
    is taken) with no GET before it; the workload comes last (it mounts the ConfigMaps by name)."""
    from specdeploy.controller.cache import Caches
    from specdeploy.controller.executor import Executor

    desired = [_child("ConfigMap", "m-engine", _OURS), _child("Deployment", "m", _OURS), _child("Service", "m", _OURS)]
    kube = _BatchKube()
    caches = Caches()
    assert asyncio.run(Executor(kube, caches).apply("ns", "m", desired, [], uid="u1")) == []
    assert kube.batches == []
    assert kube.writes == [("create", "ConfigMap", "m-engine"), ("create", "Service", "m"), ("create", "Deployment", "m")]
    assert {k for k in caches.children} == {("ConfigMap", "ns", "m-engine"), ("Service", "ns", "m"), ("Deployment", "ns", "m")}
    # the claims (names the pods read that this pass does not write) are still read first, in one batch
    kube = _BatchKube()
    asyncio.run(Executor(kube, Caches()).apply("ns", "m", desired, [], uid="u1",
                                               claims=[("Job", "m-tune"), ("ConfigMap", "m-tuned")]))
    assert kube.batches == [[("Job", "m-tune"), ("ConfigMap", "m-tuned")]]


def test_a_tenants_object_under_a_childs_name_is_refused_and_what_the_pass_created_is_deleted_again():
    """A same-named object the CR does not control (uncached: unlabelled) makes the create fail; it is claimed like
    any other name, and what this pass created before it is deleted again: nothing is applied, the workload never
    created, every taken name listed."""
    from specdeploy.controller.cache import Caches
    from specdeploy.controller.executor import Executor

    desired = [_child("ConfigMap", "m-engine", _OURS), _child("Service", "m", _OURS),
               _child("PodDisruptionBudget", "m", _OURS), _child("Deployment", "m", _OURS)]
    kube = _BatchKube(_child("Service", "m"), _child("PodDisruptionBudget", "m", [{"uid": "x", "controller": True}]))
    caches = Caches()
    got = asyncio.run(Executor(kube, caches).apply("ns", "m", desired, [], uid="u1"))
    assert got == ["Service/m (not owned by specdeploy)", "PodDisruptionBudget/m (controlled by another object)"]
    assert kube.writes == [("create", "ConfigMap", "m-engine"), ("create refused", "Service", "m"),
                           ("delete", "ConfigMap", "m-engine")]
    assert ("ConfigMap", "m-engine") not in kube.objs and ("Deployment", "m") not in kube.objs
    assert caches.children == {} and kube.objs[("Service", "m")]["metadata"]["ownerReferences"] == []
    # a cached tenant's object is refused before any write (no create is tried)
    kube = _BatchKube(_child("Service", "m"))
    caches = Caches()
    caches.children[("Service", "ns", "m")] = _child("Service", "m")
    assert asyncio.run(Executor(kube, caches).apply("ns", "m", desired, [], uid="u1")) == \
        ["Service/m (not owned by specdeploy)"]
    assert kube.writes == []


def test_a_create_refused_for_the_crs_own_uncached_child_applies_it_instead():
    """The name is taken by this CR's own child the watch has not delivered yet: claimed as ours, applied."""
    from specdeploy.controller.cache import Caches
    from specdeploy.controller.executor import Executor

    desired = [_child("ConfigMap", "m-engine", _OURS), _child("Deployment", "m", _OURS)]
    kube = _BatchKube(_child("ConfigMap", "m-engine", _OURS))
    assert asyncio.run(Executor(kube, Caches()).apply("ns", "m", desired, [], uid="u1")) == []
    assert kube.writes == [("create refused", "ConfigMap", "m-engine"), ("apply", "ConfigMap", "m-engine"),
                           ("create", "Deployment", "m")]


class _PreconditionKube(_BatchKube):
    """_BatchKube whose delete honours a uid precondition as the server does (409 when the name holds another)."""

    async def delete(self, kind, ns, name, propagation="Background", uid=None):
        from specdeploy.controller.kube import KubeError

        held = self.objs.get((kind, name))
        if held is not None and uid is not None and held["metadata"].get("uid") != uid:
            self.writes.append(("delete refused", kind, name))
            raise KubeError(409, "Conflict", "Precondition failed: UID in precondition")
        self.writes.append(("delete", kind, name, uid))
        self.objs.pop((kind, name), None)


def test_an_obsolete_child_is_deleted_only_as_the_object_read():
    """Issue 37: every delete of a child carries the uid of the object the ownership check read; a tenant's object
    created under the name since (the watch cache still holding ours) is never deleted."""
    from specdeploy.controller.cache import Caches
    from specdeploy.controller.executor import Executor

    ours = {**_child("PodMonitor", "m", _OURS)}
    ours["metadata"]["uid"] = "c1"
    caches = Caches()
    caches.children[("PodMonitor", "ns", "m")] = ours
    kube = _PreconditionKube(ours)
    asyncio.run(Executor(kube, caches).apply("ns", "m", [], [("PodMonitor", "m")], uid="u1"))
    assert kube.writes == [("delete", "PodMonitor", "m", "c1")] and ("PodMonitor", "ns", "m") not in caches.children
    theirs = {**_child("PodMonitor", "m"), "spec": {"tenant": True}}
    theirs["metadata"]["uid"] = "t1"
    caches.children[("PodMonitor", "ns", "m")] = ours  # the cache has not seen the replacement yet
    kube = _PreconditionKube(theirs)
    asyncio.run(Executor(kube, caches).apply("ns", "m", [], [("PodMonitor", "m")], uid="u1"))
    assert kube.writes == [("delete refused", "PodMonitor", "m")] and kube.objs[("PodMonitor", "m")] is theirs


def test_unwatched_executor_reads_every_claim_and_keeps_nothing():
    """The benchmark controller's executor (no watches of its children): each claim is a GET (a Deployment's
    readiness is never a cached copy), and a child it creates is not remembered."""
    from specdeploy.controller.executor import Executor

    kube = _PreconditionKube(_child("Deployment", "b", _OURS))
    ex = Executor(kube)
    got, why = asyncio.run(ex.claim("Deployment", "ns", "b", "u1"))
    assert why is None and "status" not in got
    kube.objs[("Deployment", "b")] = {**_child("Deployment", "b", _OURS), "status": {"readyReplicas": 1}}
    got, _ = asyncio.run(ex.claim("Deployment", "ns", "b", "u1"))
    assert got["status"] == {"readyReplicas": 1}
    asyncio.run(ex.apply("ns", "b", [_child("ConfigMap", "b-x", _OURS)], [], uid="u1"))
    assert kube.writes == [("create", "ConfigMap", "b-x")]
    assert dict(ex.cache.children) == {} and dict(ex.cache.verified) == {}


def test_kube_get_many_answers_in_order_none_when_absent():
    from specdeploy.controller import kube as km

    k = km.Kube(api=None)
    paths = []

    def call(method, path, *a, **kw):
        paths.append((method, path))
        if "gone" in path:
            raise km.KubeError(404, "NotFound", "gone")
        if "broken" in path:
            raise km.KubeError(500, "InternalError", "broken")
        return {"path": path}

    k._call = call
    got = asyncio.run(k.get_many([("ConfigMap", "ns", "a"), ("Service", "ns", "gone"), ("Deployment", "ns", "b")]))
    assert [g and g["path"] for g in got] == [km.KINDS["ConfigMap"].path("ns", "a"), None,
                                              km.KINDS["Deployment"].path("ns", "b")]
    assert [m for m, _ in paths] == ["GET"] * 3
    with pytest.raises(km.KubeError):
        asyncio.run(k.get_many([("Service", "ns", "broken")]))
