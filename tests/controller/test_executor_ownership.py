"""The executor's ownership rules pinned (issue 43), in process against a recording stand-in of the API server.

The rule (Kubernetes garbage collection and controller semantics, docs "Owners and Dependents"; apimachinery
ValidateOwnerReferences allows one ``controller: true`` reference per object): an object belongs to the controller
named by its controller ownerReference. The operator writes or deletes only objects this SpeculativeDeployment
controls; an object of the same name that another object controls, or that nobody controls, is reported as a
conflict and left alone, whatever the operator's own plans for that name."""

from __future__ import annotations

import asyncio
import json

import pytest

from specdeploy.controller.cache import Caches
from specdeploy.controller.executor import Executor
from specdeploy.controller.kube import KubeError

from test_controller_units import _OURS, _BatchKube, _child, _Kube

OTHERS = [{"uid": "x", "controller": True, "kind": "SpeculativeDeployment", "name": "other"}]


@pytest.mark.parametrize("refs,deleted", [
    (_OURS, True),  # ours: the obsolete child goes
    (OTHERS, False),  # another controller's object under the old name: never deleted
    ([], False),  # nobody's (made by a person): never deleted
    ([{**_OURS[0], "controller": False}], False),  # owned by this CR but not as its controller
])
def test_an_obsolete_name_is_deleted_only_when_this_cr_controls_it(refs, deleted):
    kube = _BatchKube(_child("ConfigMap", "m-old", refs))
    got = asyncio.run(Executor(kube, Caches()).apply("ns", "m", [], [("ConfigMap", "m-old")], uid="u1"))
    assert got == []
    assert (("delete", "ConfigMap", "m-old") in kube.writes) is deleted
    assert (("ConfigMap", "m-old") in kube.objs) is not deleted


def test_an_obsolete_name_held_by_another_in_the_cache_is_not_deleted():
    """The watch-fed cache holds it (labelled like a child) but another object controls it."""
    kube = _BatchKube(_child("Service", "m-old", OTHERS))
    caches = Caches()
    caches.children[("Service", "ns", "m-old")] = _child("Service", "m-old", OTHERS)
    asyncio.run(Executor(kube, caches).apply("ns", "m", [], [("Service", "m-old")], uid="u1"))
    assert kube.writes == [] and ("Service", "m-old") in kube.objs


class _RefusingKube(_BatchKube):
    """The API server's answer to an apply that would add a second controller reference (422 Invalid,
    apimachinery/pkg/api/validation/objectmeta.go ValidateOwnerReferences)."""

    async def apply(self, obj, force=False):
        self.writes.append(("apply", obj["kind"], obj["metadata"]["name"]))
        raise KubeError(422, "Invalid", f'{obj["kind"]} "{obj["metadata"]["name"]}" is invalid: metadata.ownerReferences: '
                        'Invalid value: []v1.OwnerReference{...}: Only one reference can have Controller set to true. '
                        'Found "true" in references for SpeculativeDeployment/m and SpeculativeDeployment/other')


def test_an_apply_refused_for_another_controller_is_a_conflict_not_an_error():
    """The cache saw the child as ours, but by the time of the apply another controller holds the name: the
    server refuses (422); the reconcile reports the conflict (a status, not a crash loop of retries)."""
    kube = _RefusingKube(_child("ConfigMap", "m-engine", _OURS))
    caches = Caches()
    caches.children[("ConfigMap", "ns", "m-engine")] = _child("ConfigMap", "m-engine", _OURS)
    desired = [{**_child("ConfigMap", "m-engine", _OURS), "data": {"k": "v"}}]
    got = asyncio.run(Executor(kube, caches).apply("ns", "m", desired, [], uid="u1"))
    assert got == ["ConfigMap/m-engine (controlled by another object)"]
    # any other 422 is an error of the operator's own, raised
    class _Other(_RefusingKube):
        async def apply(self, obj, force=False):
            raise KubeError(422, "Invalid", "spec.replicas: Invalid value: -1")
    kube = _Other(_child("ConfigMap", "m-engine", _OURS))
    with pytest.raises(KubeError):
        asyncio.run(Executor(kube, caches).apply("ns", "m", desired, [], uid="u1"))


def _tuning_setup():
    from testkit import pair

    from specdeploy.api.types import SpeculativeDeployment
    from specdeploy.core.render import render
    from specdeploy_runtime import tuning as tn

    cr = SpeculativeDeployment.model_validate({
        "apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u1"},
        "spec": {"engine": {"name": "sglang", "version": "0.5.23"}, "gpu": {"type": "b300", "count": 8},
                 "target": {"model": "moonshotai/Kimi-K2.6", "trustRemoteCode": True},
                 "drafter": {"model": "z-lab/Kimi-K2.7-Code-DFlash"}, "tuning": {"enabled": True}}})
    d, t = pair("kimi-k2.6")
    r = render(cr, t, d)
    plan = r.tuning
    rel = f"configs/triton_3_5_1/{plan.file_name}"
    msg = tn.encode_envelope("sglang", plan.device_name, "3.5.1", {rel: json.dumps({"1": {}}).encode()}, key=plan.key)
    job = {"kind": "Job", "metadata": {"name": plan.job_name, "ownerReferences": [{**_OURS[0]}]},
           "status": {"succeeded": 1}}
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"message": msg}}}]}}
    return cr, r, plan, job, pod


@pytest.mark.parametrize("refs,published", [
    (None, True),  # no ConfigMap yet: the result is published
    (_OURS, True),  # ours (an older result): replaced
    (OTHERS, False),  # another controller's ConfigMap under the tuned name: neither read nor written
    ([], False),  # a person's ConfigMap under that name
])
def test_a_tuning_result_is_published_only_over_a_configmap_this_cr_controls(refs, published):
    """The engine pods mount the tuned-kernels ConfigMap by name: writing over another's would both destroy it
    and make the engine run whatever the operator wrote there; the name is reported as a conflict instead."""
    cr, r, plan, job, pod = _tuning_setup()
    objs = [job, pod] + ([] if refs is None else [_child("ConfigMap", plan.configmap_name, refs)])
    kube = _Kube(*objs)
    got = asyncio.run(Executor(kube, Caches()).tuning("ns", cr, r))
    assert (("apply", "ConfigMap", plan.configmap_name) in kube.writes) is published
    if published:
        assert got == []
    else:
        assert got and got[0].startswith(f"ConfigMap/{plan.configmap_name} (") and kube.writes == []
