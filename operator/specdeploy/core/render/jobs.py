"""The operator's short Jobs (pure): the config inspector (a claim's config.json read into the termination message)
and the pod of a SpeculativeBenchmark's client Job. Beside ``objects`` (engine pods) and ``tuning`` (the tuning
Job), these are the only pod specs the operator builds (core/render/gate.py; the contract test
tests/unit/test_pod_choke_point.py). Each is hardened (core/podsecurity.py).

The inspector takes an ``Admitted`` spec only (gate.admit): a claim the tenancy policy refuses is never mounted,
its files never read.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .. import names as N
from ..podsecurity import container_security_context, harden_pod
from .children import RUNTIME_COMMAND
from .gate import Admitted

# The benchmark client's plan (core/bench/plan.build_client_plan): its key in the client's ConfigMap and where the
# client pod mounts it.
CLIENT_PLAN_KEY = "plan.json"
CLIENT_PLAN_MOUNT = "/etc/specdeploy/bench"


def inspector_job_name(cr_name: str, role: str) -> str:
    return f"{cr_name}-inspect-{role}"


def build_inspector_job(admitted: Admitted, role: str, image: str) -> dict:
    """The short Job that reads ``spec.<role>``'s config.json from its claim and reports it in its termination
    message."""
    if not isinstance(admitted, Admitted):  # the gate is not optional: a raw CR would mount any claim
        raise TypeError("build_inspector_job takes an Admitted spec (core/render/gate.admit)")
    cr = admitted.cr
    src = getattr(cr.spec, role)
    path = f"/models/{role}/{src.model.lstrip('/')}"
    inputs = hashlib.sha256(f"{src.pvc.claim_name}|{path}|{image}".encode()).hexdigest()[:16]
    meta: dict[str, Any] = {
        "name": inspector_job_name(cr.metadata.name, role),
        "labels": {N.LABEL_MANAGED_BY: N.MANAGED_BY, N.LABEL_INSTANCE: cr.metadata.name,
                   N.LABEL_COMPONENT: N.COMPONENT_INSPECTOR},
        "annotations": {N.INSPECT_INPUTS_ANNOTATION: inputs},
    }
    if cr.metadata.namespace:
        meta["namespace"] = cr.metadata.namespace
    if cr.metadata.uid:
        meta["ownerReferences"] = [{"apiVersion": N.GROUP_VERSION, "kind": N.KIND,
                                    "name": cr.metadata.name, "uid": cr.metadata.uid, "controller": True,
                                    "blockOwnerDeletion": True}]
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {
            "backoffLimit": 2, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": dict(meta["labels"])},
                "spec": harden_pod({
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "inspect", "image": image,
                        "command": [RUNTIME_COMMAND, "inspect-config", "--path", path],
                        "terminationMessagePolicy": "File",
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                        "volumeMounts": [{"name": "model", "mountPath": f"/models/{role}", "readOnly": True}],
                    }],
                    "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": src.pvc.claim_name,
                                                                             "readOnly": True}}],
                }),  # restricted profile, no token, read-only root (core/podsecurity.py)
            },
        },
    }


def client_pod_spec(plan_configmap: str, image: str, *, env: dict[str, str] | None = None,
                    service_account: str | None = None, api_key=None) -> dict:
    """The pod of a benchmark client Job: ``specdeploy-runtime bench-client`` in ``image`` (the variant's rendered
    engine image, or the serving deployment's), reading its plan from ``plan_configmap``. ``api_key``: the admitted
    deployment's spec.engine.apiKey, sent from ``OPENAI_API_KEY``."""
    secret_env = [] if api_key is None else [{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": api_key.secret_key_ref.name, "key": api_key.secret_key_ref.key}}}]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "client",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": [RUNTIME_COMMAND, "bench-client"],
            "args": ["--plan", f"{CLIENT_PLAN_MOUNT}/{CLIENT_PLAN_KEY}"],
            "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf-home"},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                    *({"name": k, "value": v} for k, v in sorted((env or {}).items())), *secret_env],
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            "securityContext": container_security_context(),
            "volumeMounts": [{"name": "plan", "mountPath": CLIENT_PLAN_MOUNT, "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "plan", "configMap": {"name": plan_configmap}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return harden_pod(pod_spec)


__all__ = ["build_inspector_job", "client_pod_spec", "inspector_job_name"]
