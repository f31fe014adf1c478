"""The dev kubelet's Job controller (pure plan) and its Service proxy (DNS names, forwarding)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from specdeploy_dev.engine_standin import EngineStandin, completion_text
from specdeploy_dev.kubelet_jobs import plan_job
from specdeploy_dev.kubelet_proxy import ServiceProxy, parse_service_host, proxy_env

NOW = "2026-01-01T00:00:00Z"
JOB = {"metadata": {"name": "b-k3-client", "namespace": "ns", "uid": "u1"},
       "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": "x"}},
                                                "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}}


def pod(phase: str, name: str = "b-k3-client-abcde") -> dict:
    return {"metadata": {"name": name, "labels": {"job-name": "b-k3-client"}}, "status": {"phase": phase}}


def test_a_new_job_gets_one_pod_bound_to_the_node():
    plan = plan_job(JOB, [], "node-1", NOW)
    p = plan.create_pod
    assert p["spec"]["nodeName"] == "node-1" and p["metadata"]["generateName"] == "b-k3-client-"
    assert p["metadata"]["labels"] == {"app": "x", "job-name": "b-k3-client", "batch.kubernetes.io/job-name": "b-k3-client",
                                       "controller-uid": "u1"}
    assert p["metadata"]["ownerReferences"][0] == {"apiVersion": "batch/v1", "kind": "Job", "name": "b-k3-client",
                                                   "uid": "u1", "controller": True, "blockOwnerDeletion": True}
    assert plan.status == {"active": 1, "startTime": NOW}


def test_running_then_succeeded_then_stable():
    assert plan_job({**JOB, "status": {"active": 1, "startTime": NOW}}, [pod("Running")], "n", NOW).status is None
    done = plan_job({**JOB, "status": {"active": 1, "startTime": NOW}}, [pod("Succeeded")], "n", NOW)
    assert done.create_pod is None and done.status["succeeded"] == 1 and "active" not in done.status
    assert done.status["conditions"][0]["type"] == "Complete" and done.status["completionTime"] == NOW
    again = plan_job({**JOB, "status": done.status}, [pod("Succeeded")], "n", NOW)
    assert again.status is None and again.create_pod is None


def test_failures_retry_up_to_the_backoff_limit():
    job = {**JOB, "spec": {**JOB["spec"], "backoffLimit": 1}}
    retry = plan_job(job, [pod("Failed")], "n", NOW)
    assert retry.create_pod is not None and retry.status["failed"] == 1
    out = plan_job(job, [pod("Failed"), pod("Failed", "b-k3-client-fghij")], "n", NOW)
    assert out.create_pod is None and out.status["conditions"][0]["reason"] == "BackoffLimitExceeded"


@pytest.mark.parametrize("host,want", [
    ("sweep-k3.team-a.svc", ("team-a", "sweep-k3")),
    ("sweep-k3.team-a.svc.cluster.local", ("team-a", "sweep-k3")),
    ("SWEEP.ns.svc", ("ns", "sweep")),
    ("example.com", None), ("a.b.c.svc", None), ("127.0.0.1", None), ("", None),
])
def test_service_host_names(host, want):
    assert parse_service_host(host) == want


def test_proxy_forwards_a_service_name_to_the_backend_and_refuses_others():
    standin = EngineStandin("vllm", "healthy", model_name="m", num_spec_tokens=3, auto_advance=0).start()
    standin.sleep_scale = 0

    async def resolve(ns, name, port):
        return ("127.0.0.1", standin.port) if (ns, name, port) == ("ns", "eng", 8000) else None

    async def scene():
        proxy = ServiceProxy(resolve)
        port = await proxy.start()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy_env(port)["HTTP_PROXY"]}))

        def post():
            req = urllib.request.Request("http://eng.ns.svc:8000/v1/completions", data=json.dumps(
                {"model": "m", "prompt": "hello", "max_tokens": 5}).encode(), headers={"Content-Type": "application/json"})
            with opener.open(req, timeout=10) as r:
                return json.loads(r.read())

        def missing():
            try:
                opener.open("http://other.ns.svc:8000/health", timeout=10)
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
            return None

        try:
            doc = await asyncio.to_thread(post)
            code = await asyncio.to_thread(missing)
        finally:
            await proxy.stop()
        return doc, code

    try:
        doc, code = asyncio.run(scene())
    finally:
        standin.stop()
    assert doc["choices"][0]["text"] == completion_text("hello", 5) and doc["usage"]["completion_tokens"] == 5
    assert standin.steps == 1  # one completion: one step of the counters
    assert code[0] == 503 and "no ready pod behind Service ns/other" in code[1]
