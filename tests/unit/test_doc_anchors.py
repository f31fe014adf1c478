"""Every relative Markdown link with an anchor (`[text](page.md#section)`) lands on a heading of that page.

docs/benchmarks.md is rewritten to today's figures from time to time; the pages that cite one of its tables
(high availability, acceptance, rollouts, images) link by anchor, and a renamed heading would break them silently.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", ".venv-vllm-cpu", ".venv-checkov", "node_modules", ".pytest_cache"}
FENCE = re.compile(r"```.*?```", re.S)
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
LINK = re.compile(r"\]\(([^)\s]*?)#([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped (hyphens and underscores kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def pages() -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.md")) if not SKIP.intersection(p.relative_to(ROOT).parts)]


def broken_links() -> list[str]:
    out = []
    for page in pages():
        for m in LINK.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
            path, frag = m.group(1), m.group(2)
            if re.match(r"^[a-z]+:", path):
                continue
            target = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: ({path}#{frag})"
            if target.suffix != ".md" or not target.is_file():
                out.append(f"{where}: no such page")
            elif frag not in anchors(target):
                out.append(f"{where}: no such heading")
    return out


def test_slug_is_githubs():
    assert slug("Canary rollouts on vLLM's CPU build (issue 26)") == "canary-rollouts-on-vllms-cpu-build-issue-26"
    assert slug("Core: check + render, CLI start-up") == "core-check--render-cli-start-up"


def test_the_benchmark_anchors_other_pages_cite_exist():
    cited = {"operator-high-availability", "canary-rollouts-on-vllms-cpu-build-issue-26",
             "images-built-and-run-with-podman",
             "a-drafter-trained-here-train-tiny-drafter-the-reference-forward-and-the-real-engine"}
    assert cited <= anchors(ROOT / "docs" / "benchmarks.md")


def test_every_anchored_link_lands_on_a_heading():
    assert broken_links() == []
