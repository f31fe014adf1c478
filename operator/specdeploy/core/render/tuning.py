"""Tuned fused-MoE kernels (pure): the tuning plan, the tuning Job, the ConfigMap built from its result,
and the volumes the engine pods mount it from."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import engines as eng
from .. import gpus
from .. import names as N
from .. import tuning as tn
from ..engineconfig import config_digest
from ..podsecurity import container_security_context, harden_pod
from .children import MODEL_ROOT, RUNTIME_COMMAND, child_meta, model_in_pod, token_env

TUNED_MOUNT = "/var/run/specdeploy/tuned-kernels"
TUNED_SRC_MOUNT = "/var/run/specdeploy/tuned-src"
TUNING_OUT_MOUNT = "/var/run/specdeploy/tuning-out"
TUNING_DEADLINE_SECONDS = 6 * 3600
TUNING_KEY_ANNOTATION = N.TUNING_KEY_ANNOTATION
CONFIGMAP_LIMIT = 1024 * 1024  # etcd's ~1 MiB object limit (ConfigMap data + metadata)


@dataclass(frozen=True)
class TuningPlan:
    """What the tuning Job tunes and where the engine pods find the result."""

    key: str  # sha256 of the inputs (hex)
    engine: str
    engine_version: str
    image: str
    product_label: str
    device_name: str
    tp: int
    shape: dict  # tuning.MoeShape.to_dict() as the engine computes it
    file_name: str  # E=..,N=..,device_name=..[,dtype=..].json
    storage: str  # configMap | pvc
    claim_name: str | None
    job_name: str
    configmap_name: str
    env_var: str  # SGLANG_MOE_CONFIG_DIR | VLLM_TUNED_CONFIG_FOLDER

    @property
    def short(self) -> str:
        return self.key[:10]


def tuning_volumes(tuning: TuningPlan | None) -> list[dict]:
    if tuning is None:
        return []
    if tuning.storage == "pvc":
        return [{"name": "tuned-kernels", "persistentVolumeClaim": {"claimName": tuning.claim_name, "readOnly": True}}]
    # optional: pods started before the tuning Job finished run with the engine's defaults
    return [{"name": "tuned-kernels-src", "configMap": {"name": tuning.configmap_name, "optional": True}},
            {"name": "tuned-kernels", "emptyDir": {"sizeLimit": "16Mi"}}]


def _dns_name(prefix: str, suffix: str, limit: int = 63) -> str:
    head = prefix[: limit - len(suffix)].rstrip("-.")
    return head + suffix


def tuning_plan(cr, target_doc: Any, image: str | None = None) -> TuningPlan | None:
    """The tuning this deployment gets, or None: tuning off, a dense target, or experts that do not run
    on the Triton fused-MoE kernel (nothing to tune)."""
    spec = cr.spec
    if not spec.tuning.enabled:
        return None
    info = eng.get_engine(spec.engine.name)
    prof = gpus.get_profile(spec.gpu.type)
    if not prof.accelerator:
        raise tn.UnsupportedShape("the CPU pool has no fused-MoE GPU kernels to tune")
    try:
        shape = tn.moe_shape(target_doc, info.name, spec.gpu.count)
    except (tn.NotMoE, tn.UnsupportedShape):
        return None
    except (ValueError, TypeError, ArithmeticError) as e:  # MoE fields of the wrong type or size
        raise tn.UnsupportedShape(f"the target's MoE fields cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    image = image or spec.engine.image or info.default_image(spec.engine.version)
    inputs = {"engine": info.name, "engineVersion": spec.engine.version, "image": image,
              "gpuProduct": prof.product_label, "deviceName": prof.device_name, "tp": spec.gpu.count,
              "target": spec.target.model, "targetConfigDigest": config_digest(target_doc), "shape": shape.to_dict()}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    name = cr.metadata.name
    return TuningPlan(
        key=key, engine=info.name, engine_version=spec.engine.version, image=image, product_label=prof.product_label,
        device_name=prof.device_name, tp=spec.gpu.count, shape=shape.to_dict(),
        file_name=tn.config_file_name(info.name, shape, prof.device_name), storage=spec.tuning.storage,
        claim_name=spec.tuning.pvc.claim_name if spec.tuning.pvc else None,
        job_name=_dns_name(name, f"-tune-{key[:10]}"), configmap_name=_dns_name(name, f"-tuned-{key[:10]}", 253),
        env_var=tn.CONFIG_DIR_ENV[info.name],
    )


def tuning_labels(cr, plan: TuningPlan) -> dict[str, str]:
    return {
        N.LABEL_NAME: N.NAME_TUNING,
        N.LABEL_INSTANCE: cr.metadata.name,
        N.LABEL_COMPONENT: N.COMPONENT_TUNING,
        N.LABEL_MANAGED_BY: N.MANAGED_BY,
        N.LABEL_PART_OF: N.MANAGED_BY,
        N.ENGINE_LABEL: plan.engine,
        N.TUNING_KEY_LABEL: plan.short,
    }


def build_tuning_job(cr, plan: TuningPlan) -> dict:
    """The Job that runs ``specdeploy-runtime tune`` on one replica's GPU product; pure.

    One per (target model and config, GPU product, engine version and image, TP shape): the name carries
    the key's hash, so a changed input is a new Job and an unchanged one is the same. Create it once;
    never patch it (a Job's pod template is immutable)."""
    spec = cr.spec
    per_node = spec.gpu.count // spec.nodes
    args = ["--engine", plan.engine, "--tp", str(plan.tp), "--gpu-device-name", plan.device_name,
            "--key", plan.key, "--work-dir", "/tmp"]
    mounts = [{"name": "scratch", "mountPath": "/tmp"}, {"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict] = [{"name": "scratch", "emptyDir": {"sizeLimit": "8Gi"}},
                           {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.pod.shm_size}}]
    if spec.target.pvc is not None:
        args += ["--target-dir", model_in_pod(spec.target, "target")]
        mounts.append({"name": "target-model", "mountPath": f"{MODEL_ROOT}/target", "readOnly": True})
        volumes.append({"name": "target-model",
                        "persistentVolumeClaim": {"claimName": spec.target.pvc.claim_name, "readOnly": True}})
    else:
        args += ["--target-model", spec.target.model]
        if spec.target.revision:
            args += ["--target-revision", spec.target.revision]
    if plan.storage == "pvc":
        args += ["--out-dir", f"{TUNING_OUT_MOUNT}/{plan.short}"]
        mounts.append({"name": "tuning-out", "mountPath": TUNING_OUT_MOUNT})
        volumes.append({"name": "tuning-out", "persistentVolumeClaim": {"claimName": plan.claim_name}})
    limits: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)}
    requests: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)}
    for key, val in (("cpu", spec.pod.cpu), ("memory", spec.pod.memory)):
        if val:
            limits[key] = requests[key] = val
    labels = tuning_labels(cr, plan)
    tolerations = [dict(t) for t in gpus.GPU_TOLERATIONS] + [t.model_dump(exclude_none=True) for t in spec.pod.tolerations]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {**spec.pod.node_selector, gpus.PRODUCT_LABEL_KEY: plan.product_label},
        "tolerations": tolerations,
        "containers": [{
            "name": "tune",
            "image": plan.image,
            "imagePullPolicy": "IfNotPresent",
            "command": [RUNTIME_COMMAND, "tune"],
            "args": args,
            "env": [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": "/tmp/hf-home"},
                    {"name": "TRITON_CACHE_DIR", "value": "/tmp/triton"},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *token_env(spec)],
            "resources": {"limits": limits, "requests": requests},
            "securityContext": container_security_context(),
            # the result (gzip + base64, a few hundred bytes) is read from here by the operator
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    }
    if spec.pod.priority_class_name:
        pod_spec["priorityClassName"] = spec.pod.priority_class_name
    harden_pod(pod_spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": child_meta(cr, plan.job_name, labels, {TUNING_KEY_ANNOTATION: plan.key}),
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": TUNING_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": 7 * 24 * 3600,
            "template": {"metadata": {"labels": labels, "annotations": {TUNING_KEY_ANNOTATION: plan.key}},
                         "spec": pod_spec},
        },
    }


