"""What every child object of a SpeculativeDeployment shares (pure): names, labels, owner metadata,
and the pod paths and token env that the workload and the tuning Job both use."""

from __future__ import annotations

from typing import Any

from .. import engines as eng
from .. import names as N
from ..names import CONFIG_HASH_ANNOTATION  # noqa: F401 (render.CONFIG_HASH_ANNOTATION for its readers)

MODEL_ROOT = "/models"
RUNTIME_COMMAND = "specdeploy-runtime"


def names(cr_name: str) -> dict[str, str]:
    return {"workload": cr_name, "service": cr_name, "pdb": cr_name, "configmap": f"{cr_name}-engine",
            "podmonitor": cr_name, "networkpolicy": cr_name,
            # spec.rollout Canary: the new revision's Deployment and engine ConfigMap while it is analysed
            "canary": f"{cr_name}-canary", "canaryconfigmap": f"{cr_name}-canary-engine"}


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


# The engine's API key (spec.engine.apiKey), from its Secret through the environment:
# - vLLM reads VLLM_API_KEY when no --api-key is given (vllm/entrypoints/serve/middleware/register.py
#   ``args.api_key or [envs.VLLM_API_KEY]``) and guards the /v1 routes only (middleware/authenticate.py);
# - SGLang has no environment variable for it: ``--api-key $(SPECDEPLOY_ENGINE_API_KEY)`` is expanded by the
#   kubelet from the container's environment (the pod spec holds the reference, never the key); health and
#   metrics are open with a key (sglang/srt/utils/auth.py ``decide_request_auth``).
# Both flag names are in the parser snapshots (data/flags/*.json, "--api-key").
API_KEY_ENV = {"vllm": "VLLM_API_KEY", "sglang": "SPECDEPLOY_ENGINE_API_KEY"}
API_KEY_ARGS = {"vllm": (), "sglang": ("--api-key", "$(SPECDEPLOY_ENGINE_API_KEY)")}


def api_key_env(spec) -> list[dict]:
    key = getattr(spec.engine, "api_key", None)
    if key is None:
        return []
    ref = key.secret_key_ref
    return [{"name": API_KEY_ENV[spec.engine.name], "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}]


def api_key_args(spec) -> list[str]:
    """What the engine's argv gets for spec.engine.apiKey: operator-written text only, never the key."""
    return list(API_KEY_ARGS[spec.engine.name]) if getattr(spec.engine, "api_key", None) is not None else []


def token_env(spec) -> list[dict]:
    token = spec.target.token_secret_ref or (spec.drafter.token_secret_ref if spec.drafter is not None else None)
    if token is None:
        return []
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}]
