"""The dev kubelet's controller half, pure: what the Deployment and ReplicaSet controllers would do.

Given a Deployment, the ReplicaSets it owns and their pods (as the API server returns them),
:func:`plan_deployment` returns a :class:`RolloutPlan`: ReplicaSets to create, scale or delete,
pods to create or delete, and the status of the Deployment and of each ReplicaSet. The I/O
side (``specdeploy_dev.kubelet``) applies the plan and runs it again on the next change, so
the rollout converges one level-based step at a time, as the real controllers do:

- one ReplicaSet per pod template, named ``<deployment>-<pod-template-hash>``; the hash is
  FNV-32a of the template (canonical JSON), safe-encoded like Kubernetes' ``rand.SafeEncodeString``;
  pods carry the ``pod-template-hash`` label and an owner reference to their ReplicaSet;
- ``RollingUpdate`` honours ``maxSurge`` (percentages round up) and ``maxUnavailable`` (round
  down; both 0 means 1), scaling the new ReplicaSet up to ``replicas + maxSurge`` pods in all
  and old ones down while ``replicas - maxUnavailable`` pods stay available (unhealthy old
  pods go first); ``Recreate`` scales the old ones to 0 and waits for their pods to be gone;
- a pod is available when Ready for ``minReadySeconds``; surplus pods are deleted not-ready
  first, then newest first; old ReplicaSets beyond ``revisionHistoryLimit`` are deleted;
- status: ``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
  ``unavailableReplicas``, ``observedGeneration`` and the ``Available`` / ``Progressing``
  conditions (``NewReplicaSetAvailable``, ``ReplicaSetUpdated``, ``ProgressDeadlineExceeded``).

Not modelled: ``paused``, ``collisionCount``, scaling proportionally during a rollout, pod
disruption budgets. Standard library only.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: dict) -> str:
    """The pod-template-hash of a pod template: FNV-32a of its canonical JSON, safe-encoded."""
    h = 0x811C9DC5
    for b in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def is_ready(pod: dict) -> bool:
    c = _condition(pod, "Ready")
    return bool(c and c.get("status") == "True")


def is_available(pod: dict, min_ready_seconds: int, now: dt.datetime) -> bool:
    c = _condition(pod, "Ready")
    if not c or c.get("status") != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    since = _parse_time(c.get("lastTransitionTime"))
    return since is not None and (now - since).total_seconds() >= min_ready_seconds


def owned_by(obj: dict, owner: dict) -> bool:
    uid = _meta(owner).get("uid")
    return any(r.get("uid") == uid and r.get("controller") for r in _meta(obj).get("ownerReferences") or [])


def resolve_int_or_percent(value: Any, total: int, round_up: bool, default: str = "25%") -> int:
    """``maxSurge``/``maxUnavailable``: an int, or a percentage of ``total`` (rounded up or down)."""
    if value is None:
        value = default
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an int or a percentage")
    if isinstance(value, int):
        return max(value, 0)
    text = str(value).strip()
    if text.endswith("%") and text[:-1].isdigit():
        frac = int(text[:-1]) * total / 100
        return math.ceil(frac) if round_up else math.floor(frac)
    if text.isdigit():
        return int(text)
    raise ValueError(f"{value!r} is not an int or a percentage")


def fenceposts(spec: dict, replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a RollingUpdate Deployment; both 0 becomes (0, 1), as in Kubernetes."""
    ru = ((spec.get("strategy") or {}).get("rollingUpdate")) or {}
    surge = resolve_int_or_percent(ru.get("maxSurge"), replicas, round_up=True)
    unavailable = resolve_int_or_percent(ru.get("maxUnavailable"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


@dataclass
class RolloutPlan:
    create_replicasets: list[dict] = field(default_factory=list)
    scale: dict[str, int] = field(default_factory=dict)  # ReplicaSet name -> spec.replicas
    delete_replicasets: list[str] = field(default_factory=list)
    create_pods: list[dict] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    deployment_status: dict = field(default_factory=dict)
    replicaset_status: dict[str, dict] = field(default_factory=dict)


def build_replicaset(dep: dict, thash: str, revision: int, replicas: int) -> dict:
    meta = _meta(dep)
    template = json.loads(json.dumps((dep.get("spec") or {}).get("template") or {}))
    labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: thash}
    template.setdefault("metadata", {})["labels"] = labels
    selector = json.loads(json.dumps((dep.get("spec") or {}).get("selector") or {}))
    selector.setdefault("matchLabels", {})[HASH_LABEL] = thash
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{thash}", "namespace": meta.get("namespace"), "labels": labels,
            "annotations": {REVISION_ANNOTATION: str(revision)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                 "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"replicas": replicas, "minReadySeconds": (dep.get("spec") or {}).get("minReadySeconds") or 0,
                 "selector": selector, "template": template},
    }


