"""The commands docs pages show, run as written, against what the pages say they print.

A page marks a runnable command with ``$ `` in a ``console`` block; ``# exit N`` after it is the
exit code it promises (default 0). A ``text`` block right after is the expected output: every
non-empty line must appear in the command's output, where ``...`` stands for any text.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["docs/getting-started.md", "README.md"]
BIN = Path(sys.executable).parent


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S)]


def commands(page: str) -> list[tuple[str, int, list[str]]]:
    out = []
    bs = blocks((ROOT / page).read_text())
    for i, (lang, body) in enumerate(bs):
        if lang != "console":
            continue
        for line in body.splitlines():
            if not line.startswith("$ "):
                continue
            cmd, _, comment = line[2:].partition("  # ")
            m = re.search(r"exit (\d+)", comment)
            expect = []
            if i + 1 < len(bs) and bs[i + 1][0] == "text" and sum(1 for x in body.splitlines() if x.startswith("$ ")) == 1:
                expect = [x for x in bs[i + 1][1].splitlines() if x.strip()]
            out.append((cmd.strip(), int(m.group(1)) if m else 0, expect))
    return out


CASES = [(page, *c) for page in PAGES for c in commands(page)]


def test_the_pages_show_runnable_commands():
    assert len([c for c in CASES if c[0] == "docs/getting-started.md"]) >= 6


def _pattern(line: str) -> re.Pattern:
    parts = [re.escape(p) for p in line.strip().split("...")]
    return re.compile(".*".join(parts))


@pytest.mark.parametrize("page, cmd, rc, expect", CASES, ids=[f"{c[0]}:{c[1][:90]}" for c in CASES])
def test_command_does_what_the_page_says(page, cmd, rc, expect):
    argv = shlex.split(cmd)
    assert argv[0].startswith(".venv/bin/"), f"{page}: only commands of the set-up venv run here: {cmd}"
    argv[0] = str(BIN / Path(argv[0]).name)
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == rc, f"{page}: `{cmd}` exited {p.returncode}, the page says {rc}\n{out[-3000:]}"
    lines = [x.strip() for x in out.splitlines()]
    for want in expect:
        pat = _pattern(want)
        assert any(pat.fullmatch(x) for x in lines), f"{page}: `{cmd}` printed no line like\n  {want}\n---\n{out[-3000:]}"
