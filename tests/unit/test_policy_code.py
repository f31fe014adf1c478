"""Tenancy policy over code and scheduling (issue 24 item 5), and an unlisted value for every allow-list
(item 8: an allow-list that accepts anything once non-empty must fail here, not only in an e2e)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy.core import codeflags
from specdeploy.core.enginedata import available_snapshots, load_snapshot
from specdeploy.core.policy import TenancyPolicy, check_policy, code_arg_uses, model_prefix_allowed, name_allowed

from test_policy import codes, cr

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------- every allow-list refuses an unlisted value

LISTED = TenancyPolicy(image_prefixes=("registry.example.com/ml",), engine_service_account="engine",
                       service_accounts=("team-a",), token_secrets=("hf",), token_secret_keys=("token",),
                       pvcs=("models",), cache_node_paths=(("nvme", "/mnt/nvme"),),
                       trust_remote_code_namespaces=("team-a",), trust_remote_code_models=("moonshotai",),
                       code_args=("--chat-template",), egress_args=("--otlp-traces-endpoint",),
                       toleration_keys=("gpu",), node_selector_keys=("zone",),
                       priority_classes=("high",))
OK_SPEC = {"engine": {"image": "registry.example.com/ml/v:1",
                      "extraArgs": ["--chat-template", "/t.jinja", "--otlp-traces-endpoint", "otel:4317"]},
           "pod": {"serviceAccountName": "team-a", "tolerations": [{"key": "gpu", "operator": "Exists"}],
                   "nodeSelector": {"zone": "a"}, "priorityClassName": "high"},
           "target": {"model": "moonshotai/Kimi-K2.6", "trustRemoteCode": True,
                      "tokenSecretRef": {"name": "hf", "key": "token"}, "pvc": {"claimName": "models"}},
           "cache": {"type": "nodePath", "nodePath": "nvme"}}


def test_the_listed_values_pass():
    assert check_policy(cr(**OK_SPEC).spec, LISTED, namespace="team-b") == []


@pytest.mark.parametrize("change, code, path", [
    ({"engine": {"image": "registry.example.com/other/v:1"}}, "PolicyImageNotAllowed", "spec.engine.image"),
    ({"pod": {"serviceAccountName": "team-b"}}, "PolicyServiceAccountNotAllowed", "spec.pod.serviceAccountName"),
    ({"target": {"tokenSecretRef": {"name": "db", "key": "token"}}}, "PolicyTokenSecretNotAllowed",
     "spec.target.tokenSecretRef.name"),
    ({"drafter": {"tokenSecretRef": {"name": "db", "key": "token"}}}, "PolicyTokenSecretNotAllowed",
     "spec.drafter.tokenSecretRef.name"),
    ({"target": {"tokenSecretRef": {"name": "hf", "key": "password"}}}, "PolicyTokenSecretKeyNotAllowed",
     "spec.target.tokenSecretRef.key"),
    ({"target": {"pvc": {"claimName": "other"}}}, "PolicyClaimNotAllowed", "spec.target.pvc.claimName"),
    ({"cache": {"type": "nodePath", "nodePath": "ssd"}}, "PolicyCacheNodePathNotAllowed", "spec.cache.nodePath"),
    ({"target": {"model": "moonshotai-evil/x"}}, "PolicyTrustRemoteCodeNotAllowed", "spec.target.trustRemoteCode"),
    ({"engine": {"extraArgs": ["--tool-parser-plugin", "/p.py"]}}, "PolicyCodeArgNotAllowed",
     "spec.engine.extraArgs[0]"),
    ({"engine": {"extraArgs": ["--tool-server", "http://x:1"]}}, "PolicyEgressArgNotAllowed",
     "spec.engine.extraArgs[0]"),
    ({"pod": {"tolerations": [{"key": "spot", "operator": "Exists"}]}}, "PolicyTolerationNotAllowed",
     "spec.pod.tolerations[0].key"),
    ({"pod": {"nodeSelector": {"rack": "1"}}}, "PolicyNodeSelectorNotAllowed", "spec.pod.nodeSelector[rack]"),
    ({"pod": {"priorityClassName": "low"}}, "PolicyPriorityClassNotAllowed", "spec.pod.priorityClassName"),
])
def test_each_allow_list_refuses_an_unlisted_value(change, code, path):
    spec = json.loads(json.dumps(OK_SPEC))
    for k, v in change.items():
        for kk, vv in v.items():
            spec.setdefault(k, {})[kk] = vv if not isinstance(vv, dict) else {**spec.get(k, {}).get(kk, {}), **vv}
    assert codes(check_policy(cr(**spec).spec, LISTED, namespace="team-b")) == [(code, path)]


def test_trust_remote_code_by_namespace_or_model_prefix():
    spec = cr(target={"model": "Qwen/Qwen3.6-27B", "trustRemoteCode": True}).spec
    assert codes(check_policy(spec, TenancyPolicy(), namespace="a")) == [
        ("PolicyTrustRemoteCodeNotAllowed", "spec.target.trustRemoteCode")]
    assert check_policy(spec, TenancyPolicy(trust_remote_code_namespaces=("a",)), namespace="a") == []
    assert check_policy(spec, TenancyPolicy(trust_remote_code_namespaces=("b",)), namespace="a") != []
    assert check_policy(spec, TenancyPolicy(trust_remote_code_namespaces=("*",)), namespace="a") == []
    assert check_policy(spec, TenancyPolicy(trust_remote_code_namespaces=("*",)), namespace=None) != []
    assert check_policy(spec, TenancyPolicy(trust_remote_code_models=("Qwen/",)), namespace="a") == []
    assert check_policy(cr(target={"model": "Qwen/x"}).spec, TenancyPolicy(), namespace="a") == []  # false: no rule


@pytest.mark.parametrize("model, prefixes, ok", [
    ("Qwen/x", ("Qwen",), True), ("Qwen/x", ("Qwen/",), True), ("Qwen", ("Qwen",), True),
    ("QwenEvil/x", ("Qwen",), False), ("Qwen/x", ("Qwen/y",), False), ("Qwen/x", ("",), False),
    ("Qwen/x", ("/",), False),
])
def test_model_prefix_boundary(model, prefixes, ok):
    assert model_prefix_allowed(model, prefixes) is ok


# ----------------------------------------------------------------- scheduling


def test_scheduling_defaults_keep_tenants_off_the_control_plane():
    p = TenancyPolicy()
    attack = cr(pod={"tolerations": [{"operator": "Exists"}, {"key": "node-role.kubernetes.io/control-plane",
                                                               "operator": "Exists"},
                                     {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule",
                                      "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "nodeSelector": {"node-role.kubernetes.io/control-plane": "", "topology.kubernetes.io/zone": "a"},
                     "priorityClassName": "system-node-critical"})
    assert codes(check_policy(attack.spec, p)) == [
        ("PolicyTolerationNotAllowed", "spec.pod.tolerations[0].key"),
        ("PolicyTolerationNotAllowed", "spec.pod.tolerations[1].key"),
        ("PolicyTolerationNotAllowed", "spec.pod.tolerations[2].key"),
        ("PolicyNodeSelectorNotAllowed", "spec.pod.nodeSelector[node-role.kubernetes.io/control-plane]"),
        ("PolicyPriorityClassNotAllowed", "spec.pod.priorityClassName")]
    assert check_policy(cr(pod={"priorityClassName": "system-cluster-critical"}).spec, p) != []
    assert check_policy(cr(pod={"priorityClassName": "high"}).spec, p) == []


def test_control_plane_and_system_classes_only_by_exact_name():
    cp = "node-role.kubernetes.io/control-plane"
    spec = cr(pod={"tolerations": [{"key": cp, "operator": "Exists"}], "nodeSelector": {cp: ""},
                   "priorityClassName": "system-node-critical"}).spec
    wide = TenancyPolicy(toleration_keys=("node-role.kubernetes.io/*", "*"), node_selector_keys=("*",),
                         priority_classes=("system-*", "*"))
    assert len(check_policy(spec, wide)) == 3
    exact = TenancyPolicy(toleration_keys=(cp,), node_selector_keys=(cp,), priority_classes=("system-node-critical",))
    assert check_policy(spec, exact) == []
    keyless = cr(pod={"tolerations": [{"operator": "Exists"}]}).spec
    assert codes(check_policy(keyless, TenancyPolicy(toleration_keys=("*", "")))) == [
        ("PolicyTolerationNotAllowed", "spec.pod.tolerations[0].key")]


def test_empty_lists_allow_nothing():
    spec = cr(pod={"tolerations": [{"key": "a", "operator": "Exists"}], "nodeSelector": {"b": "1"},
                   "priorityClassName": "c"}).spec
    none = TenancyPolicy(toleration_keys=(), node_selector_keys=(), priority_classes=())
    assert [c for c, _ in codes(check_policy(spec, none))] == [
        "PolicyTolerationNotAllowed", "PolicyNodeSelectorNotAllowed", "PolicyPriorityClassNotAllowed"]


@pytest.mark.parametrize("name, patterns, exact, ok", [
    ("a", ("a",), False, True), ("ab", ("a*",), False, True), ("ab", ("a",), False, False),
    ("ab", ("*",), True, False), ("ab", ("a*",), True, False), ("ab", ("ab",), True, True), ("x", (), False, False),
    ("ba", ("a*",), False, False),
])
def test_name_allowed(name, patterns, exact, ok):
    assert name_allowed(name, patterns, exact_only=exact) is ok


# ----------------------------------------------------------------- extraArgs that load code or open files


@pytest.mark.parametrize("engine, version, gpu, args, want", [
    ("vllm", "0.33.0", "b300", ["--tool-parser-plugin", "/p.py"], [(0, "--tool-parser-plugin")]),
    ("vllm", "0.33.0", "b300", ["--tool-parser-pl=/p.py"], [(0, "--tool-parser-plugin")]),  # an abbreviation
    ("vllm", "0.33.0", "b300", ["--max-num-seqs", "4", "--logits_processors", "a.B"], [(2, "--logits-processors")]),
    ("vllm", "0.33.0", "b300", ["--kv-transfer-config.kv_connector_module_path=m"], [(0, "--kv-transfer-config")]),
    ("vllm", "0.33.0", "b300", ["--middleware", "a.b", "--worker-extension-cls", "c.D"],
     [(0, "--middleware"), (2, "--worker-extension-cls")]),
    ("vllm", "0.33.0", "b300", ["--allowed-local-media-path", "/", "--logging-config", "{}"],
     [(0, "--allowed-local-media-path"), (2, "--logging-config")]),
    ("vllm", "0.33.0", "b300", ["--max-num-seqs", "4", "--enable-prefix-caching"], []),
    ("vllm", "0.32.0", "cpu", ["--chat-template", "/t"], [(0, "--chat-template")]),  # the CPU build's parser
    ("vllm", "0.25.0", "b300", ["--worker_extension", "c.D"], [(0, "--worker-extension-cls")]),  # no parser: by name
    ("sglang", "0.5.23", "b300", ["--enable-custom-logit-processor"], [(0, "--enable-custom-logit-processor")]),
    ("sglang", "0.5.23", "b300", ["--custom-weight-loader", "a.b", "--forward-hooks", "[]"],
     [(0, "--custom-weight-loader"), (2, "--forward-hooks")]),
    ("sglang", "0.5.23", "b300", ["--mem-fraction-static", "0.8"], []),
])
def test_code_arg_uses(engine, version, gpu, args, want):
    spec = cr(engine={"name": engine, "version": version, "extraArgs": args}, gpu={"type": gpu, "count": 1}).spec
    assert [(i, f) for i, f, _ in code_arg_uses(spec)] == want


def test_code_args_allowed_by_name_only():
    spec = cr(engine={"extraArgs": ["--chat-template", "/t", "--tool-parser-plugin", "/p.py"]}).spec
    assert codes(check_policy(spec, TenancyPolicy(code_args=("--chat-template",)))) == [
        ("PolicyCodeArgNotAllowed", "spec.engine.extraArgs[2]")]
    assert check_policy(spec, TenancyPolicy(code_args=("--chat-template", "--tool-parser-plugin"))) == []
    [f] = check_policy(cr(engine={"extraArgs": ["--tool-parser-plugin", "/p.py"]}).spec, TenancyPolicy())
    assert "policy.allowedCodeArgs" in f.message and "--allowed-code-arg" in f.message


# ----------------------------------------------------------------- the flag table: derived from the snapshots, cited


ISSUE_FLAGS = {"vllm": ["--tool-parser-plugin", "--logits-processors", "--worker-extension-cls", "--middleware",
                        "--allowed-local-media-path", "--logging-config", "--chat-template",
                        "--distributed-executor-backend"],
               "sglang": ["--enable-custom-logit-processor", "--custom-weight-loader", "--sidecar"]}
# issue 37: flags that make the engine connect out of the pod
EGRESS_FLAGS = {"vllm": ["--otlp-traces-endpoint", "--kv-events-config", "--tool-server", "--data-parallel-address"],
                "sglang": ["--otlp-traces-endpoint", "--kv-events-config", "--tool-server", "--encoder-urls",
                           "--encoder-register-urls", "--decoupled-spec-connect-endpoints",
                           "--remote-instance-weight-loader-seed-instance-ip", "--modelexpress-config"]}


def test_every_candidate_flag_of_every_snapshot_is_classified():
    table = codeflags.table()
    for engine, version in available_snapshots():
        owner = codeflags.SNAPSHOT_ENGINE.get(engine)
        if owner is None:
            continue
        snap = load_snapshot(engine, version)
        missing = [f for f in codeflags.candidates(snap) if f not in table[owner]]
        assert not missing, f"{engine} {version}: classify {missing} (python -m specdeploy.core.codeflags --write)"
    unreviewed = [(e, f) for e, rows in table.items() for f, r in rows.items() if r["loads"] == "unreviewed"]
    assert not unreviewed


def test_each_entry_is_cited_and_exists_in_a_snapshot():
    table = codeflags.table()
    options: dict[str, set[str]] = {}
    for engine, version in available_snapshots():
        owner = codeflags.SNAPSHOT_ENGINE.get(engine)
        if owner:
            options.setdefault(owner, set()).update(load_snapshot(engine, version)["options"])
    for engine, rows in table.items():
        for flag, row in rows.items():
            assert flag in options[engine], f"{engine} {flag}: in no parser snapshot (stale)"
            assert row["loads"] in ("code", "file", "egress", "none")
            if row["loads"] == "none":
                assert row.get("why"), flag
            else:
                assert row.get("cite") and ("/" in row["cite"] or "help:" in row["cite"]), flag
    for engine, flags in ISSUE_FLAGS.items():
        for f in flags:
            assert table[engine][f]["loads"] in ("code", "file"), (engine, f)
    for engine, flags in EGRESS_FLAGS.items():
        for f in flags:
            assert table[engine][f]["loads"] == "egress", (engine, f)


# ----------------------------------------------------------------- code flags found by code path (issue 37)

PINNED = {"vllm": "0.33.0", "sglang": "0.5.23"}  # the releases whose wheels e2e/flagdrift/record-code-sites.sh read


def test_every_code_flag_names_a_recorded_call_site():
    """A code entry's ``site`` is a dynamic-import call site recorded from the pinned wheel (data/codesites/):
    a citation that names no such site (renamed, or never there) fails here."""
    for engine, version in PINNED.items():
        rec = codeflags.code_sites(engine, version)
        assert rec is not None and rec["engine"] == engine and rec["version"] == version and rec["sites"]
        for flag, row in codeflags.table()[engine].items():
            if row["loads"] != "code":
                assert "site" not in row, (engine, flag)
                continue
            if row.get("site") is None:
                assert row.get("no_site"), f"{engine} {flag}: cite its call site (data/codesites) or say why none"
                continue
            assert row["site"] in rec["sites"], f"{engine} {flag}: {row['site']} is not a recorded site"
            path, _, func = row["site"].partition(":")
            assert path in row["cite"] and func.rpartition(".")[2] in row["cite"], (engine, flag)


def test_flags_derived_from_the_code_path_are_classified():
    """Every flag whose value the recorder followed into a dynamic import is in the table, and the ones found only
    that way (their names say nothing) are code: vLLM --distributed-executor-backend (issue 37)."""
    table = codeflags.table()
    for engine, version in PINNED.items():
        derived = codeflags.code_sites(engine, version)["derived"]
        assert derived, engine
        for flag, sites in derived.items():
            row = table[engine].get(flag)
            assert row is not None, f"{engine} {flag}: reaches {sites}; classify it"
            if row["loads"] == "none":
                assert "code path" in row["why"] or "owned" in row["why"], (engine, flag)
            elif row["loads"] == "code":
                assert row.get("site") is None or row["site"] in sites, (engine, flag)
    vllm = codeflags.code_sites("vllm", "0.33.0")["derived"]
    assert vllm["--distributed-executor-backend"] == ["vllm/v1/executor/abstract.py:Executor.get_class"]
    assert table["vllm"]["--distributed-executor-backend"]["loads"] == "code"
    assert "--distributed-executor-backend" in codeflags.candidates(
        {"options": {"--distributed-executor-backend": {}}, "derived": vllm})
    assert not codeflags.CANDIDATE.search("--distributed-executor-backend")  # found by its code path, not its name


def _code_sites_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("code_sites", ROOT / "e2e" / "flagdrift" / "code_sites.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_recorder_follows_a_flag_into_an_import(tmp_path):
    pkg = tmp_path / "eng" / "sub"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(
        "import importlib, pickle\n"
        "class Executor:\n"
        "    @staticmethod\n"
        "    def get_class(distributed_executor_backend):\n"
        "        return resolve_obj_by_qualname(distributed_executor_backend)\n"
        "def load(cfg):\n"
        "    path = cfg.connector_module_path\n"
        "    return importlib.import_module(path)\n"
        "def fixed(data):\n"
        "    importlib.import_module('json')\n"
        "    return pickle.loads(data)\n"
        "def unrelated(max_num_seqs):\n"
        "    return max_num_seqs\n")
    got = _code_sites_module().scan(tmp_path, "eng", {"distributed_executor_backend": "--distributed-executor-backend",
                                                      "connector_module_path": "--connector-module-path",
                                                      "max_num_seqs": "--max-num-seqs"})
    assert got["sites"] == {"eng/sub/a.py:Executor.get_class": ["resolve_obj_by_qualname"],
                            "eng/sub/a.py:load": ["import_module"], "eng/sub/a.py:fixed": ["pickle.loads"]}
    assert got["derived"] == {"--connector-module-path": ["eng/sub/a.py:load"],
                              "--distributed-executor-backend": ["eng/sub/a.py:Executor.get_class"]}


@pytest.mark.parametrize("engine, args, want", [
    ("vllm", ["--otlp-traces-endpoint", "http://x:4317"], [(0, "--otlp-traces-endpoint", "egress")]),
    ("vllm", ["--otlp-traces=x"], [(0, "--otlp-traces-endpoint", "egress")]),  # an abbreviation
    ("vllm", ["--kv-events-config", "{}", "--tool-server", "a:1"],
     [(0, "--kv-events-config", "egress"), (2, "--tool-server", "egress")]),
    ("vllm", ["--distributed-executor-backend", "evil.Executor"], [(0, "--distributed-executor-backend", "code")]),
    ("sglang", ["--encoder-urls", "http://e:1", "--sidecar", "m"],
     [(0, "--encoder-urls", "egress"), (2, "--sidecar", "code")]),
    ("sglang", ["--remote-instance-weight-loader-seed-instance-ip", "10.0.0.1"],
     [(0, "--remote-instance-weight-loader-seed-instance-ip", "egress")]),
])
def test_egress_and_code_path_flags_are_found(engine, args, want):
    version = PINNED[engine]
    spec = cr(engine={"name": engine, "version": version, "extraArgs": args}, gpu={"type": "b300", "count": 1}).spec
    assert code_arg_uses(spec) == want


def test_egress_flags_allowed_by_their_own_list():
    spec = cr(engine={"extraArgs": ["--otlp-traces-endpoint", "otel:4317", "--chat-template", "/t"]}).spec
    assert codes(check_policy(spec, TenancyPolicy(code_args=("--chat-template", "--otlp-traces-endpoint")))) == [
        ("PolicyEgressArgNotAllowed", "spec.engine.extraArgs[0]")]  # the code list does not allow egress
    assert codes(check_policy(spec, TenancyPolicy(egress_args=("--otlp-traces-endpoint", "--chat-template")))) == [
        ("PolicyCodeArgNotAllowed", "spec.engine.extraArgs[2]")]  # nor the egress list code
    assert check_policy(spec, TenancyPolicy(code_args=("--chat-template",),
                                            egress_args=("--otlp-traces-endpoint",))) == []
    [f] = check_policy(cr(engine={"extraArgs": ["--tool-server", "x:1"]}).spec, TenancyPolicy())
    assert f.code == "PolicyEgressArgNotAllowed" and "policy.allowedEgressArgs" in f.message
    assert "--allowed-egress-arg" in f.message and "--tool-server" in f.message


def test_refresh_adds_new_candidates_as_unreviewed():
    doc = {"engines": {"vllm": {"--chat-template": {"loads": "file", "cite": "x/y.py f"}}}}
    snap = {"options": {"--chat-template": {}, "--new-plugin": {}, "--max-num-seqs": {}, "--no-x-plugin": {}}}
    doc, added = codeflags.refresh(doc, {"vllm": snap, "unknown-engine": snap})
    assert added == ["vllm --new-plugin"] and doc["engines"]["vllm"]["--new-plugin"]["loads"] == "unreviewed"
    assert codeflags.risky_flags("vllm")["--tool-parser-plugin"] == "code"


def test_the_refresh_command_checks_clean():
    p = subprocess.run([sys.executable, "-m", "specdeploy.core.codeflags", "--check"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "", p.stdout + p.stderr


# ----------------------------------------------------------------- flags, env, render


def _parse(*argv):
    from specdeploy.cli.common import add_policy_args, policy_args

    p = argparse.ArgumentParser()
    add_policy_args(p)
    return policy_args(p.parse_args(list(argv)))


def test_operator_flags_build_the_policy_and_round_trip_the_env():
    assert _parse() == TenancyPolicy()
    p = _parse("--allowed-token-secret-key", "HF_TOKEN", "--allow-trust-remote-code-namespace", "team-a",
               "--allow-trust-remote-code-model", "moonshotai", "--allowed-code-arg=--chat-template",
               "--allowed-egress-arg=--tool-server",
               "--allowed-toleration-key=", "--allowed-node-selector-key=zone", "--allowed-priority-class=high")
    assert (p.token_secret_keys, p.trust_remote_code_namespaces, p.trust_remote_code_models, p.code_args,
            p.toleration_keys, p.node_selector_keys, p.priority_classes) == (
        ("HF_TOKEN",), ("team-a",), ("moonshotai",), ("--chat-template",), (), ("zone",), ("high",))
    assert p.egress_args == ("--tool-server",)
    assert TenancyPolicy.from_env(p.to_env()) == p
    from specdeploy.cli.common import UsageError

    with pytest.raises(UsageError):
        _parse("--allowed-egress-arg=tool-server")

    with pytest.raises(UsageError):
        _parse("--allowed-code-arg=chat-template")
    with pytest.raises(UsageError):
        _parse("--allowed-toleration-key=a b")


def test_render_applies_the_policy_with_the_webhooks_codes(tmp_path):
    ex = ROOT / "examples" / "kimi-k2.6-rtx-pro-6000-sglang"
    base = [str(Path(sys.executable).parent / "specdeploy"), "render", "-f", str(ex / "speculativedeployment.yaml"),
            "--drafter-config", str(ex / "drafter.config.json"), "--target-config", str(ex / "target.config.json"),
            "-o", "json"]
    p = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["rendered"] is False and [f["code"] for f in doc["findings"]] == ["PolicyTrustRemoteCodeNotAllowed"]
    assert "refused by the tenancy policy" in p.stderr
    p = subprocess.run(base + ["--allow-trust-remote-code-model", "moonshotai"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert any(i["kind"] == "Deployment" for i in json.loads(p.stdout)["items"])


def test_the_webhook_refuses_with_the_same_codes():
    from specdeploy.controller import admission

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "specdeploy.io", "version": "v1alpha1", "kind": "SpeculativeDeployment"},
        "resource": {"group": "specdeploy.io", "version": "v1alpha1", "resource": "speculativedeployments"},
        "name": "x", "namespace": "team-a", "operation": "CREATE", "userInfo": {"username": "u"},
        "object": json.loads(cr(target={"trustRemoteCode": True},
                                engine={"extraArgs": ["--middleware", "m.M"]}).model_dump_json(by_alias=True,
                                                                                                exclude_none=True))}}
    r = admission.review(body, configs_lookup=lambda ns, spec: (None, None))["response"]
    assert r["allowed"] is False
    assert "PolicyTrustRemoteCodeNotAllowed" in r["status"]["message"]
    assert "PolicyCodeArgNotAllowed" in r["status"]["message"]
    ok = admission.review(body, configs_lookup=lambda ns, spec: (None, None),
                          policy=TenancyPolicy(trust_remote_code_namespaces=("team-a",),
                                               code_args=("--middleware",)))["response"]
    assert "Policy" not in json.dumps(ok)


# ----------------------------------------------------------------- rules the mutation run found untested


def test_every_claim_is_checked_not_only_the_first():
    p = TenancyPolicy(pvcs=("models",))
    spec = cr(target={"pvc": {"claimName": "models"}}, drafter={"pvc": {"claimName": "other"}}).spec
    assert codes(check_policy(spec, p)) == [("PolicyClaimNotAllowed", "spec.drafter.pvc.claimName")]
    spec = cr(target={"pvc": {"claimName": "models"}}, tuning={"storage": "pvc", "pvc": {"claimName": "other"}}).spec
    assert codes(check_policy(spec, p)) == [("PolicyClaimNotAllowed", "spec.tuning.pvc.claimName")]
    spec = cr(target={"pvc": {"claimName": "models"}}, cache={"type": "pvc", "pvc": {"claimName": "other"}}).spec
    assert codes(check_policy(spec, p)) == [("PolicyClaimNotAllowed", "spec.cache.pvc.claimName")]
    labelled = TenancyPolicy(pvc_label=("k", "v"))  # the first claim undecidable here, the second refused
    spec = cr(target={"pvc": {"claimName": "a"}}, drafter={"pvc": {"claimName": "b"}}).spec
    assert codes(check_policy(spec, labelled, {"b": {}})) == [("PolicyClaimNotAllowed", "spec.drafter.pvc.claimName")]
    assert codes(check_policy(spec, labelled, {"a": {"k": "v"}, "b": None})) == [
        ("PolicyClaimNotAllowed", "spec.drafter.pvc.claimName")]


def test_a_registry_prefix_without_a_slash():
    from specdeploy.core.policy import image_allowed

    assert image_allowed("registry.example.com/ml/v:1", ("registry.example.com",))
    assert image_allowed("registry.example.com/ml/v:1", ("registry.example.com/",))
    assert not image_allowed("registry.example.com.evil/ml/v:1", ("registry.example.com",))


def test_a_negation_before_a_code_flag_does_not_end_the_scan():
    spec = cr(engine={"version": "0.25.0", "extraArgs": ["--no-enable-prefix-caching", "--middleware", "m.M"]}).spec
    assert [(i, f) for i, f, _ in code_arg_uses(spec)] == [(1, "--middleware")]


def test_the_digest_does_not_depend_on_key_order():
    from specdeploy.controller import ownership as own

    assert own.digest({"a": 1, "b": {"c": 2, "d": 3}}) == own.digest({"b": {"d": 3, "c": 2}, "a": 1})
