"""Workload objects (pure): from (CR, target config, drafter config, profile, engine version) to the
Deployment or LeaderWorkerSet, Service, PodDisruptionBudget, engine ConfigMap and PodMonitor the operator
applies; ``render`` assembles them. ``specdeploy render`` prints the same objects.

Nothing here is a shell string: the engine gets exec-form ``command`` + ``args``. Every
flag value comes from the spec's validated fields or the checked configs; extraArgs are
appended last, one argv element each, and may not set an owned flag (the checker refuses).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .. import engines as eng
from .. import gpus
from ..checker import Analysis, analyze
from ..engineconfig import (CHECK_REPORT_KEY, ENGINE_CONFIG_KEY, ENGINE_CONFIG_MOUNT, EngineConfig, ModelRef,
                            SpeculationPlan, config_digest)
from ..rollout import guard as gd
from .. import names as N
from ..rollout import canary as ro
from .. import tuning as tn
from ..cache import HF_HOME, CacheError, CachePlan, plan_cache
from ..findings import Finding, Severity, Source, report
from ..podsecurity import ENGINE_CACHE, container_security_context, engine_write_env, harden_pod
from .argv import ARG_BUILDERS, method_render_problem
from .children import (CONFIG_HASH_ANNOTATION, MODEL_ROOT, RUNTIME_COMMAND, api_key_args, api_key_env,
                       child_labels, child_meta, model_in_pod, names, selector_labels, token_env)
from .guard import apply_guard, plan_guard
from .tuning import TUNED_MOUNT, TUNED_SRC_MOUNT, TuningPlan, render_tuning, tuning_volumes
from specdeploy.core.errors import Permanent

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
STARTUP_TIMEOUT_SECONDS = 3600  # loading a 600 GB checkpoint can take most of an hour
# spec.rollout Canary: the engine container's preStop hook waits this long before SIGTERM, so that the pod's endpoint
# is gone from every node's Service routing before the engine stops listening (docs/how-to/roll-out-safely.md)
PRESTOP_SLEEP_SECONDS = 5
# SIGTERM to SIGKILL: room for the preStop wait, the engine's drain (argv.VLLM_DRAIN_SECONDS) and its exit
TERMINATION_GRACE_SECONDS = 120
PREFLIGHT_DOWNLOAD_DIR = "/var/run/specdeploy/configs"

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([EPTGMK]i?|[mk])?$")
_UNIT = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "k": 1e3, "K": 1e3,
         "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "m": 1e-3}
CPU_KV_FRACTION = 0.5  # of the pod's memory for the CPU build's KV cache; the rest holds weights and activations
# The CPU pool's engine container when spec.pod leaves them unset: a pod without requests is BestEffort
# (evicted first) and the KV cache size is derived from the memory.
CPU_POD_DEFAULTS = (("cpu", "2"), ("memory", "4Gi"))


def pod_resources(spec) -> dict[str, str]:
    """cpu/memory of the engine container: spec.pod's, else the CPU pool's defaults there."""
    out = {k: v for k, v in (("cpu", spec.pod.cpu), ("memory", spec.pod.memory)) if v}
    if not gpus.get_profile(spec.gpu.type).accelerator:
        out = {**dict(CPU_POD_DEFAULTS), **out}
    return out


def cpu_kv_cache_gib(memory: str | None) -> int:
    """GiB of KV cache for the CPU build (VLLM_CPU_KVCACHE_SPACE) from spec.pod.memory: half of it,
    at least 1 (also when no memory is set)."""
    m = _QUANTITY.match(memory or "")
    if not m:
        return 1
    try:
        size = float(m.group(1)) * _UNIT.get(m.group(2) or "", 1)
        return max(1, int(size * CPU_KV_FRACTION // 2**30))
    except (OverflowError, ValueError):  # past a float (the API bounds the field's length; a caller that skipped it)
        return 1


class RenderError(Permanent):
    """The pair or spec has errors; nothing may be rendered. Carries every finding."""

    def __init__(self, findings: list[Finding], accepted: list[Finding] | None = None):
        self.findings = findings
        self.accepted = list(accepted or [])
        super().__init__("; ".join(f.one_line() for f in findings if f.severity.value == "error"))


class PolicyRefused(RenderError):
    """The tenancy policy refused the spec (core/render/gate.py): nothing may be read, created or rendered on its
    behalf. ``findings`` are the policy's (codes ``Policy*``, core/catalog.py)."""


