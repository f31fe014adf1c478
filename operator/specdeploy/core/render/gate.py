"""The one gate before any pod (pure): the tenancy policy (core/policy.py) applied to the spec a pod is built from.

Every pod template the operator creates is built from a SpeculativeDeployment spec, as stored or overridden:
the stable and canary engine pods and the tuning Job (``render``), a SpeculativeBenchmark's variants (the
deployment's spec with its speculation, and for a method variant its drafter, replaced: ``render`` again) and
client Jobs (the image and API key of an admitted variant or deployment), and the inspector Job that reads a
claim's config.json (``jobs.build_inspector_job``). Each passes here first:

- ``render(..., policy=P)`` refuses a spec ``P`` refuses with ``PolicyRefused`` before any object is built;
- ``admit`` is the only maker of an ``Admitted`` spec, and the resolver (controller/resolve.py), which reads a
  token Secret and creates the inspector Job for a model source, takes nothing else;
- ``benchmark_refusals`` is the policy of a SpeculativeBenchmark: the deployment it measures, as stored, and
  each ``spec.matrix.methods[i].drafter`` as the variant's spec would carry it. The admission webhook, the
  benchmark controller and ``specdeploy render`` for a benchmark call it.

Only the modules of this package build pod specs (``tests/unit/test_pod_choke_point.py`` fails on a
``containers`` list or a ``harden_pod`` call anywhere else).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..findings import Finding
from ..policy import TenancyPolicy, check_policy, policy_needs_claims
from .objects import PolicyRefused

ClaimLabels = Mapping[str, Mapping[str, str] | None]


@dataclass(frozen=True, eq=False)
class Admitted:
    """A SpeculativeDeployment (``cr``) that ``policy`` admitted: what the resolver and the inspector Job take.
    Made by ``admit`` only."""

    cr: Any
    policy: TenancyPolicy


def admit(cr, policy: TenancyPolicy, pvc_labels: ClaimLabels | None = None, namespace: str | None = None) -> Admitted:
    """``cr`` admitted by ``policy``, or ``PolicyRefused`` with the findings. ``namespace``: the CR's (default:
    its metadata's). ``pvc_labels``: claim -> labels for the label rule (core/policy.check_policy)."""
    ns = namespace if namespace is not None else cr.metadata.namespace
    refused = check_policy(cr.spec, policy, pvc_labels, namespace=ns)
    if refused:
        raise PolicyRefused(refused)
    return Admitted(cr, policy)


def with_drafter(cr, drafter):
    """A copy of ``cr`` serving ``drafter`` (a ModelSource, or None) instead of its own: what a method variant's
    policy and resolution see (its target, engine, image, pod settings and extraArgs stay the deployment's)."""
    out = cr.model_copy(deep=True)
    out.spec = out.spec.model_copy(update={"drafter": drafter.model_copy(deep=True) if drafter is not None else None})
    return out


def _method_drafters(bench_spec) -> list[tuple[int, Any]]:
    return [(i, m.drafter) for i, m in enumerate(bench_spec.matrix.methods or []) if m.drafter is not None]


def benchmark_claims(bench_spec, deployment_cr, policy: TenancyPolicy) -> list[str]:
    """Claims whose labels the I/O edge must read to decide the label rule for a benchmark."""
    names = list(policy_needs_claims(deployment_cr.spec, policy))
    for _, drafter in _method_drafters(bench_spec):
        names += policy_needs_claims(with_drafter(deployment_cr, drafter).spec, policy)
    return list(dict.fromkeys(names))


def benchmark_refusals(bench_spec, deployment_cr, policy: TenancyPolicy, pvc_labels: ClaimLabels | None = None,
                       namespace: str | None = None) -> list[Finding]:
    """The policy's refusals of a SpeculativeBenchmark: the deployment's (as stored; paths
    ``SpeculativeDeployment NAME spec...``: a benchmark of a refused deployment would run what was refused) and
    each method drafter's (paths ``spec.matrix.methods[i].drafter...``, checked as the variant's spec carries
    it: the deployment's pod, image and engine with that drafter)."""
    ns = namespace if namespace is not None else deployment_cr.metadata.namespace
    name = deployment_cr.metadata.name
    out = [replace(f, path=f"SpeculativeDeployment {name} {f.path}")
           for f in check_policy(deployment_cr.spec, policy, pvc_labels, namespace=ns)]
    for i, drafter in _method_drafters(bench_spec):
        for f in check_policy(with_drafter(deployment_cr, drafter).spec, policy, pvc_labels, namespace=ns):
            if f.path.startswith("spec.drafter."):  # the rest is the deployment's, reported above
                out.append(replace(f, path=f"spec.matrix.methods[{i}].drafter." + f.path[len("spec.drafter."):]))
    return out


def refusal_text(findings: list[Finding]) -> str:
    """One line per refusal, with its code: a status message, an Event, a CLI line."""
    return "; ".join(f"{f.path}: {f.message} [{f.code}]" for f in findings)


__all__ = ["Admitted", "PolicyRefused", "admit", "benchmark_claims", "benchmark_refusals", "refusal_text",
           "with_drafter"]
