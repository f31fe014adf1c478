"""Helpers and fixtures for the stand-in API server tests: an HTTP client, a polling helper with a
deadline, the test CRD, servers in background threads, kubectl and kubeconfig fixtures, and a raw
kmock 0.8 backend to show that each shim fix is needed.

Test modules import the fixtures they use from here (explicit imports, as with tests/testkit.py).

No pytest-asyncio: every server runs on its own event loop in a daemon thread; every wait has a
deadline (socket timeouts, subprocess timeouts, polling with a monotonic deadline).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import pytest

from specdeploy_dev import apiserver

ROOT = Path(__file__).resolve().parents[2]
REAL_CRD = ROOT / "crds" / "specdeploy.io_speculativedeployments.yaml"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

# A tiny test CRD: namespaced, status + scale subresources, printer columns, two served versions.
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.specdeploy.io"},
    "spec": {
        "group": "test.specdeploy.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList",
                  "shortNames": ["wdg"], "categories": ["all"]},
        "versions": [
            {"name": "v1", "served": True, "storage": True,
             "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
             "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                      "statusReplicasPath": ".status.replicas"}},
             "additionalPrinterColumns": [
                 {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                 {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                 {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]},
            {"name": "v1beta1", "served": True, "storage": False,
             "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
             "subresources": {"status": {}}},
        ],
    },
}
WIDGETS = "/apis/test.specdeploy.io/v1/namespaces/default/widgets"
CMS = "/api/v1/namespaces/default/configmaps"


def widget(name: str, size: int = 1, **extra: Any) -> dict[str, Any]:
    obj = {"apiVersion": "test.specdeploy.io/v1", "kind": "Widget", "metadata": {"name": name},
           "spec": {"size": size}}
    obj.update(extra)
    return obj


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


class Http:
    """A tiny synchronous JSON client over one keep-alive connection (reconnects when needed)."""

    def __init__(self, url: str, timeout: float = 10):
        parsed = urllib.parse.urlparse(url)
        self.host, self.port, self.timeout = parsed.hostname, parsed.port, timeout
        self.url = url
        self._conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: Any = None, content_type: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        data: bytes | None = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", content_type or "application/json")
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=data, headers=hdrs)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        try:
            parsed: Any = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)[:2]

    def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)[:2]

    def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return self.request("PUT", path, body, **kw)[:2]

    def patch(self, path: str, body: Any, kind: str = "merge", **kw: Any) -> tuple[int, Any]:
        ctype = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
                 "strategic": "application/strategic-merge-patch+json",
                 "apply": "application/apply-patch+yaml"}[kind]
        return self.request("PATCH", path, body, content_type=ctype, **kw)[:2]

    def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("DELETE", path, body, **kw)[:2]

    def watch(self, path: str, max_events: int, timeout: float = 10,
              on_open: Callable[[], None] | None = None) -> tuple[list[dict], str, bool]:
        """Read up to ``max_events`` watch events; returns (events, content type, ended cleanly).
        ``ended cleanly`` is False when the deadline hit first."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        deadline = time.monotonic() + timeout
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            ctype = resp.getheader("Content-Type") or ""
            if on_open is not None:
                on_open()
            events: list[dict] = []
            while len(events) < max_events and time.monotonic() < deadline:
                try:
                    line = resp.readline()
                except (TimeoutError, OSError):
                    return events, ctype, False
                if not line:
                    return events, ctype, True
                if line.strip():
                    events.append(json.loads(line))
            return events, ctype, len(events) >= max_events
        finally:
            conn.close()


def wait_for(fn: Callable[[], Any], timeout: float = 20, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``fn`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


class RawKmock:
    """Raw kmock 0.8 (no shim) on its own loop in a thread, set up as fairly as kmock allows."""

    def __init__(self) -> None:
        import kmock
        self._kmock = kmock
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, daemon=True, name="raw-kmock")
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("raw kmock did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        kmock = self._kmock
        self._stop = asyncio.Event()
        emulator = kmock.KubernetesEmulator()
        emulator.resources["v1/configmaps"] = kmock.ResourceInfo(kind="ConfigMap", namespaced=True,
                                                                 verbs={"get", "list", "watch", "create", "patch", "delete"})
        emulator.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False)
        emulator.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
            kind="CustomResourceDefinition", namespaced=False)
        emulator.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True)
        self.emulator = emulator
        async with emulator, kmock.Server(emulator) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)  # raw kmock may hang on open streams; the thread is a daemon


@pytest.fixture
def server():
    srv = apiserver.serve_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server) -> Http:
    return Http(server.url)


@pytest.fixture
def widgets(api) -> Http:
    """The API with the Widget CRD installed."""
    status, body = api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)
    assert status == 201, body
    return api


@pytest.fixture(params=["standin", pytest.param("raw-kmock", marks=pytest.mark.xfail(
    strict=True, reason="raw kmock 0.8 has the defect this test checks"))])
def backend(request):
    """The stand-in, and raw kmock 0.8 (expected to fail: proves the test catches the defect)."""
    if request.param == "standin":
        srv = apiserver.serve_in_thread()
        try:
            yield Http(srv.url, timeout=5)
        finally:
            srv.stop()
    else:
        raw = RawKmock()
        try:
            yield Http(raw.url, timeout=5)
        finally:
            raw.stop()


@pytest.fixture
def kubeconfig(server, tmp_path) -> str:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig", server.url)


@pytest.fixture
def kubectl(kubeconfig, tmp_path):
    """Run kubectl against the stand-in; returns the CompletedProcess (check=False)."""
    cache = tmp_path / "kube-cache"

    def run(*args: str, stdin: str | None = None, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [KUBECTL, "--kubeconfig", kubeconfig, "--cache-dir", str(cache), *args]
        env = {**os.environ, "HOME": str(tmp_path)}
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
