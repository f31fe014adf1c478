"""One test per kmock 0.8 defect listed in docs (test-stack.md), run against the stand-in and
against raw kmock 0.8, where each one is a strict xfail: it proves the test catches the defect."""

from __future__ import annotations

import threading

from apiserver_helpers import backend  # noqa: F401  (fixtures)
from apiserver_helpers import CMS, WIDGET_CRD, WIDGETS, configmap, widget

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


# 1. POSTing a CRD registers its resource.
def test_1_crd_post_registers_resource(backend):
    status, _ = backend.post(CRDS, WIDGET_CRD)
    assert status in (200, 201)
    status, rl = backend.get("/apis/test.specdeploy.io/v1")
    assert status == 200
    entries = {r["name"]: r for r in rl["resources"]}
    main = entries["widgets"]
    assert main["kind"] == "Widget" and main["singularName"] == "widget" and main["namespaced"] is True
    assert main["shortNames"] == ["wdg"] and "watch" in main["verbs"] and main["categories"] == ["all"]
    assert entries["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert entries["widgets/scale"]["kind"] == "Scale"
    status, groups = backend.get("/apis")
    assert "test.specdeploy.io" in {g["name"] for g in groups["groups"]}
    status, created = backend.post(WIDGETS, widget("w1"))
    assert status in (200, 201) and created["metadata"]["name"] == "w1"
    status, lst = backend.get(WIDGETS)
    assert [o["metadata"]["name"] for o in lst["items"]] == ["w1"]


# 2. GET /api/v1 reports groupVersion v1.
def test_2_core_discovery_group_version(backend):
    status, rl = backend.get("/api/v1")
    assert status == 200
    assert rl["groupVersion"] == "v1" and rl["kind"] == "APIResourceList"
    assert {"configmaps", "namespaces", "events"} <= {r["name"] for r in rl["resources"]}


# 3. /api/v1/namespaces and /api/v1/namespaces/<name> are the Namespace resource.
def test_3_namespaces_paths(backend):
    status, lst = backend.get("/api/v1/namespaces")
    assert status == 200 and "default" in {o["metadata"]["name"] for o in lst["items"]}
    status, ns = backend.get("/api/v1/namespaces/default")
    assert status == 200 and ns["kind"] == "Namespace" and ns["metadata"]["name"] == "default"
    status, created = backend.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "team-a"}})
    assert status in (200, 201)
    assert backend.get("/api/v1/namespaces/team-a")[0] == 200


# 4. Lists have kind, apiVersion and a numeric resourceVersion.
def test_4_list_kind_and_resource_version(backend):
    backend.post(CMS, configmap("a", x="1"))
    status, lst = backend.get(CMS)
    assert status == 200
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert lst["metadata"]["resourceVersion"].isdigit()


# 5. Objects get namespace, uid, resourceVersion, creationTimestamp, generation; generateName works.
def test_5_object_metadata_and_generate_name(backend):
    body = configmap("a", x="1")  # no metadata.namespace: it comes from the URL
    status, a = backend.post(CMS, body)
    assert status in (200, 201)
    meta = a["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["resourceVersion"].isdigit() and meta["generation"] == 1
    status, b = backend.post(CMS, configmap("b"))
    assert int(b["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    names = set()
    for _ in range(3):
        status, ev = backend.post("/api/v1/namespaces/default/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "kopf-event-"},
            "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "default"},
            "reason": "Test", "message": "hello", "type": "Normal"})
        assert status in (200, 201), ev
        assert ev["metadata"]["name"].startswith("kopf-event-") and len(ev["metadata"]["name"]) == len("kopf-event-") + 5
        names.add(ev["metadata"]["name"])
    assert len(names) == 3


def test_5_generation_counts_spec_changes_only(backend):
    backend.post(CRDS, WIDGET_CRD)
    status, w = backend.post(WIDGETS, widget("w1", size=1))
    assert status in (200, 201) and w["metadata"]["generation"] == 1
    status, w = backend.patch(f"{WIDGETS}/w1/status", {"status": {"phase": "Ready"}})
    assert status == 200 and w["metadata"]["generation"] == 1 and w["status"]["phase"] == "Ready"
    status, w = backend.patch(f"{WIDGETS}/w1", {"metadata": {"labels": {"a": "b"}}})
    assert w["metadata"]["generation"] == 1
    status, w = backend.patch(f"{WIDGETS}/w1", {"spec": {"size": 2}})
    assert w["metadata"]["generation"] == 2


# 6. Watch streams are application/json, one event per line.
def test_6_watch_is_json_lines(backend):
    backend.post(CMS, configmap("a"))
    events, ctype, _ = backend.watch(f"{CMS}?watch=true", max_events=1, timeout=5)
    assert ctype.startswith("application/json")
    assert events and events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "a"


# 7. Watches honour resourceVersion (no lost or duplicated events) and timeoutSeconds.
def test_7_watch_from_resource_version(backend):
    backend.post(CMS, configmap("a", v="1"))
    status, lst = backend.get(CMS)
    rv = lst["metadata"]["resourceVersion"]
    backend.post(CMS, configmap("b"))
    backend.patch(f"{CMS}/a", {"data": {"v": "2"}})
    events, _, _ = backend.watch(f"{CMS}?watch=true&resourceVersion={rv}", max_events=2, timeout=5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("MODIFIED", "a")]


def test_7_watch_sees_events_after_subscribing(backend):
    opened = threading.Event()

    def create_after_open() -> None:
        opened.set()
        backend_other = type(backend)(backend.url)
        backend_other.post(CMS, configmap("late"))

    events, _, _ = backend.watch(f"{CMS}?watch=true", max_events=1, timeout=5, on_open=create_after_open)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "late")]


