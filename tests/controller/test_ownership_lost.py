"""ownership.in_sync: a child whose metadata or applied digest specdeploy no longer owns is applied again
(issue 24 item 8: each rule here survived every test before, checked by mutating ownership.py)."""

from __future__ import annotations

import copy

import pytest

from specdeploy.controller import ownership as own

OWNER = {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "x", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}
ENTRY = {"f:metadata": {"f:labels": {"f:app": {}, "f:team": {}},
                        "f:annotations": {"f:specdeploy.io/applied": {}, "f:note": {}},
                        "f:ownerReferences": {'k:{"uid":"u-1"}': {}}},
         "f:spec": {"f:replicas": {}}}


def child() -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "labels": {"app": "x", "team": "t"},
                         "annotations": {"note": "n"}, "ownerReferences": [OWNER]},
            "spec": {"replicas": 1}}


def live(body: dict, entry: dict) -> dict:
    out = copy.deepcopy(body)
    out["metadata"]["managedFields"] = [{"manager": "specdeploy", "operation": "Apply", "apiVersion": "apps/v1",
                                         "fieldsType": "FieldsV1", "fieldsV1": entry}]
    return out


def without(entry: dict, *path: str) -> dict:
    e = copy.deepcopy(entry)
    node = e
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    return e


def test_owned_metadata_is_in_sync():
    body, d = own.intent(child())
    assert own.in_sync(live(body, ENTRY), body, d)


@pytest.mark.parametrize("lost", [
    ("f:metadata", "f:labels", "f:team"),                 # one label taken by another manager
    ("f:metadata", "f:labels"),                           # every label
    ("f:metadata", "f:annotations", "f:note"),            # a rendered annotation
    ("f:metadata", "f:ownerReferences"),                  # the controller reference
    ("f:metadata", "f:annotations", "f:specdeploy.io/applied"),  # the applied-digest annotation itself
    ("f:metadata",),                                      # all metadata
])
def test_lost_metadata_ownership_is_out_of_sync(lost):
    body, d = own.intent(child())
    assert not own.in_sync(live(body, without(ENTRY, *lost)), body, d), lost


def test_an_owner_reference_of_another_uid_does_not_cover_ours():
    body, d = own.intent(child())
    entry = copy.deepcopy(ENTRY)
    entry["f:metadata"]["f:ownerReferences"] = {'k:{"uid":"u-2"}': {}}
    assert not own.in_sync(live(body, entry), body, d)


def test_the_digest_must_be_the_intents_and_the_entry_specdeploys():
    body, d = own.intent(child())
    stale = live(body, ENTRY)
    stale["metadata"]["annotations"][own.APPLIED_ANNOTATION] = "0" * 20
    assert not own.in_sync(stale, body, d)
    gone = live(body, ENTRY)
    del gone["metadata"]["annotations"][own.APPLIED_ANNOTATION]
    assert not own.in_sync(gone, body, d)
    other = live(body, ENTRY)
    other["metadata"]["managedFields"][0]["manager"] = "kubectl"
    assert not own.in_sync(other, body, d)
    update = live(body, ENTRY)  # specdeploy's Update entry: the create's, specdeploy's until the first change
    update["metadata"]["managedFields"][0]["operation"] = "Update"
    assert own.in_sync(update, body, d)
    update["metadata"]["managedFields"][0]["manager"] = "kubectl-create"
    assert not own.in_sync(update, body, d)
    status = live(body, ENTRY)
    status["metadata"]["managedFields"][0]["subresource"] = "status"
    assert not own.in_sync(status, body, d)


def test_name_and_namespace_need_no_ownership():
    body, d = own.intent(child())
    assert own.in_sync(live(body, ENTRY), body, d)  # ENTRY has no f:name / f:namespace
