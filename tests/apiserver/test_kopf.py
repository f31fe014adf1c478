"""A real ``kopf run`` process against the stand-in served by its CLI (a separate process):
reaching a steady state, finalizers, kopf's Events (generateName), and convergence under faults
injected over HTTP (409, 5xx, 410 on watches, dropped watches)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from apiserver_helpers import WIDGET_CRD, WIDGETS, Http, wait_for, widget
from specdeploy_dev.procs import stop_process

OPERATOR = '''
import logging
import kopf

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 30
    settings.networking.error_backoffs = [0.1, 0.2, 0.5, 1.0]
    settings.persistence.finalizer = "test.specdeploy.io/finalizer"

@kopf.on.create("test.specdeploy.io", "v1", "widgets")
@kopf.on.update("test.specdeploy.io", "v1", "widgets", field="spec")
def reconcile(spec, patch, body, **_):
    patch.status["phase"] = "Ready"
    patch.status["observedSize"] = spec.get("size")
    kopf.info(body, reason="Reconciled", message=f"size {spec.get('size')}")

@kopf.on.delete("test.specdeploy.io", "v1", "widgets")
def cleanup(body, **_):
    kopf.info(body, reason="Cleanup", message="bye")
'''

BIN = Path(sys.executable).parent


@pytest.fixture
def cli_server(tmp_path):
    """The stand-in as a separate process via its CLI: yields (url, kubeconfig path)."""
    kubeconfig = tmp_path / "kubeconfig"
    errors = open(tmp_path / "apiserver.log", "w")  # a file, not a pipe: a full pipe would block it
    proc = subprocess.Popen([sys.executable, "-m", "specdeploy_dev.apiserver", "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), (tmp_path / "apiserver.log").read_text()
        yield url, kubeconfig, proc
        assert "Traceback" not in (tmp_path / "apiserver.log").read_text()
    finally:
        errors.close()
        stop_process(proc, 10)


def test_cli_serves_and_exits_cleanly(cli_server):
    url, kubeconfig, proc = cli_server
    assert kubeconfig.exists() and url in kubeconfig.read_text()
    assert Http(url).get("/api/v1/namespaces/default")[0] == 200
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0


def test_kopf_operator_converges_under_faults(cli_server, tmp_path):
    url, kubeconfig, _ = cli_server
    api = Http(url)
    assert api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGET_CRD)[0] == 201
    (tmp_path / "op.py").write_text(OPERATOR)
    log = open(tmp_path / "kopf.log", "w")
    kopf = subprocess.Popen([str(BIN / "kopf"), "run", "--standalone", "--namespace", "default", "--verbose",
                             str(tmp_path / "op.py")], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "KUBECONFIG": str(kubeconfig)}, cwd=tmp_path)

    def logs() -> str:
        return (tmp_path / "kopf.log").read_text()[-5000:]

    def converged(name: str, size: int) -> bool:
        status, obj = api.get(f"{WIDGETS}/{name}")
        return status == 200 and obj.get("status", {}).get("observedSize") == size \
            and obj.get("status", {}).get("phase") == "Ready"

    def create_and_wait(name: str, size: int = 1, timeout: float = 30) -> None:
        assert api.post(WIDGETS, widget(name, size))[0] == 201
        try:
            wait_for(lambda: converged(name, size), timeout=timeout, what=f"kopf to reconcile {name}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- kopf log ---\n{logs()}") from None

    try:
        create_and_wait("w1", 1, timeout=60)
        status, w1 = api.get(f"{WIDGETS}/w1")
        assert "test.specdeploy.io/finalizer" in w1["metadata"]["finalizers"]
        wait_for(lambda: any(e["metadata"]["name"].startswith("kopf-event-") and e["reason"] == "Reconciled"
                             for e in api.get("/api/v1/namespaces/default/events?fieldSelector="
                                              "involvedObject.name%3Dw1")[1]["items"]), timeout=20, what="kopf events")
        api.patch(f"{WIDGETS}/w1", {"spec": {"size": 2}})
        wait_for(lambda: converged("w1", 2), timeout=30, what="the update")

        # 409 Conflict on the next patch of widgets. As on a real cluster, a conflict means another
        # writer changed the object; kopf throttles and handles the object on its next event, so the
        # test plays that other writer once the fault has fired.
        api.post("/_specdeploy/faults", {"verb": "patch", "resource": "widgets", "status": 409, "count": 1})
        assert api.post(WIDGETS, widget("w2", 1))[0] == 201
        wait_for(lambda: api.get("/_specdeploy/faults")[1]["pending"] == [], timeout=20, what="the 409 to fire")
        api.patch(f"{WIDGETS}/w2", {"metadata": {"labels": {"touched": "yes"}}})
        wait_for(lambda: converged("w2", 1), timeout=30, what="w2 after the conflict")
        # 500/503 on patches (kopf's request retries with backoff).
        api.post("/_specdeploy/faults", [{"verb": "patch", "resource": "widgets", "status": 503, "count": 2},
                                         {"verb": "patch", "resource": "widgets", "status": 500, "count": 1}])
        create_and_wait("w3")
        # Open watches expire with ERROR 410, and the next re-watch gets 410 too: kopf re-lists.
        api.post("/_specdeploy/faults", {"verb": "watch", "resource": "widgets", "status": 410})
        assert api.post("/_specdeploy/watches/expire", {"resource": "widgets"})[1]["watches"] >= 1
        create_and_wait("w4")
        # Open watches are dropped abruptly, and the next one too after its initial events.
        api.post("/_specdeploy/faults", {"verb": "watch", "resource": "widgets", "action": "drop"})
        assert api.post("/_specdeploy/watches/drop", {"resource": "widgets"})[1]["watches"] >= 1
        create_and_wait("w5")
        assert api.get("/_specdeploy/faults")[1]["pending"] == []

        # Deletion: kopf runs the delete handler and releases its finalizer.
        api.delete(f"{WIDGETS}/w1")
        wait_for(lambda: api.get(f"{WIDGETS}/w1")[0] == 404, timeout=30, what="w1 to be released and deleted")
        # Steady state: everything reconciled, the operator alive.
        items = api.get(WIDGETS)[1]["items"]
        assert sorted(i["metadata"]["name"] for i in items) == ["w2", "w3", "w4", "w5"]
        assert all(i["status"]["phase"] == "Ready" for i in items)
        assert kopf.poll() is None, logs()
        kopf.send_signal(signal.SIGINT)
        assert kopf.wait(20) == 0, logs()
    finally:
        if kopf.poll() is None:
            kopf.kill()
            kopf.wait(5)
        log.close()
