"""CRD semantics (crdschema.py, cel.py): each test names the kube-apiserver behaviour it mirrors.

Pure tables first (the exact messages the real server writes), then the same over HTTP."""

from __future__ import annotations

import copy

import pytest
import yaml

from apiserver_helpers import server, api, widgets  # noqa: F401  (fixtures)
from apiserver_helpers import REAL_CRD, WIDGET_CRD, Http

from specdeploy_dev.apiserver import cel, crdschema

SCHEMA = yaml.safe_load(REAL_CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
EXAMPLE = yaml.safe_load((REAL_CRD.parents[1] / "examples" / "qwen3.6-27b-b300-vllm" /
                          "speculativedeployment.yaml").read_text())
SDS = "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments"


def cr(**spec_changes) -> dict:
    doc = copy.deepcopy(EXAMPLE)
    for key, value in spec_changes.items():
        doc["spec"][key] = value
    return doc


def messages(doc: dict, old: dict | None = None) -> list[str]:
    obj = copy.deepcopy(doc)
    crdschema.apply_defaults(obj, SCHEMA)
    return [c.text() for c in crdschema.validate(obj, SCHEMA, old, old is not None)]


# k8s.io/apiextensions-apiserver/pkg/apiserver/validation: kube-openapi's messages, field.Error bodies.
@pytest.mark.parametrize("spec, expected", [
    ({"replicas": -1}, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
    ({"replicas": "two"}, 'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"'),
    ({"engine": {"name": "tgi", "version": "1.0"}}, 'spec.engine.name: Unsupported value: "tgi": supported values: "sglang", "vllm"'),
    ({"engine": {"name": "vllm", "version": "latest"}},
     "spec.engine.version: Invalid value: \"latest\": spec.engine.version in body should match "
     "'^v?[0-9]+\\.[0-9]+(\\.[0-9]+)?([.+-]?[A-Za-z0-9.]+)?$'"),
    ({"engine": {"name": "vllm"}}, "spec.engine.version: Required value"),
    ({"speculation": {"blockSize": 1}},
     "spec.speculation.blockSize: Invalid value: 1: spec.speculation.blockSize in body should be greater than or equal to 2"),
    ({"speculation": {"blockSize": 99}},
     "spec.speculation.blockSize: Invalid value: 99: spec.speculation.blockSize in body should be less than or equal to 64"),
    ({"engine": {"name": "vllm", "version": "0.33.0", "extraArgs": ["x"] * 129}},
     "spec.engine.extraArgs: Too many: 129: must have at most 128 items"),
])
def test_structural_schema_errors_read_as_the_real_servers(spec, expected):
    assert messages(cr(**spec)) == [expected]


# x-kubernetes-validations (apiextensions-apiserver/pkg/apiserver/schema/cel): path from fieldPath,
# the value shown is the schema type where the rule sits, the message is the rule's.
@pytest.mark.parametrize("spec, expected", [
    ({"speculation": {"blockSize": 16, "draftWindow": 8}},
     'spec.speculation.draftWindow: Invalid value: "object": draftWindow must be >= blockSize'),
    ({"speculation": {"draftWindow": 0}}, "spec.speculation.draftWindow: Invalid value: \"\": draftWindow must be a positive integer or 'off'"),
    ({"speculation": {"method": "dflash", "ddtree": {"budget": 4}}},
     'spec.speculation.ddtree: Invalid value: "object": ddtree settings apply only to method ddtree'),
    ({"gpu": {"type": "b300", "count": 3}, "nodes": 2},
     'spec.gpu.count: Invalid value: "object": gpu.count (GPUs per replica) must be a multiple of nodes'),
    ({"gpu": {"type": "b300", "count": 18}, "nodes": 2},
     'spec.gpu.count: Invalid value: "object": at most 8 GPUs per node: raise nodes or lower gpu.count'),
    ({"target": {"model": "Qwen/../etc"}},
     "spec.target.model: Invalid value: \"string\": model may not contain '.' or '..' path segments"),
])
def test_cel_rules(spec, expected):
    assert messages(cr(**spec)) == [expected]


def test_cel_root_rule_reports_nil_path():
    doc = cr()
    doc["metadata"] = {"name": "x" * 46}
    assert messages(doc) == ['<nil>: Invalid value: "object": metadata.name must be a DNS-1035 label of at most 45 '
                             "characters (child Services and pods are named after it)"]


def test_valid_example_and_accepted_int_or_string():
    assert messages(cr()) == []
    assert messages(cr(speculation={"draftWindow": "off", "blockSize": 8})) == []
    assert messages(cr(speculation={"draftWindow": 4096, "blockSize": 8})) == []


def test_defaults_are_applied_deeply():
    """Structural defaulting: absent properties of present objects, then theirs."""
    obj = cr(target={"model": "a/b", "configFrom": {"configMapKeyRef": {"name": "t"}}})
    crdschema.apply_defaults(obj, SCHEMA)
    assert obj["spec"]["replicas"] == 1 and obj["spec"]["nodes"] == 1
    assert obj["spec"]["target"]["configFrom"]["configMapKeyRef"]["key"] == "config.json"
    assert "speculation" not in obj["spec"]  # an absent object is not created by defaulting


def test_unknown_fields_are_found_and_pruned():
    """Pruning (apiextensions-apiserver/pkg/apiserver/schema/pruning); strict decoding names them."""
    obj = cr(foo=1)
    obj["spec"]["gpu"]["colour"] = "green"
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "R", "x": 1,
                                     "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    assert sorted(crdschema.unknown_fields(obj, SCHEMA)) == ["spec.foo", "spec.gpu.colour", "status.conditions[0].x"]
    crdschema.unknown_fields(obj, SCHEMA, prune=True)
    assert "foo" not in obj["spec"] and "colour" not in obj["spec"]["gpu"] and "x" not in obj["status"]["conditions"][0]
    err = crdschema.strict_error("SpeculativeDeployment", "v1alpha1", ["spec.foo"])
    assert err.code == 400 and err.message == ('SpeculativeDeployment in version "v1alpha1" cannot be handled as a '
                                               'SpeculativeDeployment: strict decoding error: unknown field "spec.foo"')


def test_transition_rules_see_old_self():
    """Rules using oldSelf run only on updates with a correlated old value."""
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self >= oldSelf", "message": "size may not shrink"}]},
        "mode": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "mode is immutable", "reason": "FieldValueForbidden"}]}}}}}
    new = {"spec": {"size": 1, "mode": "a"}}
    assert crdschema.validate(new, schema) == []  # create: transition rules skipped
    old = {"spec": {"size": 2, "mode": "b"}}
    got = [c.text() for c in crdschema.validate(new, schema, old, True)]
    assert got == ['spec.size: Invalid value: "integer": size may not shrink', "spec.mode: Forbidden: mode is immutable"]
    assert crdschema.validate({"spec": {"size": 3}}, schema, {"spec": {"mode": "b"}}, True) == []  # no old size