@dataclass
class Rendered:
    analysis: Analysis
    engine_config: EngineConfig
    config_hash: str
    objects: list[dict]
    # Objects the operator creates only once (never patched): the tuning Job when spec.tuning.enabled.
    tuning_objects: list[dict] = field(default_factory=list)
    tuning: "TuningPlan | None" = None
    image: str | None = None
    baked_drafter: eng.BakedDrafterImage | None = None
    cache: CachePlan = field(default_factory=lambda: CachePlan("emptyDir"))
    guard: "gd.GuardPlan | None" = None  # spec.speculation.guard as rendered (None: no guard, or not yet resolved)
    # spec.rollout Canary: the rollout revision (core/rollout/canary.revision) written on the pod template as
    # REVISION_ANNOTATION; None under RollingUpdate (the template is then as it always was)
    revision: str | None = None

    def by_kind(self, kind: str) -> list[dict]:
        return [o for o in self.objects + self.tuning_objects if o["kind"] == kind]


def _probe(path: str, period: int, failures: int, timeout: int = 5) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": timeout}


def _container(spec, ec: EngineConfig, image: str, args: list[str], serve_http: bool,
               tuning: TuningPlan | None = None) -> dict:
    info = eng.get_engine(ec.engine)
    env = [{"name": k, "value": v} for k, v in sorted(ec.env.items())]
    if tuning is not None:
        env.append({"name": tuning.env_var, "value": TUNED_MOUNT})
    env += token_env(spec)
    if serve_http:  # the engine's API (the leader of a multi-node group): spec.engine.apiKey
        env += api_key_env(spec)
        args = [*args, *api_key_args(spec)]
    per_node = spec.gpu.count // spec.nodes
    accelerated = gpus.get_profile(spec.gpu.type).accelerator
    limits: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)} if accelerated else {}
    requests: dict[str, str] = {gpus.GPU_RESOURCE: str(per_node)} if accelerated else {}
    for key, val in pod_resources(spec).items():
        limits[key] = requests[key] = val
    mounts = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": HF_HOME},
        {"name": "engine-cache", "mountPath": ENGINE_CACHE},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "engine-config", "mountPath": ENGINE_CONFIG_MOUNT, "readOnly": True},
    ]
    for role, src in spec.model_sources():
        if src.pvc is not None:
            mounts.append({"name": f"{role}-model", "mountPath": f"{MODEL_ROOT}/{role}", "readOnly": True})
    if tuning is not None:
        m = {"name": "tuned-kernels", "mountPath": TUNED_MOUNT, "readOnly": True}
        if tuning.storage == "pvc":
            m["subPath"] = tuning.short
        mounts.append(m)
    c: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(info.entrypoint),
        "args": args,
        "env": env,
        "resources": {"limits": limits, "requests": requests},
        "securityContext": container_security_context(),
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


def prefetches(spec, baked: bool, cache: CachePlan | None, target_only: bool = False) -> bool:
    """Whether the preflight downloads weights: a persistent cache and at least one hub model to fill it with."""
    hub = [src for role, src in _preflight_sources(spec, target_only)
           if src.pvc is None and not (baked and role == "drafter")]
    return cache is not None and cache.persistent and bool(hub)


def _preflight_sources(spec, target_only: bool) -> list:
    """The models the preflight checks: every model source, or the target alone (speculation off: a benchmark's
    baseline variant serves the target without a drafter)."""
    return [("target", spec.target)] if target_only else spec.model_sources()


