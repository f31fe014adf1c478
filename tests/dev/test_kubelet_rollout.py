"""The dev kubelet's controller half (pure): ReplicaSets per template, rolling and recreate strategies
against a simulated cluster, surplus pods, history, status and conditions."""

from __future__ import annotations

import copy
import datetime as dt
import itertools

import pytest

from specdeploy_dev import kubelet_rollout as ro

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
_uids = itertools.count(1)


def dep(replicas=2, strategy=None, image="v1", generation=1, **spec) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": "dep-uid", "generation": generation},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": strategy or {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}, **spec}}


def ready(pod: dict, at: dt.datetime = NOW) -> dict:
    pod.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True",
                                                   "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ")}]
    return pod


class Sim:
    """A cluster for the planner: applies each plan; new pods become ready one step later."""

    def __init__(self, d: dict):
        self.dep, self.rss, self.pods, self.steps = d, [], [], 0

    def step(self) -> ro.RolloutPlan:
        for p in self.pods:  # pods created in the previous step are ready now
            ready(p)
        plan = ro.plan_deployment(self.dep, self.rss, self.pods, "node-a", NOW)
        for rs in plan.create_replicasets:
            rs = copy.deepcopy(rs)
            rs["metadata"]["uid"] = f"rs-{next(_uids)}"
            self.rss.append(rs)
        for rs in self.rss:
            if rs["metadata"]["name"] in plan.scale:
                rs["spec"]["replicas"] = plan.scale[rs["metadata"]["name"]]
        self.pods = [p for p in self.pods if p["metadata"]["name"] not in plan.delete_pods]
        for p in plan.create_pods:
            p = copy.deepcopy(p)
            n = next(_uids)
            p["metadata"].update(name=f"{p['metadata']['generateName']}{n}", uid=f"pod-{n}",
                                 creationTimestamp=f"2026-01-01T00:00:{n % 60:02d}Z")
            self.pods.append(p)
        self.rss = [r for r in self.rss if r["metadata"]["name"] not in plan.delete_replicasets]
        self.dep["status"] = plan.deployment_status
        self.steps += 1
        return plan

    def hashes(self) -> list[str]:
        return sorted(p["metadata"]["labels"][ro.HASH_LABEL] for p in self.pods)

    def converge(self, limit=20) -> None:
        for _ in range(limit):
            plan = self.step()
            if not (plan.create_replicasets or plan.scale or plan.create_pods or plan.delete_pods):
                return
        raise AssertionError("no convergence")


def test_template_hash_is_stable_and_safe():
    t = dep()["spec"]["template"]
    h = ro.template_hash(t)
    assert h == ro.template_hash(copy.deepcopy(t)) and set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert ro.template_hash(dep(image="v2")["spec"]["template"]) != h


def test_a_new_deployment_gets_a_replicaset_then_pods():
    sim = Sim(dep(replicas=3))
    plan = sim.step()
    (rs,) = plan.create_replicasets
    h = ro.template_hash(sim.dep["spec"]["template"])
    assert rs["metadata"]["name"] == f"web-{h}" and rs["spec"]["replicas"] == 3
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", ro.HASH_LABEL: h}
    assert plan.create_pods == []  # the ReplicaSet has no uid yet
    plan = sim.step()
    assert len(plan.create_pods) == 3
    pod = plan.create_pods[0]
    assert pod["spec"]["nodeName"] == "node-a" and pod["metadata"]["generateName"] == f"web-{h}-"
    assert pod["metadata"]["labels"] == {"app": "web", ro.HASH_LABEL: h}
    assert pod["metadata"]["ownerReferences"][0] == {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                    "name": f"web-{h}", "uid": sim.rss[0]["metadata"]["uid"],
                                                    "controller": True, "blockOwnerDeletion": True}
    sim.converge()
    st = sim.dep["status"]
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"], st["updatedReplicas"]) == (3, 3, 3, 3)
    assert {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]} == {
        "Available": ("True", "MinimumReplicasAvailable"), "Progressing": ("True", "NewReplicaSetAvailable")}


@pytest.mark.parametrize("replicas, surge, unavailable", [
    (1, 0, 1), (2, 0, 1), (3, 1, 0), (4, "25%", "25%"), (4, "50%", 0), (5, 2, 2), (3, 0, 0),
])
def test_rolling_update_respects_surge_and_availability(replicas, surge, unavailable):
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
    sim = Sim(dep(replicas=replicas, strategy=strategy))
    sim.converge()
    old_hash = sim.hashes()[0]
    sim.dep = dep(replicas=replicas, strategy=strategy, image="v2", generation=2)
    max_surge, max_unavailable = ro.fenceposts(sim.dep["spec"], replicas)
    for _ in range(40):
        plan = sim.step()
        # after applying: never more than replicas + maxSurge pods, never fewer than replicas - maxUnavailable
        # available ones (pods created this step are not ready yet)
        assert len(sim.pods) <= replicas + max_surge
        available = [p for p in sim.pods if ro.is_ready(p)]
        assert len(available) >= replicas - max_unavailable
        if not (plan.create_replicasets or plan.scale or plan.create_pods or plan.delete_pods):
            break
    assert len(set(sim.hashes())) == 1 and sim.hashes()[0] != old_hash and len(sim.pods) == replicas
    assert sorted(rs["spec"]["replicas"] for rs in sim.rss) == [0, replicas]
    assert sim.dep["status"]["updatedReplicas"] == replicas and sim.dep["status"]["observedGeneration"] == 2


