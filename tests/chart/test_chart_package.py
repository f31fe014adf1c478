"""The chart as a product: `helm package` (Helm 3 and 4) with the chart version tied to the package version
(pyproject.toml), its README (`helm show readme`), icon and Artifact Hub annotations in step with the CRDs and image."""

from __future__ import annotations

import re
import tarfile
import tomllib

import pytest
import yaml

from chart_helpers import CHART, ROOT, run_helm
from specdeploy.api.crd import build_bench_crd, build_crd

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_chart_version_is_the_package_version():
    assert CHART_YAML["version"] == CHART_YAML["appVersion"] == VERSION


@pytest.mark.parametrize("which", ["helm3", "helm4"])
def test_helm_package(which, tmp_path):
    out = run_helm(which, "package", str(CHART), "-d", str(tmp_path)).stdout
    tgz = tmp_path / f"specdeploy-{VERSION}.tgz"
    assert tgz.exists(), out
    with tarfile.open(tgz) as t:
        names = set(t.getnames())
        chart = yaml.safe_load(t.extractfile("specdeploy/Chart.yaml").read())
        readme = t.extractfile("specdeploy/README.md").read().decode()
    for f in ("README.md", "icon.svg", "values.yaml", "values.schema.json", "templates/crd.yaml",
              "templates/crd-benchmark.yaml", "templates/NOTES.txt", "files/prometheus-rules.yaml"):
        assert f"specdeploy/{f}" in names, f
    assert chart["version"] == chart["appVersion"] == VERSION
    assert readme == (CHART / "README.md").read_text()
    # what a user of the packaged chart sees
    assert run_helm(which, "show", "readme", str(tgz)).stdout.strip() == readme.strip()
    shown = yaml.safe_load(run_helm(which, "show", "chart", str(tgz)).stdout)
    assert shown["icon"].endswith("/charts/specdeploy/icon.svg") and shown["icon"].startswith("https://")
    run_helm(which, "lint", "--strict", str(tgz))


def test_readme_names_both_crds_and_the_values_it_sets():
    text = (CHART / "README.md").read_text()
    assert "speculativedeployments.specdeploy.io" in text and "speculativebenchmarks.specdeploy.io" in text
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in re.findall(r"--set '?([a-zA-Z.]+)=", text):
        node = values
        for part in key.split(".")[:-1]:
            assert isinstance(node, dict) and part in node, key
            node = node[part]


def test_artifacthub_annotations_follow_the_crds_and_the_image():
    ann = CHART_YAML["annotations"]
    crds = yaml.safe_load(ann["artifacthub.io/crds"])
    want = [(c["spec"]["names"]["kind"], c["spec"]["versions"][0]["name"], c["metadata"]["name"])
            for c in (build_crd(), build_bench_crd())]
    assert [(c["kind"], c["version"], c["name"]) for c in crds] == want
    assert all(c["description"] and c["displayName"] for c in crds)
    (image,) = yaml.safe_load(ann["artifacthub.io/images"])
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert image["image"] == f"{values['image']['repository']}:{CHART_YAML['appVersion']}"
    assert ann["artifacthub.io/license"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert ann["artifacthub.io/operator"] == "true"
    for link in yaml.safe_load(ann["artifacthub.io/links"]):
        rel = link["url"].split("/blob/main/", 1)[1]
        assert (ROOT / rel).exists(), link
    assert (CHART / "icon.svg").read_text().lstrip().startswith("<svg")
