"""Rendering (pure): from (CR, target config, drafter config, profile, engine version) to the
workload objects the operator applies. ``specdeploy render`` prints the same objects.

Nothing here is a shell string: the engine gets exec-form ``command`` + ``args``. Every
flag value comes from the spec's validated fields or the checked configs; extraArgs are
appended last, one argv element each, and may not set an owned flag (the checker refuses).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .. import API_GROUP, API_VERSION, KIND
from . import engines as eng
from . import gpus
from .checker import Analysis, Derived, analyze
from .engineconfig import (CHECK_REPORT_KEY, ENGINE_CONFIG_KEY, ENGINE_CONFIG_MOUNT, EngineConfig, ModelRef,
                           SpeculationPlan, config_digest)
from .findings import Finding, report

CONFIG_HASH_ANNOTATION = f"{API_GROUP}/config-hash"
MODEL_ROOT = "/models"
HF_HOME = "/var/cache/huggingface"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
SGLANG_DIST_PORT = 20000
STARTUP_TIMEOUT_SECONDS = 3600  # loading a 600 GB checkpoint can take most of an hour


class RenderError(Exception):
    """The pair or spec has errors; nothing may be rendered. Carries every finding."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("; ".join(f.one_line() for f in findings if f.severity.value == "error"))


@dataclass
class Rendered:
    analysis: Analysis
    engine_config: EngineConfig
    config_hash: str
    objects: list[dict]

    def by_kind(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]


def names(cr_name: str) -> dict[str, str]:
    return {"workload": cr_name, "service": cr_name, "pdb": cr_name, "configmap": f"{cr_name}-engine",
            "podmonitor": cr_name}


def selector_labels(cr_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "specdeploy-engine",
        "app.kubernetes.io/instance": cr_name,
        "app.kubernetes.io/component": "engine",
    }


def child_labels(cr, engine: str) -> dict[str, str]:
    return {
        **selector_labels(cr.metadata.name),
        "app.kubernetes.io/managed-by": "specdeploy",
        "app.kubernetes.io/part-of": "specdeploy",
        f"{API_GROUP}/engine": engine,
    }


