"""The serialized-object cache (Store.encode): every answer and watch event carries the object as it is
stored now, in the compact form ``_dumps`` of the whole answer gives, per served version."""

from __future__ import annotations

import http.client
import json
import threading

from apiserver_helpers import server, api, widgets  # noqa: F401  (fixtures)
from apiserver_helpers import WIDGETS, Http, widget

from specdeploy_dev.apiserver.common import _dumps

V1BETA1 = WIDGETS.replace("/v1/", "/v1beta1/")


def raw_get(client: Http, path: str) -> bytes:
    conn = http_conn(client)
    conn.request("GET", path)
    return conn.getresponse().read()


def http_conn(client: Http) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(client.host, client.port, timeout=10)


def test_answers_follow_every_write_and_keep_the_compact_form(widgets: Http):
    for name in ("a", "b", "c"):
        assert widgets.post(WIDGETS, widget(name))[0] == 201
    first = raw_get(widgets, WIDGETS)
    assert first == _dumps(json.loads(first))  # compact, items joined as one dumps would
    status, w = widgets.patch(f"{WIDGETS}/b", {"spec": {"size": 7}})
    assert status == 200 and w["spec"]["size"] == 7
    listed = json.loads(raw_get(widgets, WIDGETS))
    assert [i["spec"]["size"] for i in listed["items"]] == [1, 7, 1]
    assert listed["items"][1]["metadata"]["resourceVersion"] == w["metadata"]["resourceVersion"]
    got = raw_get(widgets, f"{WIDGETS}/b")
    assert json.loads(got) == w and got == _dumps(w)
    # the same stored object served through another version carries that version
    other = json.loads(raw_get(widgets, f"{V1BETA1}/b"))
    assert other["apiVersion"] == "test.specdeploy.io/v1beta1" and other["spec"]["size"] == 7
    assert json.loads(raw_get(widgets, f"{WIDGETS}/b"))["apiVersion"] == "test.specdeploy.io/v1"
    assert {i["apiVersion"] for i in json.loads(raw_get(widgets, V1BETA1))["items"]} == {"test.specdeploy.io/v1beta1"}
    # a dry run answers its result without touching what is stored
    status, dry = widgets.patch(f"{WIDGETS}/b?dryRun=All", {"spec": {"size": 9}})
    assert status == 200 and dry["spec"]["size"] == 9
    assert json.loads(raw_get(widgets, f"{WIDGETS}/b"))["spec"]["size"] == 7
    # deleted and recreated under the same name: the new object
    assert widgets.delete(f"{WIDGETS}/b")[0] == 200
    assert widgets.post(WIDGETS, widget("b", size=3))[0] == 201
    assert json.loads(raw_get(widgets, f"{WIDGETS}/b"))["spec"]["size"] == 3


def test_watch_events_carry_each_version_in_the_compact_form(widgets: Http):
    assert widgets.post(WIDGETS, widget("w"))[0] == 201
    lines: list[bytes] = []
    opened = threading.Event()

    def read() -> None:
        conn = http_conn(widgets)
        conn.request("GET", f"{WIDGETS}?watch=true&resourceVersion=0")
        resp = conn.getresponse()
        opened.set()
        while len(lines) < 3:
            line = resp.readline()
            if not line:
                break
            lines.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert opened.wait(10)
    for size in (5, 6):
        assert widgets.patch(f"{WIDGETS}/w", {"spec": {"size": size}})[0] == 200
    t.join(10)
    assert len(lines) == 3
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED"]
    assert [e["object"]["spec"]["size"] for e in events] == [1, 5, 6]
    for line, event in zip(lines, events):
        assert line == _dumps(event) + b"\n"
