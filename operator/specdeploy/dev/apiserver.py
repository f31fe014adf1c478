"""The embedded Kubernetes API server ("stand-in") for the demo and the operator/e2e tests.

It is ``kmock.KubernetesEmulator`` (kmock==0.8, by kopf's author) with a shim that replaces its
request path and its object store, because raw kmock 0.8 breaks kubectl and kopf and slows down
linearly with traffic. One file on purpose: everything that leans on kmock lives here.

What the shim fixes (numbered as in the test-stack reference, "The stand-in API server needs a shim"):

1. POSTing (or applying/patching) a CRD registers its resource for every served version: group,
   version, plural, kind, listKind, singular, shortNames, categories, scope, verbs, the status
   and scale subresources and additionalPrinterColumns (served as server-side Tables for
   ``kubectl get``). The CRD gets Established/NamesAccepted conditions. Deleting it removes the
   resource and all its objects.
2. ``GET /api/v1`` is an APIResourceList with ``groupVersion: v1`` (plus ``<plural>/status`` and
   ``<plural>/scale`` entries), so kubectl finds the core resources.
3. ``/api/v1/namespaces`` and ``/api/v1/namespaces/<name>[/status]`` are the Namespace resource,
   parsed by our own path parser (kmock's returns 500).
4. Lists carry ``kind: <Kind>List``, ``apiVersion`` and a numeric ``metadata.resourceVersion``.
5. Objects get their namespace from the URL, a uid, a global monotonic resourceVersion,
   creationTimestamp, ``generation`` (1 on create; +1 when anything outside metadata changes,
   status excluded for resources with a status subresource, as the real server does; +1 when
   deletionTimestamp is set), and ``generateName`` (5 random characters, as the real server).
6. Watches are ``application/json`` chunked, one JSON event per line.
7. No watch race: the snapshot and the subscription happen in one synchronous step on the event
   loop, so no event can fall in between. ``resourceVersion`` is honoured (events after it are
   replayed from a per-resource event log; too old -> ERROR 410 Expired), ``timeoutSeconds`` ends
   the stream cleanly. Events are ADDED/MODIFIED/DELETED only (no BOOKMARKs, except the
   ``k8s.io/initial-events-end`` one a client asks for with ``sendInitialEvents=true``); an
   object that starts/stops matching a label or field selector is sent as ADDED/DELETED.
8. A failed JSON-patch ``test`` op (and any invalid JSON patch) is 422 Unprocessable Entity.
9. Trailing slashes are ignored (``/version/``); PUT replaces (409 on a resourceVersion
   mismatch); ``?dryRun=All`` computes and returns the result without storing it, bumping the
   resourceVersion or notifying watchers; label selectors (``=``, ``==``, ``!=``, ``in``,
   ``notin``, ``key``, ``!key``) and field selectors (``=``, ``==``, ``!=`` on any dotted path,
   e.g. ``metadata.name``, ``metadata.namespace``, ``involvedObject.uid``) on list, watch and
   deletecollection.

Also: status subresource isolation (writes to ``/status`` change only ``.status``; writes to the
main resource keep the stored ``.status`` when the resource has a status subresource, and a create
drops it), the scale subresource (autoscaling/v1 Scale), merge patch (RFC 7386), strategic merge
patch (merge patch plus merging of the usual keyed lists: containers/env/volumes by name,
volumeMounts by mountPath, ports by containerPort/port, conditions by type, and ``$patch``/
``$setElementOrder``/``$retainKeys``/``$deleteFromPrimitiveList`` directives; 415 for custom
resources, like the real server), JSON patch (RFC 6902), server-side apply, DELETE with
finalizers (deletionTimestamp, removal when the last finalizer goes), deletion preconditions,
cascading deletion through ownerReferences (Background, Foreground via the
``foregroundDeletion`` finalizer, Orphan), deletecollection, namespace deletion (its objects go,
then the namespace), 404 for objects in a missing namespace and 403 in a terminating one,
discovery (``/api``, ``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``), ``/version``,
``/healthz``, ``/livez``, ``/readyz``, both core v1 and ``events.k8s.io/v1`` Events, and the
``default``, ``kube-system`` and ``kube-public`` namespaces seeded at start.

Simplifications (deliberate; say so when a test depends on them):

- Server-side apply: a PATCH with ``application/apply-patch+yaml`` creates the object when absent,
  otherwise merges the applied configuration (keyed lists merged as in strategic merge patch) and
  removes the fields that the same ``fieldManager`` applied last time but no longer applies (unless
  another apply manager still applies them). Field ownership is tracked per manager as a set of
  leaf paths (lists are leaves); conflicts between managers are never reported, so ``force``
  changes nothing. ``managedFields`` is filled for Apply operations only.
- No OpenAPI (``/openapi/v2`` and ``/openapi/v3`` are 404): kubectl needs ``--validate=false``.
  No protobuf, no CRD schema validation/defaulting/pruning, no conversion between versions (versions
  of a CRD share one storage, objects are served with the requested apiVersion), no admission
  webhooks, no RBAC, no authentication (any token works), no controllers (Deployments never get
  pods; tests patch ``/status`` like controller tests on a bare API server), no ``limit``/
  ``continue`` paging (lists are always complete, which clients accept), no graceful pod deletion.
- The garbage collector runs synchronously inside the DELETE that removes an owner; owners are
  matched by uid only and dangling ownerReferences are not collected.

Scale: kmock 0.8 records every request and evaluates its filter DSL over that whole history on
each request. Here the history is a ``deque(maxlen=history_limit)`` (default 64, 0 disables it),
the DSL is consulted only when a test added its own reactions (``emulator['get /x'] << ...``),
and objects live in a per-resource index: ``{(group, plural): bucket}`` where a bucket holds
``{(namespace, name): object}`` plus ``{namespace: {name: object}}`` and its event log. Versions
of one resource share a bucket, as they share storage on a real cluster. Stored objects are never
mutated in place: each write stores a new dict, so watch events can reference them safely.

Fault injection: ``emulator.faults.add(verb=..., resource=..., name=..., status=..., count=N)``
in-process, or ``POST /_specdeploy/faults`` with the same JSON over HTTP (see ``Fault``), plus
``POST /_specdeploy/watches/drop`` and ``/_specdeploy/watches/expire`` for open watches, and
``GET /_specdeploy/stats``.

kmock private names this module relies on (hence ``kmock==0.8`` exactly in pyproject.toml):

- ``kmock._internal.apps.RawHandler._handle``: runs test-defined DSL reactions (only when a test
  added some); it raises ``NotImplementedError`` when none matches.
- ``kmock._internal.dsl.Root._requests`` (replaced by a bounded deque) and ``Root._payloads``
  (read to know whether any reactions exist).
- ``KubernetesEmulator.__attrs_post_init__`` is deliberately NOT called: it would register
  kmock's own fallback reactions, which this shim replaces.
- ``attrs.define`` slotted classes: the subclass declares its fields with attrs too.
Public names used: ``kmock.KubernetesEmulator``, ``kmock.Request``, ``kmock.resource``,
``kmock.method``, ``kmock.action``.

Entry points: ``await start(port=0)`` -> ``ApiServer`` (``.url``, ``.port``, ``.emulator``,
``await .stop()``); ``serve_in_thread()`` -> ``ThreadedApiServer`` for synchronous tests;
``write_kubeconfig(path, url)``; ``main(argv)`` for ``specdeploy dev apiserver --kubeconfig PATH
[--port N]`` (also ``python -m specdeploy.dev.apiserver``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import json
import logging
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import apps as _kmock_apps

from . import podlogs

logger = logging.getLogger("specdeploy.dev.apiserver")

JSON = dict[str, Any]
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SERVER_VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-specdeploy-standin",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
    "platform": "linux/amd64",
}
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FIELDS_IMMUTABLE = ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                     "deletionGracePeriodSeconds", "generation", "resourceVersion")


# --------------------------------------------------------------------------------------------
# Errors and small helpers
# --------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered as a Kubernetes ``Status`` object."""

    REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
               409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
               429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
               504: "Timeout"}

    def __init__(self, code: int, message: str, reason: str | None = None, details: JSON | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or self.REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> JSON:
        body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _clone(obj: Any) -> Any:
    # Objects are JSON-only; a JSON round trip is a faster deep copy than copy.deepcopy.
    return json.loads(json.dumps(obj))


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _human_age(timestamp: str | None) -> str:
    """Like k8s.io/apimachinery duration.HumanDuration, as the server renders Age cells."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc)
    except ValueError:
        return str(timestamp)
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    if seconds < 0:
        seconds = 0
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m{s}s" if s else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        h = hours % 24
        return f"{days}d{h}h" if h else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


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


# --------------------------------------------------------------------------------------------
# Selectors and JSONPath (the subset that printer columns, scale paths and selectors need)
# --------------------------------------------------------------------------------------------

def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_RE = re.compile(r"^([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([A-Za-z0-9_./-]+)$")


def parse_label_selector(text: str | None) -> Callable[[dict[str, str]], bool] | None:
    """Compile a label selector (``a=b,c!=d,e in (f,g),h notin (i),j,!k``); 400 on bad syntax."""
    if not text:
        return None
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_top(text):
        if m := _SET_RE.match(term):
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(lambda labels, k=key, vs=vals: labels.get(k) in vs)
            else:
                tests.append(lambda labels, k=key, vs=vals: labels.get(k) not in vs)
        elif m := _EQ_RE.match(term):
            key, op, val = m.groups()
            if op == "!=":
                tests.append(lambda labels, k=key, v=val: labels.get(k) != v)
            else:
                tests.append(lambda labels, k=key, v=val: k in labels and labels[k] == v)
        elif m := _KEY_RE.match(term):
            neg, key = m.groups()
            if neg:
                tests.append(lambda labels, k=key: k not in labels)
            else:
                tests.append(lambda labels, k=key: k in labels)
        else:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
    return lambda labels: all(t(labels) for t in tests)


def _field_value(obj: JSON, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None) -> Callable[[JSON], bool] | None:
    """Compile a field selector (``metadata.name=x,metadata.namespace!=y``, any dotted path)."""
    if not text:
        return None
    tests: list[Callable[[JSON], bool]] = []
    for term in _split_top(text):
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise ApiError(400, f"invalid field selector: {term!r}")
        path, op, val = m.groups()
        if op == "!=":
            tests.append(lambda o, p=path, v=val: _field_value(o, p) != v)
        else:
            tests.append(lambda o, p=path, v=val: _field_value(o, p) == v)
    return lambda obj: all(t(obj) for t in tests)


_JP_TOKEN = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\['([^']*)'\]")


def jsonpath(obj: Any, path: str) -> Any:
    """Evaluate the simple JSONPath used by printer columns and scale paths; None if absent."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    cur: Any = obj
    pos = 0
    while pos < len(path):
        m = _JP_TOKEN.match(path, pos)
        if not m:
            return None
        pos = m.end()
        key, index, fkey, fval, quoted = m.groups()
        if key is not None or quoted is not None:
            cur = cur.get(key if key is not None else quoted) if isinstance(cur, dict) else None
        elif index is not None:
            cur = cur[int(index)] if isinstance(cur, list) and int(index) < len(cur) else None
        else:
            cur = next((item for item in cur if isinstance(item, dict) and _field_value(item, fkey) == fval), None) \
                if isinstance(cur, list) else None
        if cur is None:
            return None
    return cur


def _set_path(obj: JSON, path: str, value: Any) -> None:
    keys = [k for k in path.strip().lstrip(".").split(".") if k]
    cur = obj
    for key in keys[:-1]:
        cur = cur.setdefault(key, {})
    cur[keys[-1]] = value


# --------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_SMP_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
             "volumes": "name", "env": "name", "imagePullSecrets": "name", "volumeMounts": "mountPath",
             "volumeDevices": "devicePath", "conditions": "type", "hostAliases": "ip",
             "ownerReferences": "uid", "topologySpreadConstraints": "topologyKey"}
