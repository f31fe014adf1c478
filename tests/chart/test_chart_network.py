"""Issues 24 and 37: who may reach what the chart runs (docs/concepts/security.md, "Webhook callers", "Operator
metrics" and "Engine network").

The webhook's client certificate verification and its NetworkPolicy, from values to operator flags and objects;
the flags parse as the operator's own CLI parses them."""

from __future__ import annotations

import pytest

from chart_helpers import arg_value, container, find, one, render, run_helm, values_file, CHART

CA = {"webhook": {"clientAuth": {"caConfigMap": "apiserver-ca", "caKey": "front-proxy-ca.crt",
                                 "names": ["front-proxy-client", "kube-apiserver"]}}}
NETPOL = {"webhook": {"networkPolicy": {"enabled": True, "controlPlaneCIDRs": ["10.0.0.0/24"]}}}


def _parsed(args):
    from specdeploy.cli import build_parser

    return build_parser().parse_args(args)


def ingress_by_port(np: dict) -> dict[int, dict]:
    return {p["port"]: rule for rule in np["spec"]["ingress"] for p in rule["ports"]}


def test_by_default_the_cluster_ca_verifies_the_api_server_and_others_get_the_object_level_answer():
    """Issue 37: verification on by default, with the front-proxy CA the cluster publishes (read by the operator
    through the built-in reader Role, in kube-system only), callers without it answered from their object alone."""
    objs = render()
    args = container(objs)["args"]
    assert "--webhook-client-ca-from-cluster" in args and "--webhook-client-optional" in args
    assert "--webhook-client-ca" not in args and "--webhook-client-name" not in args
    ns = _parsed(args)
    assert ns.webhook_client_ca_from_cluster and ns.webhook_client_optional and not ns.webhook_client_ca
    (rb,) = [o for o in find(objs, "RoleBinding") if o["metadata"]["namespace"] == "kube-system"]
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "extension-apiserver-authentication-reader"}
    assert [s["name"] for s in rb["subjects"]] == [container(objs) and one(objs, "Deployment")["spec"]["template"]
                                                   ["spec"]["serviceAccountName"]]
    # nothing else of the chart lives in kube-system
    assert [(o["kind"], o["metadata"]["name"]) for o in objs if o["metadata"].get("namespace") == "kube-system"] == \
        [("RoleBinding", rb["metadata"]["name"])]


def test_the_documented_switch_turns_verification_off():
    objs = render({"webhook": {"clientAuth": {"enabled": False}}})
    args = container(objs)["args"]
    assert not [a for a in args if a.startswith("--webhook-client")]
    assert not [o for o in objs if o["metadata"].get("namespace") == "kube-system"]