def preflight_args(spec, ec: EngineConfig, baked: bool = False, cache: CachePlan | None = None,
                   target_only: bool = False) -> list[str]:
    """Arguments of the preflight init container: mounted dirs for PVC models (and the baked drafter),
    hub repo ids otherwise (preflight downloads their config.json; with a persistent cache also their
    weights, into the cache, once). ``target_only``: speculation off (``--no-speculation``): the target's
    config and weights, and an argv that must carry no speculative flag."""
    a: list[str] = []
    for role, src in _preflight_sources(spec, target_only):
        is_baked = baked and role == "drafter"
        if src.pvc is not None or is_baked:
            a += [f"--{role}-dir", model_in_pod(src, role, is_baked)]
        else:
            a += [f"--{role}-model", src.model]
            if src.revision:
                a += [f"--{role}-revision", src.revision]
    a += ["--engine-config", f"{ENGINE_CONFIG_MOUNT}/{ENGINE_CONFIG_KEY}", "--download-dir", PREFLIGHT_DOWNLOAD_DIR]
    if target_only:
        a.append("--no-speculation")
    elif baked:
        a.append("--expect-baked")
    if prefetches(spec, baked, cache, target_only):
        a += ["--weights-cache", HF_HOME]
    return a


def _init_containers(spec, ec: EngineConfig, image: str, baked: bool, tuning: TuningPlan | None,
                     cache: CachePlan | None = None, target_only: bool = False) -> list[dict]:
    mounts = [{"name": "engine-config", "mountPath": ENGINE_CONFIG_MOUNT, "readOnly": True},
              {"name": "preflight-scratch", "mountPath": PREFLIGHT_DOWNLOAD_DIR, "subPath": "configs"},
              {"name": "preflight-scratch", "mountPath": "/tmp", "subPath": "tmp"}]
    for role, src in _preflight_sources(spec, target_only):
        if src.pvc is not None:
            mounts.append({"name": f"{role}-model", "mountPath": f"{MODEL_ROOT}/{role}", "readOnly": True})
    fill = prefetches(spec, baked, cache, target_only)
    if fill:  # the preflight fills the persistent cache the engine then reads offline
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": HF_HOME if fill else "/tmp/hf-home"},
           {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *token_env(spec)]
    # a weight download streams files to disk, but keep room for the hub client's buffers
    small = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi" if fill else "1Gi"}}
    out = [{
        "name": "preflight",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [RUNTIME_COMMAND, "preflight"],
        "args": preflight_args(spec, ec, baked, cache, target_only),
        "env": env,
        "resources": small,
        "securityContext": container_security_context(),
        # the one-screen verdict reaches `kubectl describe pod` even if the process dies before writing it
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }]
    if tuning is not None and tuning.storage == "configMap":
        out.append({
            "name": "tuned-kernels",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": [RUNTIME_COMMAND, "install-tuned"],
            "args": ["--src", TUNED_SRC_MOUNT, "--dest", TUNED_MOUNT],
            "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            "securityContext": container_security_context(),
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": [{"name": "tuned-kernels-src", "mountPath": TUNED_SRC_MOUNT, "readOnly": True},
                             {"name": "tuned-kernels", "mountPath": TUNED_MOUNT}],
        })
    return out


def _pod_template(cr, ec: EngineConfig, prof: gpus.GpuProfile, image: str, args: list[str], config_hash: str,
                  cm_name: str, serve_http: bool, baked: bool = False, tuning: TuningPlan | None = None,
                  service_account: str | None = None, cache: CachePlan | None = None,
                  target_only: bool = False) -> dict:
    spec = cr.spec
    labels = child_labels(cr, ec.engine)
    annotations = {CONFIG_HASH_ANNOTATION: config_hash}
    if serve_http:
        annotations.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(ec.port),
                            "prometheus.io/path": ec.metrics_path})
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.pod.shm_size}},
        (cache or CachePlan("emptyDir")).volume("hf-cache"),
        # the engine's JIT caches (HOME, Triton, inductor, vLLM/SGLang caches) and /tmp: podsecurity.engine_write_env
        {"name": "engine-cache", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "engine-config", "configMap": {"name": cm_name}},
        {"name": "preflight-scratch", "emptyDir": {"sizeLimit": "64Mi"}},
    ]
    for role, src in spec.model_sources():
        if src.pvc is not None:
            volumes.append({"name": f"{role}-model",
                            "persistentVolumeClaim": {"claimName": src.pvc.claim_name, "readOnly": True}})
    volumes += tuning_volumes(tuning)
    tolerations = [dict(t) for t in gpus.GPU_TOLERATIONS] if prof.accelerator else []
    tolerations += [t.model_dump(exclude_none=True) for t in spec.pod.tolerations]
    selector = {**spec.pod.node_selector, gpus.PRODUCT_LABEL_KEY: prof.product_label} if prof.accelerator \
        else dict(spec.pod.node_selector)
    pod_spec: dict[str, Any] = {
        **({"nodeSelector": selector} if selector else {}),
        **({"tolerations": tolerations} if tolerations else {}),
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # the engine container starts only after every init container exited 0
        "initContainers": _init_containers(spec, ec, image, baked, tuning, cache, target_only),
        "containers": [_container(spec, ec, image, args, serve_http, tuning)],
        "volumes": volumes,
    }
    if spec.pod.priority_class_name:
        pod_spec["priorityClassName"] = spec.pod.priority_class_name
    if spec.pod.service_account_name or service_account:
        pod_spec["serviceAccountName"] = spec.pod.service_account_name or service_account
    harden_pod(pod_spec)  # restricted Pod Security Standard, no token, read-only root (core/podsecurity.py)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}