_DELETE = object()


def _merge_key(field_name: str, items: list[Any]) -> str | None:
    if field_name == "ports":
        if items and all(isinstance(i, dict) and "containerPort" in i for i in items):
            return "containerPort"
        if items and all(isinstance(i, dict) and "port" in i for i in items):
            return "port"
        return None
    key = _SMP_KEYS.get(field_name)
    if key and all(isinstance(i, dict) and key in i for i in items):
        return key
    return None


def strategic_merge_patch(target: Any, patch: Any, field_name: str = "") -> Any:
    """Strategic merge patch for the common keyed lists; the rest behaves as a merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: _strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list) and \
                (mk := _merge_key(key, value)) and _merge_key(key, result[key]) == mk:
            result[key] = _merge_list(result[key], value, mk, key)
        else:
            result[key] = _strip_directives(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str, field_name: str,
                merge: Callable[[Any, Any, str], Any] | None = None) -> list[Any]:
    merge = merge or strategic_merge_patch
    out = list(current)
    index = {item.get(key): i for i, item in enumerate(out) if isinstance(item, dict)}
    removed: set[int] = set()
    for item in patch:
        k = item.get(key)
        if k in index:
            merged = merge(out[index[k]], item, field_name)
            if merged is _DELETE:
                removed.add(index[k])
            else:
                out[index[k]] = merged
        elif item.get("$patch") != "delete":
            out.append(_strip_directives(item))
            index[k] = len(out) - 1
    return [item for i, item in enumerate(out) if i not in removed]


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve_parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise ApiError(422, f"JSON patch: path not found: /{'/'.join(parts)}")
    return cur, parts[-1]


def _jp_get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise ApiError(422, f"JSON patch: path not found: /{'/'.join(parts)}")


def _jp_remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise ApiError(422, f"JSON patch: cannot remove a missing path: /{'/'.join(parts)}")


def _jp_add(doc: Any, parts: list[str], value: Any, replace: bool = False) -> Any:
    if not parts:
        return value
    parent, last = _resolve_parent(doc, parts)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, f"JSON patch: cannot replace a missing path: /{'/'.join(parts)}")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise ApiError(422, f"JSON patch: bad list index: /{'/'.join(parts)}")
    else:
        raise ApiError(422, f"JSON patch: parent is not a container: /{'/'.join(parts)}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch; every failure (a failed ``test`` included) is 422, as kopf expects."""
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(422, f"JSON patch: malformed operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "test":
            try:
                actual = _jp_get(doc, parts)
            except ApiError:
                actual = None
            if actual != op.get("value"):
                raise ApiError(422, f"the server rejected our request due to an error in our request: "
                                    f"test failed at {op['path']}: {actual!r} != {op.get('value')!r}")
        elif kind == "add":
            doc = _jp_add(doc, parts, _clone(op.get("value")))
        elif kind == "replace":
            doc = _jp_add(doc, parts, _clone(op.get("value")), replace=True)
        elif kind == "remove":
            _jp_remove(doc, parts)
        elif kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = _jp_remove(doc, src) if kind == "move" else _clone(_jp_get(doc, src))
            doc = _jp_add(doc, parts, value)
        else:
            raise ApiError(422, f"JSON patch: unknown operation {kind!r}")
    return doc


# Server-side apply helpers: leaf paths (lists are leaves) and their removal.
_SSA_SKIP_META = {"name", "namespace", "resourceVersion", "uid", "generation", "creationTimestamp",
                  "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}


def _leaf_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            if prefix == () and key in ("apiVersion", "kind"):
                continue
            if prefix == ("metadata",) and key in _SSA_SKIP_META:
                continue
            paths |= _leaf_paths(value, prefix + (key,))
    elif prefix:
        paths.add(prefix)
    return paths


def _remove_path(obj: JSON, path: tuple[str, ...]) -> None:
    cur: Any = obj
    chain = []
    for key in path[:-1]:
        if not isinstance(cur, dict) or key not in cur:
            return
        chain.append((cur, key))
        cur = cur[key]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, key in reversed(chain):  # prune maps emptied by the removal
        if parent[key] == {}:
            del parent[key]
        else:
            break


def _fields_v1(paths: Iterable[tuple[str, ...]]) -> JSON:
    tree: JSON = {}
    for path in paths:
        cur = tree
        for key in path:
            cur = cur.setdefault(f"f:{key}", {})
    return tree


def _apply_merge(target: Any, applied: Any, field_name: str = "") -> Any:
    if not isinstance(applied, dict):
        return _clone(applied)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in applied.items():
        if isinstance(value, dict):
            result[key] = _apply_merge(result.get(key), value, key)
        elif isinstance(value, list) and isinstance(result.get(key), list) and \
                (mk := _merge_key(key, value)) and _merge_key(key, result[key]) == mk:
            result[key] = _merge_list(result[key], value, mk, key, _apply_merge)
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = _clone(value)
    return result


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

@dataclass
class Fault:
    """Make the next ``count`` matching requests fail.

    verb: get, list, watch, create, update, patch, delete, deletecollection or ``*``.
    resource: the plural (``configmaps``), optionally ``plural/subresource``, or ``*``.
    group/name/namespace: optional narrowing (None matches anything).
    status: the HTTP code to answer (409, 410, 422, 429, 500, 503, ...). On a watch, 410 opens the
    stream and sends one ``ERROR`` event with code 410 (Expired), as a real server does for a too
    old resourceVersion; other codes are answered as HTTP errors.
    action: ``"error"`` (default when status is set) or ``"drop"``: a watch is closed abruptly
    right after its initial events; any other request gets its connection closed, no response.
    """

    verb: str = "*"
    resource: str = "*"
    group: str | None = None
    name: str | None = None
    namespace: str | None = None
    status: int | None = None
    action: str = "error"
    count: int = 1
    message: str | None = None
    fired: int = 0
    id: int = 0

    def matches(self, verb: str, info: ResourceInfo, sub: str | None, namespace: str | None,
                name: str | None) -> bool:
        if self.count <= 0:
            return False
        if self.verb not in ("*", verb):
            return False
        if self.resource != "*":
            plural, _, want_sub = self.resource.partition("/")
            if plural != info.plural or (want_sub and want_sub != (sub or "")):
                return False
        if self.group is not None and self.group != info.group:
            return False
        if self.name is not None and self.name != name:
            return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        return True


class FaultInjector:
    """In-process control of faults; the HTTP API at ``/_specdeploy/...`` calls the same methods."""

    def __init__(self, emulator: "Emulator"):
        self._emulator = emulator
        self._faults: list[Fault] = []
        self._ids = 0
        self.fired: list[JSON] = []

    def add(self, verb: str = "*", resource: str = "*", *, name: str | None = None,
            namespace: str | None = None, group: str | None = None, status: int | None = None,
            action: str | None = None, count: int = 1, message: str | None = None) -> Fault:
        action = action or "error"
        if action not in ("error", "drop"):
            raise ValueError(f"unknown fault action {action!r}")
        if action == "error" and status is None:
            raise ValueError("an error fault needs a status code")
        self._ids += 1
        fault = Fault(verb=verb.lower(), resource=resource, group=group, name=name,
                      namespace=namespace, status=status, action=action, count=int(count),
                      message=message, id=self._ids)
        self._faults.append(fault)
        return fault

    def clear(self) -> None:
        self._faults.clear()

    def pending(self) -> list[JSON]:
        return [vars(f).copy() for f in self._faults if f.count > 0]

    def take(self, verb: str, info: ResourceInfo, sub: str | None, namespace: str | None,
             name: str | None) -> Fault | None:
        for fault in self._faults:
            if fault.matches(verb, info, sub, namespace, name):
                fault.count -= 1
                fault.fired += 1
                self.fired.append({"id": fault.id, "verb": verb, "resource": info.plural,
                                   "name": name, "status": fault.status, "action": fault.action})
                del self.fired[:-1000]
                if fault.count <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def drop_watches(self, resource: str = "*", group: str | None = None) -> int:
        """Close the matching open watch streams abruptly (no final chunk)."""
        return self._emulator._signal_watchers(resource, group, "drop")

    def expire_watches(self, resource: str = "*", group: str | None = None) -> int:
        """Send ``ERROR 410 Expired`` to the matching open watches and end them."""
        return self._emulator._signal_watchers(resource, group, "expire")


# --------------------------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------------------------

class _Watcher:
    __slots__ = ("info", "namespace", "labels", "fields", "queue", "table")

    def __init__(self, info: ResourceInfo, namespace: str | None, labels: Any, fields: Any, table: bool):
        self.info = info
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.table = table
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def matches(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = _meta(obj)
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels is not None and not self.labels(meta.get("labels") or {}):
            return False
        if self.fields is not None and not self.fields(obj):
            return False
        return True

    def translate(self, etype: str, obj: JSON, old: JSON | None) -> str | None:
        """The event type this watcher sees, with selector transitions as ADDED/DELETED."""
        new_ok = self.matches(obj)
        if etype == "ADDED":
            return "ADDED" if new_ok else None
        if etype == "DELETED":
            return "DELETED" if new_ok else None
        old_ok = self.matches(old)
        if new_ok and old_ok:
            return "MODIFIED"
        if new_ok:
            return "ADDED"
        if old_ok:
            return "DELETED"
        return None


class _Bucket:
    """The objects of one resource (all versions share it) with its indexes and event log."""

    __slots__ = ("objects", "by_ns", "log", "compacted", "watchers")

    def __init__(self, log_size: int):
        self.objects: dict[tuple[str | None, str], JSON] = {}
        self.by_ns: dict[str | None, dict[str, JSON]] = collections.defaultdict(dict)
        self.log: collections.deque[tuple[int, str, JSON, JSON | None]] = collections.deque(maxlen=log_size)
        self.compacted = 0  # events with resourceVersion <= this are no longer in the log
        self.watchers: set[_Watcher] = set()


# --------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------

@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with the stand-in shim (see the module docstring)."""

    history_limit: int = 64
    watch_log_size: int = 5000
    seed_namespaces: tuple[str, ...] = ("default", "kube-system", "kube-public")
    _st: Any = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        # NOT calling super(): kmock's fallback reactions are replaced by this class.
        self._requests = collections.deque(maxlen=max(self.history_limit, 0))  # type: ignore[assignment]
        self._st = _State(self)
        for ns in self.seed_namespaces:
            self._st.create(self._st.resources[("", "v1", "namespaces")], None,
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ---- public in-process API (call it on the server's event loop thread) ----

    @property
    def faults(self) -> FaultInjector:
        return self._st.faults

    @property
    def requests_served(self) -> int:
        return self._st.served

    @property
    def history(self) -> collections.deque:
        """The bounded history of recorded requests (kmock ``Request`` objects)."""
        return self._requests  # type: ignore[return-value]

    def resource_info(self, plural: str, group: str = "", version: str | None = None) -> ResourceInfo | None:
        return self._st.find_resource(plural, group, version)

    def get_object(self, plural: str, name: str, namespace: str | None = None, group: str = "") -> JSON | None:
        info = self._st.find_resource(plural, group)
        if info is None:
            return None
        obj = self._st.bucket(info).objects.get((namespace if info.namespaced else None, name))
        return _clone(obj) if obj is not None else None

    def list_objects(self, plural: str, namespace: str | None = None, group: str = "") -> list[JSON]:
        info = self._st.find_resource(plural, group)
        if info is None:
            return []
        return [_clone(o) for o in self._st.select(info, namespace, None, None)]

    def create_object(self, obj: JSON, plural: str | None = None, group: str | None = None) -> JSON:
        """Create an object directly (no HTTP); the resource is guessed from apiVersion/kind."""
        api_version = obj.get("apiVersion", "v1")
        g, _, v = api_version.rpartition("/")
        info = self._st.find_resource(plural, g if group is None else group, v) if plural else \
            self._st.find_kind(g, v, obj.get("kind", ""))
        if info is None:
            raise ApiError(404, f"no resource for {api_version} {obj.get('kind')}")
        namespace = _meta(obj).get("namespace") or ("default" if info.namespaced else None)
        return _clone(self._st.create(info, namespace, _clone(obj)))

    def stats(self) -> JSON:
        st = self._st
        return {"requests_served": st.served, "history_len": len(self._requests),
                "history_limit": self.history_limit,
                "objects": sum(len(b.objects) for b in st.buckets.values()),
                "watchers": sum(len(b.watchers) for b in st.buckets.values()),
                "resource_version": st.rv, "faults_pending": len(st.faults.pending())}

    def close_watches(self) -> int:
        return self._signal_watchers("*", None, "end")

    def _signal_watchers(self, resource: str, group: str | None, signal_: str) -> int:
        count = 0
        for (g, plural), bucket in self._st.buckets.items():
            if resource not in ("*", plural) or (group is not None and group != g):
                continue
            for watcher in list(bucket.watchers):
                watcher.queue.put_nowait(signal_)
                count += 1
        return count

    # ---- the request path ----

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        st = self._st
        st.served += 1
        body = await raw.read()
        path = raw.path.rstrip("/") or "/"
        try:
            if self._requests.maxlen or self._payloads:
                request = self._record(raw, path, body)
                if self._payloads:  # a test added its own kmock reactions: they go first
                    try:
                        return await _kmock_apps.RawHandler._handle(self, request)
                    except NotImplementedError:
                        pass
            return await st.dispatch(raw, path, body)
        except ApiError as e:
            return _json_response(e.status(), e.code)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug in the shim: answer 500 with the reason, keep serving
            logger.exception("stand-in API server failed on %s %s", raw.method, raw.path_qs)
            return _json_response(ApiError(500, f"internal error in the stand-in: {e!r}").status(), 500)

    def _record(self, raw: aiohttp.web.BaseRequest, path: str, body: bytes) -> Any:
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        parsed = _parse_path(path)
        resource = None
        if parsed is not None and parsed.get("plural"):
            resource = kmock.resource(group=parsed["group"], version=parsed["version"], plural=parsed["plural"])
        action = None
        if parsed is not None and parsed.get("plural"):
            if raw.method == "GET":
                action = kmock.action.WATCH if raw.query.get("watch") in ("true", "1") or parsed.get("watch") \
                    else kmock.action.FETCH if parsed.get("name") else kmock.action.LIST
            elif raw.method == "POST" and not parsed.get("name"):
                action = kmock.action.CREATE
            elif raw.method in ("PATCH", "PUT") and parsed.get("name"):
                action = kmock.action.UPDATE
            elif raw.method == "DELETE" and parsed.get("name"):
                action = kmock.action.DELETE
        request = kmock.Request(
            id=self._st.served, method=raw.method, url=raw.url, params=dict(raw.query),
            headers=dict(raw.headers), body=body, text=body.decode("utf-8", "replace"), data=data,
            action=action, resource=resource,
            namespace=(parsed or {}).get("namespace"), name=(parsed or {}).get("name"),
            subresource=(parsed or {}).get("sub"), raw_request=raw)
        self._requests.append(request)
        return request


def _json_response(body: Any, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.Response(body=_dumps(body), status=status, content_type="application/json")


def _parse_path(path: str) -> JSON | None:
    """Split a Kubernetes API path; None for non-resource paths."""
    parts = [p for p in path.strip("/").split("/") if p != ""]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":
        watch, rest = True, rest[1:]
    result: JSON = {"group": group, "version": version, "watch": watch, "namespace": None,
                    "plural": None, "name": None, "sub": None}
    if not rest:
        return result
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        result["namespace"], rest = rest[1], rest[2:]
    result["plural"] = rest[0]
    if len(rest) > 1:
        result["name"] = urllib.parse.unquote(rest[1])
    if len(rest) > 2:
        result["sub"] = "/".join(rest[2:])
    return result


class _State:
    """All mutable state and the Kubernetes semantics; single-threaded on the server's loop."""

    def __init__(self, emulator: Emulator):
        self.emulator = emulator
        self.served = 0
        self.rv = 0
        self.resources: dict[tuple[str, str, str], ResourceInfo] = {}
        self.buckets: dict[tuple[str, str], _Bucket] = {}
        self.uids: dict[str, tuple[tuple[str, str], str | None, str]] = {}  # uid -> bucket key, ns, name
        self.children: dict[str, set[str]] = collections.defaultdict(set)  # owner uid -> child uids
        self.ns_counts: collections.Counter[str] = collections.Counter()
        self.managed: dict[str, dict[str, set[tuple[str, ...]]]] = {}  # uid -> apply manager -> paths
        self.crd_versions: dict[str, list[tuple[str, str, str]]] = {}  # CRD name -> resource keys
        self.faults = FaultInjector(emulator)
        for g, v, plural, kind, short, namespaced, status, scale, cats in _BUILTINS:
            self.register(ResourceInfo(group=g, version=v, plural=plural, kind=kind, namespaced=namespaced,
                                       short_names=list(short), status=status, scale=scale,
                                       categories=list(cats), singular=kind.lower()))

    # ---- resources ----

    def register(self, info: ResourceInfo) -> None:
        self.resources[(info.group, info.version, info.plural)] = info
        self.bucket(info)

    def bucket(self, info: ResourceInfo) -> _Bucket:
        bucket = self.buckets.get(info.storage_key)
        if bucket is None:
            bucket = self.buckets[info.storage_key] = _Bucket(self.emulator.watch_log_size)
        return bucket

    def find_resource(self, plural: str | None, group: str = "", version: str | None = None) -> ResourceInfo | None:
        for (g, v, p), info in self.resources.items():
            if p == plural and g == group and (version is None or v == version):
                return info
        return None

    def find_kind(self, group: str, version: str, kind: str) -> ResourceInfo | None:
        for (g, v, _), info in self.resources.items():
            if g == group and v == version and info.kind == kind:
                return info
        return None

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    # ---- reading ----

    def select(self, info: ResourceInfo, namespace: str | None, labels: Any, fields: Any) -> list[JSON]:
        bucket = self.bucket(info)
        if info.namespaced and namespace is not None:
            items = bucket.by_ns.get(namespace, {})
            objs = [items[k] for k in sorted(items)]
        else:
            objs = [bucket.objects[k] for k in sorted(bucket.objects, key=lambda k: (k[0] or "", k[1]))]
        if labels is not None:
            objs = [o for o in objs if labels(_meta(o).get("labels") or {})]
        if fields is not None:
            objs = [o for o in objs if fields(o)]
        return objs

    def get(self, info: ResourceInfo, namespace: str | None, name: str) -> JSON:
        obj = self.bucket(info).objects.get((namespace if info.namespaced else None, name))
        if obj is None:
            raise ApiError(404, f'{info.plural}{"." + info.group if info.group else ""} "{name}" not found',
                           details={"name": name, "group": info.group, "kind": info.plural})
        return obj

    # ---- writing: the one place where objects change, events go out and the GC runs ----

    def _emit(self, info: ResourceInfo, etype: str, obj: JSON, old: JSON | None, rv: int) -> None:
        bucket = self.bucket(info)
        if len(bucket.log) == bucket.log.maxlen and bucket.log:
            bucket.compacted = bucket.log[0][0]
        bucket.log.append((rv, etype, obj, old))
        for watcher in bucket.watchers:
            seen = watcher.translate(etype, obj, old)
            if seen is not None:
                watcher.queue.put_nowait((seen, obj))

    def _store(self, info: ResourceInfo, obj: JSON) -> None:
        meta = obj["metadata"]
        bucket = self.bucket(info)
        ns = meta.get("namespace") if info.namespaced else None
        bucket.objects[(ns, meta["name"])] = obj
        bucket.by_ns[ns][meta["name"]] = obj

    def _unstore(self, info: ResourceInfo, obj: JSON) -> None:
        meta = obj["metadata"]
        bucket = self.bucket(info)
        ns = meta.get("namespace") if info.namespaced else None
        bucket.objects.pop((ns, meta["name"]), None)
        items = bucket.by_ns.get(ns)
        if items is not None:
            items.pop(meta["name"], None)
            if not items:
                del bucket.by_ns[ns]

    def _index_owners(self, uid: str, old: JSON | None, new: JSON | None) -> None:
        old_owners = {r.get("uid") for r in (_meta(old).get("ownerReferences") or [])} if old else set()
        new_owners = {r.get("uid") for r in (_meta(new).get("ownerReferences") or [])} if new else set()
        for owner in old_owners - new_owners:
            self.children.get(owner, set()).discard(uid)
            if owner in self.children and not self.children[owner]:
                del self.children[owner]
        for owner in new_owners - old_owners:
            if owner:
                self.children[owner].add(uid)

    def _check_namespace(self, info: ResourceInfo, namespace: str | None) -> None:
        if not info.namespaced:
            return
        if not namespace:
            raise ApiError(400, "the namespace of the object is not set and the request has none")
        ns = self.buckets[("", "namespaces")].objects.get((None, namespace))
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found',
                           details={"name": namespace, "kind": "namespaces"})
        if _meta(ns).get("deletionTimestamp"):
            raise ApiError(403, f"unable to create new content in namespace {namespace} because it is being terminated",
                           reason="Forbidden")

    def _validate(self, info: ResourceInfo, obj: JSON) -> None:
        if not isinstance(obj, dict):
            raise ApiError(400, "the request body is not a JSON object")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind and kind != info.kind:
            raise ApiError(400, f"the kind {kind!r} does not match the resource {info.plural!r} ({info.kind})")
        if api_version and api_version.rpartition("/")[0] != info.group:
            raise ApiError(400, f"the apiVersion {api_version!r} does not match the group {info.group!r}")
        name = _meta(obj).get("name")
        if not name:
            raise ApiError(422, f"{info.kind}.{info.group or 'core'} is invalid: metadata.name: Required value",
                           details={"kind": info.kind, "causes": [{"field": "metadata.name", "reason": "FieldValueRequired"}]})
        if len(name) > 253 or not _NAME_RE.match(name):
            raise ApiError(422, f'{info.kind} "{name}" is invalid: metadata.name: Invalid value: {name!r}: '
                                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                "characters, '-' or '.'")

    def create(self, info: ResourceInfo, namespace: str | None, obj: JSON, dry_run: bool = False,
               field_manager: str | None = None, applied: JSON | None = None) -> JSON:
        if not isinstance(obj, dict):
            raise ApiError(400, "the request body is not a JSON object")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if info.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            namespace = namespace or body_ns
            meta["namespace"] = namespace
            self._check_namespace(info, namespace)
        else:
            meta.pop("namespace", None)
            namespace = None
        bucket = self.bucket(info)
        if not meta.get("name") and meta.get("generateName"):
            for _ in range(100):
                name = meta["generateName"] + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                if (namespace, name) not in bucket.objects:
                    meta["name"] = name
                    break
        self._validate(info, obj)
        name = meta["name"]
        if (namespace, name) in bucket.objects:
            raise ApiError(409, f'{info.plural}{"." + info.group if info.group else ""} "{name}" already exists',
                           reason="AlreadyExists", details={"name": name, "group": info.group, "kind": info.plural})
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(key, None)
        if info.status:
            obj.pop("status", None)  # a create ignores .status when it is a subresource
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta["generation"] = 1
        self._defaults(info, obj)
        if field_manager and applied is not None:
            paths = _leaf_paths(applied)
            meta["managedFields"] = [self._managed_entry(info, field_manager, paths)]
        if dry_run:
            return obj
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        self._store(info, obj)
        self.uids[meta["uid"]] = (info.storage_key, namespace, name)
        self._index_owners(meta["uid"], None, obj)
        if namespace:
            self.ns_counts[namespace] += 1
        if field_manager and applied is not None:
            self.managed[meta["uid"]] = {field_manager: _leaf_paths(applied)}
        self._emit(info, "ADDED", obj, None, rv)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(obj)
        return obj

    def _defaults(self, info: ResourceInfo, obj: JSON) -> None:
        if info.storage_key == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            obj["status"] = self._crd_status(obj)

    def _managed_entry(self, info: ResourceInfo, manager: str, paths: Iterable[tuple[str, ...]],
                       sub: str | None = None) -> JSON:
        entry = {"manager": manager, "operation": "Apply", "apiVersion": info.api_version, "time": _now(),
                 "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
        if sub:
            entry["subresource"] = sub
        return entry

    def update(self, info: ResourceInfo, old: JSON, new: JSON, sub: str | None = None,
               dry_run: bool = False, check_rv: bool = True, managed_fields: list[JSON] | None = None) -> JSON:
        """Store ``new`` in place of ``old``: immutables kept, status isolation, generation, GC."""
        if not isinstance(new, dict):
            raise ApiError(400, "the request body is not a JSON object")
        old_meta = old["metadata"]
        new_meta = new.get("metadata")
        if not isinstance(new_meta, dict):
            new_meta = new["metadata"] = {}
        if new_meta.get("name") not in (None, old_meta["name"]):
            raise ApiError(400, f"the name of the object ({new_meta.get('name')}) does not match the name on the URL ({old_meta['name']})")
        if info.namespaced and new_meta.get("namespace") not in (None, old_meta.get("namespace")):
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        if check_rv and new_meta.get("resourceVersion") not in (None, "", old_meta["resourceVersion"]):
            raise ApiError(409, f'Operation cannot be fulfilled on {info.plural}{"." + info.group if info.group else ""} '
                                f'"{old_meta["name"]}": the object has been modified; please apply your changes '
                                "to the latest version and try again", reason="Conflict",
                           details={"name": old_meta["name"], "group": info.group, "kind": info.plural})
        kind, api_version = new.get("kind"), new.get("apiVersion")
        if kind and kind != info.kind:
            raise ApiError(400, f"the kind {kind!r} does not match the resource {info.plural!r}")
        if api_version and api_version.rpartition("/")[0] != info.group:
            raise ApiError(400, f"the apiVersion {api_version!r} does not match the group {info.group!r}")
        if sub == "status":
            # Only .status changes through the status subresource.
            result = {k: v for k, v in old.items() if k != "status"}
            if "status" in new:
                result["status"] = new["status"]
            result["metadata"] = dict(old_meta)
        else:
            result = dict(new)
            if info.status:
                result.pop("status", None)
                if "status" in old:
                    result["status"] = old["status"]
            for key in _FIELDS_IMMUTABLE:
                if key in old_meta:
                    new_meta[key] = old_meta[key]
                else:
                    new_meta.pop(key, None)
            if "managedFields" in old_meta:
                new_meta["managedFields"] = old_meta["managedFields"]
            else:
                new_meta.pop("managedFields", None)
            result["metadata"] = new_meta
        result["apiVersion"], result["kind"] = old["apiVersion"], old["kind"]
        meta = result["metadata"]
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise ApiError(422, f"{info.kind} \"{old_meta['name']}\" is invalid: metadata.finalizers: "
                                    f"Forbidden: no new finalizers can be added if the object is being deleted, "
                                    f"found new finalizers {sorted(added)!r}")
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions") and sub != "status":
            result["status"] = self._crd_status(result)
        if _content(result, info) != _content(old, info):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if result == old:
            return old  # a no-op write: no new resourceVersion, no event (as the real server)
        if managed_fields is not None:
            meta["managedFields"] = managed_fields
        if dry_run:
            return result
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._index_owners(meta["uid"], old, result)
            return self.remove(info, result)
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        self._store(info, result)
        self._index_owners(meta["uid"], old, result)
        self._emit(info, "MODIFIED", result, old, rv)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_changed(result)
        return result

    def remove(self, info: ResourceInfo, obj: JSON) -> JSON:
        """Remove an object for good (no finalizers left), then collect its dependents."""
        meta = obj["metadata"]
        uid = meta["uid"]
        self._unstore(info, obj)
        self.uids.pop(uid, None)
        self.managed.pop(uid, None)
        self._index_owners(uid, obj, None)
        ns = meta.get("namespace") if info.namespaced else None
        rv = self.next_rv()
        obj = dict(obj, metadata=dict(meta, resourceVersion=str(rv)))
        self._emit(info, "DELETED", obj, None, rv)
        if ns:
            self.ns_counts[ns] -= 1
            if self.ns_counts[ns] <= 0:
                del self.ns_counts[ns]
                self._namespace_maybe_gone(ns)
        if info.storage_key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._crd_removed(obj)
        if info.storage_key == ("", "namespaces"):
            self.ns_counts.pop(meta["name"], None)
        # Garbage collection of dependents (background), then unblock foreground owners.
        for child_uid in sorted(self.children.pop(uid, set())):
            self._collect_child(child_uid, uid)
        for ref in meta.get("ownerReferences") or []:
            self._owner_maybe_done(ref.get("uid"))
        return obj

    def _lookup_uid(self, uid: str | None) -> tuple[ResourceInfo, JSON] | None:
        where = self.uids.get(uid or "")
        if where is None:
            return None
        key, ns, name = where
        bucket = self.buckets.get(key)
        obj = bucket.objects.get((ns, name)) if bucket else None
        if obj is None:
            return None
        info = next((i for i in self.resources.values() if i.storage_key == key), None)
        return (info, obj) if info else None

    def _collect_child(self, child_uid: str, owner_uid: str) -> None:
        found = self._lookup_uid(child_uid)
        if found is None:
            return
        info, child = found
        refs = _meta(child).get("ownerReferences") or []
        remaining = [r for r in refs if r.get("uid") != owner_uid]
        if any(self._lookup_uid(r.get("uid")) is not None for r in remaining):
            new = _clone(child)
            new["metadata"]["ownerReferences"] = remaining
            self.update(info, child, new, check_rv=False)
        else:
            self.delete(info, child, "Background")

    def _owner_maybe_done(self, owner_uid: str | None) -> None:
        found = self._lookup_uid(owner_uid)
        if found is None:
            return
        info, owner = found
        meta = _meta(owner)
        if meta.get("deletionTimestamp") and "foregroundDeletion" in (meta.get("finalizers") or []) \
                and not self.children.get(owner_uid or ""):
            new = _clone(owner)
            new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
            self.update(info, owner, new, check_rv=False)

    def _namespace_maybe_gone(self, ns: str) -> None:
        nsobj = self.buckets[("", "namespaces")].objects.get((None, ns))
        if nsobj is not None and _meta(nsobj).get("deletionTimestamp") and not self.ns_counts.get(ns):
            self.remove(self.resources[("", "v1", "namespaces")], nsobj)

    def delete(self, info: ResourceInfo, obj: JSON, policy: str | None = None,
               preconditions: JSON | None = None, dry_run: bool = False) -> JSON:
        meta = obj["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise ApiError(409, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                                f"ResourceVersion in object meta: {meta['resourceVersion']}")
        policy = policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError(400, f"invalid propagationPolicy {policy!r}")
        if dry_run:
            return obj
        uid = meta["uid"]
        if policy == "Orphan":
            for child_uid in sorted(self.children.get(uid, set())):
                found = self._lookup_uid(child_uid)
                if found:
                    cinfo, child = found
                    new = _clone(child)
                    new["metadata"]["ownerReferences"] = [r for r in new["metadata"].get("ownerReferences") or []
                                                          if r.get("uid") != uid]
                    if not new["metadata"]["ownerReferences"]:
                        del new["metadata"]["ownerReferences"]
                    self.update(cinfo, child, new, check_rv=False)
            self.children.pop(uid, None)
        finalizers = list(meta.get("finalizers") or [])
        is_namespace = info.storage_key == ("", "namespaces")
        if policy == "Foreground" and self.children.get(uid) and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if is_namespace and self.ns_counts.get(meta["name"]):
            if not meta.get("deletionTimestamp"):
                new = _clone(obj)
                new["metadata"]["deletionTimestamp"] = _now()
                new["status"] = {"phase": "Terminating"}
                self._mark_deleting(info, obj, new, finalizers)
            for bucket_key, bucket in list(self.buckets.items()):
                cinfo = next((i for i in self.resources.values() if i.storage_key == bucket_key), None)
                for _, child in sorted(bucket.by_ns.get(meta["name"], {}).items()):
                    if cinfo is not None and not _meta(child).get("deletionTimestamp"):
                        self.delete(cinfo, child, "Background")
            self._namespace_maybe_gone(meta["name"])
            current = self.buckets[("", "namespaces")].objects.get((None, meta["name"]))
            return current if current is not None else obj
        if meta.get("deletionTimestamp"):
            return obj  # already terminating: nothing more to do
        if finalizers:
            new = _clone(obj)
            result = self._mark_deleting(info, obj, new, finalizers)
            if policy == "Foreground":
                for child_uid in sorted(self.children.get(uid, set())):
                    found = self._lookup_uid(child_uid)
                    if found and not _meta(found[1]).get("deletionTimestamp"):
                        self.delete(found[0], found[1], "Background")
                self._owner_maybe_done(uid)
            return result
        return self.remove(info, obj)

    def _mark_deleting(self, info: ResourceInfo, old: JSON, new: JSON, finalizers: list[str]) -> JSON:
        meta = new["metadata"]
        meta["deletionTimestamp"] = meta.get("deletionTimestamp") or _now()
        meta["deletionGracePeriodSeconds"] = 0
        meta["generation"] = int(meta.get("generation", 1)) + 1
        if finalizers:
            meta["finalizers"] = finalizers
        rv = self.next_rv()
        meta["resourceVersion"] = str(rv)
        self._store(info, new)
        self._emit(info, "MODIFIED", new, old, rv)
        return new

    # ---- CRDs ----

    @staticmethod
    def _crd_status(crd: JSON) -> JSON:
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", (names.get("kind") or "").lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        now = _now()
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")] or \
            [v["name"] for v in (spec.get("versions") or [])[:1]]
        return {"acceptedNames": names, "storedVersions": storage, "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now}]}

    def _crd_changed(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural, kind = spec.get("group", ""), names.get("plural", ""), names.get("kind", "")
        old_keys = set(self.crd_versions.get(crd["metadata"]["name"], []))
        new_keys: list[tuple[str, str, str]] = []
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            subs = version.get("subresources") or spec.get("subresources") or {}
            columns = version.get("additionalPrinterColumns") or spec.get("additionalPrinterColumns")
            info = ResourceInfo(
                group=group, version=version["name"], plural=plural, kind=kind,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or kind.lower(), short_names=list(names.get("shortNames") or []),
                categories=list(names.get("categories") or []), status="status" in subs,
                scale=subs.get("scale") if "scale" in subs else None, columns=columns, custom=True)
            self.register(info)
            new_keys.append((group, version["name"], plural))
        for key in old_keys - set(new_keys):
            self.resources.pop(key, None)
        self.crd_versions[crd["metadata"]["name"]] = new_keys

    def _crd_removed(self, crd: JSON) -> None:
        keys = self.crd_versions.pop(crd["metadata"]["name"], [])
        infos = [self.resources[k] for k in keys if k in self.resources]
        if infos:
            info = infos[0]
            bucket = self.bucket(info)
            for obj in list(bucket.objects.values()):
                self.remove(info, obj)
            for watcher in list(bucket.watchers):
                watcher.queue.put_nowait("end")
            self.buckets.pop(info.storage_key, None)
        for key in keys:
            self.resources.pop(key, None)

    # ---- HTTP dispatch ----

    async def dispatch(self, raw: aiohttp.web.BaseRequest, path: str, body: bytes) -> aiohttp.web.StreamResponse:
        method = raw.method
        if path.startswith("/_specdeploy/"):
            return self.control(method, path, body)
        if method == "GET":
            if path == "/version":
                return _json_response(SERVER_VERSION)
            if path in ("/healthz", "/livez", "/readyz"):
                return aiohttp.web.Response(text="ok")
            if path == "/":
                return _json_response({"paths": sorted(self.discovery_paths())})
            if path == "/api":
                host = raw.host or "127.0.0.1"
                return _json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
            if path == "/apis":
                return _json_response(self.api_group_list())
            if path.startswith("/openapi"):
                raise ApiError(404, "the stand-in serves no OpenAPI (use kubectl --validate=false)")
            parts = path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "apis":
                group = self.api_group(parts[1])
                if group is None:
                    raise ApiError(404, "the server could not find the requested resource")
                return _json_response(group)
        parsed = _parse_path(path)
        if parsed is None:
            raise ApiError(404, "the server could not find the requested resource")
        if parsed["plural"] is None:
            if method != "GET":
                raise ApiError(405, f"{method} is not allowed on {path}")
            return _json_response(self.resource_list(parsed["group"], parsed["version"]))
        info = self.resources.get((parsed["group"], parsed["version"], parsed["plural"]))
        if info is None:
            raise ApiError(404, "the server could not find the requested resource")
        return await self.resource_request(raw, info, parsed, body)

    def control(self, method: str, path: str, body: bytes) -> aiohttp.web.Response:
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            raise ApiError(400, "the body is not JSON")
        if path == "/_specdeploy/faults":
            if method == "GET":
                return _json_response({"pending": self.faults.pending(), "fired": self.faults.fired})
            if method == "DELETE":
                self.faults.clear()
                return _json_response({"pending": []})
            if method == "POST":
                specs = data if isinstance(data, list) else [data]
                try:
                    added = [vars(self.faults.add(**spec)).copy() for spec in specs]
                except (TypeError, ValueError) as e:
                    raise ApiError(400, f"bad fault: {e}")
                return _json_response({"added": added}, 201)
        if path in ("/_specdeploy/watches/drop", "/_specdeploy/watches/expire") and method == "POST":
            fn = self.faults.drop_watches if path.endswith("drop") else self.faults.expire_watches
            n = fn(data.get("resource", "*"), data.get("group"))
            return _json_response({"watches": n})
        if path == "/_specdeploy/stats" and method == "GET":
            return _json_response(self.emulator.stats())
        raise ApiError(404, f"unknown control endpoint {method} {path}")

    # ---- discovery ----

    def discovery_paths(self) -> set[str]:
        paths = {"/api", "/api/v1", "/apis", "/version", "/healthz", "/livez", "/readyz"}
        for g, v, _ in self.resources:
            if g:
                paths |= {f"/apis/{g}", f"/apis/{g}/{v}"}
        return paths

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for g, v, _ in self.resources:
            if g and v not in groups.setdefault(g, []):
                groups[g].append(v)
        for versions in groups.values():
            versions.sort(key=_version_priority)
        return groups

    def api_group(self, group: str) -> JSON | None:
        versions = self._group_versions().get(group)
        if not versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}

    def api_group_list(self) -> JSON:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self.api_group(g) for g in sorted(self._group_versions())]}

    def resource_list(self, group: str, version: str) -> JSON:
        infos = [i for (g, v, _), i in sorted(self.resources.items()) if g == group and v == version]
        if not infos:
            raise ApiError(404, "the server could not find the requested resource")
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [entry for info in infos for entry in info.discovery()]}

    # ---- resource requests ----

    async def resource_request(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, parsed: JSON,
                               body: bytes) -> aiohttp.web.StreamResponse:
        method, q = raw.method, raw.query
        ns, name, sub = parsed["namespace"], parsed["name"], parsed["sub"]
        if info.namespaced is False and ns is not None:
            raise ApiError(404, "the server could not find the requested resource")
        if sub == "log" and info.plural == "pods" and method == "GET" and name:  # proxied to the node's kubelet
            pod, nodes = self.get(info, ns, name), self.find_resource("nodes")
            node = self.bucket(nodes).objects.get((None, (pod.get("spec") or {}).get("nodeName"))) if nodes else None
            return await podlogs.proxy(raw, pod, node)
        if sub is not None and not ((sub == "status" and info.status) or (sub == "scale" and info.scale is not None)
                                    or (sub == "finalize" and info.plural == "namespaces")):
            raise ApiError(404, "the server could not find the requested resource")
        if info.namespaced and name is not None and ns is None and method != "POST":
            raise ApiError(404, "the server could not find the requested resource")
        watch = parsed["watch"] or q.get("watch") in ("true", "1")
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise ApiError(405, f"method {method} is not allowed")
        field_name = None
        if name is None:
            fs = q.get("fieldSelector") or ""
            m = re.search(r"(?:^|,)metadata\.name==?([^,]*)", fs)
            field_name = m.group(1) if m else None
        fault = self.faults.take(verb, info, sub, ns, name or field_name)
        if fault is not None and not (verb == "watch" and (fault.action == "drop" or fault.status == 410)):
            if fault.action == "drop":
                if raw.transport is not None:
                    raw.transport.abort()
                raise asyncio.CancelledError()
            raise ApiError(fault.status or 500, fault.message or f"injected fault #{fault.id} ({fault.status})",
                           details={"name": name or "", "kind": info.plural, "retryAfterSeconds": 1}
                           if fault.status in (429, 503) else {"name": name or "", "kind": info.plural})
        dry_run = "All" in q.getall("dryRun", [])
        if verb == "watch":
            return await self.watch(raw, info, ns, name, fault)
        if verb == "list":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            items = self.select(info, ns, labels, fields)
            if _wants_table(raw):
                return _json_response(self.table(info, items, q.get("includeObject")))
            return _json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                                   "metadata": {"resourceVersion": str(self.rv)},
                                   "items": [self._serve(info, o) for o in items]})
        if verb == "get":
            obj = self.get(info, ns, name)
            if sub == "scale":
                return _json_response(self.scale_of(info, obj))
            if _wants_table(raw):
                return _json_response(self.table(info, [obj], q.get("includeObject")))
            return _json_response(self._serve(info, obj))
        data = _parse_body(raw, body) if body else None
        if verb == "create":
            if name is not None:
                raise ApiError(405, "POST to a named object is not allowed")
            if not isinstance(data, dict):
                raise ApiError(400, "the request body is not a JSON object")
            obj = self.create(info, ns, data, dry_run=dry_run)
            return _json_response(self._serve(info, obj), 201)
        if verb == "deletecollection":
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
            opts = data if isinstance(data, dict) else {}
            items = self.select(info, ns, labels, fields)
            deleted = [self.delete(info, o, opts.get("propagationPolicy") or q.get("propagationPolicy"),
                                   dry_run=dry_run) for o in items]
            return _json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                                   "metadata": {"resourceVersion": str(self.rv)},
                                   "items": [self._serve(info, o) for o in deleted]})
        if verb == "delete":
            obj = self.get(info, ns, name)
            opts = data if isinstance(data, dict) else {}
            if "All" in (opts.get("dryRun") or []):
                dry_run = True
            result = self.delete(info, obj, opts.get("propagationPolicy") or q.get("propagationPolicy"),
                                 opts.get("preconditions"), dry_run=dry_run)
            if info.custom or _meta(result).get("deletionTimestamp") and self._exists(info, result):
                return _json_response(self._serve(info, result))
            return _json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                   "details": {"name": name, "group": info.group, "kind": info.plural,
                                               "uid": _meta(obj).get("uid")}})
        content_type = (raw.headers.get("Content-Type") or "").split(";")[0].strip()
        if verb == "update":
            if not isinstance(data, dict):
                raise ApiError(400, "the request body is not a JSON object")
            old = self.get(info, ns, name)
            if sub == "scale":
                return _json_response(self.set_scale(info, old, data, dry_run))
            result = self.update(info, old, data, sub, dry_run=dry_run)
            return _json_response(self._serve(info, result))
        # PATCH
        if content_type == "application/apply-patch+yaml":
            return self.apply(raw, info, ns, name, sub, body, dry_run)
        old = self.get(info, ns, name)
        base = self.scale_of(info, old) if sub == "scale" else old
        if content_type == "application/json-patch+json":
            patched = json_patch(base, data)
        elif content_type == "application/merge-patch+json":
            patched = merge_patch(_clone(base), data)
        elif content_type == "application/strategic-merge-patch+json":
            if info.custom:
                raise ApiError(415, "the body of the request was in an unknown format - accepted media types include: "
                                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
            patched = strategic_merge_patch(_clone(base), data)
        else:
            raise ApiError(415, f"unsupported patch content type {content_type!r}")
        if not isinstance(patched, dict):
            raise ApiError(422, "the patched object is not a JSON object")
        if sub == "scale":
            return _json_response(self.set_scale(info, old, patched, dry_run))
        result = self.update(info, old, patched, sub, dry_run=dry_run)
        return _json_response(self._serve(info, result))

    def _exists(self, info: ResourceInfo, obj: JSON) -> bool:
        meta = _meta(obj)
        return (meta.get("namespace") if info.namespaced else None, meta.get("name")) in self.bucket(info).objects

    @staticmethod
    def _serve(info: ResourceInfo, obj: JSON) -> JSON:
        if obj.get("apiVersion") != info.api_version:
            obj = dict(obj, apiVersion=info.api_version)
        return obj

    def apply(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, ns: str | None, name: str,
              sub: str | None, body: bytes, dry_run: bool) -> aiohttp.web.Response:
        manager = raw.query.get("fieldManager")
        if not manager:
            raise ApiError(400, "PATCH with apply-patch+yaml requires the fieldManager parameter")
        try:
            applied = yaml.safe_load(body)
        except yaml.YAMLError as e:
            raise ApiError(400, f"the apply body is not YAML/JSON: {e}")
        if not isinstance(applied, dict) or not applied.get("apiVersion") or not applied.get("kind"):
            raise ApiError(400, "an applied configuration needs apiVersion and kind")
        meta = applied.setdefault("metadata", {})
        if meta.get("name") not in (None, name):
            raise ApiError(400, "the name in the body does not match the name on the URL")
        meta["name"] = name
        if info.namespaced and ns:
            meta.setdefault("namespace", ns)
        bucket = self.bucket(info)
        old = bucket.objects.get((ns if info.namespaced else None, name))
        if old is None:
            if sub is not None:
                raise ApiError(404, f'{info.plural} "{name}" not found')
            obj = self.create(info, ns, _clone(applied), dry_run=dry_run, field_manager=manager, applied=applied)
            return _json_response(self._serve(info, obj), 201)
        uid = old["metadata"]["uid"]
        new_paths = _leaf_paths({"status": applied.get("status")} if sub == "status" else
                                {k: v for k, v in applied.items() if not (info.status and k == "status")})
        owners = self.managed.get(uid, {})
        prev_paths = owners.get(manager, set())
        others = set().union(*[p for m, p in owners.items() if m != manager]) if owners else set()
        merged = _apply_merge(_clone(old), applied)
        for path in prev_paths - new_paths - others:
            _remove_path(merged, path)
        new_owners = dict(owners)
        new_owners[manager] = new_paths
        entries = [self._managed_entry(info, m, p) for m, p in sorted(new_owners.items())]
        result = self.update(info, old, merged, sub, dry_run=dry_run, check_rv=True, managed_fields=entries)
        if not dry_run:
            self.managed[uid] = new_owners
        return _json_response(self._serve(info, result))

    def scale_of(self, info: ResourceInfo, obj: JSON) -> JSON:
        paths = info.scale or {}
        status: JSON = {"replicas": jsonpath(obj, paths.get("statusReplicasPath", ".status.replicas")) or 0}
        selector = jsonpath(obj, paths.get("labelSelectorPath", "")) if paths.get("labelSelectorPath") else None
        if isinstance(selector, dict):
            selector = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
        if selector:
            status["selector"] = selector
        meta = _meta(obj)
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": jsonpath(obj, paths.get("specReplicasPath", ".spec.replicas")) or 0},
                "status": status}

    def set_scale(self, info: ResourceInfo, old: JSON, scale: JSON, dry_run: bool) -> JSON:
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Scale.spec.replicas must be a non-negative integer")
        rv = _meta(scale).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified; please apply your changes to the latest version")
        new = _clone(old)
        _set_path(new, (info.scale or {}).get("specReplicasPath", ".spec.replicas"), replicas)
        result = self.update(info, old, new, None, dry_run=dry_run, check_rv=False)
        return self.scale_of(info, result)

    # ---- tables for kubectl get ----

    def table(self, info: ResourceInfo, objs: list[JSON], include: str | None) -> JSON:
        name_col = {"name": "Name", "type": "string", "format": "name", "priority": 0,
                    "description": "Name must be unique within a namespace."}
        columns: list[JSON] = [name_col]
        getters: list[Callable[[JSON], Any]] = [lambda o: _meta(o).get("name", "")]
        if info.custom and info.columns:
            for col in info.columns:
                columns.append({"name": col.get("name", ""), "type": col.get("type", "string"),
                                "format": col.get("format", ""), "priority": col.get("priority", 0),
                                "description": col.get("description", "")})
                getters.append(lambda o, c=col: _cell(jsonpath(o, c.get("jsonPath", "")), c.get("type", "string")))
            age = False
        else:
            for cname, ctype, fn in _BUILTIN_COLUMNS.get(info.storage_key, []):
                columns.append({"name": cname, "type": ctype, "format": "", "priority": 0, "description": cname})
                getters.append(fn)
            age = True
        if age:
            columns.append({"name": "Age", "type": "string", "format": "", "priority": 0,
                            "description": "CreationTimestamp is a timestamp of when the object was created."})
            getters.append(lambda o: _human_age(_meta(o).get("creationTimestamp")))
        rows = []
        for obj in objs:
            row: JSON = {"cells": [g(obj) for g in getters]}
            if include == "Object":
                row["object"] = self._serve(info, obj)
            elif include != "None":
                row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": _meta(obj)}
            rows.append(row)
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": str(self.rv)}, "columnDefinitions": columns, "rows": rows}

    # ---- watch ----

    async def watch(self, raw: aiohttp.web.BaseRequest, info: ResourceInfo, ns: str | None, name: str | None,
                    fault: Fault | None) -> aiohttp.web.StreamResponse:
        q = raw.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = parse_field_selector(q.get("fieldSelector"))
        if name is not None:  # the legacy /watch/.../<name> form
            by_name = lambda o: _meta(o).get("name") == name  # noqa: E731
            fields = (lambda o: by_name(o) and fields(o)) if fields else by_name  # type: ignore[misc]
        watcher = _Watcher(info, ns if info.namespaced else None, labels, fields, _wants_table(raw))
        rv_text = q.get("resourceVersion") or ""
        send_initial = q.get("sendInitialEvents") == "true"
        bucket = self.bucket(info)
        expired = fault is not None and fault.status == 410
        initial: list[tuple[str, JSON]] = []
        # Snapshot and subscription in one synchronous step: no event can fall in between.
        if not expired:
            if rv_text in ("", "0") or send_initial:
                initial = [("ADDED", o) for o in self.select(info, watcher.namespace, labels, fields)]
            else:
                try:
                    since = int(rv_text)
                except ValueError:
                    raise ApiError(400, f"invalid resourceVersion {rv_text!r}")
                if since < bucket.compacted:
                    expired = True
                else:
                    for rv, etype, obj, old in bucket.log:
                        if rv > since:
                            seen = watcher.translate(etype, obj, old)
                            if seen is not None:
                                initial.append((seen, obj))
            if not expired:
                bucket.watchers.add(watcher)
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                                   "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(raw)
            if expired:
                await response.write(self._error_event(410, "Expired", f"too old resource version: {rv_text}"))
                await response.write_eof()
                return response
            for etype, obj in initial:
                await response.write(self._event(watcher, etype, obj))
            if send_initial:
                await response.write(_dumps({"type": "BOOKMARK", "object": {
                    "kind": info.kind, "apiVersion": info.api_version, "metadata": {
                        "resourceVersion": str(self.rv), "annotations": {"k8s.io/initial-events-end": "true"}}}}) + b"\n")
            if fault is not None and fault.action == "drop":
                self._abort(raw)
                return response
            timeout = q.get("timeoutSeconds")
            deadline = time.monotonic() + float(timeout) if timeout else None
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
                if item == "end":
                    break
                if item == "drop":
                    self._abort(raw)
                    return response
                if item == "expire":
                    await response.write(self._error_event(410, "Expired", "the watch was expired by a fault"))
                    break
                chunks = [self._event(watcher, *item)]
                while not watcher.queue.empty() and isinstance(watcher.queue._queue[0], tuple):  # type: ignore[attr-defined]
                    chunks.append(self._event(watcher, *watcher.queue.get_nowait()))
                await response.write(b"".join(chunks))
            await response.write_eof()
            return response
        except (ConnectionResetError, ConnectionError):
            return response
        finally:
            bucket.watchers.discard(watcher)

    @staticmethod
    def _abort(raw: aiohttp.web.BaseRequest) -> None:
        if raw.transport is not None:
            raw.transport.abort()

    def _event(self, watcher: _Watcher, etype: str, obj: JSON) -> bytes:
        if watcher.table:
            payload = self.table(watcher.info, [obj], "Object")
        else:
            payload = self._serve(watcher.info, obj)
        return _dumps({"type": etype, "object": payload}) + b"\n"

    @staticmethod
    def _error_event(code: int, reason: str, message: str) -> bytes:
        return _dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Failure", "message": message, "reason": reason,
                                                   "code": code}}) + b"\n"


