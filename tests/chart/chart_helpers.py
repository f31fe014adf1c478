"""Helpers for the chart tests: the real Helm 3 and Helm 4 binaries, rendering, value sets.

The chart tests import from here explicitly.
The Helm binaries come from `.ci/install-tools` (.venv/tools/helm3, .venv/tools/helm4).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdeploy"
TOOLS = ROOT / ".venv" / "tools"
HELMS = {"helm3": TOOLS / "helm3", "helm4": TOOLS / "helm4"}
RELEASE, NAMESPACE = "specdeploy", "specdeploy-system"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest kubernetes-validate knows.
KUBE_VERSIONS = ("1.28", "1.37")


def watched_namespaces(values: dict) -> list[str]:
    """The namespaces a value set watches ([] = every namespace, with rbac.clusterWide)."""
    if values.get("rbac", {}).get("clusterWide"):
        return []
    return values.get("watch", {}).get("namespaces") or [NAMESPACE]


# Value sets every rendering test runs over: the defaults and the non-default corners.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {
        "watch": {"namespaces": ["team-a", "team-b"]},
        "hub": {"endpoint": "https://hf-mirror.example.com", "tokenSecrets": ["hf-token", "hf-token-gated"]},
        "resyncSeconds": 120,
        "image": {"tag": "0.1.0-rc1", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "ghcr"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "control", "effect": "NoSchedule"}],
        "podAnnotations": {"example.com/team": "ml"},
        "priorityClassName": "system-cluster-critical",
        # the webhook serves the API server only: its client certificate, and a NetworkPolicy
        "webhook": {"clientAuth": {"caConfigMap": "apiserver-webhook-client-ca",
                                   "names": ["kube-apiserver-webhook-client"]},
                    "networkPolicy": {"enabled": True, "controlPlaneCIDRs": ["10.0.0.0/24", "fd00:10::/64"]}},
        "engineNetworkPolicy": {"enabled": True, "ingressNamespaces": ["monitoring"]},
    },
    "cert-manager": {
        "webhook": {"certManager": {"enabled": True}, "failurePolicy": "Ignore", "timeoutSeconds": 10,
                    "objectSelector": {"matchLabels": {"specdeploy.io/admission": "on"}}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"},
                           "thresholds": {"minAcceptanceLength": 2, "cliffHigh": 0.25, "cliffLow": 0.02}},
        "dashboards": {"enabled": True, "namespace": "monitoring", "labels": {"team": "ml"},
                       "annotations": {"grafana_folder": "Speculative decoding"}},
        "crds": {"keep": False},
        "image": {"digest": "sha256:" + "0" * 64},
        # helm lint and helm install --dry-run=client know no cluster API: render the monitors anyway
        "monitoring": {"skipCRDCheck": True},
        "podMonitor": {"labels": {"release": "prometheus"}},
    },
    "cert-manager-issuer": {
        "webhook": {"certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
                    "namespaceSelector": {"matchLabels": {"specdeploy.io/enabled": "true"}}},
        "watch": {"namespaces": ["inference"]},
    },
    # the explicit opt-in to cluster-wide write access (NOTES.txt warns)
    "cluster-wide": {"rbac": {"clusterWide": True}, "hub": {"tokenSecrets": ["hf-token"]}},
    "minimal": {
        "webhook": {"enabled": False},
        "crds": {"install": False},
        "serviceAccount": {"create": False, "name": "existing-sa"},
        "fullnameOverride": "sd",
        "metrics": {"port": 9090},
        "health": {"port": 9091},
        "replicaCount": 1,
        "leaderElection": {"enabled": False},
    },
}
# Kinds the chart may render that are not built into Kubernetes (validated elsewhere, not by kubernetes-validate).
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
                ("cert-manager.io/v1", "Issuer"),
                ("cert-manager.io/v1", "Certificate")}


def helm(which: str) -> str:
    path = HELMS[which]
    if not path.exists():
        pytest.skip(f"{path} is missing: run .ci/install-tools (or .ci/setup-test)")
    return str(path)


def run_helm(which: str, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run([helm(which), *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **env} if env else None)
    if check and p.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({p.returncode}):\n{p.stderr}\n{p.stdout}")
    return p


def values_file(values: dict[str, Any]) -> str:
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="specdeploy-values-", delete=False)
    with f:
        yaml.safe_dump(values, f)
    return f.name


# The APIs `helm template` is told the cluster serves (a cluster with prometheus-operator's CRDs).
API_VERSIONS = ("monitoring.coreos.com/v1",)


@functools.lru_cache(maxsize=None)
def _render(which: str, values_json: str, namespace: str, release: str, api_versions: tuple[str, ...]) -> str:
    path = values_file(json.loads(values_json))
    try:
        extra = [a for v in api_versions for a in ("--api-versions", v)]
        return run_helm(which, "template", release, str(CHART), "--namespace", namespace, "-f", path, *extra).stdout
    finally:
        Path(path).unlink()


def render_text(values: dict[str, Any] | None = None, which: str = "helm4", namespace: str = NAMESPACE,
                release: str = RELEASE, api_versions: tuple[str, ...] = API_VERSIONS) -> str:
    return _render(which, json.dumps(values or {}, sort_keys=True), namespace, release, tuple(api_versions))


def render(values: dict[str, Any] | None = None, which: str = "helm4", namespace: str = NAMESPACE,
           release: str = RELEASE, api_versions: tuple[str, ...] = API_VERSIONS) -> list[dict]:
    """The objects `helm template` renders (fresh copies)."""
    return [d for d in yaml.safe_load_all(render_text(values, which, namespace, release, api_versions)) if d]


def find(objs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
            and (namespace is None or o["metadata"].get("namespace") == namespace)]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    got = find(objs, kind, name)
    assert len(got) == 1, f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in got]}"
    return got[0]


def container(objs: list[dict]) -> dict:
    dep = one(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


def arg_value(args: list[str], flag: str) -> list[str]:
    """Every value given to a `--flag VALUE` option."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