def build_configmap(cr, ec: EngineConfig, analysis: Analysis, ec_json: str | None = None) -> dict:
    """``ec_json``: ``ec.to_json()`` when the caller has it already (render hashes the same text)."""
    n = names(cr.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_meta(cr, n["configmap"], child_labels(cr, ec.engine)),
        "data": {
            ENGINE_CONFIG_KEY: ec_json if ec_json is not None else ec.to_json(),
            CHECK_REPORT_KEY: json.dumps(report(analysis.findings), indent=2, sort_keys=True) + "\n",
        },
    }


def build_deployment(cr, ec: EngineConfig, prof, image: str, config_hash: str, *, baked: bool = False,
                     tuning: TuningPlan | None = None, service_account: str | None = None,
                     cache: CachePlan | None = None, target_only: bool = False) -> dict:
    """``target_only``: speculation off (a benchmark's baseline variant): the preflight checks the target alone
    (``preflight --no-speculation``)."""
    n = names(cr.metadata.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_meta(cr, n["workload"], child_labels(cr, ec.engine)),
        "spec": {
            "replicas": cr.spec.replicas,
            "selector": {"matchLabels": selector_labels(cr.metadata.name)},
            # GPU pools have no spare GPUs to surge into: replace pods one at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": STARTUP_TIMEOUT_SECONDS,
            "revisionHistoryLimit": 3,
            "template": _pod_template(cr, ec, prof, image, ec.args, config_hash, n["configmap"], True, baked, tuning,
                                      service_account, cache, target_only),
        },
    }


def build_leaderworkerset(cr, ec: EngineConfig, prof, image: str, config_hash: str, *, baked: bool = False,
                          tuning: TuningPlan | None = None, service_account: str | None = None,
                          cache: CachePlan | None = None) -> dict:
    n = names(cr.metadata.name)
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": child_meta(cr, n["workload"], child_labels(cr, ec.engine)),
        "spec": {
            "replicas": cr.spec.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": cr.spec.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod_template(cr, ec, prof, image, ec.args, config_hash, n["configmap"], True,
                                                baked, tuning, service_account, cache),
                "workerTemplate": _pod_template(cr, ec, prof, image, ec.worker_args or ec.args, config_hash,
                                                n["configmap"], False, baked, tuning, service_account, cache),
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
        "metadata": child_meta(cr, n["service"], child_labels(cr, ec.engine)),
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
        "metadata": child_meta(cr, n["pdb"], child_labels(cr, ec.engine)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(cr.metadata.name)}},
    }


def build_podmonitor(cr, ec: EngineConfig, extra_labels: Mapping[str, str] | None = None) -> dict:
    """``extra_labels``: SPECDEPLOY_POD_MONITOR_LABELS (chart value podMonitor.labels), e.g. the label a
    kube-prometheus-stack podMonitorSelector selects; the operator's own labels win over them."""
    n = names(cr.metadata.name)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": child_meta(cr, n["podmonitor"], {**(extra_labels or {}), **child_labels(cr, ec.engine)}),
        "spec": {
            "selector": {"matchLabels": _leader_selector(cr)},
            "podMetricsEndpoints": [{"port": "http", "path": ec.metrics_path, "interval": "15s"}],
        },
    }


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every Namespace by the API server (1.22+)


