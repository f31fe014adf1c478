"""Every rendered engine command line parses against the recorded flag snapshot of its engine.

The snapshots come from the engines' own argument parsers (e2e/flagdrift/run.sh); this test
is how CI catches flag drift without installing the engines.
"""

from __future__ import annotations

import pytest

from testkit import EXAMPLES
from specdeploy.core import flagdrift
from specdeploy.core import engines as eng
from specdeploy_dev.demo import flag_commands

COMMANDS = flag_commands(str(EXAMPLES))


def test_every_engine_has_a_verified_version_and_commands():
    for info in eng.ENGINES.values():
        assert info.newest_verified is not None, f"no flag snapshot for {info.name}"
        assert info.is_verified(info.newest_verified)
    names = {c["name"] for c in COMMANDS}
    # both examples on both engines, single node and multi-node, plus multi-node workers
    assert len(names) >= 10
    assert any("/worker" in n for n in names)


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c["name"] for c in COMMANDS])
def test_rendered_command_matches_snapshot(cmd):
    problems = flagdrift.check_argv(cmd["engine"], cmd["version"], cmd["argv"], cmd["env"])
    assert problems == []


def test_window_flag_only_where_asked_for_on_sglang():
    # SGLang 0.5.23 windows the sliding layers natively: the compact cache flag only with draftWindow
    qwen_sglang = [c for c in COMMANDS if c["name"].startswith("qwen3.6-27b") and c["engine"] == "sglang"]
    assert qwen_sglang
    for c in qwen_sglang:
        if c["name"].endswith("/window-context"):
            i = c["argv"].index("--speculative-draft-window-size")
            assert c["argv"][i + 1] == "2048"
            assert c["argv"][c["argv"].index("--context-length") + 1] == "32768"
        else:
            assert "--speculative-draft-window-size" not in c["argv"], c["name"]


def test_max_model_len_rendered_on_vllm():
    [c] = [c for c in COMMANDS if c["name"] == "qwen3.6-27b-b300-vllm/vllm-0.33.0/nodes-1/window-context"]
    assert c["argv"][c["argv"].index("--max-model-len") + 1] == "32768"


def test_snapshot_check_catches_the_old_window_flag():
    c = next(c for c in COMMANDS if c["engine"] == "sglang" and "--speculative-draft-window-size" in c["argv"])
    argv = ["--speculative-dflash-draft-window-size" if a == "--speculative-draft-window-size" else a for a in c["argv"]]
    problems = flagdrift.check_argv(c["engine"], c["version"], argv, c["env"])
    assert any("--speculative-dflash-draft-window-size" in p for p in problems)


def test_capability_flags_exist_in_the_verified_snapshots():
    """Every flag the capability table names for a verified release is a real option there."""
    for info in eng.ENGINES.values():
        for version in info.verified_versions():
            row = info.release_for(version)
            options = flagdrift.load_snapshot(info.name, version)["options"]
            for logical, flag in row.flags.items():
                assert flag in options, f"{info.name} {version}: {logical} -> {flag} not in the parser"


def test_every_method_of_every_verified_release_is_flag_checked():
    # issue 25: flag drift covers every method's flags (render/argv.py) on each engine's newest verified release
    # and its CPU build; test_rendered_command_matches_snapshot parses each against the release's parser snapshot
    names = {c["name"] for c in COMMANDS}
    for info in eng.ENGINES.values():
        row = info.release_for(info.newest_verified)
        assert {"eagle3", "mtp", "ngram", "dflash"} <= row.methods
        for m in row.methods - {"ddtree"}:
            assert f"method-{m}/{info.name}-{info.newest_verified}" in names, (info.name, m)
    algos = {c["argv"][c["argv"].index("--speculative-algorithm") + 1] for c in COMMANDS
             if c["engine"] == "sglang" and "--speculative-algorithm" in c["argv"]}
    assert {"EAGLE3", "NEXTN", "NGRAM", "DFLASH", "DSPARK", "EAGLE", "STANDALONE"} <= algos
