"""ownership.py (pure): the applied digest, coverage of fieldsV1, the takeover of pre-SSA managers."""

from __future__ import annotations

import json

import pytest

from specdeploy.controller import ownership as own

ENTRY = {"f:metadata": {"f:labels": {"f:app": {}}, "f:annotations": {"f:specdeploy.io/applied": {}}},
         "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {
             "f:nodeSelector": {},
             "f:containers": {'k:{"name":"engine"}': {".": {}, "f:name": {}, "f:image": {}, "f:args": {},
                                                    "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}},
                                                    "f:ports": {'k:{"containerPort":8000,"protocol":"TCP"}': {
                                                        ".": {}, "f:containerPort": {}, "f:protocol": {}}}}}}},
             "f:finalizers": {'v:"a"': {}}}}


def child(**spec) -> dict:
    base = {"replicas": 1, "template": {"spec": {"nodeSelector": {"gpu": "b300"}, "containers": [
        {"name": "engine", "image": "i", "args": ["--x"], "env": [{"name": "A", "value": "1"}],
         "ports": [{"containerPort": 8000, "protocol": "TCP"}]}]}}}
    base.update(spec)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n",
                                                                         "labels": {"app": "x"}}, "spec": base}


def live_of(body: dict, entry: dict | None = None, **meta) -> dict:
    live = {**body, "metadata": {**body["metadata"], **meta}}
    live["metadata"]["managedFields"] = [{"manager": "specdeploy", "operation": "Apply", "apiVersion": "apps/v1",
                                          "fieldsType": "FieldsV1", "fieldsV1": entry if entry is not None else ENTRY}]
    return live


def test_in_sync_needs_the_digest_and_the_whole_intent_owned():
    body, d = own.intent(child())
    assert body["metadata"]["annotations"][own.APPLIED_ANNOTATION] == d == own.digest(child())
    assert own.in_sync(live_of(body), body, d)
    # another digest: a new intent
    assert not own.in_sync(live_of(body), *own.intent(child(replicas=2)))
    # a field the entry lost (someone else changed the image)
    lost = {**ENTRY, "f:spec": {**ENTRY["f:spec"], "f:template": {"f:spec": {"f:nodeSelector": {}, "f:containers": {
        'k:{"name":"engine"}': {".": {}, "f:name": {}, "f:args": {}, "f:env": {}, "f:ports": {}}}}}}}
    assert not own.in_sync(live_of(body, lost), body, d)
    # no Apply entry: specdeploy's Update entry is the create's (the executor creates an uncached child) and
    # counts while the child carries the digest; another manager's does not
    live = live_of(body)
    live["metadata"]["managedFields"][0]["operation"] = "Update"
    assert own.own_entry(live) is live["metadata"]["managedFields"][0] and own.in_sync(live, body, d)
    live["metadata"]["managedFields"][0]["manager"] = "kubectl-create"
    assert own.own_entry(live) is None and not own.in_sync(live, body, d)
    undigested = live_of(child())
    undigested["metadata"]["managedFields"][0]["operation"] = "Update"
    assert own.own_entry(undigested) is None


@pytest.mark.parametrize("node,value,ok", [
    ({}, {"any": ["thing"]}, True),                                   # a leaf owns everything under it
    ({"f:a": {}}, {"a": 1}, True),
    ({"f:a": {}}, {"a": 1, "b": 2}, False),
    ({'k:{"name":"x"}': {".": {}, "f:name": {}}}, [{"name": "x"}], True),
    ({'k:{"name":"x"}': {".": {}, "f:name": {}}}, [{"name": "y"}], False),
    ({'v:"a"': {}}, ["a"], True),
    ({'v:"a"': {}}, ["a", "b"], False),
    (None, 1, False),
])
def test_covers(node, value, ok):
    assert own.covers(node, value) is ok