def _content(obj: JSON, info: ResourceInfo) -> JSON:
    """What counts for metadata.generation: everything but metadata (and status if a subresource)."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if info.status else set())
    return {k: v for k, v in obj.items() if k not in skip}


def _cell(value: Any, ctype: str) -> Any:
    if value is None:
        return None
    if ctype == "date":
        return _human_age(str(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value


def _version_priority(version: str) -> tuple[int, int, int]:
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)


def _wants_table(raw: aiohttp.web.BaseRequest) -> bool:
    accept = raw.headers.get("Accept") or ""
    first = accept.split(",")[0]
    return "as=Table" in first


def _parse_body(raw: aiohttp.web.BaseRequest, body: bytes) -> Any:
    content_type = (raw.headers.get("Content-Type") or "").split(";")[0].strip()
    if content_type == "application/apply-patch+yaml":
        return None  # parsed by apply()
    if content_type == "application/vnd.kubernetes.protobuf":
        raise ApiError(415, "the stand-in does not speak protobuf; use JSON")
    try:
        return json.loads(body)
    except ValueError:
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError:
            raise ApiError(400, "the request body is neither JSON nor YAML")


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------

class _LowLevelServer(aiohttp.web.Server):
    def _make_request(self, message, payload, protocol, writer, task):  # type: ignore[override]
        return aiohttp.web.BaseRequest(message, payload, protocol, writer, task, self._loop,
                                       client_max_size=16 * 1024 * 1024)


class ApiServer:
    """A running stand-in: ``.url``, ``.port``, ``.host``, ``.emulator``, ``await .stop()``."""

    def __init__(self, emulator: Emulator, runner: aiohttp.web.ServerRunner, host: str, port: int):
        self.emulator = emulator
        self._runner = runner
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self.emulator.close_watches()
        await asyncio.sleep(0)
        await self._runner.cleanup()
        await self.emulator.__aexit__(None, None, None)

    async def __aenter__(self) -> "ApiServer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def start(port: int = 0, host: str = "127.0.0.1", **options: Any) -> ApiServer:
    """Start the stand-in on ``host:port`` (0: a free port). Options go to ``Emulator``."""
    emulator = Emulator(**options)
    await emulator.__aenter__()
    server = _LowLevelServer(emulator, handler_cancellation=True, access_log=None)
    runner = aiohttp.web.ServerRunner(server, shutdown_timeout=0.5, handle_signals=False)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    actual = sockets[0].getsockname()[1] if sockets else port
    return ApiServer(emulator, runner, host, actual)


class ThreadedApiServer:
    """The stand-in on its own event loop in a daemon thread, for synchronous code and tests.

    ``call(fn, *args)`` runs ``fn(emulator, *args)`` on the server's loop and returns its result
    (the emulator is not thread-safe; go through ``call`` or over HTTP).
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1", **options: Any):
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: ApiServer | None = None
        self._thread = threading.Thread(target=self._run, args=(port, host, options),
                                        name="specdeploy-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the stand-in API server did not start within 30 s")
        if self._error is not None:
            raise self._error
        assert self._server is not None
        self.url, self.port, self.host = self._server.url, self._server.port, self._server.host

    def _run(self, port: int, host: str, options: JSON) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(start(port, host, **options))
        except BaseException as e:  # reported to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 30) -> Any:
        async def _do() -> Any:
            return fn(self._server.emulator, *args)  # type: ignore[union-attr]
        return asyncio.run_coroutine_threadsafe(_do(), self._loop).result(timeout)

    def stop(self, timeout: float = 30) -> None:
        if self._server is None or not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)

    def __enter__(self) -> "ThreadedApiServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_in_thread(port: int = 0, host: str = "127.0.0.1", **options: Any) -> ThreadedApiServer:
    return ThreadedApiServer(port, host, **options)


