"""Issue 12's attacks through the operator (real `kopf run`, real kubectl) on the API server: each CR is
refused with a condition naming the field, and no workload is created for it. A CR that predates a policy
change (the webhook never saw it) meets the same rules at reconcile. The same attacks through the webhook
over HTTPS: tests/admission/test_admission_attacks.py."""

from __future__ import annotations

import pytest

from e2e_support import KIMI, QWEN, apply, child_names, configmap, example_cr, example_doc, exists, get, wait_for

ATTACKS = [
    ("image", {"engine": {"image": "docker.io/attacker/anything:latest"}}, "Progressing", "PolicyRefused",
     "spec.engine.image"),
    ("sa", {"pod": {"serviceAccountName": "namespace-admin"}}, "Progressing", "PolicyRefused",
     "spec.pod.serviceAccountName"),
    ("secret", {"target": {"tokenSecretRef": {"name": "database-credentials", "key": "password"}}}, "Progressing",
     "PolicyRefused", "spec.target.tokenSecretRef.name"),
    ("owned-n", {"engine": {"extraArgs": ["-n", "4"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("unknown", {"engine": {"extraArgs": ["--no-such-flag"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("overrides", {"engine": {"extraArgs": ["--hf-overrides", '{"num_hidden_layers": 2}']}}, "Progressing",
     "InvalidSpec", "spec.engine.extraArgs[0]"),
    ("owned-r", {"engine": {"extraArgs": ["-r", "3"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("no-trust", {"engine": {"extraArgs": ["--no-trust-remote-code"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("not-vllm-033", {"engine": {"extraArgs": ["--num-speculative-tokens", "3"]}}, "Progressing",
     "InvalidSpec", "spec.engine.extraArgs[0]"),
    ("sglang-flag", {"engine": {"extraArgs": ["--enable-metrics"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("wrong-case", {"engine": {"extraArgs": ["--PORT", "1"]}}, "Progressing", "InvalidSpec",
     "spec.engine.extraArgs[0]"),
    ("nccl-init", {"engine": {"name": "sglang", "version": "0.5.23", "extraArgs": ["--nccl-init-addr", "x:1"]}},
     "Progressing", "InvalidSpec", "spec.engine.extraArgs[0]"),
    ("json-override", {"engine": {"name": "sglang", "version": "0.5.23", "extraArgs": ["--json-model-override-args", "{}"]}},
     "Progressing", "InvalidSpec", "spec.engine.extraArgs[0]"),
    # issue 24: code in the engine pod, and scheduling onto nodes and priorities tenants must not have
    ("trust-code", {"target": {"trustRemoteCode": True}}, "Progressing", "PolicyRefused", "spec.target.trustRemoteCode"),
    ("logits-proc", {"engine": {"extraArgs": ["--logits-processors", "evil.Proc"]}}, "Progressing", "PolicyRefused",
     "spec.engine.extraArgs[0]"),
    ("tolerate-all", {"pod": {"tolerations": [{"operator": "Exists"}]}}, "Progressing", "PolicyRefused",
     "spec.pod.tolerations[0]"),
    ("system-prio", {"pod": {"priorityClassName": "system-node-critical"}}, "Progressing", "PolicyRefused",
     "spec.pod.priorityClassName"),
    ("control-plane", {"pod": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}}, "Progressing",
     "PolicyRefused", "spec.pod.nodeSelector"),
]


@pytest.mark.parametrize("tag, spec, ctype, reason, path", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_refused_by_the_reconciler(cluster, tag, spec, ctype, reason, path):
    c = cluster
    name = f"attack-{tag}"
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    for key, value in spec.items():
        cr["spec"][key] = {**cr["spec"].get(key, {}), **value}
    apply(c, configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", example_doc(QWEN, "drafter")), cr)
    cond = c.wait_condition(name, ctype, "False", reason)
    assert path in cond["message"], cond["message"]
    got = get(c, "specdeploy", name)
    assert cond["observedGeneration"] == got["metadata"]["generation"]
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname), f"{kind}/{cname} exists for a refused CR"


def test_conflicting_duplicate_refused_by_the_reconciler(cluster):
    """The drafter carries a second copy of the layer ids that vLLM reads instead of the one the check read."""
    c = cluster
    name = "attack-dup"
    drafter = example_doc(QWEN, "drafter")
    drafter["eagle_aux_hidden_state_layer_ids"] = [1, 16, 31, 46, 61]
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    apply(c, configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", drafter), cr)
    cond = c.wait_condition(name, "DrafterCompatible", "False", "EngineReadsOtherCopy")
    assert "$.eagle_aux_hidden_state_layer_ids" in cond["message"], cond["message"]
    for kind, cname in child_names(name).items():
        assert not exists(c, kind, cname), f"{kind}/{cname} exists for a refused CR"


def test_secret_reference_in_args_reaches_the_pod_escaped(cluster):
    """extraArgs ["--served-model-name", "$(HF_TOKEN)"] with the token Secret in the pod's env: the operator
    writes `$$(HF_TOKEN)`, which the kubelet turns into the literal `$(HF_TOKEN)`, never the Secret's value."""
    from specdeploy.core.render import expand_kubelet_vars

    c = cluster
    name = "attack-argv"
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    cr["spec"]["engine"]["extraArgs"] = ["--served-model-name", "$(HF_TOKEN)"]
    cr["spec"]["target"]["tokenSecretRef"] = {"name": "hub-token"}  # allowed by the suite's policy
    apply(c, configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", example_doc(QWEN, "drafter")), cr)
    c.wait_condition(name, "DrafterCompatible", "True")
    wait_for(lambda: exists(c, "deployment", name), 60, f"deployment/{name}")
    dep = get(c, "deployment", name)
    [engine] = [x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "engine"]
    assert engine["args"][-2:] == ["--served-model-name", "$$(HF_TOKEN)"]
    env = {e["name"]: "the-secret-value" for e in engine["env"]}
    assert "HF_TOKEN" in env
    assert [expand_kubelet_vars(a, env) for a in engine["args"]][-1] == "$(HF_TOKEN)"
    # and the pod runs hardened: no token of the ServiceAccount, restricted security context
    spec = dep["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsNonRoot"] is True


def test_inputs_that_once_left_no_status_end_with_one(cluster):
    """A ConfigMap holding JSON nested 5000 deep, and a target whose n_shared_experts is "x" with tuning on:
    both used to leave the CR without status, retried forever."""
    c = cluster
    name = "attack-deep"
    cr = example_cr(QWEN, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    apply(c, configmap(f"{name}-t", example_doc(QWEN, "target")), configmap(f"{name}-d", "[" * 5000 + "]" * 5000), cr)
    cond = c.wait_condition(name, "DrafterCompatible", "Unknown", "ConfigInvalid")  # and Ready=False
    assert "nesting depth 5000 exceeds the limit of 64" in cond["message"], cond["message"]
    assert cond["observedGeneration"] == get(c, "specdeploy", name)["metadata"]["generation"]

    name = "attack-moe"
    target = example_doc(KIMI, "target")
    target["text_config"]["n_shared_experts"] = "x"
    cr = example_cr(KIMI, name, target_cm=f"{name}-t", drafter_cm=f"{name}-d")
    cr["spec"]["tuning"] = {"enabled": True}
    apply(c, configmap(f"{name}-t", target), configmap(f"{name}-d", example_doc(KIMI, "drafter")), cr)
    cond = c.wait_condition(name, "DrafterCompatible", "True")
    assert "TuningSkipped" in cond["message"], cond["message"]
