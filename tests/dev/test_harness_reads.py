"""The tests' reads of the embedded API server (``Cluster.get_json``): the forms the waits poll are one GET
(``Cluster.read_json``) instead of a kubectl process, with the answer ``kubectl get -o json`` prints."""

from __future__ import annotations

import json

import pytest

from specdeploy_dev.harness import Cluster, HarnessError, get_form


@pytest.mark.parametrize("args, want", [
    (("pods", "-n", "ns"), ("pods", None, "ns", None)),
    (("deployment", "roll", "-n", "ns"), ("deployment", "roll", "ns", None)),
    (("pods", "-l", "a=b,c=d", "-n", "ns"), ("pods", None, "ns", "a=b,c=d")),
    (("specdeploy", "lang", "--namespace=ns"), ("specdeploy", "lang", "ns", None)),
    (("jobs", "-n", "ns", "--selector", "a=b"), ("jobs", None, "ns", "a=b")),
    (("pods",), None),                        # no namespace: kubectl (its context's)
    (("pods", "-n", "ns", "-o", "wide"), None),  # any other flag: kubectl
    (("pods", "-n", "ns", "-l"), None),
    (("pods", "x", "-n", "ns", "-l", "a=b"), None),
    (("pods", "-A"), None),
    (("pods", "a", "b", "-n", "ns"), None),
    (("pods", "-n", "a", "-n", "b"), None),
])
def test_get_forms(args, want):
    assert get_form(args) == want


def _deployment(name: str, labels: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def test_reads_answer_as_kubectl_prints(tmp_path):
    with Cluster(workdir=tmp_path / "cluster") as c:
        for name, labels in (("a", {"track": "canary"}), ("b", {"track": "stable"}), ("c", {"track": "canary"})):
            c.kubectl("apply", "-n", "default", "-f", "-", input=json.dumps(_deployment(name, labels)))
        for args in (("deployments",), ("deployments", "-l", "track=canary"), ("deployment", "b"), ("deploy", "a")):
            got = c.get_json(*args, "-n", "default")
            want = json.loads(c.kubectl("get", *args, "-n", "default", "-o", "json").stdout)
            assert got == want, args
        assert [o["metadata"]["name"] for o in c.get_json("deployments", "-l", "track=canary", "-n", "default")["items"]] \
            == ["a", "c"]
        with pytest.raises(HarnessError, match="NotFound"):
            c.get_json("deployment", "missing", "-n", "default")
        with pytest.raises(HarnessError, match="read with kubectl"):
            c.read_json("nodes", None, "default")
    with pytest.raises(HarnessError, match="GET /apis/apps/v1/namespaces/default/deployments"):
        c.get_json("deployments", "-n", "default")  # the server is gone: a failure as kubectl's, not a traceback
