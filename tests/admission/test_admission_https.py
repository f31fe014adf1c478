"""The validating and mutating webhooks over real HTTPS (in-process server, verified TLS).

Requests are AdmissionReview v1 bodies as kube-apiserver sends them (admission_helpers.review_request).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json

import jsonpatch
import pytest

from admission_helpers import (DELETE, DRAFTER_CM, KIMI, QWEN, TEST_POLICY, FakeResolver, ServerThread, configmap,
                               example_configs, example_cr, qwen_server, review_request, with_spec)
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.controller import admission, certs
from specdeploy.controller.admission import CONFIGS_UNKNOWN_NOTE, Configs, ConfigsUnavailable, decode_patch
from testkit import set_path

@pytest.fixture(scope="module")
def server():
    broken = copy.deepcopy(example_configs(QWEN)[1])
    broken["dflash_config"]["target_layer_ids"][4] = 64  # target has 64 layers
    s = qwen_server({"broken-drafter": broken, "not-json": "{nope"})
    yield s
    s.stop()


def qwen(**changes):
    return with_spec(example_cr(QWEN), **changes)


def kimi(**changes):  # its ConfigMaps are not known to the server: object-level checks only
    return with_spec(example_cr(KIMI), **changes)


def message(r: dict) -> str:
    return r["status"]["message"]


# ----------------------------------------------------------------- the Done criteria


def test_broken_pair_in_configmaps_is_refused_with_the_field_path(client):
    cr = qwen(**{"drafter.configFrom": {"configMapKeyRef": {"name": "broken-drafter"}}})
    r = client.review(review_request(cr))
    assert r["allowed"] is False
    assert r["status"]["code"] == 422 and r["status"]["reason"] == "Invalid"
    assert "drafter $.dflash_config.target_layer_ids[4]: layer id 64 is outside the target's 64 layers" in message(r)
    assert [c["field"] for c in r["status"]["details"]["causes"]] == ["drafter $.dflash_config.target_layer_ids[4]"]


def test_valid_pair_is_admitted_without_warnings(client):
    r = client.review(review_request(qwen()))
    assert r == {"uid": r["uid"], "allowed": True}


def test_configs_unknown_are_admitted_with_a_warning(client):
    r = client.review(review_request(kimi()))
    assert r["allowed"] is True
    assert any(CONFIGS_UNKNOWN_NOTE in w and "kimi-k26-target-config" in w for w in r["warnings"]), r["warnings"]
    hub = kimi(**{"target.configFrom": DELETE, "drafter.configFrom": DELETE})
    r = client.review(review_request(hub))
    assert r["allowed"] is True and any("has not been fetched from the hub yet" in w for w in r["warnings"])


def test_unusable_configmap_content_is_a_warning_not_a_rejection(client):
    for ref in ({"name": "not-json"}, {"name": DRAFTER_CM, "key": "other.json"}):
        r = client.review(review_request(qwen(**{"drafter.configFrom": {"configMapKeyRef": ref}})))
        assert r["allowed"] is True and any(CONFIGS_UNKNOWN_NOTE in w for w in r["warnings"])


def test_mutation_patch_fills_documented_defaults_only(client):
    cr = kimi()
    for k in ("nodes", "replicas", "speculation", "monitoring"):
        cr["spec"].pop(k, None)
    del cr["spec"]["gpu"]["count"]
    cr["status"] = {"conditions": []}
    r = client.review(review_request(cr), webhook="mutate")
    assert r["allowed"] is True and r["patchType"] == "JSONPatch"
    ops = decode_patch({"response": r})
    assert all(op["op"] == "add" and op["path"].startswith("/spec/") for op in ops)
    out = jsonpatch.apply_patch(cr, ops)
    spec = out["spec"]
    assert spec["nodes"] == 1 and spec["replicas"] == 1 and spec["gpu"]["count"] == 1
    assert spec["speculation"] == {"method": "dflash"} and spec["monitoring"] == {
        "minAcceptanceLength": 1.5, "regressionFraction": 0.25, "baselineSettleSeconds": 600, "baselineMinDrafts": 1000}
    assert spec["pod"]["shmSize"] == "32Gi"  # set by the user: kept
    assert spec["target"]["configFrom"]["configMapKeyRef"]["key"] == "config.json"
    assert spec["target"]["trustRemoteCode"] is True and spec["drafter"]["configFrom"]["configMapKeyRef"]["key"] == "config.json"
    assert out["status"] == cr["status"] and out["metadata"] == cr["metadata"]
    # the result means the same as before: the defaults are the ones the API types declare
    assert SpeculativeDeployment.model_validate(out).spec == SpeculativeDeployment.model_validate(cr).spec
    # applying the patch again changes nothing: a second mutation has no patch
    assert "patch" not in client.review(review_request(out), webhook="mutate")


def test_mutation_never_rejects_invalid_objects_and_skips_odd_shapes(client):
    cr = kimi(**{"gpu": "eight", "speculation": [], "pod.tolerations": [{"key": "a"}, "x"]})
    r = client.review(review_request(cr), webhook="mutate")
    assert r["allowed"] is True
    ops = decode_patch({"response": r})
    assert {"op": "add", "path": "/spec/pod/tolerations/0/operator", "value": "Equal"} in ops
    assert not any(op["path"].startswith(("/spec/gpu/", "/spec/speculation/")) for op in ops)
    jsonpatch.apply_patch(cr, ops)  # applies cleanly
    no_spec = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"}}
    assert "patch" not in client.review(review_request(no_spec), webhook="mutate")


# ----------------------------------------------------------------- object-level rejections


OBJECT_LEVEL = [
    ("extraArgs sets an owned flag", {"engine.extraArgs": ["--enforce-eager", "--tensor-parallel-size=4"]},
     "spec.engine.extraArgs[1]: --tensor-parallel-size is set by the operator"),
    ("abbreviated owned flag", {"engine.extraArgs": ["--speculative-conf", "{}"]}, "spec.engine.extraArgs[0]"),
    ("model that looks like a flag", {"target.model": "-x"}, "spec.target.model: '-x': it starts with '-'"),
    ("model escaping its volume", {"drafter.model": "models/../../etc"}, "spec.drafter.model: 'models/../../etc'"),
    ("gpu count zero", {"gpu.count": 0}, "spec.gpu.count: gpu.count must be >= 1"),
    ("gpu count not a multiple of nodes", {"gpu.count": 3, "nodes": 2}, "spec.gpu.count: gpu.count 3 (GPUs per replica) must split"),
    ("too many GPUs per node", {"gpu.count": 16}, "spec.gpu.count: 16 GPUs per node exceed"),
    ("nodes zero", {"nodes": 0}, "spec.nodes:"),
    ("ddtree fields with dflash", {"speculation": {"method": "dflash", "ddtree": {"budget": 8}}},
     "spec.speculation.ddtree: ddtree settings apply only to method 'ddtree'"),
    ("draftWindow below blockSize", {"speculation": {"blockSize": 16, "draftWindow": 8}},
     "spec.speculation.draftWindow: draftWindow 8 is below blockSize 16"),
    ("unsupported engine version", {"engine.version": "0.1.0"}, "spec.engine.version: SGLang 0.1.0 has no DFlash support"),
    ("unknown gpu", {"gpu.type": "tpu"}, "spec.gpu.type:"),
    ("unknown field", {"speculation": {"blocksize": 8}}, "spec.speculation.blocksize: unknown field"),
]


@pytest.mark.parametrize("changes,expected", [c[1:] for c in OBJECT_LEVEL], ids=[c[0] for c in OBJECT_LEVEL])
def test_object_level_rejections_carry_the_path(client, changes, expected):
    r = client.review(review_request(kimi(**changes)))
    assert r["allowed"] is False and r["status"]["code"] == 422, r
    assert expected in message(r), message(r)


def test_every_finding_is_reported(client):
    cr = kimi(**{"engine.extraArgs": ["--port", "1", "--tp", "2"], "target.model": "-x", "gpu.count": 3, "nodes": 2,
                 "speculation": {"blockSize": 16, "draftWindow": 8, "ddtree": {}}})
    msg = message(client.review(review_request(cr)))
    for path in ("spec.engine.extraArgs[0]", "spec.engine.extraArgs[2]", "spec.target.model", "spec.gpu.count",
                 "spec.speculation.draftWindow", "spec.speculation.ddtree"):
        assert f"- {path}: " in msg, (path, msg)
    assert msg.startswith("SpeculativeDeployment default/kimi-k26 is invalid (6 errors):")


def test_object_level_errors_are_found_even_when_configs_are_known(client):
    r = client.review(review_request(qwen(**{"engine.extraArgs": ["--speculative-config", "{}"]})))
    assert r["allowed"] is False and "spec.engine.extraArgs[0]" in message(r)


def test_warnings_are_short_printable_strings(client):
    cr = kimi(**{"engine.version": "0.5.19"})  # an unverified SGLang release: a warning, not an error
    r = client.review(review_request(cr))
    assert r["allowed"] is True
    assert len(r["warnings"]) >= 2
    for w in r["warnings"]:
        assert isinstance(w, str) and 0 < len(w) <= 256 and w.isprintable()
    assert any(w.startswith("spec.engine.version: ") for w in r["warnings"])


# ----------------------------------------------------------------- operations, dryRun


def test_dry_run_gives_the_same_answer(client):
    for cr in (qwen(), kimi(), kimi(**{"gpu.count": 0}),
               qwen(**{"drafter.configFrom": {"configMapKeyRef": {"name": "broken-drafter"}}})):
        for webhook in ("validate", "mutate"):
            wet = client.review(review_request(cr, uid="u"), webhook)
            dry = client.review(review_request(cr, uid="u", dry_run=True), webhook)
            assert wet == dry


def test_dry_run_makes_no_api_writes():
    calls = []

    class RecordingKube:
        async def get(self, kind, ns, name):
            calls.append(("GET", kind, ns, name))
            t, d = example_configs(KIMI)
            return configmap(name, t if "target" in name else d, ns)

        def __getattr__(self, verb):  # any other verb is a write
            raise AssertionError(f"admission called {verb}")

    s = ServerThread(resolver=FakeResolver(), kube=RecordingKube()).start()
    try:
        c = s.client()
        r = c.review(review_request(kimi(), dry_run=True))
        assert r["allowed"] is True and not any(CONFIGS_UNKNOWN_NOTE in w for w in r.get("warnings", []))
        assert [x[0] for x in calls] == ["GET", "GET"]
    finally:
        s.stop()


def test_update_checks_the_new_object(client):
    old = qwen()
    new = qwen(**{"gpu.count": 3})
    r = client.review(review_request(new, operation="UPDATE", old=old))
    assert r["allowed"] is False and "spec.gpu.count" in message(r)
    r = client.review(review_request(qwen(replicas=3), operation="UPDATE", old=old))
    assert r["allowed"] is True


def test_update_that_leaves_an_invalid_spec_unchanged_is_admitted_with_warnings(client):
    # e.g. an object stored before the webhook existed: labels and finalizers must stay editable
    bad = kimi(**{"engine.extraArgs": ["--tp", "2"]})
    relabeled = copy.deepcopy(bad)
    relabeled["metadata"]["labels"] = {"team": "a"}
    r = client.review(review_request(relabeled, operation="UPDATE", old=bad))
    assert r["allowed"] is True and any("spec.engine.extraArgs[0]" in w for w in r["warnings"])
    deleting = copy.deepcopy(bad)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert client.review(review_request(deleting, operation="UPDATE", old=bad))["allowed"] is True


def test_delete_and_subresources_pass(client):
    bad = kimi(**{"gpu.count": 0})
    for webhook in ("validate", "mutate"):
        r = client.review(review_request(None, operation="DELETE", old=bad), webhook)
        assert r["allowed"] is True and "patch" not in r
        scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "kimi-k26"}, "spec": {"replicas": 2}}
        r = client.review(review_request(scale, operation="UPDATE", old=scale, sub_resource="scale"), webhook)
        assert r["allowed"] is True and "patch" not in r
        r = client.review(review_request(bad, operation="UPDATE", old=bad, sub_resource="status"), webhook)
        assert r["allowed"] is True


def test_generate_name_objects_are_reviewed(client):
    cr = kimi()
    del cr["metadata"]["name"]
    cr["metadata"]["generateName"] = "kimi-"
    assert client.review(review_request(cr))["allowed"] is True
    r = client.review(review_request(with_spec(cr, **{"gpu.count": 0})))
    assert r["allowed"] is False and "kimi-(generated)" in message(r)


# ----------------------------------------------------------------- malformed requests


def _valid_review() -> dict:
    return review_request(kimi(), uid="uid-1")


def _set(path: str, value):
    body = _valid_review()
    set_path(body, path.split("."), value)
    return json.dumps(body).encode()


MALFORMED = [
    ("not JSON", b"{not json", "not JSON"),
    ("empty body", b"", "not JSON"),
    ("not UTF-8", b"\xff\xfe\x00", "not UTF-8"),
    ("JSON array", b"[1, 2]", "JSON list, not an object"),
    ("JSON string", b'"AdmissionReview"', "JSON str, not an object"),
    ("deep nesting", b"[" * 100000 + b"]" * 100000, "nests too deeply"),
    ("missing request", _set("request", DELETE), "request is missing"),
    ("request not an object", _set("request", [1]), "request is missing or not an object"),
    ("wrong apiVersion", _set("apiVersion", "admission.k8s.io/v1beta1"), "expected 'admission.k8s.io/v1'"),
    ("wrong kind", _set("kind", "TokenReview"), "expected 'AdmissionReview'"),
    ("missing uid", _set("request.uid", DELETE), "request.uid"),
    ("uid not a string", _set("request.uid", 7), "request.uid"),
    ("object not a dict", _set("request.object", "spec: {}"), "request.object is a JSON str"),
    ("object missing", _set("request.object", DELETE), "request.object is missing"),
    ("oldObject not a dict", _set("request.oldObject", [1]), None),  # CREATE ignores oldObject
    ("bad operation", _set("request.operation", "PATCH"), "request.operation"),
    ("other resource", _set("request.kind", {"group": "", "version": "v1", "kind": "Pod"}), "reviews specdeploy.io/v1alpha1"),
    ("dryRun not boolean", _set("request.dryRun", "yes"), "request.dryRun"),
]


@pytest.mark.parametrize("body,expected", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("webhook", ["validate", "mutate"])
def test_malformed_requests_get_a_clear_rejection(client, webhook, body, expected):
    status, doc = client.post(f"/{webhook}", body)
    assert status == 200
    r = doc["response"]
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    if expected is None:
        assert r["allowed"] is True
        return
    assert r["allowed"] is False and r["status"]["code"] == 400, r
    assert r["status"]["message"].startswith("malformed AdmissionReview: ") and expected in r["status"]["message"], r
    if b"uid-1" in body and expected not in ("request.uid",):
        assert r["uid"] == "uid-1"


def test_object_that_is_not_a_speculativedeployment_is_refused_with_paths(client):
    body = review_request({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "spec": 3})
    r = client.review(body)
    assert r["allowed"] is False and r["status"]["code"] == 422
    assert "- apiVersion: " in message(r) and "- kind: " in message(r) and "- spec: " in message(r)


def test_oversized_body_and_unknown_paths_are_not_server_errors(client, server):
    # a review over the limit: refused with its uid (read from the start of the body) and code 413
    big = review_request(qwen(**{"pod.nodeSelector": {"pad": "x" * (5 << 20)}}), uid="uid-big")
    status, doc = client.post("/validate", big)
    assert status == 200 and doc["response"]["uid"] == "uid-big", doc
    assert doc["response"]["allowed"] is False and doc["response"]["status"]["code"] == 413
    assert "exceeds" in doc["response"]["status"]["message"]
    client.close()
    # no uid to answer with: plain HTTP 413
    status, text = client.post("/validate", b" " * (5 << 20))
    assert status == 413 and "exceeds" in text
    client.close()
    status, _ = client.post("/convert", b"{}")
    assert status == 404


# ----------------------------------------------------------------- the pure function and its lookup


def test_review_pure_function_with_sync_lookups():
    t, d = example_configs(KIMI)
    body = review_request(kimi())
    seen = []

    def lookup(ns, spec):
        seen.append((ns, spec.target.model))
        return t, d

    r = admission.review(body, configs_lookup=lookup, policy=TEST_POLICY)["response"]
    assert r["allowed"] is True and seen == [("default", "moonshotai/Kimi-K2.6")]

    def unavailable(ns, spec):
        raise ConfigsUnavailable("ConfigMap x is being created")

    r = admission.review(body, configs_lookup=unavailable, policy=TEST_POLICY)["response"]
    assert r["allowed"] and any("ConfigMap x is being created" in w for w in r["warnings"])

    def broken(ns, spec):
        raise RuntimeError("boom")

    r = admission.review(body, configs_lookup=broken, policy=TEST_POLICY)["response"]
    assert r["allowed"] and any("could not be read (RuntimeError)" in w for w in r["warnings"])

    for odd in (lambda ns, spec: 42, lambda ns, spec: (t,)):  # a lookup bug is "not known", never a 500
        r = admission.review(body, configs_lookup=odd, policy=TEST_POLICY)["response"]
        assert r["allowed"] and any(CONFIGS_UNKNOWN_NOTE in w for w in r["warnings"])


def test_a_cached_rejection_is_rechecked_with_fresh_configs():
    """The watch cache may lag a ConfigMap update: a rejection is confirmed with a fresh read first."""
    t, d = example_configs(QWEN)
    stale = copy.deepcopy(d)
    stale["dflash_config"]["target_layer_ids"] = [99]
    calls = []

    async def lookup(ns, spec, fresh=False):
        calls.append(fresh)
        return Configs(t, d if fresh else stale, cached=not fresh)

    r = asyncio.run(admission.areview(review_request(qwen()), configs_lookup=lookup))["response"]
    assert r["allowed"] is True and calls == [False, True]


def test_cert_dir_mode_serves_the_files_and_reloads_them(tmp_path):
    from admission_helpers import Client
    from specdeploy.controller.webhooks import OperatorConfigs, WebhookRuntime, WebhookSettings

    def write(m):
        (tmp_path / "tls.crt").write_bytes(m.cert_pem)
        (tmp_path / "tls.key").write_bytes(m.key_pem)

    first, second = certs.new_material(["localhost"], ["127.0.0.1"]), certs.new_material(["localhost"], ["127.0.0.1"])
    write(first)

    async def main():
        rt = WebhookRuntime(WebhookSettings(port=0, addr="127.0.0.1", cert_dir=str(tmp_path), cert_check_seconds=0.2),
                            kube=None, lookup=OperatorConfigs(None, FakeResolver()))
        rt.start()
        await asyncio.wait_for(rt.ready.wait(), 10)
        port = rt.server.port
        got1 = await asyncio.to_thread(lambda: Client(port, first.ca_pem).peer_certificate())
        write(second)
        await asyncio.sleep(0.6)
        got2 = await asyncio.to_thread(lambda: Client(port, second.ca_pem).peer_certificate())
        assert rt.tls is None  # no Secret, no caBundle in this mode
        await rt.stop()
        return got1, got2

    got1, got2 = asyncio.run(main())
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    assert got1 == x509.load_pem_x509_certificate(first.cert_pem).public_bytes(Encoding.DER)
    assert got2 == x509.load_pem_x509_certificate(second.cert_pem).public_bytes(Encoding.DER)


def test_service_dns_names_and_stored_material_checks():
    names = certs.service_dns_names(["wh.ops"])
    assert names == ["wh", "wh.ops", "wh.ops.svc", "wh.ops.svc.cluster.local"]
    m = certs.new_material(names)
    assert certs.problem(m, names) is None
    assert "lacks DNS names" in certs.problem(m, names + ["other"])
    other = certs.new_material(names)
    assert "not issued by the CA" in certs.problem(certs.Material(other.ca_pem, m.cert_pem, m.key_pem), names)
    assert "key does not match" in certs.problem(certs.Material(m.ca_pem, m.cert_pem, other.key_pem), names)
    assert "unreadable" in certs.problem(certs.Material(b"x", b"y", b"z"), names)


# ----------------------------------------------------------------- TLS upkeep and the CLI, without a cluster


class MemoryKube:
    """Just enough of controller.kube.Kube for certs.SelfSigned: Secrets and the two configurations."""

    def __init__(self):
        self.objects: dict[str, dict] = {}
        self.writes: list[tuple[str, str]] = []

    def on_write(self, verb, kind):
        self.writes.append((verb, kind))

    async def get(self, kind, ns, name):
        return copy.deepcopy(self.objects.get(f"{kind}/{ns}/{name}"))

    async def create(self, obj):
        self.on_write("create", obj["kind"])
        self.objects[f"{obj['kind']}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = copy.deepcopy(obj)
        return obj

    async def patch(self, kind, ns, name, body, sub=None):
        self.on_write("patch", kind)
        self.objects[f"{kind}/{ns}/{name}"]["data"] = body["data"]

    async def call(self, method, path, body=None, content_type=None, query=None):
        from specdeploy.controller.kube import KubeError

        obj = self.objects.get(path)
        if obj is None:
            raise KubeError(404, "NotFound", path)
        if method == "GET":
            return copy.deepcopy(obj)
        assert method == "PATCH" and content_type == "application/json-patch+json"
        self.objects[path] = jsonpatch.apply_patch(obj, body)


def test_self_signed_secret_reuse_renewal_and_ca_bundle_upkeep():
    import datetime as dt

    kube = MemoryKube()
    names = certs.service_dns_names(["wh.ops"])
    vwc = f"{certs.ADMISSION_API}/validatingwebhookconfigurations/specdeploy"
    kube.objects[vwc] = {"webhooks": [{"name": "validate.specdeploy.io", "clientConfig": {"service": {"name": "wh"}}},
                                      {"name": "other.specdeploy.io"}]}

    def tls():
        return certs.SelfSigned(kube, namespace="ops", secret="wh-tls", dns_names=names, configuration="specdeploy")

    async def main():
        a = tls()
        m1 = await a.ensure()
        assert kube.writes == [("create", "Secret")]
        assert await a.sync_ca_bundle() == 1  # the mutating configuration does not exist: skipped
        hooks = kube.objects[vwc]["webhooks"]
        assert [h["clientConfig"]["caBundle"] for h in hooks] == [m1.ca_bundle] * 2
        assert hooks[0]["clientConfig"]["service"] == {"name": "wh"}
        assert await a.sync_ca_bundle() == 0  # nothing differs: nothing written
        m2 = await tls().ensure()  # a restart: the same material, no write
        assert m2 == m1 and len(kube.writes) == 2
        # a serving certificate close to expiry is reissued under the same CA: caBundle stays
        orig = certs.RENEW_BEFORE
        certs.RENEW_BEFORE = dt.timedelta(days=certs.SERVING_DAYS + 1)
        try:
            b = tls()
            b_ca_ok = certs._ca_usable(m1)
            m3 = await b.ensure()
        finally:
            certs.RENEW_BEFORE = orig
        assert b_ca_ok and m3.ca_pem == m1.ca_pem and m3.cert_pem != m1.cert_pem
        assert kube.writes[-1] == ("patch", "Secret")
        assert await b.sync_ca_bundle() == 0
        # a Secret for other names (e.g. the Service was renamed) gets a new serving certificate
        m4 = await certs.SelfSigned(kube, namespace="ops", secret="wh-tls", dns_names=certs.service_dns_names(["x.ops"]),
                                    configuration=None).ensure()
        assert m4.ca_pem == m1.ca_pem and certs.problem(m4, certs.service_dns_names(["x.ops"])) is None

    asyncio.run(main())


def test_ca_bundle_mismatch_is_what_the_served_certificate_fails_to_verify():
    """Issue 27 (readiness): a webhook whose caBundle cannot verify the served certificate is a mismatch;
    a bundle holding the right CA among others is not; an absent configuration has none."""
    kube = MemoryKube()
    vwc = f"{certs.ADMISSION_API}/validatingwebhookconfigurations/specdeploy"
    kube.objects[vwc] = {"webhooks": [{"name": "validate.specdeploy.io", "clientConfig": {}}]}
    tls = certs.SelfSigned(kube, namespace="ops", secret="wh-tls", dns_names=["wh"], configuration="specdeploy")
    other_ca = certs.generate_ca()[0]

    async def main():
        m = await tls.ensure()
        assert tls.mismatches(m.cert_pem) == []  # nothing observed yet
        tls.observe("ValidatingWebhookConfiguration", kube.objects[vwc])
        assert tls.differs("ValidatingWebhookConfiguration")
        assert tls.mismatches(m.cert_pem) == ["ValidatingWebhookConfiguration/specdeploy validate.specdeploy.io"]
        await tls.sync_ca_bundle()  # records what it saw and wrote
        assert tls.mismatches(m.cert_pem) == [] and not tls.differs("ValidatingWebhookConfiguration")
        for bundle, ok in ((base64.b64encode(other_ca).decode(), False), ("bm90IGEgcGVt", False), ("%%", False),
                           (base64.b64encode(other_ca + m.ca_pem).decode(), True)):
            hook = {"name": "validate.specdeploy.io", "clientConfig": {"caBundle": bundle}}
            tls.observe("ValidatingWebhookConfiguration", {"webhooks": [hook]})
            assert (tls.mismatches(m.cert_pem) == []) is ok, bundle
            assert certs.bundle_verifies(bundle, m.cert_pem) is ok
        tls.observe("ValidatingWebhookConfiguration", None)  # deleted: nothing calls this server through it
        assert tls.mismatches(m.cert_pem) == []

    asyncio.run(main())


def test_operator_run_flags_are_checked_and_passed_on(monkeypatch):
    from specdeploy import cli
    from specdeploy.controller import main as opmain
    from specdeploy.controller.webhooks import WebhookSettings

    assert cli.main(["operator", "run", "--webhook", "--webhook-service", "no-namespace"]) == 2
    assert cli.main(["operator", "run", "--webhook", "--webhook-port", "70000"]) == 2
    assert cli.main(["operator", "run", "--webhook", "--webhook-cert-dir", "/nonexistent/dir"]) == 2
    seen = {}
    monkeypatch.setattr(opmain, "run", lambda settings: seen.update(settings=settings) or 0)
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert cli.main(["operator", "run", "--webhook", "--webhook-service", "wh.ops",
                     "--webhook-configuration", "specdeploy"]) == 0
    ws = seen["settings"].webhook
    assert (ws.port, ws.services, ws.secret, ws.configuration, ws.namespace, ws.cert_dir) == \
        (9443, ["wh.ops"], "specdeploy-webhook-tls", "specdeploy", "ops", None)
    assert WebhookSettings().port == 0  # an operator built from the defaults serves no webhook


def test_replicas_sharing_the_secret_serve_a_rotated_certificate_without_restart():
    """Two webhook servers (two operator replicas) on one Secret: both serve its certificate; after the
    Secret is rotated (a new CA and serving certificate, e.g. by an administrator or a renewal on the
    other replica) both serve the new one within cert_check_seconds, and caBundle follows at once."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from admission_helpers import Client
    from specdeploy.controller.webhooks import OperatorConfigs, WebhookRuntime, WebhookSettings

    kube = MemoryKube()
    vwc = f"{certs.ADMISSION_API}/validatingwebhookconfigurations/specdeploy"
    kube.objects[vwc] = {"webhooks": [{"name": "validate.specdeploy.io", "clientConfig": {}}]}
    der = lambda m: x509.load_pem_x509_certificate(m.cert_pem).public_bytes(Encoding.DER)  # noqa: E731

    async def main():
        settings = dict(port=0, addr="127.0.0.1", namespace="ops", secret="wh-tls", services=[],
                        configuration="specdeploy", cert_check_seconds=0.2, resync_seconds=300)
        replicas = [WebhookRuntime(WebhookSettings(**settings), kube=kube, lookup=OperatorConfigs(None, FakeResolver()))
                    for _ in range(2)]
        for rt in replicas:
            rt.start()
            await asyncio.wait_for(rt.ready.wait(), 10)
        first = certs.SelfSigned._from_secret(await kube.get("Secret", "ops", "wh-tls"))
        assert kube.writes.count(("create", "Secret")) == 1  # one replica created it, the other one serves it
        served1 = [await asyncio.to_thread(lambda p=rt.server.port: Client(p, first.ca_pem).peer_certificate())
                   for rt in replicas]
        rotated = certs.new_material(certs.service_dns_names([]), ["127.0.0.1"])
        kube.objects["Secret/ops/wh-tls"]["data"] = {
            "tls.crt": certs._b64(rotated.cert_pem), "tls.key": certs._b64(rotated.key_pem),
            "ca.crt": certs._b64(rotated.ca_pem), "ca.key": certs._b64(rotated.ca_key_pem)}
        deadline = asyncio.get_running_loop().time() + 10
        while any(rt.loaded != rotated.cert_pem for rt in replicas):
            assert asyncio.get_running_loop().time() < deadline, "a replica did not load the rotated certificate"
            await asyncio.sleep(0.05)
        served2 = [await asyncio.to_thread(lambda p=rt.server.port: Client(p, rotated.ca_pem).peer_certificate())
                   for rt in replicas]
        while kube.objects[vwc]["webhooks"][0]["clientConfig"].get("caBundle") != rotated.ca_bundle:
            assert asyncio.get_running_loop().time() < deadline, "caBundle did not follow the rotated CA"
            await asyncio.sleep(0.05)
        ports = [rt.server.port for rt in replicas]
        for rt in replicas:
            await rt.stop()
        return first, served1, rotated, served2, ports

    first, served1, rotated, served2, ports = asyncio.run(main())
    assert served1 == [der(first)] * 2 and served2 == [der(rotated)] * 2 and first.ca_pem != rotated.ca_pem
