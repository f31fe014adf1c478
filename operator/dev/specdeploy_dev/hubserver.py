"""A local stand-in for the Hugging Face Hub's file API, for tests and demos.

It speaks the subset of the Hub's HTTP API that ``huggingface_hub`` (2.4) uses for
``hf_hub_download``, ``get_hf_file_metadata`` and ``HfApi().model_info``:

* ``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` with ``X-Repo-Commit``, a quoted
  ``ETag`` (the git blob sha1 of the content, as the Hub does for regular files), ``Content-Length``,
  ``Accept-Ranges`` (GET honours ``Range: bytes=N-`` as ``http_get`` sends it when resuming), and, for files
  declared LFS, ``X-Linked-Etag`` (sha256) / ``X-Linked-Size``.
* ``GET /api/models/{repo_id}`` and ``GET /api/models/{repo_id}/revision/{revision}`` with ``id``, ``sha``,
  ``private``, ``gated`` and ``siblings``.
* ``GET /api/models/{repo_id}/tree/{revision}[/{path}]`` (``list_repo_tree``/``list_repo_files``, which
  ``snapshot_download`` and vLLM call): one page of ``{"type": "file"|"directory", "path", "size", "oid",
  "lfs"}`` entries, ``?recursive=true`` for the whole tree.
* ``Range: bytes=N-`` and ``bytes=N-M`` on resolve (``get_safetensors_metadata`` reads the header that way).

A directory of models (``specdeploy dev tiny-models DIR``) is served with :func:`repos_from_directory`:
every ``DIR/<org>/<name>/`` holding a ``config.json`` is the repo ``<org>/<name>`` with all its files
(``*.safetensors`` and other weights served as LFS files, as the Hub does), so both the operator's hub
resolver and a real engine started with ``HF_ENDPOINT=<url>`` load them. ``specdeploy dev hub DIR`` runs
it as a process.

Errors carry the Hub's ``X-Error-Code``/``X-Error-Message`` headers, which is what
``huggingface_hub.utils.hf_raise_for_status`` maps to its exception types:

==========================================  ======  ==========================================
situation                                   status  headers (and resulting huggingface_hub error)
==========================================  ======  ==========================================
unknown repo, anonymous                     401     RepoNotFound (RepositoryNotFoundError)
unknown repo, with a token                  404     RepoNotFound (RepositoryNotFoundError)
private repo (``token`` set), anonymous     401     RepoNotFound: the Hub never reveals that it exists
gated repo, anonymous                       401     GatedRepo (GatedRepoError)
token unknown to this hub                   401     message "Invalid credentials in Authorization header",
                                                    no code (plain HfHubHTTPError with status 401)
token of another repo, private repo         404     RepoNotFound
token of another repo, gated repo           403     GatedRepo
unknown branch/tag/commit                   404     RevisionNotFound (RevisionNotFoundError)
unknown file                                404     EntryNotFound + X-Repo-Commit (RemoteEntryNotFoundError)
==========================================  ======  ==========================================

Content comes from an in-memory registry of :class:`HubRepo`. Every request is counted per
``"METHOD /path"`` (raw path, as sent) in :attr:`HubServer.requests` when it arrives, and recorded with its
status in :attr:`HubServer.log` when answered, so
tests can assert caching. Fault knobs (:meth:`HubServer.fail_next`, :meth:`HubServer.hang_next`) make the next
N matching requests answer an error status or hang past a client timeout.

The registry may be changed while the server runs (e.g. ``server.set_revision(repo_id, "main", sha)`` to move
a branch); all mutations and counters are guarded by a lock, so a server run in a thread by
:func:`start_in_thread` can be driven from the test thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import os
import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import unquote

from aiohttp import web

__all__ = ["HubRepo", "HubServer", "HubUrl", "commit_sha", "git_blob_sha", "main", "repos_from_directory", "start",
           "start_in_thread"]

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_INVALID_CREDENTIALS = "Invalid credentials in Authorization header"


def commit_sha(*parts: str) -> str:
    """A deterministic 40-hex commit sha derived from ``parts`` (e.g. ``commit_sha("org/model", "main")``)."""
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def git_blob_sha(data: bytes) -> str:
    """The git blob id of ``data``: what the Hub sends as ``ETag`` for files stored in git (not LFS)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubRepo:
    """A model repository of the stand-in.

    ``files`` is the content of every commit unless ``commits`` overrides it for a given sha.
    ``revisions`` maps branch and tag names to commit shas; empty means ``{"main": commit_sha(repo_id, "main")}``.
    ``token``: if set, the repo is private (or gated, with ``gated=True``) and requests need
    ``Authorization: Bearer <token>``. ``lfs``: file names served as LFS files (``X-Linked-Etag``/``X-Linked-Size``).
    """

    repo_id: str
    files: dict[str, bytes]
    revisions: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    gated: bool = False
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    lfs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.revisions:
            self.revisions = {"main": commit_sha(self.repo_id, "main")}
        for name, sha in list(self.revisions.items()) + [(s, s) for s in self.commits]:
            if not _COMMIT_RE.match(sha):
                raise ValueError(f"revision {name!r} of {self.repo_id!r}: {sha!r} is not a 40-hex commit sha")

    @property
    def main_sha(self) -> str:
        return self.revisions.get("main") or next(iter(self.revisions.values()))

    def resolve(self, revision: str) -> str | None:
        """Commit sha of a branch/tag name or a full commit sha known to the repo; None if unknown."""
        if revision in self.revisions:
            return self.revisions[revision]
        if _COMMIT_RE.match(revision) and (revision in self.commits or revision in self.revisions.values()):
            return revision
        return None

    def files_at(self, sha: str) -> dict[str, bytes]:
        return self.commits.get(sha, self.files)