def test_recreate_waits_for_the_old_pods_to_be_gone():
    strategy = {"type": "Recreate"}
    sim = Sim(dep(replicas=2, strategy=strategy))
    sim.converge()
    sim.dep = dep(replicas=2, strategy=strategy, image="v2", generation=2)
    plan = sim.step()
    assert len(plan.delete_pods) == 2 and not plan.create_pods
    assert all(v == 0 for v in plan.scale.values())
    sim.converge()
    assert len(sim.pods) == 2 and len(set(sim.hashes())) == 1


def test_scale_down_deletes_not_ready_pods_first_then_the_newest():
    sim = Sim(dep(replicas=3))
    sim.converge()
    sim.pods[1]["status"]["conditions"][0]["status"] = "False"
    sim.dep["spec"]["replicas"] = 1
    newest = max((p for p in sim.pods if ro.is_ready(p)), key=lambda p: p["metadata"]["creationTimestamp"])
    plan = ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW)
    assert plan.delete_pods == [sim.pods[1]["metadata"]["name"], newest["metadata"]["name"]]


def test_terminating_pods_count_as_gone():
    sim = Sim(dep(replicas=1))
    sim.converge()
    sim.pods[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert len(ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW).create_pods) == 1


def test_revision_history_limit():
    sim = Sim(dep(replicas=1, revisionHistoryLimit=1))
    sim.converge()
    for i, image in enumerate(("v2", "v3", "v4"), start=2):
        sim.dep = dep(replicas=1, image=image, generation=i, revisionHistoryLimit=1)
        sim.converge()
    assert len(sim.rss) == 2  # the current one and one old
    revisions = sorted(int(r["metadata"]["annotations"][ro.REVISION_ANNOTATION]) for r in sim.rss)
    assert revisions == [3, 4]


def test_progress_deadline():
    d = dep(replicas=1, progressDeadlineSeconds=60)
    sim = Sim(d)
    sim.step()
    sim.step()  # a pod, never ready below
    sim.pods[0]["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    st = ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW).deployment_status
    sim.dep["status"] = st
    prog = {c["type"]: c for c in st["conditions"]}["Progressing"]
    assert prog["reason"] == "ReplicaSetUpdated"
    later = NOW + dt.timedelta(seconds=61)
    st = ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", later).deployment_status
    conds = {c["type"]: c for c in st["conditions"]}
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("False", "ProgressDeadlineExceeded")
    # one replica, maxUnavailable 1: zero available pods is still the minimum availability
    assert (conds["Available"]["status"], conds["Available"]["reason"]) == ("True", "MinimumReplicasAvailable")


def test_min_ready_seconds_delays_availability():
    pod = ready({"metadata": {}}, NOW)
    assert ro.is_available(pod, 0, NOW) and not ro.is_available(pod, 10, NOW + dt.timedelta(seconds=5))
    assert ro.is_available(pod, 10, NOW + dt.timedelta(seconds=10))


def test_unchanged_status_is_not_rewritten():
    sim = Sim(dep(replicas=1))
    sim.converge()
    plan = ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW + dt.timedelta(seconds=30))
    assert plan.deployment_status == sim.dep["status"]
    for rs in sim.rss:
        rs["status"] = ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW).replicaset_status.get(
            rs["metadata"]["name"], rs.get("status"))
    assert ro.plan_deployment(sim.dep, sim.rss, sim.pods, "node-a", NOW).replicaset_status == {}


@pytest.mark.parametrize("value, total, up, want", [
    (None, 4, True, 1), (None, 4, False, 1), ("25%", 3, True, 1), ("25%", 3, False, 0), (2, 10, True, 2),
    ("3", 10, False, 3), ("0%", 5, True, 0),
])
def test_int_or_percent(value, total, up, want):
    assert ro.resolve_int_or_percent(value, total, up) == want


@pytest.mark.parametrize("bad", ["x", "1.5", "%", True, "-1"])
def test_int_or_percent_refuses_garbage(bad):
    with pytest.raises(ValueError):
        ro.resolve_int_or_percent(bad, 4, True)


def test_fenceposts_never_both_zero():
    d = dep(replicas=3, strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}})
    assert ro.fenceposts(d["spec"], 3) == (0, 1)
