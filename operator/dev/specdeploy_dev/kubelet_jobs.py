"""The dev kubelet's Job controller, pure: what the Job controller would do for a simple Job.

:func:`plan_job` takes a Job and its pods (label ``job-name``) and returns the pod to create (if
any) and the Job's status: one pod at a time (``parallelism``/``completions`` 1, the only Jobs
specdeploy creates), a new pod after a failed one while failures <= ``backoffLimit``,
``succeeded``/``failed``/``active`` counts, ``startTime``/``completionTime`` and the ``Complete``
/ ``Failed`` conditions (reason ``BackoffLimitExceeded``). ``activeDeadlineSeconds`` and pod
deletion on failure are not modelled. Standard library only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


@dataclass
class JobPlan:
    create_pod: dict | None
    status: dict[str, Any] | None  # the Job status to write, None: unchanged


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def build_job_pod(job: dict, node_name: str) -> dict:
    meta = job.get("metadata") or {}
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    spec["nodeName"] = node_name
    labels = {**(tmeta.get("labels") or {}), "job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"]}
    if meta.get("uid"):
        labels["controller-uid"] = meta["uid"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{meta['name']}-", "namespace": meta.get("namespace"), "labels": labels,
                         "annotations": dict(tmeta.get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                              "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec}


def plan_job(job: dict, pods: list[dict], node_name: str, now: str) -> JobPlan:
    meta = job.get("metadata") or {}
    mine = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get("job-name") == meta.get("name")
            and not (p.get("metadata") or {}).get("deletionTimestamp")]
    status = dict(job.get("status") or {})
    succeeded = sum(_phase(p) == "Succeeded" for p in mine)
    failed = sum(_phase(p) == "Failed" for p in mine)
    active = sum(_phase(p) in ("Pending", "Running") for p in mine)
    limit = int((job.get("spec") or {}).get("backoffLimit", 6))
    conds = [c for c in status.get("conditions") or [] if c.get("type") in ("Complete", "Failed")]
    finished = any(c.get("status") == "True" for c in conds)
    create = None
    new = {**status, "active": active, "succeeded": succeeded, "failed": failed}
    new.setdefault("startTime", now)
    if not finished:
        if succeeded:
            new["conditions"] = [{"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}]
            new["completionTime"] = now
        elif failed > limit:
            new["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                  "message": "Job has reached the specified backoff limit", "lastProbeTime": now,
                                  "lastTransitionTime": now}]
        elif active == 0:
            create = build_job_pod(job, node_name)
            new["active"] = 1
    for k in ("active", "succeeded", "failed"):
        if not new[k]:
            new.pop(k)
    return JobPlan(create, new if new != status else None)
