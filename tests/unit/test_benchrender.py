"""SpeculativeBenchmark variants rendered by the one renderer, with speculation overridden (pure)."""

from __future__ import annotations

import json

import pytest

from testkit import pair
from specdeploy.core.bench.plan import Variant
from specdeploy.core.bench.render import BenchOwner, build_client_configmap, build_client_job, render_variant
from specdeploy.core.render import RenderError, render, strip_speculation_args
from test_render import make_cr

OWNER = BenchOwner("sweep", "models", "bench-uid-1")
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash"}


def variant(engine="vllm", version="0.32.0", v=Variant("k3", True, 3), **spec):
    d, t = pair("qwen3.6-27b")
    cr = make_cr(engine, version, uid="deployment-uid", **spec)
    return cr, render_variant(cr, t, d, OWNER, v)


def engine_args(vo) -> list[str]:
    dep = next(o for o in vo.objects if o["kind"] == "Deployment")
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "engine")["args"]


def test_vllm_k3_overrides_num_speculative_tokens_only():
    cr, vo = variant()
    assert vo.name == "sweep-k3" and [o["kind"] for o in vo.objects] == ["ConfigMap", "Deployment", "Service"]
    args = engine_args(vo)
    sc = json.loads(args[args.index("--speculative-config") + 1])
    assert sc["num_speculative_tokens"] == 3 and sc["method"] == "dflash"
    assert json.loads(vo.objects[0]["data"]["engine-config.json"])["args"] == args  # the config the pod launches
    # the serving deployment's own rendering is untouched by the override
    d, t = pair("qwen3.6-27b")
    own = render(cr, t, d)
    own_args = next(o for o in own.objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert json.loads(own_args[own_args.index("--speculative-config") + 1])["num_speculative_tokens"] == 15
    assert cr.metadata.name == "qwen36" and cr.spec.speculation.block_size is None


def test_owned_by_the_benchmark_labelled_and_out_of_the_engine_selectors():
    _, vo = variant()
    for obj in vo.objects:
        meta = obj["metadata"]
        assert meta["ownerReferences"] == [{"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeBenchmark",
                                            "name": "sweep", "uid": "bench-uid-1", "controller": True,
                                            "blockOwnerDeletion": True}]
        assert meta["labels"]["specdeploy.io/benchmark"] == "sweep" and meta["namespace"] == "models"
        assert meta["labels"]["app.kubernetes.io/component"] == "benchmark-engine"
    dep, svc = vo.objects[1], vo.objects[2]
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "sweep-k3"
    assert dep["spec"]["selector"]["matchLabels"] == {k: v for k, v in dep["spec"]["template"]["metadata"]["labels"].items()
                                                     if k in dep["spec"]["selector"]["matchLabels"]}
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert vo.url("models") == "http://sweep-k3.models.svc:8000"


@pytest.mark.parametrize("engine,version", [("vllm", "0.32.0"), ("sglang", "0.5.23")])
def test_baseline_has_no_speculative_flag_and_a_target_only_preflight(engine, version):
    """Issue 37 hole 7: the baseline is preflighted like every engine pod, for what applies to it (the target)."""
    _, vo = variant(engine, version, Variant("baseline", False))
    args = engine_args(vo)
    assert not [a for a in args if "speculative" in a or a == "DFLASH"], args
    assert vo.model in args
    pod = vo.objects[1]["spec"]["template"]["spec"]
    [pre] = [c for c in pod["initContainers"] if c["name"] == "preflight"]
    assert "--no-speculation" in pre["args"] and "--target-model" in pre["args"]
    assert not [a for a in pre["args"] if a.startswith("--drafter") or a == "--expect-baked"], pre["args"]
    assert json.loads(vo.objects[0]["data"]["engine-config.json"])["args"] == args
    # a speculative variant's preflight checks the pair, as the deployment's does
    _, k3 = variant(engine, version)
    [pre] = [c for c in k3.objects[1]["spec"]["template"]["spec"]["initContainers"] if c["name"] == "preflight"]
    assert "--no-speculation" not in pre["args"] and "--drafter-model" in pre["args"]


def test_sglang_window_and_backend_override():
    _, vo = variant("sglang", "0.5.23", Variant("k3-w2048-triton", True, 3, 2048, "triton"))
    args = engine_args(vo)
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "4"
    assert args[args.index("--speculative-draft-window-size") + 1] == "2048"
    assert args[args.index("--speculative-draft-attention-backend") + 1] == "triton"


def test_a_variant_the_check_refuses_is_a_render_error():
    with pytest.raises(RenderError):
        variant("sglang", "0.5.23", Variant("k3-w2", True, 3, 2, None))


def test_multi_node_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="multi-node"):
        variant("sglang", "0.5.23", Variant("k3", True, 3), gpu={"type": "b300", "count": 8}, nodes=2)


def test_strip_speculation_args_both_spellings():
    args = ["m", "--speculative-config", "{}", "--port", "8000", "--speculative-config={}"]
    assert strip_speculation_args("vllm", "0.32.0", args) == ["m", "--port", "8000"]


def test_client_job_is_exec_form_hardened_and_owned():
    job = build_client_job(OWNER, "k3", "ghcr.io/specdeploy/runtime:vllm-0.32.0")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["specdeploy-runtime", "bench-client"] and c["command"][0] not in SHELLS
    assert c["args"] == ["--plan", "/etc/specdeploy/bench/plan.json"]
    assert job["metadata"]["name"] == "sweep-k3-client" and job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["ownerReferences"][0]["kind"] == "SpeculativeBenchmark"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    cm = build_client_configmap(OWNER, "k3", {"variant": "k3"})
    assert job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    assert json.loads(cm["data"]["plan.json"]) == {"variant": "k3"}
