"""Install test: `helm template | kubectl apply` into the embedded API server, then the operator started with the
rendered Deployment's own arguments and environment reconciles an example.

The embedded API server runs no pods and enforces no RBAC, so the operator runs as a local process with
the container's args (only in-cluster values are replaced: ports are free local ones; the kubeconfig), and
the test plays the endpoints controller for the webhook Service, which the API server then calls.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import urllib.request

import pytest

from chart_helpers import NAMESPACE, ROOT, container, one, render, render_text
from specdeploy_dev.harness import BIN, Cluster, free_port, kubectl_available, wait_for
from specdeploy_dev.procs import stop_process

WATCHED = "inference"
VALUES = {"watch": {"namespaces": [WATCHED]}, "resyncSeconds": 30}
EXAMPLE = ROOT / "examples" / "qwen3.6-27b-b300-vllm"

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")


def _operator_argv(objs: list[dict], kubeconfig: str) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """The rendered container's command line and env, with in-cluster values replaced by local ones."""
    c = container(objs)
    args = list(c["args"])
    ports = {"metrics": free_port(), "health": free_port(), "webhook": free_port()}
    replace = {"--metrics-port": str(ports["metrics"]), "--health-port": str(ports["health"]),
               "--webhook-port": str(ports["webhook"])}
    for i, a in enumerate(args[:-1]):
        if a in replace:
            args[i + 1] = replace[a]
        elif a in ("--bind-address", "--metrics-bind-address"):  # the pod's every interface: loopback here
            assert args[i + 1] == "0.0.0.0"
            args[i + 1] = "127.0.0.1"
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = one(objs, "Deployment")["metadata"]["namespace"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = one(objs, "Deployment")["metadata"]["name"] + "-0"
    return [str(BIN / "specdeploy"), *args, "--kubeconfig", kubeconfig], env, ports


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def test_helm_template_kubectl_apply_then_the_operator_reconciles(tmp_path):
    objs = render(VALUES)
    manifest = render_text(VALUES)
    with Cluster(workdir=tmp_path) as cluster:
        namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in (NAMESPACE, WATCHED)]
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": namespaces}))
        cluster.kubectl("apply", "-f", "-", input=manifest)
        # everything the chart renders is there
        for o in objs:
            args = [o["kind"].lower(), o["metadata"]["name"]] + (["-n", o["metadata"]["namespace"]]
                                                                if o["metadata"].get("namespace") else [])
            cluster.kubectl("get", *args)
        wait_for(lambda: cluster.kubectl("get", "specdeploy", "-n", WATCHED, check=False).returncode == 0, 30,
                 "the SpeculativeDeployment API from the chart's CRD")

        argv, env, ports = _operator_argv(objs, cluster.kubeconfig)
        assert "--namespace" in argv and WATCHED in argv
        assert "--webhook-secret" in argv and env["POD_NAMESPACE"] == NAMESPACE
        home = tmp_path / "home"
        env["HF_HOME"] = str(tmp_path / env["HF_HOME"].lstrip("/"))  # /tmp/... is the pod's emptyDir
        log = open(tmp_path / "operator.log", "w")
        # KUBECONFIG too: kopf's own login (login_via_client) uses the kubernetes client's default kubeconfig
        # location, which that library fixes at import time, before --kubeconfig is applied.
        env = {**os.environ, "HOME": str(home), "KUBECONFIG": cluster.kubeconfig, **env}
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            # the probe endpoints the Deployment's liveness and readiness probes use (ready: webhook + caches)
            wait_for(lambda: _http_ok(f"http://127.0.0.1:{ports['health']}/healthz"), 60, "the operator's /healthz")
            wait_for(lambda: _http_ok(f"http://127.0.0.1:{ports['health']}/readyz"), 60, "the operator's /readyz")
            wait_for(lambda: _http_ok(f"http://127.0.0.1:{ports['metrics']}/metrics"), 30, "the operator's /metrics")

            # self-signed webhook TLS: the Secret the chart names, and caBundle in the chart's two configurations
            secret = wait_for(lambda: json.loads(cluster.kubectl(
                "get", "secret", "specdeploy-webhook-tls", "-n", NAMESPACE, "-o", "json", check=False).stdout or "null"),
                30, "the webhook TLS Secret")
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
                wait_for(lambda: all(w.get("clientConfig", {}).get("caBundle") == secret["data"]["ca.crt"]
                                     for w in cluster.get_json(kind, "specdeploy")["webhooks"]), 30, f"caBundle of {kind}")

            # the endpoints controller's part: the webhook Service's Endpoints are the operator's port
            svc = one(objs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]
            cluster.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": svc["name"], "namespace": svc["namespace"]},
                "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "webhook", "port": ports["webhook"]}]}]}))
            cluster.kubectl("apply", "-n", WATCHED, "-k", str(EXAMPLE))
            cluster.wait_condition("qwen36-27b", "DrafterCompatible", "True", timeout=60, namespace=WATCHED)
            dep = cluster.get_json("deployment", "qwen36-27b", "-n", WATCHED)
            assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "specdeploy"
            # it reconciled as the leader: the chart's Lease, in the release namespace, names this replica
            lease = cluster.get_json("lease", "specdeploy-leader", "-n", NAMESPACE)
            assert lease["spec"]["holderIdentity"].startswith("specdeploy-0_"), lease["spec"]
            assert lease["spec"]["leaseDurationSeconds"] == 15

            # the webhook server answers on the paths the chart's configurations name, with the Secret's CA
            ctx = ssl.create_default_context(cadata=base64.b64decode(secret["data"]["ca.crt"]).decode())
            cr = cluster.get_json("specdeploy", "qwen36-27b", "-n", WATCHED)
            for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
                (wh,) = one(objs, kind)["webhooks"]
                review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                    "uid": "chart-test", "operation": "UPDATE", "namespace": WATCHED, "name": "qwen36-27b",
                    "kind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
                    "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
                    "object": cr, "oldObject": cr, "userInfo": {"username": "chart-test"}}}
                req = urllib.request.Request(f"https://127.0.0.1:{ports['webhook']}{wh['clientConfig']['service']['path']}",
                                             data=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                    got = json.loads(r.read())
                assert got["response"]["uid"] == "chart-test" and got["response"]["allowed"] is True, got
        except Exception:
            log.flush()
            print((tmp_path / "operator.log").read_text()[-6000:])
            print(cluster.kubectl("get", "events", "-n", WATCHED, check=False).stdout)
            raise
        finally:
            stop_process(proc, 20)
            log.close()
