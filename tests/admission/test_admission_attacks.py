"""Issue 12's attacks through the admission webhook over real HTTPS: an author with `create` on
SpeculativeDeployments gets no more than they already have. The same attacks through the operator on the
embedded API server: e2e/test_e2e_attacks.py."""

from __future__ import annotations

import copy

import pytest

from admission_helpers import (KIMI, QWEN, configmap, example_configs, example_cr, qwen_server, review_request,
                               with_spec)
from specdeploy.core.render import expand_kubelet_vars, render
from specdeploy.api.types import SpeculativeDeployment

@pytest.fixture(scope="module")
def server():
    dup = copy.deepcopy(example_configs(QWEN)[1])
    dup["eagle_aux_hidden_state_layer_ids"] = [1, 16, 31, 46, 61]  # vLLM reads these instead of target_layer_ids
    s = qwen_server({"dup-drafter": dup})
    yield s
    s.stop()


def review(client, **changes):
    return client.review(review_request(with_spec(example_cr(QWEN), **changes)))


ATTACKS = [
    ("foreign image", {"engine.image": "docker.io/attacker/anything:latest"}, "spec.engine.image", "PolicyImageNotAllowed"),
    ("namespace-admin ServiceAccount", {"pod.serviceAccountName": "namespace-admin"}, "spec.pod.serviceAccountName",
     "PolicyServiceAccountNotAllowed"),
    ("any Secret as HF_TOKEN", {"target.tokenSecretRef": {"name": "database-credentials", "key": "password"}},
     "spec.target.tokenSecretRef.name", "PolicyTokenSecretNotAllowed"),
    ("vLLM -n", {"engine.extraArgs": ["-n", "4"]}, "spec.engine.extraArgs[0]", "ExtraArgSetsOwnedFlag"),
    ("vLLM -r", {"engine.extraArgs": ["-r", "3"]}, "spec.engine.extraArgs[0]", "ExtraArgSetsOwnedFlag"),
    ("--no-trust-remote-code", {"engine.extraArgs": ["--no-trust-remote-code"]}, "spec.engine.extraArgs[0]",
     "ExtraArgSetsOwnedFlag"),
    ("unknown flag", {"engine.extraArgs": ["--no-such-flag"]}, "spec.engine.extraArgs[0]", "ExtraArgUnknown"),
    ("not a vLLM 0.33 flag", {"engine.extraArgs": ["--num-speculative-tokens", "3"]}, "spec.engine.extraArgs[0]",
     "ExtraArgUnknown"),
    ("SGLang flag on vLLM", {"engine.extraArgs": ["--enable-metrics"]}, "spec.engine.extraArgs[0]", "ExtraArgUnknown"),
    ("wrong case", {"engine.extraArgs": ["--PORT", "1"]}, "spec.engine.extraArgs[0]", "ExtraArgUnknown"),
    ("--hf-overrides", {"engine.extraArgs": ["--hf-overrides", '{"num_hidden_layers": 2}']}, "spec.engine.extraArgs[0]",
     "ExtraArgChangesModelConfig"),
    ("SGLang --nccl-init-addr", {"engine": {"name": "sglang", "version": "0.5.23", "extraArgs": ["--nccl-init-addr", "x:1"]}},
     "spec.engine.extraArgs[0]", "ExtraArgSetsOwnedFlag"),
    ("SGLang --json-model-override-args", {"engine": {"name": "sglang", "version": "0.5.23",
                                                      "extraArgs": ["--json-model-override-args", "{}"]}},
     "spec.engine.extraArgs[0]", "ExtraArgChangesModelConfig"),
    ("vLLM --nccl-init-addr is not a vLLM flag", {"engine.extraArgs": ["--nccl-init-addr", "x:1"]},
     "spec.engine.extraArgs[0]", "ExtraArgUnknown"),
    ("--json-model-override-args on vLLM", {"engine.extraArgs": ["--json-model-override-args", "{}"]},
     "spec.engine.extraArgs[0]", "ExtraArgUnknown"),
    ("eagle aux ids disagree", {"drafter.configFrom": {"configMapKeyRef": {"name": "dup-drafter"}}},
     "$.eagle_aux_hidden_state_layer_ids", "EngineReadsOtherCopy"),
    # issue 24: what turns an engine pod into arbitrary code, or schedules it where tenants must not run
    # (trustRemoteCode: this server's policy allows it in namespace default for the Kimi example; its refusal is
    # tested through the operator, e2e/test_e2e_attacks.py, and in tests/unit/test_policy_code.py)
    ("a logits processor class", {"engine.extraArgs": ["--logits-processors", "evil.Proc"]},
     "spec.engine.extraArgs[0]", "PolicyCodeArgNotAllowed"),
    ("a tool parser plugin file", {"engine.extraArgs": ["--tool-parser-plugin", "/tmp/x.py"]},
     "spec.engine.extraArgs[0]", "PolicyCodeArgNotAllowed"),
    ("tolerate every taint", {"pod.tolerations": [{"operator": "Exists"}]}, "spec.pod.tolerations[0]",
     "PolicyTolerationNotAllowed"),
    ("a system priority class", {"pod.priorityClassName": "system-node-critical"}, "spec.pod.priorityClassName",
     "PolicyPriorityClassNotAllowed"),
    ("the control-plane nodes", {"pod.nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
     "spec.pod.nodeSelector", "PolicyNodeSelectorNotAllowed"),
    # issue 37: a qualified class name found by code path, a flag that connects out, a path of the pod as the model
    ("an executor class", {"engine.extraArgs": ["--distributed-executor-backend", "evil.Executor"]},
     "spec.engine.extraArgs[0]", "PolicyCodeArgNotAllowed"),
    ("traces to a foreign collector", {"engine.extraArgs": ["--otlp-traces-endpoint", "http://203.0.113.9:4317"]},
     "spec.engine.extraArgs[0]", "PolicyEgressArgNotAllowed"),
    ("another tenant's cached model by path",
     {"target.model": "/var/cache/huggingface/hub/models--other--private/snapshots/0123456789abcdef0123456789abcdef01234567"},
     "spec.target.model", "PolicyModelPathNotAllowed"),
]


@pytest.mark.parametrize("what, changes, path, code", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_refused_at_admission(client, what, changes, path, code):
    r = review(client, **changes)
    assert r["allowed"] is False, r
    msg = r["status"]["message"]
    assert path in msg and code in msg, msg
    assert r["status"]["code"] in (403, 422)


def test_the_same_spec_without_the_attack_is_admitted(client):
    r = review(client)
    assert r["allowed"] is True, r


def test_secret_reference_in_args_is_not_expanded(client):
    """extraArgs ["--served-model-name", "$(HF_TOKEN)"]: admitted (not a flag problem), but the kubelet passes it literally."""
    r = review(client, **{"engine.extraArgs": ["--served-model-name", "$(HF_TOKEN)"]})
    assert r["allowed"] is True, r
    t, d = example_configs(QWEN)
    cr = with_spec(example_cr(QWEN), **{"engine.extraArgs": ["--served-model-name", "$(HF_TOKEN)"],
                                        "target.tokenSecretRef": {"name": "hub-token"}})
    r = render(SpeculativeDeployment.model_validate(cr), t, d)
    c = r.by_kind("Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: "the-secret" for e in c["env"]}
    assert [expand_kubelet_vars(a, env) for a in c["args"]][-2:] == ["--served-model-name", "$(HF_TOKEN)"]


def test_inputs_that_once_left_no_status_get_an_answer(server, client):
    """A config nested 5000 deep and a MoE field of the wrong type with tuning on: the webhook answers (no 500,
    no hang), naming the problem; the reconciler's answer for both: tests/controller/test_status_fuzz.py
    (test_the_issue_inputs_end_with_a_clear_status) and e2e/test_e2e_attacks.py."""
    server.resolver.add(configmap("deep-drafter", "[" * 5000 + "]" * 5000))
    r = review(client, **{"drafter.configFrom": {"configMapKeyRef": {"name": "deep-drafter"}}})
    text = " ".join(r.get("warnings") or []) + (r.get("status") or {}).get("message", "")
    assert "deep-drafter" in text and "nesting depth 5000 exceeds" in text, r
    kt, kd = example_configs(KIMI)
    kt["text_config"]["n_shared_experts"] = "x"
    server.resolver.add(configmap("kimi-bad-t", kt))
    server.resolver.add(configmap("kimi-d", kd))
    cr = with_spec(example_cr(KIMI), **{"target.configFrom": {"configMapKeyRef": {"name": "kimi-bad-t"}},
                                       "drafter.configFrom": {"configMapKeyRef": {"name": "kimi-d"}},
                                       "tuning": {"enabled": True}})
    r = client.review(review_request(cr))
    assert isinstance(r["allowed"], bool) and (r["allowed"] or r["status"]["code"] in (403, 422)), r
