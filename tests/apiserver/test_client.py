"""The official kubernetes Python client against the stand-in, through a kubeconfig."""

from __future__ import annotations

import threading

import kubernetes
import pytest

from apiserver_helpers import server, kubeconfig  # noqa: F401  (fixtures)
from apiserver_helpers import WIDGET_CRD, wait_for


@pytest.fixture
def client(kubeconfig):
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=config)
    with kubernetes.client.ApiClient(config) as api_client:
        yield api_client


def test_core_objects(client):
    core = kubernetes.client.CoreV1Api(client)
    version = kubernetes.client.VersionApi(client).get_code()  # GET /version/ (trailing slash)
    assert version.major == "1"
    assert "default" in [n.metadata.name for n in core.list_namespace().items]
    cm = kubernetes.client.V1ConfigMap(metadata=kubernetes.client.V1ObjectMeta(name="c", labels={"app": "x"}),
                                       data={"k": "v"})
    created = core.create_namespaced_config_map("default", cm)
    assert created.metadata.uid and created.metadata.namespace == "default"
    core.patch_namespaced_config_map("c", "default", {"data": {"k": "v2"}})
    assert core.read_namespaced_config_map("c", "default").data == {"k": "v2"}
    assert [c.metadata.name for c in core.list_namespaced_config_map("default", label_selector="app=x").items] == ["c"]
    assert core.list_namespaced_config_map("default", label_selector="app!=x").items == []
    with pytest.raises(kubernetes.client.ApiException) as exc:
        core.create_namespaced_config_map("default", cm)
    assert exc.value.status == 409
    core.delete_namespaced_config_map("c", "default")
    with pytest.raises(kubernetes.client.ApiException) as exc:
        core.read_namespaced_config_map("c", "default")
    assert exc.value.status == 404


def test_custom_objects_and_watch(client):
    ext = kubernetes.client.ApiextensionsV1Api(client)
    ext.create_custom_resource_definition(WIDGET_CRD)
    custom = kubernetes.client.CustomObjectsApi(client)
    args = ("test.specdeploy.io", "v1", "default", "widgets")
    custom.create_namespaced_custom_object(*args, {"apiVersion": "test.specdeploy.io/v1", "kind": "Widget",
                                                   "metadata": {"name": "w"}, "spec": {"size": 1}})
    custom.patch_namespaced_custom_object_status(*args, "w", {"status": {"phase": "Ready"}})
    obj = custom.get_namespaced_custom_object(*args, "w")
    assert obj["status"]["phase"] == "Ready" and obj["metadata"]["generation"] == 1

    lst = custom.list_namespaced_custom_object(*args)
    rv = lst["metadata"]["resourceVersion"]
    seen: list[tuple[str, int]] = []
    opened = threading.Event()

    def watch() -> None:
        w = kubernetes.watch.Watch()
        opened.set()
        for event in w.stream(custom.list_namespaced_custom_object, *args, resource_version=rv, timeout_seconds=5):
            seen.append((event["type"], event["object"]["spec"]["size"]))
            if len(seen) == 2:
                w.stop()

    thread = threading.Thread(target=watch)
    thread.start()
    assert opened.wait(5)
    custom.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}})
    custom.delete_namespaced_custom_object(*args, "w")
    thread.join(15)
    assert seen == [("MODIFIED", 2), ("DELETED", 2)]
    wait_for(lambda: custom.list_namespaced_custom_object(*args)["items"] == [], timeout=5)
