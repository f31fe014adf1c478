"""The webhook as served by a real `specdeploy operator run` process against the embedded API server.

The tests POST AdmissionReview v1 requests over HTTPS to the operator's port themselves, verifying
the served certificate against the CA that the operator wrote into the webhook configurations'
caBundle (for the Service's DNS name). The embedded API server calls the same webhooks on writes
(the webhook Service's Endpoints point at the operator's port, as the endpoints controller would).
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
import urllib.request

import jsonpatch
import pytest
from cryptography import x509

from admission_helpers import Client, example_configs, example_cr, review_request
from specdeploy.controller import certs
from specdeploy.controller.admission import decode_patch
from specdeploy_dev.harness import BIN, ROOT, Cluster, HarnessError, free_port, kubectl_available, wait_for
from specdeploy_dev.apiserver.frontproxy import files_beside
from specdeploy_dev.procs import stop_process

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="kubectl is needed for the embedded API server harness")

OP_NS = "specdeploy-system"
SERVICE = "specdeploy-webhook"
SECRET = "specdeploy-webhook-tls"
CONFIG = "specdeploy"
SNI = f"{SERVICE}.{OP_NS}.svc"
ADM = "/apis/admissionregistration.k8s.io/v1"


def _configuration(kind: str, webhook: str) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": CONFIG},
            "webhooks": [{"name": f"{webhook}.specdeploy.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                          "failurePolicy": "Fail", "timeoutSeconds": 5,
                          "clientConfig": {"service": {"name": SERVICE, "namespace": OP_NS, "path": f"/{webhook}", "port": 443}},
                          "rules": [{"apiGroups": ["specdeploy.io"], "apiVersions": ["v1alpha1"],
                                     "operations": ["CREATE", "UPDATE"], "resources": ["speculativedeployments"]}]}]}


class Env:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = cluster.workdir / "operator-webhook.log"
        self.metrics_port = 0
        self.health_port = 0

    # -- API access (plain HTTP to the embedded server)
    def api(self, method: str, path: str, body=None, content_type: str = "application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.cluster.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def ca_bundles(self) -> list[str | None]:
        out = []
        for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            _, body = self.api("GET", f"{ADM}/{plural}/{CONFIG}")
            out += [(w.get("clientConfig") or {}).get("caBundle") for w in body.get("webhooks") or []]
        return out

    def resource_versions(self) -> dict[str, str]:
        out = {}
        for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            out[plural] = self.api("GET", f"{ADM}/{plural}/{CONFIG}")[1]["metadata"]["resourceVersion"]
        out["secret"] = self.api("GET", f"/api/v1/namespaces/{OP_NS}/secrets/{SECRET}")[1]["metadata"]["resourceVersion"]
        return out

    # -- the operator process
    def start(self, resync: float = 1.0) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        log = open(self.log, "a")
        self.proc = subprocess.Popen(
            [str(BIN / "specdeploy"), "operator", "run", "--kubeconfig", self.cluster.kubeconfig, "--namespace", "default",
             "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
             "--webhook", "--webhook-port", str(self.port),
             "--webhook-service", f"{SERVICE}.{OP_NS}", "--webhook-secret", SECRET,
             "--webhook-configuration", CONFIG, "--operator-namespace", OP_NS,
             # the chart's default: the front-proxy CA the (stand-in) API server publishes, other callers served
             # from their object alone
             "--webhook-client-ca-from-cluster", "--webhook-client-optional"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**self.cluster.env(), "SPECDEPLOY_WEBHOOK_RESYNC_SECONDS": str(resync)})
        log.close()
        wait_for(lambda: all(self.ca_bundles()) and self._serving(), 60, "the webhook's caBundle and HTTPS port")

    def _serving(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise HarnessError(f"operator exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
        try:
            self.client().post("/validate", b"{}")
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 30)
        self.proc = None

    def ca_pem(self) -> bytes:
        bundles = self.ca_bundles()
        assert bundles and len(set(bundles)) == 1, bundles
        return base64.b64decode(bundles[0])

    def client(self) -> Client:
        """A client presenting the API server's client certificate (the stand-in's front-proxy one)."""
        c = Client(self.port, self.ca_pem(), server_hostname=SNI)
        c.ctx.load_cert_chain(*map(str, files_beside(self.cluster.kubeconfig)))
        return c

    def readyz(self) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def api_writes(self) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                   if line.startswith("specdeploy_api_writes_total"))


@pytest.fixture(scope="module")
def env():
    with Cluster() as cluster:
        cluster.apply_crds()
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OP_NS}}))
        e = Env(cluster)
        for path, obj in ((f"/api/v1/namespaces/{OP_NS}/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE},
                "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": "webhook"}]}}),
                (f"/api/v1/namespaces/{OP_NS}/endpoints", {
                    "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE},
                    "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "webhook", "port": e.port}]}]})):
            st, body = e.api("POST", path, obj)
            assert st == 201, body
        for kind, wh in (("ValidatingWebhookConfiguration", "validate"), ("MutatingWebhookConfiguration", "mutate")):
            plural = kind.lower() + "s"
            st, body = e.api("POST", f"{ADM}/{plural}", _configuration(kind, wh))
            assert st == 201, body
        t, d = example_configs()
        broken = copy.deepcopy(d)
        broken["dflash_config"]["target_layer_ids"][4] = 64  # the target has 64 layers: ids are 0..63
        for name, doc in (("good-target", t), ("good-drafter", d), ("broken-drafter", broken)):
            st, body = e.api("POST", "/api/v1/namespaces/default/configmaps",
                             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                              "data": {"config.json": json.dumps(doc)}})
            assert st == 201, body
        e.start()
        try:
            yield e
        except BaseException:
            raise
        finally:
            e.stop()


def _cr(name: str, drafter_cm: str) -> dict:
    cr = example_cr(name=name)
    cr["spec"]["target"]["configFrom"] = {"configMapKeyRef": {"name": "good-target"}}
    cr["spec"]["drafter"]["configFrom"] = {"configMapKeyRef": {"name": drafter_cm}}
    return cr


def test_self_signed_certificate_chains_to_the_patched_ca_bundle(env):
    ca = env.ca_pem()
    _, secret = env.api("GET", f"/api/v1/namespaces/{OP_NS}/secrets/{SECRET}")
    assert base64.b64decode(secret["data"]["ca.crt"]) == ca
    c = env.client()  # verifies the chain against caBundle and the name SERVICE.NS.svc
    assert c.review(review_request(_cr("ok", "good-drafter")))["allowed"] is True
    cert = x509.load_der_x509_certificate(c.peer_certificate())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert set(names) >= {SERVICE, f"{SERVICE}.{OP_NS}", SNI, f"{SNI}.cluster.local"}
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    with pytest.raises(Exception):  # a name the certificate does not carry fails verification
        Client(env.port, ca, server_hostname="other.example").post("/validate", b"{}")


def test_broken_pair_in_configmaps_is_refused_with_the_path_and_valid_pair_admitted(env):
    c = env.client()
    r = c.review(review_request(_cr("broken", "broken-drafter")))
    assert r["allowed"] is False and r["status"]["code"] == 422
    assert "drafter $.dflash_config.target_layer_ids[4]" in r["status"]["message"]
    assert "ConfigMap default/broken-drafter" in r["status"]["message"]
    ok = c.review(review_request(_cr("ok", "good-drafter")))
    assert ok["allowed"] is True and not ok.get("warnings")


def test_the_api_server_gets_the_full_check_and_another_caller_the_object_level_one(env):
    """Issue 37: the chart's default verification with the cluster's front-proxy CA, end to end. The stand-in
    API server presents its front-proxy certificate (as kube-apiserver configured with an AdmissionConfiguration
    kubeconfig does): a write of the broken pair is refused with the config finding. A caller without the
    certificate completes the handshake and gets the answer the object alone gives (nothing read)."""
    st, body = env.api("POST", "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments",
                       _cr("broken", "broken-drafter"))
    assert st == 422 and "target_layer_ids" in json.dumps(body), (st, body)
    anyone = Client(env.port, env.ca_pem(), server_hostname=SNI)
    r = anyone.review(review_request(_cr("broken", "broken-drafter")))
    assert r["allowed"] is True and "no verified API-server client certificate" in json.dumps(r), r
    assert "broken-drafter" not in json.dumps(r) and "target_layer_ids" not in json.dumps(r)


def test_dry_run_has_no_side_effects(env):
    c = env.client()
    before, writes = env.resource_versions(), env.api_writes()
    for dry in (True, False):
        r = c.review(review_request(_cr("broken", "broken-drafter"), dry_run=dry))
        assert r["allowed"] is False
        r = c.review(review_request(_cr("ok", "good-drafter"), dry_run=dry), webhook="mutate")
        assert r["allowed"] is True
    assert env.resource_versions() == before and env.api_writes() == writes
    _, cms = env.api("GET", "/api/v1/namespaces/default/configmaps")
    assert sorted(i["metadata"]["name"] for i in cms["items"]) == ["broken-drafter", "good-drafter", "good-target"]


def test_mutating_defaults_appear_in_the_stored_object(env):
    c = env.client()
    cr = _cr("defaults", "good-drafter")
    for k in ("pod",):
        cr["spec"].pop(k, None)
    r = c.review(review_request(cr), webhook="mutate")
    assert r["allowed"] is True and r["patchType"] == "JSONPatch"
    mutated = jsonpatch.apply_patch(cr, decode_patch({"response": r}))
    # what the API server does next: validating admission on the mutated object, then store it
    assert c.review(review_request(mutated))["allowed"] is True
    st, stored = env.api("POST", "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments", mutated)
    assert st == 201, stored
    _, got = env.api("GET", "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments/defaults")
    spec = got["spec"]
    assert spec["nodes"] == 1 and spec["replicas"] == 1 and spec["gpu"]["count"] == 1
    assert spec["speculation"]["method"] == "dflash" and spec["pod"]["shmSize"] == "16Gi"
    assert spec["monitoring"]["minAcceptanceLength"] == 1.5
    assert spec["target"]["configFrom"]["configMapKeyRef"]["key"] == "config.json"
    # an UPDATE of the stored object: nothing left to default
    r2 = c.review(review_request(got, operation="UPDATE", old=got), webhook="mutate")
    assert "patch" not in r2


def test_ca_bundle_is_kept_current_and_a_restart_reuses_the_secret(env):
    served = env.client().peer_certificate()
    # someone overwrites caBundle: the operator puts it back on its next round (resync 1 s here)
    good = env.ca_bundles()[0]
    _, vwc = env.api("GET", f"{ADM}/validatingwebhookconfigurations/{CONFIG}")
    vwc["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"stale").decode()
    assert env.api("PUT", f"{ADM}/validatingwebhookconfigurations/{CONFIG}", vwc)[0] == 200
    wait_for(lambda: env.ca_bundles() == [good, good], 20, "the operator to restore caBundle")
    before = env.resource_versions()
    time.sleep(2.5)  # two more rounds: nothing differs, so nothing is written
    assert env.resource_versions() == before

    env.stop()
    env.start()
    assert env.client().peer_certificate() == served
    assert env.ca_bundles() == [good, good]
    assert env.resource_versions() == before


def test_recreated_configurations_get_the_ca_at_once_and_readyz_says_not_ready_meanwhile(env):
    """Issue 27: with the periodic re-check at its default (300 s), deleting and recreating both webhook
    configurations with an empty or foreign caBundle is repaired within seconds (the operator watches them),
    and /readyz is 503 naming the webhooks while the configured caBundle cannot verify the served certificate.
    The first two caBundle patches of the validating configuration fail (an injected 500), so the mismatch
    lasts a moment: the retries (1 s, 2 s) repair it, not the 300 s round."""
    env.stop()
    env.start(resync=300)
    try:
        wait_for(lambda: env.readyz()[0] == 200, 30, "/readyz 200")
        good = env.ca_bundles()[0]
        other_ca = base64.b64encode(certs.generate_ca()[0]).decode()
        env.cluster.fault(verb="patch", resource="validatingwebhookconfigurations", status=500, count=2)
        t0 = time.monotonic()
        for kind, wh, bundle in (("ValidatingWebhookConfiguration", "validate", None),
                                 ("MutatingWebhookConfiguration", "mutate", other_ca)):
            plural = kind.lower() + "s"
            assert env.api("DELETE", f"{ADM}/{plural}/{CONFIG}")[0] == 200
            cfg = _configuration(kind, wh)
            if bundle:
                cfg["webhooks"][0]["clientConfig"]["caBundle"] = bundle
            st, body = env.api("POST", f"{ADM}/{plural}", cfg)
            assert st == 201, body
        st, body = wait_for(lambda: (lambda r: r if r[0] != 200 else None)(env.readyz()), 10,
                            "/readyz to report the mismatch", interval=0.05)
        print(f"readyz {time.monotonic() - t0:.2f}s after the recreate: {st} {body}")
        assert st == 503 and body["checks"]["webhookCaBundle"] is False, body
        assert any("ValidatingWebhookConfiguration/specdeploy" in m for m in body["caBundleMismatch"]), body

        # admission through the API server (which verifies the operator's certificate against caBundle)
        def admitted() -> bool:
            cr = _cr("after-recreate", "good-drafter")
            st, _ = env.api("POST", "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments?dryRun=All", cr)
            return st == 201
        wait_for(admitted, 30, "admission through the recreated configurations")
        t_admitted = time.monotonic() - t0
        wait_for(lambda: env.readyz()[0] == 200, 30, "/readyz 200 again")
        print(f"admission works again {t_admitted:.2f}s after the recreate; /readyz 200 at {time.monotonic() - t0:.2f}s")
        assert env.ca_bundles() == [good, good]
        assert "caBundleMismatch" not in env.readyz()[1]
    finally:
        env.stop()
        env.start()