@dataclass
class _Fault:
    remaining: int
    status: int | None  # None: hang
    seconds: float
    method: str | None
    path_contains: str | None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


class HubServer:
    """A running stand-in: ``url``, per-path ``requests`` counts, ``log`` of (method, path, status), fault knobs."""

    def __init__(self, repos: Iterable[HubRepo]) -> None:
        self.repos: dict[str, HubRepo] = {r.repo_id: r for r in repos}
        self.requests: collections.Counter[str] = collections.Counter()
        self.log: list[tuple[str, str, int]] = []
        self.url = ""
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._runner: web.AppRunner | None = None
        self._closing: asyncio.Event | None = None

    # ---- registry -------------------------------------------------------------------------------------

    def add_repo(self, repo: HubRepo) -> None:
        with self._lock:
            self.repos[repo.repo_id] = repo

    def set_revision(self, repo_id: str, name: str, sha: str, files: dict[str, bytes] | None = None) -> None:
        """Point branch/tag ``name`` at ``sha`` (optionally with that commit's ``files``), e.g. to move a branch."""
        if not _COMMIT_RE.match(sha):
            raise ValueError(f"{sha!r} is not a 40-hex commit sha")
        with self._lock:
            repo = self.repos[repo_id]
            repo.revisions[name] = sha
            if files is not None:
                repo.commits[sha] = dict(files)

    # ---- counters -------------------------------------------------------------------------------------

    def count(self, method: str | None = None, contains: str | None = None) -> int:
        """Requests seen so far, optionally only one method and/or paths containing ``contains``."""
        with self._lock:
            return sum(
                n for key, n in self.requests.items()
                if (method is None or key.split(" ", 1)[0] == method)
                and (contains is None or contains in key.split(" ", 1)[1])
            )

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.log.clear()

    # ---- fault knobs ----------------------------------------------------------------------------------

    def fail_next(self, n: int = 1, status: int = 503, *, method: str | None = None,
                  path_contains: str | None = None) -> None:
        """The next ``n`` matching requests answer ``status`` (e.g. 500, 503, 429) with an empty body."""
        with self._lock:
            self._faults.append(_Fault(n, status, 0.0, method, path_contains))

    def hang_next(self, n: int = 1, seconds: float = 30.0, *, method: str | None = None,
                  path_contains: str | None = None) -> None:
        """The next ``n`` matching requests send nothing for ``seconds`` (or until the server stops), then 504.

        Pick ``seconds`` well past the client's timeout: the client gives up first."""
        with self._lock:
            self._faults.append(_Fault(n, None, seconds, method, path_contains))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.matches(method, path):
                    fault.remaining -= 1
                    return fault
            self._faults = [f for f in self._faults if f.remaining > 0]
        return None

    # ---- lifecycle ------------------------------------------------------------------------------------

    async def _start(self, host: str, port: int) -> None:
        self._closing = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # noqa: SLF001 - the bound port
        bound = sockets[0].getsockname()[1] if sockets else port
        self.url = f"http://{host}:{bound}"

    async def stop(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- HTTP -----------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        path = request.raw_path.split("?", 1)[0]
        with self._lock:  # counted on arrival, so a hung request is visible while it hangs
            self.requests[f"{method} {path}"] += 1
        response = await self._respond(request, method, path)
        with self._lock:
            self.log.append((method, path, response.status))
        return response

    async def _respond(self, request: web.Request, method: str, path: str) -> web.StreamResponse:
        fault = self._take_fault(method, path)
        if fault is not None:
            if fault.status is None:
                assert self._closing is not None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), fault.seconds)
                return web.Response(status=504)
            return web.Response(status=fault.status)

        segments = path.split("/")[1:]  # raw segments: %2F inside a revision stays encoded
        if len(segments) >= 3 and segments[0] == "api" and segments[1] == "models":
            if method != "GET":
                return web.Response(status=405)
            return self._api_model(request, segments[2:])
        for i in (1, 2):  # repo ids are "name" (legacy) or "namespace/name"
            if len(segments) > i + 2 and segments[i] == "resolve":
                if method not in ("GET", "HEAD"):
                    return web.Response(status=405)
                repo_id = "/".join(unquote(s) for s in segments[:i])
                revision = unquote(segments[i + 1])
                filename = "/".join(unquote(s) for s in segments[i + 2:])
                return self._resolve(request, repo_id, revision, filename)
        return _error(404, None, "Not Found", body=method != "HEAD")

    def _authorize(self, request: web.Request, repo_id: str) -> tuple[HubRepo | None, web.Response | None]:
        """The repo, or the error the Hub answers for this repo and these credentials."""
        head = request.method == "HEAD"
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else None
        with self._lock:
            repo = self.repos.get(repo_id)
            known_tokens = {r.token for r in self.repos.values() if r.token}
        if token is not None and token not in known_tokens:
            return None, _error(401, None, _INVALID_CREDENTIALS, body=not head)
        if repo is None:
            return None, _error(404 if token else 401, "RepoNotFound", "Repository not found", body=not head)
        if repo.token is None or token == repo.token:
            return repo, None
        if repo.gated:
            if token is None:
                msg = (f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
                       " to access it. Please log in.")
                return None, _error(401, "GatedRepo", msg, body=not head)
            msg = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            return None, _error(403, "GatedRepo", msg, body=not head)
        return None, _error(404 if token else 401, "RepoNotFound", "Repository not found", body=not head)

    def _resolve(self, request: web.Request, repo_id: str, revision: str, filename: str) -> web.StreamResponse:
        head = request.method == "HEAD"
        repo, denied = self._authorize(request, repo_id)
        if denied is not None:
            return denied
        assert repo is not None
        sha = repo.resolve(revision)
        if sha is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}", body=not head)
        files = repo.files_at(sha)
        if filename not in files:
            return _error(404, "EntryNotFound", "Entry not found", body=not head, headers={"X-Repo-Commit": sha})
        data = files[filename]
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{git_blob_sha(data)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{filename.rsplit("/", 1)[-1]}"',
        }
        if filename in repo.lfs:
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(data).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(data))
        status, body = 200, data  # aiohttp sends Content-Length but no body for HEAD
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", request.headers.get("Range", ""))
        if not head and m is not None and int(m.group(1)) < len(data):
            start_at = int(m.group(1))
            end_at = min(int(m.group(2)), len(data) - 1) if m.group(2) else len(data) - 1
            if end_at >= start_at:
                status, body = 206, data[start_at:end_at + 1]
                headers["Content-Range"] = f"bytes {start_at}-{end_at}/{len(data)}"
        return web.Response(status=status, body=body, headers=headers)

    def _api_model(self, request: web.Request, rest: list[str]) -> web.Response:
        # /api/models/{ns}/{name}[/revision/{rev}] or /api/models/{name}[/revision/{rev}]
        # /api/models/{ns}/{name}/tree/{rev}[/{path...}] (the path arrives %2F-encoded or plain)
        for i in (2, 1):
            if len(rest) > i + 1 and rest[i] == "tree":
                return self._api_tree(request, "/".join(unquote(x) for x in rest[:i]), unquote(rest[i + 1]),
                                      "/".join(unquote(x) for x in rest[i + 2:]))
        if len(rest) >= 3 and rest[-2] == "revision":
            repo_segments, revision = rest[:-2], unquote(rest[-1])
        else:
            repo_segments, revision = rest, None
        repo_id = "/".join(unquote(s) for s in repo_segments)
        repo, denied = self._authorize(request, repo_id)
        if denied is not None:
            return denied
        assert repo is not None
        sha = repo.main_sha if revision is None else repo.resolve(revision)
        if sha is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = repo.files_at(sha)
        doc = {
            "_id": commit_sha(repo.repo_id)[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/", 1)[0] if "/" in repo.repo_id else None,
            "sha": sha,
            "private": repo.token is not None and not repo.gated,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "tags": [],
            "siblings": [{"rfilename": name} for name in sorted(files)],
        }
        return web.json_response(doc)


    def _api_tree(self, request: web.Request, repo_id: str, revision: str, path: str) -> web.Response:
        repo, denied = self._authorize(request, repo_id)
        if denied is not None:
            return denied
        assert repo is not None
        sha = repo.resolve(revision)
        if sha is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        recursive = request.query.get("recursive", "").lower() in ("1", "true")
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        files = repo.files_at(sha)
        if prefix and not any(name.startswith(prefix) for name in files):
            return _error(404, "EntryNotFound", f"{path} does not exist on {revision}")
        entries: dict[str, dict] = {}
        for name in sorted(files):
            if not name.startswith(prefix):
                continue
            rel = name[len(prefix):].split("/")
            depth = len(rel) if recursive else 1
            for d in range(1, min(depth, len(rel) - 1) + 1):  # the folders on the way
                folder = prefix + "/".join(rel[:d])
                entries.setdefault(folder, {"type": "directory", "path": folder, "size": 0,
                                            "oid": git_blob_sha(folder.encode())})
            if recursive or len(rel) == 1:
                data = files[name]
                entry: dict = {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha(data)}
                if name in repo.lfs:
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries[name] = entry
        return web.json_response([entries[k] for k in sorted(entries)])


# weights are LFS files on the Hub: the client then checks X-Linked-Etag (sha256) and X-Linked-Size
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx")
MAX_REPO_BYTES = 1 << 30  # a directory of tiny models is megabytes; refuse to load a real checkpoint into memory


def repos_from_directory(root: str | os.PathLike[str]) -> list[HubRepo]:
    """One :class:`HubRepo` per ``root/<org>/<name>/`` (or ``root/<name>/``) directory holding a ``config.json``,
    with every regular file below it (hidden files and ``*.part`` skipped), read into memory.

    Raises ValueError (one line) when ``root`` is not a directory, holds no model, or holds more than
    :data:`MAX_REPO_BYTES` in all."""
    base = Path(root)
    if not base.is_dir():
        raise ValueError(f"{root}: not a directory")
    repos: list[HubRepo] = []
    total = 0
    for config in sorted(base.glob("*/config.json")) + sorted(base.glob("*/*/config.json")):
        repo_dir = config.parent
        repo_id = repo_dir.relative_to(base).as_posix()
        if any(r.repo_id == repo_id.split("/", 1)[0] for r in repos):
            continue  # nested inside a single-level repo
        files: dict[str, bytes] = {}
        for path in sorted(repo_dir.rglob("*")):
            rel = path.relative_to(repo_dir).as_posix()
            if not path.is_file() or path.is_symlink() or any(p.startswith(".") for p in rel.split("/")) \
                    or rel.endswith(".part"):
                continue
            total += path.stat().st_size
            if total > MAX_REPO_BYTES:
                raise ValueError(f"{root}: more than {MAX_REPO_BYTES >> 20} MiB of files; serve a smaller directory")
            files[rel] = path.read_bytes()
        lfs = frozenset(n for n in files if n.endswith(LFS_SUFFIXES))
        sha = commit_sha(repo_id, "main", *(f"{n}:{git_blob_sha(d)}" for n, d in sorted(files.items())))
        repos.append(HubRepo(repo_id, files, {"main": sha}, lfs=lfs))
    if not repos:
        raise ValueError(f"{root}: no model directories (<org>/<name>/config.json) found")
    return repos


def _error(status: int, code: str | None, message: str, *, body: bool = True,
           headers: dict[str, str] | None = None) -> web.Response:
    hdrs = dict(headers or {})
    if code is not None:
        hdrs["X-Error-Code"] = code
    hdrs["X-Error-Message"] = message
    if not body:
        return web.Response(status=status, headers=hdrs)
    return web.Response(status=status, headers=hdrs, text=json.dumps({"error": message}),
                        content_type="application/json")


async def start(repos: Iterable[HubRepo], port: int = 0, host: str = "127.0.0.1") -> HubServer:
    """Start a stand-in on ``host:port`` (0: any free port) serving ``repos``; ``await server.stop()`` to end it."""
    server = HubServer(repos)
    await server._start(host, port)  # noqa: SLF001
    return server


class HubUrl(str):
    """The stand-in's base URL, carrying the running :class:`HubServer` as ``.server`` (counters, knobs)."""

    server: HubServer

    def __new__(cls, url: str, server: HubServer) -> "HubUrl":
        obj = super().__new__(cls, url)
        obj.server = server
        return obj


@contextlib.contextmanager
def start_in_thread(repos: Iterable[HubRepo], port: int = 0, *, startup_timeout: float = 30.0) -> Iterator[HubUrl]:
    """Run a stand-in on its own event loop in a daemon thread, for synchronous code.

    Yields the base URL (a ``str``); ``url.server`` is the :class:`HubServer` (its knobs and counters are
    thread-safe)."""
    loop = asyncio.new_event_loop()
    ready: Future[HubServer] = Future()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(start(repos, port))
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            ready.set_exception(exc)
            return
        ready.set_result(server)
        loop.run_forever()

    thread = threading.Thread(target=run, name="hubserver", daemon=True)
    thread.start()
    try:
        server = ready.result(timeout=startup_timeout)
    except BaseException:
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=startup_timeout)
        raise
    try:
        yield HubUrl(server.url, server)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=startup_timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=startup_timeout)
        if not thread.is_alive():
            loop.close()



