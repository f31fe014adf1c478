"""The only code that talks to the Kubernetes API (besides kopf's own watches and Events).

A thin async wrapper over the official client's ``ApiClient.call_api`` (run in worker
threads) for the few kinds the operator touches, with every write counted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .. import PLURAL
from ..api.benchmark import BENCH_PLURAL
from ..core import names as N
from ..core.names import FIELD_MANAGER  # every write names it: managedFields show what the operator owns
from specdeploy.core.errors import Retryable


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    @property
    def base(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        p = self.base
        if self.namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{self.plural}"
        if name:
            p += f"/{name}"
        if sub:
            p += f"/{sub}"
        return p


KINDS: dict[str, Kind] = {k.kind: k for k in (
    Kind("v1", "ConfigMap", "configmaps"),
    Kind("v1", "Service", "services"),
    Kind("v1", "Secret", "secrets"),
    Kind("v1", "Pod", "pods"),
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Kind("v1", "Event", "events"),
    Kind("v1", "Namespace", "namespaces", namespaced=False),
    Kind("apps/v1", "Deployment", "deployments"),
    Kind("batch/v1", "Job", "jobs"),
    Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
    Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors"),
    Kind(N.GROUP_VERSION, N.KIND, PLURAL),
    Kind(N.GROUP_VERSION, N.BENCH_KIND, BENCH_PLURAL),
)}


class KubeError(Retryable):
    def __init__(self, status: int, reason: str, message: str):
        self.status, self.reason = status, reason
        super().__init__(f"{status} {reason}: {message}")


class NotLeader(KubeError):
    """A write refused before it was sent: this replica does not hold the leader Lease (controller/leader.py)."""

    def __init__(self, verb: str, kind: str):
        super().__init__(0, "NotLeader", f"{verb} {kind} refused: this replica is not the leader (or its renew deadline passed)")


class Fence:
    """What a write checks before it is sent: ``allowed()`` and the time ``budget()`` it may take (seconds)."""

    def __init__(self, allowed: Callable[[], bool], budget: Callable[[], float]):
        self.allowed, self.budget = allowed, budget


def load_api_client(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster config when running in a pod, else the kubeconfig (KUBECONFIG or the given file)."""
    cfg = k8s.Configuration()
    try:
        if kubeconfig:
            raise k8s_config.ConfigException("explicit kubeconfig")
        k8s_config.load_incluster_config(client_configuration=cfg)
    except k8s_config.ConfigException:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook = _at_most_every(cfg.refresh_api_key_hook, REFRESH_SECONDS)
    return k8s.ApiClient(configuration=cfg)


# The kubernetes client calls the config's refresh hook before every request; the loaders' hooks re-read an
# expiring token when due (in-cluster: every 60 s; an exec or OIDC token: 5 min before it expires) and then set
# the host again, which makes the client scan the whole environment for proxy variables each time (5% of the
# operator's CPU at 1000 CRs). Once a second is soon enough for either.
REFRESH_SECONDS = 1.0


def _at_most_every(hook: Callable[[Any], None], seconds: float, clock: Callable[[], float] = time.monotonic
                   ) -> Callable[[Any], None]:
    """``hook`` run at most once per ``seconds``. The loaders' hooks install themselves again on the
    configuration each time they run (a new closure): that one is kept as the next to run, and this one
    stays installed."""
    lock = threading.Lock()
    last = [float("-inf")]
    current = [hook]

    def throttled(configuration: Any) -> None:
        with lock:
            now = clock()
            if now - last[0] < seconds:
                return
            current[0](configuration)
            installed = getattr(configuration, "refresh_api_key_hook", None)
            if installed is not throttled:
                if installed is not None:
                    current[0] = installed
                configuration.refresh_api_key_hook = throttled
            last[0] = now

    return throttled


