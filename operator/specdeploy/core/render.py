"""Rendering (pure): from (CR, target config, drafter config, profile, engine version) to the
workload objects the operator applies. ``specdeploy render`` prints the same objects.

Nothing here is a shell string: the engine gets exec-form ``command`` + ``args``. Every
flag value comes from the spec's validated fields or the checked configs; extraArgs are
appended last, one argv element each, and may not set an owned flag (the checker refuses).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import API_GROUP, API_VERSION, KIND
from . import engines as eng
from . import gpus
from .checker import Analysis, Derived, analyze
from .engineconfig import (CHECK_REPORT_KEY, ENGINE_CONFIG_KEY, ENGINE_CONFIG_MOUNT, EngineConfig, ModelRef,
                           SpeculationPlan, config_digest)
from . import guard as gd
from . import tuning as tn
from .cache import CacheError, CachePlan, plan_cache
from .findings import Finding, Severity, Source, report
from .podsecurity import ENGINE_CACHE, container_security_context, engine_write_env, harden_pod

CONFIG_HASH_ANNOTATION = f"{API_GROUP}/config-hash"
MODEL_ROOT = "/models"
HF_HOME = "/var/cache/huggingface"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
SGLANG_DIST_PORT = 20000
STARTUP_TIMEOUT_SECONDS = 3600  # loading a 600 GB checkpoint can take most of an hour
RUNTIME_COMMAND = "specdeploy-runtime"
PREFLIGHT_DOWNLOAD_DIR = "/var/run/specdeploy/configs"
TUNED_MOUNT = "/var/run/specdeploy/tuned-kernels"
TUNED_SRC_MOUNT = "/var/run/specdeploy/tuned-src"
TUNING_OUT_MOUNT = "/var/run/specdeploy/tuning-out"
TUNING_DEADLINE_SECONDS = 6 * 3600
TUNING_KEY_ANNOTATION = f"{API_GROUP}/tuning-key"
CONFIGMAP_LIMIT = 1024 * 1024  # etcd's ~1 MiB object limit (ConfigMap data + metadata)


class RenderError(Exception):
    """The pair or spec has errors; nothing may be rendered. Carries every finding."""

    def __init__(self, findings: list[Finding], accepted: list[Finding] | None = None):
        self.findings = findings
        self.accepted = list(accepted or [])
        super().__init__("; ".join(f.one_line() for f in findings if f.severity.value == "error"))


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

    def by_kind(self, kind: str) -> list[dict]:
        return [o for o in self.objects + self.tuning_objects if o["kind"] == kind]


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
    size = float(m.group(1)) * _UNIT.get(m.group(2) or "", 1)
    return max(1, int(size * CPU_KV_FRACTION // 2**30))


def escape_kubelet_vars(arg: str) -> str:
    """A user string the kubelet must pass through unchanged: every ``$`` doubled, so ``$(HF_TOKEN)``
    reaches the engine as those characters instead of the Secret's value (kubelet turns ``$$`` into ``$``)."""
    return arg.replace("$", "$$")


def _user_args(spec) -> list[str]:
    return [escape_kubelet_vars(a) for a in spec.engine.extra_args]


def _model_in_pod(src, role: str, baked: bool = False) -> str:
    if baked:
        return eng.BAKED_DRAFTER_PATH
    if src.pvc is not None:
        return f"{MODEL_ROOT}/{role}/{src.model.lstrip('/')}"
    return src.model


def _hub_revision(src, baked: bool = False) -> str | None:
    """The revision the engine is given: only for hub models (a path in the pod has none)."""
    return src.revision if (src.revision and src.pvc is None and not baked) else None


# ----------------------------------------------------------------- engine arguments


