"""The reconciler in-process against the embedded API server, with the watch played by GETs.

Shared by test_ssa_reconcile.py and test_ssa_property.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from specdeploy.controller.kube import KINDS, Kube, load_api_client
from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.controller.resolve import Resolver
from specdeploy_dev.harness import Cluster

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "qwen3.6-27b-b300-vllm"
CONTENT = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
           "apply": "application/apply-patch+yaml", "strategic": "application/strategic-merge-patch+json"}


def CHILDREN(name: str) -> list[tuple[str, str]]:
    """The children of a single-node CR without PodMonitor (what the watches would feed)."""
    return [("ConfigMap", f"{name}-engine"), ("Deployment", name), ("Service", name), ("PodDisruptionBudget", name)]


class Env:
    """One embedded cluster, a Controller without workers, and a write counter."""

    def __init__(self, workdir: Path, namespace: str):
        self.ns = namespace
        self.cluster = Cluster(workdir=workdir, namespace=namespace)
        self.cluster.start()
        self.cluster.apply_crds()
        self.writes: list[tuple[str, str]] = []
        self.kube = Kube(load_api_client(self.cluster.kubeconfig), on_write=lambda v, k: self.writes.append((v, k)))
        self.other = Kube(load_api_client(self.cluster.kubeconfig))  # foreign writers (not counted)
        self.ctl = Controller(self.kube, Resolver(self.kube), Settings(workers=0, backoff_min=0.01, backoff_max=0.02))
        self.loop = asyncio.new_event_loop()
        for role in ("target", "drafter"):
            self.run(self.other.create({"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": f"ssa-{role}", "namespace": namespace},
                                        "data": {"config.json": (EX / f"{role}.config.json").read_text()}}))

    def close(self) -> None:
        self.loop.close()
        self.cluster.stop()

    def run(self, coro) -> Any:
        return self.loop.run_until_complete(coro)

    # -------------------------------------------------------------------- objects

    def cr(self, name: str, spec_edit: dict | None = None) -> dict:
        spec: dict = {"engine": {"name": "vllm", "version": "0.33.0"},
                      "target": {"model": "Qwen/Qwen3.6-27B", "configFrom": {"configMapKeyRef": {"name": "ssa-target"}}},
                      "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash",
                                  "configFrom": {"configMapKeyRef": {"name": "ssa-drafter"}}},
                      "gpu": {"type": "b300", "count": 1}}
        spec.update(copy.deepcopy(spec_edit or {}))
        return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                "metadata": {"name": name, "namespace": self.ns}, "spec": spec}

    def put_cr(self, name: str, spec: dict) -> dict:
        """The user's `kubectl apply` of the CR (manager kubectl, so the whole spec is replaced)."""
        body = self.cr(name, spec)
        return self.run(self.other.call("PATCH", KINDS["SpeculativeDeployment"].path(self.ns, name), body=body,
                                        query=[("fieldManager", "kubectl"), ("force", "true")],
                                        content_type=CONTENT["apply"]))

    def get(self, kind: str, name: str) -> dict | None:
        return self.run(self.other.get(kind, self.ns, name))

    def foreign(self, kind: str, name: str, body: Any, manager: str, how: str = "merge", force: bool = False) -> dict:
        q = [("fieldManager", manager)] + ([("force", "true")] if force else [])
        return self.run(self.other.call("PATCH", KINDS[kind].path(self.ns, name), body=body, query=q,
                                        content_type=CONTENT[how]))

    # -------------------------------------------------------------------- the operator

    def sync_cache(self, name: str) -> None:
        """What the watches would deliver: the CR and every child as stored now."""
        key = (self.ns, name)
        body = self.get("SpeculativeDeployment", name)
        if body is None:
            self.ctl.bodies.pop(key, None)
        else:
            self.ctl.bodies[key] = body
        for kind, cname in CHILDREN(name):
            live = self.get(kind, cname)
            if live is None:
                self.ctl.children.pop((kind, self.ns, cname), None)
            else:
                self.ctl.children[(kind, self.ns, cname)] = {**live, "kind": kind}

    def reconcile(self, name: str) -> list[tuple[str, str]]:
        """One reconcile from fresh caches; returns the writes it made."""
        self.sync_cache(name)
        before = len(self.writes)
        delay = self.run(self.ctl.run_once((self.ns, name)))
        assert delay is None, f"reconcile of {name} asked for a retry in {delay}s"
        return self.writes[before:]

    def converge(self, name: str, rounds: int = 4) -> None:
        """Reconcile until a reconcile makes no write (the status settles after the children)."""
        for _ in range(rounds):
            if not self.reconcile(name):
                return
        raise AssertionError(f"{name} did not converge in {rounds} reconciles: {self.writes[-10:]}")

    def events(self, name: str) -> list[dict]:
        return [e for e in self.run(self.other.list("Event", self.ns)) if e["involvedObject"]["name"] == name]


def managers(obj: dict) -> dict[tuple[str, str], dict]:
    return {(e["manager"], e["operation"]): e.get("fieldsV1") or {}
            for e in obj["metadata"].get("managedFields") or [] if not e.get("subresource")}


def pod_spec(d: dict) -> dict:
    return d["spec"]["template"]["spec"]


def engine(d: dict) -> dict:
    return next(c for c in pod_spec(d)["containers"] if c["name"] == "engine")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
