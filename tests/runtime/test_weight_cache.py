"""The persistent hub cache (spec.cache) on the pod side: the preflight init container, run with the
renderer's exact argv against the hub stand-in, downloads the weights once into the cache under a file
lock; a second start (a pod restart, another replica on the same storage) downloads no weight; two
concurrent preflights download each file once; a drafter baked into the image is never downloaded; the
engine then loads the models with HF_HUB_OFFLINE=1 from the cache alone."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import pytest

from testkit import pair
from runtime_helpers import RUNTIME, make_cr, run_runtime
from specdeploy.core.policy import TenancyPolicy
from specdeploy.core.render import HF_HOME, render
from specdeploy_dev.harness import wait_for
from specdeploy_dev.hubserver import HubRepo, start_in_thread
from specdeploy_runtime.hubfiles import LOCK_DIR
from test_runtime_preflight_pod import DRAFTER_COMMIT, bake, baked_row, pod_argv

WEIGHTS = {"model-00001-of-00002.safetensors": b"\1" * 4096, "model-00002-of-00002.safetensors": b"\2" * 4096,
           "pytorch_model.bin": b"\3" * 4096, "tokenizer.json": b"{}", "generation_config.json": b"{}"}
CACHE = {"type": "pvc", "pvc": {"claimName": "hf-cache"}}
POLICY = TenancyPolicy(pvcs=("hf-cache",))


def hub_repos(drafter: dict, target: dict) -> list[HubRepo]:
    return [
        HubRepo("Qwen/Qwen3.6-27B", {"config.json": json.dumps(target).encode(), **WEIGHTS}),
        HubRepo("z-lab/Qwen3.6-27B-DFlash", {"config.json": json.dumps(drafter).encode(),
                                             "model.safetensors": b"\4" * 2048},
                revisions={"main": DRAFTER_COMMIT}),
    ]


def cache_argv(r, tmp_path, cache_dir, baked_dir=None) -> list[str]:
    argv = pod_argv(r, tmp_path, baked_dir=baked_dir)
    return [str(cache_dir) if a == HF_HOME else a for a in argv]


def weight_gets(hub) -> int:
    return hub.server.count("GET", contains=".safetensors") + hub.server.count("GET", contains=".bin")


def test_render_asks_the_preflight_to_fill_the_cache_and_the_engine_to_stay_offline():
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("vllm", "0.33.0", cache=CACHE), t, d, policy=POLICY)
    assert r.engine_config.env["HF_HUB_OFFLINE"] == "1"
    args = r.by_kind("Deployment")[0]["spec"]["template"]["spec"]["initContainers"][0]["args"]
    assert args[args.index("--weights-cache") + 1] == HF_HOME
    plain = render(make_cr("vllm", "0.33.0"), t, d)
    assert "HF_HUB_OFFLINE" not in plain.engine_config.env
    assert "--weights-cache" not in plain.by_kind("Deployment")[0]["spec"]["template"]["spec"]["initContainers"][0]["args"]


def test_second_start_downloads_no_weights(tmp_path):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("vllm", "0.33.0", cache=CACHE), t, d, policy=POLICY)
    cache = tmp_path / "cache"
    argv = cache_argv(r, tmp_path, cache)
    with start_in_thread(hub_repos(d, t)) as hub:
        env = {"HF_ENDPOINT": hub, "HF_HOME": str(cache)}
        p = run_runtime(*argv, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        first = weight_gets(hub)
        # the two shards and the drafter's weights; the duplicate pytorch_model.bin is skipped
        assert first == 3, hub.server.requests
        assert hub.server.count("GET", contains="pytorch_model.bin") == 0
        assert "weights target Qwen/Qwen3.6-27B@" in p.stdout and "5 of 5 files downloaded" in p.stdout
        assert "weights drafter z-lab/Qwen3.6-27B-DFlash@" in p.stdout and "2 of 2 files downloaded" in p.stdout
        # a restart / a second replica on the same storage
        p = run_runtime(*argv, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert weight_gets(hub) == first, "the second start downloaded weights"
        assert "already in the cache, none downloaded" in p.stdout
        # the engine's view: offline, from the cache alone (the branch ref points at the commit)
        code = ("import huggingface_hub as h, os, sys; "
                "[print(h.snapshot_download(m)) for m in sys.argv[1:]]")
        e = subprocess.run([sys.executable, "-c", code, "Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash"],
                           env={**os.environ, "HF_HOME": str(cache), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"},
                           capture_output=True, text=True, timeout=60)
        assert e.returncode == 0, e.stderr
        snap = e.stdout.split()[0]
        assert sorted(os.listdir(snap)) == sorted(["config.json", "generation_config.json", "tokenizer.json",
                                                   "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
        assert weight_gets(hub) == first


def test_concurrent_preflights_download_each_file_once(tmp_path):
    """Three pods start on one cache while a fourth holds the target's lock: all three wait for it (the
    lock is what they contend on), then each file is downloaded once in all."""
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("sglang", "0.5.23", cache=CACHE), t, d, policy=POLICY)
    cache = tmp_path / "cache"
    (cache / LOCK_DIR).mkdir(parents=True)
    held = open(cache / LOCK_DIR / "Qwen--Qwen3.6-27B.lock", "a+")
    fcntl.flock(held, fcntl.LOCK_EX)
    with start_in_thread(hub_repos(d, t)) as hub:
        procs, logs = [], []
        try:
            for i in range(3):
                pod = tmp_path / f"pod{i}"
                pod.mkdir()
                logs.append((open(pod / "stdout", "w+"), open(pod / "stderr", "w+")))
                procs.append(subprocess.Popen([RUNTIME, *cache_argv(r, pod, cache)], stdout=logs[-1][0],
                                              stderr=logs[-1][1], env={**os.environ, "HF_ENDPOINT": hub,
                                                                        "HF_HOME": str(cache)}))
            waiting = "waiting for another pod's download of Qwen/Qwen3.6-27B"
            wait_for(lambda: all(waiting in (tmp_path / f"pod{i}" / "stderr").read_text() for i in range(3)), 120,
                     "every preflight waiting on the lock")
            assert weight_gets(hub) == 0
        finally:
            held.close()  # releases the lock
            for p in procs:
                p.wait(180)
        outs = [(tmp_path / f"pod{i}" / "stdout").read_text() for i in range(3)]
        assert all(p.returncode == 0 for p in procs), outs
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors"):
            gets = sum(n for k, n in hub.server.requests.items() if k.startswith("GET ") and k.endswith("/" + name))
            assert gets == 1, (name, hub.server.requests)
        assert sum("5 of 5 files downloaded" in o for o in outs) == 1
        assert sum("weights target Qwen/Qwen3.6-27B" in o and "none downloaded" in o for o in outs) == 2


def test_a_refused_pair_downloads_nothing(tmp_path):
    d, t = pair("qwen3.6-27b")
    r = render(make_cr("vllm", "0.33.0", cache=CACHE), t, d, policy=POLICY)
    cache = tmp_path / "cache"
    bad = dict(t, changed_on_the_hub=True)  # the hub's target is no longer the one the operator checked
    with start_in_thread(hub_repos(d, bad)) as hub:
        p = run_runtime(*cache_argv(r, tmp_path, cache), env={"HF_ENDPOINT": hub, "HF_HOME": str(cache)})
        assert p.returncode == 1
        assert weight_gets(hub) == 0


def test_a_baked_drafter_is_never_downloaded(tmp_path):
    d, t = pair("qwen3.6-27b")
    out = bake(tmp_path, d, t)
    r = render(make_cr("vllm", "0.33.0", drafter={"revision": DRAFTER_COMMIT}, cache=CACHE), t, d, policy=POLICY,
               image_table=(baked_row("vllm", "0.33.0", d),))
    cache = tmp_path / "cache"
    argv = cache_argv(r, tmp_path, cache, baked_dir=out)
    assert "--drafter-model" not in argv and "--weights-cache" in argv
    with start_in_thread(hub_repos(d, t)) as hub:
        p = run_runtime(*argv, env={"HF_ENDPOINT": hub, "HF_HOME": str(cache)})
        assert p.returncode == 0, p.stdout + p.stderr
        assert hub.server.count(contains="DFlash") == 0
        assert hub.server.count("GET", contains="model-0000") == 2


