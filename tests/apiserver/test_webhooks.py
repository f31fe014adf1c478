"""Admission webhooks (admission.py) against a scripted HTTPS webhook: each test names the
kube-apiserver behaviour (k8s.io/apiserver/pkg/admission/plugin/webhook) it mirrors."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any, Callable

import pytest
from aiohttp import web

from apiserver_helpers import server, api  # noqa: F401  (fixtures)
from apiserver_helpers import CMS, Http, configmap

from specdeploy.controller import certs
from specdeploy_dev.apiserver import admission

VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SVC_NS = "kube-system"


class Hook:
    """An HTTPS AdmissionReview server on loopback whose answers a test scripts."""

    def __init__(self, material: certs.Material):
        self.reviews: list[dict] = []
        self.answer: Callable[[dict], dict] = lambda req: {"allowed": True}
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(material, ready), daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def _run(self, material: certs.Material, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def handle(request: web.Request) -> web.Response:
            review = await request.json()
            self.reviews.append({"path": request.path, "query": dict(request.query), **review["request"]})
            if self.delay:
                await asyncio.sleep(self.delay)
            resp = {"uid": review["request"]["uid"], **self.answer(review["request"])}
            return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/{tail:.*}", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=certs.server_context(material))
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
            ready.set()

        self._loop.run_until_complete(main())
        self._loop.run_forever()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture
def material():
    return certs.new_material(certs.service_dns_names([f"hook.{SVC_NS}"]))


@pytest.fixture
def hook(api: Http, material):
    h = Hook(material)
    # The webhook Service and its Endpoints (the embedded cluster's endpoints controller is the test).
    api.post(f"/api/v1/namespaces/{SVC_NS}/services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook"},
                                                       "spec": {"ports": [{"name": "https", "port": 443, "targetPort": "https"}]}})
    api.post(f"/api/v1/namespaces/{SVC_NS}/endpoints", {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hook"},
                                                        "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                                                                     "ports": [{"name": "https", "port": h.port}]}]})
    yield h
    h.stop()


def webhook(name: str, material: certs.Material, path: str, **extra: Any) -> dict:
    hook = {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 2,
            "clientConfig": {"service": {"name": "hook", "namespace": SVC_NS, "path": path}, "caBundle": material.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["configmaps"], "scope": "Namespaced"}]}
    hook.update(extra)
    return hook


def install(api: Http, path: str, name: str, *hooks: dict) -> None:
    kind = "ValidatingWebhookConfiguration" if path == VWC else "MutatingWebhookConfiguration"
    status, body = api.post(path, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                   "metadata": {"name": name}, "webhooks": list(hooks)})
    assert status == 201, body


def test_mutating_runs_before_validating_and_patches_apply(api: Http, hook: Hook, material):
    order: list[str] = []

    def scripted(req: dict) -> dict:
        path = hook.reviews[-1]["path"]
        order.append(path)
        if path == "/mutate":
            patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
            return {"allowed": True, "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(), "warnings": ["from the mutator"]}
        assert req["object"]["metadata"]["labels"] == {"mutated": "yes"}  # validating sees the mutation
        return {"allowed": True}

    hook.answer = scripted
    install(api, VWC, "a-validate", webhook("v.test.io", material, "/validate"))
    install(api, MWC, "z-mutate", webhook("m.test.io", material, "/mutate"))
    status, body, headers = api.request("POST", CMS, configmap("c", x="1"))
    assert status == 201 and body["metadata"]["labels"] == {"mutated": "yes"}
    assert order == ["/mutate", "/validate"]
    assert headers["warning"] == '299 - "from the mutator"'
    review = hook.reviews[0]
    assert review["operation"] == "CREATE" and review["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert review["namespace"] == "default" and review["query"] == {"timeout": "2s"}


def test_denial_is_formatted_as_the_real_server(api: Http, hook: Hook, material):
    hook.answer = lambda req: {"allowed": False, "status": {"code": 422, "reason": "Invalid", "message": "no thanks"}}
    install(api, VWC, "v", webhook("v.test.io", material, "/validate"))
    status, body = api.post(CMS, configmap("c"))
    assert status == 422 and body["message"] == 'admission webhook "v.test.io" denied the request: no thanks'
    hook.answer = lambda req: {"allowed": False}
    status, body = api.post(CMS, configmap("c"))
    assert status == 400 and body["message"] == 'admission webhook "v.test.io" denied the request without explanation'
    assert api.get(f"{CMS}/c")[0] == 404


def test_selectors_decide_which_objects_are_sent(api: Http, hook: Hook, material):
    install(api, VWC, "v", webhook("v.test.io", material, "/validate",
                                   objectSelector={"matchLabels": {"review": "me"}},
                                   namespaceSelector={"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                                            "operator": "In", "values": ["default"]}]}))
    api.post(CMS, configmap("skipped"))
    api.post(CMS, configmap("sent", labels={"review": "me"}))
    api.post("/api/v1/namespaces/kube-public/configmaps", configmap("other-ns", labels={"review": "me"}))
    assert [r["name"] for r in hook.reviews] == ["sent"]


def test_failure_policy_and_timeout(api: Http, hook: Hook, material):
    hook.delay = 3  # longer than timeoutSeconds (2)
    install(api, VWC, "v", webhook("v.test.io", material, "/validate"),
            webhook("ignored.test.io", material, "/validate", failurePolicy="Ignore", timeoutSeconds=1))
    status, body = api.post(CMS, configmap("slow"))
    # The Ignore webhook's timeout is skipped; the Fail one refuses the request.
    assert status == 500 and body["reason"] == "InternalError"
    assert body["message"] == ('Internal error occurred: failed calling webhook "v.test.io": failed to call webhook: '
                               "context deadline exceeded")


def test_ca_bundle_is_verified(api: Http, hook: Hook, material):
    other = certs.new_material(["elsewhere"])
    install(api, VWC, "v", webhook("v.test.io", material, "/validate", clientConfig={
        "service": {"name": "hook", "namespace": SVC_NS, "path": "/validate"}, "caBundle": other.ca_bundle}))
    status, body = api.post(CMS, configmap("c"))
    assert status == 500 and 'failed calling webhook "v.test.io"' in body["message"] and "certificate" in body["message"]
    assert hook.reviews == []


def test_dry_run_and_side_effects(api: Http, hook: Hook, material):
    install(api, VWC, "v", webhook("v.test.io", material, "/validate", sideEffects="Unknown"))
    status, body = api.post(f"{CMS}?dryRun=All", configmap("c"))
    assert status == 400 and "does not support dry run" in body["message"]


def test_rule_matching_is_pure():
    info = admission.ResourceInfo(group="apps", version="v1", plural="deployments", kind="Deployment")
    rule = {"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["deployments/*"]}
    assert admission._match_rule(rule, "UPDATE", info, "status")
    assert not admission._match_rule(rule, "UPDATE", info, None)
    assert not admission._match_rule(rule, "CREATE", info, "status")
    assert admission._match_rule({**rule, "resources": ["*"], "operations": ["*"]}, "CREATE", info, None)
    assert not admission._match_rule({**rule, "resources": ["*"], "scope": "Cluster"}, "UPDATE", info, None)
    err = admission.denial("x", {"message": "m", "code": 200})
    assert err.code == 400 and err.message == 'admission webhook "x" denied the request: m'