def build_pod(rs: dict, node_name: str) -> dict:
    """A pod of ReplicaSet ``rs``, bound to ``node_name`` (the dev kubelet also plays the scheduler)."""
    meta = _meta(rs)
    template = json.loads(json.dumps((rs.get("spec") or {}).get("template") or {}))
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    spec["nodeName"] = node_name
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-", "namespace": meta.get("namespace"),
            "labels": dict(tmeta.get("labels") or {}), "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"],
                                 "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }


def _revision(rs: dict) -> int:
    try:
        return int((_meta(rs).get("annotations") or {}).get(REVISION_ANNOTATION) or 0)
    except ValueError:
        return 0


def _deletion_order(pods: list[dict]) -> list[dict]:
    """Pods to delete first: not ready before ready, then the newest (Kubernetes' ActivePods ranking, simplified)."""
    newest_first = sorted(pods, key=lambda p: (_meta(p).get("creationTimestamp") or "", _meta(p).get("name") or ""),
                          reverse=True)
    return sorted(newest_first, key=is_ready)  # stable: not ready first, each group newest first


def plan_deployment(dep: dict, replicasets: list[dict], pods: list[dict], node_name: str,
                    now: dt.datetime) -> RolloutPlan:
    """One reconcile step of ``dep``: ``replicasets`` and ``pods`` may include unrelated objects (filtered here
    by owner reference); pods being deleted (``deletionTimestamp``) count as gone."""
    plan = RolloutPlan()
    spec = dep.get("spec") or {}
    replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    min_ready = int(spec.get("minReadySeconds") or 0)
    thash = template_hash(spec.get("template") or {})
    owned = sorted((rs for rs in replicasets if owned_by(rs, dep)), key=_revision)
    live = [p for p in pods if not _meta(p).get("deletionTimestamp")]
    pods_of = {_meta(rs)["name"]: [p for p in live if owned_by(p, rs)] for rs in owned}

    new_rs = next((rs for rs in owned if (_meta(rs).get("labels") or {}).get(HASH_LABEL) == thash), None)
    old = [rs for rs in owned if rs is not new_rs]
    target = {_meta(rs)["name"]: int((rs.get("spec") or {}).get("replicas") or 0) for rs in owned}
    if new_rs is None:
        new_rs = build_replicaset(dep, thash, max((_revision(rs) for rs in owned), default=0) + 1, 0)
        plan.create_replicasets.append(new_rs)
        pods_of[_meta(new_rs)["name"]] = []
        target[_meta(new_rs)["name"]] = 0
    new_name = _meta(new_rs)["name"]

    def available(name: str) -> int:
        return sum(1 for p in pods_of.get(name, []) if is_available(p, min_ready, now))

    strategy = (spec.get("strategy") or {}).get("type") or "RollingUpdate"
    if strategy == "Recreate":
        for rs in old:
            target[_meta(rs)["name"]] = 0
        if not any(pods_of[_meta(rs)["name"]] for rs in old):
            target[new_name] = replicas
    else:
        surge, unavailable = fenceposts(spec, replicas)
        total = sum(target.values())
        if target[new_name] > replicas:
            target[new_name] = replicas
        elif target[new_name] < replicas:
            room = replicas + surge - total
            if room > 0:
                target[new_name] = min(target[new_name] + room, replicas)
        # old ReplicaSets: unhealthy pods first, then down to the availability floor
        min_available = replicas - unavailable
        all_pods = sum(target.values())
        new_unavailable = max(target[new_name] - available(new_name), 0)
        budget = all_pods - min_available - new_unavailable
        for rs in old:  # oldest first
            name = _meta(rs)["name"]
            unhealthy = max(target[name] - available(name), 0)
            cut = min(unhealthy, max(budget, 0))
            target[name] -= cut
            budget -= cut
        can_remove = sum(available(n) for n in target) - min_available
        for rs in old:
            name = _meta(rs)["name"]
            if can_remove <= 0:
                break
            cut = min(target[name], can_remove)
            target[name] -= cut
            can_remove -= cut

    for rs in owned:
        name = _meta(rs)["name"]
        if target[name] != int((rs.get("spec") or {}).get("replicas") or 0):
            plan.scale[name] = target[name]
    if plan.create_replicasets:
        plan.create_replicasets[0]["spec"]["replicas"] = target[new_name]

    # the ReplicaSet controller: pods to match each target (a ReplicaSet created in this step gets its pods in
    # the next one, once it has a uid to own them)
    for rs in owned:
        name = _meta(rs)["name"]
        have = pods_of.get(name, [])
        if len(have) < target[name]:
            plan.create_pods += [build_pod(rs, node_name) for _ in range(target[name] - len(have))]
        elif len(have) > target[name]:
            plan.delete_pods += [_meta(p)["name"] for p in _deletion_order(have)[:len(have) - target[name]]]

    # revision history: old, empty ReplicaSets beyond the limit, oldest first
    limit = spec.get("revisionHistoryLimit")
    limit = 10 if limit is None else int(limit)
    empty_old = [rs for rs in old if target[_meta(rs)["name"]] == 0 and not pods_of[_meta(rs)["name"]]]
    if len(empty_old) > limit:
        plan.delete_replicasets = [_meta(rs)["name"] for rs in empty_old[:len(empty_old) - limit]]

    # status (ReplicaSets: only those whose status changed)
    for rs in owned:
        name = _meta(rs)["name"]
        have = pods_of[name]
        status = {
            "replicas": len(have), "fullyLabeledReplicas": len(have),
            "readyReplicas": sum(1 for p in have if is_ready(p)), "availableReplicas": available(name),
            "observedGeneration": _meta(rs).get("generation") or 1,
        }
        if status != {k: (rs.get("status") or {}).get(k) for k in status}:
            plan.replicaset_status[name] = status
    plan.deployment_status = deployment_status(dep, new_name, pods_of, min_ready, now)
    return plan


