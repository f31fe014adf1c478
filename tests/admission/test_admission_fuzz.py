"""Fuzzing the webhooks over HTTPS (hypothesis): never a 5xx, never allowed when invalid.

Oracle for the object-level path: a review is allowed exactly when pydantic parses the object
and ``check_options`` finds no error (the configs of these CRs are unknown to the server).
With known configs (ConfigMaps in the watch cache), allowed implies ``analyze`` finds no error.
"""

from __future__ import annotations

import copy
import json

import jsonpatch
import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from admission_helpers import KIMI, QWEN, TEST_POLICY, ServerThread, configmap, example_configs, example_cr, review_request
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.controller.admission import decode_patch
from specdeploy.core.checker import analyze, check_options
from specdeploy.core.findings import has_errors
from specdeploy.core.policy import check_policy

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@pytest.fixture(scope="module")
def server():
    s = ServerThread().start()
    t, d = example_configs(QWEN)
    s.resolver.add(configmap("qwen36-27b-target-config", t))
    s.resolver.add(configmap("qwen36-27b-drafter-config", d))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    c = server.client()
    yield c
    c.close()


def _post(client, webhook: str, body) -> dict:
    status, doc = client.post(f"/{webhook}", body)
    assert status == 200, (status, doc)
    assert isinstance(doc, dict) and doc.get("apiVersion") == "admission.k8s.io/v1" and doc.get("kind") == "AdmissionReview"
    r = doc["response"]
    assert isinstance(r["allowed"], bool)
    assert (r.get("status") or {}).get("code") != 500, r  # 500 in the review means a bug in admission
    for w in r.get("warnings") or []:
        assert isinstance(w, str) and len(w) <= 256
    return r


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(body=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
       webhook=st.sampled_from(["validate", "mutate"]))
def test_arbitrary_bodies_are_refused_cleanly(client, body, webhook):
    r = _post(client, webhook, body)
    assert r["allowed"] is False and r["status"]["code"] == 400


REQUEST_KEYS = ["uid", "kind", "resource", "operation", "namespace", "name", "object", "oldObject", "dryRun",
                "subResource", "userInfo", "options"]


@FUZZ
@given(replacements=st.dictionaries(st.sampled_from(REQUEST_KEYS), json_values, max_size=3),
       drop=st.lists(st.sampled_from(REQUEST_KEYS + ["apiVersion", "kind"]), max_size=2),
       webhook=st.sampled_from(["validate", "mutate"]))
def test_damaged_reviews_never_error(client, replacements, drop, webhook):
    body = review_request(example_cr(KIMI))
    body["request"].update(replacements)
    for k in drop:
        (body if k in ("apiVersion", "kind") else body["request"]).pop(k, None)
    r = _post(client, webhook, json.dumps(body).encode())
    if r["allowed"] and webhook == "validate":
        req = body["request"]
        obj = req.get("object")
        if req.get("operation") in ("CREATE", "UPDATE") and not req.get("subResource") and isinstance(obj, dict) \
                and not (isinstance(req.get("oldObject"), dict) and req["oldObject"].get("spec") == obj.get("spec")):
            assert _object_level_ok(obj), r


def _object_level_ok(obj: dict) -> bool:
    try:
        cr = SpeculativeDeployment.model_validate(obj)
    except pydantic.ValidationError:
        return False
    # the server's tenancy policy refuses too (a model path of the pod without a claim: PolicyModelPathNotAllowed)
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    return not has_errors(check_options(cr.spec.options())) and not check_policy(cr.spec, TEST_POLICY, namespace=ns)


# ---- CR specs: field values drawn from valid and invalid pools

ENGINES = st.sampled_from([("sglang", "0.5.23"), ("sglang", "0.5.10"), ("sglang", "0.1.0"), ("vllm", "0.33.0"),
                           ("vllm", "0.20.0"), ("vllm", "x.y"), ("trt", "1.0.0")])
ARGS = st.lists(st.sampled_from(["--enforce-eager", "--tp", "2", "--port=1", "--speculative-config", "{}",
                                 "--max-model-len", "8192", "--model", "x", "--mem-fraction-static", "0.8",
                                 "--speculative-alg", "--host", "a\nb", "-x", "--trust-remote-code"]), max_size=5)