class Kube:
    def __init__(self, api: k8s.ApiClient, on_write: Callable[[str, str], None] | None = None,
                 fence: Fence | None = None, executor: Any = None):
        self.api = api
        self.on_write = on_write or (lambda verb, kind: None)
        self.fence = fence  # None: every write is sent (a single operator, or the webhook's TLS upkeep)
        # None: asyncio's default thread pool. The leader elector gets threads of its own, so that its
        # renewals never queue behind the reconciler's requests (a late renewal closes the fence).
        self.executor = executor

    def fenced(self, fence: Fence | None) -> "Kube":
        """The same client with a write fence (the leader's reconciler uses one)."""
        return Kube(self.api, self.on_write, fence, self.executor)

    def _write_timeout(self, verb: str, kind: str) -> float:
        """The request timeout of a write: 30 s, or less when the fence says the lease ends sooner."""
        if self.fence is None:
            return 30.0
        if not self.fence.allowed():
            from . import metrics

            metrics.FENCED_WRITES.inc()
            raise NotLeader(verb, kind)
        return max(0.05, min(30.0, self.fence.budget()))

    def _call(self, method: str, path: str, body: Any = None, query: list | None = None,
              content_type: str = "application/json", timeout: float = 30.0, text: bool = False) -> Any:
        headers = {"Content-Type": content_type, "Accept": "text/plain" if text else "application/json"}
        try:
            m, url, hdrs, data, _ = self.api.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(m, url, header_params=hdrs, body=data, _request_timeout=timeout)
            resp.read()
            status, raw = resp.status, resp.data
        except ApiException as e:
            status, raw = e.status or 0, (e.body or b"")
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if status >= 400:
            reason, message = "", ""
            try:
                doc = json.loads(raw or "{}")
                reason, message = doc.get("reason") or "", doc.get("message") or ""
            except ValueError:
                message = (raw or "")[:200]
            raise KubeError(status, reason, message)
        if text:
            return raw or ""
        return json.loads(raw) if raw else None

    async def call(self, method: str, path: str, body: Any = None, query: list | None = None,
                   content_type: str = "application/json", timeout: float = 30.0) -> Any:
        if self.executor is None:
            return await asyncio.to_thread(self._call, method, path, body, query, content_type, timeout)
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, self._call, method, path, body, query, content_type, timeout)

    async def log(self, namespace: str, pod: str, container: str | None = None, tail_lines: int | None = None,
                  limit_bytes: int | None = None) -> str:
        """A pod container's log (pods/log), as text."""
        q = [("container", container)] if container else []
        if tail_lines:
            q.append(("tailLines", str(tail_lines)))
        if limit_bytes:
            q.append(("limitBytes", str(limit_bytes)))
        path = KINDS["Pod"].path(namespace, pod, "log")
        if self.executor is None:
            return await asyncio.to_thread(self._call, "GET", path, None, q, "application/json", 60.0, True)
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, self._call, "GET", path, None, q, "application/json", 60.0, True)

    async def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        try:
            return await self.call("GET", KINDS[kind].path(namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def get_many(self, objects: list[tuple[str, str | None, str]]) -> list[dict | None]:
        """``get`` of each (kind, namespace, name), in order, as one hand-off to the client's thread (None: absent)."""
        def run() -> list[dict | None]:
            out: list[dict | None] = []
            for kind, namespace, name in objects:
                try:
                    out.append(self._call("GET", KINDS[kind].path(namespace, name)))
                except KubeError as e:
                    if e.status != 404:
                        raise
                    out.append(None)
            return out

        if self.executor is None:
            return await asyncio.to_thread(run)
        return await asyncio.get_running_loop().run_in_executor(self.executor, run)

    async def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict]:
        q = [("labelSelector", label_selector)] if label_selector else []
        doc = await self.call("GET", KINDS[kind].path(namespace), query=q)
        return list((doc or {}).get("items") or [])

    async def create(self, obj: dict) -> dict:
        k = KINDS[obj["kind"]]
        timeout = self._write_timeout("create", obj["kind"])
        self.on_write("create", obj["kind"])
        return await self.call("POST", k.path(obj["metadata"].get("namespace")), body=obj,
                               query=[("fieldManager", FIELD_MANAGER)], timeout=timeout)

    async def patch(self, kind: str, namespace: str | None, name: str, patch: dict | list, sub: str | None = None,
                    content_type: str = "application/merge-patch+json") -> dict:
        timeout = self._write_timeout("patch", kind)
        self.on_write("patch" if not sub else f"patch-{sub}", kind)
        return await self.call("PATCH", KINDS[kind].path(namespace, name, sub), body=patch,
                               query=[("fieldManager", FIELD_MANAGER)], content_type=content_type, timeout=timeout)

    async def apply(self, obj: dict, force: bool = False) -> dict:
        """Server-side apply of a whole object as field manager ``specdeploy`` (creates it when missing)."""
        k = KINDS[obj["kind"]]
        timeout = self._write_timeout("apply", obj["kind"])
        self.on_write("apply", obj["kind"])
        query = [("fieldManager", FIELD_MANAGER)] + ([("force", "true")] if force else [])
        return await self.call("PATCH", k.path(obj["metadata"].get("namespace"), obj["metadata"]["name"]), body=obj,
                               query=query, content_type="application/apply-patch+yaml", timeout=timeout)

    async def delete(self, kind: str, namespace: str | None, name: str, propagation: str = "Background",
                     uid: str | None = None) -> None:
        """Delete an object (absent already: nothing to do). ``uid``: only that object (a precondition: 409 when
        the name now holds another)."""
        timeout = self._write_timeout("delete", kind)
        self.on_write("delete", kind)
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self.call("DELETE", KINDS[kind].path(namespace, name), body=options, timeout=timeout)
        except KubeError as e:
            if e.status != 404:
                raise

    async def watch(self, path: str, query: list | None = None, timeout_seconds: int = 300) -> AsyncIterator[dict]:
        """One watch request on a collection path: yields its events (``{"type", "object"}``) until the server
        ends it (``timeoutSeconds``) or the caller stops iterating. A daemon thread reads the stream (the client
        is synchronous); closing the generator shuts the connection, which ends the thread's blocked read."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        held: dict[str, Any] = {}
        query = [*(query or []), ("watch", "true"), ("timeoutSeconds", str(int(timeout_seconds))),
                 ("allowWatchBookmarks", "true")]

        def put(item: tuple) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                pass

        def read() -> None:
            try:
                m, url, hdrs, _, _ = self.api.param_serialize("GET", path, query_params=query,
                                                               header_params={"Accept": "application/json"},
                                                               auth_settings=["BearerToken"])
                resp = self.api.call_api(m, url, header_params=hdrs, _request_timeout=(10, timeout_seconds + 30))
                held["resp"] = resp.response
                if resp.status >= 400:
                    raw = resp.response.data or b""
                    try:
                        doc = json.loads(raw or b"{}")
                    except ValueError:
                        doc = {"message": raw[:200].decode("utf-8", "replace")}
                    raise KubeError(resp.status, doc.get("reason") or "", doc.get("message") or "")
                for line in iter_resp_lines(resp.response):
                    if line:
                        put(("event", json.loads(line)))
                put(("end", None))
            except ApiException as e:
                put(("error", KubeError(e.status or 0, e.reason or "", str(e.body or "")[:200])))
            except BaseException as e:  # noqa: BLE001 - handed to the reader
                put(("error", e))

        threading.Thread(target=read, name="specdeploy-watch", daemon=True).start()
        try:
            while True:
                what, item = await events.get()
                if what == "end":
                    return
                if what == "error":
                    raise item
                yield item
        finally:
            resp = held.get("resp")
            if resp is not None:
                try:
                    resp.shutdown()  # urllib3: unblocks the reading thread; the connection is not reused
                except Exception as e:  # noqa: BLE001 - closing a dead connection
                    logging.getLogger("specdeploy.kube").debug("closing a watch: %s", e)

    async def has_api(self, api_version: str, plural: str) -> bool:
        """Whether the API server serves this resource (e.g. a CRD is installed)."""
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        try:
            doc = await self.call("GET", base)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in (doc or {}).get("resources") or [])
