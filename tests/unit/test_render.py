"""Rendering: from a SpeculativeDeployment and the two config.json files to workload objects."""

from __future__ import annotations

import copy
import json

import pydantic
import pytest

from testkit import pair
from specdeploy.api.types import SpeculativeDeployment
from specdeploy.core.engineconfig import ENGINE_CONFIG_KEY, EngineConfig
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
    # SGLang 0.5.23 windows the drafter's sliding layers itself: no compact cache by default
    assert not any("window-size" in a for a in args)
    assert has_pair(args, "--speculative-draft-model-path", "z-lab/Qwen3.6-27B-DFlash")
    assert has_pair(args, "--model-path", "Qwen/Qwen3.6-27B")
    assert "--enable-metrics" in args
    assert "--speculative-model" not in args
    assert r.engine_config.speculation.native_window == 2048 and r.engine_config.speculation.draft_window is None


def test_sglang_draft_window_asks_for_the_compact_cache():
    r = do_render(make_cr("sglang", "0.5.23", speculation={"draftWindow": 2048},
                          engine={"name": "sglang", "version": "0.5.23", "maxModelLen": 65536}))
    args = container(r)["args"]
    assert has_pair(args, "--speculative-draft-window-size", "2048")
    assert has_pair(args, "--context-length", "65536")
    assert "CompactCacheTruncatesFullAttention" in {f.code for f in r.analysis.findings}


def test_sglang_old_release_uses_old_window_flag():
    r = do_render(make_cr("sglang", "0.5.11"))
    args = container(r)["args"]
    assert has_pair(args, "--speculative-dflash-draft-window-size", "2048")
    assert "--speculative-draft-window-size" not in args
    r = do_render(make_cr("sglang", "0.5.13"))
    assert has_pair(container(r)["args"], "--speculative-draft-window-size", "2048")


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


def test_config_hash_is_the_engine_config_digest_and_the_configmap_its_text():
    # render serialises the engine config once for both (hash and ConfigMap text)
    r = do_render(make_cr())
    assert r.config_hash == r.engine_config.digest()[:16]
    cm = next(o for o in r.objects if o["kind"] == "ConfigMap")
    assert cm["data"][ENGINE_CONFIG_KEY] == r.engine_config.to_json()


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
    limit = "--max-running-requests=32" if engine == "sglang" else "--max-num-seqs=32"
    extra = ["--served-model-name", "x --speculative-algorithm EAGLE", limit]
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


# ----------------------------------------------------------------- preflight init container


