"""Every rendered built-in object (and the CRD) passes the real Kubernetes schemas, strictly."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from testkit import EXAMPLES
from specdeploy.api.crd import build_crd
from specdeploy.core import engines as eng
from specdeploy.core.render import render
from specdeploy_dev.demo import load_examples

K8S_VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]


def _variants():
    for ex in load_examples(EXAMPLES):
        for engine in eng.ENGINE_NAMES:
            for nodes in (1, 2):
                yield pytest.param(ex, engine, nodes, id=f"{ex.name}-{engine}-nodes{nodes}")


def _validate(obj: dict, version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("ex,engine,nodes", list(_variants()))
def test_rendered_objects_pass_strict_schemas(ex, engine, nodes):
    cr = ex.cr.model_copy(deep=True)
    cr.metadata.namespace = "models"
    cr.metadata.uid = "0d6f1f3c-2f6e-4a53-9b8e-4a0f7f0d3a11"
    cr.spec.engine.name = engine
    cr.spec.engine.version = eng.ENGINES[engine].newest_verified
    cr.spec.nodes = nodes
    cr.spec.gpu.count = max(cr.spec.gpu.count, nodes)
    if engine == "sglang" and cr.spec.speculation.ngram is not None:
        # the n-gram lookup window is vLLM's only (SGLang refuses it: MethodSettingUnsupported)
        cr.spec.speculation.ngram.lookup_min = cr.spec.speculation.ngram.lookup_max = None
    r = render(cr, ex.target, ex.drafter, pod_monitor=True)
    kinds = [o["kind"] for o in r.objects]
    assert ("LeaderWorkerSet" in kinds) == (nodes > 1) and ("Deployment" in kinds) == (nodes == 1)
    for obj in r.objects:
        if obj["kind"] == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            for role in ("leaderTemplate", "workerTemplate"):
                for v in K8S_VERSIONS:
                    _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()},
                               "template": copy.deepcopy(lwt[role])}, v)
        elif obj["kind"] == "PodMonitor":
            continue  # a prometheus-operator CRD, not a built-in kind
        else:
            for v in K8S_VERSIONS:
                _validate(obj, v)


def test_strict_validation_can_fail():
    ex = load_examples(EXAMPLES)[0]
    dep = next(o for o in render(ex.cr, ex.target, ex.drafter).objects if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["gpuCount"] = 8
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(dep, "1.33.0")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_crd_passes_strict_schema(version):
    _validate(build_crd(), version)
