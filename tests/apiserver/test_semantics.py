"""Kubernetes semantics of the stand-in beyond the kmock defects: subresources, patches,
server-side apply, finalizers, garbage collection, namespaces, discovery, faults, watches."""

from __future__ import annotations

import threading

import yaml

from apiserver_helpers import server, api, widgets  # noqa: F401  (fixtures)
from apiserver_helpers import CMS, REAL_CRD, WIDGETS, Http, configmap, wait_for, widget

from specdeploy_dev import apiserver

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"


def owner_ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def test_status_subresource_isolation(widgets: Http):
    status, w = widgets.post(WIDGETS, widget("w", status={"phase": "Ignored"}))
    assert status == 201 and "status" not in w  # a create drops .status
    status, w = widgets.patch(f"{WIDGETS}/w/status", {"spec": {"size": 99}, "status": {"phase": "Ready"}})
    assert w["spec"]["size"] == 1 and w["status"]["phase"] == "Ready"  # /status changes only .status
    status, w = widgets.patch(f"{WIDGETS}/w", {"spec": {"size": 2}, "status": {"phase": "Hacked"}})
    assert w["spec"]["size"] == 2 and w["status"]["phase"] == "Ready"  # main writes keep .status
    new = dict(w, status={"phase": "Put"})
    status, w2 = widgets.put(f"{WIDGETS}/w/status", new)
    assert status == 200 and w2["status"]["phase"] == "Put"