def test_cel_kubernetes_library_functions():
    assert cel.evaluate("[1, 2, 3].isSorted() && [3, 1].sum() == 4 && [4, 2].min() == 2", None) is True
    assert cel.evaluate("'AbC'.lowerAscii() == 'abc' && 'a,b'.split(',').size() == 2", None) is True
    assert cel.evaluate("[1, 2].indexOf(2) == 1 && 'x-y'.replace('-', '_') == 'x_y'", None) is True
    with pytest.raises(cel.RuleError):
        cel.evaluate("self.", 1)


def test_invalid_status_is_one_422_with_causes():
    err = crdschema.invalid("SpeculativeDeployment", "specdeploy.io", "x",
                            [crdschema.Cause("spec.a", "FieldValueRequired", "Required value"),
                             crdschema.Cause("spec.b", "FieldValueInvalid", "Invalid value: 1: no")])
    status = err.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == ('SpeculativeDeployment.specdeploy.io "x" is invalid: '
                                 "[spec.a: Required value, spec.b: Invalid value: 1: no]")
    assert status["details"]["causes"][0] == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.a"}


# ---- over HTTP ---------------------------------------------------------------------------------------

def test_create_is_validated_defaulted_and_pruned_over_http(api: Http):
    assert api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(REAL_CRD.read_text()))[0] == 201
    bad = cr(speculation={"blockSize": 1})
    bad["metadata"] = {"name": "bad"}
    status, body = api.post(SDS, bad)
    assert status == 422 and body["reason"] == "Invalid" and body["details"]["kind"] == "SpeculativeDeployment"
    assert body["details"]["causes"][0]["field"] == "spec.speculation.blockSize"
    extra = cr(unknownThing=1)
    extra["metadata"] = {"name": "pruned"}
    status, body, headers = api.request("POST", SDS, extra)  # no fieldValidation: the default is Warn
    assert status == 201 and "unknownThing" not in body["spec"] and body["spec"]["nodes"] == 1
    assert headers.get("warning") == '299 - "unknown field \\"spec.unknownThing\\""'
    status, body = api.post(SDS + "?fieldValidation=Strict", dict(extra, metadata={"name": "strict"}))
    assert status == 400 and 'unknown field "spec.unknownThing"' in body["message"]
    status, body = api.post(SDS + "?fieldValidation=Ignore", dict(extra, metadata={"name": "quiet"}))
    assert status == 201
    # An update is validated too (merge patch making it invalid).
    status, body = api.patch(f"{SDS}/pruned", {"spec": {"gpu": {"count": 3}, "nodes": 2}})
    assert status == 422 and "must be a multiple of nodes" in body["message"]


