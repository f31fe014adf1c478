"""Issue 12's attacks through the operator (real `kopf run`, real kubectl) on the API server: each CR is
refused with a condition naming the field, and no workload is created for it. A CR that predates a policy
change (the webhook never saw it) meets the same rules at reconcile. The same attacks through the webhook
over HTTPS: tests/admission/test_admission_attacks.py."""

from __future__ import annotations

import pytest

from e2e_support import (QWEN, apply, child_names, cluster, configmap, diagnostics_on_failure,  # noqa: F401
                         example_cr, example_doc, exists, get)

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
