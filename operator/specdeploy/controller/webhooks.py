"""The admission webhook server: HTTPS on ``--webhook-port``, POST ``/validate`` and ``/mutate``.

A small aiohttp server in the operator's event loop that hands each body to the pure
``admission.areview`` and always answers HTTP 200 with an AdmissionReview (malformed requests
get ``allowed: false`` with code 400). kopf's own ``WebhookServer`` is not used: it answers 500
to bodies without ``request`` or that are not JSON objects, a bare HTTP 400/404 (no
AdmissionReview) to bad JSON or resources it has not discovered yet, and it binds with
``reuse_port`` (two operators on one port silently share it). The paths and handler ids are the
ones kopf would use (``/validate``, ``/mutate``), so the chart's configurations are the same.

The configs lookup reads referenced ConfigMaps from the controller's watch cache, else with
one GET through the API (a read: fine on dryRun), and hub configs from the resolver's cache only (the entry of
the credential the reconciler last read for that reference). Only a caller with a verified client certificate
(the API server's: ``--webhook-client-ca`` or ``--webhook-client-ca-from-cluster``, and a name in
``--webhook-client-name`` when given) gets it; any other caller is answered from the object it sent alone
(``unverified_lookup``: docs/concepts/security.md, "Webhook callers").
TLS comes from ``--webhook-cert-dir`` or from ``certs.SelfSigned`` (see certs.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import gc
import json
import logging
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..api.types import SpeculativeDeploymentSpec
from ..core import memo, safejson
from . import admission, certs
from .admission import Configs, ConfigsUnavailable
from .kube import Kube, KubeError

log = logging.getLogger("specdeploy.webhook")

DEFAULT_PORT = 9443
DEFAULT_SECRET = "specdeploy-webhook-tls"
MAX_BODY = 4 << 20  # objects are at most ~1.5 MiB in etcd; a review holds two of them
LOOKUP_TIMEOUT = 2.0  # the API server waits timeoutSeconds (5) for the whole review


# Young-generation threshold of the garbage collector in the operator (CPython's default: 700). Every body the
# operator decodes (watch events, API responses) allocates thousands of containers; with the default, 1000 CRs
# made ~2000 young and ~13 full collections while converging, the full ones walking every cached body
# (~0.2 s each): 10% of the operator's CPU. With 10000 the full collections during convergence are gone.
GC_THRESHOLD = (10_000, 10, 10)


def settle_gc() -> None:
    """Move what start-up allocated (modules, classes, tables) out of the collector's way, and collect less often.

    Full collections otherwise walk every start-up object and pause the event loop for tens of
    milliseconds, which is most of the webhook's p99 under load (docs/concepts/admission.md), and
    the reconciler's caches make them dearer (docs/benchmarks.md). Thresholds other than CPython's
    defaults (set by whoever embeds this) are left as they are."""
    gc.collect()
    gc.freeze()
    if gc.get_threshold() == (700, 10, 10):
        gc.set_threshold(*GC_THRESHOLD)


# ----------------------------------------------------------------- settings


@dataclass
class WebhookSettings:
    port: int = 0  # 0: no webhook server
    addr: str = ""  # "": every interface, IPv4 and IPv6 (single-stack IPv6 clusters too)
    cert_dir: str | None = None
    services: list[str] = field(default_factory=list)  # NAME.NAMESPACE of the webhook Service
    secret: str = DEFAULT_SECRET
    configuration: str | None = None  # name of both webhook configurations (caBundle is patched)
    namespace: str | None = None  # the operator's namespace (where the Secret lives)
    resync_seconds: float = 300.0  # caBundle re-check besides the watch of the configurations
    cert_check_seconds: float = 60.0  # --webhook-cert-dir re-read
    client_ca: str | None = None  # PEM file: only callers with a client certificate from this CA (the API server)
    client_names: list[str] = field(default_factory=list)  # and, when given, with one of these names (CN or DNS SAN)
    # the CA from kube-system/extension-apiserver-authentication (requestheader-client-ca-file; names, when none are
    # given: requestheader-allowed-names): the front-proxy CA the API server's client certificate comes from
    client_ca_from_cluster: bool = False
    # callers without a verified certificate complete the handshake and are answered from their object alone
    # (the API server presents none unless configured to); False: they are refused at the handshake
    client_optional: bool = False

    @property
    def verifies_clients(self) -> bool:
        return bool(self.client_ca or self.client_ca_from_cluster)


# ----------------------------------------------------------------- configs lookup


class OperatorConfigs:
    """``configs_lookup`` for the operator: watch cache or one API GET for ConfigMaps, hub cache only."""

    def __init__(self, kube: Kube | None, resolver: Any, timeout: float = LOOKUP_TIMEOUT, parsed_cache: int = 256,
                 watched: Any = None, deployments: dict | None = None, parsed_bytes: int = 24 * memo.MiB):
        self.kube = kube
        self.resolver = resolver
        # the SpeculativeDeployment bodies the controller's watch keeps ((namespace, name) -> body): a benchmark is
        # admitted against its deployment as stored (admission._benchmark_flow); read, never written
        self.deployments = deployments
        # the operator's namespace scope (None: every namespace): nothing is read for a review outside it
        self.watched = frozenset(watched) if watched else None
        self.timeout = timeout
        # (ns, name, uid, resourceVersion, key) -> the parsed document (docs/concepts/security.md "Bounded memory")
        self._parsed = memo.BoundedLRU("webhook.parsed", parsed_cache, parsed_bytes, sizeof=lambda k, doc: memo.size_of(doc))

    async def __call__(self, namespace: str, spec: SpeculativeDeploymentSpec, fresh: bool = False) -> Configs:
        if self.watched is not None and namespace not in self.watched:
            # says nothing of the namespace's ConfigMaps (existence, keys, values): none is read
            raise ConfigsUnavailable("the operator does not watch this namespace; nothing was read")
        t_doc, t_src, t_cached, t_key = await self._one(namespace, spec.target, "target", fresh)
        if spec.drafter is None:  # methods mtp, ngram, suffix: nothing to read
            d_doc, d_src, d_cached, d_key = None, "none", False, ("none",)
        else:
            d_doc, d_src, d_cached, d_key = await self._one(namespace, spec.drafter, "drafter", fresh)
        key = (t_key, d_key) if t_key is not None and d_key is not None else None
        return Configs(t_doc, d_doc, cached=t_cached or d_cached, sources=(t_src, d_src), key=key)

    def deployment(self, namespace: str, name: str) -> dict | None:
        """The stored SpeculativeDeployment ``namespace/name`` from the watch cache (None: not there)."""
        if self.watched is not None and namespace not in self.watched:
            raise ConfigsUnavailable("the operator does not watch this namespace; nothing was read")
        if self.deployments is None:
            raise ConfigsUnavailable("the operator's SpeculativeDeployment cache is not attached")
        return self.deployments.get((namespace, name))

    async def _one(self, ns: str, src: Any, role: str, fresh: bool) -> tuple[Any, str, bool, Any]:
        """(document, where it came from, whether from a cache, a key identifying its content or None)."""
        ref = src.config_from.config_map_key_ref if src.config_from else None
        if ref is not None:
            return await self._configmap(ns, ref.name, ref.key, role, fresh)
        if src.pvc is not None:
            raise ConfigsUnavailable(f"spec.{role}.pvc: config.json is read from PVC {src.pvc.claim_name} by an inspector Job")
        return self._hub(ns, src, role)

    async def _configmap(self, ns: str, name: str, key: str, role: str, fresh: bool) -> tuple[Any, str, bool, Any]:
        cache = getattr(self.resolver, "configmaps", None) if self.resolver is not None else None
        body = None if fresh or cache is None else cache.get((ns, name))
        cached = body is not None
        if body is None:
            if self.kube is None:
                raise ConfigsUnavailable(f"ConfigMap {ns}/{name} (spec.{role}) is not in the watch cache")
            try:
                body = await asyncio.wait_for(self.kube.get("ConfigMap", ns, name), self.timeout)
            except asyncio.TimeoutError:
                raise ConfigsUnavailable(f"reading ConfigMap {ns}/{name} timed out") from None
            except KubeError as e:
                raise ConfigsUnavailable(f"reading ConfigMap {ns}/{name} failed: {e.status} {e.reason}") from None
            if body is None:
                raise ConfigsUnavailable(f"ConfigMap {ns}/{name} (spec.{role}.configFrom) does not exist yet")
        where = f"ConfigMap {ns}/{name} key {key}"
        meta = body.get("metadata") or {}
        ck = (ns, name, meta.get("uid"), meta.get("resourceVersion"), key)
        ident = ck if ck[2] is not None and ck[3] is not None else None
        hit = self._parsed.get(ident) if ident is not None else None
        if hit is not None:
            return hit, where, cached, ident
        data = body.get("data") or {}
        if key in data:
            text: Any = data[key]
        elif key in (body.get("binaryData") or {}):
            try:
                text = base64.b64decode(body["binaryData"][key])
            except (binascii.Error, ValueError, TypeError):
                raise ConfigsUnavailable(f"{where} is not valid base64") from None
        else:
            raise ConfigsUnavailable(f"{where} (spec.{role}.configFrom.configMapKeyRef.key) is missing")
        try:
            doc = safejson.loads(text)  # the reconciler's limits (depth 64, 8 MiB): the same answer in both
        except (ValueError, TypeError) as e:
            raise ConfigsUnavailable(f"{where} is not valid JSON ({str(e).split(':')[0][:60]})") from None
        if ident is not None:
            # parsed once per ConfigMap version and never edited: the checker remembers what it computes from it
            # (core/memo.py), as for the reconciler's documents (controller/resolve.py)
            self._parsed.put(ident, memo.read_only(doc))
        return doc, where, cached, ident

    def _hub(self, ns: str, src: Any, role: str) -> tuple[Any, str, bool, Any]:
        """The resolver's cached hub resolution for the credential this namespace's reference held when the
        reconciler last read it (the webhook reads no Secret); none: the lenient path."""
        cached = getattr(self.resolver, "hub_cached", None)
        resolved = cached(ns, src, known=True) if cached is not None else None
        if resolved is not None:
            return resolved.doc, resolved.source, True, ("hub", resolved.digest)
        raise ConfigsUnavailable(f"spec.{role}: {src.model} has not been fetched from the hub yet")


# ----------------------------------------------------------------- callers without a verified certificate

UNVERIFIED = "the caller presented no verified API-server client certificate; nothing was read"


def unverified_lookup(namespace: str, spec: Any, fresh: bool = False) -> Configs:
    """The configs lookup of a caller without a verified API-server client certificate: nothing is read (no
    ConfigMap, no hub cache), so the answer depends on the submitted object alone, whatever exists elsewhere."""
    raise ConfigsUnavailable(UNVERIFIED)


def _unverified_deployment(namespace: str, name: str) -> admission.NotRead:
    """No stored SpeculativeDeployment is read for such a caller either (a benchmark's deploymentRef): whether it
    exists, and what the policy finds in it, is not the caller's to learn; the benchmark controller decides."""
    return admission.NotRead(UNVERIFIED)


unverified_lookup.deployment = _unverified_deployment  # type: ignore[attr-defined]


# ----------------------------------------------------------------- the HTTPS server


@dataclass(frozen=True)
class ServerLimits:
    """What one client may hold of the webhook server (docs/concepts/security.md, "Webhook server limits").

    The API server sends a whole review at once and waits ``timeoutSeconds`` (default 5, at most 30)
    for the answer, so every limit is generous for it and short for a client that trickles bytes."""

    header_timeout: float = 10.0  # TLS handshake; the first request's headers from the connection's start, and
    #                               each later request's headers from their first byte
    body_timeout: float = 10.0  # the whole body, from the end of the headers
    idle_timeout: float = 60.0  # a kept-alive connection with no request in progress
    max_body: int = MAX_BODY  # larger bodies: a refusal with the review's uid when readable, else HTTP 413
    max_connections: int = 256  # open connections (TLS handshakes in progress included)
    # of those, what one client address may hold: the rest stays for the others (the API server). At the total
    # cap a new client's connection takes the place of an idle one of the client that holds the most. A connection
    # whose client certificate verified (the API server's) leaves its address's share once the handshake is done:
    # the share then bounds its handshakes in progress only.
    max_connections_per_client: int = 64
    max_concurrent_reviews: int = 16  # reviews checked at once; the others wait their turn

    def __post_init__(self) -> None:
        if not 0 < self.max_connections_per_client < self.max_connections:
            raise ValueError("max_connections_per_client must be below max_connections: a share stays for others")


UID_PREFIX = 64 << 10  # how much of an oversized body is read to find the review's uid
DRAIN_MAX = 16 << 20  # beyond the limit, read and dropped before answering; more: answered and closed
_REQUEST_UID = re.compile(rb'"request"\s*:\s*\{.*?"uid"\s*:\s*"([A-Za-z0-9._:-]{1,128})"', re.S)


def uid_from_prefix(data: bytes) -> str:
    """The review's ``request.uid`` from the start of a body too large to parse, or "" when not found there."""
    m = _REQUEST_UID.search(data)
    return m.group(1).decode("ascii") if m else ""


class _Conn:
    """One accepted TCP connection, counted against its client's share from accept to close."""

    __slots__ = ("peer", "transport", "handler", "released", "verified")

    def __init__(self, peer: str, transport: asyncio.BaseTransport):
        self.peer = peer
        self.transport = transport
        self.handler: _LimitedHandler | None = None  # None while the TLS handshake runs
        self.released = False
        self.verified = False  # the API server's certificate: counted in the total only

    def idle(self) -> bool:
        """No request in progress: mid-handshake, or waiting for a (first or kept-alive) request's first byte."""
        h = self.handler
        return h is None or (h._current_request is None and not h._messages)


def _peer(transport: asyncio.BaseTransport) -> str:
    """The client's address (an IPv4-mapped IPv6 address as its IPv4 form)."""
    name = transport.get_extra_info("peername")
    host = str(name[0]) if isinstance(name, (tuple, list)) and name else str(name or "?")
    return host[7:] if host.startswith("::ffff:") and "." in host else host


class _Gate(asyncio.Protocol):
    """The protocol of an accepted TCP connection: counts it against its client's share before anything is read,
    runs the TLS handshake under ``header_timeout``, then hands the connection to aiohttp's handler."""

    def __init__(self, server: "_LimitedServer"):
        self.server = server
        self.conn: _Conn | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        conn = self.server.admit(transport)
        if conn is None:
            transport.abort()  # type: ignore[attr-defined]
            return
        self.conn = conn
        transport.pause_reading()  # type: ignore[attr-defined]  # nothing is read before the handover
        self.server.start_connection(conn)

    def connection_lost(self, exc: BaseException | None) -> None:  # closed before the handover
        if self.conn is not None:
            self.server.release(self.conn)

    def data_received(self, data: bytes) -> None:  # not reached: reading is paused until the handover
        pass


class _LimitedHandler(web.RequestHandler):
    """aiohttp's connection handler plus header deadlines; its connection was counted at accept (``_Gate``).

    aiohttp closes a connection whose handler waits for a request longer than ``keepalive_timeout``
    (counted from the connection's start and from each response), which is our idle timeout; it has
    no deadline for headers that arrive a byte at a time, so each request's headers get one here, and a new
    connection must send its first request's headers within ``header_timeout`` of the handshake."""

    def __init__(self, manager: "_LimitedServer", **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._limits = manager.limits
        self._header_deadline: asyncio.TimerHandle | None = None
        self._conn: _Conn | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # the first request's headers: due header_timeout after the handshake, not idle_timeout
        self._header_deadline = self._loop.call_later(self._limits.header_timeout, self._headers_late)

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:  # a request's headers are complete
            self._disarm()
        elif (self._header_deadline is None and self._current_request is None and not self._messages
              and not self._force_close and not self._close):  # the first bytes of a request's headers
            self._header_deadline = self._loop.call_later(self._limits.header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self._current_request is None and not self._messages:
            log.info("webhook: closing a connection whose request headers took over %ss", self._limits.header_timeout)
            self.force_close()

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def connection_lost(self, exc: BaseException | None) -> None:
        manager = self._manager
        self._disarm()
        super().connection_lost(exc)
        if self._conn is not None and isinstance(manager, _LimitedServer):
            manager.release(self._conn)


class _LimitedServer(web.Server):
    """aiohttp's server plus the connection accounting: ``gate`` is the TCP protocol factory."""

    def __init__(self, handler: Any, limits: ServerLimits, ssl_context: ssl.SSLContext | None = None, **kwargs: Any):
        super().__init__(handler, **kwargs)
        self.limits = limits
        self.ssl_context = ssl_context
        self._handler_kwargs = kwargs
        self.clients: dict[str, set[_Conn]] = {}
        self.verified: set[_Conn] = set()
        self.open = 0
        # set by WebhookServer: whether a handshaken TLS transport carries the verified API server's certificate
        self.is_verified: Any = None
        self._handshakes: set[asyncio.Task] = set()
        self._last_warning = -1e9

    def __call__(self) -> _LimitedHandler:
        return _LimitedHandler(self, loop=self._loop, **self._handler_kwargs)

    def gate(self) -> _Gate:
        return _Gate(self)

    def _warn(self, msg: str, *args: Any) -> None:
        now = self._loop.time()
        if now - self._last_warning >= 10.0:  # at most one line per 10 s while a client is refused
            self._last_warning = now
            log.warning(msg, *args)

    def admit(self, transport: asyncio.BaseTransport) -> _Conn | None:
        """Count a new connection, or None: its client holds its share, or every connection is taken and none
        is idle at a client that holds more than this one."""
        lim = self.limits
        peer = _peer(transport)
        held = self.clients.get(peer, ())
        if len(held) >= lim.max_connections_per_client:
            self._warn("webhook: closing a connection from %s: it holds %d (limit per client %d)", peer, len(held),
                       lim.max_connections_per_client)
            return None
        if self.open >= lim.max_connections and not self._make_room(peer, len(held)):
            self._warn("webhook: closing a connection from %s: %d are open (limit %d)", peer, self.open,
                       lim.max_connections)
            return None
        conn = _Conn(peer, transport)
        self.clients.setdefault(peer, set()).add(conn)
        self.open += 1
        return conn

    def _make_room(self, peer: str, held: int) -> bool:
        """Close an idle connection of the client holding the most (more than ``peer`` would after this one)."""
        top = max((c for c in self.clients.items() if c[0] != peer), key=lambda c: len(c[1]), default=None)
        if top is None or len(top[1]) <= held + 1:
            return False
        victim = next((c for c in top[1] if c.idle()), None)
        if victim is None:
            return False
        self._warn("webhook: closing an idle connection of %s (it holds %d) for a connection from %s", top[0],
                   len(top[1]), peer)
        self.release(victim)
        victim.transport.abort()  # type: ignore[attr-defined]
        return True

    def release(self, conn: _Conn) -> None:
        if conn.released:
            return
        conn.released = True
        self.open -= 1
        if conn.verified:
            self.verified.discard(conn)
            return
        held = self.clients.get(conn.peer)
        if held is not None:
            held.discard(conn)
            if not held:
                del self.clients[conn.peer]

    def start_connection(self, conn: _Conn) -> None:
        handler = self()
        handler._conn = conn
        if self.ssl_context is None:
            self._hand_over(conn, handler, conn.transport)
            return
        task = self._loop.create_task(self._handshake(conn, handler))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: _Conn, handler: _LimitedHandler) -> None:
        raw = conn.transport
        try:
            tls = await self._loop.start_tls(raw, handler, self.ssl_context, server_side=True,  # type: ignore[arg-type]
                                             ssl_handshake_timeout=self.limits.header_timeout)
        except asyncio.CancelledError:
            self.release(conn)
            raw.abort()  # type: ignore[attr-defined]
            raise
        except Exception as e:  # noqa: BLE001 - a failed or late handshake: the client's problem
            log.debug("webhook: TLS handshake with %s failed: %s", conn.peer, e)
            self.release(conn)
            raw.abort()  # type: ignore[attr-defined]
            return
        if tls is None or conn.released:  # closed meanwhile, or made room for another client
            self.release(conn)
            if tls is not None:
                tls.abort()
            return
        conn.transport = tls
        if self.is_verified is not None and self.is_verified(tls):  # out of its address's share
            self._unshare(conn)
            conn.verified = True
            self.verified.add(conn)
        self._hand_over(conn, handler, tls)

    def _unshare(self, conn: _Conn) -> None:
        held = self.clients.get(conn.peer)
        if held is not None:
            held.discard(conn)
            if not held:
                del self.clients[conn.peer]

    def _hand_over(self, conn: _Conn, handler: _LimitedHandler, transport: asyncio.BaseTransport) -> None:
        conn.handler = handler
        if transport is conn.transport and self.ssl_context is None:
            transport.set_protocol(handler)  # type: ignore[attr-defined]
        handler.connection_made(transport)
        if self.ssl_context is None:
            transport.resume_reading()  # type: ignore[attr-defined]

    async def shutdown(self, timeout: float | None = None) -> None:
        for t in list(self._handshakes):
            t.cancel()
        await super().shutdown(timeout)


class WebhookServer:
    """POST /validate and /mutate (AdmissionReview v1), GET /healthz; HTTPS with the given context."""

    def __init__(self, *, lookup: Any, ssl_context: ssl.SSLContext | None, addr: str = "", port: int = DEFAULT_PORT,
                 max_body: int | None = None, limits: ServerLimits | None = None, client_names: Any = (),
                 policy: Any = None):
        self.lookup = lookup
        # with a client CA on ssl_context (certs.require_client_certs): the names a caller's certificate must
        # carry (CN or DNS SAN); empty: any certificate the CA signed
        self.client_names = frozenset(client_names)
        from ..core.policy import TenancyPolicy

        # the operator's tenancy policy (settings.OperatorSettings.policy; None: the defaults)
        self.policy = policy if policy is not None else TenancyPolicy()
        self.ssl_context = ssl_context
        self.addr = addr
        self.port = port
        limits = limits or ServerLimits()
        if max_body is not None:
            limits = dataclasses.replace(limits, max_body=max_body)
        self.limits = limits
        self.max_body = limits.max_body
        self._reviews = asyncio.Semaphore(limits.max_concurrent_reviews)
        self._web: _LimitedServer | None = None
        self._server: asyncio.AbstractServer | None = None

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        route = {"/validate": "validate", "/mutate": "mutate"}.get(request.path)
        if route is not None:
            verified = self.verified(request)
            if not verified and self._required():  # a certificate of the CA, but not one of the names
                log.warning("%s: refused a caller whose client certificate names %s (allowed: %s)", route,
                            certs.client_names(self._peercert(request)) or "nothing",
                            ", ".join(sorted(self.client_names)))
                return web.Response(status=403, text="forbidden: this webhook serves the API server only")
            if request.method != "POST":
                return web.Response(status=405, headers={"Allow": "POST"})
            return await self._handle(request, route, verified)
        if request.path == "/healthz":
            return web.Response(text="ok")
        return web.Response(status=404, text="not found: the webhooks are POST /validate and POST /mutate")

    @staticmethod
    def _peercert(request: web.BaseRequest) -> dict | None:
        sslobj = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        return sslobj.getpeercert() if sslobj is not None else None

    def _required(self) -> bool:
        return self.ssl_context is not None and self.ssl_context.verify_mode == ssl.CERT_REQUIRED

    def verified(self, request: web.BaseRequest) -> bool:
        """The caller presented a client certificate the context verified (client verification on) and, with
        client names, one naming one of them: the API server. Without verification nobody is. Decided once per
        connection, after its handshake (``_LimitedServer._handshake``)."""
        conn = getattr(request.protocol, "_conn", None)
        if isinstance(conn, _Conn):
            return conn.verified
        return self._transport_verified(request.transport)

    def _transport_verified(self, transport: Any) -> bool:
        if self.ssl_context is None or self.ssl_context.verify_mode == ssl.CERT_NONE or transport is None:
            return False
        sslobj = transport.get_extra_info("ssl_object")
        cert = sslobj.getpeercert() if sslobj is not None else None
        if not cert:
            return False
        return not self.client_names or any(n in self.client_names for n in certs.client_names(cert))

    async def _read_body(self, request: web.BaseRequest) -> tuple[bytes, bool, bool]:
        """(body, too_large, whole body read). Of a body over the limit only the first UID_PREFIX bytes are kept;
        the rest is read and dropped up to DRAIN_MAX more (so the client gets the answer before the connection
        closes), and not read at all beyond that."""
        limit = self.limits.max_body
        declared = request.content_length
        if declared is not None and declared > limit + DRAIN_MAX:  # only until the uid shows (or UID_PREFIX)
            data = b""
            while len(data) < UID_PREFIX and not uid_from_prefix(data):
                more = await request.content.readany()
                if not more:
                    break
                data += more
            return data[:UID_PREFIX], True, False
        chunks: list[bytes] = []
        got = 0
        while True:
            chunk = await request.content.readany()
            if not chunk:
                break
            if got <= limit:
                chunks.append(chunk)
            got += len(chunk)
            if got > limit + DRAIN_MAX:
                return b"".join(chunks)[:UID_PREFIX], True, False
        data = b"".join(chunks)
        if got > limit:
            return data[:UID_PREFIX], True, True
        return data, False, True

    async def _handle(self, request: web.BaseRequest, webhook: str, verified: bool = True) -> web.StreamResponse:
        try:
            content = request.content
            declared = request.content_length
            if declared is not None and declared <= self.limits.max_body and content.is_eof():
                # the whole body has arrived with the headers (the API server sends a review at once): no waiting,
                # so no deadline task to create and cancel per review
                raw, too_large, whole = content.read_nowait(-1), False, True
            else:
                raw, too_large, whole = await asyncio.wait_for(self._read_body(request), self.limits.body_timeout)
        except asyncio.TimeoutError:
            log.info("%s: closing a connection whose body took over %ss", webhook, self.limits.body_timeout)
            resp = web.Response(status=408, text=f"the request body did not arrive within {self.limits.body_timeout}s")
            resp.force_close()
            return resp
        except Exception as e:  # noqa: BLE001 - a broken upload is the client's problem: answer, do not 500
            doc = admission.malformed("", f"the request body could not be read ({type(e).__name__})")
            return web.Response(body=json.dumps(doc).encode(), content_type="application/json")
        if too_large:
            uid = uid_from_prefix(raw)
            log.info("%s: refused review %s: body over %d bytes", webhook, uid or "-", self.limits.max_body)
            msg = f"the request body exceeds {self.limits.max_body} bytes"
            if not uid:  # nothing to answer an AdmissionReview with: plain HTTP
                resp = web.Response(status=413, text=msg)
            else:
                doc = admission.too_large(uid, msg)
                resp = web.Response(body=json.dumps(doc).encode(), content_type="application/json")
            if not whole:
                resp.force_close()  # the rest of the body is not read: the connection cannot be reused
            return resp
        # every read on the object's behalf (ConfigMaps, the hub cache) is for the verified API server only
        lookup = self.lookup if verified else unverified_lookup
        async with self._reviews:
            doc = await admission.areview(raw, configs_lookup=lookup, webhook=webhook, policy=self.policy)
        r = doc.get("response") or {}
        if not r.get("allowed"):
            log.info("%s: refused review %s: %s", webhook, r.get("uid") or "-",
                     ((r.get("status") or {}).get("message") or "").splitlines()[0][:200])
        return web.Response(body=json.dumps(doc).encode(), content_type="application/json")

    async def start(self) -> None:
        lim = self.limits
        web_server = _LimitedServer(self._dispatch, lim, self.ssl_context, access_log=None,
                                    keepalive_timeout=lim.idle_timeout, lingering_time=0)
        web_server.is_verified = self._transport_verified
        loop = asyncio.get_running_loop()
        # plain TCP: the gate counts each connection against its client before the TLS handshake (start_tls)
        self._server = await loop.create_server(web_server.gate, self.addr or None, self.port, backlog=256,
                                                reuse_address=True)
        self._web = web_server
        if not self.port:  # port 0: pick up the one the OS chose
            self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            assert self._web is not None
            await self._web.shutdown(2.0)
            await self._server.wait_closed()
            self._server = self._web = None


# ----------------------------------------------------------------- runtime: TLS upkeep + server


class WebhookRuntime:
    """Runs in the operator: gets TLS ready, serves, keeps the certificate and caBundle current."""

    def new_server(self, client_names: Any) -> "WebhookServer":
        """The server this runtime serves: its settings' address and port, its TLS context, its policy."""
        s = self.settings
        return WebhookServer(lookup=self.lookup, ssl_context=self.ctx, addr=s.addr, port=s.port,
                             client_names=client_names, policy=self.policy)

    BIND_RETRY = 10.0
    RETRY_MIN = 1.0  # caBundle patch / configuration watch retries: 1 s doubling to 30 s
    RETRY_MAX = 30.0
    WATCH_SECONDS = 300.0  # one watch request's timeoutSeconds

    def __init__(self, settings: WebhookSettings, kube: Kube | None, lookup: Any, policy: Any = None):
        self.settings = settings
        self.policy = policy  # the tenancy policy its server admits with (None: the defaults)
        self.kube = kube
        self.lookup = lookup
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.tls: certs.SelfSigned | None = None
        self.loaded: bytes | None = None  # the certificate PEM being served
        self.server: WebhookServer | None = None
        self.ready = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()  # a watched configuration's caBundle differs: set it now
        self._watches: list[asyncio.Task] = []

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="specdeploy-webhook")

    async def stop(self) -> None:
        for t in self._watches:
            t.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.server is not None:
            await self.server.stop()

    async def _run(self) -> None:
        s = self.settings
        if not s.cert_dir:
            self.tls = certs.SelfSigned(self.kube, namespace=s.namespace, secret=s.secret,
                                        dns_names=certs.service_dns_names(s.services), configuration=s.configuration)
        while not await self._refresh_tls():
            await asyncio.sleep(min(self.BIND_RETRY, s.cert_check_seconds))
        names = list(s.client_names)
        while s.verifies_clients:
            try:
                names = await self._load_client_ca()
                break
            except (OSError, ssl.SSLError, KubeError, ValueError, asyncio.TimeoutError) as e:
                if s.client_optional:  # serve now: every caller is answered from its object alone until it loads
                    log.error("webhook TLS: cannot load the client CA from %s (%s); every caller is answered from "
                              "its object alone until it loads (retried every %ss)", self._ca_source(), e,
                              s.cert_check_seconds)
                    self._ca_pending = True
                    break
                # callers must present the API server's client certificate: never serve without it
                log.error("webhook TLS: cannot load the client CA from %s (%s); not serving until it loads",
                          self._ca_source(), e)
                await asyncio.sleep(self.BIND_RETRY)
        self.server = self.new_server(names)
        while True:
            try:
                await self.server.start()
                break
            except OSError as e:
                log.error("webhook server cannot listen on %s:%s (%s); retrying in %ss", s.addr or "*", s.port, e, self.BIND_RETRY)
                await asyncio.sleep(self.BIND_RETRY)
        log.info("admission webhooks listening on https://%s:%s/validate and /mutate (%s; %s)", s.addr or "*",
                 self.server.port,
                 f"certificate from {s.cert_dir}" if s.cert_dir else f"self-signed, Secret {s.namespace}/{s.secret}"
                 if s.namespace else "self-signed, in memory",
                 self._callers_line(names))
        synced = await self._sync_bundle() and not self._bundle_differs()
        self.ready.set()
        if self.tls is not None and self.tls.configuration and self.kube is not None:
            self._watches = [asyncio.create_task(self._watch_configuration(kind, plural), name=f"specdeploy-watch-{plural}")
                             for kind, plural in certs.CONFIG_KINDS]
        # Every replica re-reads the TLS material (the files, or the shared Secret) every
        # cert_check_seconds and serves a rotated certificate without a restart. caBundle is set at
        # once when a watched configuration changes (recreated, edited) or the material changed (a new
        # CA), retried with a backoff while it still differs, and re-checked every resync_seconds.
        loop = asyncio.get_running_loop()
        next_tls = loop.time() + s.cert_check_seconds
        next_bundle = loop.time() + (s.resync_seconds if synced else self.RETRY_MIN)
        backoff = self.RETRY_MIN if synced else self.RETRY_MIN * 2
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(next_tls, next_bundle) - loop.time()))
            except asyncio.TimeoutError:
                pass
            woken = self._wake.is_set()
            self._wake.clear()
            changed = False
            if loop.time() >= next_tls:
                before = self.loaded
                await self._refresh_tls()
                changed = self.loaded != before
                next_tls = loop.time() + s.cert_check_seconds
                if self._ca_pending:
                    await self._retry_client_ca()
            if woken or changed or loop.time() >= next_bundle:
                ok = await self._sync_bundle()
                if ok and not self._bundle_differs():
                    backoff = self.RETRY_MIN
                    next_bundle = loop.time() + s.resync_seconds
                else:  # the patch failed or the configuration changed under it: again soon
                    next_bundle = loop.time() + backoff
                    backoff = min(backoff * 2, self.RETRY_MAX)

    CLUSTER_CA = ("kube-system", "extension-apiserver-authentication")  # what kube-apiserver publishes
    CLUSTER_CA_KEY = "requestheader-client-ca-file"  # the front-proxy CA (its client certificate: front-proxy-client)
    CLUSTER_NAMES_KEY = "requestheader-allowed-names"  # a JSON list; empty: any certificate of that CA
    _ca_pending = False

    def _ca_source(self) -> str:
        s = self.settings
        return s.client_ca or f"ConfigMap {'/'.join(self.CLUSTER_CA)} key {self.CLUSTER_CA_KEY}"

    def _callers_line(self, names: list[str]) -> str:
        s = self.settings
        if not s.verifies_clients:
            return "no client certificate verification: every caller is answered from its object alone"
        if self._ca_pending:
            return f"the client CA ({self._ca_source()}) is not loaded yet: every caller is answered from its object alone"
        who = f"a client certificate from {self._ca_source()}" + (f" naming {', '.join(names)}" if names else "")
        return (f"callers with {who} get the full check, others the object-level one" if s.client_optional
                else f"callers need {who}")

    async def _load_client_ca(self) -> list[str]:
        """Load the client CA into the serving context; the client names to require (the settings', else the
        cluster's requestheader-allowed-names with the cluster's CA)."""
        s = self.settings
        if s.client_ca:
            certs.require_client_certs(self.ctx, s.client_ca, optional=s.client_optional)
            return list(s.client_names)
        if self.kube is None:
            raise ValueError("no API access to read it")
        cm = await asyncio.wait_for(self.kube.get("ConfigMap", *self.CLUSTER_CA), LOOKUP_TIMEOUT * 5)
        data = (cm or {}).get("data") or {}
        pem = data.get(self.CLUSTER_CA_KEY)
        if not cm or not pem:
            raise ValueError("the cluster publishes no front-proxy CA there (kube-apiserver --requestheader-client-ca-file)")
        names = list(s.client_names)
        if not names:
            got = json.loads(data.get(self.CLUSTER_NAMES_KEY) or "[]")
            names = [n for n in got if isinstance(n, str)] if isinstance(got, list) else []
        certs.require_client_certs(self.ctx, ca_pem=pem, optional=s.client_optional)
        return names

    async def _retry_client_ca(self) -> None:
        try:
            names = await self._load_client_ca()
        except (OSError, ssl.SSLError, KubeError, ValueError, asyncio.TimeoutError) as e:
            log.info("webhook TLS: the client CA still cannot be loaded (%s)", e)
            return
        self._ca_pending = False
        if self.server is not None:
            self.server.client_names = frozenset(names)
        log.info("webhook TLS: client CA loaded: %s", self._callers_line(names))

    def _bundle_differs(self) -> bool:
        return self.tls is not None and any(self.tls.differs(kind) for kind, _ in certs.CONFIG_KINDS)

    def ca_mismatches(self) -> list[str]:
        """The webhooks whose configured caBundle does not verify the served certificate (readiness: none may).
        Checked only where the operator keeps caBundle (self-signed with a configuration name)."""
        if self.tls is None or not self.tls.configuration or self.loaded is None:
            return []
        return self.tls.mismatches(self.loaded)

    async def _watch_configuration(self, kind: str, plural: str) -> None:
        """Watch one configuration by name; a change whose caBundle differs wakes the upkeep loop at once."""
        assert self.tls is not None and self.kube is not None
        path = f"{certs.ADMISSION_API}/{plural}"
        query = [("fieldSelector", f"metadata.name={self.tls.configuration}")]
        delay = self.RETRY_MIN
        loop = asyncio.get_running_loop()
        while True:
            try:
                started = loop.time()
                async for ev in self.kube.watch(path, query, timeout_seconds=int(self.WATCH_SECONDS)):
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "ERROR":  # e.g. 410 Expired: start a new watch
                        break
                    if typ not in ("ADDED", "MODIFIED", "DELETED"):
                        continue
                    self.tls.observe(kind, None if typ == "DELETED" else obj)
                    if typ != "DELETED" and self.tls.differs(kind):
                        log.info("webhook TLS: %s %s changed (%s) and its caBundle differs; setting it",
                                 kind, self.tls.configuration, typ)
                        self._wake.set()
                if loop.time() - started > self.RETRY_MIN:  # ended by its timeoutSeconds: watch again at once
                    delay = self.RETRY_MIN
                else:  # ended at once: not in a tight loop
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.RETRY_MAX)
            except asyncio.CancelledError:
                raise
            except KubeError as e:
                if e.status == 403:
                    log.warning("webhook TLS: cannot watch %s %s (%s): caBundle is re-checked every %ss only "
                                "(the chart grants list/watch by name)", kind, self.tls.configuration, e,
                                self.settings.resync_seconds)
                    await asyncio.sleep(self.settings.resync_seconds)
                else:
                    log.info("webhook TLS: watching %s %s failed (%s); again in %ss", kind, self.tls.configuration, e, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.RETRY_MAX)
            except Exception as e:  # noqa: BLE001 - broken connections: watch again
                log.info("webhook TLS: watching %s %s failed (%s); again in %ss", kind, self.tls.configuration, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY_MAX)

    async def _refresh_tls(self) -> bool:
        """Load new TLS material into the serving context when it changed; False when none is usable yet."""
        try:
            if self.settings.cert_dir:
                cert, key = await asyncio.to_thread(certs.read_dir, self.settings.cert_dir)
            else:
                assert self.tls is not None
                m = await self.tls.ensure()
                cert, key = m.cert_pem, m.key_pem
            if cert != self.loaded:
                certs.load_into(self.ctx, cert, key)
                if self.loaded is not None:
                    log.info("webhook TLS: serving a renewed certificate")
                self.loaded = cert
            return True
        except Exception as e:  # noqa: BLE001 - keep serving the current certificate; retry later
            if self.loaded is None and self.tls is not None:
                log.error("webhook TLS: cannot use Secret %s/%s (%s); serving an in-memory certificate until it works",
                          self.settings.namespace, self.settings.secret, e)
                m = certs.new_material(self.tls.dns_names, self.tls.ips)
                self.tls.material = m
                certs.load_into(self.ctx, m.cert_pem, m.key_pem)
                self.loaded = m.cert_pem
                return True
            log.error("webhook TLS: cannot load the certificate (%s)", e)
            return self.loaded is not None

    async def _sync_bundle(self) -> bool:
        if self.tls is None:
            return True
        try:
            await self.tls.sync_ca_bundle()
            return True
        except Exception as e:  # noqa: BLE001 - retried with a backoff
            log.error("webhook TLS: cannot update caBundle of %s: %s", self.settings.configuration, e)
            return False