def build_network_policy(cr, ec: EngineConfig, namespaces: Sequence[str] = ()) -> dict:
    """Ingress to this deployment's engine pods (leader and workers) only from pods of the same namespace and of
    ``namespaces`` (the monitoring namespace, the operator's: chart value engineNetworkPolicy, operator flag
    --engine-network-policy): docs/concepts/security.md, "Engine network"."""
    n = names(cr.metadata.name)
    peers: list[dict] = [{"podSelector": {}}]
    peers += [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
              for ns in sorted(set(namespaces)) if ns != cr.metadata.namespace]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_meta(cr, n["networkpolicy"], child_labels(cr, ec.engine)),
        "spec": {"podSelector": {"matchLabels": selector_labels(cr.metadata.name)}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": peers}]},
    }


def build_engine_config(cr, analysis: Analysis, target_doc: Any, drafter_doc: Any, *, baked: bool = False,
                        cache: CachePlan | None = None, guard: "gd.GuardPlan | None" = None) -> EngineConfig:
    spec = cr.spec
    d = analysis.derived
    assert d is not None
    info = eng.get_engine(spec.engine.name)
    row = info.release_for(spec.engine.version)
    assert row is not None
    target = model_in_pod(spec.target, "target")
    drafter = model_in_pod(spec.drafter, "drafter", baked) if spec.drafter is not None else None
    multinode = spec.nodes > 1
    problem = method_render_problem(info.name, spec.speculation.method, row)
    if problem is not None:
        raise RenderError([problem])
    args, worker_args = ARG_BUILDERS[(info.name, spec.speculation.method)](spec, d, row, target, drafter, multinode, baked)
    args, worker_args = apply_guard(args, row, guard), apply_guard(worker_args, row, guard)
    env = dict(d.engine_env)
    env["HF_HOME"] = HF_HOME
    if prefetches(spec, baked, cache):
        # the preflight filled the cache with every hub model's files: the engine needs no network for them
        env["HF_HUB_OFFLINE"] = "1"
    accelerated = gpus.get_profile(spec.gpu.type).accelerator
    # the root filesystem is read-only: every cache the engine writes goes to the engine-cache volume
    for k, v in engine_write_env(info.name, accelerated).items():
        env.setdefault(k, v)
    build = eng.cpu_build(info.name) if not accelerated else None
    if build is not None:
        env[build.kv_cache_env] = str(cpu_kv_cache_gib(pod_resources(spec)["memory"]))
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
        drafter=(ModelRef(model=drafter, revision=spec.drafter.revision, config_digest=config_digest(drafter_doc))
                 if drafter is not None else None),
        speculation=SpeculationPlan(
            method=spec.speculation.method,
            engine_method=row.engine_method(spec.speculation.method),
            steps=d.steps,
            topk=d.topk,
            block_size=d.block_size,
            num_speculative_tokens=d.num_speculative_tokens,
            draft_window=d.draft_window,
            drafter_window=d.drafter_window,
            layer_types=list(d.layer_types),
            target_layer_ids=list(d.target_layer_ids),
            native_window=d.native_window,
        ),
        gpu_profile=spec.gpu.type,
        tensor_parallel_size=spec.gpu.count,
        nodes=spec.nodes,
        checker_options=analysis.options,
    )


