"""TLS for the admission webhooks: a self-signed CA and serving certificate, kept in a Secret.

Two modes (docs/concepts/admission.md):

- ``--webhook-cert-dir DIR``: tls.crt/tls.key from DIR (e.g. a cert-manager Secret mounted
  there); re-read when they change. The operator never touches caBundle then.
- self-signed: ``SelfSigned`` keeps a CA and a serving certificate for the Service's DNS names in
  a Secret of the operator's namespace (``tls.crt``, ``tls.key``, ``ca.crt``, ``ca.key``), so a
  restart serves the same certificate, and patches ``webhooks[*].clientConfig.caBundle`` of the
  Validating- and MutatingWebhookConfiguration of the given name when it differs.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import logging
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..core import names as N
from .kube import Kube, KubeError

log = logging.getLogger("specdeploy.webhook.tls")

CA_DAYS = 3650
SERVING_DAYS = 730
RENEW_BEFORE = dt.timedelta(days=30)
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
CONFIG_KINDS = (("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
                ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"))


@dataclass(frozen=True)
class Material:
    """PEM-encoded CA certificate, serving certificate and its key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_key_pem: bytes | None = None

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode("ascii")

    def fingerprint(self) -> str:
        return hashlib.sha256(self.cert_pem).hexdigest()