def test_7_watch_timeout_seconds_ends_stream(backend):
    events, _, ended = backend.watch(f"{CMS}?watch=true&timeoutSeconds=1", max_events=100, timeout=8)
    assert ended and events == []


# 8. A failed JSON-patch test op is 422.
def test_8_failed_json_patch_test_is_422(backend):
    status, a = backend.post(CMS, configmap("a", x="1"))
    status, body = backend.patch(f"{CMS}/a", [{"op": "test", "path": "/metadata/resourceVersion", "value": "999999"},
                                              {"op": "replace", "path": "/data/x", "value": "2"}], kind="json")
    assert status == 422
    assert body["kind"] == "Status" and body["code"] == 422
    status, ok = backend.patch(f"{CMS}/a", [{"op": "test", "path": "/metadata/resourceVersion",
                                             "value": a["metadata"]["resourceVersion"]},
                                            {"op": "replace", "path": "/data/x", "value": "2"}], kind="json")
    assert status == 200 and ok["data"]["x"] == "2"


# 9. Trailing slashes, PUT, dryRun, label and field selectors.
def test_9_trailing_slash(backend):
    status, version = backend.get("/version/")
    assert status == 200 and version["major"] == "1"
    assert backend.get("/api/v1/")[0] == 200


def test_9_put_replaces_and_checks_resource_version(backend):
    status, a = backend.post(CMS, configmap("a", x="1", y="2"))
    new = configmap("a", x="3")
    new["metadata"]["resourceVersion"] = a["metadata"]["resourceVersion"]
    status, b = backend.put(f"{CMS}/a", new)
    assert status == 200 and b["data"] == {"x": "3"}
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    status, _ = backend.put(f"{CMS}/a", new)  # stale resourceVersion
    assert status == 409


def test_9_dry_run_has_no_side_effects(backend):
    status, lst = backend.get(CMS)
    rv = lst["metadata"]["resourceVersion"]
    status, obj = backend.post(f"{CMS}?dryRun=All", configmap("ghost", x="1"))
    assert status in (200, 201) and obj["metadata"]["name"] == "ghost"
    assert backend.get(f"{CMS}/ghost")[0] == 404
    backend.post(CMS, configmap("real", x="1"))
    status, obj = backend.patch(f"{CMS}/real?dryRun=All", {"data": {"x": "2"}})
    assert status == 200 and obj["data"]["x"] == "2"
    assert backend.get(f"{CMS}/real")[1]["data"]["x"] == "1"
    status, _ = backend.delete(f"{CMS}/real?dryRun=All")
    assert status == 200 and backend.get(f"{CMS}/real")[0] == 200
    status, lst = backend.get(CMS)
    assert int(lst["metadata"]["resourceVersion"]) == int(rv) + 1  # only the real create counted


def test_9_label_selectors(backend):
    backend.post(CMS, configmap("a", labels={"app": "x", "tier": "web"}))
    backend.post(CMS, configmap("b", labels={"app": "y"}))
    backend.post(CMS, configmap("c"))

    def names(selector: str) -> list[str]:
        import urllib.parse
        status, lst = backend.get(f"{CMS}?labelSelector={urllib.parse.quote(selector)}")
        assert status == 200, lst
        return sorted(o["metadata"]["name"] for o in lst["items"])

    assert names("app=x") == ["a"]
    assert names("app==x") == ["a"]
    assert names("app!=x") == ["b", "c"]
    assert names("app in (x,y)") == ["a", "b"]
    assert names("app notin (x)") == ["b", "c"]
    assert names("app") == ["a", "b"]
    assert names("!app") == ["c"]
    assert names("app,tier=web") == ["a"]


def test_9_field_selectors(backend):
    backend.post(CMS, configmap("a"))
    backend.post(CMS, configmap("b"))
    backend.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    backend.post("/api/v1/namespaces/other/configmaps", configmap("c"))
    status, lst = backend.get(f"{CMS}?fieldSelector=metadata.name%3Da")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["a"]
    status, lst = backend.get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dother")
    assert [o["metadata"]["name"] for o in lst["items"]] == ["c"]
    status, lst = backend.get("/api/v1/configmaps?fieldSelector=metadata.namespace!%3Dother,metadata.name!%3Da")
    # kube-system holds what a cluster publishes there (the front-proxy CA ConfigMap, as kube-apiserver does)
    assert [o["metadata"]["name"] for o in lst["items"] if o["metadata"]["namespace"] != "kube-system"] == ["b"]
