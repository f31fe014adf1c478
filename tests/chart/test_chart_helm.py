"""The chart with the real Helm 3 and Helm 4: lint --strict, template, the schema, what each object carries."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from chart_helpers import (CHART, HELMS, NAMESPACE, RELEASE, ROOT, VALUE_SETS, arg_value, container, find, one,
                           render, render_text, run_helm, values_file, watched_namespaces)
from specdeploy.api.crd import build_crd

HELM_NAMES = sorted(HELMS)


@pytest.mark.parametrize("which", HELM_NAMES)
def test_helm_versions(which):
    out = run_helm(which, "version", "--short").stdout
    assert out.startswith("v3.17." if which == "helm3" else "v4."), out


@pytest.mark.parametrize("which", HELM_NAMES)
@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_lint_strict(which, values):
    args = ["lint", "--strict", str(CHART)]
    if VALUE_SETS[values]:
        args += ["-f", values_file(VALUE_SETS[values])]
    p = run_helm(which, *args)
    assert "0 chart(s) failed" in p.stdout
    assert "[WARNING]" not in p.stdout and "[ERROR]" not in p.stdout, p.stdout


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm3_and_helm4_render_the_same_objects(values):
    # the order of kinds Helm does not know (ServiceMonitor, Certificate, ...) differs between the two
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    assert sorted(render(VALUE_SETS[values], "helm3"), key=key) == sorted(render(VALUE_SETS[values], "helm4"), key=key)


@pytest.mark.parametrize("which", HELM_NAMES)
@pytest.mark.parametrize("bad, complaint", [
    ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ({"watch": {"namespace": ["a"]}}, "namespace"),  # typo of namespaces: unknown keys are rejected
    ({"watch": {"namespaces": ["Not_A_Namespace"]}}, "namespaces"),
    ({"resyncSeconds": "60"}, "resyncSeconds"),
    ({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    ({"image": {"digest": "latest"}}, "digest"),
])
def test_schema_rejects_bad_values(which, bad, complaint):
    p = run_helm(which, "template", RELEASE, str(CHART), "-f", values_file(bad), check=False)
    assert p.returncode != 0 and complaint in p.stderr, p.stderr


def test_values_yaml_defaults_match_the_schema():
    """values.yaml and values.schema.json (the source of docs/reference/helm-values.md) agree on every default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(value: dict, node: dict, path: str) -> None:
        assert set(value) <= set(node["properties"]), f"{path or 'top'}: keys missing from the schema"
        for k in node["properties"]:
            if k != "global":
                assert k in value, f"{path}{k} is in the schema but not in values.yaml"
        for k, v in value.items():
            sub = node["properties"][k]
            assert sub.get("description"), f"{path}{k} has no description in values.schema.json"
            if "properties" in sub:
                walk(v, sub, f"{path}{k}.")
            else:
                assert sub.get("default") == v, f"{path}{k}: values.yaml {v!r} != schema default {sub.get('default')!r}"

    walk(values, schema, "")


def test_default_objects():
    objs = render()
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs)
    assert kinds == sorted([
        ("ServiceAccount", "specdeploy"), ("ServiceAccount", "specdeploy-engine"),
        ("CustomResourceDefinition", "speculativedeployments.specdeploy.io"),
        ("CustomResourceDefinition", "speculativebenchmarks.specdeploy.io"),
        ("ClusterRole", "specdeploy-cluster"), ("ClusterRoleBinding", "specdeploy-cluster"),
        ("Role", "specdeploy-workloads"), ("RoleBinding", "specdeploy-workloads"),
        ("Role", "specdeploy-webhook-tls"), ("RoleBinding", "specdeploy-webhook-tls"),
        ("Role", "specdeploy-leader-election"), ("RoleBinding", "specdeploy-leader-election"),
        ("PodDisruptionBudget", "specdeploy"),
        ("Service", "specdeploy-webhook"), ("Service", "specdeploy-metrics"), ("Deployment", "specdeploy"),
        ("ValidatingWebhookConfiguration", "specdeploy"), ("MutatingWebhookConfiguration", "specdeploy"),
        # issue 37: who may reach the operator pods, and the reader of the API server's client CA (kube-system)
        ("NetworkPolicy", "specdeploy-operator"), ("RoleBinding", "specdeploy-client-ca-reader"),
    ])
    for o in objs:
        if (o["kind"], o["metadata"]["name"]) == ("RoleBinding", "specdeploy-client-ca-reader"):
            assert o["metadata"]["namespace"] == "kube-system"
        elif o["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                               "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]