def _sglang_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool,
                 baked: bool = False) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [f["model"], target]
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    a += [f["tensor_parallel"], str(spec.gpu.count), f["host"], "0.0.0.0", f["port"], str(eng.SGLANG.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    a += [f["algorithm"], "DFLASH", f["draft_model"], drafter]
    if _hub_revision(spec.drafter, baked):
        a += [f["draft_revision"], spec.drafter.revision]
    a += [f["num_draft_tokens"], str(d.block_size)]
    if d.draft_window is not None:
        a += [f["draft_window"], str(d.draft_window)]
    if d.max_model_len is not None:
        a += [f["max_model_len"], str(d.max_model_len)]
    if d.draft_attention_backend:
        a += [f["draft_attention_backend"], d.draft_attention_backend]
    a.append(f["enable_metrics"])
    if not multinode:
        return a + _user_args(spec), None
    # Kubelet expands $(VAR) from the container env that LeaderWorkerSet injects: no shell.
    a += [f["nnodes"], str(spec.nodes), f["node_rank"], "$(LWS_WORKER_INDEX)",
          f["dist_init_addr"], f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_PORT}"]
    a += _user_args(spec)
    return a, list(a)


def _vllm_args(spec, d: Derived, row: eng.EngineRelease, target: str, drafter: str, multinode: bool,
               baked: bool = False) -> tuple[list[str], list[str] | None]:
    f = row.flags
    a = [target]  # `vllm serve MODEL`: the model is positional
    if spec.target.revision and spec.target.pvc is None:
        a += [f["revision"], spec.target.revision]
    if gpus.get_profile(spec.gpu.type).accelerator:  # the CPU build gets no GPU flag
        a += [f["tensor_parallel"], str(spec.gpu.count)]
    a += [f["host"], "0.0.0.0", f["port"], str(eng.VLLM.port)]
    if spec.target.trust_remote_code:
        a.append(f["trust_remote_code"])
    if d.max_model_len is not None:
        a += [f["max_model_len"], str(d.max_model_len)]
    sc: dict[str, Any] = {"method": "dflash", "model": drafter, "num_speculative_tokens": d.num_speculative_tokens}
    if _hub_revision(spec.drafter, baked):
        sc["revision"] = spec.drafter.revision
    if spec.speculation.draft_attention_backend:
        sc["attention_backend"] = row.draft_attention_backends[spec.speculation.draft_attention_backend]
    a += [f["speculative_config"], json.dumps(sc, sort_keys=True, separators=(",", ":"))]
    if not multinode:
        return a + _user_args(spec), None
    dist = ["--nnodes", str(spec.nodes), "--node-rank", "$(LWS_WORKER_INDEX)", "--master-addr", "$(LWS_LEADER_ADDRESS)"]
    leader = a + dist + _user_args(spec)
    worker = a + dist + ["--headless"] + _user_args(spec)
    return leader, worker


# (engine, method) -> the argv builder. The renderer refuses any method it has no entry for, so a
# capability row that gains a method (DDTree) cannot be served as plain DFlash under its name.
ARG_BUILDERS = {("sglang", "dflash"): _sglang_args, ("vllm", "dflash"): _vllm_args}
DDTREE_PULLS = "sgl-project/sglang PR #29907 (open), liranringel/ddtree; no vLLM pull request yet"


def method_render_problem(engine: str, method: str) -> Finding | None:
    """A MethodNotRenderable error when the renderer has no command line for (engine, method)."""
    if (engine, method) in ARG_BUILDERS:
        return None
    why = f" (DDTree is not in any engine release: {DDTREE_PULLS})" if method == "ddtree" else ""
    return Finding(Severity.ERROR, "MethodNotRenderable", Source.SPEC, "spec.speculation.method",
                   f"the renderer has no {engine} command line for method {method!r}{why}; it refuses rather than "
                   "serve another method under that name. Use method dflash")


# ----------------------------------------------------------------- speculation guard


def guard_limit(spec, resolved: "gd.GuardLimit | None" = None) -> "gd.GuardLimit | None":
    """The guard's limit: ``maxConcurrency`` from the spec, else the controller's resolution of ``fromBenchmark``
    (None until the benchmark is Complete: nothing is rendered)."""
    g = spec.speculation.guard
    if g is None:
        return None
    if g.max_concurrency is not None:
        return gd.GuardLimit(g.max_concurrency, "spec.speculation.guard.maxConcurrency")
    return resolved


def plan_guard(spec, d: Derived, resolved: "gd.GuardLimit | None" = None) -> "gd.GuardPlan | None":
    limit = guard_limit(spec, resolved)
    if limit is None:
        return None
    return gd.plan_guard(spec.engine.name, spec.engine.version, limit, d.num_speculative_tokens)


def apply_guard(args: list[str] | None, row: eng.EngineRelease, plan: "gd.GuardPlan | None") -> list[str] | None:
    """Merge the guard's keys into the ``--speculative-config`` JSON of an argv (a copy); an argv without
    speculation (a benchmark's baseline variant) or a plan with nothing to render is returned as it is."""
    flag = row.flags.get("speculative_config")
    if args is None or plan is None or not plan.config or flag is None or flag not in args:
        return args
    i = args.index(flag) + 1
    sc = {**json.loads(args[i]), **plan.config}
    return args[:i] + [json.dumps(sc, sort_keys=True, separators=(",", ":"))] + args[i + 1:]


# ----------------------------------------------------------------- objects


def _probe(path: str, period: int, failures: int, timeout: int = 5) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": timeout}


def _token_env(spec) -> list[dict]:
    token = spec.target.token_secret_ref or spec.drafter.token_secret_ref
    if token is None:
        return []
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}]


