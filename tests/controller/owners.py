"""The ownership chain through which the acceptance monitor trusts an engine pod (controller/monitor.py, issue 37):
Pod -> ReplicaSet -> Deployment -> SpeculativeDeployment (multi-node: Pod -> StatefulSet -> LeaderWorkerSet ->
SpeculativeDeployment), every link a uid. Builders for the monitor's tests: the uids are derived from the names, so a
pod helper can point at its ReplicaSet before that is observed."""

from __future__ import annotations

from specdeploy.controller.canary import canary_name
from specdeploy.core import names as N

POD_OWNER = {"Deployment": "ReplicaSet", "LeaderWorkerSet": "StatefulSet"}
API = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1",
       "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def controller_ref(kind: str, name: str, uid: str) -> dict:
    api = API.get(kind, N.GROUP_VERSION)
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def workload_uid(ns: str, kind: str, name: str) -> str:
    return f"uid-{kind.lower()}-{ns}-{name}"


def owner_uid(ns: str, workload: str, kind: str = "Deployment") -> str:
    """The uid of the ReplicaSet (StatefulSet) of workload ``kind``/``workload``."""
    return f"uid-{POD_OWNER[kind].lower()}-{ns}-{workload}"


def pod_owner_refs(ns: str, workload: str, kind: str = "Deployment") -> list[dict]:
    """A pod's ownerReferences: its ReplicaSet (StatefulSet) of that workload."""
    return [controller_ref(POD_OWNER[kind], f"{workload}-7d4b9c", owner_uid(ns, workload, kind))]


def workload(sd: dict, track: str = "stable", kind: str = "Deployment", **extra) -> dict:
    """The SpeculativeDeployment's Deployment (``track`` canary: NAME-canary) or LeaderWorkerSet, as the children
    cache holds it: controlled by the SpeculativeDeployment's uid."""
    m = sd["metadata"]
    name = canary_name(m["name"]) if track == N.TRACK_CANARY else m["name"]
    meta = {"name": name, "namespace": m["namespace"], "uid": workload_uid(m["namespace"], kind, name),
            "ownerReferences": [controller_ref(N.KIND, m["name"], m["uid"])], **extra.pop("metadata", {})}
    return {"apiVersion": API[kind], "kind": kind, "metadata": meta, **extra}


def pod_owner(w: dict) -> dict:
    """The ReplicaSet (StatefulSet) of workload ``w``, controlled by it."""
    kind = POD_OWNER[w["kind"]]
    m = w["metadata"]
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": f"{m['name']}-7d4b9c", "namespace": m["namespace"],
                         "uid": owner_uid(m["namespace"], m["name"], w["kind"]),
                         "ownerReferences": [controller_ref(w["kind"], m["name"], m["uid"])]}}


def adopt(monitor, children: dict, sd: dict, track: str = "stable", kind: str = "Deployment", **extra) -> dict:
    """Put the SpeculativeDeployment's workload into the children cache and its ReplicaSet (StatefulSet) into the
    monitor's owners, as the watches would; returns the workload."""
    w = workload(sd, track, kind, **extra)
    m = w["metadata"]
    children[(kind, m["namespace"], m["name"])] = w
    monitor.observe_owner("ADDED", pod_owner(w))
    return w