def main(argv: list[str] | None = None) -> int:
    """``specdeploy dev hub DIR [--port N]``: serve a directory of models on 127.0.0.1 until SIGINT/SIGTERM."""
    import argparse
    import signal
    import sys

    p = argparse.ArgumentParser(prog="specdeploy dev hub", description=main.__doc__)
    p.add_argument("directory", help="models as DIR/<org>/<name>/{config.json,...} (specdeploy dev tiny-models DIR)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    args = p.parse_args(argv)
    if not 0 <= args.port < 65536:
        print(f"specdeploy dev hub: error: --port {args.port} is not a port", file=sys.stderr)
        return 2
    try:
        repos = repos_from_directory(args.directory)
    except (OSError, ValueError) as e:
        print(f"specdeploy dev hub: error: {e}", file=sys.stderr)
        return 2

    async def serve() -> int:
        try:
            server = await start(repos, args.port)
        except OSError as e:
            print(f"specdeploy dev hub: error: cannot listen on 127.0.0.1:{args.port}: {e.strerror}", file=sys.stderr)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"serving {len(repos)} repos on {server.url}: {', '.join(r.repo_id for r in repos)}", flush=True)
        print(f"export HF_ENDPOINT={server.url}", flush=True)
        await stop.wait()
        await server.stop()
        return 0

    return asyncio.run(serve())


if __name__ == "__main__":
    raise SystemExit(main())
