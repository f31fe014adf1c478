"""High availability in the chart (docs/concepts/high-availability.md): two replicas, a PDB, spread
over nodes, a rolling update that keeps every webhook server until its successor is ready, the
readiness probe on /readyz, and Lease RBAC in the release namespace only. Rendered with helm template."""

from __future__ import annotations

import pytest

from chart_helpers import NAMESPACE, find, one, render, run_helm, CHART, RELEASE


def container(objs):
    return one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_defaults_two_replicas_pdb_spread_and_rolling_update():
    objs = render()
    dep = one(objs, "Deployment")
    labels = dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": labels}}
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}}
    assert set(labels.items()) <= set(dep["spec"]["template"]["metadata"]["labels"].items())
    c = container(objs)
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert "--leader-elect" in c["args"]


def test_lease_rbac_is_in_the_release_namespace_only():
    objs = render()
    lease_rules = [(o["kind"], o["metadata"].get("namespace"), r) for o in objs if o["kind"] in ("Role", "ClusterRole")
                   for r in o["rules"] if "leases" in r["resources"]]
    assert lease_rules and all(kind == "Role" and ns == NAMESPACE for kind, ns, _ in lease_rules)
    by_verbs = {tuple(r["verbs"]): r for _, _, r in lease_rules}
    assert by_verbs[("get", "update")]["resourceNames"] == ["specdeploy-leader"]
    assert "resourceNames" not in by_verbs[("create",)]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for _, _, r in lease_rules)
    binding = one(objs, "RoleBinding", "specdeploy-leader-election")
    assert binding["metadata"]["namespace"] == NAMESPACE and binding["roleRef"]["name"] == "specdeploy-leader-election"
    # watching a list of namespaces does not spread the Lease rule to them
    for o in render({"watch": {"namespaces": ["team-a"]}}):
        if o["kind"] in ("Role", "ClusterRole") and any("leases" in r["resources"] for r in o["rules"]):
            assert o["kind"] == "Role" and o["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("values, want", [
    ({"podAntiAffinity": "none"}, None),
    ({"podAntiAffinity": "required"}, "requiredDuringSchedulingIgnoredDuringExecution"),
    ({"affinity": {"nodeAffinity": {"x": 1}}}, "nodeAffinity"),
])
def test_anti_affinity_choices(values, want):
    spec = one(render(values), "Deployment")["spec"]["template"]["spec"]
    if want is None:
        assert "affinity" not in spec
    elif want == "nodeAffinity":
        assert spec["affinity"] == {"nodeAffinity": {"x": 1}}
    else:
        assert list(spec["affinity"]["podAntiAffinity"]) == [want]


def test_one_replica_has_no_pdb_and_pdb_can_be_turned_off():
    assert not find(render({"replicaCount": 1}), "PodDisruptionBudget")
    assert not find(render({"podDisruptionBudget": {"enabled": False}}), "PodDisruptionBudget")
    assert one(render({"replicaCount": 3, "podDisruptionBudget": {"minAvailable": 2}}),
               "PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_several_replicas_without_leader_election_is_refused():
    p = run_helm("helm3", "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                 "--set", "leaderElection.enabled=false", check=False)
    assert p.returncode != 0 and "replicaCount > 1 needs leaderElection.enabled=true" in p.stderr
    # and the timing values reach the flags
    args = container(render({"leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20,
                                                "retryPeriodSeconds": 4}}))["args"]
    i = args.index("--lease-duration")
    assert args[i:i + 6] == ["--lease-duration", "30", "--renew-deadline", "20", "--retry-period", "4"]
