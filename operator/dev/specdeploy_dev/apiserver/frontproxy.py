"""The stand-in's front-proxy client certificate: what kube-apiserver presents to webhooks when configured to.

kube-apiserver presents a client certificate to a webhook only when its admission configuration names a
kubeconfig user for the webhook's Service (``--admission-control-config-file``, WebhookAdmissionConfiguration
``kubeConfigFile``: docs/concepts/security.md, "Webhook callers"). The stand-in plays a cluster configured so,
with the kubeadm front-proxy certificate (CN ``front-proxy-client``): it presents it on every webhook call, and
publishes its CA in ``kube-system/extension-apiserver-authentication`` (``requestheader-client-ca-file``,
``requestheader-allowed-names``) as kube-apiserver does, which the chart's default (``webhook.clientAuth``:
``--webhook-client-ca-from-cluster``) reads. ``dev apiserver --kubeconfig PATH`` writes the certificate and key
beside the kubeconfig (``front-proxy-client.crt``/``.key``, as kubeadm keeps them in /etc/kubernetes/pki), for
tests that call the webhook as the API server does.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_NAME = "front-proxy-client"
CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
CERT_FILE, KEY_FILE = "front-proxy-client.crt", "front-proxy-client.key"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass(frozen=True)
class FrontProxy:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def generate(cls) -> "FrontProxy":
        now = dt.datetime.now(dt.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (x509.CertificateBuilder().subject_name(_name("front-proxy-ca")).issuer_name(_name("front-proxy-ca"))
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False, data_encipherment=False,
                                           key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(CLIENT_NAME)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        pem = serialization.Encoding.PEM
        return cls(ca.public_bytes(pem), cert.public_bytes(pem),
                   key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def configmap(self) -> dict:
        """kube-system/extension-apiserver-authentication as kube-apiserver publishes it (the front-proxy keys)."""
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP[1], "namespace": CONFIGMAP[0]},
                "data": {"requestheader-client-ca-file": self.ca_pem.decode(),
                         "requestheader-allowed-names": json.dumps([CLIENT_NAME]),
                         "requestheader-username-headers": json.dumps(["X-Remote-User"]),
                         "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
                         "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"])}}

    def present(self, ctx: ssl.SSLContext) -> None:
        """Make a client context present the front-proxy client certificate."""
        with tempfile.TemporaryDirectory(prefix="specdeploy-front-proxy-") as d:
            self.write(d)
            ctx.load_cert_chain(os.path.join(d, CERT_FILE), os.path.join(d, KEY_FILE))

    def write(self, directory: str | os.PathLike[str]) -> tuple[str, str]:
        """The certificate and key as files in ``directory`` (key mode 0600); their paths."""
        out = []
        for name, data, mode in ((CERT_FILE, self.cert_pem, 0o644), (KEY_FILE, self.key_pem, 0o600)):
            path = os.path.join(os.fspath(directory), name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            out.append(path)
        return out[0], out[1]


def files_beside(kubeconfig: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Where ``dev apiserver --kubeconfig PATH`` writes the certificate and key."""
    d = Path(kubeconfig).resolve().parent
    return d / CERT_FILE, d / KEY_FILE
