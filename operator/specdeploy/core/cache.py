"""The engine pods' hub cache (pure): which volume holds HF_HOME, and where each model's weights come from.

``spec.cache`` names the cache; without it the administrator's default (chart value ``cache.default``,
operator flag ``--default-cache``) applies, else an ``emptyDir``. A persistent cache (``pvc`` or
``nodePath``) is filled by the preflight init container, one download per file under a file lock
(runtime/specdeploy_runtime/hubfiles.py ``prefetch_weights``), and the engine then starts with
``HF_HUB_OFFLINE=1``: a pod restart, or a second replica on the same storage, downloads nothing.
Models served from a claim and a drafter baked into the image are never downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .findings import Finding, Severity, Source
from specdeploy.core.errors import Permanent

HF_HOME = "/var/cache/huggingface"  # the engine pods' hub cache mount (the pods' HF_HOME)

EMPTY_DIR, PVC, NODE_PATH = "emptyDir", "pvc", "nodePath"


@dataclass(frozen=True)
class CachePlan:
    kind: str  # emptyDir | pvc | nodePath
    claim: str | None = None
    node_path_name: str | None = None
    host_path: str | None = None
    from_default: bool = False  # the administrator's default, not spec.cache

    @property
    def persistent(self) -> bool:
        return self.kind != EMPTY_DIR

    def label(self) -> str:
        """``emptyDir``, ``pvc/<claim>`` or ``nodePath/<name>`` (status.resolved.cache)."""
        if self.kind == PVC:
            return f"{PVC}/{self.claim}"
        if self.kind == NODE_PATH:
            return f"{NODE_PATH}/{self.node_path_name}"
        return EMPTY_DIR

    def volume(self, name: str) -> dict[str, Any]:
        if self.kind == PVC:
            return {"name": name, "persistentVolumeClaim": {"claimName": self.claim}}
        if self.kind == NODE_PATH:
            return {"name": name, "hostPath": {"path": self.host_path, "type": "DirectoryOrCreate"}}
        return {"name": name, "emptyDir": {}}


class CacheError(Permanent, ValueError):
    """spec.cache names a node path the administrator did not list (the policy check reports it first)."""

    def __init__(self, finding: Finding):
        super().__init__(finding.message)
        self.finding = finding


def node_path_refusal(name: str, policy=None, namespace: str | None = None) -> Finding:
    listed = ", ".join(n for n, _ in policy.cache_node_paths) if policy is not None else ""
    bound = policy.node_path_namespaces(name) if policy is not None and policy.node_path(name) is not None else None
    if bound is not None:
        return Finding(Severity.ERROR, "PolicyCacheNodePathNotAllowed", Source.SPEC, "spec.cache.nodePath",
                       f"node cache path {name!r} is bound to the namespaces {', '.join(bound) or 'none'}, not "
                       f"{namespace or 'this one'}: it may hold their private models. Use type pvc or emptyDir, or ask "
                       f"an administrator to add this namespace to the chart value cache.nodePaths.{name}.namespaces "
                       "(operator flag --cache-node-path-namespaces NAME=NS,...)")
    return Finding(Severity.ERROR, "PolicyCacheNodePathNotAllowed", Source.SPEC, "spec.cache.nodePath",
                   f"node cache path {name!r} is not one an administrator listed (listed: {listed or 'none'}). Name a "
                   "listed one, use type pvc or emptyDir, or ask an administrator to add it to the chart value "
                   "cache.nodePaths (operator flag --cache-node-path NAME=PATH)")


def plan_cache(spec, policy=None, namespace: str | None = None) -> CachePlan:
    """The cache of ``spec`` in ``namespace`` under ``policy`` (core/policy.py TenancyPolicy; None: no default, no node
    paths). A node path bound to other namespaces is refused when the spec names it, and replaced by an emptyDir when
    it is the administrator's default."""
    cache = getattr(spec, "cache", None)
    if cache is not None:
        kind, claim, name, default = cache.type, cache.pvc.claim_name if cache.pvc else None, cache.node_path, False
    elif policy is not None and policy.default_cache is not None:
        kind, ref = policy.default_cache
        claim, name, default = (ref, None, True) if kind == PVC else (None, ref, True)
    else:
        return CachePlan(EMPTY_DIR)
    if kind == PVC:
        return CachePlan(PVC, claim=claim, from_default=default)
    if kind == NODE_PATH:
        path = policy.node_path(name) if policy is not None else None
        if path is None or not policy.node_path_allowed(name, namespace):
            if default and path is not None:
                return CachePlan(EMPTY_DIR, from_default=True)  # the default's node path is other namespaces'
            raise CacheError(node_path_refusal(name, policy, namespace))
        return CachePlan(NODE_PATH, node_path_name=name, host_path=path, from_default=default)
    return CachePlan(EMPTY_DIR, from_default=default)


def weight_source(src, role: str, plan: CachePlan, baked_image: str | None = None) -> str:
    """One line for status.resolved.{target,drafter}Weights: where the engine reads this model's weights."""
    if baked_image is not None:
        return f"baked into the image {baked_image} (never downloaded)"
    if src.pvc is not None:
        return f"claim {src.pvc.claim_name}, path {src.model} (never downloaded)"
    ref = src.model + (f"@{src.revision}" if src.revision else "")
    if plan.persistent:
        return (f"hub {ref}, downloaded once into the {plan.label()} cache by the preflight "
                "(pod restarts and replicas on the same storage reuse it)")
    return f"hub {ref}, downloaded by every engine pod at start (emptyDir cache; set spec.cache to keep it)"