def _fmt(now: dt.datetime) -> str:
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def deployment_status(dep: dict, new_name: str, pods_of: dict[str, list[dict]], min_ready: int,
                      now: dt.datetime) -> dict:
    spec = dep.get("spec") or {}
    replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    all_pods = [p for ps in pods_of.values() for p in ps]
    counts = {
        "replicas": len(all_pods),
        "updatedReplicas": len(pods_of.get(new_name, [])),
        "readyReplicas": sum(1 for p in all_pods if is_ready(p)),
        "availableReplicas": sum(1 for p in all_pods if is_available(p, min_ready, now)),
    }
    counts["unavailableReplicas"] = max(replicas - counts["availableReplicas"], 0)
    prev = dep.get("status") or {}
    _, max_unavailable = fenceposts(spec, replicas) if (spec.get("strategy") or {}).get("type") != "Recreate" \
        else (0, 0)
    gen = _meta(dep).get("generation") or 1
    complete = (counts["updatedReplicas"] == replicas and counts["replicas"] == replicas
                and counts["availableReplicas"] == replicas)
    stamp = _fmt(now)
    avail = counts["availableReplicas"] >= replicas - max_unavailable
    conds = [
        _next_condition(_condition(dep, "Available"), "Available", avail,
                        "MinimumReplicasAvailable" if avail else "MinimumReplicasUnavailable",
                        "Deployment has minimum availability." if avail
                        else "Deployment does not have minimum availability.", stamp, progressed=False),
    ]
    prev_prog = _condition(dep, "Progressing")
    progressed = any(prev.get(k) != v for k, v in counts.items()) or prev.get("observedGeneration") != gen
    deadline = spec.get("progressDeadlineSeconds")
    deadline = 600 if deadline is None else int(deadline)
    if complete:
        prog = (True, "NewReplicaSetAvailable", f'ReplicaSet "{new_name}" has successfully progressed.')
    else:
        prog = (True, "ReplicaSetUpdated", f'ReplicaSet "{new_name}" is progressing.')
        last = _parse_time((prev_prog or {}).get("lastUpdateTime"))
        if not progressed and last is not None and (now - last).total_seconds() > deadline:
            prog = (False, "ProgressDeadlineExceeded", f'ReplicaSet "{new_name}" has timed out progressing.')
        elif prev_prog and prev_prog.get("reason") == "ProgressDeadlineExceeded" and not progressed:
            prog = (False, "ProgressDeadlineExceeded", prev_prog.get("message") or "")
    conds.append(_next_condition(prev_prog, "Progressing", *prog, stamp, progressed=progressed))
    return {"observedGeneration": gen, **counts, "conditions": conds}


def _next_condition(prev: dict | None, ctype: str, status: bool, reason: str, message: str, stamp: str,
                    progressed: bool) -> dict:
    s = "True" if status else "False"
    if prev and prev.get("status") == s and prev.get("reason") == reason and prev.get("message") == message \
            and not progressed:
        return prev
    transition = prev.get("lastTransitionTime") if prev and prev.get("status") == s else stamp
    return {"type": ctype, "status": s, "reason": reason, "message": message,
            "lastUpdateTime": stamp, "lastTransitionTime": transition or stamp}
