"""One message catalog for spec validation (api/validation.py): the same bad spec gives the same
message through the admission webhook (over HTTPS), the status the reconciler writes on the embedded
API server, and the CLI; and every spec problem lands in the same condition and reason
(DrafterCompatible=Unknown, Progressing=False, reason InvalidSpec), whether the schema refuses it
(blockSize: 0) or only the object-level check does (draftWindow: -5)."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "admission"))
from admission_helpers import (DRAFTER_CM, QWEN, TARGET_CM, configmap, example_configs, example_cr,  # noqa: E402
                               qwen_server, review_request)

from testkit import run_cli  # noqa: E402
from specdeploy.api.validation import validate  # noqa: E402
from specdeploy.controller.kube import Kube, load_api_client  # noqa: E402
from specdeploy.controller.reconciler import Controller, Settings  # noqa: E402
from specdeploy.controller.resolve import Resolver  # noqa: E402
from specdeploy_dev.harness import Cluster  # noqa: E402

NS = "default"

BAD = {
    "block-size-0": ("speculation", {"blockSize": 0}),
    "draft-window-negative": ("speculation", {"draftWindow": -5}),
    "model-is-a-flag": ("target", {"model": "--trust-remote-code"}),
    "shm-size-words": ("pod", {"shmSize": "lots"}),
    "revision-with-space": ("drafter", {"revision": "main branch"}),
    "unknown-method": ("speculation", {"method": "medusa"}),
    "extra-arg-owned": ("engine", {"extraArgs": ["--port", "9000"]}),
    "unknown-field": ("gpu", {"kind": "b300"}),
}


def bad_cr(case: str, name: str = "qwen36-27b") -> dict:
    cr = example_cr(QWEN, name=name, namespace=NS)
    section, change = BAD[case]
    cr["spec"][section] = {**cr["spec"].get(section, {}), **copy.deepcopy(change)}
    return cr


@pytest.fixture(scope="module")
def webhook():
    s = qwen_server()
    c = s.client()
    yield c
    c.close()
    s.stop()


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    c = Cluster(workdir=tmp_path_factory.mktemp("messages"), namespace=NS)
    c.start()
    try:
        c.apply_crds()
        t, d = example_configs(QWEN)
        kube = Kube(load_api_client(c.kubeconfig))
        for cm in (configmap(TARGET_CM, t), configmap(DRAFTER_CM, d)):
            asyncio.run(kube.create(cm))
        ctl = Controller(kube, Resolver(kube), Settings(workers=0, backoff_min=0.01, backoff_max=0.02))
        yield kube, ctl
    finally:
        c.stop()


def status_after_reconcile(kube, ctl, case: str) -> dict:
    """The reconciler's status for the bad spec: a valid CR is stored (the API server checks the CRD
    schema), then the reconciler sees the bad spec (a CR admitted before a schema or webhook change)."""
    name = f"msg-{case}"
    stored = asyncio.run(kube.create(example_cr(QWEN, name=name, namespace=NS)))
    body = copy.deepcopy(stored)
    body["spec"] = bad_cr(case)["spec"]
    ctl.bodies[(NS, name)] = body
    asyncio.run(ctl.run_once((NS, name)))
    return asyncio.run(kube.get("SpeculativeDeployment", NS, name))["status"]


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_same_message_through_webhook_status_and_cli(case, webhook, operator, tmp_path):
    cr = bad_cr(case)
    parsed, problems = validate(cr)
    assert parsed is None and problems, case
    lines = [p.line() for p in problems]
    for line in lines:
        assert "should match pattern" not in line and "Input should be" not in line, line

    # the webhook
    r = webhook.review(review_request(cr))
    assert r["allowed"] is False
    msg = r["status"]["message"]
    for line in lines:
        assert f"- {line}" in msg, (line, msg)

    # the status the reconciler writes
    kube, ctl = operator
    status = status_after_reconcile(kube, ctl, case)
    conds = {c["type"]: c for c in status["conditions"]}
    assert (conds["DrafterCompatible"]["status"], conds["DrafterCompatible"]["reason"]) == ("Unknown", "InvalidSpec")
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("False", "InvalidSpec")
    for line in lines:
        assert line in conds["DrafterCompatible"]["message"], (line, conds["DrafterCompatible"]["message"])

    # the CLI
    f = tmp_path / "cr.yaml"
    f.write_text(yaml.safe_dump(cr))
    p = run_cli("render", "-f", str(f), "--drafter-config", str(QWEN / "drafter.config.json"),
                "--target-config", str(QWEN / "target.config.json"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    for line in lines:
        assert line in p.stderr, (line, p.stderr)


def test_schema_and_check_problems_have_the_same_shape():
    (block,) = validate(bad_cr("block-size-0"))[1]
    (window,) = validate(bad_cr("draft-window-negative"))[1]
    assert (block.path, block.code) == ("spec.speculation.blockSize", "BlockSizeInvalid")
    assert (window.path, window.code) == ("spec.speculation.draftWindow", "DraftWindowInvalid")
    (shm,) = validate(bad_cr("shm-size-words"))[1]
    assert shm.line() == "spec.pod.shmSize: must be a Kubernetes quantity such as 16Gi, 500m or 4 (found 'lots') " \
                         "[FieldValueInvalid]"
    (unknown,) = validate(bad_cr("unknown-field"))[1]
    assert unknown.path == "spec.gpu.kind" and unknown.code == "UnknownField"
