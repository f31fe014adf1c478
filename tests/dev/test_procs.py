"""stop_process (operator/dev/specdeploy_dev/procs.py): SIGTERM, a bounded wait, then SIGKILL; a whole group on request."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from specdeploy_dev.procs import stop_process

IGNORES_TERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def started(code: str, **kw) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **kw)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_a_process_that_exits_on_sigterm_is_not_killed():
    p = started("import time; print('ready', flush=True); time.sleep(60)")
    assert stop_process(p, 10) == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_wait():
    p = started(IGNORES_TERM)
    t0 = time.monotonic()
    assert stop_process(p, 0.5) == -signal.SIGKILL
    assert time.monotonic() - t0 < 30


def test_an_exited_process_is_only_reaped():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert stop_process(p) == 0


def test_group_stops_the_children_too():
    code = ("import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', " + repr(IGNORES_TERM) + "], "
            "stdout=subprocess.PIPE, text=True); c.stdout.readline(); print(c.pid, flush=True); "
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(p.stdout.readline())
    assert p.stdout.readline().strip() == "ready"
    assert stop_process(p, 0.5, group=True) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, f"the child {child} outlived its group's SIGKILL"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as stopped)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False