def test_client_ca_is_mounted_and_passed_to_the_operator(tmp_path):
    objs = render(CA)
    c = container(objs)
    args = c["args"]
    assert arg_value(args, "--webhook-client-ca") == ["/client-ca/front-proxy-ca.crt"]
    assert arg_value(args, "--webhook-client-name") == ["front-proxy-client", "kube-apiserver"]
    assert "--webhook-client-ca-from-cluster" not in args and "--webhook-client-optional" in args
    assert {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True} in c["volumeMounts"]
    vols = {v["name"]: v for v in one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["client-ca"]["configMap"]["name"] == "apiserver-ca"
    assert not [o for o in objs if o["metadata"].get("namespace") == "kube-system"]  # no cluster CA to read
    # the flags parse as the operator's CLI parses them (the file exists in the pod: here, a stand-in)
    ns = _parsed(args)
    assert (ns.webhook_client_ca, ns.webhook_client_name) == ("/client-ca/front-proxy-ca.crt",
                                                              ["front-proxy-client", "kube-apiserver"])
    # required: callers without the certificate are refused at the handshake
    required = container(render({"webhook": {"clientAuth": {**CA["webhook"]["clientAuth"], "required": True}}}))
    assert "--webhook-client-optional" not in required["args"]
    # no webhook, no client CA
    off = render({**CA, "webhook": {**CA["webhook"], "enabled": False}})
    assert not [a for a in container(off)["args"] if a.startswith("--webhook-client")]


def test_the_operator_network_policy_is_on_by_default():
    """The webhook port from any source while no control-plane CIDRs are listed (NOTES.txt says so), /metrics from
    the monitoring namespace only, the health port from anywhere; nothing else is open."""
    objs = render()
    (np,) = find(objs, "NetworkPolicy")
    dep = one(objs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert np["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert all(labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    assert np["spec"]["policyTypes"] == ["Ingress"]
    rules = ingress_by_port(np)
    assert set(rules) == {9443, 8080, 8081} and len(np["spec"]["ingress"]) == 3
    assert "from" not in rules[9443] and "from" not in rules[8081]
    assert rules[8080]["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}]


def test_webhook_network_policy_admits_the_control_plane_on_the_webhook_port_only():
    objs = render(NETPOL)
    (np,) = find(objs, "NetworkPolicy")
    rules = ingress_by_port(np)
    assert rules[9443] == {"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 9443}]}
    assert "from" not in rules[8081]


def test_metrics_are_reachable_from_the_named_monitoring_namespaces_only():
    """Issue 37, item 7: the operator's own /metrics port, from the namespaces metrics.networkPolicy names."""
    sel = {"matchLabels": {"team": "observability"}}
    by_name = {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["obs", "prom"]}]}}
    for values, want in (({"metrics": {"networkPolicy": {"namespaces": ["obs", "prom"]}}}, [by_name]),
                         ({"metrics": {"networkPolicy": {"namespaces": [], "namespaceSelector": sel}}},
                          [{"namespaceSelector": sel}]),
                         ({"metrics": {"networkPolicy": {"namespaces": ["obs", "prom"], "namespaceSelector": sel}},
                           # the metrics rule alone (the webhook's policy off): the webhook port open to any source
                           "webhook": {"networkPolicy": {"enabled": False, "controlPlaneCIDRs": ["10.0.0.0/24"]}}},
                          [by_name, {"namespaceSelector": sel}]),
                         ({"metrics": {"port": 9100, "networkPolicy": {"namespaces": ["obs", "prom"]}},
                           "webhook": {"enabled": False}}, [by_name])):
        (np,) = find(render(values), "NetworkPolicy")
        rules = ingress_by_port(np)
        port = values["metrics"].get("port", 8080)
        assert rules[port]["from"] == want, values
        if values.get("webhook", {}).get("enabled") is False:
            assert 9443 not in rules
        else:
            assert "from" not in rules[9443]
    # no namespace at all: the metrics port is closed (no rule admits it)
    (np,) = find(render({"metrics": {"networkPolicy": {"namespaces": []}}}), "NetworkPolicy")
    assert 8080 not in ingress_by_port(np)
    # both off: no policy at all
    assert not find(render({"metrics": {"networkPolicy": {"enabled": False}},
                            "webhook": {"networkPolicy": {"enabled": False}}}), "NetworkPolicy")
    # on, the metrics one off: /metrics open
    (np,) = find(render({"metrics": {"networkPolicy": {"enabled": False}}}), "NetworkPolicy")
    assert "from" not in ingress_by_port(np)[8080]


@pytest.mark.parametrize("cidr", ["10.0.0.1", "any", "10.0.0.0/24; x"])
def test_control_plane_cidrs_are_checked_by_the_schema(cidr):
    path = values_file({"webhook": {"networkPolicy": {"enabled": True, "controlPlaneCIDRs": [cidr]}}})
    p = run_helm("helm4", "template", "r", str(CHART), "-f", path, check=False)
    assert p.returncode != 0 and "controlPlaneCIDRs" in p.stderr


def test_engine_network_policy_value_becomes_operator_flags():
    assert "--engine-network-policy" not in container(render())["args"]
    args = container(render({"engineNetworkPolicy": {"enabled": True, "ingressNamespaces": ["monitoring", "obs"]}}))["args"]
    assert "--engine-network-policy" in args
    assert arg_value(args, "--engine-ingress-namespace") == ["monitoring", "obs"]
    from specdeploy.cli import build_parser
    from specdeploy.cli.operator import _engine_network_policy

    assert _engine_network_policy(build_parser().parse_args(args)) == ["monitoring", "obs"]
    assert _engine_network_policy(build_parser().parse_args(container(render())["args"])) is None


def test_operator_may_manage_network_policies_in_watched_namespaces_only():
    objs = render({"watch": {"namespaces": ["team-a"]}})
    rules = [(r, o["metadata"].get("namespace")) for o in find(objs, "Role") + find(objs, "ClusterRole")
             for r in o.get("rules", []) if "networkpolicies" in r.get("resources", [])]
    assert rules and all(ns == "team-a" for _, ns in rules), rules
    assert set(rules[0][0]["verbs"]) == {"get", "list", "watch", "create", "patch", "delete"}  # get: Executor.claim