def choose_image(cr, drafter_doc: Any, table: tuple[eng.BakedDrafterImage, ...] | None = None
                 ) -> tuple[str, eng.BakedDrafterImage | None, Finding | None]:
    """(image, baked-drafter row or None, a warning or None). ``spec.engine.image`` wins; else an image
    from the image table that carries exactly the requested drafter commit; else the default runtime image
    (the CPU build's on the CPU pool)."""
    spec = cr.spec
    info = eng.get_engine(spec.engine.name)
    build = eng.cpu_build(info.name) if not gpus.get_profile(spec.gpu.type).accelerator else None
    default = build.image(spec.engine.version) if build is not None else info.default_image(spec.engine.version)
    if spec.engine.image:
        return spec.engine.image, None, None
    if spec.drafter is None or spec.drafter.pvc is not None:
        return default, None, None
    row = eng.baked_drafter_image(info.name, spec.engine.version, spec.drafter.model, spec.drafter.revision, table)
    if row is None:
        return default, None, None
    got = config_digest(drafter_doc)
    if row.config_digest != got:
        return default, None, Finding(
            Severity.WARNING, "BakedDrafterDigestMismatch", Source.DRAFTER, "$",
            f"the image table lists {row.image} as carrying {row.drafter_repo}@{row.drafter_revision[:12]}, but its "
            f"config digest {row.config_digest[:19]}... is not the hub's {got[:19]}... for that commit; the drafter is "
            "downloaded instead. Fix the image table row (core/engines.py)")
    return row.image, row, None


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def pin_commits(cr, target_commit: str | None, drafter_commit: str | None):
    """The CR with the hub revision of the target and the drafter set to their resolved commits (spec.rollout
    Canary: a revision is one set of weights, so a branch that moves on the hub cannot change what a running
    revision's new pods load). A claim's model, a spec revision that is already a commit, or no commit: as it is."""
    spec = cr.spec
    update: dict[str, Any] = {}
    for role, commit in (("target", target_commit), ("drafter", drafter_commit)):
        src = getattr(spec, role)
        if src is None or src.pvc is not None or not commit or not _COMMIT.match(commit) \
                or (src.revision and _COMMIT.match(src.revision)):
            continue
        update[role] = src.model_copy(update={"revision": commit})
    if not update:
        return cr
    return cr.model_copy(update={"spec": spec.model_copy(update=update)})


def build_canary(cr, rendered: Rendered, replicas: int | None = None) -> list[dict]:
    """The canary children of a Canary rollout from the same render as the stable ones: ConfigMap
    ``NAME-canary-engine`` (the engine config of the new revision) and Deployment ``NAME-canary``
    (``spec.rollout.canary.replicas`` pods of the new revision's template, mounting that ConfigMap). Both are
    labelled ``TRACK_LABEL: canary``; the Deployment selects its own pods by it, while the Service (selector_labels)
    sends traffic to stable and canary pods alike, in proportion of their endpoints."""
    n = names(cr.metadata.name)
    stable = next(o for o in rendered.objects if o["kind"] == "Deployment")
    cm = next(o for o in rendered.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == n["configmap"])
    track = {N.TRACK_LABEL: N.TRACK_CANARY}
    if replicas is None:
        replicas = cr.spec.rollout.canary.replicas if cr.spec.rollout is not None else 1
    canary_cm = copy.deepcopy(cm)
    canary_cm["metadata"]["name"] = n["canaryconfigmap"]
    canary_cm["metadata"]["labels"] = {**cm["metadata"]["labels"], **track}
    dep = copy.deepcopy(stable)
    dep["metadata"]["name"] = n["canary"]
    dep["metadata"]["labels"] = {**stable["metadata"]["labels"], **track}
    spec = dep["spec"]
    spec["replicas"] = replicas
    spec["selector"] = {"matchLabels": {**selector_labels(cr.metadata.name), **track}}
    tmpl = spec["template"]
    tmpl["metadata"]["labels"] = {**tmpl["metadata"]["labels"], **track}
    for v in tmpl["spec"].get("volumes") or []:
        if (v.get("configMap") or {}).get("name") == n["configmap"]:
            v["configMap"]["name"] = n["canaryconfigmap"]
    return [canary_cm, dep]