def _container(spec, ec: EngineConfig, image: str, args: list[str], serve_http: bool,
               tuning: TuningPlan | None = None) -> dict:
    info = eng.get_engine(ec.engine)
    env = [{"name": k, "value": v} for k, v in sorted(ec.env.items())]
    if tuning is not None:
        env.append({"name": tuning.env_var, "value": TUNED_MOUNT})
    env += _token_env(spec)
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
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
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


def prefetches(spec, baked: bool, cache: CachePlan | None) -> bool:
    """Whether the preflight downloads weights: a persistent cache and at least one hub model to fill it with."""
    hub = [src for role, src in (("target", spec.target), ("drafter", spec.drafter))
           if src.pvc is None and not (baked and role == "drafter")]
    return cache is not None and cache.persistent and bool(hub)


def preflight_args(spec, ec: EngineConfig, baked: bool = False, cache: CachePlan | None = None) -> list[str]:
    """Arguments of the preflight init container: mounted dirs for PVC models (and the baked drafter),
    hub repo ids otherwise (preflight downloads their config.json; with a persistent cache also their
    weights, into the cache, once)."""
    a: list[str] = []
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
        is_baked = baked and role == "drafter"
        if src.pvc is not None or is_baked:
            a += [f"--{role}-dir", _model_in_pod(src, role, is_baked)]
        else:
            a += [f"--{role}-model", src.model]
            if src.revision:
                a += [f"--{role}-revision", src.revision]
    a += ["--engine-config", f"{ENGINE_CONFIG_MOUNT}/{ENGINE_CONFIG_KEY}", "--download-dir", PREFLIGHT_DOWNLOAD_DIR]
    if baked:
        a.append("--expect-baked")
    if prefetches(spec, baked, cache):
        a += ["--weights-cache", HF_HOME]
    return a


def _init_containers(spec, ec: EngineConfig, image: str, baked: bool, tuning: TuningPlan | None,
                     cache: CachePlan | None = None) -> list[dict]:
    mounts = [{"name": "engine-config", "mountPath": ENGINE_CONFIG_MOUNT, "readOnly": True},
              {"name": "preflight-scratch", "mountPath": PREFLIGHT_DOWNLOAD_DIR, "subPath": "configs"},
              {"name": "preflight-scratch", "mountPath": "/tmp", "subPath": "tmp"}]
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
        if src.pvc is not None:
            mounts.append({"name": f"{role}-model", "mountPath": f"{MODEL_ROOT}/{role}", "readOnly": True})
    fill = prefetches(spec, baked, cache)
    if fill:  # the preflight fills the persistent cache the engine then reads offline
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HOME", "value": HF_HOME if fill else "/tmp/hf-home"},
           {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *_token_env(spec)]
    # a weight download streams files to disk, but keep room for the hub client's buffers
    small = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi" if fill else "1Gi"}}
    out = [{
        "name": "preflight",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [RUNTIME_COMMAND, "preflight"],
        "args": preflight_args(spec, ec, baked, cache),
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


def _tuning_volumes(tuning: TuningPlan | None) -> list[dict]:
    if tuning is None:
        return []
    if tuning.storage == "pvc":
        return [{"name": "tuned-kernels", "persistentVolumeClaim": {"claimName": tuning.claim_name, "readOnly": True}}]
    # optional: pods started before the tuning Job finished run with the engine's defaults
    return [{"name": "tuned-kernels-src", "configMap": {"name": tuning.configmap_name, "optional": True}},
            {"name": "tuned-kernels", "emptyDir": {"sizeLimit": "16Mi"}}]


def _pod_template(cr, ec: EngineConfig, prof: gpus.GpuProfile, image: str, args: list[str], config_hash: str,
                  cm_name: str, serve_http: bool, baked: bool = False, tuning: TuningPlan | None = None,
                  service_account: str | None = None, cache: CachePlan | None = None) -> dict:
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
    for role, src in (("target", spec.target), ("drafter", spec.drafter)):
        if src.pvc is not None:
            volumes.append({"name": f"{role}-model",
                            "persistentVolumeClaim": {"claimName": src.pvc.claim_name, "readOnly": True}})
    volumes += _tuning_volumes(tuning)
    tolerations = [dict(t) for t in gpus.GPU_TOLERATIONS] if prof.accelerator else []
    tolerations += [t.model_dump(exclude_none=True) for t in spec.pod.tolerations]
    selector = {**spec.pod.node_selector, gpus.PRODUCT_LABEL_KEY: prof.product_label} if prof.accelerator \
        else dict(spec.pod.node_selector)
    pod_spec: dict[str, Any] = {
        **({"nodeSelector": selector} if selector else {}),
        **({"tolerations": tolerations} if tolerations else {}),
        "terminationGracePeriodSeconds": 120,
        # the engine container starts only after every init container exited 0
        "initContainers": _init_containers(spec, ec, image, baked, tuning, cache),
        "containers": [_container(spec, ec, image, args, serve_http, tuning)],
        "volumes": volumes,
    }
    if spec.pod.priority_class_name:
        pod_spec["priorityClassName"] = spec.pod.priority_class_name
    if spec.pod.service_account_name or service_account:
        pod_spec["serviceAccountName"] = spec.pod.service_account_name or service_account
    harden_pod(pod_spec)  # restricted Pod Security Standard, no token, read-only root (core/podsecurity.py)
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


def build_deployment(cr, ec: EngineConfig, prof, image: str, config_hash: str, *, baked: bool = False,
                     tuning: TuningPlan | None = None, service_account: str | None = None,
                     cache: CachePlan | None = None) -> dict:
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
            "template": _pod_template(cr, ec, prof, image, ec.args, config_hash, n["configmap"], True, baked, tuning,
                                      service_account, cache),
        },
    }


