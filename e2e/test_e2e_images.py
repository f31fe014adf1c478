"""The images, run: the operator image as the chart runs it, against the embedded API server.

Opt-in: ``SPECDEPLOY_E2E_IMAGES=1`` (``bash .ci/test`` sets it after ``bash images/build.sh`` built the
images with podman). ``helm template charts/specdeploy | kubectl apply``, then the chart's operator
container runs from ``ghcr.io/specdeploy/operator:<version>`` with podman exactly as its pod spec says
(:mod:`specdeploy_dev.kubelet_podman`: UID 65532, read-only root filesystem with only the chart's /tmp
volume writable, every capability dropped, no privilege escalation, RuntimeDefault seccomp, the memory
limit), on the host network with the kubeconfig mounted read-only. It publishes its webhook CA, admits
and refuses SpeculativeDeployments through its webhook, reconciles the example into a Deployment and
serves its metrics.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib

import pytest

from e2e_support import (HELM3 as HELM, QWEN, ROOT, apply_chart, configmap, embedded_only, example_cr, example_doc,
                         new_cluster, stop_cluster, wait_for)

RELEASE_NS = "specdeploy-system"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
OPERATOR_IMAGE = f"ghcr.io/specdeploy/operator:{VERSION}"
pytestmark = [pytest.mark.images, embedded_only, pytest.mark.skipif(not HELM.exists(), reason="helm3 is installed by .ci/setup-test")]


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {p.stderr.strip()}")
    return p


@pytest.fixture(scope="module")
def chart_cluster():
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: bash .ci/install-podman")
    if podman("image", "exists", OPERATOR_IMAGE, check=False).returncode != 0:
        pytest.fail(f"{OPERATOR_IMAGE} is not built: bash images/build.sh operator")
    c = new_cluster("images", operator=False)
    try:
        apply_chart(c, RELEASE_NS)
        c.play_operator_pod(RELEASE_NS, "specdeploy", image=OPERATOR_IMAGE, timeout=120)
        yield c
    finally:
        stop_cluster(c)


def test_the_operator_container_runs_as_the_chart_says(chart_cluster):
    c = chart_cluster
    (info,) = json.loads(podman("container", "inspect", c.operator_container).stdout)
    host = info["HostConfig"]
    assert info["Config"]["User"] == "65532:65532"
    assert host["ReadonlyRootfs"] is True
    assert not info.get("EffectiveCaps") and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] == 512 * 2**20  # the chart's limit
    assert {m["Destination"]: m["RW"] for m in info["Mounts"]}["/tmp"] is True
    assert podman("exec", c.operator_container, "id", "-u").stdout.strip() == "65532"
    # the root filesystem refuses writes; the chart's /tmp volume takes them
    p = podman("exec", c.operator_container, "touch", "/opt/specdeploy/x", check=False)
    assert p.returncode != 0 and "Read-only file system" in p.stderr + p.stdout
    podman("exec", c.operator_container, "touch", "/tmp/x")
    status = podman("exec", c.operator_container, "grep", "-E", "^(CapEff|NoNewPrivs|Seccomp):", "/proc/1/status").stdout
    fields = dict(line.split(":\t") for line in status.strip().splitlines())
    assert fields == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}, fields


def test_the_operator_image_holds_no_development_rig(chart_cluster):
    """The rig (specdeploy_dev, operator/dev/) is its own distribution: not in the image, and the rig's
    commands say what to install instead of failing with a traceback."""
    c = chart_cluster
    probe = "import importlib.util as u; print([m for m in ('specdeploy_dev', 'specdeploy_runtime_dev') if u.find_spec(m)])"
    assert podman("exec", c.operator_container, "python", "-c", probe).stdout.strip() == "[]"
    p = podman("exec", c.operator_container, "specdeploy", "dev", "apiserver", "--kubeconfig", "/tmp/kc", check=False)
    assert p.returncode == 2 and "specdeploy-dev" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_the_operator_container_admits_reconciles_and_serves_metrics(chart_cluster):
    c = chart_cluster
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        wait_for(lambda: c.get_json(kind, "specdeploy")["webhooks"][0]["clientConfig"].get("caBundle"), 120,
                 f"the operator container to publish its caBundle ({kind})")
    target, drafter = example_doc(QWEN, "target"), example_doc(QWEN, "drafter")
    for doc in (configmap("qwen36-27b-target-config", target), configmap("qwen36-27b-drafter-config", drafter)):
        c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(doc))
    ok = c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(example_cr(QWEN, "good")), check=False)
    assert ok.returncode == 0, ok.stderr
    wrong = example_cr(QWEN, "wrong-pair", target_cm="qwen36-27b-drafter-config")
    p = c.kubectl("apply", "-n", c.namespace, "-f", "-", input=json.dumps(wrong), check=False)
    assert p.returncode != 0 and p.stderr.startswith('The SpeculativeDeployment "wrong-pair" is invalid:'), p.stderr
    c.wait_condition("good", "DrafterCompatible", "True", timeout=120)
    wait_for(lambda: c.get_json("deployment", "good", "-n", c.namespace), 120, "the rendered Deployment")
    metrics = c.operator_metrics() or {}
    assert any(k.startswith("specdeploy_reconcile") for k in metrics), sorted(metrics)[:20]
