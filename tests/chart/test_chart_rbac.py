"""RBAC audit: the chart grants exactly the (group, resource, verb) the operator's code uses; no wildcards.

What the code uses is derived from the code itself:
- kopf watches: the handlers registered in kopf's registry (list, watch);
- kopf's own discovery: its CRD selector (list, watch);
- direct API calls: every `kube.<verb>(...)` call in operator/specdeploy/controller/*.py, found by
  walking the AST. CALLS maps each call site to what it touches (its kinds come from the code:
  kube.KINDS, reconciler.MANAGED_KINDS, string literals). A call site missing from CALLS fails the
  test, so a new API call cannot ship without its RBAC rule.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from chart_helpers import CHART, NAMESPACE, VALUE_SETS, find, render, watched_namespaces
from specdeploy.controller import kube as kube_mod
from specdeploy.controller import reconciler

CONTROLLER = Path(kube_mod.__file__).parent
KUBE_VERBS = {"get", "get_many", "list", "create", "patch", "apply", "delete", "call", "has_api", "log", "watch"}
HTTP_VERBS = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update", "DELETE": "delete"}
TLS_SECRET = "specdeploy-webhook-tls"
CONFIGURATION = "specdeploy"
WEBHOOK_CONFIGS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


def gr(kind: str) -> tuple[str, str]:
    k = kube_mod.KINDS[kind]
    return (k.api_version.split("/")[0] if "/" in k.api_version else "", k.plural)


# call site -> the (group, resource, verb, scope) it needs. scope: "watched" (every watched namespace),
# "token" (watched namespaces, hub.tokenSecrets names only), "tls" (operator namespace, the TLS Secret only),
# "cluster" (cluster-scoped, the chart's webhook configurations only), "none" (discovery: no RBAC).
# The one Role the chart binds but does not render: kube-apiserver's own, in every cluster (bootstrap policy).
CLIENT_CA_READER = ("Role", "kube-system", "extension-apiserver-authentication-reader")


def _calls() -> dict[str, set[tuple]]:
    managed = [gr(k) for k in reconciler.MANAGED_KINDS]
    sd_status = ("specdeploy.io", "speculativedeployments/status")
    return {
        # server-side apply is a PATCH; one that creates the object also needs create
        "Executor.apply_child:apply": {(g, r, v, "watched") for g, r in managed for v in ("create", "patch")},
        # the one-time move of a pre-SSA child's managedFields (a JSON patch)
        "Executor.apply_child:patch": {(g, r, "patch", "watched") for g, r in managed},
        # an uncached child (and the benchmark's children, its client Job among them: the benchmark controller
        # writes through an Executor with Unwatched caches, issue 37)
        "Executor.create_child:create": {(g, r, "create", "watched") for g, r in managed + [gr("Job")]},
        # every delete of a child, with the object's uid as its precondition: obsolete children, what a refused
        # pass created, a benchmark's variant objects and client Jobs (issue 37)
        "Executor._delete:delete": {(g, r, "delete", "watched") for g, r in managed + [gr("Job")]},
        # the ownership check before any write (issue 24): a child's name may be taken by an object the watches
        # (labelled children only) never saw; also the tuning Job and its ConfigMap
        "Executor.claim:get": {(g, r, "get", "watched") for g, r in managed + [gr("Job")]},
        # the same GETs, made for every child of an apply in one hand-off to the client's thread
        "Executor.fetch:get_many": {(g, r, "get", "watched") for g, r in managed + [gr("Job")]},
        "Executor.write_status:patch": {(*sd_status, "patch", "watched")},
        "Executor.event:create": {(*gr("Event"), "create", "watched")},
        # spec.tuning: the tuning Job (created once), its pods' result, the tuned-kernels ConfigMap
        "Executor.tuning:create": {(*gr("Job"), "create", "watched")},
        "Executor.tuning:list": {(*gr("Pod"), "list", "watched")},
        "Executor.has:has_api": set(),  # GET /apis/<group>/<version>: discovery, allowed to every user
        "Resolver._from_configmap:get": {(*gr("ConfigMap"), "get", "watched")},
        # tenancy policy: a claim's labels, when policy.pvcLabel allows labelled claims (core/policy.py)
        "Executor.policy_labels:get": {(*gr("PersistentVolumeClaim"), "get", "watched")},
        "Resolver._token:get": {(*gr("Secret"), "get", "token")},
        # the canary probe's engine API key (spec.engine.apiKey): the same allow-list (security.md)
        "CanaryAnalysis._api_key:get": {(*gr("Secret"), "get", "token")},
        "Resolver._from_pvc:get": {(*gr("Job"), "get", "watched")},
        "Resolver._from_pvc:create": {(*gr("Job"), "create", "watched")},
        "Resolver._from_pvc:delete": {(*gr("Job"), "delete", "watched")},
        "Resolver._from_pvc:list": {(*gr("Pod"), "list", "watched")},
        # the admission webhook reads a referenced ConfigMap on a watch-cache miss (webhooks.py)
        "OperatorConfigs._configmap:get": {(*gr("ConfigMap"), "get", "watched")},
        # issue 37: the webhook's client CA, kube-system/extension-apiserver-authentication, by name; granted by the
        # built-in Role extension-apiserver-authentication-reader (a RoleBinding in kube-system: CLIENT_CA_READER)
        "WebhookRuntime._load_client_ca:get": {(*gr("ConfigMap"), "get", "client-ca")},
        "SelfSigned.ensure:get": {(*gr("Secret"), "get", "tls")},
        "SelfSigned.ensure:create": {(*gr("Secret"), "create", "tls")},
        "SelfSigned.ensure:patch": {(*gr("Secret"), "patch", "tls")},
        "SelfSigned.sync_ca_bundle:call:get": {("admissionregistration.k8s.io", r, "get", "cluster") for r in WEBHOOK_CONFIGS},
        "SelfSigned.sync_ca_bundle:call:patch": {("admissionregistration.k8s.io", r, "patch", "cluster") for r in WEBHOOK_CONFIGS},
        # issue 27: each configuration watched by name (a metadata.name field selector: RBAC resourceNames apply)
        "WebhookRuntime._watch_configuration:watch": {("admissionregistration.k8s.io", r, v, "cluster")
                                                      for r in WEBHOOK_CONFIGS for v in ("list", "watch")},
        # readiness: one list of the CRs, compared with the watch cache (health.CacheSync)
        "CacheSync.run:list": {("specdeploy.io", "speculativedeployments", "list", "watched")},
        # leader election: the operator's Lease in its own namespace, by name (leader.LeaderElector)
        "LeaderElector._try:call:get": {("coordination.k8s.io", "leases", "get", "lease")},
        "LeaderElector._try:call:create": {("coordination.k8s.io", "leases", "create", "lease")},
        "LeaderElector._try:call:update": {("coordination.k8s.io", "leases", "update", "lease")},
        "LeaderElector.release:call:update": {("coordination.k8s.io", "leases", "update", "lease")},
        # SpeculativeBenchmark (controller/benchmark.py): variants, client Jobs, their logs, the results ConfigMap
        "BenchmarkController._expire:delete": {("specdeploy.io", "speculativebenchmarks", "delete", "watched")},
        "BenchmarkController._write_status:patch": {("specdeploy.io", "speculativebenchmarks/status", "patch",
                                                     "watched")},
        # its children (variant objects and NetworkPolicy, plan and results ConfigMaps, client Jobs) are claimed,
        # created, applied and deleted by the Executor calls above (issue 37); the tenancy policy's claim labels
        # (policy.pvcLabel) by Executor.policy_labels
        # the reads its step planner asks for (controller/benchstep.py Need): the serving Deployment, the
        # spec.prompts.configMapRef ConfigMap, the variant engine's pods (a crash loop)
        "BenchmarkController._read:get": {(*gr("Deployment"), "get", "watched"), (*gr("ConfigMap"), "get", "watched")},
        "BenchmarkController._read:list": {(*gr("Pod"), "list", "watched")},
        "BenchmarkController._client_log:list": {(*gr("Pod"), "list", "watched")},
        "BenchmarkController._cleanup:list": {(*gr(k), "list", "watched")
                                              for k in ("Job", "Deployment", "Service", "ConfigMap", "NetworkPolicy")},
        "BenchmarkController._client_log:log": {("", "pods/log", "get", "watched")},
    }


def _is_kube(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kube") or (isinstance(node, ast.Name) and node.id == "kube")


def call_sites() -> dict[str, list[str]]:
    """'Class.method:verb' -> the literal kinds passed (for kube.call: ':call:<verb>')."""
    sites: dict[str, list[str]] = {}
    for path in sorted(CONTROLLER.glob("*.py")):
        if path.name == "kube.py":
            continue
        tree = ast.parse(path.read_text())
        fn_types = (ast.FunctionDef, ast.AsyncFunctionDef)
        owners = [(fn.name, fn) for fn in tree.body if isinstance(fn, fn_types)]
        owners += [(f"{c.name}.{fn.name}", fn) for c in tree.body if isinstance(c, ast.ClassDef)
                   for fn in c.body if isinstance(fn, fn_types)]
        if True:
            for owner, fn in owners:
                for node in ast.walk(fn):
                    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and node.func.attr in KUBE_VERBS and _is_kube(node.func.value)):
                        continue
                    verb = node.func.attr
                    first = node.args[0] if node.args else None
                    literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
                    if verb == "call":
                        assert literal in HTTP_VERBS, f"{owner}: kube.call with a non-literal method"
                        key = f"{owner}:call:{HTTP_VERBS[literal]}"
                        literal = None
                    else:
                        key = f"{owner}:{verb}"
                    sites.setdefault(key, [])
                    if literal:
                        sites[key].append(literal)
    return sites


def used(tokens: bool, self_managed_tls: bool, leader_election: bool = True) -> set[tuple]:
    """Everything the operator needs for a configuration, as (group, resource, verb, scope)."""
    import kopf
    from kopf._cogs.structs import references

    from specdeploy.controller import handlers  # noqa: F401  (registers the handlers)

    out: set[tuple] = set()
    for h in kopf.get_default_registry()._watching.get_all_handlers():
        s = h.selector
        for verb in ("list", "watch"):
            out.add((s.group or "", s.plural or s.any_name, verb, "watched"))
    crds = references.CRDS
    out |= {(crds.group, crds.plural or crds.any_name, v, "cluster-read") for v in ("list", "watch")}
    # children and the inspector Job carry blockOwnerDeletion: needs update on the owner's finalizers
    sources = "".join(p.read_text() for p in sorted((CONTROLLER.parent / "core" / "render").glob("*.py")))
    sources += (CONTROLLER / "resolve.py").read_text()
    if re.search(r'"blockOwnerDeletion": True', sources):
        out.add(("specdeploy.io", "speculativedeployments/finalizers", "update", "watched"))
    if re.search(r'"blockOwnerDeletion": True', (CONTROLLER.parent / "core" / "bench" / "render.py").read_text()):
        out.add(("specdeploy.io", "speculativebenchmarks/finalizers", "update", "watched"))
    for needs in _calls().values():
        for g, r, v, scope in needs:
            if scope == "client-ca":  # granted by the built-in Role (CLIENT_CA_READER), not by one the chart renders
                continue
            if scope == "token" and not tokens or scope in ("tls", "cluster") and not self_managed_tls \
                    or scope == "lease" and not leader_election:
                continue
            out.add((g, r, v, scope))
    return out


def test_every_api_call_in_the_code_is_in_the_table():
    sites = call_sites()
    table = _calls()
    assert set(sites) == set(table), (
        f"API calls without an RBAC entry: {sorted(set(sites) - set(table))}; "
        f"entries without a call: {sorted(set(table) - set(sites))}. Update CALLS and charts/specdeploy RBAC.")
    for key, kinds in sites.items():
        for kind in kinds:
            g, r = gr(kind)
            assert any((g, r.split("/")[0]) == (t[0], t[1].split("/")[0]) for t in table[key]), (key, kind)


def granted(objs: list[dict]) -> set[tuple]:
    """(group, resource, verb, where, resourceNames) for every rule of every Role/ClusterRole."""
    out = set()
    for o in objs:
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        where = o["metadata"].get("namespace", "*cluster*")
        for rule in o["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
            names = tuple(sorted(rule.get("resourceNames", [])))
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((g, r, v, where, names))
    return out


def expected(values: dict, tokens: list[str], watched: list[str], self_managed_tls: bool,
             configuration: str = CONFIGURATION, tls_secret: str = TLS_SECRET) -> set[tuple]:
    out = set()
    where_watched = watched or ["*cluster*"]
    election = values.get("leaderElection", {}).get("enabled", True)
    for g, r, v, scope in used(bool(tokens), self_managed_tls, election):
        if scope == "watched":
            out |= {(g, r, v, w, ()) for w in where_watched}
        elif scope == "token":
            out |= {(g, r, v, w, tuple(sorted(tokens))) for w in where_watched}
        elif scope == "tls":
            out.add((g, r, v, NAMESPACE, () if v == "create" else (tls_secret,)))
        elif scope == "cluster":
            out.add((g, r, v, "*cluster*", (configuration,)))
        elif scope == "cluster-read":
            out.add((g, r, v, "*cluster*", ()))
        elif scope == "lease":  # the release namespace only, by name except create
            out.add((g, r, v, NAMESPACE, () if v == "create" else (f"{configuration}-leader",)))
    return out


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_rbac_grants_exactly_what_the_code_uses(values):
    v = VALUE_SETS[values]
    objs = render(v)
    webhook = v.get("webhook", {}).get("enabled", True)
    self_managed = webhook and not v.get("webhook", {}).get("certManager", {}).get("enabled", False)
    prefix = v.get("fullnameOverride") or "specdeploy"
    want = expected(v, v.get("hub", {}).get("tokenSecrets", []), watched_namespaces(v),
                    self_managed, configuration=prefix, tls_secret=f"{prefix}-webhook-tls")
    got = granted(objs)
    assert got - want == set(), f"granted but never used: {sorted(got - want)}"
    assert want - got == set(), f"used but not granted: {sorted(want - got)}"


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_no_wildcards_and_no_dangerous_verbs(values):
    for o in render(VALUE_SETS[values]):
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        assert "aggregationRule" not in o
        for rule in o["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in x for x in rule.get(field, [])), (o["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), rule


def test_secret_access_is_by_name_except_create_in_the_operator_namespace():
    objs = render(VALUE_SETS["namespaced"]) + render()
    for o in objs:
        for rule in o.get("rules", []) if o["kind"] in ("Role", "ClusterRole") else []:
            if "secrets" not in rule["resources"]:
                continue
            if rule["verbs"] == ["create"]:
                assert o["kind"] == "Role" and o["metadata"]["namespace"] == NAMESPACE
            else:
                assert rule.get("resourceNames"), rule
                assert not {"list", "watch"} & set(rule["verbs"])
    # no token Secrets configured: no Secret readable outside the TLS one
    assert not [r for o in find(render(), "ClusterRole") for r in o["rules"] if "secrets" in r["resources"]]


def test_namespaces_are_never_granted():
    """kopf lists namespaces only in namespaced mode, to resolve patterns; with exact names it falls back to
    them on 403 (kopf observation.namespace_observer), so the chart grants no cluster-wide namespace read."""
    for values in VALUE_SETS.values():
        assert not [k for k in granted(render(values)) if k[1] == "namespaces"]


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_role_is_bound_to_the_operator_only(values):
    v = VALUE_SETS[values]
    objs = render(v)
    sa = v.get("serviceAccount", {}).get("name") or v.get("fullnameOverride") or "specdeploy"
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs if o["kind"] in ("Role", "ClusterRole")}
    bound = set()
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
        ref = b["roleRef"]
        bound.add((ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"]))
    webhook = v.get("webhook", {})
    reads_cluster_ca = webhook.get("enabled", True) and not webhook.get("clientAuth", {}).get("caConfigMap") \
        and webhook.get("clientAuth", {}).get("enabled", True)
    assert (CLIENT_CA_READER in bound) == reads_cluster_ca
    assert bound - {CLIENT_CA_READER} == roles


def test_namespaced_mode_has_no_cluster_wide_workload_rules():
    objs = render(VALUE_SETS["namespaced"])
    (cr,) = find(objs, "ClusterRole")
    resources = {r for rule in cr["rules"] for r in rule["resources"]}
    assert resources == {"customresourcedefinitions", "validatingwebhookconfigurations", "mutatingwebhookconfigurations"}
    assert {o["metadata"]["namespace"] for o in find(objs, "Role", "specdeploy-workloads")} == {"team-a", "team-b"}


WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate"}


def cluster_wide_writes(objs: list[dict]) -> set[tuple]:
    """(group, resource, verb, resourceNames) of every write a ClusterRole bound by a ClusterRoleBinding grants."""
    bound = {b["roleRef"]["name"] for b in find(objs, "ClusterRoleBinding")}
    return {(g, r, v, n) for (g, r, v, where, n) in granted([o for o in find(objs, "ClusterRole")
                                                              if o["metadata"]["name"] in bound])
            if v in WRITE_VERBS}


@pytest.mark.parametrize("values", sorted(k for k, v in VALUE_SETS.items() if not v.get("rbac", {}).get("clusterWide")))
def test_no_cluster_wide_write_unless_asked(values):
    """Issue 12: by default (and with every value set but rbac.clusterWide) the operator can write nothing
    cluster-wide except caBundle of its own two webhook configurations, by name."""
    v = VALUE_SETS[values]
    objs = render(v)
    prefix = v.get("fullnameOverride") or "specdeploy"
    for g, r, verb, names in cluster_wide_writes(objs):
        assert (g, verb, names) == ("admissionregistration.k8s.io", "patch", (prefix,)), (g, r, verb, names)
        assert r in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
    # the workload rules are Roles, in the watched namespaces only (the release namespace by default)
    roles = find(objs, "Role", f"{prefix}-workloads")
    assert sorted(o["metadata"]["namespace"] for o in roles) == sorted(watched_namespaces(v))
    assert not find(objs, "ClusterRole", f"{prefix}-workloads")


def test_default_watches_the_release_namespace_only():
    objs = render()
    assert [o["metadata"]["namespace"] for o in find(objs, "Role", "specdeploy-workloads")] == [NAMESPACE]
    assert [o["metadata"]["namespace"] for o in find(objs, "RoleBinding", "specdeploy-workloads")] == [NAMESPACE]


def test_cluster_wide_is_explicit_and_writes_everywhere():
    objs = render(VALUE_SETS["cluster-wide"])
    writes = cluster_wide_writes(objs)
    assert ("apps", "deployments", "create", ()) in writes and ("", "configmaps", "delete", ()) in writes
    assert not find(objs, "Role", "specdeploy-workloads")
    (crb,) = find(objs, "ClusterRoleBinding", "specdeploy-workloads")
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "specdeploy-workloads"}
    # the token Secret rule follows the workload rules: cluster-wide, still by name only
    (cr,) = find(objs, "ClusterRole", "specdeploy-workloads")
    [secret_rule] = [r for r in cr["rules"] if "secrets" in r["resources"]]
    assert secret_rule["resourceNames"] == ["hf-token"] and secret_rule["verbs"] == ["get"]


def test_cluster_wide_with_listed_namespaces_is_refused():
    from chart_helpers import run_helm, values_file

    p = run_helm("helm3", "template", "specdeploy", str(CHART), "-n", NAMESPACE, "-f",
                 values_file({"rbac": {"clusterWide": True}, "watch": {"namespaces": ["team-a"]}}), check=False)
    assert p.returncode != 0 and "rbac.clusterWide=true watches every namespace" in p.stderr


def test_every_rule_in_the_chart_says_why():
    """Each rule in the templates is preceded by a comment explaining it."""
    for path in (CHART / "templates").glob("*"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            rbac_rule = any("verbs:" in x for x in lines[i + 1:i + 4])  # not an admission rule
            if line.strip().startswith("- apiGroups:") and rbac_rule:
                above = lines[i - 1].strip()
                assert above.startswith("#"), f"{path.name}:{i + 1}: rule without a comment saying why"
