"""The hub resolver (specdeploy.controller.hub) against the local hub stand-in (specdeploy_dev.hubserver),
through the real huggingface_hub client. No sleeps: faults are injected with the stand-in's knobs and every wait is
bounded by a client timeout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from specdeploy.controller.hub import HubConfig, HubResolutionError, fetch_config  # noqa: E402
from specdeploy.core.engineconfig import config_digest  # noqa: E402
from specdeploy_dev.hubserver import HubRepo, commit_sha, start, start_in_thread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.json"))

MAIN = commit_sha("org/model", "main")
TAGGED = commit_sha("org/model", "v1.0")
MOVED = commit_sha("org/model", "main", "2")
TOKEN = "hf_private_token"
GATED_TOKEN = "hf_gated_token"
CFG_MAIN = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096}
CFG_TAG = {"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 2048}


def fixture_repo_id(name: str) -> str:
    return "fixtures/" + name.removesuffix(".json")


def hub_repos() -> list[HubRepo]:
    repos = [HubRepo(fixture_repo_id(n), {"config.json": (FIXTURES / n).read_bytes()}) for n in FIXTURE_FILES]
    repos += [
        HubRepo("org/model", {"config.json": json.dumps(CFG_MAIN).encode(), "README.md": b"# model"},
                {"main": MAIN, "v1.0": TAGGED}, commits={TAGGED: {"config.json": json.dumps(CFG_TAG).encode()}}),
        HubRepo("org/private", {"config.json": json.dumps(CFG_MAIN).encode()}, token=TOKEN),
        HubRepo("org/gated", {"config.json": json.dumps(CFG_MAIN).encode()}, token=GATED_TOKEN, gated=True),
        HubRepo("org/no-config", {"README.md": b"weights only"}),
        HubRepo("org/bad-json", {"config.json": b'{"model_type": "qwen3",'}),
        HubRepo("org/json-list", {"config.json": b"[1, 2]"}),
        HubRepo("org/not-utf8", {"config.json": b"\xff\xfe{}"}),
    ]
    return repos


@pytest.fixture
def hub():
    """A fresh stand-in per test: the base URL (a str) with the server as ``hub.server``."""
    with start_in_thread(hub_repos()) as url:
        yield url


@pytest.fixture
def fetch(hub, tmp_path):
    """fetch_config against the stand-in with a private cache dir and a short timeout."""

    def call(repo_id, revision=None, **kw):
        kw.setdefault("endpoint", hub)
        kw.setdefault("cache_dir", str(tmp_path / "hf-cache"))
        kw.setdefault("timeout", 5.0)
        return fetch_config(repo_id, revision, **kw)

    return call


def expect_error(fn, *args, **kw) -> HubResolutionError:
    with pytest.raises(HubResolutionError) as info:
        fn(*args, **kw)
    err = info.value
    assert "\n" not in err.message and err.message == str(err)
    return err


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- resolving real configs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixture_configs_resolve_with_digest_and_commit(fetch, hub, name):
    got = fetch(fixture_repo_id(name))
    assert isinstance(got, HubConfig)
    want = json.loads((FIXTURES / name).read_text())
    assert got.doc == want
    assert got.digest == config_digest(got.doc) == config_digest(want)
    assert got.commit == commit_sha(fixture_repo_id(name), "main")
    assert got.repo_id == fixture_repo_id(name) and got.revision is None
    # a first sight: HEAD on the branch, then HEAD + GET by commit
    assert hub.server.count("HEAD") == 2 and hub.server.count("GET") == 1


def test_branch_is_resolved_to_its_commit(fetch, hub):
    got = fetch("org/model", "main")
    assert (got.commit, got.revision, got.doc) == (MAIN, "main", CFG_MAIN)
    assert hub.server.requests[f"GET /org/model/resolve/{MAIN}/config.json"] == 1


def test_unchanged_branch_costs_one_head_and_no_download(fetch, hub):
    first = fetch("org/model")
    hub.server.reset_counts()
    again = fetch("org/model")
    assert again == first
    assert dict(hub.server.requests) == {"HEAD /org/model/resolve/main/config.json": 1}


def test_moved_branch_resolves_to_the_new_commit(fetch, hub):
    assert fetch("org/model").commit == MAIN
    moved = {**CFG_MAIN, "num_hidden_layers": 40}
    hub.server.set_revision("org/model", "main", MOVED, {"config.json": json.dumps(moved).encode()})
    got = fetch("org/model")
    assert (got.commit, got.doc, got.digest) == (MOVED, moved, config_digest(moved))


def test_tag(fetch):
    got = fetch("org/model", "v1.0")
    assert (got.commit, got.revision, got.doc) == (TAGGED, "v1.0", CFG_TAG)


def test_explicit_commit(fetch):
    got = fetch("org/model", TAGGED)
    assert (got.commit, got.revision, got.doc) == (TAGGED, TAGGED, CFG_TAG)
    upper = fetch("org/model", MAIN.upper())
    assert (upper.commit, upper.revision, upper.doc) == (MAIN, MAIN.upper(), CFG_MAIN)


def test_pinned_commit_is_served_from_cache_without_requests(hub, tmp_path):
    cache = str(tmp_path / "cache")
    first = fetch_config("org/model", TAGGED, endpoint=hub, cache_dir=cache)
    assert hub.server.count("GET") == 1
    hub.server.reset_counts()
    second = fetch_config("org/model", TAGGED, endpoint=hub, cache_dir=cache)
    assert second == first
    assert hub.server.count() == 0


def test_pinned_commit_resolves_with_the_hub_gone(tmp_path):
    cache = str(tmp_path / "cache")
    with start_in_thread(hub_repos()) as url:
        first = fetch_config("org/model", MAIN, endpoint=url, cache_dir=cache)
    # the stand-in is stopped: nothing listens there any more
    assert fetch_config("org/model", MAIN, endpoint=url, cache_dir=cache) == first
    # a branch needs the hub: no silent fallback to a cached commit
    err = expect_error(fetch_config, "org/model", "main", endpoint=url, cache_dir=cache, timeout=2)
    assert (err.reason, err.retryable) == ("HubUnreachable", True)


def test_same_content_at_a_new_commit_is_not_downloaded_again(fetch, hub):
    fetch("org/model")
    hub.server.set_revision("org/model", "main", MOVED)  # new commit, same files
    hub.server.reset_counts()
    assert fetch("org/model").commit == MOVED
    assert hub.server.count("GET") == 0 and hub.server.count("HEAD") == 2


def test_concurrent_resolutions_agree(fetch):
    results, errors = [], []

    def worker():
        try:
            results.append(fetch("org/model"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(results) == 6 and all(r == results[0] for r in results)


# ---- authentication -----------------------------------------------------------------------------------------


def test_token_required_for_private_repo(fetch, hub):
    err = expect_error(fetch, "org/private")
    assert hub.server.log[-1] == ("HEAD", "/org/private/resolve/main/config.json", 401)
    # the hub does not reveal that a private repo exists: it reads as not found, with the token hint
    assert (err.reason, err.retryable) == ("ModelNotFound", False)
    assert "org/private" in err.message and "tokenSecretRef" in err.message
    got = fetch("org/private", token=TOKEN)
    assert (got.doc, got.commit) == (CFG_MAIN, commit_sha("org/private", "main"))


def test_token_is_never_sent_implicitly(fetch, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # huggingface_hub would pick this up for token=None
    assert expect_error(fetch, "org/private").reason == "ModelNotFound"


def test_rejected_token(fetch, hub):
    err = expect_error(fetch, "org/private", token="hf_not_a_token")
    assert hub.server.log[-1][2] == 401
    assert (err.reason, err.retryable) == ("HubUnauthorized", False)
    assert "replace" in err.message


def test_token_without_access_to_private_repo(fetch, hub):
    err = expect_error(fetch, "org/private", token=GATED_TOKEN)
    assert hub.server.log[-1][2] == 404
    assert (err.reason, err.retryable) == ("ModelNotFound", False)


def test_gated_repo(fetch, hub):
    anon = expect_error(fetch, "org/gated")
    assert hub.server.log[-1][2] == 401
    assert (anon.reason, anon.retryable) == ("HubUnauthorized", False) and "gated" in anon.message
    other = expect_error(fetch, "org/gated", token=TOKEN)
    assert hub.server.log[-1][2] == 403
    assert (other.reason, other.retryable) == ("HubUnauthorized", False)
    assert fetch("org/gated", token=GATED_TOKEN).doc == CFG_MAIN


# ---- not found and invalid ----------------------------------------------------------------------------------


@pytest.mark.parametrize("token,status", [(None, 401), (TOKEN, 404)])
def test_model_not_found(fetch, hub, token, status):
    err = expect_error(fetch, "org/missing", token=token)
    assert hub.server.log[-1][2] == status
    assert (err.reason, err.retryable) == ("ModelNotFound", False) and "'org/missing'" in err.message


def test_invalid_repo_id(fetch, hub):
    err = expect_error(fetch, "not/a/valid/repo")
    assert (err.reason, err.retryable) == ("ModelNotFound", False)
    assert hub.server.count() == 0


@pytest.mark.parametrize("revision", ["no-such-branch", commit_sha("nowhere")])
def test_revision_not_found(fetch, revision):
    err = expect_error(fetch, "org/model", revision)
    assert (err.reason, err.retryable) == ("RevisionNotFound", False)
    assert revision in err.message and "org/model" in err.message


def test_config_not_found(fetch):
    err = expect_error(fetch, "org/no-config")
    assert (err.reason, err.retryable) == ("ConfigNotFound", False)
    assert commit_sha("org/no-config", "main") in err.message


@pytest.mark.parametrize("repo", ["org/bad-json", "org/json-list", "org/not-utf8"])
def test_invalid_config(fetch, repo):
    err = expect_error(fetch, repo)
    assert (err.reason, err.retryable) == ("ConfigInvalid", False)
    assert repo in err.message and commit_sha(repo, "main") in err.message


# ---- transient failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 503])
def test_one_transient_5xx_is_retried_at_once(fetch, hub, status):
    hub.server.fail_next(1, status)
    got = fetch("org/model")
    assert got.commit == MAIN
    assert [s for _, _, s in hub.server.log][:2] == [status, 200]


@pytest.mark.parametrize("status", [503, 429])
def test_persistent_failure_is_retryable_then_recovers(fetch, hub, status):
    hub.server.fail_next(2, status)
    err = expect_error(fetch, "org/model")
    assert (err.reason, err.retryable) == ("HubUnreachable", True)
    assert hub.server.count() == 2  # one HEAD, one immediate retry, no backoff inside fetch_config
    assert fetch("org/model").commit == MAIN  # the caller's retry


def test_failed_download_is_retryable_and_leaves_no_partial_cache(fetch, hub):
    hub.server.fail_next(1, 503, method="GET")
    err = expect_error(fetch, "org/model")
    assert (err.reason, err.retryable) == ("HubUnreachable", True)
    got = fetch("org/model")
    assert got.doc == CFG_MAIN and hub.server.count("GET") == 2


def test_hung_hub_times_out(fetch, hub):
    hub.server.hang_next(1, seconds=60, method="HEAD")
    err = expect_error(fetch, "org/model", timeout=0.5)
    assert (err.reason, err.retryable) == ("HubUnreachable", True)
    assert hub.server.count("HEAD") == 1  # a timeout used the budget: no second try
    assert fetch("org/model").commit == MAIN


def test_connection_refused(tmp_path):
    err = expect_error(fetch_config, "org/model", endpoint=f"http://127.0.0.1:{closed_port()}",
                       cache_dir=str(tmp_path), timeout=2)
    assert (err.reason, err.retryable) == ("HubUnreachable", True)


def test_endpoint_that_is_not_a_hub(tmp_path):
    class Plain(BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        err = expect_error(fetch_config, "org/model", endpoint=f"http://127.0.0.1:{server.server_port}",
                           cache_dir=str(tmp_path), timeout=2)
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
    assert (err.reason, err.retryable) == ("HubUnreachable", False) and "X-Repo-Commit" in err.message


def test_unexpected_exceptions_are_mapped(fetch, monkeypatch):
    import huggingface_hub

    def boom(*a, **kw):
        raise RuntimeError("boom\nwith a second line")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", boom)
    err = expect_error(fetch, "org/model")
    assert (err.reason, err.retryable) == ("HubUnreachable", True) and "RuntimeError" in err.message


# ---- endpoint selection -------------------------------------------------------------------------------------


def test_hf_endpoint_comes_from_the_operators_settings(hub, tmp_path):
    """HF_ENDPOINT is read once, by controller/settings.py (the chart's hub.endpoint), and handed to every fetch."""
    from specdeploy.controller.settings import from_env

    endpoint = from_env({"HF_ENDPOINT": hub + "/"}).hub_endpoint
    got = fetch_config("org/model", cache_dir=str(tmp_path), endpoint=endpoint)
    assert got.commit == MAIN and hub.server.count("HEAD") == 2


SUBPROCESS = """
import json, sys
from specdeploy.controller.hub import fetch_config
kw = {"endpoint": sys.argv[2]} if len(sys.argv) > 2 else {}
got = fetch_config("org/model", "main", cache_dir=sys.argv[1], timeout=5, **kw)
print(json.dumps({"commit": got.commit, "digest": got.digest}))
"""


def run_subprocess(env_endpoint: str, tmp_path: Path, *args: str) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_ENDPOINT"] = env_endpoint
    env["HF_HOME"] = str(tmp_path / "hf-home")
    proc = subprocess.run([sys.executable, "-c", SUBPROCESS, str(tmp_path / "cache"), *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_hf_endpoint_env_honoured_in_a_fresh_process(hub, tmp_path):
    out = run_subprocess(hub, tmp_path)
    assert out == {"commit": MAIN, "digest": config_digest(CFG_MAIN)}
    assert hub.server.count("HEAD") == 2


def test_explicit_endpoint_wins_over_hf_endpoint_read_at_import(hub, tmp_path):
    out = run_subprocess(f"http://127.0.0.1:{closed_port()}", tmp_path, hub)
    assert out["commit"] == MAIN


# ---- the stand-in itself ------------------------------------------------------------------------------------


def test_stand_in_serves_model_info_and_file_metadata(hub):
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    api = HfApi(endpoint=hub)
    info = api.model_info("org/model", token=False)
    assert info.id == "org/model" and info.sha == MAIN
    assert sorted(s.rfilename for s in info.siblings) == ["README.md", "config.json"]
    assert api.model_info("org/model", revision="v1.0", token=False).sha == TAGGED
    assert [s.rfilename for s in api.model_info("org/model", revision="v1.0", token=False).siblings] == ["config.json"]
    meta = get_hf_file_metadata(hf_hub_url("org/model", "config.json", revision="v1.0", endpoint=hub), token=False)
    assert meta.commit_hash == TAGGED and meta.size == len(json.dumps(CFG_TAG).encode()) and meta.etag
    assert hub.server.requests["GET /api/models/org/model/revision/v1.0"] == 2


def test_stand_in_lfs_headers(tmp_path):
    import hashlib

    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    blob = b"\0" * 4096
    with start_in_thread([HubRepo("org/lfs", {"model.safetensors": blob}, lfs=frozenset({"model.safetensors"}))]) as url:
        meta = get_hf_file_metadata(hf_hub_url("org/lfs", "model.safetensors", endpoint=url), token=False)
        assert meta.etag == hashlib.sha256(blob).hexdigest() and meta.size == len(blob)
        path = hf_hub_download("org/lfs", "model.safetensors", endpoint=url, cache_dir=str(tmp_path), token=False)
    assert Path(path).read_bytes() == blob


@pytest.mark.asyncio
async def test_async_start_and_stop(tmp_path):
    import asyncio

    server = await start(hub_repos())
    try:
        got = await asyncio.to_thread(fetch_config, "org/model", "v1.0", endpoint=server.url,
                                      cache_dir=str(tmp_path))
        assert got.commit == TAGGED and server.count("GET") == 1
    finally:
        await server.stop()
