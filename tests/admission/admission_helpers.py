"""Helpers for the admission tests: AdmissionReview requests as the API server sends them, an
HTTPS webhook server in a background thread, an HTTPS client that verifies the served chain.

Test modules import from here explicitly.
No pytest-asyncio: servers run on their own event loop in a daemon thread; clients are blocking
http.client connections with timeouts.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import functools
import http.client
import json
import os
import ssl
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testkit import DELETE  # noqa: F401  (with_spec's marker; test modules import it from here)
from specdeploy.controller import certs
from specdeploy.controller.webhooks import OperatorConfigs, WebhookServer
from specdeploy.core.policy import TenancyPolicy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QWEN = EXAMPLES / "qwen3.6-27b-b300-vllm"
KIMI = EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang"
GVK = {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"}
GVR = {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"}


def example_cr(example: Path = QWEN, name: str | None = None, namespace: str = "default") -> dict:
    cr = yaml.safe_load((example / "speculativedeployment.yaml").read_text())
    cr["metadata"]["namespace"] = namespace
    if name:
        cr["metadata"]["name"] = name
    return cr


def example_configs(example: Path = QWEN) -> tuple[dict, dict]:
    """(target, drafter) config.json documents of an example."""
    return (json.loads((example / "target.config.json").read_text()),
            json.loads((example / "drafter.config.json").read_text()))


def configmap(name: str, doc: Any, namespace: str = "default", key: str = "config.json") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "resourceVersion": "1"},
            "data": {key: doc if isinstance(doc, str) else json.dumps(doc)}}


def review_request(obj: Any, operation: str = "CREATE", old: Any = None, dry_run: bool = False,
                   sub_resource: str | None = None, uid: str | None = None, namespace: str | None = None) -> dict:
    """An admission.k8s.io/v1 AdmissionReview as kube-apiserver sends it."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    src = meta if isinstance(meta, dict) else ((old or {}).get("metadata") if isinstance(old, dict) else {}) or {}
    req: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": dict(GVK), "resource": dict(GVR),
        "requestKind": dict(GVK), "requestResource": dict(GVR),
        "name": src.get("name", "") if isinstance(src, dict) else "",
        "namespace": namespace or (src.get("namespace") if isinstance(src, dict) else None) or "default",
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj if operation != "DELETE" else None,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions",
                                                              "DELETE": "DeleteOptions"}.get(operation, "CreateOptions")},
    }
    if sub_resource:
        req["subResource"] = sub_resource
        if sub_resource == "scale":  # the API server reviews the Scale object for /scale
            scale = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
            req["kind"] = req["requestKind"] = scale
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


class FakeResolver:
    """What OperatorConfigs reads from the controller: the ConfigMap watch cache and the hub cache."""

    def __init__(self) -> None:
        self.configmaps: dict[tuple[str, str], dict] = {}
        self._hub_cache: dict = {}
        self.clock = lambda: 0.0

    def add(self, cm: dict) -> None:
        m = cm["metadata"]
        self.configmaps[(m.get("namespace") or "default", m["name"])] = cm


# The API server's webhook client certificate (docs/concepts/security.md, "Webhook callers"): the servers these
# helpers start verify it, and their clients present it unless told otherwise (an unverified caller).
API_SERVER = "kube-apiserver-webhook-client"


def issue_client(ca_pem: bytes, ca_key_pem: bytes, name: str) -> tuple[bytes, bytes]:
    """A client certificate (EKU clientAuth) for ``name``, signed by the CA: (certificate PEM, key PEM)."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


@functools.lru_cache(maxsize=None)
def api_server_client_ca() -> tuple[bytes, bytes]:
    """The test CA of the API server's client certificate (CA PEM, key PEM)."""
    return certs.generate_ca("test-api-server-client-ca")


@functools.lru_cache(maxsize=None)
def api_server_certificate(name: str = API_SERVER) -> tuple[bytes, bytes]:
    return issue_client(*api_server_client_ca(), name)


def present(ctx: ssl.SSLContext, cert: tuple[bytes, bytes]) -> None:
    """Make a client context present this certificate."""
    with tempfile.TemporaryDirectory(prefix="specdeploy-test-client-") as d:
        crt, key = os.path.join(d, "c.crt"), os.path.join(d, "c.key")
        Path(crt).write_bytes(cert[0])
        Path(key).write_bytes(cert[1])
        ctx.load_cert_chain(crt, key)


