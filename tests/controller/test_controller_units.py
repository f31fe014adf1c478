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


def test_inspector_job_is_read_only_and_owned():
    cr = SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
        "spec": {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "qwen/27b", "pvc": {"claimName": "models"}},
                 "drafter": {"model": "z/d"}, "gpu": {"type": "b300"}}})
    job = build_inspector_job(cr, "target", cr.spec.target, "img:1")
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
