"""`specdeploy check` without --method: the drafter's detected family picks the method, and the output says which;
a finding printed by `check` names the flag where admission and the status name the spec field."""

from __future__ import annotations

import argparse
import json

import pytest

from specdeploy.cli import check as cli_check
from specdeploy.core.checker import Options, analyze
from specdeploy.core.findings import worded
from testkit import FIXTURES, run_cli


def fx(name: str) -> str:
    return str(FIXTURES / name)


@pytest.mark.parametrize("drafter, target, method, label, rc", [
    ("eagle3-qwen3-8b.drafter.json", "qwen3-8b.target.json", "eagle3", "EAGLE-3", 0),
    ("eagle3-llama3.1-8b.drafter.json", "llama-3.1-8b-instruct.target.json", "eagle3", "EAGLE-3", 0),
    ("dspark-qwen3-8b.drafter.json", "qwen3-8b.target.json", "dspark", "DSpark", 0),
    ("qwen3-8b-dflash-b16.drafter.json", "qwen3-8b.target.json", "dflash", "DFlash", 0),
    # a DFlash2 drafter trained for a 93-layer Kimi: its verdict is its layers, not a method mismatch
    ("dflash2-mla-kimi-k3.drafter.json", "kimi-k2.6.target.json", "dflash2", "DFlash2 (MLA)", 1),
])
def test_check_uses_the_detected_family_and_says_so(drafter, target, method, label, rc):
    p = run_cli("check", "--drafter", fx(drafter), "--target", fx(target))
    assert p.returncode == rc, p.stdout + p.stderr
    assert f"method: {method} (detected from the drafter: {label}; --method overrides)" in p.stdout
    assert "MethodFamilyMismatch" not in p.stdout
    if rc:
        assert "NumTargetLayersMismatch" in p.stdout
    doc = json.loads(run_cli("check", "--drafter", fx(drafter), "--target", fx(target), "-o", "json").stdout)
    assert doc["method"] == {"name": method, "from": f"detected from the drafter: {label}; --method overrides"}


def test_an_explicit_method_wins_and_its_mismatch_names_the_flag():
    p = run_cli("check", "--drafter", fx("eagle3-qwen3-8b.drafter.json"), "--target", fx("qwen3-8b.target.json"),
                "--method", "dflash")
    assert p.returncode == 1
    assert "method: dflash (--method)" in p.stdout
    assert "MethodFamilyMismatch  [flag] --method" in p.stdout and "but --method is 'dflash'" in p.stdout
    assert "spec.speculation.method" not in p.stdout
    doc = json.loads(run_cli("check", "--drafter", fx("eagle3-qwen3-8b.drafter.json"), "--target",
                             fx("qwen3-8b.target.json"), "--method", "dflash", "-o", "json").stdout)
    (f,) = [f for f in doc["findings"] if f["code"] == "MethodFamilyMismatch"]
    assert f["path"] == "spec.speculation.method" and f["flag"] == "--method" and "but --method is" in f["message"]


def test_every_fix_names_the_flag_from_the_cli():
    p = run_cli("check", "--drafter", fx("qwen3-8b-dflash-b16.drafter.json"), "--target", fx("qwen3-8b.target.json"),
                "--engine", "vllm", "--engine-version", "0.32.0", "--gpu", "cpu", "--max-model-len", "99999999")
    assert p.returncode == 1
    assert "MaxModelLenAboveTarget  [flag] --max-model-len" in p.stdout and "Set --max-model-len <= 40960" in p.stdout
    for field in cli_check.CHECK_FLAGS:
        if field.startswith("spec."):
            assert field not in p.stdout


def test_a_target_only_check_never_names_a_flag_not_passed():
    p = run_cli("check", "--target", fx("qwen3-8b.target.json"))
    assert p.returncode == 2 and "--method dflash" not in p.stderr
    assert "no --drafter" in p.stderr and "--method mtp" in p.stderr
    # a target with MTP layers is checked as its own drafter, and says so
    p = run_cli("check", "--target", fx("glm-5.3-flash.target.json"))
    assert "method: mtp (the target has 1 MTP layer(s)" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, p.stdout
    p = run_cli("check", "--target", fx("qwen3-8b.target.json"), "--method", "dflash")
    assert p.returncode == 2 and "--method dflash needs --drafter" in p.stderr


def test_admission_keeps_the_spec_fields_and_the_flags_are_the_check_parsers():
    import json as _json

    d = _json.loads((FIXTURES / "eagle3-qwen3-8b.drafter.json").read_text())
    t = _json.loads((FIXTURES / "qwen3-8b.target.json").read_text())
    (f,) = [f for f in analyze(d, t, Options(method="dflash")).findings if f.code == "MethodFamilyMismatch"]
    assert "spec.speculation.method is 'dflash'" in f.message and f.path == "spec.speculation.method"
    (g,) = worded([f], cli_check.CHECK_FLAGS)
    assert "--method is 'dflash'" in g.message and g.path == "--method"
    # a deeper field is another field: spec.drafter.model is not --drafter.model
    (h,) = worded([f.__class__(f.severity, f.code, f.source, "spec.drafter.model", "set spec.drafter.model.")],
                  cli_check.CHECK_FLAGS)
    assert h.path == "spec.drafter.model" and h.message == "set spec.drafter.model."
    parser = argparse.ArgumentParser()
    cli_check.add_parsers(parser.add_subparsers())
    check = parser._subparsers._group_actions[0].choices["check"]
    options = {o for a in check._actions for o in a.option_strings}
    assert set(cli_check.CHECK_FLAGS.values()) <= options
