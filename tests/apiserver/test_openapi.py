"""OpenAPI (openapi.py) and protobuf (protobuf.py): the documents and encodings kubectl reads and sends.

Each test names the kube-apiserver behaviour it mirrors; the kubectl tests use /usr/bin/kubectl."""

from __future__ import annotations

import base64
import http.client
import json

import pytest
import yaml

from apiserver_helpers import server, api, kubeconfig, kubectl  # noqa: F401  (fixtures)
from apiserver_helpers import REAL_CRD, Http

from specdeploy_dev.apiserver import ApiError, openapi, protobuf
from specdeploy_dev.apiserver.protobuf import enc_bool, enc_bytes, enc_int, enc_str, fields

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GVK_EXT = "x-kubernetes-group-version-kind"


# ---- the documents (kube-openapi handler, apiextensions-apiserver's openapi builder) -------------------

def test_builtin_definitions_are_the_upstream_schemas_in_openapi_form():
    defs = openapi.builtin_definitions()
    cm = defs["io.k8s.api.core.v1.ConfigMap"]
    assert cm["properties"]["data"] == {"additionalProperties": {"type": "string"}, "type": "object",
                                        "description": cm["properties"]["data"]["description"]}
    assert "enum" not in cm["properties"]["apiVersion"]  # kubernetes-validate's pin is not upstream's
    ios = defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert ios["type"] == "string" and ios["format"] == "int-or-string"
    assert openapi.builtin_definition_name("apps", "v1", "Deployment") == "io.k8s.api.apps.v1.Deployment"


