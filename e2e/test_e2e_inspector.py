"""config.json from a PersistentVolumeClaim: the operator's inspector Job (the test plays the Job
controller and the kubelet, so embedded API server only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from e2e_support import (QWEN, apply, child_names, configmap, embedded_only, example_cr, example_doc, exists, get,
                         wait_for)

pytestmark = embedded_only

RUNTIME = Path(sys.executable).parent / "specdeploy-runtime"


def inspector_message(config: Path, tmp_path: Path) -> str:
    """What the inspector container writes to its termination log, by the real runtime CLI."""
    log = tmp_path / "termination-log"
    p = subprocess.run([str(RUNTIME), "inspect-config", "--path", str(config), "--termination-log", str(log)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return log.read_text()


def test_pvc_target_resolved_by_inspector_job(cluster, tmp_path):
    c = cluster
    name = "pvc-qwen"
    job_name = f"{name}-inspect-target"
    cr = example_cr(QWEN, name, drafter_cm="pvc-qwen-drafter")
    cr["spec"]["target"] = {"model": "qwen3.6-27b", "pvc": {"claimName": "models"}}
    apply(c, configmap("pvc-qwen-drafter", example_doc(QWEN, "drafter")), cr)

    job = wait_for(lambda: get(c, "job", job_name), 30, f"Job {job_name}")
    pending = c.wait_condition(name, "DrafterCompatible", "Unknown", "InspectionPending")
    assert job_name in pending["message"]
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "models"
    command = pod_spec["containers"][0]["command"]
    assert command[:2] == ["specdeploy-runtime", "inspect-config"]
    assert command[command.index("--path") + 1] == "/models/target/qwen3.6-27b"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("SpeculativeDeployment", name)
    assert not exists(c, "deployment", name)

    # play the Job: its pod ran the inspector and terminated with the config in its message
    message = inspector_message(QWEN / "target.config.json", tmp_path)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{job_name}-e2e01", "labels": {"job-name": job_name, "batch.kubernetes.io/job-name": job_name}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "inspect", "image": pod_spec["containers"][0]["image"]}]}}
    apply(c, pod)
    c.kubectl("patch", "pod", pod["metadata"]["name"], "-n", c.namespace, "--subresource=status", "--type=merge", "-p",
              json.dumps({"status": {"phase": "Succeeded", "containerStatuses": [{
                  "name": "inspect", "ready": False, "restartCount": 0, "image": pod_spec["containers"][0]["image"],
                  "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}}]}}))
    got = get(c, "pod", pod["metadata"]["name"])
    assert got["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == message
    c.kubectl("patch", "job", job_name, "-n", c.namespace, "--subresource=status", "--type=merge", "-p",
              json.dumps({"status": {"succeeded": 1, "active": 0}}))

    c.wait_condition(name, "DrafterCompatible", "True", "Compatible")
    c.wait_condition(name, "Progressing", "True")
    status = get(c, "specdeploy", name)["status"]
    assert status["resolved"]["targetConfigDigest"] == json.loads(message)["digest"]
    for kind, cname in child_names(name).items():
        wait_for(lambda: exists(c, kind, cname), 30, f"{kind}/{cname}")
    dep = get(c, "deployment", name)
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert vols["target-model"]["persistentVolumeClaim"]["claimName"] == "models"
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "/models/target/qwen3.6-27b" in args
