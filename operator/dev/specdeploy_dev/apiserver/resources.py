"""The resources the embedded API server knows: built-in kinds, their discovery entries and Table columns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .common import ALL_VERBS, JSON


# --------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------

@dataclass
class ResourceInfo:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    status: bool = False
    scale: JSON | None = None  # {specReplicasPath, statusReplicasPath, labelSelectorPath}
    columns: list[JSON] | None = None  # CRD additionalPrinterColumns
    custom: bool = False  # defined by a CRD
    schema: JSON | None = None  # a CRD version's openAPIV3Schema (validation, defaults, pruning, OpenAPI)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def discovery(self) -> list[JSON]:
        entry: JSON = {"name": self.plural, "singularName": self.singular or self.kind.lower(),
                       "namespaced": self.namespaced, "kind": self.kind, "verbs": list(self.verbs)}
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if self.status:
            entries.append({"name": f"{self.plural}/status", "singularName": "",
                            "namespaced": self.namespaced, "kind": self.kind,
                            "verbs": ["get", "patch", "update"]})
        if self.scale is not None:
            entries.append({"name": f"{self.plural}/scale", "singularName": "",
                            "namespaced": self.namespaced, "group": "autoscaling", "version": "v1",
                            "kind": "Scale", "verbs": ["get", "patch", "update"]})
        return entries


_DEPLOY_SCALE = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                 "labelSelectorPath": ".status.selector"}
# (group, version, plural, kind, shortNames, namespaced, status, scale, categories)
_BUILTINS: list[tuple[str, str, str, str, list[str], bool, bool, JSON | None, list[str]]] = [
    ("", "v1", "namespaces", "Namespace", ["ns"], False, True, None, []),
    ("", "v1", "configmaps", "ConfigMap", ["cm"], True, False, None, []),
    ("", "v1", "secrets", "Secret", [], True, False, None, []),
    ("", "v1", "pods", "Pod", ["po"], True, True, None, ["all"]),
    ("", "v1", "services", "Service", ["svc"], True, True, None, ["all"]),
    ("", "v1", "serviceaccounts", "ServiceAccount", ["sa"], True, False, None, []),
    ("", "v1", "endpoints", "Endpoints", ["ep"], True, False, None, []),
    ("", "v1", "events", "Event", ["ev"], True, False, None, []),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", ["pvc"], True, True, None, []),
    ("", "v1", "persistentvolumes", "PersistentVolume", ["pv"], False, True, None, []),
    ("", "v1", "nodes", "Node", ["no"], False, True, None, []),
    ("", "v1", "resourcequotas", "ResourceQuota", ["quota"], True, True, None, []),
    ("", "v1", "limitranges", "LimitRange", ["limits"], True, False, None, []),
    ("apps", "v1", "deployments", "Deployment", ["deploy"], True, True, _DEPLOY_SCALE, ["all"]),
    ("apps", "v1", "statefulsets", "StatefulSet", ["sts"], True, True, _DEPLOY_SCALE, ["all"]),
    ("apps", "v1", "replicasets", "ReplicaSet", ["rs"], True, True, _DEPLOY_SCALE, ["all"]),
    ("apps", "v1", "daemonsets", "DaemonSet", ["ds"], True, True, None, ["all"]),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", [], True, False, None, []),
    ("batch", "v1", "jobs", "Job", [], True, True, None, ["all"]),
    ("batch", "v1", "cronjobs", "CronJob", ["cj"], True, True, None, ["all"]),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", ["hpa"], True, True, None, ["all"]),
    ("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", ["hpa"], True, True, None, ["all"]),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", ["pdb"], True, True, None, []),
    ("events.k8s.io", "v1", "events", "Event", ["ev"], True, False, None, []),
    ("coordination.k8s.io", "v1", "leases", "Lease", [], True, False, None, []),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", ["ing"], True, True, None, []),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", ["netpol"], True, False, None, []),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", [], True, False, None, []),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", [], True, False, None, []),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", [], False, False, None, []),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", [], False, False, None, []),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", ["sc"], False, False, None, []),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", ["pc"], False, False, None, []),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
     "ValidatingWebhookConfiguration", [], False, False, None, []),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
     "MutatingWebhookConfiguration", [], False, False, None, []),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
     ["crd", "crds"], False, True, None, []),
]

# Server-side Table columns for a few built-ins: (name, type, function of the object).
_BUILTIN_COLUMNS: dict[tuple[str, str], list[tuple[str, str, Callable[[JSON], Any]]]] = {
    ("", "namespaces"): [("Status", "string", lambda o: (o.get("status") or {}).get("phase", ""))],
    ("", "configmaps"): [("Data", "integer", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))],
    ("", "secrets"): [("Type", "string", lambda o: o.get("type", "Opaque")),
                      ("Data", "integer", lambda o: len(o.get("data") or {}) + len(o.get("stringData") or {}))],
    ("", "pods"): [("Ready", "string", lambda o: "%d/%d" % (
                        sum(1 for c in (o.get("status") or {}).get("containerStatuses") or [] if c.get("ready")),
                        len((o.get("spec") or {}).get("containers") or []))),
                   ("Status", "string", lambda o: (o.get("status") or {}).get("phase", "Pending"))],
    ("apps", "deployments"): [
        ("Ready", "string", lambda o: "%d/%d" % ((o.get("status") or {}).get("readyReplicas", 0),
                                                 (o.get("spec") or {}).get("replicas", 1))),
        ("Up-to-date", "integer", lambda o: (o.get("status") or {}).get("updatedReplicas", 0)),
        ("Available", "integer", lambda o: (o.get("status") or {}).get("availableReplicas", 0))],
    ("", "services"): [("Type", "string", lambda o: (o.get("spec") or {}).get("type", "ClusterIP")),
                       ("Cluster-IP", "string", lambda o: (o.get("spec") or {}).get("clusterIP", "<none>"))],
    ("", "events"): [("Type", "string", lambda o: o.get("type", "")),
                     ("Reason", "string", lambda o: o.get("reason", "")),
                     ("Object", "string", lambda o: "%s/%s" % ((o.get("involvedObject") or {}).get("kind", "").lower(),
                                                               (o.get("involvedObject") or {}).get("name", ""))),
                     ("Message", "string", lambda o: o.get("message", ""))],
}