def test_v3_discovery_and_group_version_documents(api: Http):
    status, root = api.get("/openapi/v3")
    assert status == 200 and {"api/v1", "apis/apps/v1", "apis/apiextensions.k8s.io/v1"} <= set(root["paths"])
    url = root["paths"]["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=")
    status, body, headers = api.request("GET", url)
    assert status == 200 and headers["cache-control"] == "public, immutable"
    assert body["openapi"].startswith("3.") and "io.k8s.api.core.v1.ConfigMap" in body["components"]["schemas"]
    patch = body["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    # kubectl's QueryParamVerifierV3 looks for exactly this: the GVK and a fieldValidation query parameter.
    assert patch[GVK_EXT] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    refs = json.dumps(body)
    assert '"#/$defs/' not in refs and '"#/components/schemas/io.k8s.api.core.v1.PodSpec"' in refs


def test_crd_schema_is_published_and_the_hash_changes(api: Http):
    before = api.get("/openapi/v3")[1]["paths"]
    assert "apis/specdeploy.io/v1alpha1" not in before
    api.post(CRDS, yaml.safe_load(REAL_CRD.read_text()))
    after = api.get("/openapi/v3")[1]["paths"]
    doc = api.get(after["apis/specdeploy.io/v1alpha1"]["serverRelativeURL"])[1]
    sd = doc["components"]["schemas"]["io.specdeploy.v1alpha1.SpeculativeDeployment"]
    assert sd[GVK_EXT] == [{"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"}]
    assert sd["properties"]["spec"]["properties"]["speculation"]["description"] == "Speculative decoding settings."
    assert sd["properties"]["metadata"]["allOf"][0]["$ref"] == \
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    assert after["apis/apiextensions.k8s.io/v1"] == before["apis/apiextensions.k8s.io/v1"]


def _message(buf: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    for number, _, value in fields(buf):
        out.setdefault(number, []).append(value)
    return out


def test_v2_is_served_as_json_and_as_gnostic_protobuf(api: Http):
    status, doc = api.get("/openapi/v2", headers={"Accept": "application/json"})
    assert status == 200 and doc["swagger"] == "2.0" and "io.k8s.api.core.v1.ConfigMap" in doc["definitions"]
    assert doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"] == "#/definitions/io.k8s.api.core.v1.PodSpec"
    conn = http.client.HTTPConnection(api.host, api.port, timeout=10)
    try:
        conn.request("GET", "/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    # Answered with the spelling Go's mime parser accepts (client-go parses the response type).
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    top = _message(body)
    assert top[1] == [b"2.0"]  # Document.swagger
    names = {_message(entry)[1][0].decode() for entry in _message(top[9][0])[1]}  # Definitions.additional_properties
    assert {"io.k8s.api.core.v1.ConfigMap", "io.k8s.api.apps.v1.Deployment"} <= names
    assert api.get("/openapi/v2", headers={"Accept": "application/xml"})[0] == 406


# ---- protobuf request bodies (k8s.io/apimachinery/pkg/runtime/serializer/protobuf) ------------------

def _configmap_pb() -> bytes:
    meta = enc_str(1, "from-pb") + enc_str(2, "") + enc_int(7, 0) + enc_bytes(11, enc_str(1, "app") + enc_str(2, "x"))
    meta += enc_bytes(8, enc_int(1, -62135596800))  # Go's zero time, written by gogo-protobuf
    cm = enc_bytes(1, meta) + enc_bytes(2, enc_str(1, "config.json") + enc_str(2, '{"a":1}'))
    cm += enc_bytes(3, enc_str(1, "bin") + enc_bytes(2, b"\x00\x01")) + enc_bool(4, True)
    unknown = enc_bytes(1, enc_str(1, "v1") + enc_str(2, "ConfigMap")) + enc_bytes(2, cm)
    return protobuf.MAGIC + unknown


def test_protobuf_configmap_decodes_to_json():
    obj = protobuf.decode_object(_configmap_pb())
    assert obj == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-pb", "labels": {"app": "x"}},
                   "data": {"config.json": '{"a":1}'}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()},
                   "immutable": True}


def test_protobuf_refusals_read_as_the_real_servers():
    crd_like = protobuf.MAGIC + enc_bytes(1, enc_str(1, "specdeploy.io/v1alpha1") + enc_str(2, "SpeculativeDeployment"))
    with pytest.raises(ApiError) as e:
        protobuf.decode_object(crd_like)
    assert e.value.code == 415 and e.value.message.startswith("the body of the request was in an unknown format")
    with pytest.raises(ApiError) as e:
        protobuf.decode_object(_configmap_pb()[:-3])
    assert e.value.code == 400
    with pytest.raises(ApiError) as e:
        protobuf.decode_object(b"not protobuf")
    assert e.value.code == 400


def test_protobuf_body_over_http(api: Http):
    status, body = api.post("/api/v1/namespaces/default/configmaps", _configmap_pb(),
                            content_type="application/vnd.kubernetes.protobuf")
    assert status == 201 and body["data"]["config.json"] == '{"a":1}' and body["metadata"]["uid"]


# ---- kubectl (validation on, explain) ----------------------------------------------------------------

def test_kubectl_apply_validates_and_explain_prints_field_docs(kubectl, tmp_path):
    kubectl("apply", "-f", str(REAL_CRD))
    kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdeploy.io", "--timeout=10s")
    kubectl("get", "specdeploy")  # refreshes kubectl's discovery cache, as after any CRD install
    out = kubectl("explain", "specdeploy.spec").stdout
    assert "KIND:       SpeculativeDeployment" in out and "Desired state" in out
    assert "speculation\t<Object>" in out and "Speculative decoding settings." in out
    deep = kubectl("explain", "specdeploy.spec.speculation").stdout
    assert "blockSize\t<integer>" in deep and "enum: dflash, dflash2, dspark, eagle3" in deep
    # Client-side validation from the v2 document (a List is not covered by server-side validation).
    bad = {"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "specdeploy.io/v1alpha1",
                                                          "kind": "SpeculativeDeployment",
                                                          "metadata": {"name": "x"}, "spec": {"gpu": {}}}]}
    p = kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert p.returncode != 0 and 'missing required field "engine"' in p.stderr
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}, "dta": 1}
    p = kubectl("apply", "-f", "-", stdin=json.dumps(cm), check=False)
    assert p.returncode != 0 and 'unknown field "dta"' in p.stderr
    assert kubectl("apply", "--validate=warn", "-f", "-", stdin=json.dumps(cm)).returncode == 0
