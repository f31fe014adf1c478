"""Generated files match their sources; the CRD is structural and carries what users need."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from testkit import EXAMPLES, FIXTURES, ROOT
from specdeploy import generate
from specdeploy.cli import build_parser
from specdeploy.api import types
from specdeploy.api.crd import CRD_FILE, build_crd
from specdeploy.core.catalog import CATALOG


def test_generated_files_are_up_to_date():
    stale = generate.write_all(ROOT, check=True, parser=build_parser())
    assert stale == [], f"run `specdeploy generate`: {stale}"


def test_generate_check_detects_drift(tmp_path):
    for rel in ("crds", "docs/reference", "docs/concepts"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "docs/concepts/drafter-compatibility.md").write_text(
        "x\n<!-- BEGIN GENERATED: checks -->\nold\n<!-- END GENERATED: checks -->\n")
    assert len(generate.write_all(tmp_path, parser=build_parser())) == len(generate.targets(tmp_path, build_parser()))
    assert generate.write_all(tmp_path, check=True, parser=build_parser()) == []
    crd = tmp_path / "crds" / CRD_FILE
    crd.write_text(crd.read_text().replace("shortNames", "shortNamez"))
    assert generate.write_all(tmp_path, check=True, parser=build_parser()) == [str(crd)]


def _crd_schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _nodes(schema, path="$"):
    yield path, schema
    for k, v in schema.get("properties", {}).items():
        yield from _nodes(v, f"{path}.{k}")
    if "items" in schema:
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")


def test_crd_schema_is_structural():
    for path, node in _nodes(_crd_schema()):
        assert "$ref" not in node and "anyOf" not in node and "allOf" not in node, path
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "nullable" not in node, path


def test_every_spec_field_has_a_description():
    for path, node in _nodes(_crd_schema()["properties"]["spec"], "spec"):
        if path.endswith(("[]", "{}")) and node.get("type") != "object":
            continue  # scalar list items and map values are described by their field
        assert node.get("description"), f"{path} has no description"


def test_crd_names_subresources_and_columns():
    crd = build_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "speculativedeployments.specdeploy.io"
    assert spec["names"]["kind"] == "SpeculativeDeployment"
    assert spec["names"]["plural"] == "speculativedeployments"
    assert spec["names"]["shortNames"] == ["specdeploy"]
    v = spec["versions"][0]
    assert v["name"] == "v1alpha1" and v["served"] and v["storage"]
    assert v["subresources"]["status"] == {}
    assert v["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    cols = [c["name"] for c in v["additionalPrinterColumns"]]
    for want in ("Engine", "Target", "Drafter", "GPU", "Ready", "AcceptLen", "Age"):
        assert want in cols


def test_crd_cel_rules_present():
    s = _crd_schema()
    spec = s["properties"]["spec"]
    spec_rules = " ".join(r["rule"] for r in spec["x-kubernetes-validations"])
    assert "self.gpu.count % self.nodes == 0" in spec_rules
    spec_rules = " ".join(r["rule"] for r in spec["properties"]["speculation"]["x-kubernetes-validations"])
    assert "self.method == 'ddtree'" in spec_rules and "self.blockSize" in spec_rules
    assert s["properties"]["spec"]["properties"]["speculation"]["properties"]["draftWindow"]["x-kubernetes-int-or-string"]
    assert "metadata.name" in s["x-kubernetes-validations"][0]["rule"]


def test_conditions_are_a_list_map_keyed_by_type():
    cond = _crd_schema()["properties"]["status"]["properties"]["conditions"]
    assert cond["x-kubernetes-list-type"] == "map" and cond["x-kubernetes-list-map-keys"] == ["type"]
    props = cond["items"]["properties"]
    for f in ("type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"):
        assert f in props


@pytest.mark.parametrize("cr_file", sorted(EXAMPLES.glob("*/speculativedeployment.yaml")), ids=lambda p: p.parent.name)
def test_examples_validate_against_crd_schema_and_types(cr_file):
    doc = yaml.safe_load(cr_file.read_text())
    schema = _crd_schema()
    # jsonschema does not know the Kubernetes extensions; strip them for the structural part.
    jsonschema.validate(doc, json.loads(json.dumps(schema).replace('"x-kubernetes-int-or-string": true', '"type": ["integer", "string"]')))
    types.SpeculativeDeployment.model_validate(doc)


@pytest.mark.parametrize("bad", [
    {"spec": {"engine": {"name": "tgi"}}},
    {"spec": {"gpu": {"type": "a100"}}},
    {"spec": {"gpu": {"count": 0}}},
    {"spec": {"target": {"model": "-x"}}},
])
def test_crd_schema_rejects(bad):
    doc = yaml.safe_load((EXAMPLES / "qwen3.6-27b-b300-vllm/speculativedeployment.yaml").read_text())
    for section, fields in bad["spec"].items():
        doc["spec"][section].update(fields)
    schema = json.loads(json.dumps(_crd_schema()).replace('"x-kubernetes-int-or-string": true', '"type": ["integer", "string"]'))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


def test_example_configs_are_the_fixtures():
    pairs = {
        "kimi-k2.6-rtx-pro-6000-sglang": ("kimi-k2.7-code-dflash.drafter.json", "kimi-k2.6.target.json"),
        "qwen3.6-27b-b300-vllm": ("qwen3.6-27b-dflash.drafter.json", "qwen3.5-27b.target.json"),
    }
    for ex, (d, t) in pairs.items():
        assert (EXAMPLES / ex / "drafter.config.json").read_bytes() == (FIXTURES / d).read_bytes()
        assert (EXAMPLES / ex / "target.config.json").read_bytes() == (FIXTURES / t).read_bytes()


def _emitted_codes() -> set[str]:
    codes = set()
    src = ROOT / "operator/specdeploy"
    files = [*sorted(src.glob("core/checker/*.py")), src / "core/modelconfig.py", *sorted(src.glob("core/render/*.py")),
             src / "core/extraargs.py"]
    for f in files:
        tree = ast.parse(f.read_text())
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            fn, arg = n.func, None
            if isinstance(fn, ast.Attribute) and fn.attr in ("err", "warn", "info") and n.args:
                arg = n.args[0]
            elif isinstance(fn, ast.Name) and fn.id in ("Finding", "ArgProblem") and len(n.args) > 1:
                arg = n.args[1]
            if isinstance(arg, ast.Name) and arg.id == "code":
                continue  # Out.add: the plumbing every err/warn/info goes through
            for a in ([arg.body, arg.orelse] if isinstance(arg, ast.IfExp) else [arg] if arg else []):
                assert isinstance(a, ast.Constant), f"{f}:{n.lineno}: finding codes must be literals"
                codes.add(a.value)
    return codes


def test_every_emitted_code_is_documented_and_none_is_dead():
    emitted = _emitted_codes()
    assert len(emitted) > 40
    assert emitted - set(CATALOG) == set(), "add these to core/catalog.py"
    assert set(CATALOG) - emitted == set(), "these catalog entries are never emitted"
    for c in CATALOG.values():
        assert c.severity in ("error", "warning", "info") and c.why and c.fix


def test_no_operator_package_init():
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_no_category_shadows_a_name_kubectl_resolves():
    """kubectl expands categories before short names: a category that is also a kind's name must hold
    that one kind only, or `kubectl get specdeploy NAME` asks for two resources and fails."""
    from specdeploy.api.crd import build_bench_crd, build_crd

    crds = [build_crd(), build_bench_crd()]
    members: dict[str, set[str]] = {}
    for crd in crds:
        for c in crd["spec"]["names"].get("categories", []):
            members.setdefault(c, set()).add(crd["spec"]["names"]["kind"])
    for crd in crds:
        n = crd["spec"]["names"]
        for name in [n["plural"], n["singular"], *n.get("shortNames", [])]:
            assert members.get(name, {n["kind"]}) == {n["kind"]}, (name, members[name])