def build_tuned_configmap(cr, plan: TuningPlan, termination_message: str) -> dict:
    """The ConfigMap the engine pods mount (storage configMap), from the tuning Job's termination
    message. Raises ValueError for a message that is not a result of this key or would not fit."""

    meta, files = tn.decode_envelope(termination_message)
    if meta.get("key") not in (None, plan.key):
        raise ValueError(f"the tuning result is for key {str(meta.get('key'))[:10]}, not {plan.short}")
    if meta.get("engine") != plan.engine:
        raise ValueError(f"the tuning result is for {meta.get('engine')}, not {plan.engine}")
    data = tn.configmap_data(files, {**meta, "key": plan.key})
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT - 16 * 1024:
        raise ValueError(f"{size} bytes of tuned files do not fit a ConfigMap (~1 MiB): use spec.tuning.storage: pvc")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_meta(cr, plan.configmap_name, tuning_labels(cr, plan), {TUNING_KEY_ANNOTATION: plan.key}),
        "data": data,
    }


def render_tuning(cr, target_doc: Any, image: str | None = None) -> tuple[TuningPlan | None, list[dict]]:
    """(plan, [Job]) for spec.tuning.enabled with a tunable MoE target; (None, []) otherwise."""
    plan = tuning_plan(cr, target_doc, image)
    return plan, ([build_tuning_job(cr, plan)] if plan is not None else [])
