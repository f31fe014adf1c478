"""The embedded API server's write log and per-client faults (what the leader-election tests stand on)."""

from __future__ import annotations

import http.client
import json

import pytest

from specdeploy_dev import apiserver

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture()
def srv():
    s = apiserver.serve_in_thread()
    yield s
    s.stop()


def request(srv, method: str, path: str, body=None, agent: str = "test/x", ctype: str = "application/json"):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"User-Agent": agent, "Content-Type": ctype})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def test_every_write_is_logged_with_its_user_agent_and_times(srv):
    assert request(srv, "POST", CMS, {"metadata": {"name": "a"}}, agent="op/a")[0] == 201
    assert request(srv, "GET", f"{CMS}/a", agent="op/a")[0] == 200  # reads are not writes
    assert request(srv, "PATCH", f"{CMS}/a", {"data": {"k": "v"}}, agent="op/b",
                   ctype="application/merge-patch+json")[0] == 200
    assert request(srv, "POST", CMS, {"metadata": {"name": "a"}}, agent="op/b")[0] == 409
    assert request(srv, "POST", "/_specdeploy/faults", {"verb": "get", "status": 500})[0] == 201  # control: not logged
    _, doc = request(srv, "GET", "/_specdeploy/writes")
    got = [(w["agent"], w["method"], w["path"], w["status"]) for w in doc["writes"]]
    assert got == [("op/a", "POST", CMS, 201), ("op/b", "PATCH", f"{CMS}/a", 200), ("op/b", "POST", CMS, 409)]
    assert all(w["start"] <= w["end"] for w in doc["writes"])
    assert [w["agent"] for w in srv.call(lambda e: e.writes)] == ["op/a", "op/b", "op/b"]


def test_an_agent_fault_partitions_one_client_only_and_heals(srv):
    assert request(srv, "POST", "/_specdeploy/faults",
                   {"verb": "*", "resource": "*", "agent": "op/b", "action": "drop", "count": 1000})[0] == 201
    assert request(srv, "POST", CMS, {"metadata": {"name": "a"}}, agent="specdeploy op/a")[0] == 201
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        request(srv, "POST", CMS, {"metadata": {"name": "b"}}, agent="specdeploy op/b")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        request(srv, "GET", f"{CMS}/a", agent="specdeploy op/b")
    assert request(srv, "GET", f"{CMS}/b")[0] == 404  # nothing of b's reached the store
    b = [w for w in srv.call(lambda e: e.writes) if "op/b" in w["agent"]]
    assert [w["status"] for w in b] == [0]  # attempted, dropped
    _, left = request(srv, "DELETE", "/_specdeploy/faults", {"agent": "op/b"})
    assert left["pending"] == []
    assert request(srv, "POST", CMS, {"metadata": {"name": "b"}}, agent="specdeploy op/b")[0] == 201
