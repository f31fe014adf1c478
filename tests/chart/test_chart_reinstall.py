"""`helm uninstall` then `helm install`, 20 times in a row, with the operator running and leading the whole time.

This is the worst case of a real cluster, where the operator pod keeps renewing its Lease for its termination grace
period after `helm uninstall` deleted the Deployment: a Lease owned by the release was deleted by the uninstall,
created again by the still-renewing operator without Helm's ownership metadata, and the next `helm install`
failed ("Lease ... cannot be imported ... invalid ownership metadata"). The operator owns its Lease now (as
client-go's leader election does): the chart renders none, and the Lease the operator writes carries its own
labels, never Helm's.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from chart_helpers import CHART, HELMS, ROOT
from specdeploy.controller.leader import LEASE_LABELS
from specdeploy_dev.harness import Cluster, kubectl_available, wait_for

pytestmark = [pytest.mark.skipif(not kubectl_available(), reason="needs kubectl"), pytest.mark.serial]
NS, CYCLES = "specdeploy-system", 20
# short leader-election timings: the operator renews (and, with a Lease the uninstall deleted, would recreate it)
# every second
TIMINGS = ["--set", "leaderElection.leaseDurationSeconds=3", "--set", "leaderElection.renewDeadlineSeconds=2",
           "--set", "leaderElection.retryPeriodSeconds=1", "--set", "replicaCount=1"]


def test_uninstall_install_twenty_times_with_the_operator_leading(tmp_path):
    binary = HELMS["helm3"]
    if not binary.exists():
        pytest.skip(f"{binary} is installed by .ci/install-tools")
    with Cluster(workdir=tmp_path / "cluster") as cluster:
        env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "HOME": str(tmp_path),
               "HELM_CACHE_HOME": str(tmp_path / "hc"), "HELM_CONFIG_HOME": str(tmp_path / "hcfg"),
               "HELM_DATA_HOME": str(tmp_path / "hd")}

        def helm(*args: str) -> None:
            p = subprocess.run([str(binary), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, f"helm {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"

        def install() -> None:
            helm("install", "specdeploy", str(CHART), "-n", NS, "--create-namespace", *TIMINGS)

        def held_lease() -> dict | None:
            p = cluster.kubectl("get", "lease", "specdeploy-leader", "-n", NS, "-o", "json", check=False)
            lease = json.loads(p.stdout) if p.returncode == 0 else None
            return lease if lease and lease["spec"].get("holderIdentity") else None

        install()
        # the operator runs the installed Deployment's args (as `specdeploy dev up` does) and keeps running, and
        # renewing, across every uninstall below
        cluster.play_operator_pod(NS, "specdeploy")
        try:
            lease = wait_for(held_lease, 60, "the operator to take its Lease")
            labels = lease["metadata"].get("labels") or {}
            assert labels == LEASE_LABELS, labels  # the operator's labels, not the release's
            assert not (lease["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name")
            for _ in range(CYCLES):
                helm("uninstall", "specdeploy", "-n", NS)
                # the operator holds its Lease again (had the uninstall deleted it, it is recreated by now) ...
                wait_for(held_lease, 30, "the operator to hold its Lease after the uninstall")
                install()  # ... and the install does not trip over it
            assert cluster.operator.poll() is None, "the operator exited"
        except Exception:
            print(cluster.operator_log.read_text(errors="replace")[-4000:])
            raise
        finally:
            cluster.stop_operator()
        # a graceful stop hands the Lease back: a reinstall's operator takes it at once
        lease = cluster.get_json("lease", "specdeploy-leader", "-n", NS)
        assert lease["spec"].get("holderIdentity", "") == ""