def client_context(ca_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    ctx.check_hostname = True
    return ctx


class _HTTPS(http.client.HTTPSConnection):
    """Connects to host:port but verifies the certificate for `sni` (e.g. the Service's DNS name)."""

    def __init__(self, host: str, port: int, *, sni: str | None = None, **kw: Any):
        super().__init__(host, port, **kw)
        self._sni = sni

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._sni or self.host)


class Client:
    """Blocking HTTPS client with a kept-alive connection; verifies the chain and host name."""

    def __init__(self, port: int, ca_pem: bytes, host: str = "127.0.0.1", server_hostname: str | None = None,
                 timeout: float = 10, source: str | None = None):
        self.port, self.host, self.timeout = port, host, timeout
        self.source = source  # the client's own address (another loopback address: another client)
        self.ctx = client_context(ca_pem)
        self.server_hostname = server_hostname
        self.conn: http.client.HTTPSConnection | None = None

    def _connect(self) -> http.client.HTTPSConnection:
        return _HTTPS(self.host, self.port, timeout=self.timeout, context=self.ctx, sni=self.server_hostname,
                      source_address=(self.source, 0) if self.source else None)

    def post(self, path: str, body: Any, headers: dict | None = None) -> tuple[int, Any]:
        data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
        hdrs = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = self._connect()
            try:
                self.conn.request("POST", path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest):
                self.close()
                if attempt:
                    raise
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = raw.decode("utf-8", "replace")
        return r.status, doc

    def review(self, request: dict, webhook: str = "validate") -> dict:
        status, doc = self.post(f"/{webhook}", request)
        assert status == 200, (status, doc)
        assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview", doc
        return doc["response"]

    def peer_certificate(self) -> bytes:
        """DER of the certificate the server presents (verified against the CA)."""
        if self.conn is None or self.conn.sock is None:
            self.post("/validate", b"{}")
        return self.conn.sock.getpeercert(binary_form=True)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


TEST_POLICY = TenancyPolicy(trust_remote_code_namespaces=("default",))


class ServerThread:
    """A WebhookServer on 127.0.0.1 (HTTPS, self-signed for localhost) in a daemon thread."""

    def __init__(self, resolver: FakeResolver | None = None, kube: Any = None, lookup: Any = "default",
                 limits: Any = None, client_auth: str | None = "optional") -> None:
        """``client_auth``: "optional" (the chart's default: the API server's certificate verified, other callers
        answered from their object alone), "required", or None (no verification: every caller unverified)."""
        self.resolver = resolver or FakeResolver()
        self.material = certs.new_material(["localhost"], ["127.0.0.1"])
        self.lookup = OperatorConfigs(kube, self.resolver) if lookup == "default" else lookup
        self.loop = asyncio.new_event_loop()
        ctx = certs.server_context(self.material)
        if client_auth is not None:
            certs.require_client_certs(ctx, ca_pem=api_server_client_ca()[0].decode(), optional=client_auth == "optional")
        self.server = WebhookServer(lookup=self.lookup, ssl_context=ctx, addr="127.0.0.1", port=0, limits=limits,
                                    client_names=[API_SERVER] if client_auth is not None else ())
        # the default policy, with remote code allowed in the test namespace (the Kimi example needs it)
        self.server.policy = TEST_POLICY
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> "ServerThread":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    @property
    def port(self) -> int:
        return self.server.port

    def client(self, verified: bool = True, source: str | None = None) -> Client:
        """A client; ``verified``: presenting the API server's client certificate."""
        c = Client(self.port, self.material.ca_pem, source=source)
        if verified:
            present(c.ctx, api_server_certificate())
        return c

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


# the QWEN example's ConfigMaps (its SpeculativeDeployment's configFrom)
TARGET_CM, DRAFTER_CM = "qwen36-27b-target-config", "qwen36-27b-drafter-config"


def qwen_server(configmaps: dict[str, Any] | None = None) -> ServerThread:
    """A started ServerThread whose resolver holds the QWEN example's target and drafter configs
    (TARGET_CM, DRAFTER_CM) and ``configmaps`` ({name: config doc or text})."""
    s = ServerThread().start()
    t, d = example_configs(QWEN)
    for name, doc in {TARGET_CM: t, DRAFTER_CM: d, **(configmaps or {})}.items():
        s.resolver.add(configmap(name, doc))
    return s


def with_spec(cr: dict, **changes: Any) -> dict:
    """A copy of cr with dotted spec paths set: with_spec(cr, **{"gpu.count": 3})."""
    out = copy.deepcopy(cr)
    for path, value in changes.items():
        d = out["spec"]
        keys = path.split(".")
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        if value is DELETE:
            d.pop(keys[-1], None)
        else:
            d[keys[-1]] = value
    return out

