"""The tenancy policy's claim-label rule in the reconciler (issue 43), in process.

The rule (core/policy.py check_policy, chart value policy.pvcLabel / operator flag --pvc-label): a claim not
listed by name may be mounted only when it carries the label. The webhook cannot read the claim (it has no
PersistentVolumeClaim access and the claim may be created later), so it leaves that rule undecided; the
reconciler must read the claim's labels (Executor.policy_labels) and decide before anything is read or written
on the CR's behalf: an unlabelled or missing claim is refused (PolicyRefused), a labelled one passes."""

from __future__ import annotations

import asyncio

import pytest

from specdeploy.controller.reconciler import Controller, Settings
from specdeploy.controller.resolve import ResolutionError
from specdeploy.core.policy import TenancyPolicy

LABEL = ("specdeploy.io/models", "true")


class _Kube:
    """Claims by name; the status patches and Events recorded; no other object exists."""

    def __init__(self, claims: dict[str, dict | None]):
        self.claims = claims
        self.reads: list[tuple[str, str]] = []
        self.patches: list[dict] = []

    async def get(self, kind, ns, name):
        self.reads.append((kind, name))
        if kind != "PersistentVolumeClaim" or self.claims.get(name) is None:
            return None
        return {"kind": kind, "metadata": {"name": name, "namespace": ns, "labels": self.claims[name]}}

    async def patch(self, kind, ns, name, patch, sub=None):
        assert (kind, sub) == ("SpeculativeDeployment", "status")
        self.patches.append(patch)
        return {}

    async def create(self, obj):
        assert obj["kind"] == "Event"
        return obj


class _Resolver:
    """Stops the reconcile right after the policy step, saying it got there."""

    def __init__(self):
        self.asked = 0
        self.configmaps: dict = {}

    async def resolve(self, cr, role):
        self.asked += 1
        raise ResolutionError("ResolutionStopped", "the test stops after the policy", retryable=False, delay=60)


def _body(claim: str) -> dict:
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": {"engine": {"name": "vllm", "version": "0.33.0"},
                     "target": {"model": "Qwen/Qwen3.6-27B", "pvc": {"claimName": claim}},
                     "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"}, "gpu": {"type": "b300", "count": 1}}}


def _reconcile(labels: dict | None, policy: TenancyPolicy) -> tuple[_Kube, _Resolver, dict]:
    kube, resolver = _Kube({"models": labels}), _Resolver()
    c = Controller(kube, resolver, Settings(workers=0, policy=policy))
    c.bodies[("ns", "m")] = _body("models")
    asyncio.run(c.reconcile(("ns", "m")))
    conds = {x["type"]: x for x in kube.patches[-1]["status"]["conditions"]} if kube.patches else {}
    return kube, resolver, conds


@pytest.mark.parametrize("labels,refused", [
    ({"specdeploy.io/models": "true"}, False),
    ({"specdeploy.io/models": "false"}, True),
    ({}, True),
    (None, True),  # the claim does not exist
])
def test_the_claim_label_rule_is_decided_from_the_claims_labels(labels, refused):
    kube, resolver, conds = _reconcile(labels, TenancyPolicy(pvc_label=LABEL))
    assert ("PersistentVolumeClaim", "models") in kube.reads
    if refused:
        assert conds["Progressing"]["reason"] == "PolicyRefused", conds
        assert "spec.target.pvc.claimName" in conds["Progressing"]["message"]
        assert resolver.asked == 0  # nothing read on the CR's behalf
    else:
        assert resolver.asked == 1 and conds["Progressing"]["reason"] != "PolicyRefused"


def test_a_claim_listed_by_name_needs_no_read():
    kube, resolver, conds = _reconcile(None, TenancyPolicy(pvcs=("models",), pvc_label=LABEL))
    assert kube.reads == [] and resolver.asked == 1
