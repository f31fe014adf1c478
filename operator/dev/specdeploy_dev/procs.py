"""Stopping a child process: the one sequence the development tools and the tests use."""

from __future__ import annotations

import os
import signal
import subprocess

KILL_WAIT = 30.0  # seconds to reap a process after SIGKILL


def stop_process(proc: subprocess.Popen, timeout: float = 15.0, *, group: bool = False,
                 sig: int = signal.SIGTERM) -> int | None:
    """Stop ``proc``: send ``sig`` (SIGTERM; to its whole process group with ``group=True``, for a process
    started with ``start_new_session=True``), wait up to ``timeout`` seconds, then SIGKILL (the group) and
    reap it. A process that has already exited is only reaped. Returns its exit status (None: it outlived
    the SIGKILL wait too)."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
    except ProcessLookupError:
        pass
    try:
        return proc.wait(KILL_WAIT)
    except subprocess.TimeoutExpired:
        return None