def _meta(cr, name: str, labels: dict, annotations: dict | None = None) -> dict:
    m: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if cr.metadata.namespace:
        m["namespace"] = cr.metadata.namespace
    if annotations:
        m["annotations"] = annotations
    if cr.metadata.uid:
        m["ownerReferences"] = [{
            "apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": cr.metadata.name,
            "uid": cr.metadata.uid, "controller": True, "blockOwnerDeletion": True,
        }]
    return m


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand_kubelet_vars(arg: str, env: dict[str, str]) -> str:
    """What kubelet does to ``$(VAR)`` in command/args: substitute defined variables, keep
    undefined references as written, ``$$`` escapes a dollar. No shell is involved."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, arg)


def _model_in_pod(src, role: str) -> str:
    if src.pvc is not None:
        return f"{MODEL_ROOT}/{role}/{src.model.lstrip('/')}"
    return src.model


# ----------------------------------------------------------------- engine arguments


def _sglang_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [f["model"], target]
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    a += [f["tensor_parallel"], str(spec.gpu.count), f["host"], "0.0.0.0", f["port"], str(eng.SGLANG.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    a += [f["algorithm"], "DFLASH", f["draft_model"], drafter]
    if spec.drafter.revision and spec.drafter.pvc is None:
        a += [f["draft_revision"], spec.drafter.revision]
    a += [f["num_draft_tokens"], str(d.block_size)]
    if d.draft_window is not None:
        a += [f["draft_window"], str(d.draft_window)]
    if d.draft_attention_backend:
        a += [f["draft_attention_backend"], d.draft_attention_backend]
    a.append(f["enable_metrics"])
    if not multinode:
        return a + list(spec.engine.extra_args), None
    # Kubelet expands $(VAR) from the container env that LeaderWorkerSet injects: no shell.
    a += [f["nnodes"], str(spec.nodes), f["node_rank"], "$(LWS_WORKER_INDEX)",
          f["dist_init_addr"], f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_PORT}"]
    a += list(spec.engine.extra_args)
    return a, list(a)


def _vllm_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [target]  # `vllm serve MODEL`: the model is positional
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    a += [f["tensor_parallel"], str(spec.gpu.count), f["host"], "0.0.0.0", f["port"], str(eng.VLLM.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    sc: dict[str, Any] = {"method": "dflash", "model": drafter, "num_speculative_tokens": d.num_speculative_tokens}
    if spec.drafter.revision and spec.drafter.pvc is None:
        sc["revision"] = spec.drafter.revision
    if spec.speculation.draft_attention_backend:
        sc["attention_backend"] = row.draft_attention_backends[spec.speculation.draft_attention_backend]
    a += [f["speculative_config"], json.dumps(sc, sort_keys=True, separators=(",", ":"))]
    if not multinode:
        return a + list(spec.engine.extra_args), None
    dist = ["--nnodes", str(spec.nodes), "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    leader = a + dist + list(spec.engine.extra_args)
    worker = a + dist + ["--headless"] + list(spec.engine.extra_args)
    return leader, worker


# ----------------------------------------------------------------- objects


def _probe(path: str, period: int, failures: int, timeout: int = 5) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": timeout}


def _container(spec, ec: EngineConfig, image: str, args: list[str], serve_http: bool) -> dict:
    info = eng.get_engine(ec.engine)
    env = [{"name": k, "value": v} for k, v in sorted(ec.env.items())]
    token = spec.target.token_secret_ref or spec.drafter.token_secret_ref
    if token is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    per_node = spec.gpu.count // spec.nodes
    limits: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)}
    requests: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)}
    for key, val in (("cpu", spec.pod.cpu), ("memory", spec.pod.memory)):
        if val:
            limits[key] = requests[key] = val
    mounts = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": HF_HOME},
        {"name": "engine-config", "mountPath": ENGINE_CONFIG_MOUNT, "readOnly": True},
    ]
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
        if src.pvc is not None:
            mounts.append({"name": f"{role}-model", "mountPath": f"{MODEL_ROOT}/{role}", "readOnly": True})
    c: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(info.entrypoint),
        "args": args,
        "env": env,
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": mounts,
    }
    if serve_http:
        c["ports"] = [{"name": "http", "containerPort": ec.port, "protocol": "TCP"}]
        c["startupProbe"] = _probe(ec.health_path, 10, STARTUP_TIMEOUT_SECONDS // 10)
        # SGLang's /health runs a one-token generation: generous timeouts, so a busy
        # engine is not restarted under load.
        c["readinessProbe"] = _probe(ec.health_path, 10, 3, timeout=10)
        c["livenessProbe"] = _probe(ec.health_path, 30, 5, timeout=30)
    return c


def _pod_template(cr, ec: EngineConfig, prof: gpus.GpuProfile, image: str, args: list[str], config_hash: str,
                  cm_name: str, serve_http: bool) -> dict:
    spec = cr.spec
    labels = child_labels(cr, ec.engine)
    annotations = {CONFIG_HASH_ANNOTATION: config_hash}
    if serve_http:
        annotations.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(ec.port),
                            "prometheus.io/path": ec.metrics_path})
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.pod.shm_size}},
        {"name": "hf-cache", "emptyDir": {}},
        {"name": "engine-config", "configMap": {"name": cm_name}},
    ]
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
        if src.pvc is not None:
            volumes.append({"name": f"{role}-model",
                            "persistentVolumeClaim": {"claimName": src.pvc.claim_name, "readOnly": True}})
    tolerations = [dict(t) for t in gpus.GPU_TOLERATIONS]
    tolerations += [t.model_dump(exclude_none=True) for t in spec.pod.tolerations]
    pod_spec: dict[str, Any] = {
        "nodeSelector": {**spec.pod.node_selector, gpus.PRODUCT_LABEL_KEY: prof.product_label},
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": 120,
        "containers": [_container(spec, ec, image, args, serve_http)],
        "volumes": volumes,
    }
    if spec.pod.priority_class_name:
        pod_spec["priorityClassName"] = spec.pod.priority_class_name
    if spec.pod.service_account_name:
        pod_spec["serviceAccountName"] = spec.pod.service_account_name
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}


def build_configmap(cr, ec: EngineConfig, analysis: Analysis) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(cr, n["configmap"], child_labels(cr, ec.engine)),
        "data": {
            ENGINE_CONFIG_KEY: ec.to_json(),
            CHECK_REPORT_KEY: json.dumps(report(analysis.findings), indent=2, sort_keys=True) + "\n",
        },
    }


def build_deployment(cr, ec: EngineConfig, prof, image: str, config_hash: str) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cr, n["workload"], child_labels(cr, ec.engine)),
        "spec": {
            "replicas": cr.spec.replicas,
            "selector": {"matchLabels": selector_labels(cr.metadata.name)},
            # GPU pools have no spare GPUs to surge into: replace pods one at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": STARTUP_TIMEOUT_SECONDS,
            "revisionHistoryLimit": 3,
            "template": _pod_template(cr, ec, prof, image, ec.args, config_hash, n["configmap"], True),
        },
    }


def build_leaderworkerset(cr, ec: EngineConfig, prof, image: str, config_hash: str) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(cr, n["workload"], child_labels(cr, ec.engine)),
        "spec": {
            "replicas": cr.spec.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": cr.spec.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template(cr, ec, prof, image, ec.args, config_hash, n["configmap"], True),
                "workerTemplate": _pod_template(cr, ec, prof, image, ec.worker_args or ec.args, config_hash,
                                                n["configmap"], False),
            },
        },
    }


def _leader_selector(cr) -> dict:
    sel = selector_labels(cr.metadata.name)
    if cr.spec.nodes > 1:
        sel["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    return sel


def build_service(cr, ec: EngineConfig) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cr, n["service"], child_labels(cr, ec.engine)),
        "spec": {
            "type": "ClusterIP",
            "selector": _leader_selector(cr),
            "ports": [
                {"name": "http", "port": ec.port, "targetPort": "http", "protocol": "TCP"},
                # Both engines serve /metrics on the API port; a named port for scrapers.
                {"name": "metrics", "port": 9090, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def build_pdb(cr, ec: EngineConfig) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(cr, n["pdb"], child_labels(cr, ec.engine)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(cr.metadata.name)}},
    }


def build_podmonitor(cr, ec: EngineConfig) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(cr, n["podmonitor"], child_labels(cr, ec.engine)),
        "spec": {
            "selector": {"matchLabels": _leader_selector(cr)},
            "podMetricsEndpoints": [{"port": "http", "path": ec.metrics_path, "interval": "15s"}],
        },
    }


def build_engine_config(cr, analysis: Analysis, target_doc: Any, drafter_doc: Any) -> EngineConfig:
    spec = cr.spec
    d = analysis.derived
    assert d is not None
    info = eng.get_engine(spec.engine.name)
    row = info.release_for(spec.engine.version)
    assert row is not None
    target = _model_in_pod(spec.target, "target")
    drafter = _model_in_pod(spec.drafter, "drafter")
    multinode = spec.nodes > 1
    build = _sglang_args if info.name == "sglang" else _vllm_args
    args, worker_args = build(spec, d, row, target, drafter, multinode)
    env = dict(d.engine_env)
    env["HF_HOME"] = HF_HOME
    return EngineConfig(
        engine=info.name,
        engine_version=spec.engine.version,
        command=list(info.entrypoint),
        args=args,
        worker_args=worker_args,
        env=env,
        port=info.port,
        health_path=info.health_path,
        metrics_path=info.metrics_path,
        target=ModelRef(model=target, revision=spec.target.revision, config_digest=config_digest(target_doc)),
        drafter=ModelRef(model=drafter, revision=spec.drafter.revision, config_digest=config_digest(drafter_doc)),
        speculation=SpeculationPlan(
            method=spec.speculation.method,
            block_size=d.block_size,
            num_speculative_tokens=d.num_speculative_tokens,
            draft_window=d.draft_window,
            drafter_window=d.drafter_window,
            layer_types=list(d.layer_types),
            target_layer_ids=list(d.target_layer_ids),
        ),
        gpu_profile=spec.gpu.type,
        tensor_parallel_size=spec.gpu.count,
        nodes=spec.nodes,
    )


def render(cr, target_doc: Any, drafter_doc: Any, *, pod_monitor: bool = False) -> Rendered:
    """Every child object for a SpeculativeDeployment; raises RenderError when the check fails."""
    analysis = analyze(drafter_doc, target_doc, cr.spec.options())
    if not analysis.ok or analysis.derived is None:
        raise RenderError(analysis.findings)
    spec = cr.spec
    prof = gpus.get_profile(spec.gpu.type)
    ec = build_engine_config(cr, analysis, target_doc, drafter_doc)
    image = spec.engine.image or eng.get_engine(spec.engine.name).default_image(spec.engine.version)
    config_hash = ec.digest()[:16]
    workload = (build_leaderworkerset if spec.nodes > 1 else build_deployment)(cr, ec, prof, image, config_hash)
    objects = [build_configmap(cr, ec, analysis), workload, build_service(cr, ec), build_pdb(cr, ec)]
    if pod_monitor:
        objects.append(build_podmonitor(cr, ec))
    return Rendered(analysis=analysis, engine_config=ec, config_hash=config_hash, objects=objects)