def write_kubeconfig(path: str | os.PathLike[str], url: str, namespace: str = "default") -> str:
    """Write a kubeconfig for the stand-in (plain http, a dummy token) that kubectl, the
    kubernetes client and kopf accept; returns the path."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "specdeploy-dev", "cluster": {"server": url}}],
        "users": [{"name": "specdeploy-dev", "user": {"token": "specdeploy-dev-token"}}],
        "contexts": [{"name": "specdeploy-dev", "context": {"cluster": "specdeploy-dev", "user": "specdeploy-dev",
                                                             "namespace": namespace}}],
        "current-context": "specdeploy-dev",
    }
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


def main(argv: list[str] | None = None) -> int:
    """``specdeploy dev apiserver --kubeconfig PATH [--port N]``: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="specdeploy dev apiserver",
                                     description="Serve the embedded Kubernetes API server stand-in on 127.0.0.1.")
    parser.add_argument("--kubeconfig", required=True, help="write a kubeconfig for the stand-in here")
    parser.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default="default", help="the kubeconfig's namespace (default: default)")
    args = parser.parse_args(argv)

    async def serve() -> int:
        server = await start(args.port, args.host)
        write_kubeconfig(args.kubeconfig, server.url, args.namespace)
        print(server.url, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()
        return 0

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
