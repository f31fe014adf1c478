"""Every rendered built-in object passes kubernetes-validate --strict; the examples pass the chart's CRD schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from chart_helpers import CUSTOM_KINDS, KUBE_VERSIONS, ROOT, VALUE_SETS, one, render, render_text

EXAMPLE_CRS = sorted((ROOT / "examples").glob("*/speculativedeployment.yaml"))


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_builtin_object_validates_strictly(values, version):
    checked = 0
    for obj in render(VALUE_SETS[values]):
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} against Kubernetes {version}: {e.message} at "
                        f"{'.'.join(map(str, e.path))}")
        checked += 1
    assert checked >= 5


def test_only_known_custom_kinds():
    """kubernetes-validate cannot check these: the chart renders no other non-built-in kind."""
    kinds = {(o["apiVersion"], o["kind"]) for values in VALUE_SETS.values() for o in render(values)}
    custom = {k for k in kinds if k[0].split("/")[0].endswith((".coreos.com", "cert-manager.io"))}
    assert custom == CUSTOM_KINDS


def test_kubernetes_validate_command_line(tmp_path):
    """The kubernetes-validate command itself, as CI would run it, on the default rendering."""
    path = tmp_path / "chart.yaml"
    path.write_text(render_text())
    exe = Path(sys.executable).parent / "kubernetes-validate"
    p = subprocess.run([str(exe), "--strict", "-k", KUBE_VERSIONS[-1], str(path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(" passed for resource ") == len(render()), p.stdout


def _crd_schema() -> dict:
    crd = one(render(), "CustomResourceDefinition", "speculativedeployments.specdeploy.io")
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("path", EXAMPLE_CRS, ids=lambda p: p.parent.name)
def test_examples_validate_against_the_chart_crd(path):
    assert EXAMPLE_CRS, "no examples found"
    cr = yaml.safe_load(path.read_text())
    jsonschema.validate(cr, _crd_schema())


def test_crd_schema_rejects_a_broken_example():
    cr = yaml.safe_load(EXAMPLE_CRS[0].read_text())
    cr["spec"]["gpu"]["count"] = "eight"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cr, _crd_schema())
