"""preflight as the renderer runs it: the init container's exact argv against hub models (config.json
downloaded from the hub stand-in with HF_ENDPOINT/HF_TOKEN) and against a drafter baked into the image."""

from __future__ import annotations

import copy
import json

import pytest

from testkit import pair
from runtime_helpers import make_cr, run_runtime
from specdeploy.core import engines as eng
from specdeploy.core.engineconfig import config_digest
from specdeploy.core.render import render
from specdeploy_dev.hubserver import HubRepo, commit_sha, start_in_thread

DRAFTER_COMMIT = commit_sha("z-lab/Qwen3.6-27B-DFlash", "v1")


def repos(drafter: dict, target: dict, *, token: str | None = None) -> list[HubRepo]:
    return [
        HubRepo("Qwen/Qwen3.6-27B", {"config.json": json.dumps(target).encode()}, token=token),
        HubRepo("z-lab/Qwen3.6-27B-DFlash", {"config.json": json.dumps(drafter).encode(),
                                             "model.safetensors": b"\0" * 64},
                revisions={"main": DRAFTER_COMMIT}, token=token),
    ]


def init_container(r, name: str = "preflight") -> dict:
    w = next(o for o in r.objects if o["kind"] == "Deployment")
    return next(c for c in w["spec"]["template"]["spec"]["initContainers"] if c["name"] == name)


def pod_argv(r, tmp_path, baked_dir=None) -> list[str]:
    """The init container's args with the in-pod paths mapped to tmp_path."""
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "engine-config.json").write_text(r.engine_config.to_json())
    args = list(init_container(r)["args"])
    mapping = {"/etc/specdeploy/engine-config.json": str(tmp_path / "etc" / "engine-config.json"),
               "/var/run/specdeploy/configs": str(tmp_path / "configs")}
    if baked_dir is not None:
        mapping[eng.BAKED_DRAFTER_PATH] = str(baked_dir)
    return ["preflight", *[mapping.get(a, a) for a in args], "--termination-log", str(tmp_path / "tl")]


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_hub_models_preflight_downloads_only_config_json(tmp_path, engine, version):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr(engine, version), t, d)
    argv = pod_argv(r, tmp_path)
    assert "--target-model" in argv and "--drafter-model" in argv and "--target-dir" not in argv
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime(*argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
        assert p.returncode == 0, p.stdout + p.stderr
        assert "specdeploy preflight OK" in (tmp_path / "tl").read_text()
        assert hub.server.count(contains="model.safetensors") == 0  # config.json only
        assert hub.server.count("GET", contains="config.json") == 2
    assert json.loads((tmp_path / "configs" / "target" / "config.json").read_text()) == t


def test_hub_token_is_used_for_private_repos(tmp_path):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("sglang"), t, d)
    argv = pod_argv(r, tmp_path)
    with start_in_thread(repos(d, t, token="hf_secret")) as hub:
        p = run_runtime(*argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": ""})
        assert p.returncode == 1
        log = (tmp_path / "tl").read_text()
        assert "ConfigFetchFailed" in log and "HF_TOKEN" in log and "Traceback" not in p.stderr
        p = run_runtime(*argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "hf_secret"})
        assert p.returncode == 0, p.stdout + p.stderr


