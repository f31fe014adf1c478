"""Rendering: from a SpeculativeDeployment and the two config.json files to workload objects."""

from __future__ import annotations

import copy
import json

import pydantic
import pytest

from conftest import pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.engineconfig import EngineConfig
from specdeploy.core.render import CONFIG_HASH_ANNOTATION, RenderError, render

SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env", "dash", "zsh"}


def make_cr(engine_name: str = "sglang", version: str = "0.5.23", gpu_type: str = "b300", count: int = 1, *,
            uid: str | None = None, **spec_extra) -> SpeculativeDeployment:
    """A SpeculativeDeployment for the Qwen3.6-27B pair; keyword arguments merge into spec."""
    meta = {"name": "qwen36", "namespace": "models"}
    if uid:
        meta["uid"] = uid
    spec = {
        "engine": {"name": engine_name, "version": version},
        "target": {"model": "Qwen/Qwen3.6-27B"},
        "drafter": {"model": "z-lab/Qwen3.6-27B-DFlash"},
        "gpu": {"type": gpu_type, "count": count},
    }
    for k, v in spec_extra.items():
        if isinstance(v, dict) and isinstance(spec.get(k), dict):
            spec[k] = {**spec[k], **v}
        else:
            spec[k] = v
    return SpeculativeDeployment.model_validate(
        {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": meta, "spec": spec})


def do_render(cr, name: str = "qwen3.6-27b", **kw):
    d, t = pair(name)
    return render(cr, t, d, **kw)


def workload(r) -> dict:
    [w] = [o for o in r.objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]
    return w


def pod_template(r) -> dict:
    w = workload(r)
    if w["kind"] == "Deployment":
        return w["spec"]["template"]
    return w["spec"]["leaderWorkerTemplate"]["leaderTemplate"]


def container(r) -> dict:
    [c] = pod_template(r)["spec"]["containers"]
    return c


def has_pair(args: list[str], flag: str, value: str) -> bool:
    return any(args[i] == flag and args[i + 1] == value for i in range(len(args) - 1))


def spec_config(args: list[str]) -> dict:
    i = args.index("--speculative-config")
    return json.loads(args[i + 1])


# ----------------------------------------------------------------- definition of done


def test_sglang_qwen36_flags():
    r = do_render(make_cr("sglang", "0.5.23"))
    args = container(r)["args"]
    assert has_pair(args, "--speculative-algorithm", "DFLASH")
    assert has_pair(args, "--speculative-num-draft-tokens", "16")
    assert has_pair(args, "--speculative-draft-window-size", "2048")
    assert has_pair(args, "--speculative-draft-model-path", "z-lab/Qwen3.6-27B-DFlash")
    assert has_pair(args, "--model-path", "Qwen/Qwen3.6-27B")
    assert "--enable-metrics" in args
    assert "--speculative-dflash-draft-window-size" not in args
    assert "--speculative-model" not in args


def test_sglang_old_release_uses_old_window_flag():
    r = do_render(make_cr("sglang", "0.5.10"))
    args = container(r)["args"]
    assert has_pair(args, "--speculative-dflash-draft-window-size", "2048")
    assert "--speculative-draft-window-size" not in args


def test_vllm_qwen36_speculative_config_and_env():
    r = do_render(make_cr("vllm", "0.33.0"))
    c = container(r)
    assert c["command"][:2] == ["vllm", "serve"]
    assert c["args"][0] == "Qwen/Qwen3.6-27B"
    sc = spec_config(c["args"])
    assert sc["method"] == "dflash"
    assert sc["num_speculative_tokens"] == 15
    assert sc["model"] == "z-lab/Qwen3.6-27B-DFlash"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert not any(a.startswith("--speculative-draft-window") for a in c["args"])
    assert "--speculative-model" not in c["args"]


def test_vllm_full_attention_drafter_has_no_v2_env():
    r = do_render(make_cr("vllm", "0.33.0", target={"model": "Qwen/Qwen3-8B"}, drafter={"model": "z-lab/Qwen3-8B-DFlash-b16"}),
                  "qwen3-8b")
    env = {e["name"] for e in container(r)["env"]}
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env
    assert spec_config(container(r)["args"])["num_speculative_tokens"] == 15


def test_kimi_block_8_draft_tokens():
    r = do_render(make_cr("sglang", "0.5.23", "rtx-pro-6000", 8, target={"model": "moonshotai/Kimi-K2.6", "trustRemoteCode": True},
                          drafter={"model": "z-lab/Kimi-K2.6-DFlash"}), "kimi-k2.6")
    args = container(r)["args"]
    assert has_pair(args, "--speculative-num-draft-tokens", "8")
    assert "--trust-remote-code" in args
    assert not any("window" in a for a in args)  # full-attention drafter: no compact cache


def test_rtx_pro_6000_x8_node_selector_and_gpu_limit():
    r = do_render(make_cr("sglang", "0.5.23", "rtx-pro-6000", 8))
    tmpl = pod_template(r)
    assert tmpl["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert "nvidia.com/gpu.family" not in tmpl["spec"]["nodeSelector"]
    res = container(r)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "8"
    assert res["requests"]["nvidia.com/gpu"] == "8"
    assert has_pair(container(r)["args"], "--tp-size", "8")


@pytest.mark.parametrize("gpu, label", [("b300", "NVIDIA-B300-SXM6-AC"), ("b200", "NVIDIA-B200")])
def test_product_label_per_gpu(gpu, label):
    r = do_render(make_cr("vllm", "0.33.0", gpu))
    assert pod_template(r)["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == label


# ----------------------------------------------------------------- pod shape


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_pod_shape(engine, version):
    r = do_render(make_cr(engine, version))
    tmpl = pod_template(r)
    c = container(r)
    assert c["name"] == "engine"
    # exec form: lists of strings, never a shell
    assert isinstance(c["command"], list) and isinstance(c["args"], list)
    assert all(isinstance(x, str) for x in c["command"] + c["args"])
    assert c["command"][0] not in SHELLS and "-c" not in c["command"]
    # /dev/shm is a memory-backed emptyDir
    [m] = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    [v] = [v for v in tmpl["spec"]["volumes"] if v["name"] == m["name"]]
    assert v["emptyDir"]["medium"] == "Memory"
    # named port and probes
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert set(ports) == {"http"}
    assert ports["http"] == (30000 if engine == "sglang" else 8000)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    assert has_pair(c["args"], "--port", str(ports["http"]))
    # GPU taint tolerated
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tmpl["spec"]["tolerations"]
    # every object is labelled and in the CR's namespace
    for o in r.objects:
        assert o["metadata"]["namespace"] == "models"
        assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "qwen36"


def test_shm_size_from_spec():
    r = do_render(make_cr(pod={"shmSize": "32Gi"}))
    [v] = [v for v in pod_template(r)["spec"]["volumes"] if v["name"] == "dshm"]
    assert v["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}


def test_object_set_single_node():
    r = do_render(make_cr())
    assert [o["kind"] for o in r.objects] == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
    r = do_render(make_cr(), pod_monitor=True)
    assert "PodMonitor" in [o["kind"] for o in r.objects]


# ----------------------------------------------------------------- config hash


def _hash(r) -> str:
    return pod_template(r)["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]


def test_config_hash_stable_when_nothing_changes():
    h1 = _hash(do_render(make_cr()))
    h2 = _hash(do_render(make_cr()))
    assert h1 == h2
    assert h1 == do_render(make_cr()).config_hash


def test_config_hash_ignores_replicas_and_key_order():
    base = _hash(do_render(make_cr()))
    assert _hash(do_render(make_cr(replicas=3))) == base
    d, t = pair("qwen3.6-27b")
    d_rev = dict(reversed(list(d.items())))
    t_rev = dict(reversed(list(t.items())))
    assert _hash(render(make_cr(), t_rev, d_rev)) == base


@pytest.mark.parametrize("change", [
    {"speculation": {"blockSize": 8}},
    {"speculation": {"draftWindow": 4096}},
    {"gpu": {"type": "b300", "count": 2}},
    {"engine": {"name": "sglang", "version": "0.5.23", "extraArgs": ["--mem-fraction-static", "0.8"]}},
    {"target": {"model": "Qwen/Qwen3.6-27B", "revision": "main"}},
    {"drafter": {"model": "z-lab/Qwen3.6-27B-DFlash-v2"}},
    {"engine": {"name": "vllm", "version": "0.33.0"}},
], ids=["blockSize", "draftWindow", "gpu.count", "extraArgs", "revision", "drafter", "engine"])
def test_config_hash_changes_with_spec(change):
    base = _hash(do_render(make_cr()))
    assert _hash(do_render(make_cr(**change))) != base


def test_config_hash_changes_with_config_file():
    base = _hash(do_render(make_cr()))
    d, t = pair("qwen3.6-27b")
    d["sliding_window"] = 4096
    assert _hash(render(make_cr(), t, d)) != base


# ----------------------------------------------------------------- multi-node


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_two_nodes_render_leaderworkerset(engine, version):
    r = do_render(make_cr(engine, version, "b300", 2, nodes=2))
    kinds = [o["kind"] for o in r.objects]
    assert "Deployment" not in kinds
    [lws] = r.by_kind("LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        tmpl = lws["spec"]["leaderWorkerTemplate"][role]
        [c] = tmpl["spec"]["containers"]
        assert "$(LWS_WORKER_INDEX)" in c["args"], role
        assert c["command"][0] not in SHELLS
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"  # GPUs per node
    leader_c = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert any("$(LWS_LEADER_ADDRESS)" in a for a in leader_c["args"])
    # the Service points at the leader only
    [svc] = r.by_kind("Service")
    assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_vllm_workers_are_headless():
    r = do_render(make_cr("vllm", "0.33.0", "b300", 2, nodes=2))
    [lws] = r.by_kind("LeaderWorkerSet")
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    assert "--headless" in worker and "--headless" not in leader


# ----------------------------------------------------------------- refusal


@pytest.mark.parametrize("mutate", [
    lambda d: d["dflash_config"].pop("target_layer_ids"),
    lambda d: d.__setitem__("hidden_size", 4096),
    lambda d: d["dflash_config"].__setitem__("mask_token_id", 10**6),
], ids=["no-ids", "hidden", "mask"])
def test_incompatible_pair_raises_and_renders_nothing(mutate):
    d, t = pair("qwen3.6-27b")
    mutate(d)
    out = []
    with pytest.raises(RenderError) as ei:
        out.append(render(make_cr(), t, d))
    assert out == []
    assert any(f.severity.value == "error" for f in ei.value.findings)
    assert "error" in str(ei.value)


def test_spec_level_error_raises():
    with pytest.raises(RenderError) as ei:
        do_render(make_cr(speculation={"blockSize": 32}))
    assert "BlockSizeAboveTrained" in {f.code for f in ei.value.findings}


def test_owned_extra_arg_raises():
    with pytest.raises(RenderError) as ei:
        do_render(make_cr(engine={"name": "sglang", "version": "0.5.23", "extraArgs": ["--speculative-algorithm", "EAGLE"]}))
    assert [f.path for f in ei.value.findings if f.code == "ExtraArgSetsOwnedFlag"] == ["spec.engine.extraArgs[0]"]


# ----------------------------------------------------------------- argv integrity


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_extra_args_appended_as_separate_elements(engine, version):
    extra = ["--served-model-name", "x --speculative-algorithm EAGLE", "--max-running-requests=32"]
    r = do_render(make_cr(engine, version, engine={"name": engine, "version": version, "extraArgs": extra}))
    args = container(r)["args"]
    assert args[-3:] == extra
    assert args.count("--speculative-algorithm") == (1 if engine == "sglang" else 0)
    assert args.count("x --speculative-algorithm EAGLE") == 1
    if engine == "sglang":
        assert has_pair(args, "--speculative-algorithm", "DFLASH")


@pytest.mark.parametrize("bad", ["Qwen/Qwen3 --speculative-algorithm EAGLE", "--speculative-algorithm", "../x",
                                 "a/../b", "x\n--tp-size 1", "Qwen/Qwen3;id"])
@pytest.mark.parametrize("role", ["target", "drafter"])
def test_model_string_cannot_become_a_flag(bad, role):
    with pytest.raises(pydantic.ValidationError):
        make_cr(**{role: {"model": bad}})


def test_model_names_are_single_argv_elements():
    r = do_render(make_cr(target={"model": "org/model-with-dashes_and.dots"}, drafter={"model": "org/drafter-v1.2"}))
    args = container(r)["args"]
    assert args.count("org/model-with-dashes_and.dots") == 1
    assert has_pair(args, "--speculative-draft-model-path", "org/drafter-v1.2")


# ----------------------------------------------------------------- model sources and revisions


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_pvc_model_source(engine, version):
    cr = make_cr(engine, version,
                 target={"model": "qwen3.6-27b", "pvc": {"claimName": "model-store"}, "revision": "abc123"},
                 drafter={"model": "/dflash/qwen3.6", "pvc": {"claimName": "drafters"}})
    r = do_render(cr)
    c = container(r)
    tmpl = pod_template(r)
    vols = {v["name"]: v for v in tmpl["spec"]["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert vols["target-model"]["persistentVolumeClaim"] == {"claimName": "model-store", "readOnly": True}
    assert vols["drafter-model"]["persistentVolumeClaim"] == {"claimName": "drafters", "readOnly": True}
    assert mounts["target-model"] == {"name": "target-model", "mountPath": "/models/target", "readOnly": True}
    assert mounts["drafter-model"]["readOnly"] is True
    args = c["args"]
    assert "/models/target/qwen3.6-27b" in args
    assert "--revision" not in args  # a path in a claim has no hub revision
    if engine == "sglang":
        assert has_pair(args, "--model-path", "/models/target/qwen3.6-27b")
        assert has_pair(args, "--speculative-draft-model-path", "/models/drafter/dflash/qwen3.6")
    else:
        assert args[0] == "/models/target/qwen3.6-27b"
        assert spec_config(args)["model"] == "/models/drafter/dflash/qwen3.6"


def test_hub_source_has_no_model_volume():
    r = do_render(make_cr())
    names = {v["name"] for v in pod_template(r)["spec"]["volumes"]}
    assert not names & {"target-model", "drafter-model"}


def test_revisions_sglang():
    r = do_render(make_cr(target={"model": "Qwen/Qwen3.6-27B", "revision": "v1.0"},
                          drafter={"model": "z-lab/Qwen3.6-27B-DFlash", "revision": "0123abcd"}))
    args = container(r)["args"]
    assert has_pair(args, "--revision", "v1.0")
    assert has_pair(args, "--speculative-draft-model-revision", "0123abcd")


def test_revisions_vllm():
    r = do_render(make_cr("vllm", "0.33.0", target={"model": "Qwen/Qwen3.6-27B", "revision": "v1.0"},
                          drafter={"model": "z-lab/Qwen3.6-27B-DFlash", "revision": "0123abcd"}))
    args = container(r)["args"]
    assert has_pair(args, "--revision", "v1.0")
    assert spec_config(args)["revision"] == "0123abcd"


def test_no_revision_no_flag():
    for engine, version in (("sglang", "0.5.23"), ("vllm", "0.33.0")):
        args = container(do_render(make_cr(engine, version)))["args"]
        assert "--revision" not in args and "--speculative-draft-model-revision" not in args
        if engine == "vllm":
            assert "revision" not in spec_config(args)


def test_hf_token_from_secret():
    r = do_render(make_cr(target={"model": "Qwen/Qwen3.6-27B", "tokenSecretRef": {"name": "hf", "key": "token"}}))
    [tok] = [e for e in container(r)["env"] if e["name"] == "HF_TOKEN"]
    assert tok == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert "value" not in tok


# ----------------------------------------------------------------- ownership and the ConfigMap


def test_owner_references_only_with_uid():
    r = do_render(make_cr())
    assert all("ownerReferences" not in o["metadata"] for o in r.objects)
    r = do_render(make_cr(uid="1234-abcd"))
    for o in r.objects:
        [ref] = o["metadata"]["ownerReferences"]
        assert ref["uid"] == "1234-abcd"
        assert ref["kind"] == "SpeculativeDeployment"
        assert ref["apiVersion"] == "specdeploy.io/v1alpha1"
        assert ref["name"] == "qwen36"
        assert ref["controller"] is True


@pytest.mark.parametrize("engine, version, nodes", [("sglang", "0.5.23", 1), ("vllm", "0.33.0", 1), ("vllm", "0.33.0", 2)])
def test_configmap_engine_config_round_trips(engine, version, nodes):
    r = do_render(make_cr(engine, version, "b300", 2, nodes=nodes))
    [cm] = r.by_kind("ConfigMap")
    doc = json.loads(cm["data"]["engine-config.json"])
    ec = EngineConfig.model_validate(doc)
    assert ec == r.engine_config
    assert ec.args == container(r)["args"]
    assert ec.command == container(r)["command"]
    assert ec.engine == engine and ec.engine_version == version
    assert ec.speculation.block_size == 16 and ec.speculation.num_speculative_tokens == 15
    assert ec.speculation.target_layer_ids == [1, 16, 31, 46, 61]
    env = {e["name"]: e["value"] for e in container(r)["env"] if "value" in e}
    assert env == ec.env
    # the pod mounts that ConfigMap
    [v] = [v for v in pod_template(r)["spec"]["volumes"] if v["name"] == "engine-config"]
    assert v["configMap"]["name"] == cm["metadata"]["name"]
    report = json.loads(cm["data"]["check-report.json"])
    assert report["ok"] is True


def test_render_does_not_mutate_inputs():
    d, t = pair("qwen3.6-27b")
    d0, t0 = copy.deepcopy(d), copy.deepcopy(t)
    render(make_cr(), t, d)
    assert (d, t) == (d0, t0)
