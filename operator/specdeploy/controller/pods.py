"""What the acceptance monitor and the canary analysis read of an engine pod (pure helpers; no I/O).

The pods come from the monitor's watch-fed pod cache (``handlers.on_engine_pod``); a pod is trusted through the
uids of its owners (controller/monitor.py, "Ownership, not labels"), never its labels alone.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core import names as N
from ..core.names import REVISION_ANNOTATION, TRACK_CANARY, TRACK_LABEL

PORT_NAME = "http"  # core/render/objects._container: the engine's API port, which serves /metrics


def is_ready(pod: dict) -> bool:
    st_ = pod.get("status") or {}
    if st_.get("phase") in ("Succeeded", "Failed") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(isinstance(c, dict) and c.get("type") == N.READY and c.get("status") == "True"
               for c in st_.get("conditions") or [])


def http_port(pod: dict) -> int | None:
    """The container port named ``http`` (the engine container's first)."""
    containers = ((pod.get("spec") or {}).get("containers")) or []
    containers = sorted(containers, key=lambda c: (c or {}).get("name") != "engine")
    for c in containers:
        for p in (c or {}).get("ports") or []:
            if isinstance(p, dict) and p.get("name") == PORT_NAME and isinstance(p.get("containerPort"), int):
                return p["containerPort"]
    return None


def controller_of(meta: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(kind, uid) of an object's controller (the ownerReference with ``controller: true``), or None."""
    for ref in (meta or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and isinstance(ref.get("kind"), str) \
                and isinstance(ref.get("uid"), str) and ref["uid"]:
            return ref["kind"], ref["uid"]
    return None


def pod_track(pod: dict) -> str:
    """"canary" for a pod of a canary Deployment (TRACK_LABEL), else "stable"."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return TRACK_CANARY if labels.get(TRACK_LABEL) == TRACK_CANARY else "stable"


def pod_revision(pod: dict) -> str | None:
    rev = ((pod.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
    return rev if isinstance(rev, str) else None


def slim(pod: dict) -> dict:
    """What the monitor keeps of an engine pod (canary health, the probe's target and model name)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp",
                                               "deletionTimestamp", "ownerReferences") if k in meta},
            "spec": {"containers": [{k: c[k] for k in ("name", "command", "args", "ports") if k in c}
                                    for c in spec.get("containers") or [] if isinstance(c, dict)]},
            "status": pod.get("status") or {}}

