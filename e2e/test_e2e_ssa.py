"""Server-side apply semantics the operator relies on, checked against the embedded API server and,
with SPECDEPLOY_E2E_KUBECONFIG set, against a real cluster (the same requests and assertions).

What the real server does, from its documentation and source:
- https://kubernetes.io/docs/reference/using-api/server-side-apply/ : "Field management" (managers,
  operations Apply and Update), "Conflicts" (a 409 naming the managers; force takes the fields),
  "Merge strategy" (``listType`` map/set/atomic, ``mapType``/``structType`` atomic), "Using Server-Side
  Apply in a controller" (a controller always forces), "Transferring ownership" and "Upgrading from
  client-side apply to server-side apply" (moving Update managers' fields into the Apply manager),
  "Clearing managedFields" (``[{}]``).
- sigs.k8s.io/structured-merge-diff/v4: merge/update.go (``Updater.Apply``: merge, ``prune`` of fields
  the applier no longer applies and nobody else owns; ``Updater.update``: conflicts only for fields
  whose value changes, force and Updates move ownership), typed/tofieldset.go (the field set).
- The list types of the built-in kinds, from the published OpenAPI (``x-kubernetes-list-type``,
  ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``): PodSpec.containers, initContainers,
  volumes: map keyed by name; Container.env: map keyed by name; Container.ports: map keyed by
  containerPort+protocol; Container.volumeMounts: map keyed by mountPath; Container.args,
  PodSpec.tolerations: atomic; PodSpec.nodeSelector and LabelSelector: atomic maps;
  ServiceSpec.ports: map keyed by port+protocol; ObjectMeta.ownerReferences: map keyed by uid.

No operator runs in this module: the requests are the operator's (apply as ``specdeploy``, force on
conflict) and those of the other writers it meets (kubectl edit, an HPA, an older specdeploy).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e_support import Cluster, new_cluster, stop_cluster
from specdeploy.controller import ownership
from specdeploy.controller.kube import Kube, KubeError, load_api_client

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"


@pytest.fixture(scope="module")
def env():
    c = new_cluster("ssa", operator=False)
    try:
        yield c, Kube(load_api_client(c.kubeconfig))
    finally:
        stop_cluster(c)


class Api:
    def __init__(self, c: Cluster, kube: Kube):
        self.ns, self.kube = c.namespace, kube

    def path(self, kind: str, name: str | None = None) -> str:
        base = {"ConfigMap": f"/api/v1/namespaces/{self.ns}/configmaps",
                "Deployment": f"/apis/apps/v1/namespaces/{self.ns}/deployments",
                "Service": f"/api/v1/namespaces/{self.ns}/services"}[kind]
        return f"{base}/{name}" if name else base

    def apply(self, obj: dict, manager: str, force: bool = False) -> dict:
        q = [("fieldManager", manager)] + ([("force", "true")] if force else [])
        return self.kube._call("PATCH", self.path(obj["kind"], obj["metadata"]["name"]), obj, q, APPLY)

    def patch(self, kind: str, name: str, body: Any, manager: str, ct: str = MERGE) -> dict:
        return self.kube._call("PATCH", self.path(kind, name), body, [("fieldManager", manager)], ct)

    def create(self, obj: dict, manager: str) -> dict:
        return self.kube._call("POST", self.path(obj["kind"]), obj, [("fieldManager", manager)])

    def get(self, kind: str, name: str) -> dict:
        return self.kube._call("GET", self.path(kind, name))

    def delete(self, kind: str, name: str) -> None:
        try:
            self.kube._call("DELETE", self.path(kind, name))
        except KubeError:
            pass


@pytest.fixture
def api(env) -> Api:
    return Api(*env)


def managers(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e.get("fieldsV1") or {}
            for e in obj["metadata"].get("managedFields") or [] if not e.get("subresource")}


def deployment(name: str, *, selector: dict | None = None, env: list | None = None, ports: list | None = None,
               containers: list | None = None, replicas: int | None = 1, labels: dict | None = None,
               tolerations: list | None = None) -> dict:
    engine = {"name": "engine", "image": "registry.k8s.io/pause:3.9"}
    if env is not None:
        engine["env"] = env
    if ports is not None:
        engine["ports"] = ports
    pod: dict = {"containers": containers if containers is not None else [engine]}
    if selector is not None:
        pod["nodeSelector"] = selector
    if tolerations is not None:
        pod["tolerations"] = tolerations
    spec: dict = {"selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}
    if replicas is not None:
        spec["replicas"] = replicas
    meta: dict = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def pod_spec(d: dict) -> dict:
    return d["spec"]["template"]["spec"]


# ------------------------------------------------------------------------------------- field removal

def test_fields_the_manager_stops_applying_are_removed_and_others_stay(api: Api):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa-cm", "labels": {"a": "1", "b": "2"}},
          "data": {"x": "1", "y": "2"}}
    api.apply(cm, "specdeploy")
    api.patch("ConfigMap", "ssa-cm", {"data": {"other": "kept"}, "metadata": {"labels": {"c": "3"}}}, "someone")
    cm2 = copy.deepcopy(cm)
    del cm2["data"]["y"], cm2["metadata"]["labels"]["b"]
    got = api.apply(cm2, "specdeploy")
    assert got["data"] == {"x": "1", "other": "kept"}
    assert got["metadata"]["labels"] == {"a": "1", "c": "3"}
    api.delete("ConfigMap", "ssa-cm")


def test_node_selector_is_an_atomic_map(api: Api):
    """PodSpec.nodeSelector is ``mapType=atomic``: the applied map replaces the live one whole."""
    api.apply(deployment("ssa-ns", selector={"team": "a", "gpu": "b300"}), "specdeploy")
    got = api.apply(deployment("ssa-ns", selector={"gpu": "b300"}), "specdeploy")
    assert pod_spec(got)["nodeSelector"] == {"gpu": "b300"}
    assert "f:nodeSelector" in managers(got)[("specdeploy", "Apply")]["f:spec"]["f:template"]["f:spec"]
    got = api.apply(deployment("ssa-ns"), "specdeploy")
    assert "nodeSelector" not in pod_spec(got)
    api.delete("Deployment", "ssa-ns")


# ------------------------------------------------------------------------------------- list merge keys

def test_associative_lists_merge_by_their_keys(api: Api):
    """containers/env by name, ports by containerPort+protocol, volumes by name: two managers' items coexist."""
    mine = deployment("ssa-lists", env=[{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                      ports=[{"name": "http", "containerPort": 8000, "protocol": "TCP"}])
    pod_spec(mine)["volumes"] = [{"name": "cfg", "emptyDir": {}}]
    got = api.apply(mine, "specdeploy")
    fields = managers(got)[("specdeploy", "Apply")]["f:spec"]["f:template"]["f:spec"]
    engine = fields["f:containers"]['k:{"name":"engine"}']
    assert "." in engine and 'k:{"name":"A"}' in engine["f:env"]
    assert 'k:{"containerPort":8000,"protocol":"TCP"}' in engine["f:ports"]
    assert 'k:{"name":"cfg"}' in fields["f:volumes"]

    # another manager (a mesh injecting a sidecar) adds a container, an env var, a port and a volume
    theirs = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa-lists"},
              "spec": {"template": {"spec": {
                  "containers": [{"name": "engine", "env": [{"name": "MESH", "value": "on"}],
                                  "ports": [{"containerPort": 15090, "protocol": "TCP", "name": "mesh"}]},
                                 {"name": "sidecar", "image": "registry.k8s.io/pause:3.9"}],
                  "volumes": [{"name": "mesh-certs", "emptyDir": {}}]}}}}
    got = api.apply(theirs, "mesh")
    containers = {c["name"]: c for c in pod_spec(got)["containers"]}
    assert set(containers) == {"engine", "sidecar"}
    assert [e["name"] for e in containers["engine"]["env"]] == ["A", "B", "MESH"]
    assert {p["containerPort"] for p in containers["engine"]["ports"]} == {8000, 15090}
    assert {v["name"] for v in pod_spec(got)["volumes"]} == {"cfg", "mesh-certs"}

    # specdeploy stops applying env B and the port: only those go; the mesh's items stay, nothing doubles
    mine2 = copy.deepcopy(mine)
    pod_spec(mine2)["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    del pod_spec(mine2)["containers"][0]["ports"]
    got = api.apply(mine2, "specdeploy")
    containers = {c["name"]: c for c in pod_spec(got)["containers"]}
    assert [c["name"] for c in pod_spec(got)["containers"]].count("engine") == 1
    assert [e["name"] for e in containers["engine"]["env"]] == ["A", "MESH"]
    assert [p["containerPort"] for p in containers["engine"]["ports"]] == [15090]
    assert set(containers) == {"engine", "sidecar"}
    api.delete("Deployment", "ssa-lists")


def test_atomic_lists_are_replaced_whole(api: Api):
    """Container.args and PodSpec.tolerations are atomic: one owner, replaced as a whole."""
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    api.apply(deployment("ssa-atomic", tolerations=tol + [{"key": "team", "operator": "Exists"}]), "specdeploy")
    got = api.apply(deployment("ssa-atomic", tolerations=tol), "specdeploy")
    assert pod_spec(got)["tolerations"] == tol
    assert managers(got)[("specdeploy", "Apply")]["f:spec"]["f:template"]["f:spec"]["f:tolerations"] == {}
    api.delete("Deployment", "ssa-atomic")


# ------------------------------------------------------------------------------------- conflicts and force

def test_conflict_names_the_other_manager_and_force_takes_the_field(api: Api):
    api.apply(deployment("ssa-conf", replicas=1), "specdeploy")
    with pytest.raises(KubeError) as e:
        api.apply(deployment("ssa-conf", replicas=3), "hpa-like")
    assert e.value.status == 409 and 'conflict with "specdeploy"' in str(e.value) and ".spec.replicas" in str(e.value)
    assert ownership.conflict_managers(str(e.value)) == ["specdeploy"]
    # the same value is no conflict: the field becomes shared
    shared = api.apply(deployment("ssa-conf", replicas=1), "hpa-like")
    assert "f:replicas" in managers(shared)[("hpa-like", "Apply")]["f:spec"]
    assert "f:replicas" in managers(shared)[("specdeploy", "Apply")]["f:spec"]
    got = api.apply(deployment("ssa-conf", replicas=3), "hpa-like", force=True)
    assert got["spec"]["replicas"] == 3
    assert "f:replicas" not in managers(got)[("specdeploy", "Apply")]["f:spec"]
    api.delete("Deployment", "ssa-conf")


def test_an_update_takes_ownership_and_the_next_apply_conflicts(api: Api):
    """kubectl edit / a merge patch changing an applied field moves it to that manager (Update)."""
    api.apply(deployment("ssa-edit", labels={"app.kubernetes.io/managed-by": "specdeploy"}), "specdeploy")
    api.patch("Deployment", "ssa-edit", {"spec": {"replicas": 5},
                                         "metadata": {"annotations": {"note": "by hand"}}}, "kubectl-edit")
    got = api.get("Deployment", "ssa-edit")
    m = managers(got)
    assert "f:replicas" not in m[("specdeploy", "Apply")]["f:spec"]
    assert "f:replicas" in m[("kubectl-edit", "Update")]["f:spec"]
    with pytest.raises(KubeError) as e:
        api.apply(deployment("ssa-edit", labels={"app.kubernetes.io/managed-by": "specdeploy"}), "specdeploy")
    assert e.value.status == 409 and ownership.conflict_managers(str(e.value)) == ["kubectl-edit"]
    got = api.apply(deployment("ssa-edit", labels={"app.kubernetes.io/managed-by": "specdeploy"}), "specdeploy",
                    force=True)
    assert got["spec"]["replicas"] == 1 and got["metadata"]["annotations"]["note"] == "by hand"
    api.delete("Deployment", "ssa-edit")


def test_managers_of_the_same_name_with_apply_and_update_are_separate_entries(api: Api):
    api.apply(deployment("ssa-ops"), "specdeploy")
    api.patch("Deployment", "ssa-ops", {"metadata": {"labels": {"extra": "1"}}}, "specdeploy")
    got = api.get("Deployment", "ssa-ops")
    assert {("specdeploy", "Apply"), ("specdeploy", "Update")} <= set(managers(got))
    api.delete("Deployment", "ssa-ops")


# ------------------------------------------------------------------------------------- create by another manager

def test_apply_after_a_create_by_another_manager(api: Api):
    created = api.create(deployment("ssa-created", replicas=2), "creator")
    assert ("creator", "Update") in managers(created)
    # applying the same values: no conflict, both own them
    got = api.apply(deployment("ssa-created", replicas=2), "specdeploy")
    assert "f:replicas" in managers(got)[("specdeploy", "Apply")]["f:spec"]
    assert "f:replicas" in managers(got)[("creator", "Update")]["f:spec"]
    # a different value conflicts with the creator
    with pytest.raises(KubeError) as e:
        api.apply(deployment("ssa-created", replicas=1), "specdeploy")
    assert ownership.conflict_managers(str(e.value)) == ["creator"]
    api.delete("Deployment", "ssa-created")


def test_a_no_op_apply_writes_nothing(api: Api):
    first = api.apply(deployment("ssa-noop", env=[{"name": "A", "value": "1"}]), "specdeploy")
    again = api.apply(deployment("ssa-noop", env=[{"name": "A", "value": "1"}]), "specdeploy")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    api.delete("Deployment", "ssa-noop")


# ------------------------------------------------------------------------------------- upgrade from Update managers

def test_managed_fields_can_be_rewritten_to_move_ownership(api: Api):
    """How kubectl (csaupgrade) and the operator take over fields of client-side (Update) managers."""
    created = api.create(deployment("ssa-upgrade", selector={"team": "a", "gpu": "b300"},
                                    labels={"old": "1", "keep": "1"}), "specdeploy")
    api.patch("Deployment", "ssa-upgrade", {"spec": {"template": {"spec": {"containers": [
        {"name": "engine", "image": "registry.k8s.io/pause:3.9", "env": [{"name": "OLD", "value": "1"}]}]}}}},
        "specdeploy")
    live = api.get("Deployment", "ssa-upgrade")
    assert ("specdeploy", "Update") in managers(live) and created
    ops = ownership.takeover_patch(live)
    assert ops is not None
    moved = api.patch("Deployment", "ssa-upgrade", ops, "specdeploy", JSONPATCH)
    assert set(managers(moved)) == {("specdeploy", "Apply")}
    got = api.apply(deployment("ssa-upgrade", selector={"gpu": "b300"}, labels={"keep": "1"}), "specdeploy")
    assert pod_spec(got)["nodeSelector"] == {"gpu": "b300"}
    assert got["metadata"]["labels"] == {"keep": "1"}
    assert [c.get("env") for c in pod_spec(got)["containers"]] == [None]
    assert len(pod_spec(got)["containers"]) == 1
    api.delete("Deployment", "ssa-upgrade")


def test_clearing_managed_fields(api: Api):
    api.apply(deployment("ssa-clear"), "specdeploy")
    got = api.patch("Deployment", "ssa-clear", {"metadata": {"managedFields": [{}]}}, "someone")
    assert not got["metadata"].get("managedFields")
    api.delete("Deployment", "ssa-clear")


def test_service_ports_merge_by_port_and_protocol(api: Api):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ssa-svc"},
           "spec": {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 8000, "protocol": "TCP"},
                                                      {"name": "metrics", "port": 9090, "protocol": "TCP"}]}}
    got = api.apply(svc, "specdeploy")
    assert 'k:{"port":8000,"protocol":"TCP"}' in managers(got)[("specdeploy", "Apply")]["f:spec"]["f:ports"]
    svc["spec"]["ports"] = svc["spec"]["ports"][:1]
    got = api.apply(svc, "specdeploy")
    assert [p["port"] for p in got["spec"]["ports"]] == [8000]
    api.delete("Service", "ssa-svc")


def test_in_sync_reads_the_servers_field_sets(api: Api):
    """ownership.in_sync against what the server reports: true after an apply, false after a foreign edit."""
    obj = deployment("ssa-sync", selector={"gpu": "b300"}, env=[{"name": "A", "value": "1"}],
                     ports=[{"name": "http", "containerPort": 8000, "protocol": "TCP"}])
    body, d = ownership.intent(obj)
    live = api.apply(body, "specdeploy")
    assert ownership.in_sync(live, body, d)
    live = api.patch("Deployment", "ssa-sync", {"metadata": {"annotations": {"foreign": "x"}}}, "other")
    assert ownership.in_sync(live, body, d)  # a field specdeploy does not apply: still in sync
    live = api.patch("Deployment", "ssa-sync", {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "h100"}}}}},
                     "kubectl-edit")
    assert not ownership.in_sync(live, body, d)
    api.delete("Deployment", "ssa-sync")
