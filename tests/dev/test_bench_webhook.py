"""The webhook bench runs end to end at a tiny size: every workload line, the HTTP+TLS floor with ``--floor``, and
figures that ``compare.parse_webhook`` (what ``--compare`` tabulates) reads. Nothing is timed."""

from __future__ import annotations

import subprocess
import sys

from specdeploy_dev import compare
from testkit import ROOT

LABELS = ("object-level, every spec new", "object-level, same spec again", "full check, every spec new",
          "full check, same spec again", "HTTP+TLS floor, fixed answer")


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdeploy_dev.bench_webhook", "--clients", "3", "--requests", "4",
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_every_workload_and_the_floor_print_figures_compare_reads():
    p = bench("--floor")
    assert p.returncode == 0, p.stderr[-3000:]
    figures = compare.parse_webhook(p.stdout)
    for label in LABELS:
        assert {f"{label}: p50 ms", f"{label}: p99 ms", f"{label}: server CPU us/review"} <= set(figures), p.stdout
        assert f"({3 * 4} reviews," in next(line for line in p.stdout.splitlines() if label in line)


def test_floor_is_refused_beside_another_revision():
    p = bench("--floor", "--compare", "HEAD")
    assert p.returncode == 2 and "--floor measures this tree's server" in p.stderr, p.stderr
