"""The server: the kmock-based Emulator, start/stop, a threaded server for tests, kubeconfig, the CLI."""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import apps as _kmock_apps

from .common import ApiError, JSON, _clone, _meta
from .faults import FaultInjector
from .frontproxy import FrontProxy
from .resources import ResourceInfo
from .rest import RestMixin, _json_response, _parse_path
from .storage import Store
from .watch import WatchMixin

logger = logging.getLogger("specdeploy_dev.apiserver")


class _State(RestMixin, WatchMixin, Store):
    """All mutable state: the store with the request path and watches mixed in."""


# --------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------

@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with the stand-in shim (see the module docstring)."""

    history_limit: int = 64
    watch_log_size: int = 5000
    seed_namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public")
    # the client certificate presented to webhooks, its CA published in kube-system (frontproxy.py)
    front_proxy: FrontProxy = attrs.field(factory=FrontProxy.generate)
    _st: Any = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        # NOT calling super(): kmock's fallback reactions are replaced by this class.
        self._requests = _History(maxlen=max(self.history_limit, 0))  # type: ignore[assignment]
        self._st = _State(self)
        for ns in self.seed_namespaces:
            self._st.create(self._st.resources[("", "v1", "namespaces")], None,
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if "kube-system" in self.seed_namespaces:
            cm = self.front_proxy.configmap()
            self._st.create(self._st.resources[("", "v1", "configmaps")], "kube-system", cm)

    # ---- public in-process API (call it on the server's event loop thread) ----

    @property
    def faults(self) -> FaultInjector:
        return self._st.faults

    @property
    def requests_served(self) -> int:
        return self._st.served

    @property
    def history(self) -> collections.deque:
        """The bounded history of recorded requests (kmock ``Request`` objects)."""
        return self._requests  # type: ignore[return-value]

    def resource_info(self, plural: str, group: str = "", version: str | None = None) -> ResourceInfo | None:
        return self._st.find_resource(plural, group, version)

    def get_object(self, plural: str, name: str, namespace: str | None = None, group: str = "") -> JSON | None:
        info = self._st.find_resource(plural, group)
        if info is None:
            return None
        obj = self._st.bucket(info).objects.get((namespace if info.namespaced else None, name))
        return _clone(obj) if obj is not None else None

    def list_objects(self, plural: str, namespace: str | None = None, group: str = "") -> list[JSON]:
        info = self._st.find_resource(plural, group)
        if info is None:
            return []
        return [_clone(o) for o in self._st.select(info, namespace, None, None)]

    def create_object(self, obj: JSON, plural: str | None = None, group: str | None = None) -> JSON:
        """Create an object directly (no HTTP); the resource is guessed from apiVersion/kind."""
        api_version = obj.get("apiVersion", "v1")
        g, _, v = api_version.rpartition("/")
        info = self._st.find_resource(plural, g if group is None else group, v) if plural else \
            self._st.find_kind(g, v, obj.get("kind", ""))
        if info is None:
            raise ApiError(404, f"no resource for {api_version} {obj.get('kind')}")
        namespace = _meta(obj).get("namespace") or ("default" if info.namespaced else None)
        return _clone(self._st.create(info, namespace, _clone(obj)))

    def stats(self) -> JSON:
        st = self._st
        return {"requests_served": st.served, "history_len": len(self._requests),
                "history_limit": self.history_limit,
                "objects": sum(len(b.objects) for b in st.buckets.values()),
                "watchers": sum(len(b.watchers) for b in st.buckets.values()),
                "resource_version": st.rv, "faults_pending": len(st.faults.pending()),
                "gc_passes": st.gc.passes, "gc_deleted": st.gc.deleted}

    def close_watches(self) -> int:
        return self._signal_watchers("*", None, "end")

    def _signal_watchers(self, resource: str, group: str | None, signal_: str) -> int:
        count = 0
        for (g, plural), bucket in self._st.buckets.items():
            if resource not in ("*", plural) or (group is not None and group != g):
                continue
            for watcher in list(bucket.watchers):
                watcher.queue.put_nowait(signal_)
                count += 1
        return count

    # ---- the request path ----

    @property
    def writes(self) -> list[JSON]:
        """Every write request served (newest last): {start, end, agent, method, path, status}."""
        return list(self._st.writes)

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw.method in _WRITE_METHODS and not raw.path.startswith("/_specdeploy/"):
            entry = {"start": time.time(), "agent": raw.headers.get("User-Agent") or "", "method": raw.method,
                     "path": raw.path, "status": 0}
            self._st.writes.append(entry)
            try:
                resp = await self._serve_request(raw)
                entry["status"] = resp.status
                return resp
            finally:
                entry["end"] = time.time()  # status 0: the connection was dropped (a fault) or failed
        return await self._serve_request(raw)

    async def _serve_request(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        st = self._st
        st.served += 1
        body = await raw.read()
        path = raw.path.rstrip("/") or "/"
        try:
            if self._payloads:
                request = self._record(raw, path, body)
                if self._payloads:  # a test added its own kmock reactions: they go first
                    try:
                        return await _kmock_apps.RawHandler._handle(self, request)
                    except NotImplementedError:
                        pass
            elif self._requests.maxlen:  # built when the history is read (most requests never are)
                self._requests.append(_Pending(self, st.served, raw, path, body))
            return await st.dispatch(raw, path, body)
        except ApiError as e:
            return _json_response(e.status(), e.code)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug in the shim: answer 500 with the reason, keep serving
            logger.exception("stand-in API server failed on %s %s", raw.method, raw.path_qs)
            return _json_response(ApiError(500, f"internal error in the stand-in: {e!r}").status(), 500)

    def _record(self, raw: aiohttp.web.BaseRequest, path: str, body: bytes) -> Any:
        request = self._build_request(self._st.served, raw, path, body)
        self._requests.append(request)
        return request

    def _build_request(self, served: int, raw: aiohttp.web.BaseRequest, path: str, body: bytes) -> Any:
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        parsed = _parse_path(path)
        resource = None
        if parsed is not None and parsed.get("plural"):
            resource = kmock.resource(group=parsed["group"], version=parsed["version"], plural=parsed["plural"])
        action = None
        if parsed is not None and parsed.get("plural"):
            if raw.method == "GET":
                action = kmock.action.WATCH if raw.query.get("watch") in ("true", "1") or parsed.get("watch") \
                    else kmock.action.FETCH if parsed.get("name") else kmock.action.LIST
            elif raw.method == "POST" and not parsed.get("name"):
                action = kmock.action.CREATE
            elif raw.method in ("PATCH", "PUT") and parsed.get("name"):
                action = kmock.action.UPDATE
            elif raw.method == "DELETE" and parsed.get("name"):
                action = kmock.action.DELETE
        request = kmock.Request(
            id=served, method=raw.method, url=raw.url, params=dict(raw.query),
            headers=dict(raw.headers), body=body, text=body.decode("utf-8", "replace"), data=data,
            action=action, resource=resource,
            namespace=(parsed or {}).get("namespace"), name=(parsed or {}).get("name"),
            subresource=(parsed or {}).get("sub"), raw_request=raw)
        return request


@attrs.define(slots=True)
class _Pending:
    """A recorded request not yet turned into a kmock ``Request`` (see _History)."""

    emulator: Emulator
    served: int
    raw: aiohttp.web.BaseRequest
    path: str
    body: bytes

    def build(self) -> Any:
        return self.emulator._build_request(self.served, self.raw, self.path, self.body)


class _History(collections.deque):
    """The bounded request history: entries are built into kmock ``Request`` objects when read
    (iterated or indexed, by a test or by kmock's own DSL), not on every request served."""

    def __getitem__(self, index: int) -> Any:  # type: ignore[override]
        item = super().__getitem__(index)
        if type(item) is _Pending:
            item = item.build()
            super().__setitem__(index, item)
        return item

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    def __reversed__(self) -> Any:
        for i in range(len(self) - 1, -1, -1):
            yield self[i]


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _LowLevelServer(aiohttp.web.Server):
    def _make_request(self, message, payload, protocol, writer, task):  # type: ignore[override]
        return aiohttp.web.BaseRequest(message, payload, protocol, writer, task, self._loop,
                                       client_max_size=16 * 1024 * 1024)


class ApiServer:
    """A running stand-in: ``.url``, ``.port``, ``.host``, ``.emulator``, ``await .stop()``."""

    def __init__(self, emulator: Emulator, runner: aiohttp.web.ServerRunner, host: str, port: int):
        self.emulator = emulator
        self._runner = runner
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self.emulator.close_watches()
        await self.emulator._st.admission.close()
        await self.emulator._st.gc.stop()
        await asyncio.sleep(0)
        await self._runner.cleanup()
        await self.emulator.__aexit__(None, None, None)

    async def __aenter__(self) -> "ApiServer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def start(port: int = 0, host: str = "127.0.0.1", **options: Any) -> ApiServer:
    """Start the stand-in on ``host:port`` (0: a free port). Options go to ``Emulator``."""
    emulator = Emulator(**options)
    await emulator.__aenter__()
    emulator._st.gc.start()
    server = _LowLevelServer(emulator, handler_cancellation=True, access_log=None)
    runner = aiohttp.web.ServerRunner(server, shutdown_timeout=0.5, handle_signals=False)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    actual = sockets[0].getsockname()[1] if sockets else port
    return ApiServer(emulator, runner, host, actual)


class ThreadedApiServer:
    """The stand-in on its own event loop in a daemon thread, for synchronous code and tests.

    ``call(fn, *args)`` runs ``fn(emulator, *args)`` on the server's loop and returns its result
    (the emulator is not thread-safe; go through ``call`` or over HTTP).
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1", **options: Any):
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: ApiServer | None = None
        self._thread = threading.Thread(target=self._run, args=(port, host, options),
                                        name="specdeploy-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the stand-in API server did not start within 30 s")
        if self._error is not None:
            raise self._error
        assert self._server is not None
        self.url, self.port, self.host = self._server.url, self._server.port, self._server.host

    def _run(self, port: int, host: str, options: JSON) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(start(port, host, **options))
        except BaseException as e:  # reported to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 30) -> Any:
        async def _do() -> Any:
            return fn(self._server.emulator, *args)  # type: ignore[union-attr]
        return asyncio.run_coroutine_threadsafe(_do(), self._loop).result(timeout)

    def stop(self, timeout: float = 30) -> None:
        if self._server is None or not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)

    def __enter__(self) -> "ThreadedApiServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_in_thread(port: int = 0, host: str = "127.0.0.1", **options: Any) -> ThreadedApiServer:
    return ThreadedApiServer(port, host, **options)


def write_kubeconfig(path: str | os.PathLike[str], url: str, namespace: str = "default") -> str:
    """Write a kubeconfig for the stand-in (plain http, a dummy token) that kubectl, the
    kubernetes client and kopf accept; returns the path."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "specdeploy-dev", "cluster": {"server": url}}],
        "users": [{"name": "specdeploy-dev", "user": {"token": "specdeploy-dev-token"}}],
        "contexts": [{"name": "specdeploy-dev", "context": {"cluster": "specdeploy-dev", "user": "specdeploy-dev",
                                                             "namespace": namespace}}],
        "current-context": "specdeploy-dev",
    }
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    part = f"{path}.part"  # written whole, then renamed: a reader never sees half a kubeconfig
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(part, path)
    return path