def test_takeover_moves_legacy_update_entries_into_the_apply_entry():
    live = {"metadata": {"resourceVersion": "7", "managedFields": [
        {"manager": "specdeploy", "operation": "Update", "apiVersion": "apps/v1", "time": "t1",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "OpenAPI-Generator", "operation": "Update", "apiVersion": "apps/v1", "time": "t2",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:paused": {}}}},
        {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1", "time": "t3",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}},
        {"manager": "specdeploy", "operation": "Update", "apiVersion": "apps/v1", "time": "t4", "subresource": "status",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]}}
    ops = own.takeover_patch(live)
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    entries = ops[1]["value"]
    assert entries[0]["manager"] == "specdeploy" and entries[0]["operation"] == "Apply"
    assert entries[0]["fieldsV1"] == {"f:spec": {"f:replicas": {}, "f:paused": {}}}
    assert [(e["manager"], e.get("subresource")) for e in entries[1:]] == [("kubectl-edit", None), ("specdeploy", "status")]
    # a child this version created (it carries the digest): only specdeploy's own Update entry (the create's) moves
    live["metadata"]["annotations"] = {own.APPLIED_ANNOTATION: "x"}
    ops = own.takeover_patch(live)
    assert ops[1]["value"][0]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert [(e["manager"], e.get("subresource")) for e in ops[1]["value"][1:]] == [
        ("OpenAPI-Generator", None), ("kubectl-edit", None), ("specdeploy", "status")]
    # the same from the cache's copy (for_cache keeps every entry while a takeover is pending, field sets as text)
    cached = own.for_cache(live)
    assert isinstance(cached["metadata"]["managedFields"][0]["fieldsV1"], str)
    assert own.takeover_patch(cached) == ops
    # applied by this version already (no Update entry of specdeploy's left): nothing to take over
    live["metadata"]["managedFields"] = live["metadata"]["managedFields"][1:]
    assert own.takeover_patch(live) is None
    assert own.takeover_patch({"metadata": {"managedFields": []}}) is None


def test_conflict_managers():
    one = 'Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas'
    two = 'Apply failed with 2 conflicts: conflicts with "hpa":\n- .spec.replicas\nconflicts with "kubectl-edit" using v1'
    assert own.conflict_managers(one) == ["kubectl-edit"]
    assert own.conflict_managers(two) == ["hpa", "kubectl-edit"]
    assert own.conflict_managers("injected fault") == []


def test_for_cache_keeps_what_in_sync_and_takeover_read():
    """The caches keep specdeploy's Apply entry only, its field set as JSON text (issue 23: operator RSS), except
    while a takeover is pending; in_sync and takeover_patch answer the same on the trimmed object."""
    body, d = own.intent(child())
    other = {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}}
    status = {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
              "fieldsV1": {"f:status": {"f:replicas": {}}}}
    live = live_of(body)
    live["metadata"]["managedFields"] += [other, status]
    before = [dict(e) for e in live["metadata"]["managedFields"]]
    cached = own.for_cache(live)
    [entry] = cached["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], json.loads(entry["fieldsV1"])) == ("specdeploy", "Apply", ENTRY)
    assert live["metadata"]["managedFields"] == before  # not modified
    assert own.in_sync(cached, body, d) is own.in_sync(live, body, d) is True
    short = {"f:metadata": ENTRY["f:metadata"], "f:spec": {"f:replicas": {}}}  # another manager took fields
    assert own.in_sync(own.for_cache(live_of(body, short)), body, d) is own.in_sync(live_of(body, short), body, d) is False
    assert own.takeover_patch(cached) is own.takeover_patch(live) is None
    # not ours at all (a CR): nothing kept; only the Apply entry: the same object
    cr = {"metadata": {"name": "c", "managedFields": [other, status]}, "spec": {}}
    assert own.for_cache(cr)["metadata"]["managedFields"] == []
    assert own.for_cache(live_of(body)) is not None and own.for_cache(own.for_cache(live)) == cached
    # a child of a version before server-side apply: kept whole, the takeover writes every entry back
    old = child()
    old["metadata"]["managedFields"] = [{"manager": "specdeploy", "operation": "Update", "apiVersion": "apps/v1",
                                         "fieldsType": "FieldsV1", "fieldsV1": ENTRY}, other]
    assert own.for_cache(old) is old
    assert own.takeover_patch(own.for_cache(old)) == own.takeover_patch(old) is not None


# ----------------------------------------------------------------- the gate before any write (issue 24)

def _obj(*refs: dict) -> dict:
    return {"kind": "Service", "metadata": {"name": "api", "namespace": "n", "ownerReferences": list(refs)}}


OURS = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "api", "uid": "u1",
        "controller": True}


@pytest.mark.parametrize("actual, uid, want", [
    (None, "u1", None),  # absent: ours to create
    (_obj(OURS), "u1", None),  # controlled by this CR
    (_obj({**OURS, "uid": "u2"}), "u1", "controlled by another object"),  # a CR of the same name, deleted and made again
    (_obj({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "rs", "controller": True}), "u1",
     "controlled by another object"),
    (_obj(), "u1", "not owned by specdeploy"),  # unowned: a person's Service of that name
    ({"kind": "Service", "metadata": {"name": "api"}}, "u1", "not owned by specdeploy"),  # no ownerReferences key
    (_obj({**OURS, "controller": False}), "u1", "owned by this resource but not as its controller"),
    (_obj({**OURS, "controller": None}), "u1", "owned by this resource but not as its controller"),
    (_obj({**OURS, "uid": "u2", "controller": False}), "u1", "not owned by specdeploy"),  # another's plain owner ref
    (_obj({**OURS, "uid": "u2", "controller": False}, OURS), "u1", None),  # ours, plus an extra plain owner
    (_obj(OURS), None, "controlled by another object"),  # a CR without a uid may only create
    (_obj(), None, "not owned by specdeploy"),
    (None, None, None),
])
def test_conflict_table(actual, uid, want):
    assert own.conflict(actual, uid) == want


def test_owner_uid_and_controller_uids():
    assert own.owner_uid({"metadata": {"ownerReferences": [{"uid": "a"}, {"uid": "b", "controller": True}]}}) == "b"
    assert own.owner_uid({"metadata": {}}) is None
    assert own.controller_uids(None) == []
    assert own.controller_uids({"metadata": {"ownerReferences": [{"uid": "a", "controller": "true"}]}}) == []