def test_moved_hub_revision_is_a_digest_mismatch(tmp_path):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("vllm", "0.33.0"), t, d)
    moved = copy.deepcopy(d)
    moved["block_size"] = 8
    with start_in_thread(repos(moved, t)) as hub:
        p = run_runtime(*pod_argv(r, tmp_path), env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 1 and "ConfigDigestMismatch" in (tmp_path / "tl").read_text()


def test_dir_and_model_are_exclusive(tmp_path):
    p = run_runtime("preflight", "--target-dir", str(tmp_path), "--target-model", "a/b", "--drafter-dir", str(tmp_path))
    assert p.returncode != 0 and "exactly one of --target-dir" in p.stderr


# ---------------------------------------------------------------- baked drafter


def baked_row(engine: str, version: str, drafter: dict) -> eng.BakedDrafterImage:
    return eng.BakedDrafterImage(engine, version, "z-lab/Qwen3.6-27B-DFlash", DRAFTER_COMMIT,
                                 f"ghcr.io/specdeploy/runtime:{engine}-{version}-qwen36-dflash@sha256:" + "a" * 64,
                                 config_digest(drafter))


def bake(tmp_path, d: dict, t: dict):
    """bake-drafter against the hub stand-in, as the Dockerfile's build step runs it."""
    out = tmp_path / "opt-drafter"
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime("bake-drafter", "--repo", "z-lab/Qwen3.6-27B-DFlash", "--revision", DRAFTER_COMMIT,
                        "--expect-digest", config_digest(d), "--out", str(out),
                        env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_baked_drafter_preflight(tmp_path, engine, version):
    d, t = pair("qwen3.6-27b")
    out = bake(tmp_path, d, t)
    baked = json.loads((out / "BAKED.json").read_text())
    assert baked == {"repo": "z-lab/Qwen3.6-27B-DFlash", "revision": DRAFTER_COMMIT, "config_digest": config_digest(d)}
    assert (out / "model.safetensors").exists() and not (out / ".cache").exists()
    r = render(make_cr(engine, version, drafter={"revision": DRAFTER_COMMIT}), t, d,
               image_table=(baked_row(engine, version, d),))
    argv = pod_argv(r, tmp_path, baked_dir=out)
    assert "--expect-baked" in argv and "--drafter-model" not in argv
    with start_in_thread(repos(d, t)) as hub:
        env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
        p = run_runtime(*argv, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert hub.server.count(contains="DFlash") == 0  # the drafter is not fetched at all
        # the image's drafter config altered after the build: BAKED.json no longer matches
        altered = copy.deepcopy(d)
        altered["rope_theta"] = 1.0
        (out / "config.json").write_text(json.dumps(altered))
        p = run_runtime(*argv, env=env)
    assert p.returncode == 1
    log = (tmp_path / "tl").read_text()
    assert "BakedDigestMismatch" in log and "ConfigDigestMismatch" in log


def test_baked_manifest_for_another_drafter(tmp_path):
    d, t = pair("qwen3.6-27b")
    out = bake(tmp_path, d, t)
    r = render(make_cr("sglang", drafter={"revision": DRAFTER_COMMIT}), t, d, image_table=(baked_row("sglang", "0.5.23", d),))
    doc = json.loads((out / "BAKED.json").read_text())
    doc["config_digest"] = "sha256:" + "0" * 64
    (out / "BAKED.json").write_text(json.dumps(doc))
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime(*pod_argv(r, tmp_path, baked_dir=out), env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 1
    assert "BakedDigestMismatch" in (tmp_path / "tl").read_text()


def test_image_without_baked_drafter_fails_expect_baked(tmp_path):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("sglang", drafter={"revision": DRAFTER_COMMIT}), t, d, image_table=(baked_row("sglang", "0.5.23", d),))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps(d))
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime(*pod_argv(r, tmp_path, baked_dir=empty), env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 1 and "BakedDrafterMissing" in (tmp_path / "tl").read_text()


def test_bake_refuses_a_branch_and_a_wrong_digest(tmp_path):
    d, t = pair("qwen3.6-27b")
    p = run_runtime("bake-drafter", "--repo", "z-lab/Qwen3.6-27B-DFlash", "--revision", "main", "--out", str(tmp_path / "o"))
    assert p.returncode == 1 and "40-hex commit" in p.stderr
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime("bake-drafter", "--repo", "z-lab/Qwen3.6-27B-DFlash", "--revision", DRAFTER_COMMIT,
                        "--expect-digest", "sha256:" + "1" * 64, "--out", str(tmp_path / "o2"),
                        env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 1 and "DRAFTER_CONFIG_DIGEST" in p.stderr
    assert not (tmp_path / "o2" / "BAKED.json").exists()
    p = run_runtime("bake-drafter", "--repo", "", "--out", str(tmp_path / "none"))
    assert p.returncode == 0 and (tmp_path / "none").is_dir()


def _baseline(engine: str, version: str):
    from specdeploy.core.bench.plan import Variant
    from specdeploy.core.bench.render import BenchOwner, render_variant

    d, t = pair("qwen3.6-27b")
    vo = render_variant(make_cr(engine, version), t, d, BenchOwner("sweep", "default", "u"), Variant("baseline", False))
    return vo, d, t


@pytest.mark.parametrize("engine,version", [("sglang", "0.5.23"), ("vllm", "0.33.0")])
def test_a_benchmark_baseline_is_preflighted_for_its_target(tmp_path, engine, version):
    """Issue 37 hole 7: the baseline variant's pod runs the preflight too, target only (--no-speculation): the
    target's config fetched with the pod's token and compared with the checked one; an argv with speculative flags
    is refused."""
    vo, d, t = _baseline(engine, version)
    r = type("R", (), {"objects": vo.objects, "engine_config": vo.engine_config})
    argv = pod_argv(r, tmp_path)
    assert "--no-speculation" in argv and "--drafter-model" not in argv
    with start_in_thread(repos(d, t, token="hf_secret")) as hub:
        env = {"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
        p = run_runtime(*argv, env={**env, "HF_TOKEN": "hf_secret"})
        assert p.returncode == 0, p.stdout + p.stderr
        assert "speculation off" in (tmp_path / "tl").read_text()
        assert hub.server.count("GET", contains="config.json") == 1  # the target's only
        p = run_runtime(*argv, env={**env, "HF_TOKEN": ""})  # a private target without the token: refused
        assert p.returncode == 1 and "ConfigFetchFailed" in (tmp_path / "tl").read_text()
    # the engine config of a speculative pod under --no-speculation: refused (the argv loads a drafter)
    moved = copy.deepcopy(t)
    moved["num_hidden_layers"] = moved.get("num_hidden_layers", 64) + 1
    spec_r = render(make_cr(engine, version), t, d)
    (tmp_path / "etc" / "engine-config.json").write_text(spec_r.engine_config.to_json())
    with start_in_thread(repos(d, t)) as hub:
        p = run_runtime(*argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")})
        assert p.returncode == 1 and "SpeculationNotOff" in (tmp_path / "tl").read_text(), p.stdout + p.stderr
    with start_in_thread(repos(d, moved)) as hub:  # a moved target revision: the digest differs
        vo_argv = pod_argv(r, tmp_path)
        p = run_runtime(*vo_argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf2")})
        assert p.returncode == 1 and "ConfigDigestMismatch" in (tmp_path / "tl").read_text()