def settle_gc() -> None:
    """The server process's garbage collector, as the operator's (specdeploy.controller.webhooks.settle_gc):
    start-up frozen, the young generation collected every 10,000 allocations instead of 700. The store holds
    every object with its managedFields; with CPython's defaults, 1000 CRs and their children cost the server
    ~1.1 s of full collections (8, each walking the store), 10% of its CPU in the operator bench."""
    gc.collect()
    gc.freeze()
    if gc.get_threshold() == (700, 10, 10):
        gc.set_threshold(10_000, 10, 10)


def main(argv: list[str] | None = None) -> int:
    """``specdeploy dev apiserver --kubeconfig PATH [--port N]``: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="specdeploy dev apiserver",
                                     description="Serve the embedded Kubernetes API server stand-in on 127.0.0.1.")
    parser.add_argument("--kubeconfig", required=True, help="write a kubeconfig for the stand-in here")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default="default", help="the kubeconfig's namespace (default: default)")
    args = parser.parse_args(argv)

    async def serve() -> int:
        # a kubeconfig left by an earlier run names its old port: gone until this server serves, so that
        # `until [ -s KUBECONFIG ]; do sleep 0.2; done` after `dev apiserver ... &` waits for this one
        try:
            os.unlink(args.kubeconfig)
        except FileNotFoundError:
            pass
        server = await start(args.port, args.host)
        settle_gc()
        write_kubeconfig(args.kubeconfig, server.url, args.namespace)
        server.emulator.front_proxy.write(os.path.dirname(os.path.abspath(args.kubeconfig)))
        print(server.url, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()
        return 0

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
