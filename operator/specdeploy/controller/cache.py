"""The controller's watch-fed caches and their indexes (no API client here).

Watches feed them (handlers.py -> Controller.observe_* -> here); each feed returns the
SpeculativeDeployments worth a reconcile, and the Controller queues them. An idle reconcile
reads nothing: the CR bodies, their children, the referenced ConfigMaps (the Resolver's
``configmaps``), and the SpeculativeBenchmarks that ``spec.speculation.guard.fromBenchmark``
may name all come from here.

One object, read by two sides: the reconciler (controller/reconciler.py) and the acceptance
monitor (controller/monitor.py, with its canary analysis, controller/canary.py), which read the watch-fed
parts. Beside them, the typed reports (controller/reports.py), each written by one side only: ``acceptances``
(the monitor's part of each status) and ``canaries`` (the canary analysis), read by the reconciler and its
planner; ``admitted`` (the reconciler's), read by the monitor. The watch feeds here write none of them.
"""

from __future__ import annotations

from ..core import names as N
from ..core.render.children import names as child_names
from . import metrics, ownership
from .reports import AcceptanceReport, Admission, CanaryReport, Reports

Key = tuple[str, str]  # (namespace, name)
ChildKey = tuple[str, str, str]  # (kind, namespace, name)
MANAGED_KINDS = ("ConfigMap", "Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget", "PodMonitor",
                 "NetworkPolicy")
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")


