"""Resolve a model's config.json from the Hugging Face hub, through ``huggingface_hub``.

Synchronous: the operator calls :func:`fetch_config` in a worker thread. Every failure comes out as a
:class:`HubResolutionError` with a CamelCase ``reason``, a one-line ``message`` and a ``retryable`` flag; nothing
else escapes.

How a resolution goes (and what it costs in requests):

1. A full 40-hex commit ``revision`` is first looked up in the local cache with
   ``hf_hub_download(..., local_files_only=True)``: huggingface_hub's commit shortcut answers it from
   ``snapshots/<sha>/config.json`` without any request (0 requests).
2. Otherwise one ``HEAD /{repo}/resolve/{revision}/config.json`` (``get_hf_file_metadata``) gives the commit
   (``X-Repo-Commit``) and every error (repo, revision, file, auth) with the caller's ``timeout`` and no
   library-level backoff. A retryable failure that did not use up the time budget (a 5xx, 429, refused
   connection) is tried once more at once; the caller backs off between fetches.
3. ``hf_hub_download(revision=<that commit>)``: 0 requests when that commit's config.json is cached (the usual
   case for a branch that has not moved), else HEAD + GET (+ nothing more if an identical blob is cached).

So a branch or tag costs 1 request when unchanged and 3 the first time a commit is seen; a cached pinned commit
costs 0. Letting ``hf_hub_download`` resolve the branch itself would save the one HEAD on a first sight (2
instead of 3), but it would (a) on a failed HEAD, silently fall back to whatever commit ``refs/<branch>`` cached
last time, even for 401/403/repo-not-found, (b) on a 5xx/timeout with nothing cached, retry internally with
a hard-coded 60 s timeout and 1+2+4+8+8 s of sleeps (minutes of a worker thread for a hung hub), and (c) wrap
those errors in a generic ``LocalEntryNotFoundError``. ``HfApi.model_info``/``resolve_revision`` would also
cost one request, but as an extra API call on every resolution (the HEAD is needed anyway on a first sight).
Downloading by the resolved commit also pins config and commit together even if the branch moves meanwhile.

The endpoint is ``endpoint`` or, if None, ``HF_ENDPOINT`` read *at call time* (huggingface_hub reads it once at
import into ``constants.ENDPOINT``); it is passed explicitly to every huggingface_hub call, so import order does
not matter. ``token=None`` means anonymous (``token=False`` for huggingface_hub): a token stored on the
operator's machine (``HF_TOKEN``, ``hf auth login``) is never sent implicitly.

One cache per credential (docs/concepts/security.md, "Hub credentials"): the on-disk cache of a fetch is
``<cache_dir>/specdeploy-credentials/<credential_id(token)>`` (``cache_dir`` None: huggingface_hub's
``HF_HUB_CACHE``), so step 1's no-request answer for a pinned commit comes only from what the same token (or,
for anonymous fetches, no token) downloaded before. A tenant without access to a private model gets the hub's
own answer (``ModelNotFound``) however often another tenant's token fetched it, also after a restart. A cache
written by an older operator (models at the top of the cache directory) is never read.
"""

from __future__ import annotations


from ..core import safejson
import hashlib
import os
import re
import time
from dataclasses import dataclass

from specdeploy.core.engineconfig import config_digest
from specdeploy.core.errors import SpecdeployError

CONFIG_FILE = "config.json"
DEFAULT_ENDPOINT = "https://huggingface.co"
_COMMIT_RE = re.compile(r"^[0-9a-fA-F]{40}$")


@dataclass(frozen=True)
class HubConfig:
    doc: dict
    digest: str  # "sha256:..." of the canonical JSON (config_digest)
    commit: str  # the 40-hex commit the config was read at
    repo_id: str
    revision: str | None  # as requested (None: the default branch)