def test_status_subresource_writes_are_validated(api: Http):
    """Status writes go through the schema too (status.observedGeneration is an integer)."""
    api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(REAL_CRD.read_text()))
    doc = cr()
    doc["metadata"] = {"name": "st"}
    assert api.post(SDS, doc)[0] == 201
    status, body = api.patch(f"{SDS}/st/status", {"status": {"observedGeneration": "one"}})
    assert status == 422 and "status.observedGeneration" in body["message"]
    status, body = api.patch(f"{SDS}/st/status", {"status": {"observedGeneration": 1, "spec": "ignored"}})
    assert status == 200 and body["status"]["observedGeneration"] == 1


def test_builtin_strict_field_validation(api: Http):
    """Built-in kinds: unknown fields against the upstream schema (Strict refuses, Warn warns)."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}, "dta": {}}
    status, body = api.post("/api/v1/namespaces/default/configmaps?fieldValidation=Strict", cm)
    assert status == 400 and body["message"].endswith('strict decoding error: unknown field "dta"')
    status, _, headers = api.request("POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Warn", cm)
    assert status == 201 and 'unknown field \\"dta\\"' in headers.get("warning", "")


def test_widget_crd_without_schema_constraints_accepts_anything(widgets: Http):
    """x-kubernetes-preserve-unknown-fields at the root: nothing pruned, nothing refused."""
    status, body = widgets.post("/apis/test.specdeploy.io/v1/namespaces/default/widgets?fieldValidation=Strict",
                                {"apiVersion": "test.specdeploy.io/v1", "kind": "Widget", "metadata": {"name": "w"},
                                 "spec": {"anything": {"goes": 1}}})
    assert status == 201 and body["spec"]["anything"] == {"goes": 1}
    assert WIDGET_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"]


def test_validation_ratcheting_lets_unchanged_values_through():
    """CRDValidationRatcheting (beta, on by default since 1.30): an update that leaves an invalid
    value as it was stored (e.g. after the CRD was tightened) is not refused for it."""
    stored = crdschema.apply_defaults(cr(speculation={"blockSize": 1}), SCHEMA)
    update = copy.deepcopy(stored)
    update["spec"]["replicas"] = 3
    assert crdschema.validate(update, SCHEMA, stored, True) == []
    update["spec"]["speculation"]["blockSize"] = 0
    assert [c.field for c in crdschema.validate(update, SCHEMA, stored, True)] == ["spec.speculation.blockSize"]
    # Unknown-field checks of an update walk only what changed.
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert crdschema.unknown_fields({"a": "x", "b": 1}, schema, old={"a": "y", "b": 1}) == []
    assert crdschema.unknown_fields({"a": "x", "b": 2}, schema, old={"a": "x", "b": 1}) == ["b"]


@pytest.mark.parametrize("rule, paths", [
    ("self.metadata.name.size() <= 45 && self.metadata.name.matches('^[a-z]+$')", (("metadata", "name"),) * 2),
    ("has(self.a) != has(self.b.c)", (("a",), ("b", "c"))),
    ("'self.x' == self.y", (("y",),)),                       # inside a string literal: not a reference
    ("self.items.all(x, x.self > 0)", (("items",),)),        # a member named self: not the root
    ("self.a.b[0].c == 1", (("a", "b"),)),
    ("type(self) == string ? self == 'off' : int(self) >= 1", None),  # bare self: the whole value
    ("self.all(x, x > 0)", None), ("self[0] == 1", None), ("size(self) > 1", None), ("'open self.x", None),
])
def test_cel_rule_self_paths(rule, paths):
    assert cel.self_paths(rule) == paths


@pytest.mark.parametrize("rule", [
    "self.metadata.name.size() <= 5 && self.metadata.name.matches('^[a-z]+$')",
    "has(self.spec.a) != has(self.spec.b)", "self.spec.a.x == 1", "self.spec.list.all(x, x > 0)",
    "self.spec.missing == 1", "has(self.metadata.labels) ? self.metadata.labels.k == 'v' : true",
])
def test_cel_projected_self_gives_the_same_result(rule):
    """A rule sees only the fields it reads (issue 23: a root rule converted the whole object per write); every
    result and error is the same as with the whole value."""
    objs = [{"metadata": {"name": "abc", "uid": "1", "managedFields": [{"manager": "m"}]},
             "spec": {"a": {"x": 1, "y": [1, 2]}, "list": [1, 2]}},
            {"metadata": {"name": "Bad-name-too-long", "labels": {"k": "v"}}, "spec": {"b": 2, "list": [0], "a": 3}},
            {"metadata": {}, "spec": {"a": {"x": 2}, "missing": 1}}]
    for obj in objs:
        def outcome(value):
            try:
                return ("ok", cel._evaluate(rule, value, None, False))
            except cel.RuleError as e:
                return ("error", str(e))
        whole = outcome(obj)
        assert outcome(cel._project(obj, cel.self_paths(rule))) == whole
        if whole[0] == "ok":
            assert cel.evaluate(rule, obj) == whole[1]
        else:
            with pytest.raises(cel.RuleError, match="."):
                cel.evaluate(rule, obj)