class Caches:
    def __init__(self, configmaps: dict[tuple[str, str], dict] | None = None):
        self.bodies: dict[Key, dict] = {}
        self.children: dict[ChildKey, dict] = {}  # (kind, ns, name) -> body
        # (kind, ns, name) -> (resourceVersion, applied digest) of a child known to hold that intent
        self.verified: dict[ChildKey, tuple[str | None, str]] = {}
        self.cm_refs: dict[tuple[str, str], set[Key]] = {}  # ConfigMap -> CRs referencing it
        self._refs_of: dict[Key, set[tuple[str, str]]] = {}  # CR -> ConfigMaps it references
        # referenced ConfigMaps: (ns, name) -> body (the Resolver's cache, fed by the watch)
        self.configmaps: dict[tuple[str, str], dict] = configmaps if configmaps is not None else {}
        # SpeculativeBenchmarks (watch-fed) that spec.speculation.guard.fromBenchmark may name: (ns, name) -> body
        self.benchmarks: dict[tuple[str, str], dict] = {}
        # The reports (controller/reports.py), one writer each (reports.WRITERS):
        # the acceptance monitor's part of each status (monitor.py), written out by the reconciler's status path
        self.acceptances: Reports[AcceptanceReport] = Reports(AcceptanceReport)
        # each canary's analysis (canary.py), read by the planner (plan.plan_rollout)
        self.canaries: Reports[CanaryReport] = Reports(CanaryReport)
        # each SpeculativeDeployment generation the reconciler admitted (valid, and the tenancy policy passed);
        # the canary probe reads an engine API key Secret for no other (canary.CanaryAnalysis.api_key_refusal)
        self.admitted: Reports[Admission] = Reports(Admission)

    # ------------------------------------------------------------- watch feeds

    def observe_cr(self, event_type: str | None, body: dict) -> tuple[Key, bool]:
        """A SpeculativeDeployment event: (its key, whether it is worth a reconcile)."""
        meta = body.get("metadata") or {}
        key = (meta.get("namespace") or "default", meta.get("name"))
        if event_type == "DELETED":
            self.bodies.pop(key, None)  # the reports' writers forget it themselves (Controller.observe_cr)
            self._unindex_refs(key)
            metrics.MANAGED.set(len(self.bodies))
            return key, False
        old = self.bodies.get(key)
        self.bodies[key] = body = ownership.for_cache(body)
        metrics.MANAGED.set(len(self.bodies))
        self._index_refs(key, body)
        gen = meta.get("generation") or 1
        observed = (body.get("status") or {}).get("observedGeneration")
        # Our own status writes come back as MODIFIED events: nothing to do for those.
        if old is not None and event_type == "MODIFIED" and observed == gen and \
                (old.get("metadata") or {}).get("generation") == gen and old.get("spec") == body.get("spec"):
            return key, False
        return key, True

    def _unindex_refs(self, key: Key) -> None:
        for cm in self._refs_of.pop(key, set()):
            refs = self.cm_refs.get(cm)
            if refs is not None:
                refs.discard(key)
                if not refs:
                    del self.cm_refs[cm]

    def _index_refs(self, key: Key, body: dict) -> None:
        self._unindex_refs(key)
        spec = body.get("spec") or {}
        mine: set[tuple[str, str]] = set()
        for role in ("target", "drafter"):
            src = spec.get(role) if isinstance(spec.get(role), dict) else {}
            ref = ((src.get("configFrom") or {}) if isinstance(src.get("configFrom"), dict) else {}).get("configMapKeyRef") or {}
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                mine.add((key[0], ref["name"]))
        for cm in mine:
            self.cm_refs.setdefault(cm, set()).add(key)
        self._refs_of[key] = mine

    def observe_child(self, event_type: str | None, body: dict) -> list[Key]:
        """A managed child's event: the SpeculativeDeployment controlling it, when known.

        Nothing for the echo of what the cache holds already (the same resourceVersion: our own apply's
        response was cached by the executor, and the reconcile that wrote it saw that state)."""
        meta = body.get("metadata") or {}
        ck = (body.get("kind"), meta.get("namespace") or "default", meta.get("name"))
        rv = meta.get("resourceVersion")
        if event_type != "DELETED" and rv:
            cached = self.children.get(ck)
            if cached is not None and (cached.get("metadata") or {}).get("resourceVersion") == rv:
                return []
        if event_type == "DELETED":
            self.children.pop(ck, None)
            self.verified.pop(ck, None)
        else:
            self.children[ck] = body = ownership.for_cache(body)
        out = []
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "SpeculativeDeployment" and ref.get("controller"):
                key = (ck[1], ref.get("name"))
                if key in self.bodies:
                    out.append(key)
        return out

    def observe_benchmark(self, event_type: str | None, body: dict) -> list[Key]:
        """A SpeculativeBenchmark changed: the deployments whose guard reads it, when what the guard reads
        (phase, recommendation.guard) changed."""
        meta = body.get("metadata") or {}
        bk = (meta.get("namespace") or "default", meta.get("name"))
        old = self.benchmarks.get(bk)
        if event_type == "DELETED":
            self.benchmarks.pop(bk, None)
        else:
            self.benchmarks[bk] = body
        if old is not None and event_type != "DELETED" and _guard_view(old) == _guard_view(body):
            return []
        return [key for key, cr in list(self.bodies.items()) if key[0] == bk[0] and _from_benchmark(cr) == bk[1]]

    def observe_configmap(self, event_type: str | None, body: dict, child: bool = True) -> list[Key]:
        """A ConfigMap event: a managed child (the engine config), a referenced config.json, or neither.
        ``child=False``: the caller feeds a managed child to ``observe_child`` itself (is_child)."""
        meta = body.get("metadata") or {}
        ck = (meta.get("namespace") or "default", meta.get("name"))
        out: list[Key] = []
        if child and is_child(body):
            out += self.observe_child(event_type, {**body, "kind": "ConfigMap"})
        refs = self.cm_refs.get(ck)
        if not refs:
            self.configmaps.pop(ck, None)
            return out
        if event_type == "DELETED":
            self.configmaps.pop(ck, None)
        else:
            self.configmaps[ck] = body
        return out + list(refs)

    # ------------------------------------------------------------- lookups

    def workload(self, ns: str, name: str) -> dict | None:
        for kind in WORKLOAD_KINDS:
            w = self.children.get((kind, ns, name))
            if w is not None:
                return w
        return None

    def children_of(self, ns: str, name: str) -> dict[tuple[str, str], dict]:
        """The cached children a SpeculativeDeployment may own: named NAME or NAME-engine (and the canary's
        NAME-canary, NAME-canary-engine), by (kind, name)."""
        n = child_names(name)
        out = {}
        for kind in MANAGED_KINDS:
            for cname in (name, n["configmap"], n["canary"], n["canaryconfigmap"]):
                body = self.children.get((kind, ns, cname))
                if body is not None:
                    out[(kind, cname)] = body
        return out

    def owner_body(self, obj: dict) -> dict | None:
        """The cached SpeculativeDeployment a rendered child names as its controller."""
        ref = (obj["metadata"].get("ownerReferences") or [{}])[0]
        return self.bodies.get((obj["metadata"].get("namespace") or "default", ref.get("name")))


def is_child(configmap: dict) -> bool:
    """Whether a ConfigMap is labelled as one of specdeploy's children (observe_child sees it)."""
    return ((configmap.get("metadata") or {}).get("labels") or {}).get(N.LABEL_MANAGED_BY) == N.MANAGED_BY


def _from_benchmark(body: dict) -> str | None:
    """spec.speculation.guard.fromBenchmark of a raw SpeculativeDeployment body."""
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    s = spec.get("speculation") if isinstance(spec.get("speculation"), dict) else {}
    g = s.get("guard") if isinstance(s.get("guard"), dict) else {}
    name = g.get("fromBenchmark")
    return name if isinstance(name, str) else None


def _guard_view(body: dict) -> tuple:
    """What the guard reads of a SpeculativeBenchmark (its progress updates are not worth a reconcile)."""
    status = body.get("status") if isinstance(body.get("status"), dict) else {}
    reco = status.get("recommendation") if isinstance(status.get("recommendation"), dict) else {}
    ref = (body.get("spec") or {}).get("deploymentRef") if isinstance(body.get("spec"), dict) else None
    return status.get("phase"), repr(reco.get("guard")), repr(ref)