class HubResolutionError(SpecdeployError):
    """A config.json could not be resolved. ``reason`` is one of ModelNotFound, RevisionNotFound, ConfigNotFound,
    HubUnauthorized, HubUnreachable, ConfigInvalid."""

    def __init__(self, reason: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retryable = retryable

    def __repr__(self) -> str:
        return f"HubResolutionError({self.reason!r}, {self.message!r}, retryable={self.retryable})"


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The hub endpoint a fetch uses: ``endpoint`` (the operator's: OperatorSettings.hub_endpoint, read from
    HF_ENDPOINT once by controller/settings.py and handed to the Resolver), else huggingface_hub's own (its
    HF_ENDPOINT as the library read it at import), else huggingface.co."""
    if not endpoint:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    return (endpoint or DEFAULT_ENDPOINT).rstrip("/")


ANONYMOUS = "anonymous"
CREDENTIALS_DIR = "specdeploy-credentials"


def credential_id(token: str | None) -> str:
    """Which credential a fetch uses, as a name safe to keep in memory and on disk: ``anonymous`` for no token,
    else ``token-`` and 32 hex digits of a SHA-256 of the token (hub tokens carry far more entropy than
    that: the name does not give the token away)."""
    if not token:
        return ANONYMOUS
    return "token-" + hashlib.sha256(b"specdeploy-hub-credential\0" + token.encode()).hexdigest()[:32]


def credential_cache_dir(cache_dir: str | None, token: str | None) -> str:
    """The on-disk cache of the fetches made with ``token``: one directory per credential under ``cache_dir``
    (None: huggingface_hub's ``HF_HUB_CACHE``)."""
    if cache_dir is None:
        from huggingface_hub import constants

        cache_dir = constants.HF_HUB_CACHE
    return os.path.join(str(cache_dir), CREDENTIALS_DIR, credential_id(token))


def fetch_config(repo_id: str, revision: str | None = None, *, token: str | None = None,
                 endpoint: str | None = None, cache_dir: str | None = None, timeout: float = 10.0) -> HubConfig:
    """Download ``config.json`` of model ``repo_id`` at ``revision`` (branch, tag or commit; None: default branch),
    through the cache of ``token``'s credential under ``cache_dir`` (:func:`credential_cache_dir`)."""
    ep = resolve_endpoint(endpoint)
    where = _Where(repo_id, revision, ep, token)
    try:
        return _fetch(repo_id, revision, token or None, ep, credential_cache_dir(cache_dir, token or None),
                      float(timeout), where)
    except HubResolutionError:
        raise
    except Exception as exc:  # noqa: BLE001 - mapped, never leaked
        raise _map_error(exc, where) from None


# ---- the fetch ---------------------------------------------------------------------------------------------


def _fetch(repo_id: str, revision: str | None, token: str | None, ep: str, cache_dir: str | None,
           timeout: float, where: "_Where") -> HubConfig:
    import huggingface_hub as hh
    from huggingface_hub.errors import LocalEntryNotFoundError

    auth: str | bool = token if token else False
    rev = revision.lower() if revision and _COMMIT_RE.match(revision) else revision

    path = None
    commit = None
    if rev is not None and _COMMIT_RE.match(rev):
        try:  # huggingface_hub's commit shortcut: no request when snapshots/<sha>/config.json exists
            path = hh.hf_hub_download(repo_id, CONFIG_FILE, revision=rev, cache_dir=cache_dir, endpoint=ep,
                                      token=auth, local_files_only=True)
            commit = rev
        except LocalEntryNotFoundError:
            path = None
    if path is None:
        commit = _head_commit(repo_id, rev, auth, ep, timeout, where)
        path = hh.hf_hub_download(repo_id, CONFIG_FILE, revision=commit, cache_dir=cache_dir, endpoint=ep,
                                  token=auth, etag_timeout=timeout)
    assert commit is not None
    doc = _read_json(str(path), where.with_commit(commit))
    return HubConfig(doc=doc, digest=config_digest(doc), commit=commit, repo_id=repo_id, revision=revision)


def _head_commit(repo_id: str, rev: str | None, auth: str | bool, ep: str, timeout: float, where: "_Where") -> str:
    """The commit ``rev`` points at, from one HEAD on config.json (retried once at once if transient and time is left)."""
    import httpx2
    import huggingface_hub as hh
    from huggingface_hub.errors import HfHubHTTPError

    url = hh.hf_hub_url(repo_id, CONFIG_FILE, revision=rev, endpoint=ep)
    deadline = time.monotonic() + timeout
    for attempt in (1, 2):
        try:
            meta = hh.get_hf_file_metadata(url, token=auth, timeout=max(deadline - time.monotonic(), 0.001),
                                           endpoint=ep, retry_on_errors=False)
            break
        except (httpx2.TimeoutException, httpx2.ProxyError):
            raise
        except (httpx2.TransportError, HfHubHTTPError) as exc:
            transient = isinstance(exc, httpx2.TransportError) or _status(exc) in (429, 500, 502, 503, 504)
            if attempt == 2 or not transient or deadline - time.monotonic() < 0.05:
                raise
    commit = meta.commit_hash
    if not commit or not _COMMIT_RE.match(commit):
        raise HubResolutionError(
            "HubUnreachable",
            f"{ep} answered for {where.what} without an X-Repo-Commit header: it does not look like a Hugging Face "
            "hub; fix HF_ENDPOINT (or the operator's hub endpoint) or the proxy in between", retryable=False)
    return commit.lower()


def _read_json(path: str, where: "_Where") -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise HubResolutionError("HubUnreachable", f"cannot read the cached config.json of {where.what} "
                                 f"({_one_line(exc)}): check the operator's hub cache directory", retryable=True)
    try:
        doc = safejson.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HubResolutionError("ConfigInvalid", f"config.json of {where.what} is not valid JSON "
                                 f"({_one_line(exc)}): fix the file on the hub or pin another revision")
    if not isinstance(doc, dict):
        raise HubResolutionError("ConfigInvalid", f"config.json of {where.what} is a JSON {type(doc).__name__}, not "
                                 "an object: fix the file on the hub or pin another revision")
    return doc


# ---- error mapping ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    repo_id: str
    revision: str | None
    endpoint: str
    token: str | None
    commit: str | None = None

    def with_commit(self, commit: str) -> "_Where":
        return _Where(self.repo_id, self.revision, self.endpoint, self.token, commit)

    @property
    def what(self) -> str:
        rev = f"revision {self.revision!r}" if self.revision else "the default branch"
        at = f" (commit {self.commit})" if self.commit and self.commit != self.revision else ""
        return f"model {self.repo_id!r} at {rev}{at} on {self.endpoint}"


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _map_error(exc: BaseException, w: _Where) -> HubResolutionError:
    import httpx2
    from huggingface_hub import errors as E

    status = _status(exc)
    tok = w.token is not None
    if isinstance(exc, E.GatedRepoError):
        if not tok:
            return HubResolutionError("HubUnauthorized", f"{w.what} is gated: accept its terms on the hub with an "
                                      "account and reference that account's read token in tokenSecretRef")
        return HubResolutionError("HubUnauthorized", f"{w.what} is gated and the token from tokenSecretRef has no "
                                  "access: accept the terms with the token's account or reference another token")
    if isinstance(exc, E.RepositoryNotFoundError):
        hint = ("check the repo id, or if it is private or gated reference a read token in tokenSecretRef" if not tok
                else "check the repo id and that the token in tokenSecretRef can read it")
        return HubResolutionError("ModelNotFound", f"{w.what}: repository not found; {hint}")
    if isinstance(exc, E.RevisionNotFoundError):
        return HubResolutionError("RevisionNotFound", f"{w.what}: revision not found; set revision to an existing "
                                  "branch, tag or full 40-hex commit sha")
    if isinstance(exc, E.RemoteEntryNotFoundError):
        commit = exc.response.headers.get("X-Repo-Commit") if exc.response is not None else None
        where = w.with_commit(commit) if commit else w
        return HubResolutionError("ConfigNotFound", f"{where.what} has no config.json; point at a transformers-style "
                                  "model repo or another revision, or provide the config via configFrom")
    if isinstance(exc, E.DisabledRepoError):
        return HubResolutionError("ModelNotFound", f"{w.what}: access to this repository is disabled on the hub; "
                                  "use another model repo")
    if isinstance(exc, E.HFValidationError):
        return HubResolutionError("ModelNotFound", f"{w.what}: invalid repo id or revision ({_one_line(exc)}); "
                                  "use 'namespace/name' as shown on the hub")
    if isinstance(exc, E.OfflineModeIsEnabled):
        return HubResolutionError("HubUnreachable", f"{w.what}: HF_HUB_OFFLINE is set and config.json is not cached; "
                                  "unset HF_HUB_OFFLINE or pin a cached commit")
    if isinstance(exc, E.HfHubHTTPError) and status in (401, 403):
        if status == 401 and tok:
            msg = "the hub rejected the token from tokenSecretRef (invalid, expired or revoked); replace it"
        elif status == 401:
            msg = "the hub requires authentication; reference a read token in tokenSecretRef"
        else:
            msg = "access denied with the token from tokenSecretRef; give it read permission on this repo or use another"
        return HubResolutionError("HubUnauthorized", f"{w.what}: {msg}")
    if isinstance(exc, E.HfHubHTTPError):
        retryable = status is None or status >= 500 or status in (408, 429)
        what = "rate limited (429)" if status == 429 else f"HTTP {status}"
        return HubResolutionError("HubUnreachable", f"{w.what}: the hub answered {what}; "
                                  + ("will retry" if retryable else "check HF_ENDPOINT and the request"),
                                  retryable=retryable)
    if isinstance(exc, httpx2.TimeoutException):
        return HubResolutionError("HubUnreachable", f"{w.what}: the hub did not answer in time ({type(exc).__name__}); "
                                  "check the operator's network access to the hub; will retry", retryable=True)
    if isinstance(exc, httpx2.ProxyError):
        return HubResolutionError("HubUnreachable", f"{w.what}: proxy error ({_one_line(exc)}); check HTTPS_PROXY/"
                                  "NO_PROXY of the operator; will retry", retryable=True)
    if isinstance(exc, (httpx2.TransportError, ConnectionError)):
        return HubResolutionError("HubUnreachable", f"{w.what}: cannot connect to the hub ({_one_line(exc)}); "
                                  "check HF_ENDPOINT and the operator's network access; will retry", retryable=True)
    if isinstance(exc, E.LocalEntryNotFoundError):
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, E.LocalEntryNotFoundError):
            return _map_error(cause, w)
        return HubResolutionError("HubUnreachable", f"{w.what}: config.json could not be downloaded and is not "
                                  f"cached ({_one_line(exc, 120)}); will retry", retryable=True)
    if isinstance(exc, E.FileMetadataError):
        return HubResolutionError("HubUnreachable", f"{w.what}: the hub's answer lacks file metadata "
                                  f"({_one_line(exc, 120)}); check HF_ENDPOINT", retryable=False)
    if isinstance(exc, OSError):  # consistency check failed mid-download, cache not writable, disk full, ...
        return HubResolutionError("HubUnreachable", f"{w.what}: download or cache write failed "
                                  f"({type(exc).__name__}: {_one_line(exc, 160)}); will retry", retryable=True)
    return HubResolutionError("HubUnreachable", f"{w.what}: unexpected error ({type(exc).__name__}: "
                              f"{_one_line(exc, 160)}); will retry", retryable=True)
