"""``specdeploy dev up`` and ``specdeploy dev down``: a local install of the chart in one command.

``dev up`` starts the embedded API server, installs the chart with Helm (unless ``--no-install``: then
whoever installs it, for example the README's ``helm install``, is served the same way), and plays the
kubelet and the endpoints controller for the chart's operator Deployment: the Deployment's own container
args run as a local ``specdeploy`` process (:meth:`Cluster.play_operator_pod`: ports rewritten to free
loopback ports, ``--kubeconfig`` added, ``POD_NAMESPACE`` set), the webhook Service's Endpoints point at
it and the Deployment's status reads ready. A ``helm upgrade`` that changes the Deployment restarts the
process with the new args; ``helm uninstall`` stops it. It prints the KUBECONFIG and serves until
SIGTERM/SIGINT (``dev down`` sends SIGTERM to the process named in ``DIR/dev-up.pid``).
Dev infrastructure only: the product never imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specdeploy.cli.common import UsageError
from specdeploy.core import names as N

from .harness import ROOT, Cluster, HarnessError, wait_for

PID_FILE = "dev-up.pid"
# the chart's operator Deployment (charts/specdeploy/templates/_helpers.tpl, specdeploy.labels)
OPERATOR_SELECTOR = N.selector({N.LABEL_PART_OF: N.MANAGED_BY, N.LABEL_COMPONENT: "operator"})
POLL_S = 1.0
RESTART_BACKOFF_S = 5.0


def default_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"specdeploy-dev-{os.getuid()}")


def find_helm(given: str | None) -> str:
    """--helm, else `helm` on PATH, else the Helm that `.ci/install-tools` put in .venv/tools/."""
    if given:
        return given
    for candidate in (shutil.which("helm"), ROOT / ".venv" / "tools" / "helm4", ROOT / ".venv" / "tools" / "helm3"):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    raise UsageError("no helm: put Helm 3 or 4 on PATH, run .ci/install-tools (.venv/tools/helm4) or pass --helm PATH")


def _running_pid(directory: Path) -> int | None:
    """The pid in DIR/dev-up.pid when that process is alive and is a `dev up` (not a reused pid)."""
    try:
        pid = int((directory / PID_FILE).read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"dev" in cmdline and b"up" in cmdline else None


def chart_path(args) -> Path:
    return Path(args.chart) if args.chart else ROOT / "charts" / "specdeploy"


def helm_install_argv(helm: str, args, kubeconfig: str) -> list[str]:
    """The `helm install` of the chart: the release, its namespace, the watched namespaces, then the
    user's --set/--values as Helm's own arguments (an argv, never a shell line)."""
    watched = ",".join(args.watch_namespace or ["default"])
    argv = [helm, "install", args.release, str(chart_path(args)), "--namespace", args.namespace, "--create-namespace",
            "--kubeconfig", kubeconfig, "--set", "watch.namespaces={" + watched + "}"]
    for value in args.values or []:
        argv += ["--values", value]
    for item in args.set or []:
        argv += ["--set", item]
    return argv


class DevUp:
    """The loop of ``dev up``: keep one local process running the chart's operator Deployment's args."""

    def __init__(self, cluster: Cluster, log=print):
        self.cluster = cluster
        self.log = log
        self.playing: tuple[str, str, str, int] | None = None  # namespace, name, uid, generation
        self.stopping = False
        self._next_start = 0.0

    def operator_deployments(self) -> list[dict]:
        p = self.cluster.kubectl("get", "deployments", "-A", "-l", OPERATOR_SELECTOR, "-o", "json", check=False)
        if p.returncode != 0:
            return []
        return json.loads(p.stdout).get("items") or []

    def step(self) -> None:
        """One pass: start, restart or stop the local operator to match the chart's Deployment."""
        deps = self.operator_deployments()
        dep = deps[0] if deps else None
        if len(deps) > 1:
            self.log(f"dev up: {len(deps)} operator Deployments (one release at a time): running "
                     f"{dep['metadata']['namespace']}/{dep['metadata']['name']}")
        want = None if dep is None else (dep["metadata"]["namespace"], dep["metadata"]["name"], dep["metadata"]["uid"],
                                         int(dep["metadata"].get("generation") or 1))
        proc = self.cluster.operator
        if want is None:
            if self.playing is not None:
                self.log(f"dev up: Deployment {self.playing[0]}/{self.playing[1]} is gone (helm uninstall): "
                         "operator stopped")
                self.cluster.stop_operator()
                self.playing = None
            return
        if want == self.playing and proc is not None and proc.poll() is None:
            return
        if want == self.playing and proc is not None:
            tail = "\n".join(self.cluster.operator_log.read_text(errors="replace").splitlines()[-20:])
            self.log(f"dev up: the operator exited ({proc.returncode}); restarting in {RESTART_BACKOFF_S:.0f} s. "
                     f"Log tail ({self.cluster.operator_log}):\n{tail}")
            self.cluster.stop_operator()
            self.playing = None
            self._next_start = time.monotonic() + RESTART_BACKOFF_S
        if time.monotonic() < self._next_start:
            return
        if self.playing:
            self.log(f"dev up: Deployment {want[0]}/{want[1]} changed (generation {want[3]}): restarting the operator")
        try:
            self.cluster.play_operator_pod(want[0], want[1])
            self.cluster.mark_workload_ready(want[1], "deployment", want[0])
        except HarnessError as e:
            self.log(f"dev up: the operator did not come up: {e}")
            self.cluster.stop_operator()
            self._next_start = time.monotonic() + RESTART_BACKOFF_S
            return
        self.playing = want
        self.log(f"dev up: operator running as pid {self.cluster.operator.pid} with the args of Deployment "
                 f"{want[0]}/{want[1]} (generation {want[3]}; log {self.cluster.operator_log}); the webhook Service's "
                 "Endpoints point at it")