def test_crd_template_is_the_generated_crd():
    from specdeploy.api.crd import build_bench_crd

    for name, build in (("speculativedeployments.specdeploy.io", build_crd),
                        ("speculativebenchmarks.specdeploy.io", build_bench_crd)):
        crd = one(render(), "CustomResourceDefinition", name)
        assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
        assert crd == build()
        crd = one(render({"crds": {"keep": False}}), "CustomResourceDefinition", name)
        assert "annotations" not in crd["metadata"]
    assert not find(render({"crds": {"install": False}}), "CustomResourceDefinition")


def test_deployment_pod_security_and_probes():
    dep = one(render(), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    psc = spec["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0 and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(render())
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook": 9443}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    # ready only when the webhook serves and the caches synced (controller/health.py), leader or not
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} in spec["volumes"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HF_HOME"]["value"].startswith("/tmp/")
    assert "HF_ENDPOINT" not in env
    assert c["image"] == "ghcr.io/specdeploy/operator:0.1.0"


def test_operator_args_default():
    args = container(render())["args"]
    # the release namespace only, by default
    assert args[:2] == ["operator", "run"] and "--all-namespaces" not in args
    assert arg_value(args, "--namespace") == [NAMESPACE]
    assert arg_value(args, "--metrics-port") == ["8080"]
    assert arg_value(args, "--health-port") == ["8081"] and "--liveness" not in args
    assert "--leader-elect" in args and arg_value(args, "--leader-election-namespace") == [NAMESPACE]
    assert arg_value(args, "--leader-election-id") == ["specdeploy-leader"]
    assert (arg_value(args, "--lease-duration"), arg_value(args, "--renew-deadline"),
            arg_value(args, "--retry-period")) == (["15"], ["10"], ["2"])
    assert arg_value(args, "--resync-seconds") == ["60"]
    assert arg_value(args, "--webhook-port") == ["9443"] and "--webhook" in args
    # a pod's every interface (outside a cluster the operator defaults to loopback)
    assert arg_value(args, "--metrics-bind-address") == ["0.0.0.0"] and arg_value(args, "--bind-address") == ["0.0.0.0"]
    assert arg_value(args, "--webhook-service") == [f"specdeploy-webhook.{NAMESPACE}"]
    assert arg_value(args, "--webhook-secret") == ["specdeploy-webhook-tls"]
    assert arg_value(args, "--webhook-configuration") == ["specdeploy"]
    assert "--webhook-cert-dir" not in args


def test_operator_args_namespaced():
    objs = render(VALUE_SETS["namespaced"])
    c = container(objs)
    args = c["args"]
    assert arg_value(args, "--namespace") == ["team-a", "team-b"] and "--all-namespaces" not in args
    assert arg_value(args, "--resync-seconds") == ["120"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HF_ENDPOINT"] == "https://hf-mirror.example.com"
    assert c["image"] == "ghcr.io/specdeploy/operator:0.1.0-rc1" and c["imagePullPolicy"] == "Always"
    spec = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr"}] and spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"} and spec["tolerations"][0]["key"] == "dedicated"
    # the webhooks only see the watched namespaces
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        (wh,) = one(objs, kind)["webhooks"]
        assert wh["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]}


def test_webhook_service_and_configurations():
    objs = render()
    svc = one(objs, "Service", "specdeploy-webhook")
    assert svc["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == one(objs, "Deployment")["spec"]["selector"]["matchLabels"]
    for kind, name, path in (("ValidatingWebhookConfiguration", "validate.specdeploy.io", "/validate"),
                             ("MutatingWebhookConfiguration", "mutate.specdeploy.io", "/mutate")):
        cfg = one(objs, kind, "specdeploy")
        assert "annotations" not in cfg["metadata"]  # the operator writes caBundle
        (wh,) = cfg["webhooks"]
        assert wh["name"] == name
        assert wh["clientConfig"] == {"service": {"name": "specdeploy-webhook", "namespace": NAMESPACE, "path": path,
                                                  "port": 443}}
        assert wh["admissionReviewVersions"] == ["v1"] and wh["sideEffects"] == "None"
        assert wh["failurePolicy"] == "Fail" and wh["timeoutSeconds"] == 5
        assert wh["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NAMESPACE]}]}
        assert "objectSelector" not in wh
        assert wh["rules"] == [{"apiGroups": ["specdeploy.io"], "apiVersions": ["v1alpha1"],
                                "operations": ["CREATE", "UPDATE"], "resources": ["speculativedeployments", "speculativebenchmarks"],
                                "scope": "Namespaced"}]


def test_cert_manager_variant():
    objs = render(VALUE_SETS["cert-manager"])
    issuer = one(objs, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    cert = one(objs, "Certificate")
    assert cert["spec"]["secretName"] == "specdeploy-webhook-tls"
    assert cert["spec"]["dnsNames"] == [f"specdeploy-webhook.{NAMESPACE}.svc", f"specdeploy-webhook.{NAMESPACE}.svc.cluster.local"]
    assert cert["spec"]["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer", "group": "cert-manager.io"}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        cfg = one(objs, kind)
        assert cfg["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{cert['metadata']['name']}"}
        (wh,) = cfg["webhooks"]
        assert wh["failurePolicy"] == "Ignore" and wh["timeoutSeconds"] == 10
        assert wh["objectSelector"] == {"matchLabels": {"specdeploy.io/admission": "on"}}
    c = container(objs)
    assert arg_value(c["args"], "--webhook-cert-dir") == ["/certs"]
    assert "--webhook-secret" not in c["args"] and "--webhook-configuration" not in c["args"]
    assert {"name": "certs", "mountPath": "/certs", "readOnly": True} in c["volumeMounts"]
    vols = {v["name"]: v for v in one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["certs"]["secret"]["secretName"] == "specdeploy-webhook-tls"
    assert c["image"] == "ghcr.io/specdeploy/operator@sha256:" + "0" * 64
    # no Secret or webhook-configuration access for the operator: cert-manager does both (the Lease only)
    assert not find(objs, "Role", "specdeploy-webhook-tls")
    assert sorted(o["metadata"]["name"] for o in find(objs, "Role")) == ["specdeploy-leader-election",
                                                                          "specdeploy-workloads"]
    sm = one(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    metrics = one(objs, "Service", "specdeploy-metrics")
    assert all(metrics["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert not all(one(objs, "Service", "specdeploy-webhook")["metadata"]["labels"].get(k) == v
                   for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s", "honorLabels": True}]


def test_cert_manager_with_an_issuer():
    objs = render(VALUE_SETS["cert-manager-issuer"])
    assert not find(objs, "Issuer")
    assert one(objs, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    (wh,) = one(objs, "ValidatingWebhookConfiguration")["webhooks"]
    assert wh["namespaceSelector"] == {"matchLabels": {"specdeploy.io/enabled": "true"}}


def test_minimal_variant():
    objs = render(VALUE_SETS["minimal"])
    assert not find(objs, "ServiceAccount", "existing-sa") and not find(objs, "CustomResourceDefinition")
    assert not find(objs, "ValidatingWebhookConfiguration") and not find(objs, "MutatingWebhookConfiguration")
    assert not find(objs, "Service", "sd-webhook") and not find(objs, "Role", "sd-webhook-tls")
    dep = one(objs, "Deployment", "sd")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "existing-sa"
    c = container(objs)
    # no webhook server: no --webhook (it is off unless asked for); the probes still listen on every interface
    assert not [a for a in c["args"] if a.startswith("--webhook")]
    assert arg_value(c["args"], "--metrics-bind-address") == arg_value(c["args"], "--bind-address") == ["0.0.0.0"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9090, "health": 9091}
    assert arg_value(c["args"], "--health-port") == ["9091"]
    # one replica without leader election: no Lease, no PDB, and never two operators during a rollout
    assert "--leader-elect" not in c["args"] and not find(objs, "PodDisruptionBudget") and not find(objs, "Lease")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    for b in find(objs, "ClusterRoleBinding"):
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "existing-sa", "namespace": NAMESPACE}]


def test_release_name_shapes_the_names():
    objs = render(release="prod")
    assert one(objs, "Deployment")["metadata"]["name"] == "prod-specdeploy"
    args = container(objs)["args"]
    assert arg_value(args, "--webhook-configuration") == ["prod-specdeploy"]
    assert one(objs, "ValidatingWebhookConfiguration")["metadata"]["name"] == "prod-specdeploy"


def _without_verbatim_files(obj: dict) -> dict:
    """The object less what the chart embeds verbatim from files/: the generated rule groups (their
    annotations hold Prometheus' own `{{ $labels.x }}` templates) and the dashboards' JSON (Grafana's
    `{{namespace}}` legends). tests/chart/test_chart_observability.py compares those with their files."""
    if obj["kind"] == "PrometheusRule":
        obj["spec"]["groups"] = [g for g in obj["spec"]["groups"] if g["name"] == "specdeploy.thresholds"]
    if obj["kind"] == "ConfigMap" and obj["metadata"].get("labels", {}).get("grafana_dashboard") == "1":
        obj.pop("data")
    return obj


def test_no_template_leaks():
    for name, values in VALUE_SETS.items():
        text = render_text(values)
        assert "<no value>" not in text, name
        for obj in render(values):
            leaked = json.dumps(_without_verbatim_files(obj))
            assert "{{" not in leaked, (name, obj["kind"], obj["metadata"]["name"])


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_notes_say_what_to_apply_next(values, tmp_path):
    """NOTES.txt, rendered by Helm 4's client-side dry run (no cluster needed)."""
    v = VALUE_SETS[values]
    p = run_helm("helm4", "install", RELEASE, str(CHART), "-n", NAMESPACE, "--dry-run=client",
                 "-f", values_file(v), env={"KUBECONFIG": str(tmp_path / "none")})
    notes = p.stdout.split("NOTES:", 1)[1]
    name = v.get("fullnameOverride") or RELEASE
    ns = (watched_namespaces(v) or ["default"])[0]
    assert f"kubectl -n {NAMESPACE} rollout status deployment/{name}" in notes
    assert f"kubectl apply -n {ns} -k examples/qwen3.6-27b-b300-vllm" in notes
    assert f"kubectl get specdeploy -n {ns} -w" in notes
    assert ("crds/specdeploy.io_speculativedeployments.yaml" in notes) == (not v.get("crds", {}).get("install", True))
    assert "<no value>" not in notes
    cluster_wide = v.get("rbac", {}).get("clusterWide", False)
    assert ("WARNING: rbac.clusterWide=true" in notes) == cluster_wide
    assert ("no cluster-wide write access" in notes) == (not cluster_wide)


def test_tenancy_policy_values_become_operator_flags():
    """The chart wires the tenancy policy (core/policy.py): every value to its operator flag."""
    args = container(render())["args"]
    assert arg_value(args, "--engine-service-account") == ["specdeploy-engine"]
    for flag in ("--allowed-image-prefix", "--allowed-service-account", "--allowed-token-secret", "--allowed-pvc",
                 "--pvc-label"):
        assert flag not in args  # the operator's defaults: the runtime images only, nothing else allowed
    v = {"hub": {"tokenSecrets": ["hf-token", "hf-gated"]},
         "policy": {"allowedImagePrefixes": ["registry.example.com/ml/"], "allowedServiceAccounts": ["reader"],
                    "allowedPVCs": ["models"], "pvcLabel": "specdeploy.io/models=true",
                    "allowedCodeArgs": ["--chat-template"], "allowedEgressArgs": ["--otlp-traces-endpoint"],
                    "engineServiceAccount": {"name": "engines"}}}
    args = container(render(v))["args"]
    assert arg_value(args, "--allowed-token-secret") == ["hf-token", "hf-gated"]
    assert arg_value(args, "--allowed-image-prefix") == ["registry.example.com/ml/"]
    assert arg_value(args, "--allowed-service-account") == ["reader"]
    assert arg_value(args, "--allowed-pvc") == ["models"]
    assert arg_value(args, "--pvc-label") == ["specdeploy.io/models=true"]
    assert arg_value(args, "--engine-service-account") == ["engines"]
    # the flags parse as the operator's own CLI parses them
    from specdeploy.cli import build_parser
    from specdeploy.cli.operator import _policy_args

    ns = build_parser().parse_args(args)
    pol = _policy_args(ns)
    assert pol.token_secrets == ("hf-token", "hf-gated") and pol.pvc_label == ("specdeploy.io/models", "true")
    assert pol.engine_service_account == "engines" and pol.image_prefixes == ("registry.example.com/ml/",)
    assert pol.code_args == ("--chat-template",) and pol.egress_args == ("--otlp-traces-endpoint",)
    assert _policy_args(build_parser().parse_args(container(render())["args"])).egress_args == ()


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_engine_service_account_in_each_watched_namespace_without_token(values):
    v = VALUE_SETS[values]
    objs = render(v)
    prefix = v.get("fullnameOverride") or "specdeploy"
    sas = find(objs, "ServiceAccount", f"{prefix}-engine")
    assert sorted(o["metadata"]["namespace"] for o in sas) == sorted(watched_namespaces(v))
    for sa in sas:
        assert sa["automountServiceAccountToken"] is False
    args = container(objs)["args"]
    assert arg_value(args, "--engine-service-account") == ([f"{prefix}-engine"] if sas else [])


def test_every_value_the_docs_set_exists():
    """`--set key=...` in README, docs/ and the chart's NOTES/README names a key of values.schema.json
    (a documented key that does not exist fails `helm install` with the schema error)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    pages = [ROOT / "README.md", ROOT / "charts" / "README.md", CHART / "templates" / "NOTES.txt",
             *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        for m in re.finditer(r"--set[ =]'?([A-Za-z][A-Za-z0-9_.]*)[={]", page.read_text()):
            if m.group(1) != "key":  # helm-values.md: "--set key=value", the syntax itself
                found.append((page.relative_to(ROOT), m.group(1)))
    assert len(found) >= 15
    missing = []
    for page, key in found:
        node = schema
        for part in key.split("."):
            props = node.get("properties") or {}
            if part in props:
                node = props[part]
            elif isinstance(node.get("additionalProperties"), dict):  # a free map, e.g. serviceMonitor.labels.X
                node = node["additionalProperties"]
            else:
                missing.append(f"{page}: {key}")
                break
    assert not missing, missing


def test_api_key_secret_keys_become_the_operator_flag():
    """policy.allowedApiKeySecretKeys -> --allowed-api-key-secret-key (issue 37: spec.engine.apiKey's key rule);
    an empty list allows no key (not the operator's default)."""
    from specdeploy.cli import build_parser
    from specdeploy.cli.operator import _policy_args

    def pol(v=None):
        return _policy_args(build_parser().parse_args(container(render(v))["args"]))

    assert pol().api_key_secret_keys == ("token",)
    assert pol({"policy": {"allowedApiKeySecretKeys": ["api-key", "key"]}}).api_key_secret_keys == ("api-key", "key")
    assert pol({"policy": {"allowedApiKeySecretKeys": []}}).api_key_secret_keys == ()
