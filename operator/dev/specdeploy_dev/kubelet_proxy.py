"""The dev kubelet's Service proxy: cluster DNS names for pods that run as local processes.

Pods of the dev kubelet are processes on loopback addresses, with no cluster DNS: a client pod
cannot resolve ``http://<service>.<namespace>.svc:<port>``. With ``--service-proxy`` the kubelet
serves a forward HTTP proxy on loopback and gives every container ``HTTP_PROXY``/``http_proxy``
pointing at it (``NO_PROXY`` keeps loopback direct). The proxy answers requests whose host is
``<service>.<namespace>.svc[.cluster.local]`` by forwarding them (as ``Connection: close``) to a
ready pod behind the Service (its loopback address and the port it really bound; the kubelet's
``resolve_service`` picks one at random per connection, as kube-proxy would); any other host gets 502. Plain HTTP only (no CONNECT). Dev/test infrastructure only.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Awaitable, Callable
from urllib.parse import urlsplit

logger = logging.getLogger("specdeploy_dev.kubelet")

SERVICE_HOST = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\.?$")
Resolve = Callable[[str, str, int], Awaitable["tuple[str, int] | None"]]  # (namespace, service, port) -> (ip, port)


def parse_service_host(host: str) -> tuple[str, str] | None:
    """(namespace, service) of a cluster DNS name, or None."""
    m = SERVICE_HOST.match(host.lower())
    return (m.group(3), m.group(1)) if m else None


def proxy_env(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}"
    return {"HTTP_PROXY": url, "http_proxy": url, "NO_PROXY": "127.0.0.1,localhost,::1",
            "no_proxy": "127.0.0.1,localhost,::1"}


class ServiceProxy:
    def __init__(self, resolve: Resolve):
        self.resolve = resolve
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        # the connections' handler tasks: asyncio.start_server (Python 3.11) keeps no reference to them, and a task
        # that only the futures it awaits refer to is garbage-collected mid-request ("Task was destroyed but it is
        # pending!"), leaving its client hanging
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._tasks):
            task.cancel()
        if self.server is not None:
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            return await self._error(writer, 400, "bad request line")
        url = urlsplit(target)
        svc = parse_service_host(url.hostname or "")
        if url.scheme != "http" or svc is None:
            return await self._error(writer, 502, f"the dev Service proxy serves http://<service>.<namespace>.svc only, "
                                                  f"not {target[:100]}")
        backend = await self.resolve(svc[0], svc[1], url.port or 80)
        if backend is None:
            return await self._error(writer, 503, f"no ready pod behind Service {svc[0]}/{svc[1]} port {url.port or 80}")
        headers = [h for h in lines[1:] if h and not h.lower().startswith(("connection:", "proxy-connection:", "keep-alive:"))]
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        try:
            up_r, up_w = await asyncio.open_connection(*backend)
        except OSError as e:
            return await self._error(writer, 502, f"{backend[0]}:{backend[1]}: {e}")
        up_w.write(f"{method} {path} {version}\r\n".encode("latin-1") +
                   "".join(h + "\r\n" for h in headers).encode("latin-1") + b"Connection: close\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass

        request = asyncio.ensure_future(pipe(reader, up_w))  # a request body, if any
        try:
            resp_head = await asyncio.wait_for(up_r.readuntil(b"\r\n\r\n"), 600)
            kept = [h for h in resp_head.decode("latin-1").split("\r\n")
                    if h and not h.lower().startswith(("connection:", "keep-alive:"))]
            writer.write(("\r\n".join(kept) + "\r\nConnection: close\r\n\r\n").encode("latin-1"))
            await pipe(up_r, writer)  # the body, until the backend closes (we asked it to)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            request.cancel()
            for w in (up_w, writer):
                w.close()

    async def _error(self, writer: asyncio.StreamWriter, code: int, message: str) -> None:
        body = (message + "\n").encode()
        writer.write(f"HTTP/1.1 {code} Proxy Error\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        try:
            await writer.drain()
        finally:
            writer.close()
