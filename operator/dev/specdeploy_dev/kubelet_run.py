"""The dev kubelet's pods as local processes: one :class:`PodWorker` per pod, one :class:`ContainerRunner`
per container (its runs, log files, probes, restarts and kills).

The pure decisions (executables, env, volumes, paths, status) are in :mod:`specdeploy_dev.kubelet_pods`;
the node agent that starts and stops workers is :mod:`specdeploy_dev.kubelet`. Dev/test infrastructure.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from specdeploy.core.names import PORT_MAP_ANNOTATION
from . import kubelet_podman as kpm
from . import kubelet_pods as kp

if TYPE_CHECKING:
    from .kubelet import Kubelet

logger = logging.getLogger("specdeploy_dev.kubelet")


def stamp(t: dt.datetime | None = None) -> str:
    return (t or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_path(group_version: str, plural: str, namespace: str | None, name: str | None = None,
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
            ps = await self.w.container_spec(self)
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
        if self.w.k.podman:  # the container's user (any UID) writes its termination message
            os.chmod(ps.termination_log, 0o666)
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
        v.started_at, v.exit_code, v.finished_at = stamp(), None, None
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
        v.state, v.exit_code, v.finished_at = "terminated", exit_code, stamp()
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

    async def pre_stop(self, budget: float) -> None:
        """The container's ``lifecycle.preStop`` hook, run before SIGTERM when its pod is deleted (as the kubelet runs
        it), within ``budget`` seconds (the grace period): ``sleep`` (``seconds``), ``exec`` (the command as a process
        of the container: the same executables, env and paths; ``podman exec`` in container mode) or ``httpGet``.
        A hook that fails or overruns is logged, as the kubelet records an event; the container is stopped anyway."""
        hook = (self.spec.get("lifecycle") or {}).get("preStop") or {}
        proc = self.proc
        if not hook or proc is None or proc.returncode is not None or budget <= 0:
            return
        try:
            if "sleep" in hook:
                await asyncio.sleep(min(float((hook["sleep"] or {}).get("seconds") or 0), budget))
            elif "httpGet" in hook:
                if not await self._probe({"httpGet": hook["httpGet"], "timeoutSeconds": budget}):
                    logger.warning("pod %s/%s container %s: preStop httpGet failed", self.w.ns, self.w.name, self.name)
            elif "exec" in hook:
                command = [str(a) for a in (hook["exec"] or {}).get("command") or []]
                if self.w.k.podman:
                    hook_proc = await asyncio.create_subprocess_exec(
                        self.w.k.settings.podman, "exec", kpm.container_name(self.w.uid, self.name), *command,
                        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                        stderr=asyncio.subprocess.DEVNULL)
                else:
                    ps = self.w.process_spec(self, {**self.spec, "command": command, "args": []})
                    hook_proc = await asyncio.create_subprocess_exec(
                        *ps.argv, env=ps.env, cwd=ps.cwd, stdin=asyncio.subprocess.DEVNULL,
                        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
                try:
                    code = await asyncio.wait_for(hook_proc.wait(), budget)
                except asyncio.TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        hook_proc.kill()
                    raise
                if code:
                    logger.warning("pod %s/%s container %s: preStop exec exited %s", self.w.ns, self.w.name,
                                   self.name, code)
        except (asyncio.TimeoutError, OSError, kp.PodConfigError) as e:
            logger.warning("pod %s/%s container %s: preStop hook: %s", self.w.ns, self.w.name, self.name,
                           e or "did not finish within the grace period")

    async def kill(self, reason: str | None, grace: float) -> None:
        """SIGTERM the container's main process, SIGKILL its process group after ``grace`` seconds (at once for 0)
        or once the main process has exited. Only the main process gets SIGTERM, as a container runtime signals the
        container's PID 1: an engine that drains on SIGTERM (vLLM ``--shutdown-timeout``) stops its own workers;
        signalled as a group, they would die under it and fail the requests it is finishing."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        self._kill_reason = reason
        if self.w.k.podman:
            await self._kill_container(proc, grace)
            return
        if grace > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group: children that outlived their parent too


    async def _kill_container(self, proc: asyncio.subprocess.Process, grace: float) -> None:
        """Container mode: SIGTERM the container (its PID 1), remove it after ``grace`` seconds."""
        name = kpm.container_name(self.w.uid, self.name)
        if grace > 0:
            await self.w.k.podman_cmd("kill", "--signal", "SIGTERM", name)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        await self.w.k.podman_cmd("rm", "-f", "-t", "0", name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # podman run itself, if it is still attached


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
        self.start_time = stamp()
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
        from specdeploy.controller.kube import KubeError

        for plural, found in names.items():
            store = self.configmaps if plural == "configmaps" else self.secrets
            for n in sorted(x for x in found if x):
                try:
                    store[n] = await self.k.api.call("GET", api_path("v1", plural, self.ns, n))
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
            if self.k.podman and vol.kind in ("emptyDir", "persistentVolumeClaim"):
                os.chmod(vol.path, 0o777)  # as kubelet makes an emptyDir: writable by the container's user
            for rel, data in vol.files.items():
                target = Path(vol.path) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)

    async def annotate_ports(self) -> None:
        """Record the remapped ports on the pod (only when they changed)."""
        annotation = kp.port_map_annotation({c.name: c.port_map for c in self.mains})
        if annotation and annotation != self._annotated:
            await self.k.api.merge(api_path("v1", "pods", self.ns, self.name),
                                   {"metadata": {"annotations": {PORT_MAP_ANNOTATION: annotation}}})
            self._annotated = annotation

    def process_spec(self, c: ContainerRunner, spec: dict | None = None) -> kp.ProcessSpec:
        """The local process of container ``c`` (``spec``: another command in it, e.g. a preStop exec hook)."""
        spec = spec or c.spec
        env = kp.resolve_env(self.pod, spec, self.configmaps, self.secrets, self.ip, self.k.host_ip)
        mounts = kp.container_mounts(spec, self.volumes)
        kp.link_node_caches(self.k.settings.node_caches, mounts)
        node_env = {**self.k.settings.node_env, "HOSTNAME": self.name}
        return kp.build_process(spec, env, mounts, kp.ExecTable(self.k.settings.exec_table), self.ip, c.port_map,
                                str(c.dir), node_env)

    async def container_spec(self, c: ContainerRunner) -> kp.ProcessSpec:
        """Process mode: the local process; container mode: ``podman run`` of the container's image."""
        if not self.k.podman:
            return self.process_spec(c)
        image = c.spec.get("image") or ""
        image_user = await self.k.image_user(image)
        env = {**self.k.settings.node_env, "HOSTNAME": self.name,
               **kp.resolve_env(self.pod, c.spec, self.configmaps, self.secrets, self.ip, self.k.host_ip)}
        termination = str(c.dir / "termination-log")
        mounts = kpm.plan_mounts(c.spec, self.volumes)
        for m in mounts:  # a subPath directory is made as kubelet makes it (a bind mount needs it to exist)
            if not os.path.exists(m.local):
                os.makedirs(m.local, exist_ok=True)
                os.chmod(m.local, 0o777)
        c.dir.mkdir(parents=True, exist_ok=True)
        env_file = c.dir / "env"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(kpm.split_env(env)[0])
        argv = kpm.podman_run_argv(self.pod, c.spec, env=env, mounts=mounts,
                                   pod_ip=self.ip, port_map=c.port_map, termination_log=termination,
                                   image_user=image_user, root_label=str(self.k.settings.root),
                                   podman=self.k.settings.podman, env_file=str(env_file))
        await self.k.podman_cmd("rm", "-f", "-t", "0", kpm.container_name(self.uid, c.name))  # a leftover run
        return kp.ProcessSpec(argv=argv, env=dict(os.environ), cwd=str(c.dir), termination_log=termination,
                              port_map=dict(c.port_map))

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
                                   pod_ip=self.ip, host_ip=self.k.host_ip, start_time=self.start_time, now=stamp(),
                                   failed_reason=self.failed, previous=self._pushed)
            if status == self._pushed:
                return
            from specdeploy.controller.kube import KubeError

            try:
                await self.k.api.merge(api_path("v1", "pods", self.ns, self.name, "status"), {"status": status})
                self._pushed = status
            except KubeError as e:
                if e.status != 404:
                    logger.warning("pod %s/%s: status not written: %s", self.ns, self.name, e)
        self.k.wake.set()

    async def stop(self, deleted: bool = False) -> None:
        """Stop the pod's containers: SIGTERM, SIGKILL after the grace period. ``deleted`` (the pod was deleted, not
        the kubelet stopped): first the containers' preStop hooks, within the grace period, as the kubelet runs them;
        the pod is no Service endpoint from the start (``stopping``: kubelet.resolve_service)."""
        self.stopping = True
        self._wake.set()
        grace = self.grace
        if deleted:
            t0 = time.monotonic()
            await asyncio.gather(*(c.pre_stop(self.grace) for c in self.mains))
            # a hook that used the whole grace period leaves 2 s for SIGTERM, as the kubelet's one-off extension
            grace = max(self.grace - (time.monotonic() - t0), 2.0 if self.grace > 0 else 0.0)
        await asyncio.gather(*(c.kill(None, grace) for c in self.inits + self.mains))
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.task, 10)
