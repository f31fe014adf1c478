"""``launch``: exec the engine with the rendered exec-form argv. No shell.

The process image is replaced (``os.execvpe``): the engine keeps the launcher's PID (PID 1
in the container), so SIGTERM/SIGINT from the kubelet reach it directly and its exit code
is the container's. ``$(VAR)`` references in the args (multi-node: ``$(LWS_WORKER_INDEX)``,
``$(LWS_LEADER_ADDRESS)``) are expanded the way kubelet expands container args, because
the args come from the engine config file rather than from the pod spec.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Mapping, Sequence


def resolve_role(ec, role: str, environ: Mapping[str, str]) -> str:
    """leader or worker; ``auto``: worker when the engine config has worker args and this pod
    is not LeaderWorkerSet index 0."""
    if role != "auto":
        return role
    idx = environ.get("LWS_WORKER_INDEX", "")
    return "worker" if ec.worker_args and idx not in ("", "0") else "leader"


def build_exec(ec, role: str, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """(argv, env) the engine is exec'd with: command + args, env = inherited env + the engine env."""
    from specdeploy.core.render import expand_kubelet_vars

    role = resolve_role(ec, role, environ)
    if role == "worker" and not ec.worker_args:
        raise ValueError("--role worker: the engine config has no worker args (single-node deployment)")
    args = ec.worker_args if role == "worker" else ec.args
    env = {**environ, **ec.env}
    argv = [expand_kubelet_vars(a, env) for a in list(ec.command) + list(args)]
    if not argv:
        raise ValueError("the engine config has an empty command")
    return argv, env


def exec_engine(argv: Sequence[str], env: Mapping[str, str],
                execvpe: Callable[..., object] = os.execvpe) -> int:
    """Replace this process with the engine; returns only when exec fails (127/126, as a shell)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        execvpe(argv[0], list(argv), dict(env))
    except FileNotFoundError:
        print(f"specdeploy-runtime launch: {argv[0]}: not found on PATH ({env.get('PATH', '')}); "
              "is this the engine image?", file=sys.stderr)
        return 127
    except PermissionError as e:
        print(f"specdeploy-runtime launch: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 126
    except OSError as e:
        print(f"specdeploy-runtime launch: cannot exec {argv[0]}: {e.strerror}", file=sys.stderr)
        return 126
    return 0  # only reached with a test double for execvpe