def init_containers(template: dict) -> dict[str, dict]:
    return {c["name"]: c for c in template["spec"].get("initContainers", [])}


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_preflight_init_container_for_hub_models(engine, version):
    r = do_render(make_cr(engine, version, target={"revision": "v1"}))
    tpl = pod_template(r)
    pf = init_containers(tpl)["preflight"]
    eng_c = container(r)
    assert pf["image"] == eng_c["image"] and pf["command"] == ["specdeploy-runtime", "preflight"]
    assert pf["args"] == ["--target-model", "Qwen/Qwen3.6-27B", "--target-revision", "v1",
                          "--drafter-model", "z-lab/Qwen3.6-27B-DFlash",
                          "--engine-config", "/etc/specdeploy/engine-config.json",
                          "--download-dir", "/var/run/specdeploy/configs"]
    assert pf["terminationMessagePolicy"] == "FallbackToLogsOnError"
    sc = pf["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False and sc["runAsNonRoot"] is True
    res = pf["resources"]
    assert "nvidia.com/gpu" not in res.get("limits", {}) and "nvidia.com/gpu" not in res.get("requests", {})
    assert res["requests"] == {"cpu": "100m", "memory": "256Mi"}
    mounts = {m["mountPath"]: m for m in pf["volumeMounts"]}
    assert mounts["/etc/specdeploy"]["readOnly"] is True
    assert mounts["/var/run/specdeploy/configs"]["name"] == mounts["/tmp"]["name"] == "preflight-scratch"
    vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
    assert "emptyDir" in vols["preflight-scratch"]
    # no shell anywhere
    assert pf["command"][0] not in SHELLS


def test_preflight_init_container_for_pvc_models_and_token():
    r = do_render(make_cr("sglang", target={"pvc": {"claimName": "weights"}, "model": "qwen/27b",
                                            "tokenSecretRef": {"name": "hf", "key": "token"}}))
    pf = init_containers(pod_template(r))["preflight"]
    assert pf["args"][:4] == ["--target-dir", "/models/target/qwen/27b", "--drafter-model", "z-lab/Qwen3.6-27B-DFlash"]
    assert {"name": "target-model", "mountPath": "/models/target", "readOnly": True} in pf["volumeMounts"]
    env = {e["name"]: e for e in pf["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert env["HOME"]["value"] == "/tmp" and env["PYTHONDONTWRITEBYTECODE"]["value"] == "1"


def test_preflight_runs_on_every_multinode_pod():
    r = do_render(make_cr("sglang", count=8, nodes=2))
    lwt = workload(r)["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert list(init_containers(lwt[role])) == ["preflight"]


# ----------------------------------------------------------------- baked drafter (image table)

COMMIT = "c" * 40


def baked_table(engine="sglang", version="0.5.23", digest=None, revision=COMMIT):
    from specdeploy.core import engines as eng
    from specdeploy.core.engineconfig import config_digest

    d, _ = pair("qwen3.6-27b")
    return (eng.BakedDrafterImage(engine, version, "z-lab/Qwen3.6-27B-DFlash", revision,
                                  "ghcr.io/specdeploy/runtime@sha256:" + "b" * 64, digest or config_digest(d)),)


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_baked_drafter_image_is_used_with_its_path(engine, version):
    cr = make_cr(engine, version, drafter={"revision": COMMIT})
    r = do_render(cr, image_table=baked_table(engine, version))
    c = container(r)
    assert c["image"] == "ghcr.io/specdeploy/runtime@sha256:" + "b" * 64 and r.image == c["image"]
    assert r.baked_drafter is not None and r.engine_config.drafter.model == "/opt/specdeploy/drafter"
    if engine == "sglang":
        assert has_pair(c["args"], "--speculative-draft-model-path", "/opt/specdeploy/drafter")
        assert "--speculative-draft-model-revision" not in c["args"]
    else:
        sc = spec_config(c["args"])
        assert sc["model"] == "/opt/specdeploy/drafter" and "revision" not in sc
    pf = init_containers(pod_template(r))["preflight"]
    assert pf["image"] == c["image"]
    i = pf["args"].index("--drafter-dir")
    assert pf["args"][i + 1] == "/opt/specdeploy/drafter" and "--expect-baked" in pf["args"]
    assert "--drafter-model" not in pf["args"]


def test_without_a_matching_image_the_drafter_is_downloaded():
    from specdeploy.core import engines as eng

    cases = [
        (make_cr("sglang", drafter={"revision": COMMIT}), ()),  # empty table
        (make_cr("sglang"), baked_table()),  # revision not pinned: cannot match an image's files
        (make_cr("sglang", drafter={"revision": "d" * 40}), baked_table()),  # another commit
        (make_cr("sglang", "0.5.22", drafter={"revision": COMMIT}), baked_table()),  # another engine release
        (make_cr("vllm", "0.33.0", drafter={"revision": COMMIT}), baked_table()),  # another engine
        (make_cr("sglang", drafter={"revision": COMMIT}, engine={"image": "registry.example/own:1"}), baked_table()),
    ]
    for cr, table in cases:
        r = do_render(cr, image_table=table)
        c = container(r)
        assert r.baked_drafter is None
        assert c["image"] == (cr.spec.engine.image or eng.get_engine(cr.spec.engine.name).default_image(cr.spec.engine.version))
        assert "/opt/specdeploy/drafter" not in json.dumps(c["args"])
        assert "--expect-baked" not in init_containers(pod_template(r))["preflight"]["args"]
    assert eng.BAKED_DRAFTER_IMAGES == ()  # no image is published yet: the shipped table is empty


def test_baked_image_with_another_config_digest_is_not_used():
    r = do_render(make_cr("sglang", drafter={"revision": COMMIT}), image_table=baked_table(digest="sha256:" + "0" * 64))
    assert r.baked_drafter is None and container(r)["image"].startswith("ghcr.io/specdeploy/runtime:sglang-")
    assert "BakedDrafterDigestMismatch" in {f.code for f in r.analysis.findings}


# ----------------------------------------------------------------- tuned kernels: Job and mounts


def kimi_cr(engine="sglang", version="0.5.23", **kw):
    return make_cr(engine, version, count=8, target={"model": "moonshotai/Kimi-K2.6", "trustRemoteCode": True},
                   drafter={"model": "z-lab/Kimi-K2.7-Code-DFlash"}, **kw)


def test_tuning_off_or_dense_target_renders_nothing():
    assert do_render(kimi_cr(), "kimi-k2.6").tuning_objects == []
    r = do_render(make_cr("sglang", tuning={"enabled": True}))  # Qwen3.6-27B is dense
    assert r.tuning is None and r.tuning_objects == []
    assert "initContainers" in pod_template(r)["spec"] and "tuned-kernels" not in init_containers(pod_template(r))


@pytest.mark.parametrize("engine,version,env_var", [("sglang", "0.5.23", "SGLANG_MOE_CONFIG_DIR"),
                                                    ("vllm", "0.33.0", "VLLM_TUNED_CONFIG_FOLDER")])
def test_tuning_job_and_configmap_mounts(engine, version, env_var):
    r = do_render(kimi_cr(engine, version, uid="u-1", tuning={"enabled": True}), "kimi-k2.6")
    plan = r.tuning
    assert plan is not None and plan.env_var == env_var and plan.storage == "configMap"
    assert plan.shape == {"E": 385 if engine == "sglang" else 384, "N": 256, "dtype": "int4_w4a16", "block_shape": None,
                          "per_channel_quant": False}
    assert plan.file_name == f"E={plan.shape['E']},N=256,device_name=NVIDIA_B300_SXM6_AC,dtype=int4_w4a16.json"
    [job] = r.tuning_objects
    assert job["kind"] == "Job" and job["metadata"]["name"] == f"qwen36-tune-{plan.key[:10]}"
    assert len(job["metadata"]["name"]) <= 63
    pod = job["spec"]["template"]["spec"]
    [tc] = pod["containers"]
    assert tc["resources"]["limits"]["nvidia.com/gpu"] == "8" and tc["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-B300-SXM6-AC"
    assert pod["restartPolicy"] == "Never" and tc["command"] == ["specdeploy-runtime", "tune"]
    assert tc["args"][:6] == ["--engine", engine, "--tp", "8", "--gpu-device-name", "NVIDIA_B300_SXM6_AC"]
    assert has_pair(tc["args"], "--target-model", "moonshotai/Kimi-K2.6")
    assert tc["image"] == f"ghcr.io/specdeploy/runtime:{engine}-{version}"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    # the engine pods: ConfigMap (optional) -> install-tuned init container -> emptyDir -> engine env
    tpl = pod_template(r)
    inits = init_containers(tpl)
    assert list(inits) == ["preflight", "tuned-kernels"]
    assert inits["tuned-kernels"]["args"] == ["--src", "/var/run/specdeploy/tuned-src", "--dest", "/var/run/specdeploy/tuned-kernels"]
    vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
    assert vols["tuned-kernels-src"]["configMap"] == {"name": plan.configmap_name, "optional": True}
    assert "emptyDir" in vols["tuned-kernels"]
    c = container(r)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env[env_var] == "/var/run/specdeploy/tuned-kernels"
    assert {"name": "tuned-kernels", "mountPath": "/var/run/specdeploy/tuned-kernels", "readOnly": True} in c["volumeMounts"]
    assert "nvidia.com/gpu" not in json.dumps(inits["tuned-kernels"]["resources"])


def test_tuning_key_is_deterministic_and_follows_its_inputs():
    def key(**kw):
        return do_render(kimi_cr(tuning={"enabled": True}, **kw), "kimi-k2.6").tuning.key

    base = key()
    assert key() == base
    assert key(pod={"shmSize": "32Gi"}) == base  # not an input of the tuning
    assert key(gpu={"type": "b200", "count": 8}) != base  # another GPU product
    assert key(version="0.5.22") != base  # another engine version
    assert key(gpu={"type": "b300", "count": 4}) != base  # another N


def test_tuning_pvc_storage():
    r = do_render(kimi_cr("vllm", "0.33.0", tuning={"enabled": True, "storage": "pvc", "pvc": {"claimName": "kernels"}}),
                  "kimi-k2.6")
    plan = r.tuning
    [job] = r.tuning_objects
    tc = job["spec"]["template"]["spec"]["containers"][0]
    assert has_pair(tc["args"], "--out-dir", f"/var/run/specdeploy/tuning-out/{plan.key[:10]}")
    assert {"name": "tuning-out", "persistentVolumeClaim": {"claimName": "kernels"}} in job["spec"]["template"]["spec"]["volumes"]
    tpl = pod_template(r)
    assert list(init_containers(tpl)) == ["preflight"]
    vols = {v["name"]: v for v in tpl["spec"]["volumes"]}
    assert vols["tuned-kernels"]["persistentVolumeClaim"] == {"claimName": "kernels", "readOnly": True}
    m = next(m for m in container(r)["volumeMounts"] if m["name"] == "tuned-kernels")
    assert m == {"name": "tuned-kernels", "mountPath": "/var/run/specdeploy/tuned-kernels", "readOnly": True,
                 "subPath": plan.key[:10]}


def test_tuning_storage_validation():
    with pytest.raises(pydantic.ValidationError, match="tuning.pvc is required"):
        make_cr(tuning={"enabled": True, "storage": "pvc"})
    with pytest.raises(pydantic.ValidationError, match="tuning.pvc is required"):
        make_cr(tuning={"enabled": True, "pvc": {"claimName": "x"}})


def test_tuning_changes_the_pod_template_hash():
    a = do_render(kimi_cr(), "kimi-k2.6")
    b = do_render(kimi_cr(tuning={"enabled": True}), "kimi-k2.6")
    assert a.config_hash != b.config_hash
    assert a.engine_config == b.engine_config  # the engine config document itself is unchanged


def test_tuned_configmap_from_the_job_result():
    from specdeploy.core.render import build_tuned_configmap
    from specdeploy_runtime import tuning as tn

    cr = kimi_cr(tuning={"enabled": True})
    plan = do_render(cr, "kimi-k2.6").tuning
    rel = f"configs/triton_3_5_1/{plan.file_name}"
    content = json.dumps({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                                "num_warps": 4, "num_stages": 3}}).encode()
    msg = tn.encode_envelope("sglang", plan.device_name, "3.5.1", {rel: content}, key=plan.key)
    cm = build_tuned_configmap(cr, plan, msg)
    assert cm["metadata"]["name"] == plan.configmap_name
    manifest = json.loads(cm["data"]["manifest.json"])
    [(k, path)] = manifest["files"].items()
    assert path == rel and cm["data"][k] == content.decode()
    with pytest.raises(ValueError, match="not a tuned-kernels result"):
        build_tuned_configmap(cr, plan, "config.json not found")
    with pytest.raises(ValueError, match="for key"):
        build_tuned_configmap(cr, plan, tn.encode_envelope("sglang", plan.device_name, "3.5.1", {rel: content}, key="f" * 64))


@pytest.mark.parametrize("storage", ["configMap", "pvc"])
def test_tuning_objects_pass_strict_schemas(storage):
    import kubernetes_validate

    from specdeploy.core.render import build_tuned_configmap
    from specdeploy_runtime import tuning as tn

    tuning = {"enabled": True, "storage": storage, **({"pvc": {"claimName": "kernels"}} if storage == "pvc" else {})}
    cr = kimi_cr(uid="0d6f1f3c-2f6e-4a53-9b8e-4a0f7f0d3a11", tuning=tuning,
                 pod={"priorityClassName": "gpu", "cpu": "32", "memory": "512Gi"})
    r = do_render(cr, "kimi-k2.6")
    objs = [*r.tuning_objects, workload(r)]
    if storage == "configMap":
        msg = tn.encode_envelope("sglang", "NVIDIA_B300_SXM6_AC", "3.5.1", {"configs/triton_3_5_1/x.json": b"{}"},
                                 key=r.tuning.key)
        objs.append(build_tuned_configmap(cr, r.tuning, msg))
    for obj in objs:
        for v in ("1.29.0", "1.33.0", "1.37.0"):
            kubernetes_validate.validate(obj, v, strict=True)


# ----------------------------------------------------------------- methods render what they say


def test_every_method_of_every_engine_row_has_a_rendering():
    from specdeploy.core import engines as eng
    from specdeploy.core.render import ARG_BUILDERS, method_render_problem

    for info in eng.ENGINES.values():
        for row in info.releases:
            for method in row.methods:
                assert method_render_problem(info.name, method) is None, (info.name, row.since, method)
                assert (info.name, method) in ARG_BUILDERS


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_method_without_rendering_is_refused_not_served_as_dflash(engine):
    # as if a capability row gained DDTree: the checker lets it through, the renderer must not
    # emit --speculative-algorithm DFLASH / method dflash for it
    import dataclasses

    from specdeploy.core import engines as eng
    from specdeploy.core.render import RenderError

    info = eng.ENGINES[engine]
    original = info.releases
    object.__setattr__(info, "releases", tuple(dataclasses.replace(r, methods=r.methods | {"ddtree"}) for r in original))
    try:
        cr = make_cr(engine, "0.5.23" if engine == "sglang" else "0.33.0", speculation={"method": "ddtree"})
        with pytest.raises(RenderError) as e:
            do_render(cr)
        [f] = [f for f in e.value.findings if f.code == "MethodNotRenderable"]
        assert "29907" in f.message and f.path == "spec.speculation.method"
    finally:
        object.__setattr__(info, "releases", original)


@pytest.mark.parametrize("engine, version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_user_args_are_not_expanded_by_the_kubelet(engine, version):
    """$(HF_TOKEN) in extraArgs must reach the engine as written, never as the Secret's value."""
    from specdeploy.core.render import expand_kubelet_vars

    extra = ["--served-model-name", "$(HF_TOKEN)-$$(X)-$", "--api-key", "a$b"]
    cr = make_cr(engine, version, engine={"name": engine, "version": version, "extraArgs": extra},
                 target={"model": "Qwen/Qwen3.6-27B", "tokenSecretRef": {"name": "hub", "key": "token"}})
    c = container(do_render(cr))
    env = {e["name"]: "secret-value" for e in c["env"]}
    assert "HF_TOKEN" in env
    expanded = [expand_kubelet_vars(a, env) for a in c["args"]]
    assert expanded[-4:] == extra
    assert not any("secret-value" in a for a in expanded)
