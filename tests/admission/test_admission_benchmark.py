"""Admission of SpeculativeBenchmark: the validating webhook refuses a bad spec in the operator's words;
the mutating webhook admits benchmarks unchanged; the chart routes benchmarks to the webhooks."""

from __future__ import annotations

import copy

import yaml

import pytest

from admission_helpers import EXAMPLES, review_request
from specdeploy.controller import admission
from specdeploy.core.policy import TenancyPolicy

BENCH = yaml.safe_load((EXAMPLES / "dev" / "tiny-benchmark.yaml").read_text())
BENCH["metadata"]["namespace"] = "default"
DEP = yaml.safe_load((EXAMPLES / "dev" / "tiny-cpu.yaml").read_text())
DEP["metadata"]["namespace"] = "default"
GVK = {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeBenchmark"}
GVR = {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativebenchmarks"}


def stored(*deps: dict):
    """A deployment lookup over stored SpeculativeDeployment bodies (the operator's watch cache)."""
    by = {(d["metadata"].get("namespace") or "default", d["metadata"]["name"]): d for d in deps}
    return lambda ns, name: copy.deepcopy(by.get((ns, name)))


def review(body, *, deployment_lookup=stored(DEP), **kw) -> dict:
    return admission.review(body, deployment_lookup=deployment_lookup, **kw)


def bench_review(obj, **kw) -> dict:
    body = review_request(obj, **kw)
    body["request"]["kind"], body["request"]["resource"] = dict(GVK), dict(GVR)
    return body


def test_a_valid_benchmark_is_admitted_and_never_mutated():
    assert review(bench_review(BENCH))["response"]["allowed"] is True
    resp = review(bench_review(BENCH), webhook="mutate")["response"]
    assert resp["allowed"] is True and "patch" not in resp


def test_a_bad_benchmark_is_refused_naming_the_fields():
    bad = copy.deepcopy(BENCH)
    bad["spec"]["matrix"]["draftWindow"] = ["on"]
    resp = review(bench_review(bad))["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    msg = resp["status"]["message"]
    assert msg.startswith("SpeculativeBenchmark default/tiny-sweep is invalid")
    assert "spec.matrix.draftWindow[0]: must be a positive number of tokens or 'off'" in msg
    assert resp["status"]["details"]["kind"] == "SpeculativeBenchmark"
    dup = copy.deepcopy(BENCH)
    dup["spec"]["matrix"]["concurrency"] = [1, 1]
    resp = review(bench_review(dup))["response"]
    assert resp["allowed"] is False and "concurrency lists a value twice: list each value once" in resp["status"]["message"]


def test_status_updates_deletes_and_unchanged_specs_pass():
    bad = copy.deepcopy(BENCH)
    bad["spec"]["matrix"]["concurrency"] = [0]
    assert review(bench_review(bad, sub_resource="status", operation="UPDATE", old=bad))["response"]["allowed"] is True
    assert review(bench_review(None, operation="DELETE", old=bad))["response"]["allowed"] is True
    resp = review(bench_review(bad, operation="UPDATE", old=copy.deepcopy(bad)))["response"]
    assert resp["allowed"] is True and "spec unchanged by this update" in resp["warnings"][0]


def test_other_kinds_are_still_refused_as_misrouted():
    body = bench_review(BENCH)
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    resp = review(body)["response"]
    assert resp["allowed"] is False and "SpeculativeBenchmark only" in resp["status"]["message"]


# ----------------------------------------------------------------- issue 37: the tenancy policy on the benchmark path

POLICY = TenancyPolicy(token_secrets=("hf-token",), pvcs=("models",))


def with_method(drafter: dict, method: str = "eagle3") -> dict:
    b = copy.deepcopy(BENCH)
    b["spec"]["matrix"]["methods"] = [{"method": "ngram"}, {"method": method, "drafter": drafter}]
    return b


def codes_at(resp: dict) -> list[tuple[str, str]]:
    """(path, code) of each refusal, from the message lines '- PATH: MESSAGE [CODE]'."""
    out = []
    for line in resp["status"]["message"].splitlines()[1:]:
        path, _, rest = line[2:].partition(": ")
        out.append((path, rest.rsplit("[", 1)[1].rstrip("]")))
    return out


METHOD_ATTACKS = [
    ("unlisted-secret", {"model": "z/d", "tokenSecretRef": {"name": "prod-db", "key": "token"}},
     ("spec.matrix.methods[1].drafter.tokenSecretRef.name", "PolicyTokenSecretNotAllowed")),
    ("unlisted-key", {"model": "z/d", "tokenSecretRef": {"name": "hf-token", "key": "aws-secret"}},
     ("spec.matrix.methods[1].drafter.tokenSecretRef.key", "PolicyTokenSecretKeyNotAllowed")),
    ("unlisted-claim", {"model": "d", "pvc": {"claimName": "other-team"}},
     ("spec.matrix.methods[1].drafter.pvc.claimName", "PolicyClaimNotAllowed")),
]


@pytest.mark.parametrize("name,drafter,want", METHOD_ATTACKS, ids=[a[0] for a in METHOD_ATTACKS])
def test_a_method_drafter_the_policy_refuses_is_refused_on_create_and_update(name, drafter, want):
    bad = with_method(drafter)
    resp = review(bench_review(bad), policy=POLICY)["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422, resp
    assert codes_at(resp) == [want]
    # UPDATE that changes the spec to it (the CRD's CEL keeps the spec immutable; the webhook does not rely on it)
    resp = review(bench_review(bad, operation="UPDATE", old=copy.deepcopy(BENCH)), policy=POLICY)["response"]
    assert resp["allowed"] is False and codes_at(resp) == [want]
    # a metadata-only UPDATE is never blocked: the refusal is a warning, the controller refuses at reconcile
    resp = review(bench_review(bad, operation="UPDATE", old=copy.deepcopy(bad)), policy=POLICY)["response"]
    assert resp["allowed"] is True and resp["warnings"][0].startswith(want[0])


def test_listed_method_drafters_are_admitted_and_a_labelled_claim_is_left_to_the_controller():
    ok = with_method({"model": "z/d", "tokenSecretRef": {"name": "hf-token", "key": "token"}})
    assert review(bench_review(ok), policy=POLICY)["response"]["allowed"] is True
    claim = with_method({"model": "d", "pvc": {"claimName": "models"}})
    assert review(bench_review(claim), policy=POLICY)["response"]["allowed"] is True
    # a label rule cannot be decided here (no claim is read for a review): the controller reads the labels
    labelled = with_method({"model": "d", "pvc": {"claimName": "team-models"}})
    assert review(bench_review(labelled), policy=TenancyPolicy(pvc_label=("specdeploy.io/models", "true")))[
        "response"]["allowed"] is True
    assert review(bench_review(labelled), policy=TenancyPolicy())["response"]["allowed"] is False


def _dep(change) -> dict:
    d = copy.deepcopy(DEP)
    change(d["spec"])
    return d


DEPLOYMENT_ATTACKS = [
    ("foreign-image", lambda s: s["engine"].update(image="evil.io/miner:1"), "spec.engine.image",
     "PolicyImageNotAllowed"),
    ("service-account", lambda s: s["pod"].update(serviceAccountName="cluster-admin-sa"),
     "spec.pod.serviceAccountName", "PolicyServiceAccountNotAllowed"),
    ("toleration", lambda s: s["pod"].update(tolerations=[{"operator": "Exists"}]), "spec.pod.tolerations[0].key",
     "PolicyTolerationNotAllowed"),
    ("priority-class", lambda s: s["pod"].update(priorityClassName="system-node-critical"),
     "spec.pod.priorityClassName", "PolicyPriorityClassNotAllowed"),
    ("trust-remote-code", lambda s: s["target"].update(trustRemoteCode=True), "spec.target.trustRemoteCode",
     "PolicyTrustRemoteCodeNotAllowed"),
    ("code-flag", lambda s: s["engine"].update(extraArgs=["--enforce-eager", "--worker-cls", "evil.Worker"]),
     "spec.engine.extraArgs[1]", "PolicyCodeArgNotAllowed"),
    ("token-secret", lambda s: s["drafter"].update(tokenSecretRef={"name": "prod-db", "key": "token"}),
     "spec.drafter.tokenSecretRef.name", "PolicyTokenSecretNotAllowed"),
]


@pytest.mark.parametrize("name,change,path,code", DEPLOYMENT_ATTACKS, ids=[a[0] for a in DEPLOYMENT_ATTACKS])
def test_a_benchmark_of_a_deployment_the_policy_refuses_is_refused_with_its_findings(name, change, path, code):
    """Hole 2: the stored deployment (the reconciler refuses it) is what a benchmark's variants would run."""
    lookup = stored(_dep(change))
    resp = review(bench_review(BENCH), deployment_lookup=lookup, policy=POLICY)["response"]
    assert resp["allowed"] is False, resp
    assert codes_at(resp) == [(f"SpeculativeDeployment tiny {path}", code)]
    resp = review(bench_review(BENCH, operation="UPDATE", old=copy.deepcopy(BENCH)), deployment_lookup=lookup,
                  policy=POLICY)["response"]
    assert resp["allowed"] is True and f"SpeculativeDeployment tiny {path}" in resp["warnings"][0]


def test_a_benchmark_of_a_missing_deployment_waits_for_it():
    """Applied together with its deployment (kubectl apply -k, a GitOps sync) or before it: admitted with a warning;
    the benchmark controller waits (Pending, DeploymentNotFound) and applies the policy when the deployment exists."""
    resp = review(bench_review(BENCH), deployment_lookup=stored(), policy=POLICY)["response"]
    assert resp["allowed"] is True and "status" not in resp, resp
    assert resp["warnings"][0].startswith("spec.deploymentRef.name: SpeculativeDeployment tiny does not exist in "
                                          "namespace default yet"), resp["warnings"]


def test_a_benchmark_of_an_invalid_or_unreadable_deployment_is_refused():
    bad = _dep(lambda s: s["engine"].update(name="tgi"))
    resp = review(bench_review(BENCH), deployment_lookup=stored(bad))["response"]
    assert resp["allowed"] is False and codes_at(resp) == [("spec.deploymentRef.name", "DeploymentInvalid")]
    assert "spec.engine.name" in resp["status"]["message"]

    def broken(ns, name):
        raise admission.ConfigsUnavailable("the operator does not watch this namespace; nothing was read")

    resp = review(bench_review(BENCH), deployment_lookup=broken)["response"]
    assert resp["allowed"] is False and codes_at(resp) == [("spec.deploymentRef.name", "DeploymentUnavailable")]
    assert "does not watch this namespace" in resp["status"]["message"]
    # no lookup at all: nothing can vouch for the deployment
    resp = admission.review(bench_review(BENCH))["response"]
    assert resp["allowed"] is False and codes_at(resp) == [("spec.deploymentRef.name", "DeploymentUnavailable")]


def test_the_deployment_is_looked_up_in_the_benchmarks_namespace_as_stored():
    seen = []

    def lookup(ns, name):
        seen.append((ns, name))
        return copy.deepcopy(DEP) if ns == "team-a" else None

    body = bench_review(BENCH, namespace="team-a")
    assert review(body, deployment_lookup=lookup)["response"]["allowed"] is True
    assert seen == [("team-a", "tiny")]


def test_the_https_webhook_applies_the_policy_to_benchmarks():
    """Over HTTPS, as the API server calls it: the operator's lookup (OperatorConfigs) serves the stored deployment
    from the controller's watch cache."""
    from admission_helpers import FakeResolver, ServerThread
    from specdeploy.controller.webhooks import OperatorConfigs

    refused = _dep(lambda s: s["engine"].update(image="evil.io/miner:1"))
    refused["metadata"]["name"] = "refused"
    deployments = {("default", "tiny"): copy.deepcopy(DEP), ("default", "refused"): refused}
    srv = ServerThread(lookup=OperatorConfigs(None, FakeResolver(), deployments=deployments)).start()
    try:
        srv.server.policy = POLICY
        c = srv.client()
        assert c.review(bench_review(BENCH))["allowed"] is True
        resp = c.review(bench_review(with_method({"model": "z/d", "tokenSecretRef": {"name": "prod-db"}})))
        assert resp["allowed"] is False and codes_at(resp) == [
            ("spec.matrix.methods[1].drafter.tokenSecretRef.name", "PolicyTokenSecretNotAllowed")]
        other = copy.deepcopy(BENCH)
        other["spec"]["deploymentRef"]["name"] = "refused"
        resp = c.review(bench_review(other))
        assert resp["allowed"] is False and codes_at(resp) == [
            ("SpeculativeDeployment refused spec.engine.image", "PolicyImageNotAllowed")]
        other["spec"]["deploymentRef"]["name"] = "absent"
        resp = c.review(bench_review(other))
        assert resp["allowed"] is True and "does not exist in namespace default yet" in resp["warnings"][0], resp
        c.close()
    finally:
        srv.stop()


# ----------------------------------------------------------------- issue 37: callers without a verified certificate


def test_a_caller_without_a_verified_certificate_learns_nothing_of_the_stored_deployment():
    """The webhook reads no stored SpeculativeDeployment for a caller the API server's client certificate does not
    vouch for (controller/webhooks.unverified_lookup): the answer is the same whether the deployment exists, is
    refused by the policy or is missing, and says the policy is applied when the benchmark runs; the verified caller
    (the deployment lookup) gets the refusal."""
    from specdeploy.controller.webhooks import unverified_lookup

    refused = copy.deepcopy(DEP)
    refused["spec"].setdefault("engine", {})["image"] = "evil.io/miner:1"
    # the webhook server hands an unverified caller's review unverified_lookup (WebhookServer._handle): no deployment
    # lookup of the operator's watch cache is reachable from it
    resp = admission.review(bench_review(BENCH), configs_lookup=unverified_lookup, policy=POLICY)["response"]
    assert resp["allowed"] is True and "status" not in resp
    assert resp["warnings"] == ["spec.deploymentRef.name: the tenancy policy is applied when the benchmark runs "
                                "(the caller presented no verified API-server client certificate; nothing was read)"[:256]]
    assert review(bench_review(BENCH), deployment_lookup=stored(refused), policy=POLICY)["response"]["allowed"] is False
