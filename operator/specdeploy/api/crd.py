"""Generate the CustomResourceDefinition from the pydantic types (the single source).

``build_crd()`` turns the models' JSON schema into a structural OpenAPI v3 schema: refs
inlined, optional-null unions collapsed, int-or-string marked, CEL rules carried over.
``specdeploy crd`` prints it; crds/ holds the committed copy, drift-tested.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from .. import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAMES, SINGULAR
from ..core import names as N
from . import benchmark as B
from .types import SpeculativeDeploymentSpec, SpeculativeDeploymentStatus

CRD_NAME = f"{PLURAL}.{API_GROUP}"
CRD_FILE = f"{API_GROUP}_{PLURAL}.yaml"
# Child objects are named after the CR (plus suffixes); Services need DNS-1035 labels.
MAX_NAME_LENGTH = 45

_DROP = {"title", "additionalProperties", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o != {"type": "null"}]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", 0) is None:
            rest.pop("default")
        if rest.get("x-kubernetes-int-or-string"):
            return {k: _structural(v, defs) for k, v in rest.items() if k not in _DROP}
        if len(options) == 1:
            return _structural({**options[0], **rest}, defs)
        raise ValueError(f"cannot express union {node['anyOf']} structurally")
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k in _DROP:
            continue
        if k == "properties":
            out[k] = {name: _structural(sub, defs) for name, sub in v.items()}
        elif k == "items":
            out[k] = _structural(v, defs)
        elif k == "const":
            out["enum"] = [v]
        else:
            out[k] = copy.deepcopy(v)
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(node["additionalProperties"], defs)
    if out.get("default", 0) is None:
        out.pop("default")
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _schema_of(model: type) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    defs = raw.get("$defs", {})
    return _structural(raw, defs)


def build_openapi_schema() -> dict[str, Any]:
    spec = _schema_of(SpeculativeDeploymentSpec)
    status = _schema_of(SpeculativeDeploymentStatus)
    return {
        "type": "object",
        "description": "A target model served with a DFlash drafter on a GPU pool. See docs/reference/api.md.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version."},
            "kind": {"type": "string", "description": "Kind."},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && "
                "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "message": f"metadata.name must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters "
                "(child Services and pods are named after it)",
            }
        ],
    }


PRINTER_COLUMNS = [
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine.name"},
    {"name": "Target", "type": "string", "jsonPath": ".spec.target.model"},
    {"name": "Drafter", "type": "string", "jsonPath": ".spec.drafter.model"},
    {"name": "GPU", "type": "string", "jsonPath": ".spec.gpu.type"},
    # ready/desired replicas, as kubectl shows a Deployment's (the operator writes it from the workload)
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
    # why it is (not) Ready, at a glance: the Ready condition's reason (e.g. ReplicasNotReady, Blocked)
    {"name": "Status", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{N.READY}")].reason'},
    {"name": "AcceptLen", "type": "number", "jsonPath": ".status.acceptance.length"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Version", "type": "string", "jsonPath": ".spec.engine.version", "priority": 1},
    {"name": "GPUs", "type": "integer", "jsonPath": ".spec.gpu.count", "priority": 1},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "priority": 1},
    {"name": "Compatible", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{N.DRAFTER_COMPATIBLE}")].reason', "priority": 1},    # spec.rollout Canary: Stable, Progressing, Analyzing, Promoting, RolledBack
    {"name": "Rollout", "type": "string", "jsonPath": ".status.rollout.phase", "priority": 1},
]


# `kubectl get speculative`: both kinds. Not a kind's name or short name: kubectl expands a category before it
# tries short names, so a category `specdeploy` holding both kinds turned `kubectl get specdeploy NAME` into
# two resources (an error) and made `kubectl explain specdeploy` ambiguous.
CATEGORY = "speculative"


def _crd(name: str, kind: str, plural: str, singular: str, short_names: tuple[str, ...], categories: list[str],
         schema: dict[str, Any], subresources: dict[str, Any], columns: list[dict]) -> dict[str, Any]:
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                             "shortNames": list(short_names)}
    if categories:
        names["categories"] = categories
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": name,
            "labels": {N.LABEL_NAME: N.NAME_OPERATOR, N.LABEL_PART_OF: N.MANAGED_BY},
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": names,
            "versions": [{"name": API_VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}, "subresources": subresources,
                          "additionalPrinterColumns": columns}],
        },
    }


def build_crd() -> dict[str, Any]:
    return _crd(CRD_NAME, KIND, PLURAL, SINGULAR, SHORT_NAMES, ["all", CATEGORY], build_openapi_schema(),
                {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                                         "labelSelectorPath": ".status.selector"}}, PRINTER_COLUMNS)


def render_crd_yaml() -> str:
    header = "# Generated by `specdeploy crd` from specdeploy/api/types.py. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


# ----------------------------------------------------------------- SpeculativeBenchmark (api/benchmark.py)

BENCH_CRD_NAME = f"{B.BENCH_PLURAL}.{API_GROUP}"
BENCH_CRD_FILE = f"{API_GROUP}_{B.BENCH_PLURAL}.yaml"

BENCH_PRINTER_COLUMNS = [
    {"name": "Deployment", "type": "string", "jsonPath": ".spec.deploymentRef.name"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
    {"name": "Best", "type": "string", "jsonPath": ".status.recommendation.best"},
    # as SpeculativeDeployment's STATUS: why it is (not) running, e.g. Measuring, AnotherBenchmarkRunning, ClientFailed
    {"name": "Status", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{N.RUNNING}")].reason'},
    {"name": "Crossover", "type": "integer", "jsonPath": ".status.crossoverConcurrency"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Current", "type": "string", "jsonPath": ".status.current", "priority": 1},
    {"name": "Results", "type": "string", "jsonPath": ".status.resultsConfigMap", "priority": 1},
]


def build_bench_openapi_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "A sweep of a SpeculativeDeployment's speculation settings. See docs/concepts/benchmarks.md.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version."},
            "kind": {"type": "string", "description": "Kind."},
            "metadata": {"type": "object"},
            "spec": _schema_of(B.SpeculativeBenchmarkSpec),
            "status": _schema_of(B.SpeculativeBenchmarkStatus),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {B.MAX_BENCH_NAME_LENGTH} && "
                "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "message": f"metadata.name must be a DNS-1035 label of at most {B.MAX_BENCH_NAME_LENGTH} characters "
                "(variant Deployments, Services and Jobs are named <name>-<variant>-...)",
            }
        ],
    }


def build_bench_crd() -> dict[str, Any]:
    # The shared category, not `all` (a benchmark is not a workload of the namespace).
    return _crd(BENCH_CRD_NAME, B.BENCH_KIND, B.BENCH_PLURAL, B.BENCH_SINGULAR, B.BENCH_SHORT_NAMES, [CATEGORY],
                build_bench_openapi_schema(), {"status": {}}, BENCH_PRINTER_COLUMNS)


def render_bench_crd_yaml() -> str:
    header = "# Generated by `specdeploy generate` from specdeploy/api/benchmark.py. Do not edit.\n"
    return header + yaml.safe_dump(build_bench_crd(), sort_keys=False, width=120)
