"""Issue 24, item 3, and issue 37, item 3: the webhook serves the API server only, and is no oracle.

Over real HTTPS (docs/concepts/security.md, "Webhook callers"): with client certificates required a caller
without one, or with one from another CA, does not get through the TLS handshake; with client names, a
certificate of the right CA but another name gets HTTP 403; the API server's certificate gets its review. With
them optional (the chart's default) and without verification at all, a caller that is not the verified API
server is answered from the object it sent alone: nothing is read (no ConfigMap, no hub cache), and the answer is
the same whether the referenced ConfigMap exists, lacks the key, holds other keys or a broken config, and whether
the hub cache holds another tenant's private repository. A review for a namespace the operator does not watch
reads nothing either."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import types

import pytest

from admission_helpers import (API_SERVER, QWEN, Client, FakeResolver, configmap, example_configs, example_cr,
                               issue_client, present, review_request, with_spec)
from specdeploy.controller import certs
from specdeploy.controller.webhooks import OperatorConfigs, WebhookServer, WebhookSettings


class Served:
    """A WebhookServer on 127.0.0.1 in a thread, with the given client CA file and names."""

    def __init__(self, tmp_path, *, client_ca: bytes | None, names=(), lookup=None, optional: bool = False):
        self.material = certs.new_material(["localhost"], ["127.0.0.1"])
        ctx = certs.server_context(self.material)
        if client_ca is not None:
            path = tmp_path / "client-ca.crt"
            path.write_bytes(client_ca)
            certs.require_client_certs(ctx, str(path), optional=optional)
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
            present(c.ctx, cert)
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


def test_operator_flags_carry_the_client_ca_into_the_settings(tmp_path):
    """``operator run``'s client CA flags reach the one settings object the operator runs with (no environment)."""
    from specdeploy import cli
    from specdeploy.cli.operator import operator_settings

    ca = tmp_path / "ca.crt"
    ca.write_text("pem")

    from specdeploy_dev.harness import free_port

    def settings(*argv):
        args = cli.build_parser().parse_args(["operator", "run", "--webhook", "--webhook-port", str(free_port()),
                                              "--metrics-port", "0", *argv])
        return operator_settings(args, {}).webhook

    ws = settings("--webhook-client-ca", str(ca), "--webhook-client-name", "a", "--webhook-client-name", "b",
                  "--webhook-client-optional")
    assert (ws.client_ca, ws.client_names, ws.client_optional) == (str(ca), ["a", "b"], True)
    cluster = settings("--webhook-client-ca-from-cluster")
    assert cluster.client_ca_from_cluster and cluster.verifies_clients and not cluster.client_optional
    assert not WebhookSettings(port=9443).verifies_clients


# ----------------------------------------------------------------- answers from the submitted object alone


class Kube:
    """Another tenant's namespace as the API would answer the operator (cluster-wide RBAC)."""

    def __init__(self, body):
        self.body, self.reads = body, []

    async def get(self, kind, ns, name):
        self.reads.append((kind, ns, name))
        return self.body


class HubResolver(FakeResolver):
    """A hub cache holding another tenant's private drafter (repository, commit, dimensions)."""

    PRIVATE = "tenant-b-org/secret-drafter"

    def __init__(self, doc):
        super().__init__()
        self.doc, self.lookups = doc, []

    def hub_cached(self, ns, src, known=False):
        self.lookups.append((ns, src.model))
        return types.SimpleNamespace(doc=self.doc, source=f"hub {self.PRIVATE}@0123abcd", digest="d1")


T_CFG, D_CFG = example_configs(QWEN)
BROKEN = json.loads(json.dumps(D_CFG))
BROKEN["dflash_config"]["target_layer_ids"][4] = 64
SECRET_VALUE = "tenant-b-private-value"
# one ConfigMap name referenced for both configs, in four states
VARIANTS = {
    "absent": None,
    "other keys": {**configmap("cfg", T_CFG, "tenant-b"), "data": {"password": SECRET_VALUE}},
    "broken config": configmap("cfg", BROKEN, "tenant-b"),
    "valid": configmap("cfg", T_CFG, "tenant-b"),
}
CR = with_spec(example_cr(QWEN, namespace="tenant-b"),
               **{"target.configFrom": {"configMapKeyRef": {"name": "cfg"}},
                  "drafter.configFrom": {"configMapKeyRef": {"name": "cfg"}}})
LEAKS = ("cfg", "password", SECRET_VALUE, "does not exist", "missing", "target_layer_ids", HubResolver.PRIVATE,
         "0123abcd", "hidden_size")