def render(cr, target_doc: Any, drafter_doc: Any, *, pod_monitor: bool = False,
           image_table: tuple[eng.BakedDrafterImage, ...] | None = None, policy=None,
           guard: "gd.GuardLimit | None" = None, pod_monitor_labels: Mapping[str, str] | None = None,
           network_policy: Sequence[str] | None = None,
           commits: tuple[str | None, str | None] = (None, None),
           pvc_labels: Mapping[str, Mapping[str, str] | None] | None = None) -> Rendered:
    """Every child object for a SpeculativeDeployment; raises RenderError when the check fails. ``guard``: the
    controller's resolution of ``spec.speculation.guard.fromBenchmark`` (the render reads no benchmark itself).
    ``network_policy``: None, no NetworkPolicy; else the namespaces besides the CR's own that may reach the engine
    pods (build_network_policy). ``commits``: the resolved commits of the target and the drafter (the resolver's);
    under spec.rollout Canary the engine is pinned to them and the pod template carries the rollout revision
    (``Rendered.revision``); under RollingUpdate they change nothing.

    ``policy``: the tenancy policy, applied first (core/render/gate.py): a spec it refuses raises ``PolicyRefused``
    before anything is built (``pvc_labels``: claim -> labels for its label rule; None: that rule is left to the
    caller that reads claims). None: no policy (offline tools and tests only; the operator always passes one)."""
    if policy is not None:
        from ..policy import check_policy

        refused = check_policy(cr.spec, policy, pvc_labels, namespace=cr.metadata.namespace)
        if refused:
            raise PolicyRefused(refused)
    canary = cr.spec.rollout is not None and cr.spec.rollout.strategy == "Canary"
    if canary:
        cr = pin_commits(cr, *commits)
    analysis = analyze(drafter_doc, target_doc, cr.spec.options())
    if not analysis.ok or analysis.derived is None:
        raise RenderError(analysis.findings, analysis.accepted)
    problem = method_render_problem(cr.spec.engine.name, cr.spec.speculation.method,
                                    eng.get_engine(cr.spec.engine.name).release_for(cr.spec.engine.version))
    if problem is not None:
        raise RenderError(analysis.findings + [problem], analysis.accepted)
    spec = cr.spec
    prof = gpus.get_profile(spec.gpu.type)
    image, baked_row, warning = choose_image(cr, drafter_doc, image_table)
    if warning is not None:
        analysis.findings.append(warning)
    baked = baked_row is not None
    try:
        cache = plan_cache(spec, policy, cr.metadata.namespace)
    except CacheError as e:
        raise RenderError(analysis.findings + [e.finding], analysis.accepted) from None
    guard_plan = plan_guard(spec, analysis.derived, guard)
    if guard_plan is not None and guard_plan.finding is not None:
        analysis.findings.append(guard_plan.finding)
    ec = build_engine_config(cr, analysis, target_doc, drafter_doc, baked=baked, cache=cache, guard=guard_plan)
    # the tuning Job runs the engine image without the baked drafter (same engine, same kernels)
    try:
        plan, tuning_objects = render_tuning(cr, target_doc)
    except tn.UnsupportedShape as e:
        plan, tuning_objects = None, []
        analysis.findings.append(Finding(
            Severity.WARNING, "TuningSkipped", Source.TARGET, "$",
            f"spec.tuning.enabled is true but nothing can be tuned: {e}; the engine runs with its default kernels"))
    ec_json = ec.to_json()  # serialised once: hashed here, the ConfigMap's text below (ec is not changed between)
    config_hash = hashlib.sha256(ec_json.encode()).hexdigest()[:16]  # == ec.digest()[:16]
    if plan is not None:
        config_hash = hashlib.sha256(f"{config_hash}|{plan.key}|{plan.storage}".encode()).hexdigest()[:16]
    build = build_leaderworkerset if spec.nodes > 1 else build_deployment
    workload = build(cr, ec, prof, image, config_hash, baked=baked, tuning=plan,
                     service_account=policy.engine_service_account if policy is not None else None, cache=cache)
    revision = None
    if canary:
        tmpl = workload["spec"]["template"]
        # exec, not lifecycle.preStop.sleep: that action needs Kubernetes 1.30+; the runtime images have sleep(1)
        tmpl["spec"]["containers"][0]["lifecycle"] = {
            "preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}}
        revision = ro.revision(ro.template_digest(tmpl), *commits)
        tmpl["metadata"]["annotations"][N.REVISION_ANNOTATION] = revision
    objects = [build_configmap(cr, ec, analysis, ec_json), workload, build_service(cr, ec), build_pdb(cr, ec)]
    if pod_monitor:
        objects.append(build_podmonitor(cr, ec, pod_monitor_labels))
    if network_policy is not None:
        objects.append(build_network_policy(cr, ec, network_policy))
    return Rendered(analysis=analysis, engine_config=ec, config_hash=config_hash, objects=objects,
                    tuning_objects=tuning_objects, tuning=plan, image=image, baked_drafter=baked_row, cache=cache,
                    guard=guard_plan, revision=revision)
