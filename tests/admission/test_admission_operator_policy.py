"""The tenancy policy at admission as the operator loads it, on CREATE and UPDATE (issue 43: fast twins of what
only the dev-cluster and webhook-bench tests caught).

The policy comes from ``specdeploy operator run``'s flags: cli/operator.py cmd_operator_run parses them
(cli/common.py policy_args) and controller/main.run exports them as POLICY_ENV before kopf starts; the webhook
server (built by handlers._start_webhook through webhooks.WebhookRuntime, which passes no policy) reads POLICY_ENV
when it is constructed. Here the CLI runs for real with ``kopf.run`` stubbed, and the server is built from the
environment it left, as WebhookRuntime builds it: nothing sets ``server.policy`` by hand.

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
from specdeploy.controller.webhooks import WebhookServer
from specdeploy.core.policy import POLICY_ENV, TenancyPolicy

from test_admission_attacks import ATTACKS

ALLOWED_IMAGE = "registry.example/runtime:vllm-0.33.0-custom"  # refused by the default policy
OPERATOR_FLAGS = ["--allowed-image-prefix", "registry.example/runtime", "--allowed-image-prefix", "ghcr.io/specdeploy/runtime",
                  "--allowed-priority-class", "gpu-*"]  # narrows the default '*' (any class but system-*)


def _operator_environment(monkeypatch) -> dict:
    """The environment ``specdeploy operator run --webhook FLAGS`` leaves for the webhook server."""
    from specdeploy import cli

    env = dict(os.environ)
    env.pop(POLICY_ENV, None)
    monkeypatch.setattr(os, "environ", env)  # main.run writes os.environ: a copy, restored after the test module
    monkeypatch.setattr(kopf, "run", lambda **_: None)
    assert cli.main(["operator", "run", "--webhook", *OPERATOR_FLAGS]) == 0
    return env


class OperatorServer(ServerThread):
    """The admission helpers' HTTPS server, but built as WebhookRuntime builds it (no policy argument, none set
    afterwards): its policy is whatever the operator's environment says."""

    def __init__(self) -> None:
        super().__init__()
        ctx = certs.server_context(self.material)  # the API server's client certificate verified (chart default)
        certs.require_client_certs(ctx, ca_pem=api_server_client_ca()[0].decode(), optional=True)
        self.server = WebhookServer(lookup=self.lookup, ssl_context=ctx, addr="127.0.0.1", port=0,
                                    client_names=[API_SERVER])


@pytest.fixture(scope="module")
def server():
    mp = pytest.MonkeyPatch()
    try:
        _operator_environment(mp)
        s = OperatorServer()
    finally:
        mp.undo()
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
    assert POLICY_ENV not in os.environ  # nothing leaked from the fixture
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