def answers_reveal_nothing(tmp_path, make_server, caller, watched=("tenant-b",)) -> None:
    """For each ConfigMap state: nothing read, the same answer, the object-level one, no quote of anything read."""
    answers = {}
    for label, body in VARIANTS.items():
        kube = Kube(body)
        s = make_server(OperatorConfigs(kube, FakeResolver(), watched=list(watched)))
        try:
            answers[label] = caller(s).review(review_request(CR, uid="u"))
        finally:
            s.stop()
        assert kube.reads == [], label  # nothing read on this caller's behalf
    assert all(a == answers["absent"] for a in answers.values()), answers
    text = json.dumps(answers["absent"])
    assert answers["absent"]["allowed"] is True and "config.json not known at admission" in text, text
    for leak in LEAKS:
        assert leak not in text, leak
    # the hub cache (another tenant's private drafter) is not consulted either
    hub_cr = with_spec(CR, **{"drafter.configFrom": None, "drafter.model": "tenant-b-org/secret-drafter"})
    resolver = HubResolver(BROKEN)
    s = make_server(OperatorConfigs(Kube(VARIANTS["valid"]), resolver, watched=list(watched)))
    try:
        hub = caller(s).review(review_request(hub_cr, uid="u"))
    finally:
        s.stop()
    assert resolver.lookups == [] and hub["allowed"] is True
    for leak in LEAKS:
        assert leak not in json.dumps(hub), leak


def test_without_client_verification_every_caller_gets_the_object_level_answer(tmp_path):
    """The documented switch (chart webhook.clientAuth.enabled=false): nobody is the verified API server."""
    answers_reveal_nothing(tmp_path, lambda lookup: Served(tmp_path, client_ca=None, lookup=lookup),
                           lambda s: s.client())


@pytest.mark.parametrize("caller, names", [("no certificate", [API_SERVER]), ("another name", [API_SERVER]),
                                           ("no certificate", [])])
def test_with_optional_verification_an_unknown_caller_gets_the_object_level_answer(tmp_path, cas, caller, names):
    """The chart's default: the handshake completes without a certificate, and the answer reads nothing."""
    (ca, ca_key), _ = cas
    cert = None if caller == "no certificate" else issue_client(ca, ca_key, "front-proxy-client")
    answers_reveal_nothing(
        tmp_path, lambda lookup: Served(tmp_path, client_ca=ca, names=names, lookup=lookup, optional=True),
        lambda s: s.client(cert))


def test_with_optional_verification_the_api_server_gets_the_full_check(tmp_path, cas):
    (ca, ca_key), (other, other_key) = cas
    api = issue_client(ca, ca_key, API_SERVER)
    kube = Kube(VARIANTS["broken config"])
    s = Served(tmp_path, client_ca=ca, names=[API_SERVER], optional=True,
               lookup=OperatorConfigs(kube, FakeResolver(), watched=["tenant-b"]))
    try:
        r = s.client(api).review(review_request(CR))
        refused_at_handshake(s.client(issue_client(other, other_key, API_SERVER)))  # a presented cert must verify
    finally:
        s.stop()
    assert kube.reads and r["allowed"] is False and "target_layer_ids" in json.dumps(r)


def test_unwatched_namespace_gets_an_answer_that_reveals_nothing(tmp_path, cas):
    """Even the verified API server's review of a namespace the operator does not watch reads nothing."""
    (ca, ca_key), _ = cas
    api = issue_client(ca, ca_key, API_SERVER)
    answers_reveal_nothing(
        tmp_path, lambda lookup: Served(tmp_path, client_ca=ca, names=[API_SERVER], lookup=lookup, optional=True),
        lambda s: s.client(api), watched=("tenant-a",))


# ----------------------------------------------------------------- the client CA the cluster publishes


class ClusterKube:
    def __init__(self, data):
        self.data, self.reads = data, []

    async def get(self, kind, ns, name):
        self.reads.append((kind, ns, name))
        return None if self.data is None else {"metadata": {"name": name, "namespace": ns}, "data": self.data}


def test_the_client_ca_is_read_from_the_clusters_front_proxy_ca(cas):
    """--webhook-client-ca-from-cluster (the chart's default): kube-system/extension-apiserver-authentication's
    requestheader-client-ca-file, and its requestheader-allowed-names unless names are given."""
    from specdeploy.controller.webhooks import WebhookRuntime

    (ca, _), _ = cas
    kube = ClusterKube({"requestheader-client-ca-file": ca.decode(),
                        "requestheader-allowed-names": json.dumps(["front-proxy-client"])})
    rt = WebhookRuntime(WebhookSettings(port=1, client_ca_from_cluster=True, client_optional=True), kube, None)
    names = asyncio.run(rt._load_client_ca())
    assert kube.reads == [("ConfigMap", "kube-system", "extension-apiserver-authentication")]
    assert names == ["front-proxy-client"] and rt.ctx.verify_mode == ssl.CERT_OPTIONAL
    assert rt.ctx.get_ca_certs()[0]["subject"] == ((("commonName", "api-server-client-ca"),),)
    given = WebhookRuntime(WebhookSettings(port=1, client_ca_from_cluster=True, client_names=["x"]), kube, None)
    assert asyncio.run(given._load_client_ca()) == ["x"] and given.ctx.verify_mode == ssl.CERT_REQUIRED
    for data in (None, {"client-ca-file": ca.decode()}):  # no ConfigMap, or no front-proxy CA in it: an error
        rt = WebhookRuntime(WebhookSettings(port=1, client_ca_from_cluster=True, client_optional=True),
                            ClusterKube(data), None)
        with pytest.raises(ValueError, match="front-proxy CA"):
            asyncio.run(rt._load_client_ca())
        assert rt.ctx.verify_mode == ssl.CERT_NONE  # nobody is verified until it loads: object-level answers
