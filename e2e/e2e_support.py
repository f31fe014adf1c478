"""Helpers of the end-to-end suite (each e2e test module imports what it uses by name; the fixtures
``cluster``, ``loop`` and the diagnostics on failure are in e2e/conftest.py).

Modes:

- embedded (default): every module starts its own API server stand-in
  (``specdeploy dev apiserver``), installs the CRD and runs the real operator process
  (``specdeploy operator run``) against it with a short resync; kubectl is the real one.
- real cluster: with ``SPECDEPLOY_E2E_KUBECONFIG`` set, the same tests run against that
  cluster (the operator still runs locally, in a fresh namespace per module, deleted at the
  end). Tests that need the stand-in (fault injection, playing the Deployment or Job
  controller) are skipped there with a reason.

Every wait has a deadline (``wait_for``); on a failed test the diagnostics of every running
cluster (operator log tail, events, describe) are printed into the test's report.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy_dev.harness import ROOT, Cluster, HarnessError, wait_for

__all__ = [
    "ROOT", "EXAMPLES", "KIMI", "QWEN", "REAL_KUBECONFIG", "EMBEDDED", "RESYNC", "embedded_only",
    "Cluster", "HarnessError", "wait_for", "new_cluster", "start_operator",
    "stop_cluster",
    "HELM3", "apply", "apply_chart", "configmap", "example_cr", "example_doc", "get", "exists", "events_for", "reconciles", "writes",
    "wait_reconciles", "fired_faults", "clear_faults", "CHILD_KINDS", "child_names", "engine_container", "config_hash",
    "engine_pod", "play_engine_pod", "printer_columns",
]

EXAMPLES = ROOT / "examples"
KIMI = EXAMPLES / "kimi-k2.6-rtx-pro-6000-sglang"
QWEN = EXAMPLES / "qwen3.6-27b-b300-vllm"
HELM3 = ROOT / ".venv" / "tools" / "helm3"  # .ci/install-tools
REAL_KUBECONFIG = os.environ.get("SPECDEPLOY_E2E_KUBECONFIG") or None
EMBEDDED = REAL_KUBECONFIG is None
RESYNC = 2.0  # seconds: drift repair and idle resyncs are observable quickly
# Environment of every operator the suite starts. The admission webhook server (default port
# 9443 on 0.0.0.0) is not part of these scenarios and a fixed port collides between concurrent
# runs: off unless the caller's environment sets a port.
OPERATOR_ENV = {"SPECDEPLOY_WEBHOOK_PORT": os.environ.get("SPECDEPLOY_WEBHOOK_PORT", "0")}
# the tenancy policy the suite's fixtures need: the hub token Secret and the model claim they name
# the Kimi example needs its repository code (trustRemoteCode): allowed as its comment tells an administrator
OPERATOR_ARGS = ["--allowed-token-secret", "hub-token", "--allowed-pvc", "models", "--allow-trust-remote-code-model",
                 "moonshotai"]
TIMEOUT = 60.0  # default deadline of a wait

embedded_only = pytest.mark.skipif(
    not EMBEDDED, reason="needs the embedded API server (fault injection, or the test plays a controller "
                         "that a real cluster runs itself); SPECDEPLOY_E2E_KUBECONFIG is set")

CHILD_KINDS = ("configmap", "deployment", "service", "poddisruptionbudget")

_active: list[Cluster] = []


# ----------------------------------------------------------------------------- clusters


def new_cluster(tag: str, *, resync: float = RESYNC, extra_env: dict[str, str] | None = None,
                operator: bool = True) -> Cluster:
    """A started cluster (embedded or the configured real one) in a fresh namespace, CRD installed,
    the operator running (unless operator=False)."""
    ns = f"e2e-{re.sub(r'[^a-z0-9-]', '-', tag.lower())[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    c = Cluster(kubeconfig=REAL_KUBECONFIG, namespace=ns)
    _active.append(c)
    try:
        c.start()
        c.apply_crds()
        if not c.embedded:
            c.kubectl("wait", "--for=condition=established", "--timeout=60s",
                      "crd/speculativedeployments.specdeploy.io", timeout=90)
        c.e2e_operator_env = {**OPERATOR_ENV, **(extra_env or {})}  # type: ignore[attr-defined]
        c.e2e_resync = resync  # type: ignore[attr-defined]
        if operator:
            start_operator(c)
    except BaseException:
        print(c.diagnostics())
        stop_cluster(c)
        raise
    return c


def start_operator(c: Cluster) -> None:
    """(Re)start the operator with the settings new_cluster gave this cluster."""
    c.start_operator(resync_seconds=c.e2e_resync, extra_env=c.e2e_operator_env,  # type: ignore[attr-defined]
                     extra_args=OPERATOR_ARGS)


def stop_cluster(c: Cluster) -> None:
    try:
        c.stop_operator()
        if not c.embedded:
            c.kubectl("delete", "namespace", c.namespace, "--wait=false", check=False)
    finally:
        c.stop()
        if c in _active:
            _active.remove(c)


# ----------------------------------------------------------------------------- objects


def apply(c: Cluster, *objs: dict) -> None:
    """kubectl apply the given objects into the cluster's namespace."""
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objs)}
    c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(doc))


