"""The tenancy policy at admission as the operator loads it, on CREATE and UPDATE (issue 43: fast twins of what
only the dev-cluster and webhook-bench tests caught).

The policy comes from ``specdeploy operator run``'s flags: cli/operator.py operator_settings parses them
(cli/common.py policy_args) into the one settings object (controller/settings.py OperatorSettings) that
controller/main.run hands to kopf's memo; the start-up handler gives its policy to webhooks.WebhookRuntime, which
builds the server (WebhookRuntime.new_server). Here the CLI runs for real with ``kopf.run`` stubbed, and the server
is built by a WebhookRuntime made from the memo's settings as handlers._start_webhook makes it: nothing sets
``server.policy`` by hand.

The Kubernetes admission contract: a validating webhook registered for CREATE and UPDATE (the chart's
ValidatingWebhookConfiguration) sees every write of the spec; an UPDATE that changes the spec gets the same
verdict as a CREATE of the new object (admission.py ratchets only an UPDATE that leaves the spec unchanged)."""

from __future__ import annotations

import copy
import os

import kopf
import pytest

from admission_helpers import API_SERVER, QWEN, ServerThread, api_server_client_ca, example_configs, example_cr, configmap, review_request, with_spec
from specdeploy.controller import certs
from specdeploy.controller.webhooks import WebhookRuntime
from specdeploy.core.policy import TenancyPolicy
from specdeploy_dev.harness import free_port

from test_admission_attacks import ATTACKS

ALLOWED_IMAGE = "registry.example/runtime:vllm-0.33.0-custom"  # refused by the default policy
OPERATOR_FLAGS = ["--allowed-image-prefix", "registry.example/runtime", "--allowed-image-prefix", "ghcr.io/specdeploy/runtime",
                  "--allowed-priority-class", "gpu-*"]  # narrows the default '*' (any class but system-*)


def _operator_settings(monkeypatch):
    """The settings ``specdeploy operator run --webhook FLAGS`` hands to kopf (``memo.settings``)."""
    from specdeploy import cli

    seen: dict = {}
    monkeypatch.setattr(kopf, "run", lambda **kw: seen.update(kw))
    before = dict(os.environ)
    assert cli.main(["operator", "run", "--webhook", "--webhook-port", str(free_port()), "--metrics-port", "0",
                     *OPERATOR_FLAGS]) == 0
    assert dict(os.environ) == before  # nothing goes through the environment
    memo = seen["memo"]
    assert memo.operator.settings is memo.settings
    return memo.settings


class OperatorServer(ServerThread):
    """The admission helpers' HTTPS server, but built by a WebhookRuntime made as the start-up handler makes it
    (handlers._start_webhook: the settings' webhook part and policy); its policy is the operator's settings'."""

    def __init__(self, settings) -> None:
        super().__init__()
        runtime = WebhookRuntime(settings.webhook, None, self.lookup, policy=settings.policy)
        runtime.ctx = certs.server_context(self.material)  # the API server's client certificate verified (chart default)
        certs.require_client_certs(runtime.ctx, ca_pem=api_server_client_ca()[0].decode(), optional=True)
        self.server = runtime.new_server([API_SERVER])
        self.server.port = 0


@pytest.fixture(scope="module")
def server():
    mp = pytest.MonkeyPatch()
    try:
        settings = _operator_settings(mp)
    finally:
        mp.undo()
    s = OperatorServer(settings)
    s.start()
    t, d = example_configs(QWEN)
    dup = copy.deepcopy(d)
    dup["eagle_aux_hidden_state_layer_ids"] = [1, 16, 31, 46, 61]
    for name, doc in {"qwen36-27b-target-config": t, "qwen36-27b-drafter-config": d, "dup-drafter": dup}.items():
        s.resolver.add(configmap(name, doc))
    yield s
    s.stop()


def test_the_webhook_server_takes_the_operators_policy(server):
    """Not the default policy: the operator's flags widened the image prefixes and narrowed the priority classes."""
    assert server.server.policy != TenancyPolicy()
    assert "registry.example/runtime" in server.server.policy.image_prefixes


def _verdict(client, changes: dict, operation: str) -> dict:
    old = example_cr(QWEN)
    new = with_spec(example_cr(QWEN), **changes)
    if operation == "UPDATE":
        old["metadata"].update(resourceVersion="7", uid="u-1", generation=1)
        new["metadata"].update(resourceVersion="7", uid="u-1", generation=2)
    return client.review(review_request(new, operation, old=old if operation == "UPDATE" else None))


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_the_operators_policy_decides_each_operation(client, operation):
    r = _verdict(client, {"engine.image": ALLOWED_IMAGE}, operation)
    assert r["allowed"] is True, r  # the default policy would refuse this image
    r = _verdict(client, {"pod.priorityClassName": "batch-low"}, operation)
    assert r["allowed"] is False and "PolicyPriorityClassNotAllowed" in r["status"]["message"], r
    r = _verdict(client, {"pod.priorityClassName": "gpu-high"}, operation)
    assert r["allowed"] is True, r
    assert _verdict(client, {}, operation)["allowed"] is True


@pytest.mark.parametrize("what, changes, path, code", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_each_attack_is_refused_on_update_too(client, what, changes, path, code):
    """Issue 12's attacks written as an UPDATE of an admitted object (the spec changed by the update): the same
    refusal as on CREATE (tests/admission/test_admission_attacks.py)."""
    r = _verdict(client, changes, "UPDATE")
    assert r["allowed"] is False, r
    msg = r["status"]["message"]
    assert path in msg and code in msg, msg
