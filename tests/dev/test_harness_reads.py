"""The real-engine scenes' polling reads (``RealLoop.get`` -> ``Cluster.read_json``): one GET to the embedded API
server instead of a kubectl process, with the same answer as ``kubectl get -o json``."""

from __future__ import annotations

import json

import pytest

from specdeploy_dev.harness import Cluster, HarnessError
from specdeploy_dev.realloop import _read_form


@pytest.mark.parametrize("args, want", [
    (("pods",), ("pods", None, None)),
    (("deployment", "roll"), ("deployment", "roll", None)),
    (("pods", "-l", "a=b,c=d"), ("pods", None, "a=b,c=d")),
    (("specdeploy", "lang"), ("specdeploy", "lang", None)),
    (("pods", "-o", "wide"), None),          # anything else: kubectl
    (("pods", "-l"), None),
    (("pods", "x", "-l", "a=b"), None),
    (("-A", "pods"), None),
    (("pods", "a", "b"), None),
])
def test_read_forms(args, want):
    assert _read_form(args) == want


def _deployment(name: str, labels: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "x"}]}}}}


def test_reads_answer_as_kubectl_does(tmp_path):
    with Cluster(workdir=tmp_path / "cluster") as c:
        for name, labels in (("a", {"track": "canary"}), ("b", {"track": "stable"}), ("c", {"track": "canary"})):
            c.kubectl("apply", "-n", "default", "-f", "-", input=json.dumps(_deployment(name, labels)))
        for resource, name, selector in (("deployments", None, None), ("deployments", None, "track=canary"),
                                         ("deployment", "b", None)):
            got = c.read_json(resource, name, "default", selector)
            want = c.get_json(resource, *([name] if name else []), "-n", "default", *(["-l", selector] if selector else []))
            if name:
                assert got["metadata"]["uid"] == want["metadata"]["uid"] and got["spec"] == want["spec"]
            else:
                assert [o["metadata"]["name"] for o in got["items"]] == [o["metadata"]["name"] for o in want["items"]]
        assert [o["metadata"]["name"] for o in c.read_json("deployments", None, "default", "track=canary")["items"]] \
            == ["a", "c"]
        with pytest.raises(HarnessError, match="404"):
            c.read_json("deployment", "missing", "default")
        with pytest.raises(HarnessError, match="read with kubectl"):
            c.read_json("nodes", None, "default")
