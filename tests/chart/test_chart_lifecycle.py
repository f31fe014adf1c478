"""The chart's life on the embedded cluster with real Helm 3 and 4, as docs/how-to/upgrade.md and install.md tell it:
CRDs first (`kubectl apply -f crds/`), then `helm install` (refused until both CRDs are adopted with the documented
commands), an upgrade turning monitoring on (refused with the chart's message while prometheus-operator's API is
missing, done once it is there), `helm uninstall` (what is left is exactly what install.md lists), and a reinstall
under another release name and namespace (refused until the documented adoption names it)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from chart_helpers import CHART, HELMS, ROOT, render
from specdeploy_dev.harness import Cluster, kubectl_available, wait_for
from testkit import minimal_crd

pytestmark = pytest.mark.skipif(not kubectl_available(), reason="needs kubectl")
CRDS = {"speculativedeployments.specdeploy.io", "speculativebenchmarks.specdeploy.io"}
UPGRADE_MD = ROOT / "docs" / "how-to" / "upgrade.md"


def adoption_commands(release: str, namespace: str) -> list[str]:
    """The two commands of upgrade.md's "Adopting CRDs that are already there", for this release."""
    text = UPGRADE_MD.read_text().split("### Adopting CRDs that are already there", 1)[1]
    block = text.split("```console", 1)[1].split("```", 1)[0]
    cmds = [c.strip() for c in block.strip().splitlines()]
    assert len(cmds) == 2 and all(c.startswith("kubectl ") for c in cmds), cmds
    return [c.replace("release-name=specdeploy ", f"release-name={release} ")
             .replace("release-namespace=specdeploy-system", f"release-namespace={namespace}") for c in cmds]




