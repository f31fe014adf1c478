"""The hub stand-in serving a directory of models (specdeploy dev tiny-models) through the real
huggingface_hub client: snapshot download byte for byte, the tree listing, ranged reads of the
safetensors header, and the operator's hub resolver. No sleeps: every wait is a client timeout."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
pytest.importorskip("tokenizers")

from testkit import ROOT  # noqa: E402
from specdeploy_dev import tinymodels as tm  # noqa: E402
from specdeploy_dev.hubserver import repos_from_directory, start_in_thread  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    tm.write_tiny_models(root)
    (root / "tiny" / "target" / "nested").mkdir()
    (root / "tiny" / "target" / "nested" / "extra.txt").write_text("a nested file\n")
    (root / "tiny" / "target" / ".hidden").write_text("not served\n")
    return root


@pytest.fixture(scope="module")
def hub(models):
    with start_in_thread(repos_from_directory(models)) as url:
        yield url


@pytest.fixture
def api(hub, tmp_path, monkeypatch):
    import huggingface_hub as hh

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    return hh.HfApi(endpoint=hub)


def test_every_model_directory_is_a_repo(models):
    repos = {r.repo_id: r for r in repos_from_directory(models)}
    assert sorted(repos) == json.loads((models / tm.MANIFEST).read_text())["models"]
    target = repos[tm.TARGET]
    assert sorted(target.files) == ["config.json", "generation_config.json", "model.safetensors", "nested/extra.txt",
                                    "tokenizer.json", "tokenizer_config.json"]
    assert target.lfs == {"model.safetensors"}
    # the commit follows the content: same files, same sha; a changed file, a new sha
    assert {r.repo_id: r.main_sha for r in repos_from_directory(models)} == {k: r.main_sha for k, r in repos.items()}
    assert repos[tm.DRAFTERS["random"]].main_sha != repos[tm.DRAFTERS["shifted"]].main_sha


def test_snapshot_download_is_byte_identical(api, models, tmp_path):
    import huggingface_hub as hh

    local = Path(hh.snapshot_download(tm.TARGET, endpoint=api.endpoint, cache_dir=str(tmp_path / "c")))
    got = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert got == ["config.json", "generation_config.json", "model.safetensors", "nested/extra.txt",
                   "tokenizer.json", "tokenizer_config.json"]
    for rel in got:
        assert (local / rel).read_bytes() == (models / tm.TARGET / rel).read_bytes(), rel


def test_tree_listing(api):
    files = api.list_repo_files(tm.TARGET)
    assert "nested/extra.txt" in files and "model.safetensors" in files and ".hidden" not in files
    top = {e.path: type(e).__name__ for e in api.list_repo_tree(tm.TARGET)}
    assert top["nested"] == "RepoFolder" and "nested/extra.txt" not in top
    weights = [e for e in api.list_repo_tree(tm.TARGET, recursive=True) if e.path == "model.safetensors"][0]
    assert weights.lfs is not None and weights.lfs.size == weights.size
    assert [e.path for e in api.list_repo_tree(tm.TARGET, path_in_repo="nested")] == ["nested/extra.txt"]


def test_safetensors_metadata_by_ranged_reads(api, hub):
    hub.server.reset_counts()
    meta = api.get_safetensors_metadata(tm.DRAFTERS["random"])
    counts = meta.files_metadata["model.safetensors"].parameter_count
    weights = tm.decode_safetensors(tm.build_tiny_models()[f"{tm.DRAFTERS['random']}/model.safetensors"])
    assert counts == {"BF16": sum(a.size for a in weights.values())}


def test_byte_ranges(hub, models):
    import urllib.request

    data = (models / tm.TARGET / "config.json").read_bytes()
    for rng, want, status in (("bytes=0-9", data[:10], 206), ("bytes=5-", data[5:], 206),
                              (f"bytes=10-{len(data) + 50}", data[10:], 206)):
        req = urllib.request.Request(f"{hub}/{tm.TARGET}/resolve/main/config.json", headers={"Range": rng})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert (r.status, r.read()) == (status, want), rng


def test_the_operators_hub_resolver_reads_the_generated_configs(hub, models, tmp_path):
    from specdeploy.controller.hub import fetch_config

    got = fetch_config(tm.DRAFTERS["accept-all"], endpoint=hub, cache_dir=str(tmp_path))
    assert got.doc == json.loads((models / tm.DRAFTERS["accept-all"] / "config.json").read_text())
    assert len(got.commit) == 40


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "not a directory"),
    (lambda p: p, "no model directories"),
])
def test_bad_directories(tmp_path, make, message):
    with pytest.raises(ValueError, match=message):
        repos_from_directory(make(tmp_path))
    r = subprocess.run([str(Path(sys.executable).parent / "specdeploy"), "dev", "hub", str(make(tmp_path))],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1


def test_hub_command_serves_until_terminated(models):
    import signal
    import urllib.request

    p = subprocess.Popen([str(Path(sys.executable).parent / "specdeploy"), "dev", "hub", str(models)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = p.stdout.readline()  # the first line names the URL (a read, bounded by the process)
        assert line.startswith("serving 6 repos on http://127.0.0.1:"), line  # 5 + tiny/mimo-mtp-flat
        base = re.match(r"serving 6 repos on (http://127\.0\.0\.1:\d+):", line).group(1)
        with urllib.request.urlopen(f"{base}/api/models/{tm.TARGET}", timeout=10) as r:
            info = json.loads(r.read())
        assert {s["rfilename"] for s in info["siblings"]} >= {"config.json", "model.safetensors", "tokenizer.json"}
        digest = hashlib.sha256((models / tm.TARGET / "model.safetensors").read_bytes()).hexdigest()
        with urllib.request.urlopen(f"{base}/{tm.TARGET}/resolve/main/model.safetensors", timeout=10) as r:
            assert r.headers["X-Linked-Etag"] == f'"{digest}"'
            assert hashlib.sha256(r.read()).hexdigest() == digest
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
