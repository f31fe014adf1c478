"""Issue 24: who may reach what the chart runs (docs/concepts/security.md, "Webhook callers" and "Engine network").

The webhook's client certificate verification and its NetworkPolicy, from values to operator flags and objects;
the flags parse as the operator's own CLI parses them."""

from __future__ import annotations

import pytest

from chart_helpers import arg_value, container, find, one, render, run_helm, values_file, CHART

CA = {"webhook": {"clientAuth": {"caConfigMap": "apiserver-ca", "caKey": "front-proxy-ca.crt",
                                 "names": ["front-proxy-client", "kube-apiserver"]}}}
NETPOL = {"webhook": {"networkPolicy": {"enabled": True, "controlPlaneCIDRs": ["10.0.0.0/24"]}}}


def test_no_client_verification_and_no_network_policy_by_default():
    objs = render()
    args = container(objs)["args"]
    assert "--webhook-client-ca" not in args and "--webhook-client-name" not in args
    assert not find(objs, "NetworkPolicy")


def test_client_ca_is_mounted_and_passed_to_the_operator(tmp_path):
    objs = render(CA)
    c = container(objs)
    args = c["args"]
    assert arg_value(args, "--webhook-client-ca") == ["/client-ca/front-proxy-ca.crt"]
    assert arg_value(args, "--webhook-client-name") == ["front-proxy-client", "kube-apiserver"]
    assert {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True} in c["volumeMounts"]
    vols = {v["name"]: v for v in one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols["client-ca"]["configMap"]["name"] == "apiserver-ca"
    # the flags parse as the operator's CLI parses them (the file exists in the pod: here, a stand-in)
    from specdeploy.cli import build_parser

    ns = build_parser().parse_args(args)
    assert (ns.webhook_client_ca, ns.webhook_client_name) == ("/client-ca/front-proxy-ca.crt",
                                                              ["front-proxy-client", "kube-apiserver"])
    # no webhook, no client CA
    off = render({**CA, "webhook": {**CA["webhook"], "enabled": False}})
    assert "--webhook-client-ca" not in container(off)["args"]


def test_webhook_network_policy_admits_the_control_plane_on_the_webhook_port_only():
    objs = render(NETPOL)
    (np,) = find(objs, "NetworkPolicy")
    dep = one(objs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert np["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert all(labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    assert np["spec"]["policyTypes"] == ["Ingress"]
    webhook, others = np["spec"]["ingress"]
    assert webhook == {"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 9443}]}
    # /metrics and the probes stay reachable; nothing else is open
    assert "from" not in others and {p["port"] for p in others["ports"]} == {8080, 8081}


def test_webhook_network_policy_needs_the_control_plane_cidrs():
    path = values_file({"webhook": {"networkPolicy": {"enabled": True}}})
    p = run_helm("helm4", "template", "r", str(CHART), "-f", path, check=False)
    assert p.returncode != 0 and "controlPlaneCIDRs" in p.stderr


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