def service_dns_names(services: list[str]) -> list[str]:
    """``NAME.NAMESPACE`` -> NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local (each service)."""
    out: list[str] = []
    for s in services:
        name, _, ns = s.partition(".")
        names = [name] if not ns else [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]
        out += [n for n in names if n and n not in out]
    return out or ["localhost"]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def generate_ca(common_name: str = "specdeploy-webhook-ca") -> tuple[bytes, bytes]:
    """(CA certificate PEM, CA key PEM): EC P-256, valid CA_DAYS."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_serving(ca_pem: bytes, ca_key_pem: bytes, dns_names: list[str], ips: list[str] = ()) -> tuple[bytes, bytes]:
    """(serving certificate PEM, key PEM) for the DNS names (and IPs), signed by the CA."""
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else "specdeploy-webhook")]))
        .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_material(dns_names: list[str], ips: list[str] = ()) -> Material:
    ca_pem, ca_key = generate_ca()
    cert, key = issue_serving(ca_pem, ca_key, dns_names, ips)
    return Material(ca_pem, cert, key, ca_key)


def problem(m: Material, dns_names: list[str]) -> str | None:
    """Why stored material cannot be served as is (None: usable)."""
    try:
        ca = x509.load_pem_x509_certificate(m.ca_pem)
        cert = x509.load_pem_x509_certificate(m.cert_pem)
        key = serialization.load_pem_private_key(m.key_pem, password=None)
    except (ValueError, TypeError) as e:
        return f"unreadable ({e})"
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        return "key does not match the certificate"
    try:
        cert.verify_directly_issued_by(ca)
    except Exception as e:  # noqa: BLE001 - InvalidSignature is not a ValueError
        return f"certificate not issued by the CA ({type(e).__name__})"
    if cert.not_valid_after_utc - RENEW_BEFORE < _now() or ca.not_valid_after_utc - RENEW_BEFORE < _now():
        return "expires within 30 days"
    try:
        sans = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        sans = set()
    missing = [n for n in dns_names if n not in sans]
    if missing:
        return f"lacks DNS names {', '.join(missing)}"
    return None


def server_context(m: Material) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_into(ctx, m.cert_pem, m.key_pem)
    return ctx


def require_client_certs(ctx: ssl.SSLContext, ca_file: str | None = None, *, ca_pem: str | None = None,
                         optional: bool = False) -> None:
    """Verify callers' client certificates against the CAs in ``ca_file`` or ``ca_pem`` (the API server's webhook
    client certificate: docs/concepts/security.md, "Webhook callers"). Only callers with such a certificate
    complete the handshake; with ``optional``, callers without one complete it too (a certificate they present
    must verify) and the server answers them from their object alone. Raises OSError or ssl.SSLError when no
    usable CA is given: the server must not start open instead."""
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    elif ca_pem:
        ctx.load_verify_locations(cadata=ca_pem)
    if not ctx.get_ca_certs():
        raise ssl.SSLError(f"{ca_file or 'the client CA'} holds no CA certificate")
    ctx.verify_mode = ssl.CERT_OPTIONAL if optional else ssl.CERT_REQUIRED


def client_names(peercert: dict | None) -> list[str]:
    """The common name and DNS subject alternative names of a verified client certificate
    (``SSLObject.getpeercert()``)."""
    if not peercert:
        return []
    out = [v for rdn in peercert.get("subject") or () for k, v in rdn if k == "commonName"]
    return out + [v for k, v in peercert.get("subjectAltName") or () if k == "DNS"]


def load_into(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate into an existing context: new handshakes use it, open connections keep theirs."""
    with tempfile.TemporaryDirectory(prefix="specdeploy-tls-") as d:
        cf, kf = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        for path, data in ((cf, cert_pem), (kf, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(cf, kf)


def bundle_verifies(ca_bundle: str | None, cert_pem: bytes | None) -> bool:
    """Whether a webhook's ``caBundle`` (base64 of PEM CA certificates) verifies the served certificate: the
    certificate is directly issued by one of the bundle's CAs. An empty or unreadable bundle verifies nothing."""
    if not ca_bundle or not cert_pem:
        return False
    try:
        cas = x509.load_pem_x509_certificates(base64.b64decode(ca_bundle))
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError):
        return False
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except Exception:  # noqa: BLE001, S112 - InvalidSignature, or a name/key-type mismatch: try the next CA
            continue
    return False


def read_dir(cert_dir: str) -> tuple[bytes, bytes]:
    with open(os.path.join(cert_dir, "tls.crt"), "rb") as fh:
        cert = fh.read()
    with open(os.path.join(cert_dir, "tls.key"), "rb") as fh:
        key = fh.read()
    return cert, key


# ----------------------------------------------------------------- self-signed, kept in a Secret


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class SelfSigned:
    """The self-signed CA + serving certificate in a Secret, and the caBundle of the configurations."""

    def __init__(self, kube: Kube | None, *, namespace: str | None, secret: str, dns_names: list[str],
                 configuration: str | None, ips: list[str] = ("127.0.0.1",)):
        self.kube = kube
        self.namespace = namespace
        self.secret = secret
        self.dns_names = dns_names
        self.ips = list(ips)
        self.configuration = configuration
        self.material: Material | None = None
        self._missing_logged: set[str] = set()
        # the configurations as last seen (GET, PATCH answer or watch event; None: absent), by kind
        self.observed: dict[str, dict | None] = {}
        self._verified: dict[tuple[str, bytes], bool] = {}

    def observe(self, kind: str, body: dict | None) -> None:
        """Record a configuration as seen (None: it does not exist)."""
        self.observed[kind] = body

    def differs(self, kind: str) -> bool:
        """Whether a webhook of the observed configuration lacks the CA bundle the operator would write."""
        if self.material is None:
            return False
        want = self.material.ca_bundle
        return any(((wh.get("clientConfig") or {}).get("caBundle")) != want
                   for wh in (self.observed.get(kind) or {}).get("webhooks") or [])

    def mismatches(self, served_pem: bytes | None) -> list[str]:
        """The webhooks (``Kind/NAME webhook``) whose observed caBundle does not verify the served certificate.
        A configuration not (yet) seen or absent has none: nothing calls this server through it."""
        out = []
        for kind, _ in CONFIG_KINDS:
            for wh in (self.observed.get(kind) or {}).get("webhooks") or []:
                bundle = (wh.get("clientConfig") or {}).get("caBundle") or ""
                key = (bundle, served_pem or b"")
                if key not in self._verified:
                    if len(self._verified) > 16:
                        self._verified.clear()
                    self._verified[key] = bundle_verifies(bundle, served_pem)
                if not self._verified[key]:
                    out.append(f"{kind}/{self.configuration} {wh.get('name')}")
        return out

    async def ensure(self) -> Material:
        """The material to serve: the Secret's when usable, else new (stored when there is a namespace)."""
        if self.kube is None or not self.namespace:
            if self.material is None or problem(self.material, self.dns_names):
                self.material = new_material(self.dns_names, self.ips)
                log.warning("webhook TLS: self-signed certificate kept in memory only (no operator namespace: "
                            "set --operator-namespace or POD_NAMESPACE to keep it in Secret %s)", self.secret)
            return self.material
        body = await self.kube.get("Secret", self.namespace, self.secret)
        stored = self._from_secret(body)
        why = problem(stored, self.dns_names) if stored is not None else "absent"
        if why is None:
            self.material = stored
            return stored
        # renew: keep a usable CA (the caBundle then stays the same), else start over
        ca_ok = stored is not None and stored.ca_key_pem is not None and _ca_usable(stored)
        if ca_ok:
            cert, key = issue_serving(stored.ca_pem, stored.ca_key_pem, self.dns_names, self.ips)
            m = Material(stored.ca_pem, cert, key, stored.ca_key_pem)
        else:
            m = new_material(self.dns_names, self.ips)
        log.info("webhook TLS: %s Secret %s/%s (%s)", "renewing" if body else "creating", self.namespace, self.secret, why)
        data = {"tls.crt": _b64(m.cert_pem), "tls.key": _b64(m.key_pem), "ca.crt": _b64(m.ca_pem), "ca.key": _b64(m.ca_key_pem or b"")}
        if body is None:
            try:
                await self.kube.create({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                                        "metadata": {"name": self.secret, "namespace": self.namespace,
                                                     "labels": {N.LABEL_MANAGED_BY: N.MANAGED_BY,
                                                                N.LABEL_COMPONENT: N.COMPONENT_WEBHOOK}},
                                        "data": data})
            except KubeError as e:
                if e.status != 409:
                    raise
                # another replica created it first: serve theirs
                theirs = self._from_secret(await self.kube.get("Secret", self.namespace, self.secret))
                if theirs is not None and problem(theirs, self.dns_names) is None:
                    m = theirs
        else:
            rv = (body.get("metadata") or {}).get("resourceVersion")
            await self.kube.patch("Secret", self.namespace, self.secret,
                                  {"metadata": {"resourceVersion": rv} if rv else {}, "data": data})
        self.material = m
        return m

    @staticmethod
    def _from_secret(body: dict | None) -> Material | None:
        if not body:
            return None
        data = body.get("data") or {}
        try:
            get = lambda k: base64.b64decode(data[k]) if data.get(k) else None  # noqa: E731
            ca, cert, key, ca_key = get("ca.crt"), get("tls.crt"), get("tls.key"), get("ca.key")
        except (ValueError, TypeError):
            return None
        if not (ca and cert and key):
            return None
        return Material(ca, cert, key, ca_key or None)

    async def sync_ca_bundle(self) -> int:
        """Patch caBundle into every webhook of both configurations where it differs; returns patches made."""
        if self.kube is None or not self.configuration or self.material is None:
            return 0
        want = self.material.ca_bundle
        patched = 0
        for kind, plural in CONFIG_KINDS:
            path = f"{ADMISSION_API}/{plural}/{self.configuration}"
            try:
                body = await self.kube.call("GET", path)
            except KubeError as e:
                if e.status == 404:
                    self.observe(kind, None)
                    if kind not in self._missing_logged:
                        log.warning("webhook TLS: %s %s does not exist (yet); caBundle not set", kind, self.configuration)
                        self._missing_logged.add(kind)
                    continue
                raise
            self._missing_logged.discard(kind)
            self.observe(kind, body)
            ops: list[dict[str, Any]] = []
            for i, wh in enumerate((body or {}).get("webhooks") or []):
                cc = wh.get("clientConfig") or {}
                if cc.get("caBundle") == want:
                    continue
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": wh.get("name")})
                if "clientConfig" not in wh:
                    ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig", "value": {"caBundle": want}})
                else:
                    ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": want})
            if not ops:
                continue
            self.kube.on_write("patch", kind)
            try:
                await self.kube.call("PATCH", path, body=ops, content_type="application/json-patch+json")
            except KubeError as e:
                if e.status in (404, 409, 422):  # changed under us (a test op failed): the next round re-reads
                    log.info("webhook TLS: %s %s changed while patching caBundle (%s); retrying later", kind, self.configuration, e)
                    continue
                raise
            patched += 1
            self.observe(kind, {**body, "webhooks": [{**wh, "clientConfig": {**(wh.get("clientConfig") or {}), "caBundle": want}}
                                                     for wh in body.get("webhooks") or []]})
            log.info("webhook TLS: set caBundle of %s %s", kind, self.configuration)
        return patched


def _ca_usable(m: Material) -> bool:
    try:
        ca = x509.load_pem_x509_certificate(m.ca_pem)
        key = serialization.load_pem_private_key(m.ca_key_pem or b"", password=None)
    except (ValueError, TypeError):
        return False
    return ca.public_key().public_numbers() == key.public_key().public_numbers() and \
        ca.not_valid_after_utc - RENEW_BEFORE > _now()

