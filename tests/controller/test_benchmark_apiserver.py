"""Issue 37: the benchmark controller's children against the embedded API server (real 409s, real uid
preconditions), in process: the executor's create-only path, the undo of a refused pass, deletes that name the
object read, and a child created with a POST then applied (the create's Update entry taken over).

The races are played by a second client writing between the benchmark's read and its write."""

from __future__ import annotations

import asyncio
import copy

import pytest

from specdeploy.controller.benchmark import BenchmarkController
from specdeploy.controller.benchstep import results_configmap
from specdeploy.controller.kube import Kube, load_api_client
from specdeploy.core.bench.render import BenchOwner
from specdeploy_dev.harness import Cluster
from test_benchmark_controller import BENCH, DEP, Resolver

NS = "bench"
NAME = BENCH["metadata"]["name"]


def tenant_obj(kind: str, name: str) -> dict:
    """A tenant's object under a child's name, with the benchmark's label (a label never makes an object ours)."""
    obj = {"apiVersion": "apps/v1" if kind == "Deployment" else "v1", "kind": kind,
           "metadata": {"name": name, "namespace": NS, "labels": {"specdeploy.io/benchmark": NAME}}}
    if kind == "Deployment":
        obj["spec"] = {"selector": {"matchLabels": {"app": "t"}}, "template": {
            "metadata": {"labels": {"app": "t"}}, "spec": {"containers": [{"name": "c", "image": "tenant/app"}]}}}
    elif kind == "Service":
        obj["spec"] = {"ports": [{"port": 80}]}
    else:
        obj["data"] = {"tenant": "data"}
    return obj


class Env:
    def __init__(self, workdir):
        self.cluster = Cluster(workdir=workdir, namespace=NS)
        self.cluster.start()
        self.cluster.apply_crds()
        self.loop = asyncio.new_event_loop()
        self.other = Kube(load_api_client(self.cluster.kubeconfig))  # the tenant (and the test's reads)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def get(self, kind: str, name: str) -> dict | None:
        return self.run(self.other.get(kind, NS, name))

    def controller(self, kube: Kube) -> tuple[BenchmarkController, dict]:
        """A fresh benchmark (created in the API: its status is patched) and a controller for it."""
        self.run(self.other.delete("SpeculativeBenchmark", NS, NAME))
        body = copy.deepcopy(BENCH)
        body["metadata"] = {"name": NAME, "namespace": NS}
        body = self.run(self.other.create({**body, "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark"}))
        deps = {(NS, "tiny"): {**copy.deepcopy(DEP), "metadata": {"name": "tiny", "namespace": NS}}}
        bc = BenchmarkController(kube, Resolver(), deployments=deps)
        bc.bodies[(NS, NAME)] = body
        return bc, body

    def step(self, bc: BenchmarkController) -> None:
        self.run(bc.reconcile((NS, NAME)))

    def clear(self) -> None:
        for kind in ("Deployment", "Service", "ConfigMap", "Job"):
            for o in self.run(self.other.list(kind, NS)):
                if o["metadata"]["name"].startswith(NAME):
                    self.run(self.other.delete(kind, NS, o["metadata"]["name"]))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = Env(tmp_path_factory.mktemp("benchapi"))
    yield e
    e.loop.close()
    e.cluster.stop()


class Racing(Kube):
    """The benchmark's client, with a tenant's write played just before one of its requests."""

    def __init__(self, env: Env, *, before: str, kind: str, name: str):
        super().__init__(load_api_client(env.cluster.kubeconfig))
        self.env, self.before, self.target, self.planted = env, before, (kind, name), None

    async def _race(self, verb: str, kind: str, name: str) -> None:
        if verb == self.before and (kind, name) == self.target and self.planted is None:
            if verb == "delete":  # ours deleted by someone, theirs created under the name
                await self.env.other.delete(kind, NS, name)
            self.planted = await self.env.other.create(tenant_obj(kind, name))

    async def create(self, obj):
        await self._race("create", obj["kind"], obj["metadata"]["name"])
        return await super().create(obj)

    async def delete(self, kind, namespace, name, propagation="Background", uid=None):
        await self._race("delete", kind, name)
        return await super().delete(kind, namespace, name, propagation, uid)


def test_a_name_taken_at_the_create_is_refused_by_the_server_and_the_pass_undone(env: Env):
    env.clear()
    kube = Racing(env, before="create", kind="Deployment", name=f"{NAME}-baseline")
    bc, body = env.controller(kube)
    env.step(bc)
    cond = body["status"]["conditions"][0]
    assert body["status"]["phase"] == "Failed" and cond["reason"] == "ChildConflict", cond
    assert f"Deployment/{NAME}-baseline (not owned by specdeploy)" in cond["message"]
    dep = env.get("Deployment", f"{NAME}-baseline")
    assert dep["metadata"]["uid"] == kube.planted["metadata"]["uid"]  # the tenant's, as it was written
    assert dep["metadata"].get("ownerReferences") is None and "specdeploy.io/applied" not in (
        dep["metadata"].get("annotations") or {})
    assert dep["metadata"]["resourceVersion"] == kube.planted["metadata"]["resourceVersion"]  # never written to
    # what the refused pass created (engine ConfigMap, Service) was deleted again
    assert env.get("ConfigMap", f"{NAME}-baseline-engine") is None and env.get("Service", f"{NAME}-baseline") is None


@pytest.mark.parametrize("kind, name", [("Deployment", f"{NAME}-baseline"), ("Service", f"{NAME}-baseline"),
                                        ("ConfigMap", f"{NAME}-baseline-engine")])
def test_an_object_recreated_under_the_name_since_the_read_is_not_deleted(env: Env, kind: str, name: str):
    env.clear()
    kube = Racing(env, before="delete", kind=kind, name=name)
    bc, body = env.controller(kube)
    env.step(bc)  # the variant's objects created
    assert env.get(kind, name)["metadata"]["ownerReferences"][0]["uid"] == body["metadata"]["uid"]
    bc.deployments.clear()  # the deployment goes away mid-run: Failed, the variant deleted
    env.step(bc)
    assert body["status"]["phase"] == "Failed"
    live = env.get(kind, name)
    assert kube.planted is not None and live["metadata"]["uid"] == kube.planted["metadata"]["uid"]
    for k, n in (("Deployment", f"{NAME}-baseline"), ("Service", f"{NAME}-baseline"),
                 ("ConfigMap", f"{NAME}-baseline-engine")):
        if (k, n) != (kind, name):
            assert env.get(k, n) is None, (k, n)  # the benchmark's own: deleted


def test_a_child_created_then_written_again_is_applied_as_specdeploys(env: Env):
    """The results ConfigMap: created with a POST (the create's Update entry), then written again through the
    same path: the POST is refused (409), the claim finds it ours, the takeover moves the fields into the Apply
    entry and the apply changes it."""
    env.clear()
    kube = Kube(load_api_client(env.cluster.kubeconfig))
    bc, body = env.controller(kube)
    owner = BenchOwner(NAME, NS, body["metadata"]["uid"])
    env.run(bc._put(NS, NAME, [results_configmap(owner, {"variant-baseline.json": "{}"})]))
    cm = env.get("ConfigMap", f"{NAME}-results")
    assert {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]} == {("specdeploy", "Update")}
    env.run(bc._put(NS, NAME, [results_configmap(owner, {"variant-baseline.json": "{}", "results.json": "[]"})]))
    cm = env.get("ConfigMap", f"{NAME}-results")
    assert cm["data"] == {"variant-baseline.json": "{}", "results.json": "[]"}
    assert {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]} == {("specdeploy", "Apply")}
