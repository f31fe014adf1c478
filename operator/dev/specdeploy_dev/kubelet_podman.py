"""The dev kubelet's container mode, pure: one container of a pod as a ``podman run`` command line.

``specdeploy dev kubelet --runtime podman`` runs each init container and container from its image
(nothing is pulled: ``--pull=never``; a missing image is ``ErrImageNeverPull``) with:

- **command and args** as Kubernetes defines them: ``command`` replaces the image's ENTRYPOINT
  (``--entrypoint`` as a JSON array), ``args`` replace its CMD; ``$(VAR)`` expanded by
  :func:`specdeploy.core.render.expand_kubelet_vars`, no shell anywhere.
- **env** resolved as in process mode (:func:`specdeploy_dev.kubelet_pods.resolve_env`), passed in an
  ``--env-file`` (mode 0600, in the pod's directory) so that values (a hub token from a Secret) never
  appear on podman's command line, which every local user can read in the process list. podman's
  env-file format is one ``NAME=VALUE`` per line, the value taken verbatim to the end of the line: a
  value with a line break (or a name podman would read as a comment or reject) cannot be written
  there and goes as ``--env NAME=VALUE`` instead (:func:`split_env`).
- **volumes**: each volumeMount as a bind mount of the volume's local directory (``emptyDir`` and
  claims writable, mode 0777 as kubelet makes an emptyDir; ``configMap``, ``secret``, ``downwardAPI``
  and ``readOnly: true`` mounts read-only; ``subPath`` honoured); the termination message file is
  bound at ``terminationMessagePath``.
- **network**: ``--network=host`` (no pod network namespace here). As in process mode each pod has a
  loopback address: ``--host`` with a wildcard becomes it and ``--port`` is remapped when taken, so
  pods do not collide and probes reach them where process mode would.
- **securityContext** (the container's over the pod's): ``runAsUser``/``runAsGroup`` -> ``--user``,
  ``supplementalGroups`` -> ``--group-add``, ``runAsNonRoot`` checked against the effective user (the
  image's USER when no ``runAsUser``; a name or 0 is refused as kubelet refuses it),
  ``readOnlyRootFilesystem`` -> ``--read-only --read-only-tmpfs=false`` (podman would otherwise add
  writable tmpfs on /tmp, /var/tmp and /run, which Kubernetes does not), ``capabilities.drop/add`` ->
  ``--cap-drop/--cap-add``, ``allowPrivilegeEscalation: false`` -> ``--security-opt no-new-privileges``,
  ``seccompProfile`` ``RuntimeDefault`` -> podman's default profile, ``Unconfined`` ->
  ``seccomp=unconfined`` (``Localhost`` is refused), ``privileged`` -> ``--privileged``.
- **resources.limits**: ``cpu`` -> ``--cpus``, ``memory`` -> ``--memory`` (bytes).

Standard library only (plus the pure core's ``expand_kubelet_vars`` and the process mode's pure helpers).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Mapping

from specdeploy.core.render import expand_kubelet_vars
from . import kubelet_pods as kp

LABEL_ROOT = "io.specdeploy.dev-kubelet.root"  # the kubelet's --root: leftovers of a killed kubelet are removed by it
LABEL_POD = "io.specdeploy.dev-kubelet.pod-uid"
READ_ONLY_KINDS = ("configMap", "secret", "downwardAPI")

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([EPTGMK]i?|[mkEPTGM])?$")
_UNIT = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "k": 1e3, "K": 1e3,
         "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "m": 1e-3}


def quantity(value: str | int | float, what: str) -> float:
    """A Kubernetes quantity (``500m``, ``2``, ``4Gi``) as a number."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise kp.PodConfigError("CreateContainerConfigError", f"{what} {value!r} is not a Kubernetes quantity")
    return float(m.group(1)) * _UNIT.get(m.group(2) or "", 1)


@dataclass(frozen=True)
class Mount:
    mount_path: str
    local: str  # the local directory or file
    read_only: bool


def container_name(pod_uid: str, container: str) -> str:
    """The podman container's name: unique per pod and container (a restart reuses it after --rm)."""
    return f"sdk-{pod_uid[:36]}-{container}"


def plan_mounts(container: dict, volumes: Mapping[str, kp.VolumeDir]) -> list[Mount]:
    """The bind mounts of one container (its volumeMounts, in order)."""
    out = []
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m.get("name"))
        if vol is None:
            raise kp.PodConfigError("CreateContainerConfigError", f"volumeMount {m.get('name')!r}: no such volume")
        mount_path = posixpath.normpath(m.get("mountPath") or "")
        if not mount_path.startswith("/") or mount_path == "/" or ":" in mount_path or "," in mount_path:
            raise kp.PodConfigError("CreateContainerConfigError",
                                    f"mountPath {m.get('mountPath')!r} must be an absolute path below / "
                                    "(without ':' or ',')")
        sub = kp._safe_relpath(m.get("subPath") or "", "subPath")  # noqa: SLF001 - the same rule as process mode
        local = os.path.join(vol.path, sub) if sub else vol.path
        out.append(Mount(mount_path, local, bool(m.get("readOnly")) or vol.kind in READ_ONLY_KINDS))
    return out