def _release_objects(values: dict, release: str, namespace: str) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of everything the chart renders for this release."""
    return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            for o in render(values, release=release, namespace=namespace)]


@pytest.mark.parametrize("which", sorted(HELMS))
def test_crds_first_then_helm_upgrade_uninstall_reinstall(which, tmp_path):
    binary = HELMS[which]
    if not binary.exists():
        pytest.skip(f"{binary} is installed by .ci/install-tools")
    with Cluster(workdir=tmp_path / "cluster") as cluster:
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "HOME": str(tmp_path),
               "HELM_CACHE_HOME": str(tmp_path / "hc"), "HELM_CONFIG_HOME": str(tmp_path / "hcfg"),
               "HELM_DATA_HOME": str(tmp_path / "hd")}

        def sh(cmd: str, ok: bool = True) -> subprocess.CompletedProcess:
            p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            if ok:
                assert p.returncode == 0, f"`{cmd}` failed:\n{p.stdout}\n{p.stderr}"
            return p

        def helm(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
            return sh(" ".join([str(binary), *args]), ok)

        def crd_owner(name: str) -> tuple[str | None, str | None]:
            a = cluster.get_json("crd", name)["metadata"].get("annotations") or {}
            return a.get("meta.helm.sh/release-name"), a.get("meta.helm.sh/release-namespace")

        # 1. CRDs first, as develop-locally.md does: Helm refuses them, naming the missing ownership
        sh("kubectl apply -f crds/")
        p = helm("install", "specdeploy", str(CHART), "-n", "specdeploy-system", "--create-namespace", ok=False)
        assert p.returncode != 0 and "invalid ownership metadata" in p.stderr, p.stderr
        for cmd in adoption_commands("specdeploy", "specdeploy-system"):
            sh(cmd)
        helm("install", "specdeploy", str(CHART), "-n", "specdeploy-system", "--create-namespace")
        assert {n: crd_owner(n) for n in CRDS} == {n: ("specdeploy", "specdeploy-system") for n in CRDS}

        # 2. monitoring on without prometheus-operator: the chart's own message, and the release is untouched
        p = helm("upgrade", "specdeploy", str(CHART), "-n", "specdeploy-system", "--reuse-values",
                 "--set", "prometheusRule.enabled=true", ok=False)
        assert p.returncode != 0
        assert "prometheusRule.enabled=true needs the prometheus-operator API monitoring.coreos.com/v1" in p.stderr
        history = json.loads(helm("history", "specdeploy", "-n", "specdeploy-system", "-o", "json").stdout)
        assert [r["status"] for r in history] == ["deployed"]
        # ... and with it (kube-prometheus-stack installed): the upgrade goes through
        monitoring = [minimal_crd("monitoring.coreos.com", k, f"{k.lower()}s") for k in
                      ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": monitoring}))
        wait_for(lambda: cluster.kubectl("get", "prometheusrules", "-A", check=False).returncode == 0, 30,
                 "the PrometheusRule API")
        on = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
              "podMonitor": {"labels": {"release": "kube-prometheus-stack"}}}
        helm("upgrade", "specdeploy", str(CHART), "-n", "specdeploy-system", "--reuse-values",
             "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
             "--set", "podMonitor.labels.release=kube-prometheus-stack")
        rule = cluster.get_json("prometheusrule", "specdeploy", "-n", "specdeploy-system")
        assert rule["spec"]["groups"]
        dep = cluster.get_json("deployment", "specdeploy", "-n", "specdeploy-system")
        env_of = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert json.loads(env_of["SPECDEPLOY_POD_MONITOR_LABELS"]) == {"release": "kube-prometheus-stack"}

        # 3. uninstall: only what install.md lists stays (both CRDs; the TLS Secret is the operator's and
        # no operator ran here)
        helm("uninstall", "specdeploy", "-n", "specdeploy-system")
        left = []
        for kind, ns, name in _release_objects(on, "specdeploy", "specdeploy-system"):
            args = [kind.lower(), name] + (["-n", ns] if ns else [])
            if cluster.kubectl("get", *args, check=False).returncode == 0:
                left.append(name if kind == "CustomResourceDefinition" else f"{kind}/{name}")
        assert sorted(left) == sorted(CRDS)
        assert helm("list", "-A", "-q").stdout.strip() == ""
        releases = cluster.get_json("secrets", "-n", "specdeploy-system", "-l", "owner=helm")["items"]
        assert releases == []

        # 4. reinstall under another name and namespace: refused on the kept CRDs' release annotation,
        # done once the documented adoption names the new release
        p = helm("install", "other", str(CHART), "-n", "other-system", "--create-namespace", ok=False)
        assert p.returncode != 0 and re.search(r"meta.helm.sh/release-name\" must equal \"other\"", p.stderr), p.stderr
        for cmd in adoption_commands("other", "other-system"):
            sh(cmd)
        helm("install", "other", str(CHART), "-n", "other-system", "--create-namespace")
        assert {n: crd_owner(n) for n in CRDS} == {n: ("other", "other-system") for n in CRDS}
        assert cluster.get_json("deployment", "other-specdeploy", "-n", "other-system")


def _notes(tmp_path, *sets: str) -> str:
    args = [str(HELMS["helm4"]), "install", "specdeploy", str(CHART), "-n", "specdeploy-system", "--dry-run=client"]
    for s in sets:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KUBECONFIG": str(tmp_path / "none")})
    assert p.returncode == 0, p.stderr
    return p.stdout.split("NOTES:", 1)[1]


def test_notes_name_both_crds_and_warn_about_the_unpublished_image(tmp_path):
    if not HELMS["helm4"].exists():
        pytest.skip("helm4 is installed by .ci/install-tools")
    notes = _notes(tmp_path)
    assert all(n in notes for n in CRDS) and "kept on helm uninstall" in notes
    assert "WARNING: image.repository is the default ghcr.io/specdeploy/operator" in notes
    assert "--set image.repository=" in notes
    assert "WARNING: image.repository" not in _notes(tmp_path, "image.repository=registry.example.com/sd/operator")
    manual = _notes(tmp_path, "crds.install=false")
    assert ("kubectl apply --server-side -f crds/specdeploy.io_speculativedeployments.yaml "
            "-f crds/specdeploy.io_speculativebenchmarks.yaml") in manual
    assert "helm uninstall deletes them" in _notes(tmp_path, "crds.keep=false")