def configmap(name: str, doc: Any, key: str = "config.json") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {key: doc if isinstance(doc, str) else json.dumps(doc, indent=2)}}


def example_doc(example: Path, which: str) -> dict:
    """An example's target or drafter config.json (a fresh copy)."""
    return json.loads((example / f"{which}.config.json").read_text())


def example_cr(example: Path, name: str | None = None, *, target_cm: str | None = None,
               drafter_cm: str | None = None) -> dict:
    """An example's SpeculativeDeployment, optionally renamed and pointed at other ConfigMaps."""
    cr = yaml.safe_load((example / "speculativedeployment.yaml").read_text())
    cr = copy.deepcopy(cr)
    if name:
        cr["metadata"] = {"name": name}
    if target_cm:
        cr["spec"]["target"]["configFrom"] = {"configMapKeyRef": {"name": target_cm}}
    if drafter_cm:
        cr["spec"]["drafter"]["configFrom"] = {"configMapKeyRef": {"name": drafter_cm}}
    return cr


def apply_chart(c: Cluster, release_ns: str, helm: Path = HELM3) -> None:
    """Create ``release_ns`` and ``kubectl apply`` the chart into it (``helm template``, validation on; each
    object names its namespace), watching the cluster's namespace (the chart's default is its own only)."""
    c.kubectl("create", "namespace", release_ns)
    rendered = subprocess.run([str(helm), "template", "specdeploy", str(ROOT / "charts" / "specdeploy"),
                               "-n", release_ns, "--set", f"watch.namespaces={{{c.namespace}}}"],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    c.kubectl("apply", "-f", "-", input=rendered)


def get(c: Cluster, kind: str, name: str) -> dict | None:
    """The object, or None when it does not exist (``Cluster.get_json``: one GET on the embedded server)."""
    try:
        return c.get_json(kind, name, "-n", c.namespace)
    except HarnessError as e:
        if "NotFound" in str(e) or "not found" in str(e):
            return None
        raise


def exists(c: Cluster, kind: str, name: str) -> bool:
    return get(c, kind, name) is not None


def child_names(name: str) -> dict[str, str]:
    return {"configmap": f"{name}-engine", "deployment": name, "service": name, "poddisruptionbudget": name}


def events_for(c: Cluster, name: str) -> list[dict]:
    items = c.get_json("events", "-n", c.namespace).get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("kind") == "SpeculativeDeployment"]


def engine_container(workload: dict) -> dict:
    spec = workload["spec"]
    tmpl = spec["template"] if workload["kind"] == "Deployment" else spec["leaderWorkerTemplate"]["leaderTemplate"]
    return next(x for x in tmpl["spec"]["containers"] if x["name"] == "engine")


def config_hash(workload: dict) -> str | None:
    spec = workload["spec"]
    tmpl = spec["template"] if workload["kind"] == "Deployment" else spec["leaderWorkerTemplate"]["leaderTemplate"]
    return ((tmpl.get("metadata") or {}).get("annotations") or {}).get("specdeploy.io/config-hash")


def fired_faults(c: Cluster) -> list[dict]:
    """The injected faults the embedded API server has fired so far (verb, resource, name, status)."""
    return list(c._get("/_specdeploy/faults").get("fired") or [])  # noqa: SLF001 - the harness's GET helper


