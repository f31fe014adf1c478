"""Pod hardening (pure): the security profile of every pod the operator creates.

Engine pods, their init containers (preflight, tuned-kernels), the kernel-tuning Job and the
config-inspector Job all run under the ``restricted`` Pod Security Standard
(kubernetes.io/docs/concepts/security/pod-security-standards) plus two hardenings it does not
require: a read-only root filesystem and no ServiceAccount token.

- user: ``RUNTIME_UID`` (65532), the numeric user the runtime images create
  (images/runtime/*/Dockerfile ``useradd --uid 65532``; ``USER 65532:65532``), so the kubelet can
  verify non-root without reading ``/etc/passwd``;
- no privilege escalation, every capability dropped, seccomp ``RuntimeDefault``;
- ``automountServiceAccountToken: false``: neither engine nor runtime calls the Kubernetes API;
- the root filesystem is read-only; every path an engine writes is a declared ``emptyDir``:
  ``/tmp``, ``/dev/shm``, the hub cache (``HF_HOME``) and ``ENGINE_CACHE`` for the JIT caches.

Where the engines write (read from their code), and the variable that moves each write into
``ENGINE_CACHE`` (``engine_write_env``):

| writer | default location | source | set here |
|---|---|---|---|
| vLLM cache (torch.compile artefacts, assets) | ``$XDG_CACHE_HOME/vllm`` else ``~/.cache/vllm`` | vllm/envs.py ``VLLM_CACHE_ROOT``, ``get_default_cache_root`` | ``VLLM_CACHE_ROOT`` |
| vLLM config (usage stats) | ``$XDG_CONFIG_HOME/vllm`` else ``~/.config/vllm`` | vllm/envs.py ``VLLM_CONFIG_ROOT`` | ``XDG_CONFIG_HOME`` |
| vLLM IPC sockets | ``tempfile.gettempdir()`` | vllm/envs.py ``VLLM_RPC_BASE_PATH`` | ``/tmp`` volume |
| SGLang cache (DeepGEMM JIT, FlashInfer autotune, rust extensions) | ``~/.cache/sglang`` | sglang/srt/environ.py ``SGLANG_CACHE_DIR``, ``SGLANG_DG_CACHE_DIR`` | ``SGLANG_CACHE_DIR`` |
| Triton, torch inductor, CUDA JIT, TileLang, FlashInfer | under SGLANG_CACHE_DIR for SGLang; Triton ``~/.triton/cache``, inductor ``/tmp/torchinductor_<user>``, CUDA ``~/.nv/ComputeCache`` otherwise | sglang/srt/environ.py ``third_party_cache_defaults``; triton/runtime/cache.py; torch/_inductor/runtime/cache_dir_utils.py | ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``CUDA_CACHE_PATH``, ``FLASHINFER_WORKSPACE_BASE`` |
| model download locks | ``tempfile.gettempdir()`` | sglang/srt/model_loader/weight_utils.py ``get_lock`` | ``/tmp`` volume |
| anything else under ``~`` | ``$HOME`` | - | ``HOME`` |

``docs/concepts/security.md`` lists the same, with the checkov checks that prove the profile
(tests/security/test_pod_security.py).
"""

from __future__ import annotations

RUNTIME_UID = 65532
ENGINE_CACHE = "/var/cache/specdeploy"  # HOME and every JIT cache of the engine container

# The pod-level part of the profile. fsGroup makes emptyDirs and a writable tuning claim the user's;
# OnRootMismatch skips the recursive chown of a large claim that already has it.
POD_SECURITY_CONTEXT: dict = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "fsGroup": RUNTIME_UID,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}

# Every container's. Repeated per container (not only inherited from the pod) so that a container
# copied out of the pod, or a scanner that reads containers alone, sees the whole profile.
CONTAINER_SECURITY_CONTEXT: dict = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_security_context() -> dict:
    """A fresh copy of the pod-level profile (callers may add to it)."""
    return {**POD_SECURITY_CONTEXT, "seccompProfile": dict(POD_SECURITY_CONTEXT["seccompProfile"])}


def container_security_context() -> dict:
    """A fresh copy of the container-level profile."""
    c = dict(CONTAINER_SECURITY_CONTEXT)
    c["capabilities"] = {"drop": ["ALL"]}
    c["seccompProfile"] = {"type": "RuntimeDefault"}
    return c


def harden_pod(pod_spec: dict) -> dict:
    """Set the profile on a pod spec and on each of its containers and init containers, in place."""
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["securityContext"] = pod_security_context()
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            c["securityContext"] = container_security_context()
    return pod_spec


def engine_write_env(engine: str, accelerated: bool = True) -> dict[str, str]:
    """Environment of the engine container that points every write under ``ENGINE_CACHE`` (see the table above).
    The CPU pool gets no CUDA variable."""
    env = {
        "HOME": ENGINE_CACHE,
        "XDG_CACHE_HOME": f"{ENGINE_CACHE}/.cache",
        "XDG_CONFIG_HOME": f"{ENGINE_CACHE}/.config",
        "TRITON_CACHE_DIR": f"{ENGINE_CACHE}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{ENGINE_CACHE}/inductor",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if accelerated:
        env["CUDA_CACHE_PATH"] = f"{ENGINE_CACHE}/nv"
        env["FLASHINFER_WORKSPACE_BASE"] = ENGINE_CACHE
    if engine == "vllm":
        env["VLLM_CACHE_ROOT"] = f"{ENGINE_CACHE}/.cache/vllm"
    elif engine == "sglang":
        env["SGLANG_CACHE_DIR"] = f"{ENGINE_CACHE}/.cache/sglang"
    return env
