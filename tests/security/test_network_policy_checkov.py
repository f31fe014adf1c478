"""Issue 24, item 6, scanned by checkov: with the engine NetworkPolicy on, every engine pod the operator renders has
a NetworkPolicy selecting it (checkov's graph check CKV2_K8S_6, "Minimize the admission of pods which lack an
associated NetworkPolicy"); the same pods rendered without one fail it (so the scan can fail). Issue 37: a
SpeculativeBenchmark's variant engine pods too, with their own NetworkPolicy (build_variant_network_policy). Pods with
spec.engine.apiKey keep passing the restricted-profile checks of test_pod_security.py."""

from __future__ import annotations

import json

import pytest
import yaml

from test_pod_security import CHECKS, examples, pod_templates, run_checkov, variant
from specdeploy.core.render import RenderError, render

NP_CHECK = "CKV2_K8S_6"


def scanned_objects() -> tuple[dict[str, list[dict]], list[str], list[str]]:
    """({file name: objects}, names of guarded engine pods, names of unguarded ones)."""
    files: dict[str, list[dict]] = {}
    guarded, unguarded = [], []
    for path, doc, t, d in examples():
        base = (path.split("/")[-2] if path.count("/") > 1 else path).replace(".", "-")
        for label, policy in (("guarded", ()), ("unguarded", None)):
            # another deployment (another instance label) for the unguarded pods: checkov matches a NetworkPolicy
            # to pods by labels only, whatever their namespace
            renamed = {**doc, "metadata": {**doc["metadata"], "name": f"{doc['metadata']['name']}-{label}"}}
            cr = variant(renamed, engine={**doc["spec"]["engine"], "apiKey": {"secretKeyRef": {"name": "engine-key"}}})
            try:
                r = render(cr, t, d, network_policy=policy)
            except RenderError:
                continue
            objs: list[dict] = []
            for obj in r.objects:
                if obj["kind"] == "NetworkPolicy":
                    objs.append(obj)
                for role, tmpl in pod_templates(obj):
                    name = f"{base}-{label}-{role}"[:63].strip("-")
                    objs.append({"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": name, "namespace": "models", "labels": tmpl["metadata"]["labels"]},
                                 "spec": tmpl["spec"]})
                    (guarded if label == "guarded" else unguarded).append(name)
            files[f"{base}-{label}"] = objs
    # issue 37: a SpeculativeBenchmark's variant engines, with their NetworkPolicy (guarded) and without (another
    # benchmark's name: other labels)
    from specdeploy.core.bench.plan import Variant
    from specdeploy.core.bench.render import BenchOwner, build_variant_network_policy, render_variant

    path, doc, t, d = next(e for e in examples() if "qwen3.6-27b-b300-vllm" in e[0])
    for label, guard in (("guarded", True), ("unguarded", False)):
        owner = BenchOwner(f"sweep-{label}", "models", "0b6c7a52-5d0e-4a55-9f57-3c3c1c7d0a12")
        objs = []
        for v in (Variant("baseline", False), Variant("k3", True, 3)):
            cr = variant(doc, engine={**doc["spec"]["engine"], "apiKey": {"secretKeyRef": {"name": "engine-key"}}})
            vo = render_variant(cr, t, d, owner, v)
            if guard:
                objs.append(build_variant_network_policy(owner, vo, ("monitoring",)))
            for obj in vo.objects:
                for role, tmpl in pod_templates(obj):
                    name = f"bench-{v.name}-{label}-{role}"
                    objs.append({"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": name, "namespace": "models", "labels": tmpl["metadata"]["labels"]},
                                 "spec": tmpl["spec"]})
                    (guarded if guard else unguarded).append(name)
        files[f"benchmark-{label}"] = objs
    return files, guarded, unguarded


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    files, guarded, unguarded = scanned_objects()
    d = tmp_path_factory.mktemp("netpol")
    for name, objs in files.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return files, guarded, unguarded, run_checkov(d, checks=(NP_CHECK, *CHECKS), by="resource")


def test_every_guarded_engine_pod_has_a_network_policy(scan):
    files, guarded, unguarded, result = scan
    assert len(guarded) >= 3 and len(unguarded) == len(guarded), (guarded, unguarded)
    for name in guarded:
        got = result.get(name)
        assert got is not None, f"checkov did not scan pod {name}"
        assert NP_CHECK in got["passed"] and NP_CHECK not in got["failed"], (name, got)
    for name in unguarded:
        assert NP_CHECK in result[name]["failed"], (name, result[name])


def test_pods_with_an_api_key_still_pass_the_restricted_profile(scan):
    files, guarded, unguarded, result = scan
    for name in guarded + unguarded:
        failed = result[name]["failed"] & set(CHECKS)
        assert not failed, (name, sorted(failed))
    # the key is a Secret reference in every engine container: never a value
    for objs in files.values():
        for o in objs:
            if o["kind"] == "Pod":
                [engine] = [c for c in o["spec"]["containers"] if c["name"] == "engine"]
                keys = [e for e in engine["env"] if e["name"] in ("VLLM_API_KEY", "SPECDEPLOY_ENGINE_API_KEY")]
                assert keys and all(set(e) == {"name", "valueFrom"} for e in keys), json.dumps(keys)