MODELS = st.sampled_from(["Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash", "-x", "--model", "a/../b", "/models/q",
                          "./q", "a b", "", "x" * 600, "/", "q/.", "Qwen/Qwen3.6-27B\n"])
GPUS = st.sampled_from(["h100", "h200", "b200", "b300", "rtx-pro-6000", "tpu", "H100"])
SMALL = st.integers(-2, 20) | st.sampled_from([True, "2", 1.5, None, 64, 65])


def _rarely(draw, n: int = 4) -> bool:
    return draw(st.integers(0, n - 1)) == 0


@st.composite
def specs(draw):
    cr = example_cr(draw(st.sampled_from([QWEN, KIMI])))
    spec = cr["spec"]
    if _rarely(draw):
        spec["engine"]["name"], spec["engine"]["version"] = draw(ENGINES)
    if _rarely(draw):
        spec["engine"]["extraArgs"] = draw(ARGS)
    for role in ("target", "drafter"):
        if _rarely(draw, 8):
            spec[role]["model"] = draw(MODELS)
    if _rarely(draw, 6):
        spec["gpu"]["type"] = draw(GPUS)
    for path in (("gpu", "count"), ("nodes",), ("replicas",)):
        if _rarely(draw, 6):
            d = spec
            for k in path[:-1]:
                d = d[k]
            d[path[-1]] = draw(SMALL)
    if _rarely(draw, 2):
        sp: dict = {}
        for key, strat in (("method", st.sampled_from(["dflash", "dflash", "ddtree", "eagle", 3])),
                           ("blockSize", st.sampled_from([8, 16, 16, 32]) | SMALL),
                           ("draftWindow", st.sampled_from(["off", 4096, 2048, 16, 8]) | SMALL | st.just("on")),
                           ("draftAttentionBackend", st.sampled_from(["fa3", "fa4", "triton", "trtllm_mha", "cuda"])),
                           ("ddtree", st.sampled_from([{}, {"budget": 8}, {"topk": 0}, {"budget": 2000}, "x"]))):
            if _rarely(draw, 3):
                sp[key] = draw(strat)
        spec["speculation"] = sp
    if _rarely(draw, 12):
        spec[draw(st.sampled_from(["gpus", "speculation_", "extra"]))] = draw(json_values)
    if _rarely(draw, 8):
        spec["monitoring"] = {"minAcceptanceLength": draw(st.sampled_from([0.5, 1.0, 2, 64.5, "x"]))}
    if _rarely(draw, 20):
        cr["spec"] = draw(json_values)
    return cr


@FUZZ
@given(cr=specs(), dry_run=st.booleans())
def test_fuzzed_specs_are_allowed_exactly_when_valid(client, cr, dry_run):
    r = _post(client, "validate", json.dumps(review_request(cr, dry_run=dry_run)).encode())
    ok = _object_level_ok(cr)
    uses_known_configs = isinstance(cr.get("spec"), dict) and cr["metadata"]["name"] == "qwen36-27b"
    event(f"{'valid' if ok else 'invalid'} object, {'allowed' if r['allowed'] else 'refused'}")
    if not ok:
        assert r["allowed"] is False and r["status"]["code"] == 422, r
        assert r["status"]["message"].count("\n- ") >= 1
    elif not uses_known_configs:
        assert r["allowed"] is True, r
    else:
        parsed = SpeculativeDeployment.model_validate(cr)
        t, d = example_configs(QWEN)
        full_ok = not has_errors(analyze(d, t, parsed.spec.options()).findings)
        event(f"valid object with known configs, pair {'ok' if full_ok else 'refused'}")
        assert r["allowed"] is full_ok, r


@FUZZ
@given(cr=specs())
def test_fuzzed_mutations_apply_and_change_no_meaning(client, cr):
    r = _post(client, "mutate", json.dumps(review_request(cr)).encode())
    assert r["allowed"] is True
    out = jsonpatch.apply_patch(copy.deepcopy(cr), decode_patch({"response": r}))
    assert {k: v for k, v in out.items() if k != "spec"} == {k: v for k, v in cr.items() if k != "spec"}
    try:
        before = SpeculativeDeployment.model_validate(cr)
    except pydantic.ValidationError:
        return
    assert SpeculativeDeployment.model_validate(out).spec == before.spec