def build_leaderworkerset(cr, ec: EngineConfig, prof, image: str, config_hash: str, *, baked: bool = False,
                          tuning: TuningPlan | None = None, service_account: str | None = None,
                          cache: CachePlan | None = None) -> dict:
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


def build_podmonitor(cr, ec: EngineConfig, extra_labels: Mapping[str, str] | None = None) -> dict:
    """``extra_labels``: the operator's --pod-monitor-labels (chart value podMonitor.labels), e.g. the label a
    kube-prometheus-stack podMonitorSelector selects; the operator's own labels win over them."""
    n = names(cr.metadata.name)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta(cr, n["podmonitor"], {**(extra_labels or {}), **child_labels(cr, ec.engine)}),
        "spec": {
            "selector": {"matchLabels": _leader_selector(cr)},
            "podMetricsEndpoints": [{"port": "http", "path": ec.metrics_path, "interval": "15s"}],
        },
    }


def build_engine_config(cr, analysis: Analysis, target_doc: Any, drafter_doc: Any, *, baked: bool = False,
                        cache: CachePlan | None = None, guard: "gd.GuardPlan | None" = None) -> EngineConfig:
    spec = cr.spec
    d = analysis.derived
    assert d is not None
    info = eng.get_engine(spec.engine.name)
    row = info.release_for(spec.engine.version)
    assert row is not None
    target = _model_in_pod(spec.target, "target")
    drafter = _model_in_pod(spec.drafter, "drafter", baked)
    multinode = spec.nodes > 1
    problem = method_render_problem(info.name, spec.speculation.method)
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
        drafter=ModelRef(model=drafter, revision=spec.drafter.revision, config_digest=config_digest(drafter_doc)),
        speculation=SpeculationPlan(
            method=spec.speculation.method,
            block_size=d.block_size,
            num_speculative_tokens=d.num_speculative_tokens,
            draft_window=d.draft_window,
            drafter_window=d.drafter_window,
            layer_types=list(d.layer_types),
            target_layer_ids=list(d.target_layer_ids),
            draft_window_request=spec.speculation.draft_window,
            native_window=d.native_window,
            max_model_len=d.max_model_len,
            accept=list(spec.checks.accept) or None,
        ),
        gpu_profile=spec.gpu.type,
        tensor_parallel_size=spec.gpu.count,
        nodes=spec.nodes,
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
    if spec.drafter.pvc is not None:
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


