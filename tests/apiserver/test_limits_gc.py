"""Size limits (limits.py) and the garbage collector (gc.py), each named after the behaviour of the
real server / kube-controller-manager it mirrors."""

from __future__ import annotations

import json

from apiserver_helpers import server, api, widgets, kubeconfig, kubectl  # noqa: F401  (fixtures)
from apiserver_helpers import CMS, WIDGETS, Http, configmap, wait_for, widget

MIB = 1024 * 1024


def owner_ref(obj: dict, **extra) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], **extra}


# ---- limits --------------------------------------------------------------------------------------------

def test_request_body_over_3_mib_is_413(api: Http):
    """kube-apiserver MaxRequestBodyBytes: the body is refused before it is decoded (a 5 MB ConfigMap)."""
    status, body = api.post(CMS, configmap("big", x="a" * (5 * MIB)))
    assert status == 413 and body["message"] == "Request entity too large: limit is 3145728"
    assert api.get(f"{CMS}/big")[0] == 404


def test_configmap_data_over_1_mib_is_invalid(api: Http):
    """core/v1 validation: MaxConfigMapSize (data and binaryData together), dry runs included."""
    status, body = api.post(CMS, configmap("big", x="a" * (MIB + 10)))
    assert status == 422 and body["message"] == 'ConfigMap "big" is invalid: []: Too long: must have at most 1048576 bytes'
    assert api.post(f"{CMS}?dryRun=All", configmap("big", x="a" * (MIB + 10)))[0] == 422
    assert api.post(CMS, configmap("fits", x="a" * (MIB - 100)))[0] == 201
    status, body = api.patch(f"{CMS}/fits", {"data": {"y": "b" * 200}})
    assert status == 422


def test_objects_over_the_etcd_limit_are_refused(widgets: Http):
    """etcd's --max-request-bytes (1.5 MiB): the storage layer refuses a bigger object."""
    status, body = widgets.post(WIDGETS, widget("huge", blob="z" * (2 * MIB)))
    assert status == 500 and body["message"] == "etcdserver: request is too large"
    assert widgets.post(WIDGETS, widget("ok", blob="z" * MIB))[0] == 201


# ---- the garbage collector -----------------------------------------------------------------------------

def test_dangling_owner_reference_is_collected(api: Http, widgets: Http):
    """A dependent whose owner does not exist (never did, or went first) is deleted by the collector."""
    cm = configmap("orphan")
    cm["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost",
                                          "uid": "00000000-0000-0000-0000-000000000000"}]
    assert api.post(CMS, cm)[0] == 201
    wait_for(lambda: api.get(f"{CMS}/orphan")[0] == 404, timeout=10, what="the collector to delete the orphan")
    status, owner = widgets.post(WIDGETS, widget("o"))
    live = configmap("kept")
    live["metadata"]["ownerReferences"] = [owner_ref(owner)]
    assert api.post(CMS, live)[0] == 201
    assert api.get(f"{CMS}/kept")[0] == 200  # a live owner: nothing happens
    stats = api.get("/_specdeploy/stats")[1]
    assert stats["gc_deleted"] >= 1


