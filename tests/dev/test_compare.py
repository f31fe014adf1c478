"""The benches' --compare REV (specdeploy_dev.compare): another revision's tree, its bench module, the figures."""

from __future__ import annotations

import subprocess

from specdeploy_dev import compare

OPERATOR_LINE = ("1000 CRs: created in 6.1s, converged in 23.3s; operator CPU 21.9s for 2214 reconciles (9.9 ms each); "
                 "API writes at creation 6.00 per CR (5.00 without Events); idle resync: 0 writes over 2000 reconciles, "
                 "2.5 ms CPU each; operator peak RSS 228 MiB; writes after convergence: {'kind=\"Event\"': 1.0}")
WEBHOOK_OUT = """webhook latency over HTTPS, 50 concurrent clients x 40 reviews (server: one process, 2 CPUs on this machine)
  object-level, every spec new   p50  31.0 ms  p90  40.2 ms  p99  48.9 ms  max  60.1 ms  (2000 reviews, 900/s, server CPU 376 us/review)
  full check, same spec again    p50  24.5 ms  p90  30.0 ms  p99  43.2 ms  max  50.0 ms  (2000 reviews, 1100/s)
"""


def test_parse_operator_figures():
    f = compare.parse_operator("# header\n" + OPERATOR_LINE + "\n")
    assert f == {"1000 CRs: created s": 6.1, "1000 CRs: converged s": 23.3, "1000 CRs: operator CPU s": 21.9,
                 "1000 CRs: CPU ms per reconcile": 9.9, "1000 CRs: API writes per CR": 6.0,
                 "1000 CRs: idle writes": 0.0, "1000 CRs: peak RSS MiB": 228.0}


def test_parse_webhook_figures():
    f = compare.parse_webhook(WEBHOOK_OUT)
    assert f == {"object-level, every spec new: p50 ms": 31.0, "object-level, every spec new: p99 ms": 48.9,
                 "object-level, every spec new: server CPU us/review": 376.0,
                 "full check, same spec again: p50 ms": 24.5, "full check, same spec again: p99 ms": 43.2}


def test_bench_module_in_either_layout(tmp_path):
    old = tmp_path / "old"
    (old / "operator" / "specdeploy" / "dev").mkdir(parents=True)
    (old / "operator" / "specdeploy" / "dev" / "bench_webhook.py").write_text("")
    new = tmp_path / "new"
    (new / "operator" / "specdeploy_dev").mkdir(parents=True)
    (new / "operator" / "specdeploy_dev" / "bench_webhook.py").write_text("")
    names = ("specdeploy_dev.bench_webhook", "specdeploy.dev.bench_webhook")
    assert compare.bench_module(old, *names) == "specdeploy.dev.bench_webhook"
    assert compare.bench_module(new, *names) == "specdeploy_dev.bench_webhook"
    assert compare.child_env(new)["PYTHONPATH"].split(":")[0] == str(new / "operator")


def test_checkout_is_removed_afterwards():
    top = compare.repo_root()
    with compare.checkout("HEAD") as (tree, sha):
        assert (tree / "operator" / "specdeploy").is_dir()
        assert sha == subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, capture_output=True, text=True).stdout.strip()
    assert not tree.exists()
    listed = subprocess.run(["git", "worktree", "list"], cwd=top, capture_output=True, text=True).stdout
    assert str(tree) not in listed
