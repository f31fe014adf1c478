"""What every child object of a SpeculativeDeployment shares (pure): names, labels, owner metadata,
and the pod paths and token env that the workload and the tuning Job both use."""

from __future__ import annotations

from typing import Any

from .. import engines as eng
from .. import names as N
from ..names import CONFIG_HASH_ANNOTATION  # noqa: F401 (render.CONFIG_HASH_ANNOTATION for its readers)

MODEL_ROOT = "/models"
HF_HOME = "/var/cache/huggingface"
RUNTIME_COMMAND = "specdeploy-runtime"


def names(cr_name: str) -> dict[str, str]:
    return {"workload": cr_name, "service": cr_name, "pdb": cr_name, "configmap": f"{cr_name}-engine",
            "podmonitor": cr_name}


def selector_labels(cr_name: str) -> dict[str, str]:
    return {
        N.LABEL_NAME: N.NAME_ENGINE,
        N.LABEL_INSTANCE: cr_name,
        N.LABEL_COMPONENT: N.COMPONENT_ENGINE,
    }


def child_labels(cr, engine: str) -> dict[str, str]:
    return {
        **selector_labels(cr.metadata.name),
        N.LABEL_MANAGED_BY: N.MANAGED_BY,
        N.LABEL_PART_OF: N.MANAGED_BY,
        N.ENGINE_LABEL: engine,
    }


def child_meta(cr, name: str, labels: dict, annotations: dict | None = None) -> dict:
    m: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if cr.metadata.namespace:
        m["namespace"] = cr.metadata.namespace
    if annotations:
        m["annotations"] = annotations
    if cr.metadata.uid:
        m["ownerReferences"] = [{
            "apiVersion": N.GROUP_VERSION, "kind": N.KIND, "name": cr.metadata.name,
            "uid": cr.metadata.uid, "controller": True, "blockOwnerDeletion": True,
        }]
    return m


def model_in_pod(src, role: str, baked: bool = False) -> str:
    if baked:
        return eng.BAKED_DRAFTER_PATH
    if src.pvc is not None:
        return f"{MODEL_ROOT}/{role}/{src.model.lstrip('/')}"
    return src.model


def token_env(spec) -> list[dict]:
    token = spec.target.token_secret_ref or (spec.drafter.token_secret_ref if spec.drafter is not None else None)
    if token is None:
        return []
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}]