def test_background_dependents_go_after_the_owner(widgets: Http):
    """Background propagation: the DELETE returns with the owner gone; the collector then deletes the tree."""
    status, owner = widgets.post(WIDGETS, widget("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = [owner_ref(owner)]
    status, child = widgets.post(CMS, child)
    grandchild = configmap("grandchild")
    grandchild["metadata"]["ownerReferences"] = [owner_ref(child)]
    widgets.post(CMS, grandchild)
    assert widgets.delete(f"{WIDGETS}/owner", {"propagationPolicy": "Background"})[0] == 200
    assert widgets.get(f"{WIDGETS}/owner")[0] == 404
    wait_for(lambda: widgets.get(f"{CMS}/grandchild")[0] == 404, timeout=10, what="the whole tree to go")


def test_kubectl_delete_cascade_modes(kubectl, api: Http):
    """kubectl delete --cascade=background|foreground|orphan against the collector."""
    for mode in ("background", "foreground", "orphan"):
        status, owner = api.post(CMS, configmap(f"owner-{mode}"))
        child = configmap(f"child-{mode}")
        child["metadata"]["ownerReferences"] = [owner_ref(owner, blockOwnerDeletion=True)]
        assert api.post(CMS, child)[0] == 201
        out = kubectl("delete", "configmap", f"owner-{mode}", f"--cascade={mode}", "--timeout=20s").stdout
        assert f'configmap "owner-{mode}" deleted' in out
        assert api.get(f"{CMS}/owner-{mode}")[0] == 404
        if mode == "orphan":
            kept = api.get(f"{CMS}/child-{mode}")[1]
            assert "ownerReferences" not in kept["metadata"]
        elif mode == "foreground":  # kubectl waited: the owner went only after its dependent
            assert api.get(f"{CMS}/child-{mode}")[0] == 404
        else:
            wait_for(lambda m=mode: api.get(f"{CMS}/child-{m}")[0] == 404, timeout=10, what="the dependent to go")


def test_foreground_owner_is_visible_while_dependents_go(api: Http):
    status, owner = api.post(CMS, configmap("fg"))
    child = configmap("fg-child")
    child["metadata"]["ownerReferences"] = [owner_ref(owner, blockOwnerDeletion=True)]
    child["metadata"]["finalizers"] = ["test/hold"]
    api.post(CMS, child)
    status, body = api.delete(f"{CMS}/fg", {"propagationPolicy": "Foreground"})
    assert status == 200 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_for(lambda: api.get(f"{CMS}/fg-child")[1]["metadata"].get("deletionTimestamp"), timeout=10,
             what="the dependent to be deleting")
    assert api.get(f"{CMS}/fg")[0] == 200  # held by the dependent's finalizer
    api.patch(f"{CMS}/fg-child", {"metadata": {"finalizers": None}})
    wait_for(lambda: api.get(f"{CMS}/fg")[0] == 404, timeout=10, what="the owner to go")
    assert json.loads(json.dumps(api.get("/_specdeploy/stats")[1]))["gc_passes"] > 0


def test_etcd_limit_is_checked_on_the_object_as_it_came_to_the_byte(monkeypatch):
    """The storage limit counts the object's compact JSON before its new resourceVersion (a create with
    or without one in the body, an update): at the limit it is stored, one byte over it is refused and
    left as it was, without using a resourceVersion."""
    from specdeploy_dev.apiserver import Emulator, limits
    from specdeploy_dev.apiserver.common import ApiError

    st = Emulator()._st
    info = st.find_resource("configmaps")

    def prepared(name: str, **meta) -> dict:
        return st.prepare_create(info, "default", {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": name, **meta}, "data": {"k": "v"}})

    for meta in ({}, {"resourceVersion": "12345678"}):
        for over in (1, 0):
            obj = prepared(f"c{len(meta)}{over}", **meta)
            before = json.dumps(obj)
            monkeypatch.setattr(limits, "MAX_OBJECT", len(json.dumps(obj, separators=(",", ":"))) - over)
            rv = st.rv
            if over:
                try:
                    st.commit_create(info, obj)
                    raise AssertionError("stored over the limit")
                except ApiError as e:
                    assert e.code == 500 and e.message == "etcdserver: request is too large"
                assert json.dumps(obj) == before and st.rv == rv
            else:
                assert st.commit_create(info, obj)["metadata"]["resourceVersion"] == str(rv + 1)
    old = st.get(info, "default", "c00")
    for over in (1, 0):
        new = st.prepare_update(info, old, dict(json.loads(json.dumps(old)), data={"k": "w" * 10}))
        before = json.dumps(new)
        monkeypatch.setattr(limits, "MAX_OBJECT", len(json.dumps(new, separators=(",", ":"))) - over)
        rv = st.rv
        if over:
            try:
                st.commit_update(info, old, new)
                raise AssertionError("stored over the limit")
            except ApiError as e:
                assert e.code == 500
            assert json.dumps(new) == before and st.rv == rv and st.get(info, "default", "c00") is old
        else:
            assert st.commit_update(info, old, new)["metadata"]["resourceVersion"] == str(rv + 1)
            assert json.loads(st.encode(info, st.get(info, "default", "c00")))["data"]["k"] == "w" * 10
