"""spec.tuning: the operator runs the tuning Job once and publishes its result as the ConfigMap the
engine pods mount (the test plays the Job controller and the kubelet: embedded API server only)."""

from __future__ import annotations

import json

from e2e_support import KIMI, apply, configmap, embedded_only, example_cr, example_doc, get, wait_for
from specdeploy.core import tuning as tn

pytestmark = embedded_only


def test_tuning_job_result_becomes_the_mounted_configmap(cluster):
    c = cluster
    name = "kimi-tuned"
    cr = example_cr(KIMI, name, target_cm="kimi-tuned-target", drafter_cm="kimi-tuned-drafter")
    cr["spec"]["tuning"] = {"enabled": True}
    apply(c, configmap("kimi-tuned-target", example_doc(KIMI, "target")),
          configmap("kimi-tuned-drafter", example_doc(KIMI, "drafter")), cr)

    def tuning_job():
        jobs = c.get_json("jobs", "-n", c.namespace, "-l", f"app.kubernetes.io/instance={name},app.kubernetes.io/component=kernel-tuning")["items"]
        return jobs[0] if jobs else None

    job = wait_for(tuning_job, 60, "the tuning Job")
    job_name = job["metadata"]["name"]
    key = job["metadata"]["annotations"]["specdeploy.io/tuning-key"]
    tune = job["spec"]["template"]["spec"]["containers"][0]
    assert tune["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    dep = wait_for(lambda: get(c, "deployment", name), 30, "the Deployment")
    engine = next(x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "engine")
    assert any(e["name"] == "SGLANG_MOE_CONFIG_DIR" for e in engine["env"])  # where SGLang reads tuned configs

    # play the Job: its pod tuned and reported the engine-named file in its termination message
    shape = tn.moe_shape(example_doc(KIMI, "target"), "sglang", 8)
    fname = tn.config_file_name("sglang", shape, "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition")
    rel = tn.relative_path("sglang", fname, "3.4.0")
    message = tn.encode_envelope("sglang", "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition", "3.4.0",
                                 {rel: b'{"1": {"BLOCK_SIZE_M": 16}}'}, key=key)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{job_name}-e2e01", "labels": {"job-name": job_name}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "tune", "image": tune["image"]}]}}
    apply(c, pod)
    c.kubectl("patch", "pod", pod["metadata"]["name"], "-n", c.namespace, "--subresource=status", "--type=merge", "-p",
              json.dumps({"status": {"phase": "Succeeded", "containerStatuses": [{
                  "name": "tune", "ready": False, "restartCount": 0, "image": tune["image"], "imageID": "",
                  "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message}}}]}}))
    c.kubectl("patch", "job", job_name, "-n", c.namespace, "--subresource=status", "--type=merge", "-p",
              json.dumps({"status": {"succeeded": 1}}))

    def tuned_configmap():
        cms = c.get_json("configmaps", "-n", c.namespace, "-l", f"app.kubernetes.io/instance={name},app.kubernetes.io/component=kernel-tuning")["items"]
        return cms[0] if cms else None

    cm = wait_for(tuned_configmap, 60, "the tuned-kernels ConfigMap")
    assert cm["metadata"]["annotations"]["specdeploy.io/tuning-key"] == key
    assert cm["metadata"]["ownerReferences"][0]["name"] == name
    manifest = json.loads(cm["data"][tn.MANIFEST_KEY])
    assert rel in manifest["files"].values()  # laid out where SGLang will look it up
    [data_key] = [k for k, v in manifest["files"].items() if v == rel]
    assert json.loads(cm["data"][data_key]) == {"1": {"BLOCK_SIZE_M": 16}}
    # the Job is created once: still exactly one
    jobs = c.get_json("jobs", "-n", c.namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]
    assert [j["metadata"]["name"] for j in jobs] == [job_name]