# ----------------------------------------------------------------- tuned fused-MoE kernels


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
        "app.kubernetes.io/name": "specdeploy-tuning",
        "app.kubernetes.io/instance": cr.metadata.name,
        "app.kubernetes.io/component": "kernel-tuning",
        "app.kubernetes.io/managed-by": "specdeploy",
        "app.kubernetes.io/part-of": "specdeploy",
        f"{API_GROUP}/engine": plan.engine,
        f"{API_GROUP}/tuning-key": plan.short,
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
        args += ["--target-dir", _model_in_pod(spec.target, "target")]
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
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, *_token_env(spec)],
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
        "metadata": _meta(cr, plan.job_name, labels, {TUNING_KEY_ANNOTATION: plan.key}),
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
        "metadata": _meta(cr, plan.configmap_name, tuning_labels(cr, plan), {TUNING_KEY_ANNOTATION: plan.key}),
        "data": data,
    }


def render_tuning(cr, target_doc: Any, image: str | None = None) -> tuple[TuningPlan | None, list[dict]]:
    """(plan, [Job]) for spec.tuning.enabled with a tunable MoE target; (None, []) otherwise."""
    plan = tuning_plan(cr, target_doc, image)
    return plan, ([build_tuning_job(cr, plan)] if plan is not None else [])


def render(cr, target_doc: Any, drafter_doc: Any, *, pod_monitor: bool = False,
           image_table: tuple[eng.BakedDrafterImage, ...] | None = None, policy=None,
           guard: "gd.GuardLimit | None" = None, pod_monitor_labels: Mapping[str, str] | None = None) -> Rendered:
    """Every child object for a SpeculativeDeployment; raises RenderError when the check fails. ``guard``: the
    controller's resolution of ``spec.speculation.guard.fromBenchmark`` (the render reads no benchmark itself)."""
    analysis = analyze(drafter_doc, target_doc, cr.spec.options())
    if not analysis.ok or analysis.derived is None:
        raise RenderError(analysis.findings, analysis.accepted)
    problem = method_render_problem(cr.spec.engine.name, cr.spec.speculation.method)
    if problem is not None:
        raise RenderError(analysis.findings + [problem], analysis.accepted)
    spec = cr.spec
    prof = gpus.get_profile(spec.gpu.type)
    image, baked_row, warning = choose_image(cr, drafter_doc, image_table)
    if warning is not None:
        analysis.findings.append(warning)
    baked = baked_row is not None
    try:
        cache = plan_cache(spec, policy)
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
    config_hash = ec.digest()[:16]
    if plan is not None:
        config_hash = hashlib.sha256(f"{config_hash}|{plan.key}|{plan.storage}".encode()).hexdigest()[:16]
    build = build_leaderworkerset if spec.nodes > 1 else build_deployment
    workload = build(cr, ec, prof, image, config_hash, baked=baked, tuning=plan,
                     service_account=policy.engine_service_account if policy is not None else None, cache=cache)
    objects = [build_configmap(cr, ec, analysis), workload, build_service(cr, ec), build_pdb(cr, ec)]
    if pod_monitor:
        objects.append(build_podmonitor(cr, ec, pod_monitor_labels))
    return Rendered(analysis=analysis, engine_config=ec, config_hash=config_hash, objects=objects,
                    tuning_objects=tuning_objects, tuning=plan, image=image, baked_drafter=baked_row, cache=cache,
                    guard=guard_plan)


# ----------------------------------------------------------------- speculation off (SpeculativeBenchmark baseline)

# Capability-row flag keys of speculative decoding: each takes one value (core/engines.py rows).
SPECULATIVE_FLAG_KEYS = ("speculative_config", "algorithm", "draft_model", "draft_revision", "num_draft_tokens",
                         "num_steps", "eagle_topk", "draft_attention_backend", "draft_window")


def strip_speculation_args(engine: str, engine_version: str, args: list[str]) -> list[str]:
    """The engine argv with every speculative-decoding flag and its value removed: the target served
    alone (a SpeculativeBenchmark's ``baseline`` variant). Flags written ``--flag=value`` go too."""
    row = eng.get_engine(engine).release_for(engine_version)
    if row is None:
        raise ValueError(f"no {engine} capability row for {engine_version}")
    flags = {row.flags[k] for k in SPECULATIVE_FLAG_KEYS if k in row.flags}
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in flags:
            skip = True
            continue
        if a.split("=", 1)[0] in flags and "=" in a:
            continue
        out.append(a)
    return out
