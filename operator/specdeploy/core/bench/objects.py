"""What the operator creates for a SpeculativeBenchmark (pure): its plan for a deployment, and every object.

``plan_for`` is the benchmark controller's planning (controller/benchmark.py ``_plan``): the deployment's check
against its resolved configs, the drafter's trained block that bounds the sweep, the matrix planned
(core/bench/plan.py), ``guarded`` and ``useServingDeployment``. ``render_benchmark`` is what ``specdeploy render``
prints for a benchmark: the tenancy policy first (core/render/gate.benchmark_refusals: the deployment and every
method drafter), then each variant's ConfigMap, Deployment and Service (core/bench/render.render_variant) and its
client plan ConfigMap and client Job, in the order the controller measures them (it creates one variant at a time).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .. import engines as eng
from .. import gpus
from .plan import BenchPlan, PlanError, Point, Variant, build_client_plan, plan_benchmark
from .render import BenchOwner, build_client_configmap, build_client_job, render_variant
from ..checker import analyze
from ..findings import errors
from ..policy import TenancyPolicy
from ..render import PolicyRefused, benchmark_refusals, render
from specdeploy.core.errors import Permanent

SERVING = "serving"


class BenchRefused(Permanent):
    """The benchmark cannot be planned: ``reason`` (DeploymentNotServable, InvalidMatrix) and a message that says
    what to change."""

    def __init__(self, reason: str, message: str):
        self.reason, self.message = reason, message
        super().__init__(f"{reason}: {message}")


def plan_for(bench_spec, dcr, target_doc: Any, drafter_doc: Any) -> BenchPlan:
    """The variants and points of ``bench_spec`` for the deployment ``dcr`` with its resolved configs."""
    ref = dcr.metadata.name
    analysis = analyze(drafter_doc, target_doc, dcr.spec.options())
    if not analysis.ok or analysis.derived is None:
        raise BenchRefused("DeploymentNotServable", f"SpeculativeDeployment {ref} fails its check: " + "; ".join(
            f.one_line() for f in errors(analysis.findings)))
    d = analysis.derived
    # the drafter's trained block bounds the sweep, not a blockSize the deployment lowered it to
    trained = analyze(drafter_doc, target_doc, dataclasses.replace(dcr.spec.options(), block_size=None)).derived
    try:
        plan = plan_benchmark(bench_spec.matrix, engine=dcr.spec.engine.name, engine_version=dcr.spec.engine.version,
                              block_size=(trained or d).block_size, served_context=d.served_context,
                              deployment_tokens=d.num_speculative_tokens,
                              cpu_pool=not gpus.get_profile(dcr.spec.gpu.type).accelerator,
                              deployment_method=dcr.spec.speculation.method)
    except PlanError as e:
        raise BenchRefused("InvalidMatrix", str(e)) from None
    guard = dcr.spec.speculation.guard
    if bench_spec.matrix.guarded and (guard is None or guard.max_concurrency is None):
        raise BenchRefused("InvalidMatrix", "spec.matrix.guarded: SpeculativeDeployment "
                           f"{ref} has no spec.speculation.guard.maxConcurrency to measure; set one, or remove guarded")
    if bench_spec.use_serving_deployment:
        serving = [Point(p.id.replace(p.variant, SERVING, 1), SERVING, p.context, p.concurrency, p.num_prompts,
                         p.max_output_tokens, p.new_engine) for p in plan.points_of(plan.variants[-1].name)]
        plan = BenchPlan(plan.variants + (Variant(SERVING, True),), plan.points + tuple(serving), plan.block_size,
                         plan.notes)
    return plan


def serving_model(dcr) -> str:
    """What the serving deployment's engine serves its target as."""
    t = dcr.spec.target
    return t.model if t.pvc is None else f"/models/target/{t.model.lstrip('/')}"


def render_benchmark(bench, dcr, target_doc: Any, drafter_doc: Any, method_drafters: Mapping[str, Any],
                     policy: TenancyPolicy, namespace: str,
                     pvc_labels: Mapping[str, Mapping[str, str] | None] | None = None) -> list[dict]:
    """Every object the operator would create for the SpeculativeBenchmark ``bench`` of the deployment ``dcr``
    (as stored), variant after variant. ``method_drafters``: variant name -> its drafter's config.json (a drafter
    method of spec.matrix.methods). Raises ``PolicyRefused`` (the deployment or a method drafter), ``BenchRefused``
    (the plan), ``RenderError`` / ``ValueError`` (a variant that does not render), ``KeyError`` (a method drafter's
    config not given: the variant's name)."""
    refused = benchmark_refusals(bench.spec, dcr, policy, pvc_labels, namespace=namespace)
    if refused:
        raise PolicyRefused(refused)
    plan = plan_for(bench.spec, dcr, target_doc, drafter_doc)
    owner = BenchOwner(bench.metadata.name, namespace, bench.metadata.uid)
    info = eng.get_engine(dcr.spec.engine.name)
    out: list[dict] = []
    for v in plan.variants:
        if v.name == SERVING:
            image = render(dcr, target_doc, drafter_doc, policy=policy).image or ""
            base_url = f"http://{dcr.metadata.name}.{namespace}.svc:{info.port}"
            model = serving_model(dcr)
        else:
            ddoc = drafter_doc
            if v.method_speculation is not None:
                ddoc = method_drafters[v.name] if v.drafter else None
            vo = render_variant(dcr, target_doc, ddoc, owner, v, policy=policy)
            out += vo.objects
            image, base_url, model = vo.image, vo.url(namespace), vo.model
        doc = build_client_plan(benchmark=owner.name, variant=v.name, engine=dcr.spec.engine.name,
                                engine_version=dcr.spec.engine.version, base_url=base_url,
                                metrics_url=f"{base_url}/metrics", model=model, tokenizer=model,
                                prompts=bench.spec.prompts.plan(), points=plan.points_of(v.name))
        out.append(build_client_configmap(owner, v.name, doc))
        out.append(build_client_job(owner, v.name, image, api_key=dcr.spec.engine.api_key))
    return out


__all__ = ["BenchRefused", "SERVING", "plan_for", "render_benchmark", "serving_model"]
