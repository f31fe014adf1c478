"""`specdeploy completion bash|zsh`: a script bash can source, completing the parser's own commands, options and
choices (generated from it: a new option is completed without touching the script)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import run_cli

EXE = Path(sys.executable).parent / "specdeploy"


def complete(*words: str) -> list[str]:
    """COMPREPLY for the command line `specdeploy WORDS...` (the last word is the one being completed)."""
    line = " ".join(f"'{w}'" for w in ("specdeploy", *words))
    script = (f"source <({EXE} completion bash) && COMP_WORDS=({line}) && COMP_CWORD={len(words)} && _specdeploy "
              '&& printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.splitlines() if w]


def test_bash_sources_it_and_registers_the_completion():
    p = subprocess.run(["bash", "-c", f"source <({EXE} completion bash); complete -p specdeploy"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "complete -o default -F _specdeploy specdeploy", p.stderr


def test_it_completes_commands_options_and_choices():
    assert "rollout" in complete("") and "completion" in complete("")
    assert complete("rollout", "st") == ["status"]
    assert complete("dev", "bench", "") == ["core", "operator", "memory"]
    assert complete("check", "--engine", "") == ["sglang", "vllm"]
    assert set(complete("check", "--method", "")) >= {"dflash", "dflash2", "dspark", "eagle3", "mtp", "ngram"}
    assert complete("rollout", "status", "qwen3", "-o", "") == ["text", "json", "yaml"]
    assert "--max-model-len" in complete("check", "--max")
    assert complete("check", "--engine", "vllm", "--gpu-c") == ["--gpu-count"]  # a flag's value is no command


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_sources_it():
    p = subprocess.run(["zsh", "-c", f"source <({EXE} completion zsh); complete -p specdeploy"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "_specdeploy" in p.stdout, p.stderr


def test_zsh_script_is_the_bash_one_through_bashcompinit():
    z = run_cli("completion", "zsh").stdout
    assert "bashcompinit" in z and run_cli("completion", "bash").stdout in z
