"""Hub downloads on the pod side: a model's config.json only (preflight, tune) and a whole drafter
at image build time (``bake-drafter``).

``huggingface_hub`` comes with the engines in the runtime images; it is imported only here.
The endpoint is ``HF_ENDPOINT`` read at call time (huggingface_hub reads it once, at import) and
the token ``HF_TOKEN`` (the renderer sets it from ``tokenSecretRef``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any
from specdeploy.core.errors import Permanent

CONFIG_FILE = "config.json"
BAKED_FILE = "BAKED.json"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What a drafter needs to be served from a local path: config, weights, tokenizer files, remote code.
BAKED_PATTERNS = ("*.json", "*.safetensors", "*.py", "*.txt", "*.model", "*.tiktoken")


class HubFetchError(Permanent, RuntimeError):
    pass


def _endpoint() -> str | None:
    ep = os.environ.get("HF_ENDPOINT")
    return ep.rstrip("/") if ep else None


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def _hub_error(e: Exception, hf_errors: Any, repo_id: str, revision: str | None, doing: str) -> HubFetchError:
    """One message per hub failure, the same wording for every hub call."""
    if isinstance(e, hf_errors.GatedRepoError):  # a RepositoryNotFoundError subclass: first
        return HubFetchError(f"{repo_id} is gated: the pod's HF_TOKEN (tokenSecretRef) has no access")
    if isinstance(e, hf_errors.RepositoryNotFoundError):
        return HubFetchError(f"{repo_id} not found (or private and HF_TOKEN is missing or has no access)")
    if isinstance(e, hf_errors.RevisionNotFoundError):
        return HubFetchError(f"{repo_id} has no revision {revision!r}")
    return HubFetchError(f"cannot {doing} {_endpoint() or 'huggingface.co'}: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}")


def fetch_config(repo_id: str, revision: str | None, dest_dir: str, *, timeout: float = 30.0) -> str:
    """Download only ``config.json`` of ``repo_id`` at ``revision`` into ``dest_dir``; returns the file path."""
    try:
        import huggingface_hub as hh
    except ImportError:
        raise HubFetchError("huggingface_hub is not installed in this image; mount the model instead") from None
    from huggingface_hub import errors as hf_errors

    os.makedirs(dest_dir, exist_ok=True)
    cache = os.path.join(dest_dir, ".hf-cache")
    try:
        path = hh.hf_hub_download(repo_id, CONFIG_FILE, revision=revision, cache_dir=cache, endpoint=_endpoint(),
                                  token=_token() or False, etag_timeout=timeout)
    except hf_errors.EntryNotFoundError:
        raise HubFetchError(f"{repo_id}@{revision or 'main'} has no config.json") from None
    except Exception as e:  # noqa: BLE001 - network errors of every kind become one message
        raise _hub_error(e, hf_errors, repo_id, revision, f"download {repo_id}/config.json from") from None
    out = os.path.join(dest_dir, CONFIG_FILE)
    shutil.copyfile(path, out)
    shutil.rmtree(cache, ignore_errors=True)
    return out


def read_baked(drafter_dir: str) -> dict | None:
    """BAKED.json of a drafter baked into the image, or None when there is none."""
    path = os.path.join(drafter_dir, BAKED_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict):
        raise ValueError(f"{path} is not a JSON object")
    return doc


def bake_drafter(repo_id: str, revision: str, out_dir: str, *, expect_digest: str | None = None) -> dict[str, Any]:
    """Download the drafter (weights + config) at a pinned commit into ``out_dir`` and write BAKED.json
    ``{repo, revision, config_digest}``. ``expect_digest``: fail unless config.json has this digest
    (the image label the build was given)."""
    from specdeploy.core.engineconfig import config_digest

    if not COMMIT.match(revision or ""):
        raise HubFetchError(f"DRAFTER_REVISION {revision!r} is not a 40-hex commit: a baked drafter is pinned to a commit")
    try:
        import huggingface_hub as hh
    except ImportError:
        raise HubFetchError("huggingface_hub is not installed") from None
    import fnmatch

    os.makedirs(out_dir, exist_ok=True)
    token = _token() or False
    try:
        # the file list of that commit (model_info siblings), then each wanted file: weights, config, code
        info = hh.HfApi(endpoint=_endpoint()).model_info(repo_id, revision=revision, token=token)
        names = [s.rfilename for s in (info.siblings or [])
                 if any(fnmatch.fnmatch(s.rfilename, p) for p in BAKED_PATTERNS)]
        if CONFIG_FILE not in names:
            raise HubFetchError(f"{repo_id}@{revision} has no config.json")
        for name in names:
            hh.hf_hub_download(repo_id, name, revision=revision, local_dir=out_dir, endpoint=_endpoint(), token=token)
    except HubFetchError:
        raise
    except Exception as e:  # noqa: BLE001
        raise HubFetchError(f"cannot download {repo_id}@{revision}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    shutil.rmtree(os.path.join(out_dir, ".cache"), ignore_errors=True)
    with open(os.path.join(out_dir, CONFIG_FILE), encoding="utf-8") as fh:
        digest = config_digest(json.load(fh))
    if expect_digest and expect_digest != digest:
        raise HubFetchError(f"{repo_id}@{revision} config.json has digest {digest}, not DRAFTER_CONFIG_DIGEST {expect_digest}")
    baked = {"repo": repo_id, "revision": revision, "config_digest": digest}
    with open(os.path.join(out_dir, BAKED_FILE), "w", encoding="utf-8") as fh:
        json.dump(baked, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return baked


# ----------------------------------------------------------------- weights into a persistent hub cache

LOCK_DIR = "specdeploy-locks"
# Formats an engine never loads when the repository has safetensors (vLLM/SGLang load format "auto").
DUPLICATE_FORMATS = ("*.bin", "*.pt", "*.pth", "*.msgpack", "*.h5", "*.ot", "*.onnx", "original/*")


def _wanted(names: list[str]) -> list[str]:
    import fnmatch

    if any(n.endswith(".safetensors") for n in names):
        return [n for n in names if not any(fnmatch.fnmatch(n, p) for p in DUPLICATE_FORMATS)]
    return list(names)


def _lock(hf_home: str, repo_id: str, log) -> Any:
    """An exclusive lock (flock) per repository in the cache: concurrent pods on the same storage take turns."""
    import fcntl

    d = os.path.join(hf_home, LOCK_DIR)
    os.makedirs(d, exist_ok=True)
    fh = open(os.path.join(d, repo_id.replace("/", "--") + ".lock"), "a+")  # noqa: SIM115 - held by the caller
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"waiting for another pod's download of {repo_id} into {hf_home} (lock held)")
        fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def prefetch_weights(repo_id: str, revision: str | None, hf_home: str, *, log=lambda _m: None) -> dict[str, Any]:
    """Download every file the engine loads from ``repo_id`` at ``revision`` into the hub cache under
    ``hf_home`` (``<hf_home>/hub``, huggingface_hub's layout), holding a per-repository file lock, so that
    the engine starts with ``HF_HUB_OFFLINE=1``. Files already in the cache are not requested again: a
    second pod, or a restart, makes one metadata request (the file list of the revision) and no download.
    Returns ``{repo, revision, commit, files, downloaded, bytes}``."""
    try:
        import huggingface_hub as hh
        from huggingface_hub.file_download import repo_folder_name
    except ImportError:
        raise HubFetchError("huggingface_hub is not installed in this image") from None
    from huggingface_hub import errors as hf_errors

    cache = os.path.join(hf_home, "hub")
    token = _token() or False
    fh = _lock(hf_home, repo_id, log)
    try:
        try:
            info = hh.HfApi(endpoint=_endpoint()).model_info(repo_id, revision=revision, token=token)
        except Exception as e:  # noqa: BLE001 - network errors of every kind become one message
            raise _hub_error(e, hf_errors, repo_id, revision, f"list {repo_id} on") from None
        commit = info.sha
        if not commit or not COMMIT.match(commit):
            raise HubFetchError(f"{repo_id}@{revision or 'main'}: the hub returned no commit for the revision")
        names = _wanted([s.rfilename for s in (info.siblings or [])])
        snapshot = os.path.join(cache, repo_folder_name(repo_id=repo_id, repo_type="model"), "snapshots", commit)
        downloaded, size = 0, 0
        for name in names:
            if os.path.exists(os.path.join(snapshot, name)):
                continue  # in the cache: no request at all (the revision is a commit)
            try:
                path = hh.hf_hub_download(repo_id, name, revision=commit, cache_dir=cache, endpoint=_endpoint(),
                                          token=token)
            except Exception as e:  # noqa: BLE001
                raise HubFetchError(f"cannot download {repo_id}/{name}@{commit[:12]}: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0] if str(e) else ''}") from None
            downloaded += 1
            size += os.path.getsize(path)
        # the engine asks for the revision the spec names (a branch, or main): point that ref at the commit
        ref = revision or "main"
        if ref != commit:
            refs = os.path.join(cache, repo_folder_name(repo_id=repo_id, repo_type="model"), "refs")
            os.makedirs(os.path.dirname(os.path.join(refs, ref)), exist_ok=True)
            tmp = os.path.join(refs, f".{os.path.basename(ref)}.{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(commit)
            os.replace(tmp, os.path.join(refs, ref))
    finally:
        fh.close()  # releases the lock
    return {"repo": repo_id, "revision": ref, "commit": commit, "files": len(names), "downloaded": downloaded,
            "bytes": size}
