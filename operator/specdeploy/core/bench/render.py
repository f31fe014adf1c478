"""A SpeculativeBenchmark's variant and client Job as objects (pure).

A variant is the benchmarked SpeculativeDeployment rendered by the one renderer (core/render.py)
with its speculation overridden, under its own name ``<bench>-<variant>``: a ConfigMap (the engine
config), a Deployment of one replica and a Service. They are owned by the benchmark (never by the
SpeculativeDeployment, whose own workload is never touched), labelled
``specdeploy.io/benchmark=<bench>``, and carry component ``benchmark-engine`` so that the
SpeculativeDeployment reconciler and the acceptance monitor leave them alone.

- ``baseline``: every speculative flag removed (``render.strip_speculation_args``): the target served
  alone, preflighted like every engine pod for what applies to it (``preflight --no-speculation``: the
  target's config digest, an argv without any speculative flag, the release's flag snapshot, the
  target's weights into a persistent cache with the deployment's own token).
- ``k<N>[-w<window>][-<backend>]``: ``spec.speculation`` overridden (blockSize N + 1, draftWindow,
  draftAttentionBackend) and checked and rendered exactly as a deployment with those settings.

The client Job runs ``specdeploy-runtime bench-client --plan /etc/specdeploy/bench/plan.json`` in
the variant's engine image, hardened like every pod the operator renders (core/podsecurity.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from .. import gpus
from .. import names as N
from .plan import PROMPTS_KEY, Variant
from ..engineconfig import EngineConfig
from ..render import (RenderError, build_configmap, build_deployment, build_service, client_pod_spec, render,
                     strip_speculation_args)
from ..render.jobs import CLIENT_PLAN_KEY
from ..render.objects import NAMESPACE_NAME_LABEL
from ..names import BENCH_KIND, BENCH_LABEL, VARIANT_LABEL  # noqa: F401 (bench.render.BENCH_LABEL for its readers)

COMPONENT = N.COMPONENT_BENCH_ENGINE
CLIENT_COMPONENT = N.COMPONENT_BENCH_CLIENT
CLIENT_DEADLINE_SECONDS = 6 * 3600


@dataclass(frozen=True)
class BenchOwner:
    name: str
    namespace: str
    uid: str | None

    def reference(self) -> list[dict[str, Any]]:
        if not self.uid:
            return []
        return [{"apiVersion": N.GROUP_VERSION, "kind": BENCH_KIND, "name": self.name, "uid": self.uid,
                 "controller": True, "blockOwnerDeletion": True}]


@dataclass(frozen=True)
class VariantObjects:
    name: str  # <bench>-<variant>: the Deployment and the Service
    objects: list[dict]  # ConfigMap, Deployment, Service (apply in this order)
    engine_config: EngineConfig
    image: str
    port: int

    def url(self, namespace: str) -> str:
        return f"http://{self.name}.{namespace}.svc:{self.port}"

    @property
    def model(self) -> str:
        """What the engine serves the target as (vLLM and SGLang: the model argument)."""
        return self.engine_config.target.model


def variant_object_name(bench: str, variant: str) -> str:
    return f"{bench}-{variant}"


def _relabel(labels: dict | None, owner: BenchOwner, variant: str, component: str = COMPONENT) -> None:
    if labels is None:
        return
    if labels.get(N.LABEL_COMPONENT) == N.COMPONENT_ENGINE:
        labels[N.LABEL_COMPONENT] = component
    if N.LABEL_MANAGED_BY in labels or N.LABEL_INSTANCE in labels:
        labels[BENCH_LABEL] = owner.name
        labels[VARIANT_LABEL] = variant


def _override(cr, name: str, variant: Variant):
    cr = cr.model_copy(deep=True)
    cr.metadata.name = name
    cr.metadata.uid = None  # ownerReferences are the benchmark's, added below
    cr.spec.replicas = 1
    cr.spec.tuning.enabled = False  # a variant runs with default kernels (tuned ones are keyed to the deployment)
    if variant.method_speculation is not None:  # another method: its speculation and drafter, the deployment's target
        doc = cr.spec.model_dump(by_alias=True, exclude_none=True)
        doc["speculation"] = dict(variant.method_speculation)
        doc.pop("drafter", None)
        if variant.drafter:
            doc["drafter"] = dict(variant.drafter)
        cr.spec = type(cr.spec).model_validate(doc)  # the spec's own validators (drafter per method, knobs)
    s = cr.spec.speculation
    if not variant.guarded:
        s.guard = None  # variants measure speculation itself: the deployment's guard would switch it off from its limit
    if variant.speculative_tokens is not None:
        s.block_size = variant.speculative_tokens + 1
    if variant.draft_window is not None:
        s.draft_window = variant.draft_window
    if variant.draft_attention_backend is not None:
        s.draft_attention_backend = variant.draft_attention_backend
    return cr


def render_variant(cr, target_doc: Any, drafter_doc: Any, owner: BenchOwner, variant: Variant, *,
                   policy=None) -> VariantObjects:
    """The variant's ConfigMap, Deployment and Service; raises RenderError (the variant's settings fail
    the check) or ValueError (the deployment cannot be benchmarked: multi-node)."""
    if cr.spec.nodes > 1:
        raise ValueError(f"spec.nodes is {cr.spec.nodes}: benchmarks of multi-node deployments are not supported; "
                         "benchmark a single-node deployment of the same model")
    name = variant_object_name(owner.name, variant.name)
    vcr = _override(cr, name, variant)
    vcr.metadata.namespace = owner.namespace
    rendered = render(vcr, target_doc, drafter_doc, pod_monitor=False, policy=policy)
    ec = rendered.engine_config
    if not variant.speculation:
        ec = ec.model_copy(update={"args": strip_speculation_args(ec.engine, ec.engine_version, ec.args)})
    if variant.synthetic_acceptance is not None:
        ec = force_synthetic_acceptance(ec, variant.synthetic_acceptance)
    config_hash = ec.digest()[:16]
    prof = gpus.get_profile(vcr.spec.gpu.type)
    cm = build_configmap(vcr, ec, rendered.analysis)
    dep = build_deployment(vcr, ec, prof, rendered.image, config_hash, baked=rendered.baked_drafter is not None,
                           service_account=policy.engine_service_account if policy is not None else None,
                           cache=rendered.cache, target_only=not variant.speculation)
    svc = build_service(vcr, ec)
    for obj in (cm, dep, svc):
        _relabel(obj["metadata"].get("labels"), owner, variant.name)
        obj["metadata"]["ownerReferences"] = owner.reference()
        if not obj["metadata"]["ownerReferences"]:
            obj["metadata"].pop("ownerReferences")
    _relabel(dep["spec"]["selector"]["matchLabels"], owner, variant.name)
    _relabel(dep["spec"]["template"]["metadata"]["labels"], owner, variant.name)
    _relabel(svc["spec"]["selector"], owner, variant.name)
    return VariantObjects(name, [cm, dep, svc], ec, rendered.image or "", ec.port)


def force_synthetic_acceptance(ec: EngineConfig, tau: float) -> EngineConfig:
    """The engine config with the release's own synthetic acceptance set to ``tau`` (core/engines.py
    SYNTHETIC_ACCEPTANCE): vLLM's --speculative-config gains rejection_sample_method 'synthetic' and
    synthetic_acceptance_length; SGLang gets SGLANG_SIMULATE_ACC_LEN. Raises ValueError where the release has none
    (the planner refuses those first)."""
    from .. import engines as eng

    how = eng.synthetic_acceptance(ec.engine, ec.engine_version)
    if how is None:
        raise ValueError(f"{ec.engine} {ec.engine_version} has no synthetic acceptance switch")
    if how.how == "env":
        return ec.model_copy(update={"env": {**ec.env, eng.SGLANG_SIMULATE_ENV: f"{tau:g}"}})
    flag = eng.get_engine(ec.engine).release_for(ec.engine_version).flags["speculative_config"]
    args = list(ec.args)
    for i, a in enumerate(args[:-1]):
        if a == flag:
            sc = json.loads(args[i + 1])
            sc.update({"rejection_sample_method": "synthetic", "synthetic_acceptance_length": tau})
            args[i + 1] = json.dumps(sc, sort_keys=True, separators=(",", ":"))
            return ec.model_copy(update={"args": args})
    raise ValueError(f"no {flag} in the rendered arguments: nothing to make synthetic")


def client_labels(owner: BenchOwner, variant: str) -> dict[str, str]:
    return {N.LABEL_NAME: N.NAME_BENCH_CLIENT, N.LABEL_INSTANCE: owner.name,
            N.LABEL_COMPONENT: CLIENT_COMPONENT, N.LABEL_MANAGED_BY: N.MANAGED_BY,
            N.LABEL_PART_OF: N.MANAGED_BY, BENCH_LABEL: owner.name, VARIANT_LABEL: variant}


def build_client_configmap(owner: BenchOwner, variant: str, plan: dict, prompts_jsonl: str | None = None) -> dict:
    data = {CLIENT_PLAN_KEY: json.dumps(plan, indent=2, sort_keys=True) + "\n"}
    if prompts_jsonl is not None:
        data[PROMPTS_KEY] = prompts_jsonl
    meta: dict[str, Any] = {"name": f"{owner.name}-{variant}-plan", "namespace": owner.namespace,
                            "labels": client_labels(owner, variant)}
    if owner.reference():
        meta["ownerReferences"] = owner.reference()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def build_client_job(owner: BenchOwner, variant: str, image: str, *, env: dict[str, str] | None = None,
                     service_account: str | None = None, api_key=None) -> dict:
    """The Job that runs the client against one variant (created once; a Job's template is immutable); its pod is
    built by the render package (core/render/jobs.py: every pod spec is). ``api_key``: the deployment's
    spec.engine.apiKey; the client sends it from ``OPENAI_API_KEY`` (the variable vLLM's and SGLang's benchmark
    clients read too), taken from the same Secret."""
    labels = client_labels(owner, variant)
    name = f"{owner.name}-{variant}-client"
    pod_spec = client_pod_spec(f"{owner.name}-{variant}-plan", image, env=env, service_account=service_account,
                               api_key=api_key)
    meta: dict[str, Any] = {"name": name, "namespace": owner.namespace, "labels": labels}
    if owner.reference():
        meta["ownerReferences"] = owner.reference()
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": CLIENT_DEADLINE_SECONDS,
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}


def build_variant_network_policy(owner: BenchOwner, vo: VariantObjects, namespaces: Sequence[str] = ()) -> dict:
    """With the engine NetworkPolicy on (operator flag --engine-network-policy): ingress to the variant's engine pod
    only from this benchmark's client Job pods of that variant and from pods of ``namespaces`` (the operator's, the
    monitoring namespace: --engine-ingress-namespace) other than the benchmark's own; owned by the benchmark, named
    like the variant (docs/concepts/security.md, "Engine network"). Unlike a deployment's, it does not admit every pod
    of the namespace: a variant serves only its client."""
    [dep] = [o for o in vo.objects if o["kind"] == "Deployment"]
    variant = dep["metadata"]["labels"][VARIANT_LABEL]
    client = {k: v for k, v in client_labels(owner, variant).items()
              if k in (N.LABEL_COMPONENT, BENCH_LABEL, VARIANT_LABEL)}
    peers: list[dict] = [{"podSelector": {"matchLabels": client}}]
    peers += [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ns}}}
              for ns in sorted(set(namespaces)) if ns != owner.namespace]
    meta: dict[str, Any] = {"name": vo.name, "namespace": owner.namespace, "labels": dict(dep["metadata"]["labels"])}
    if owner.reference():
        meta["ownerReferences"] = owner.reference()
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
            "spec": {"podSelector": {"matchLabels": dict(dep["spec"]["selector"]["matchLabels"])},
                     "policyTypes": ["Ingress"], "ingress": [{"from": peers}]}}


__all__ = ["BenchOwner", "VariantObjects", "RenderError", "render_variant", "build_client_job",
           "build_client_configmap", "build_variant_network_policy", "variant_object_name", "BENCH_LABEL",
           "VARIANT_LABEL"]