def test_scale_subresource(api: Http):
    status, d = api.post(DEPLOYS, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                                   "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}}})
    assert status == 201
    status, scale = api.get(f"{DEPLOYS}/d/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    status, scale = api.patch(f"{DEPLOYS}/d/scale", {"spec": {"replicas": 3}})
    assert status == 200 and scale["spec"]["replicas"] == 3
    assert api.get(f"{DEPLOYS}/d")[1]["spec"]["replicas"] == 3


def test_patch_flavours(api: Http):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
                                   {"name": "b", "image": "y:1"}]}}
    assert api.post("/api/v1/namespaces/default/pods", pod)[0] == 201
    # Strategic merge patch merges containers by name and env by name.
    status, p = api.patch("/api/v1/namespaces/default/pods/p",
                          {"spec": {"containers": [{"name": "a", "image": "x:2", "env": [{"name": "B", "value": "2"}]}],
                                    "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}]}}, kind="strategic")
    assert status == 200, p
    assert [(c["name"], c["image"]) for c in p["spec"]["containers"]] == [("a", "x:2"), ("b", "y:1")]
    assert [e["name"] for e in p["spec"]["containers"][0]["env"]] == ["A", "B"]
    status, p = api.patch("/api/v1/namespaces/default/pods/p",
                          {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}, kind="strategic")
    assert [c["name"] for c in p["spec"]["containers"]] == ["a"]
    # Merge patch replaces lists and deletes with null.
    status, p = api.patch("/api/v1/namespaces/default/pods/p",
                          {"metadata": {"labels": {"x": "1"}}, "spec": {"containers": [{"name": "c", "image": "z"}]}})
    assert [c["name"] for c in p["spec"]["containers"]] == ["c"] and p["metadata"]["labels"] == {"x": "1"}
    status, p = api.patch("/api/v1/namespaces/default/pods/p", {"metadata": {"labels": {"x": None}}})
    assert not p["metadata"].get("labels")
    # JSON patch.
    status, p = api.patch("/api/v1/namespaces/default/pods/p",
                          [{"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
                           {"op": "add", "path": "/spec/containers/-", "value": {"name": "d", "image": "w"}},
                           {"op": "remove", "path": "/spec/containers/0"}], kind="json")
    assert status == 200 and p["metadata"]["labels"] == {"k": "v"} and [c["name"] for c in p["spec"]["containers"]] == ["d"]
    assert api.patch("/api/v1/namespaces/default/pods/p", [{"op": "remove", "path": "/nope"}], kind="json")[0] == 422


def test_strategic_merge_patch_is_415_for_custom_resources(widgets: Http):
    widgets.post(WIDGETS, widget("w"))
    assert widgets.patch(f"{WIDGETS}/w", {"spec": {"size": 2}}, kind="strategic")[0] == 415


def test_server_side_apply(api: Http):
    path = f"{CMS}/applied?fieldManager=op"
    first = yaml.safe_dump(configmap("applied", labels={"a": "1"}, x="1", y="2")).encode()
    status, cm = api.patch(path, first, kind="apply")
    assert status == 201 and cm["data"] == {"x": "1", "y": "2"}
    assert cm["metadata"]["managedFields"][0]["manager"] == "op"
    api.patch(f"{CMS}/applied", {"data": {"other": "kept"}})  # another writer's field
    second = yaml.safe_dump(configmap("applied", x="10")).encode()
    status, cm = api.patch(path + "&force=true", second, kind="apply")
    assert status == 200
    # y and the label were applied by "op" before and are no longer: removed; "other" stays.
    assert cm["data"] == {"x": "10", "other": "kept"} and not cm["metadata"].get("labels")
    rv = cm["metadata"]["resourceVersion"]
    status, again = api.patch(path, second, kind="apply")  # a no-op apply changes nothing
    assert again["metadata"]["resourceVersion"] == rv
    status, dry = api.patch(path + "&dryRun=All", yaml.safe_dump(configmap("applied", x="11")).encode(), kind="apply")
    assert dry["data"]["x"] == "11" and api.get(f"{CMS}/applied")[1]["data"]["x"] == "10"


def test_finalizers_block_deletion(api: Http):
    cm = configmap("f")
    cm["metadata"]["finalizers"] = ["test/hold"]
    api.post(CMS, cm)
    status, obj = api.delete(f"{CMS}/f")
    assert status == 200 and obj["metadata"]["deletionTimestamp"]
    status, obj = api.get(f"{CMS}/f")
    assert status == 200 and obj["metadata"]["finalizers"] == ["test/hold"]
    assert api.patch(f"{CMS}/f", {"metadata": {"finalizers": ["test/hold", "new"]}})[0] == 422
    status, obj = api.patch(f"{CMS}/f", {"metadata": {"finalizers": None}})
    assert status == 200
    assert api.get(f"{CMS}/f")[0] == 404


def test_delete_preconditions(api: Http):
    api.post(CMS, configmap("p"))
    assert api.delete(f"{CMS}/p", {"preconditions": {"resourceVersion": "1"}})[0] == 409
    assert api.delete(f"{CMS}/p")[0] == 200


def _family(api: Http, finalizer_on_child: bool = False) -> tuple[dict, dict, dict]:
    status, owner = api.post(WIDGETS, widget("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = [owner_ref(owner)]
    if finalizer_on_child:
        child["metadata"]["finalizers"] = ["test/hold"]
    status, child = api.post(CMS, child)
    grandchild = configmap("grandchild")
    grandchild["metadata"]["ownerReferences"] = [owner_ref(child)]
    status, grandchild = api.post(CMS, grandchild)
    return owner, child, grandchild


def test_cascade_background(widgets: Http):
    _family(widgets)
    status, _ = widgets.delete(f"{WIDGETS}/owner", {"propagationPolicy": "Background"})
    assert status == 200
    assert widgets.get(f"{WIDGETS}/owner")[0] == 404  # the owner goes at once, its dependents after it
    wait_for(lambda: widgets.get(f"{CMS}/child")[0] == 404 and widgets.get(f"{CMS}/grandchild")[0] == 404,
             timeout=10, what="the collector to delete the dependents")


def test_cascade_foreground_waits_for_children(widgets: Http):
    _family(widgets, finalizer_on_child=True)
    status, owner = widgets.delete(f"{WIDGETS}/owner", {"propagationPolicy": "Foreground"})
    assert status == 200 and "foregroundDeletion" in owner["metadata"]["finalizers"]
    assert widgets.get(f"{WIDGETS}/owner")[0] == 200  # blocked by the child's finalizer
    wait_for(lambda: widgets.get(f"{CMS}/child")[1]["metadata"].get("deletionTimestamp"), timeout=10,
             what="the collector to delete the child")
    assert widgets.get(f"{WIDGETS}/owner")[0] == 200
    widgets.patch(f"{CMS}/child", {"metadata": {"finalizers": None}})
    assert widgets.get(f"{CMS}/child")[0] == 404
    wait_for(lambda: widgets.get(f"{WIDGETS}/owner")[0] == 404, timeout=10, what="the owner to go")


def test_cascade_orphan_keeps_children(widgets: Http):
    _family(widgets)
    widgets.delete(f"{WIDGETS}/owner", {"propagationPolicy": "Orphan"})
    wait_for(lambda: widgets.get(f"{WIDGETS}/owner")[0] == 404, timeout=10, what="the orphan finalizer to go")
    status, child = widgets.get(f"{CMS}/child")
    assert status == 200 and not child["metadata"].get("ownerReferences")
    assert widgets.get(f"{CMS}/grandchild")[0] == 200


def test_child_with_another_live_owner_survives(widgets: Http):
    status, a = widgets.post(WIDGETS, widget("a"))
    status, b = widgets.post(WIDGETS, widget("b"))
    child = configmap("shared")
    child["metadata"]["ownerReferences"] = [owner_ref(a), dict(owner_ref(b), controller=False)]
    widgets.post(CMS, child)
    widgets.delete(f"{WIDGETS}/a")
    wait_for(lambda: [r["name"] for r in widgets.get(f"{CMS}/shared")[1]["metadata"]["ownerReferences"]] == ["b"],
             timeout=10, what="the dead reference to be removed")
    widgets.delete(f"{WIDGETS}/b")
    wait_for(lambda: widgets.get(f"{CMS}/shared")[0] == 404, timeout=10, what="the collector")


def test_namespaces_lifecycle(api: Http):
    assert api.post("/api/v1/namespaces/nowhere/configmaps", configmap("x"))[0] == 404
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tmp"}})
    held = configmap("held")
    held["metadata"]["finalizers"] = ["test/hold"]
    api.post("/api/v1/namespaces/tmp/configmaps", held)
    api.post("/api/v1/namespaces/tmp/configmaps", configmap("free"))
    status, ns = api.delete("/api/v1/namespaces/tmp")
    assert status == 200
    status, ns = api.get("/api/v1/namespaces/tmp")
    assert ns["status"]["phase"] == "Terminating"
    assert api.get("/api/v1/namespaces/tmp/configmaps/free")[0] == 404
    assert api.post("/api/v1/namespaces/tmp/configmaps", configmap("new"))[0] == 403
    api.patch("/api/v1/namespaces/tmp/configmaps/held", {"metadata": {"finalizers": None}})
    assert api.get("/api/v1/namespaces/tmp")[0] == 404


def test_crd_lifecycle_with_the_real_crd(api: Http):
    crd = yaml.safe_load(REAL_CRD.read_text())
    status, created = api.post(CRDS, crd)
    assert status == 201
    conditions = {c["type"]: c["status"] for c in created["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    base = "/apis/specdeploy.io/v1alpha1/namespaces/default/speculativedeployments"
    sd = yaml.safe_load((REAL_CRD.parents[1] / "examples" / "qwen3.6-27b-b300-vllm" / "speculativedeployment.yaml").read_text())
    sd["metadata"] = {"name": "sd"}
    sd["spec"]["replicas"] = 2
    assert api.post(base, sd)[0] == 201
    status, table = api.request("GET", base, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})[:2]
    assert [c["name"] for c in table["columnDefinitions"]][:3] == ["Name", "Engine", "Target"]
    status, scale = api.get(f"{base}/sd/scale")
    assert scale["spec"]["replicas"] == 2
    assert api.delete(f"{CRDS}/speculativedeployments.specdeploy.io")[0] == 200
    assert api.get(base)[0] == 404


def test_versions_share_storage(widgets: Http):
    widgets.post(WIDGETS, widget("w"))
    status, w = widgets.get("/apis/test.specdeploy.io/v1beta1/namespaces/default/widgets/w")
    assert status == 200 and w["apiVersion"] == "test.specdeploy.io/v1beta1"


def test_discovery_and_misc_endpoints(api: Http):
    status, groups = api.get("/apis")
    names = {g["name"] for g in groups["groups"]}
    assert {"apps", "events.k8s.io", "apiextensions.k8s.io", "coordination.k8s.io"} <= names
    status, group = api.get("/apis/events.k8s.io")
    assert group["preferredVersion"]["version"] == "v1"
    status, rl = api.get("/apis/events.k8s.io/v1")
    assert [r["name"] for r in rl["resources"]] == ["events"]
    assert api.get("/openapi/v2")[0] == 200 and api.get("/openapi/v3")[1]["paths"]["api/v1"]["serverRelativeURL"]
    assert api.get("/healthz")[0] == 200
    assert api.get("/api/v1/nosuchthings")[0] == 404
    assert {"default", "kube-system"} <= {n["metadata"]["name"] for n in api.get("/api/v1/namespaces")[1]["items"]}


def test_events_k8s_io(api: Http):
    status, ev = api.post("/apis/events.k8s.io/v1/namespaces/default/events", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"generateName": "ev-"},
        "eventTime": "2025-01-01T00:00:00.000000Z", "reportingController": "test", "reportingInstance": "t",
        "action": "Test", "reason": "Test", "regarding": {"kind": "ConfigMap", "name": "x"}, "type": "Normal"})
    assert status == 201 and ev["metadata"]["name"].startswith("ev-")


def test_watch_selector_transitions_and_deletion(api: Http):
    api.post(CMS, configmap("a", labels={"app": "x"}))
    status, lst = api.get(CMS)
    rv = lst["metadata"]["resourceVersion"]
    api.patch(f"{CMS}/a", {"metadata": {"labels": {"app": "y"}}})  # leaves the selection
    api.patch(f"{CMS}/a", {"metadata": {"labels": {"app": "x"}}})  # comes back
    api.delete(f"{CMS}/a")
    events, _, _ = api.watch(f"{CMS}?watch=true&labelSelector=app%3Dx&resourceVersion={rv}", max_events=3, timeout=5)
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "DELETED"]


def test_watch_too_old_resource_version_is_410():
    with apiserver.serve_in_thread(watch_log_size=3) as srv:
        api = Http(srv.url)
        for i in range(6):
            api.post(CMS, configmap(f"c{i}"))
        events, _, ended = api.watch(f"{CMS}?watch=true&resourceVersion=4", max_events=5, timeout=5)
        assert ended and len(events) == 1
        assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


def test_faults_in_process_and_over_http(server, api: Http):
    fault = server.call(lambda emu: emu.faults.add("create", "configmaps", status=409, count=2))
    assert fault.count == 2
    assert api.post(CMS, configmap("a"))[0] == 409
    assert api.post(CMS, configmap("a"))[0] == 409
    assert api.post(CMS, configmap("a"))[0] == 201
    status, added = api.post("/_specdeploy/faults", {"verb": "patch", "resource": "configmaps", "name": "a",
                                                     "status": 503})
    assert status == 201
    assert api.patch(f"{CMS}/b", {"data": {}})[0] == 404  # another name: no fault
    status, body = api.patch(f"{CMS}/a", {"data": {"x": "1"}})
    assert status == 503 and body["reason"] == "ServiceUnavailable"
    assert api.patch(f"{CMS}/a", {"data": {"x": "1"}})[0] == 200
    api.post("/_specdeploy/faults", {"verb": "get", "resource": "configmaps", "status": 500})
    assert api.get(f"{CMS}/a")[0] == 500
    api.post("/_specdeploy/faults", {"verb": "list", "resource": "configmaps", "action": "drop"})
    try:
        api.get(CMS)  # the connection is closed without a response (retried once by Http, then ok)
    except Exception:
        pass
    assert api.get(CMS)[0] == 200
    status, faults = api.get("/_specdeploy/faults")
    assert faults["pending"] == [] and len(faults["fired"]) == 5
    assert api.post("/_specdeploy/faults", {"verb": "get", "status": None})[0] == 400


def test_watch_faults(api: Http):
    api.post("/_specdeploy/faults", {"verb": "watch", "resource": "configmaps", "status": 410})
    events, _, ended = api.watch(f"{CMS}?watch=true", max_events=5, timeout=5)
    assert ended and [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
    api.post(CMS, configmap("a"))
    api.post("/_specdeploy/faults", {"verb": "watch", "resource": "configmaps", "action": "drop"})
    events, _, ended = api.watch(f"{CMS}?watch=true", max_events=5, timeout=5)
    assert [e["type"] for e in events] == ["ADDED"]  # initial events, then the connection drops
    # Open watches: drop and expire them.
    results: list = []
    opened = threading.Event()
    thread = threading.Thread(target=lambda: results.append(
        api.watch(f"{CMS}?watch=true", max_events=5, timeout=10, on_open=opened.set)))
    thread.start()
    assert opened.wait(5)
    wait_for(lambda: api.get("/_specdeploy/stats")[1]["watchers"] == 1, what="the watch to register")
    status, n = api.post("/_specdeploy/watches/expire", {"resource": "configmaps"})
    assert n["watches"] == 1
    thread.join(10)
    events, _, ended = results[0]
    assert [e["type"] for e in events] == ["ADDED", "ERROR"] and events[1]["object"]["code"] == 410


def test_kmock_reactions_still_work(server, api: Http):
    server.call(lambda emu: emu["get /custom"] << {"hello": "world"})
    assert api.get("/custom") == (200, {"hello": "world"})
    assert api.get("/version")[0] == 200
