"""Issue 24, item 3: the webhook serves the API server only, and is no oracle for other namespaces' ConfigMaps.

Over real HTTPS (docs/concepts/security.md, "Webhook callers"): with a client CA configured a caller without a
client certificate, or with one from another CA, does not get through the TLS handshake; with client names, a
certificate of the right CA but another name gets HTTP 403; the API server's certificate gets its review. A
review for a namespace the operator does not watch reads nothing and its answer is the same whether the
referenced ConfigMap exists, lacks the key, or holds a broken config."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission_helpers import (QWEN, Client, FakeResolver, configmap, example_configs, example_cr, review_request,
                               with_spec)
from specdeploy.controller import certs
from specdeploy.controller.webhooks import OperatorConfigs, WebhookServer, WebhookSettings

API_SERVER = "kube-apiserver-webhook-client"


def issue_client(ca_pem: bytes, ca_key_pem: bytes, name: str) -> tuple[bytes, bytes]:
    """A client certificate (EKU clientAuth) for ``name``, signed by the CA."""
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


class Served:
    """A WebhookServer on 127.0.0.1 in a thread, with the given client CA file and names."""

    def __init__(self, tmp_path, *, client_ca: bytes | None, names=(), lookup=None):
        self.material = certs.new_material(["localhost"], ["127.0.0.1"])
        ctx = certs.server_context(self.material)
        if client_ca is not None:
            path = tmp_path / "client-ca.crt"
            path.write_bytes(client_ca)
            certs.require_client_certs(ctx, str(path))
        self.loop = asyncio.new_event_loop()
        self.server = WebhookServer(lookup=lookup or OperatorConfigs(None, FakeResolver()), ssl_context=ctx,
                                    addr="127.0.0.1", port=0, client_names=names)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        self.tmp = tmp_path

    def client(self, cert: tuple[bytes, bytes] | None = None) -> Client:
        c = Client(self.server.port, self.material.ca_pem)
        if cert is not None:
            crt, key = self.tmp / "c.crt", self.tmp / "c.key"
            crt.write_bytes(cert[0])
            key.write_bytes(cert[1])
            c.ctx.load_cert_chain(str(crt), str(key))
        return c

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def cas():
    return certs.generate_ca("api-server-client-ca"), certs.generate_ca("someone-else")


def refused_at_handshake(client: Client) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        client.review(review_request(example_cr(QWEN)))


def test_caller_without_the_client_certificate_is_refused(tmp_path, cas):
    (ca, ca_key), (other, other_key) = cas
    s = Served(tmp_path, client_ca=ca)
    try:
        refused_at_handshake(s.client())  # no certificate
        refused_at_handshake(s.client(issue_client(other, other_key, API_SERVER)))  # another CA
        r = s.client(issue_client(ca, ca_key, API_SERVER)).review(review_request(example_cr(QWEN)))
        assert r["allowed"] is True
    finally:
        s.stop()


def test_client_names_narrow_the_ca(tmp_path, cas):
    (ca, ca_key), _ = cas
    s = Served(tmp_path, client_ca=ca, names=[API_SERVER])
    try:
        status, body = s.client(issue_client(ca, ca_key, "front-proxy-client")).post(
            "/validate", review_request(example_cr(QWEN)))
        assert status == 403 and "API server only" in body
        assert s.client(issue_client(ca, ca_key, API_SERVER)).review(review_request(example_cr(QWEN)))["allowed"]
    finally:
        s.stop()


def test_without_a_client_ca_any_caller_is_served(tmp_path):
    """Today's default (no client CA configured): the chart's NetworkPolicy is then what keeps others out."""
    s = Served(tmp_path, client_ca=None)
    try:
        assert s.client().review(review_request(example_cr(QWEN)))["allowed"] is True
    finally:
        s.stop()


def test_settings_carry_the_client_ca_through_the_environment():
    ws = WebhookSettings(port=9443, client_ca="/etc/ca/ca.crt", client_names=["a", "b"])
    again = WebhookSettings.from_env(ws.to_env())
    assert (again.client_ca, again.client_names) == ("/etc/ca/ca.crt", ["a", "b"])


# ----------------------------------------------------------------- no oracle for unwatched namespaces


class Kube:
    """Another tenant's namespace as the API would answer the operator (cluster-wide RBAC)."""

    def __init__(self, body):
        self.body, self.reads = body, []

    async def get(self, kind, ns, name):
        self.reads.append((kind, ns, name))
        return self.body


def test_unwatched_namespace_gets_an_answer_that_reveals_nothing(tmp_path):
    t, d = example_configs(QWEN)
    broken = json.loads(json.dumps(d))
    broken["dflash_config"]["target_layer_ids"][4] = 64
    secret_value = "tenant-b-private-value"
    variants = {
        "absent": None,
        "other keys": {**configmap("cfg", t, "tenant-b"), "data": {"password": secret_value}},
        "broken config": configmap("cfg", broken, "tenant-b"),
        "valid": configmap("cfg", t, "tenant-b"),
    }
    cr = with_spec(example_cr(QWEN, namespace="tenant-b"),
                   **{"target.configFrom": {"configMapKeyRef": {"name": "cfg"}},
                      "drafter.configFrom": {"configMapKeyRef": {"name": "cfg"}}})
    answers = {}
    for label, body in variants.items():
        kube = Kube(body)
        s = Served(tmp_path, client_ca=None, lookup=OperatorConfigs(kube, FakeResolver(), watched=["tenant-a"]))
        try:
            r = s.client().review(review_request(cr, uid="u"))
        finally:
            s.stop()
        assert kube.reads == [], label  # nothing read in an unwatched namespace
        answers[label] = r
    assert all(a == answers["absent"] for a in answers.values()), answers
    text = json.dumps(answers["absent"])
    assert answers["absent"]["allowed"] is True and "does not watch this namespace" in text
    for leak in ("cfg", "password", secret_value, "does not exist", "missing", "target_layer_ids"):
        assert leak not in text, leak
    # the same ConfigMap in a watched namespace is read (the operator's own scope)
    kube = Kube(variants["broken config"])
    s = Served(tmp_path, client_ca=None, lookup=OperatorConfigs(kube, FakeResolver(), watched=["tenant-b"]))
    try:
        r = s.client().review(review_request(cr))
    finally:
        s.stop()
    assert kube.reads and r["allowed"] is False