def security(pod: dict, container: dict) -> dict:
    """The effective securityContext: the container's fields over the pod's (the fields both can set)."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    c_sc = container.get("securityContext") or {}
    shared = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")
    out = {k: pod_sc[k] for k in shared if k in pod_sc}
    out.update(c_sc)
    if "supplementalGroups" in pod_sc:
        out["supplementalGroups"] = pod_sc["supplementalGroups"]
    return out


def _user_args(sc: dict, image_user: str, name: str) -> list[str]:
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    for field, v in (("runAsUser", uid), ("runAsGroup", gid)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise kp.PodConfigError("CreateContainerConfigError", f"securityContext.{field} {v!r} is not a number")
    if sc.get("runAsNonRoot"):
        if uid is None:
            user = (image_user or "").split(":")[0]
            if not user:
                raise kp.PodConfigError("CreateContainerConfigError",
                                        f"container {name!r} has runAsNonRoot and image will run as root")
            if not user.isdigit():
                raise kp.PodConfigError("CreateContainerConfigError",
                                        f"container {name!r} has runAsNonRoot and image has non-numeric user "
                                        f"({user}), cannot verify user is non-root")
            if int(user) == 0:
                raise kp.PodConfigError("CreateContainerConfigError",
                                        f"container {name!r} has runAsNonRoot and image will run as root")
        elif uid == 0:
            raise kp.PodConfigError("CreateContainerConfigError",
                                    f"container {name!r}'s runAsUser breaks non-root policy")
    args = []
    if uid is not None:
        args += ["--user", f"{uid}:{gid}" if gid is not None else str(uid)]
    elif gid is not None:  # a group alone: the image's user with that group
        user = (image_user or "0").split(":")[0] or "0"
        args += ["--user", f"{user}:{gid}"]
    for g in sc.get("supplementalGroups") or []:
        args += ["--group-add", str(int(g))]
    return args


def _hardening_args(sc: dict) -> list[str]:
    args = []
    if sc.get("privileged"):
        args.append("--privileged")
    if sc.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    caps = sc.get("capabilities") or {}
    for flag, key in (("--cap-drop", "drop"), ("--cap-add", "add")):
        for cap in caps.get(key) or []:
            if not re.fullmatch(r"[A-Za-z_]+", str(cap)):
                raise kp.PodConfigError("CreateContainerConfigError", f"capability {cap!r} is not a capability name")
            args += [flag, str(cap).upper()]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    elif seccomp not in (None, "RuntimeDefault"):
        raise kp.PodConfigError("CreateContainerConfigError",
                                f"seccompProfile type {seccomp!r} is not supported by the dev kubelet "
                                "(RuntimeDefault, Unconfined)")
    return args


def _resource_args(container: dict) -> list[str]:
    limits = (container.get("resources") or {}).get("limits") or {}
    args = []
    if "cpu" in limits:
        args += ["--cpus", f"{quantity(limits['cpu'], 'resources.limits.cpu'):g}"]
    if "memory" in limits:
        args += ["--memory", str(int(quantity(limits["memory"], "resources.limits.memory")))]
    return args


def split_env(env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``(env-file text, the rest)``: every variable podman's env-file format can carry verbatim (one
    ``NAME=VALUE`` line: no line break in the value, a name without whitespace, ``=`` or a leading
    ``#``), and the others, which must go on the command line."""
    lines, rest = [], {}
    for k, v in env.items():
        if not k or k.startswith("#") or any(ch.isspace() or ch == "=" for ch in k) or "\n" in v or "\r" in v:
            rest[k] = v
        else:
            lines.append(f"{k}={v}\n")
    return "".join(lines), rest


def podman_run_argv(pod: dict, container: dict, *, env: Mapping[str, str], mounts: list[Mount], pod_ip: str,
                    port_map: Mapping[int, int], termination_log: str, image_user: str, root_label: str,
                    podman: str = "podman", env_file: str | None = None) -> list[str]:
    """``podman run`` for one container of ``pod`` (exec form: the list is the argv, no shell).

    ``env_file``: the path where the caller wrote ``split_env(env)[0]`` (mode 0600); only the
    variables it cannot carry are then passed with ``--env``. Without it every variable is."""
    name = container.get("name") or "?"
    image = container.get("image") or ""
    if not image or image.startswith("-"):
        raise kp.PodConfigError("InvalidImageName", f"container {name!r}: image {image!r} is not an image reference")
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    sc = security(pod, container)
    argv = [podman, "run", "--rm", "--pull=never", "--name", container_name(uid, name), "--network=host",
            "--label", f"{LABEL_ROOT}={root_label}", "--label", f"{LABEL_POD}={uid}", "--stop-signal", "SIGTERM"]
    argv += _user_args(sc, image_user, name) + _hardening_args(sc) + _resource_args(container)
    message_path = posixpath.normpath(container.get("terminationMessagePath") or kp.DEFAULT_TERMINATION_PATH)
    for m in [*mounts, Mount(message_path, termination_log, False)]:
        argv += ["-v", f"{m.local}:{m.mount_path}:{'ro' if m.read_only else 'rw'}"]
    inline = dict(env)
    if env_file is not None:
        argv += ["--env-file", env_file]
        inline = split_env(env)[1]
    for k, v in inline.items():
        argv += ["--env", f"{k}={v}"]
    if container.get("workingDir"):
        argv += ["--workdir", str(container["workingDir"])]
    command = [expand_kubelet_vars(str(c), dict(env)) for c in container.get("command") or []]
    args = [expand_kubelet_vars(str(a), dict(env)) for a in container.get("args") or []]
    if command:
        argv += ["--entrypoint", json.dumps(command)]
    args = kp._rewrite_bind(args, pod_ip, port_map)  # noqa: SLF001 - the same rewrite as process mode
    return [*argv, "--", image, *args]