def clear_faults(c: Cluster) -> None:
    """Drop the pending injected faults of the embedded API server."""
    req = urllib.request.Request(c.url + "/_specdeploy/faults", method="DELETE")
    urllib.request.urlopen(req, timeout=5).read()


# ----------------------------------------------------------------------------- operator metrics


def _sum(c: Cluster, prefix: str) -> float:
    m = c.operator_metrics()
    if m is None:
        raise HarnessError("the operator's /metrics endpoint does not answer")
    return sum(v for k, v in m.items() if k.startswith(prefix))


def reconciles(c: Cluster) -> float:
    """specdeploy_reconcile_total, all results."""
    return _sum(c, "specdeploy_reconcile_total")


def writes(c: Cluster) -> float:
    """specdeploy_api_writes_total, all verbs and kinds."""
    return _sum(c, "specdeploy_api_writes_total")


def wait_reconciles(c: Cluster, more: float, timeout: float = TIMEOUT) -> float:
    """Wait until the operator has done `more` reconciles beyond the current count."""
    target = reconciles(c) + more
    return wait_for(lambda: reconciles(c) >= target and reconciles(c), timeout, f"{more:.0f} more reconciles")


# ----------------------------------------------------------------------------- engine pods (embedded only)


def engine_pod(cr_name: str, pod_name: str, port: int, engine: str = "vllm",
               annotations: dict[str, str] | None = None) -> dict:
    """An engine pod of a SpeculativeDeployment as its workload would create it: the engine labels,
    the template's ``annotations`` (the config hash) and a container port named http (where the
    engine serves /metrics)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "annotations": dict(annotations or {}), "labels": {
                "app.kubernetes.io/name": "specdeploy-engine", "app.kubernetes.io/instance": cr_name,
                "app.kubernetes.io/component": "engine", "app.kubernetes.io/managed-by": "specdeploy",
                "app.kubernetes.io/part-of": "specdeploy", "specdeploy.io/engine": engine}},
            "spec": {"containers": [{"name": "engine", "image": "example.invalid/engine:stand-in",
                                     "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}]}}


def play_engine_pod(c: Cluster, cr_name: str, pod_name: str, port: int, engine: str = "vllm",
                    ip: str = "127.0.0.1") -> None:
    """Play the ReplicaSet controller and the kubelet for one engine pod: a ReplicaSet controlled by the
    Deployment (the acceptance monitor trusts a pod through these uids, never its labels alone), the pod
    controlled by it with the pod template's annotations (the config hash), then Running and Ready with
    ``ip`` as its podIP, so the operator scrapes ``http://<ip>:<port>/metrics`` (a stand-in engine on loopback)."""
    workload = get(c, "deployment", cr_name) or {}
    spec = workload.get("spec") or {}
    template = (spec.get("template") or {}).get("metadata") or {}
    pod = engine_pod(cr_name, pod_name, port, engine, template.get("annotations"))
    if workload:
        rs_name = f"{cr_name}-e2e"
        apply(c, {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                  "metadata": {"name": rs_name, "labels": dict(template.get("labels") or {}),
                               "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": cr_name,
                                                    "uid": workload["metadata"]["uid"], "controller": True}]},
                  "spec": {"replicas": 0, "selector": spec.get("selector"), "template": spec.get("template")}})
        rs_uid = get(c, "replicaset", rs_name)["metadata"]["uid"]
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                                               "uid": rs_uid, "controller": True}]
    apply(c, pod)
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
              "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]}
    c.kubectl("patch", "pod", pod_name, "-n", c.namespace, "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": status}))


def printer_columns(c: Cluster, kind: str = "specdeploy") -> dict[str, dict[str, str]]:
    """`kubectl get <kind>` as {name: {COLUMN: value}} (empty cells are absent from a row)."""
    lines = c.kubectl("get", kind, "-n", c.namespace).stdout.splitlines()
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    rows = {}
    for ln in lines[1:]:
        cells = {}
        for j, start in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else None
            value = ln[start:end].strip()
            if value:
                cells[header[start:end].strip()] = value
        rows[ln.split()[0]] = cells
    return rows
