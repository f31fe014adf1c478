"""A bench run on this tree and on another revision side by side (the benches' ``--compare REV``).

The other revision is checked out with ``git worktree add --detach`` into a temporary directory
(removed afterwards) and run with this interpreter and its installed packages, its own source roots
first on ``PYTHONPATH``. Both revisions run as child processes, alternating (this, other; then
other, this; ...), so both see the same machine load; each run prints its figures, its load average,
and a summary of the medians follows. Figures are printed, never asserted.

Old revisions keep the rig at ``operator/specdeploy/dev``; ``bench_module`` finds a bench module
wherever the checked-out tree has it.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

# Source roots of a tree (as the worktree venvs' aa_worktree.pth lists them); those present are used.
SOURCE_ROOTS = ("operator", "runtime", "operator/dev")


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def repo_root() -> Path:
    """The checkout this code runs from."""
    return Path(_git("rev-parse", "--show-toplevel", cwd=Path(__file__).resolve().parent))


def source_roots(tree: Path) -> list[Path]:
    return [tree / r for r in SOURCE_ROOTS if (tree / r).is_dir()]


def bench_module(tree: Path, *names: str) -> str:
    """The first of ``names`` (dotted module names) that exists in ``tree``'s source roots."""
    for name in names:
        rel = name.replace(".", "/")
        for root in source_roots(tree):
            if (root / f"{rel}.py").is_file() or (root / rel / "__init__.py").is_file():
                return name
    raise LookupError(f"none of {', '.join(names)} in {tree}")


def child_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, source_roots(tree)), *filter(None, [env.get("PYTHONPATH")])])
    return env


@contextmanager
def checkout(rev: str) -> Iterator[tuple[Path, str]]:
    """(tree, commit) of ``rev`` in a temporary git worktree, removed on exit."""
    top = repo_root()
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=top)
    tmp = Path(tempfile.mkdtemp(prefix="specdeploy-compare-"))
    tree = tmp / "tree"
    _git("worktree", "add", "--detach", "--quiet", str(tree), sha, cwd=top)
    try:
        yield tree, sha
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=top, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=top, capture_output=True)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _label_here(top: Path) -> str:
    head = _git("rev-parse", "--short", "HEAD", cwd=top)
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", cwd=top))
    return f"this tree ({head}{' + changes' if dirty else ''})"


def side_by_side(title: str, rev: str, runs: int, argv: Callable[[Path], list[str]],
                 parse: Callable[[str], dict[str, float]], timeout: float = 3600, from_here: bool = False) -> int:
    """Run ``argv(tree)`` ``runs`` times for this tree and for ``rev``, alternating; print every run's output
    and the median of each figure ``parse`` finds, with the ratio this/other. ``from_here``: every run is a command of
    this tree (run in it, with its environment) that takes the tree to measure as an argument (the webhook bench:
    this tree's clients against either revision's server); otherwise each tree's own command runs in that tree."""
    here = repo_root()
    with checkout(rev) as (other, sha):
        sides = [(_label_here(here), here), (f"{rev} ({sha[:9]})", other)]
        print(f"# {title}: {sides[0][0]} vs {sides[1][0]}, {runs} run(s) each, alternating; "
              f"{os.cpu_count()} CPUs; load average {_load()}", flush=True)
        figures: dict[str, list[dict[str, float]]] = {label: [] for label, _ in sides}
        for k in range(runs):
            for label, tree in (sides if k % 2 == 0 else sides[::-1]):
                load0 = _load()
                p = subprocess.run(argv(tree), cwd=here if from_here else tree, env=None if from_here else child_env(tree),
                                   capture_output=True, text=True, timeout=timeout)
                print(f"## run {k + 1}, {label} (load average {load0} before, {_load()} after)")
                for line in p.stdout.splitlines():
                    print(f"   {line}")
                if p.returncode != 0:
                    print(f"   failed ({p.returncode}): {p.stderr.strip()[-2000:]}", flush=True)
                    return 1
                figures[label].append(parse(p.stdout))
                sys.stdout.flush()
        print(f"## medians ({runs} run(s) each; ratio = this tree / {rev})")
        keys: list[str] = []
        for runs_of in figures.values():
            for f in runs_of:
                keys += [k for k in f if k not in keys]
        (a, _), (b, _) = sides
        for key in keys:
            va = [f[key] for f in figures[a] if key in f]
            vb = [f[key] for f in figures[b] if key in f]
            if not va or not vb:
                continue
            ma, mb = statistics.median(va), statistics.median(vb)
            ratio = f"{ma / mb:.2f}x" if mb else "-"
            print(f"   {key:<52} this {_fmt(va)} | {rev} {_fmt(vb)} | {ratio}")
        print(f"# load average at the end: {_load()}")
    return 0


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


# ----------------------------------------------------------------- figure parsers

_OPERATOR = re.compile(
    r"(?P<n>\d+) CRs: created in (?P<created>[\d.]+)s, converged in (?P<converged>[\d.]+)s; operator CPU "
    r"(?P<cpu>[\d.]+)s .*?\((?P<rec_ms>[\d.]+) ms each\); API writes at creation (?P<writes>[\d.]+) per CR.*?"
    r"idle resync: (?P<idle>\d+) writes.*?peak RSS (?P<rss>\d+) MiB")


def parse_operator(out: str) -> dict[str, float]:
    f: dict[str, float] = {}
    for m in _OPERATOR.finditer(out):
        n = m["n"]
        for key, name in (("created", "created s"), ("converged", "converged s"), ("cpu", "operator CPU s"),
                          ("rec_ms", "CPU ms per reconcile"), ("writes", "API writes per CR"),
                          ("idle", "idle writes"), ("rss", "peak RSS MiB")):
            f[f"{n} CRs: {name}"] = float(m[key])
    return f


_WEBHOOK = re.compile(r"^\s+(?P<label>\S.*?)\s+p50\s+(?P<p50>[\d.]+) ms\s+p90\s+[\d.]+ ms\s+p99\s+(?P<p99>[\d.]+) ms"
                      r".*?(?:server CPU (?P<cpu>\d+) us/review)?\)$", re.M)


def parse_webhook(out: str) -> dict[str, float]:
    f: dict[str, float] = {}
    for m in _WEBHOOK.finditer(out):
        f[f"{m['label']}: p50 ms"] = float(m["p50"])
        f[f"{m['label']}: p99 ms"] = float(m["p99"])
        if m["cpu"]:
            f[f"{m['label']}: server CPU us/review"] = float(m["cpu"])
    return f