def cmd_up(args) -> int:
    directory = Path(args.dir or default_dir()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    pid = _running_pid(directory)
    if pid is not None:
        raise UsageError(f"dev up is already running in {directory} (pid {pid}): export KUBECONFIG={directory}/kubeconfig, "
                         f"or stop it with: specdeploy dev down --dir {directory}")
    helm = None if args.no_install else find_helm(args.helm)
    if not shutil.which("kubectl"):
        raise UsageError("no kubectl on PATH: dev up drives the cluster with it")
    (directory / "kubeconfig").unlink(missing_ok=True)
    (directory / PID_FILE).write_text(f"{os.getpid()}\n")
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster = Cluster(workdir=directory)
    say = lambda line: print(line, flush=True)  # noqa: E731
    try:
        cluster.start(port=args.port or None)
        say(f"dev up: embedded API server at {cluster.url} (log {directory}/apiserver.log)")
        if helm:
            argv = helm_install_argv(helm, args, cluster.kubeconfig)
            p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=cluster.env())
            if p.returncode != 0:
                say(f"dev up: helm install failed ({p.returncode}):\n{p.stderr.strip() or p.stdout.strip()}")
                return 1
            say(f"dev up: chart {chart_path(args)} installed as release {args.release} in namespace {args.namespace}")
        loop = DevUp(cluster, say)
        loop.step()
        if helm and loop.playing is None:
            wait_for(lambda: (loop.step(), loop.playing)[1] or stop["now"], 120, "the chart's operator to start",
                     interval=POLL_S)
        if not loop.playing:
            say("dev up: no chart installed yet (--no-install): `helm install` it and its operator Deployment runs here")
        say("dev up: ready. Use the cluster with:")
        say(f"export KUBECONFIG={cluster.kubeconfig}")
        say(f"dev up: stop with `specdeploy dev down{'' if args.dir is None else ' --dir ' + str(directory)}` "
            "or Ctrl-C here")
        while not stop["now"]:
            time.sleep(POLL_S)
            if not stop["now"]:
                loop.step()
        say("dev up: stopping")
        return 0
    except HarnessError as e:
        say(f"dev up: {e}")
        return 1
    finally:
        cluster.stop()
        if _running_pid(directory) == os.getpid():
            (directory / PID_FILE).unlink(missing_ok=True)
        for s, h in old.items():
            signal.signal(s, h)


def cmd_down(args) -> int:
    directory = Path(args.dir or default_dir()).resolve()
    pid = _running_pid(directory)
    if pid is None:
        print(f"dev down: nothing running in {directory}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _running_pid(directory) != pid:
            print(f"dev down: stopped dev up (pid {pid}) in {directory}")
            return 0
        time.sleep(0.2)
    print(f"dev down: dev up (pid {pid}) still running after {args.timeout:.0f} s", file=sys.stderr)
    return 1
