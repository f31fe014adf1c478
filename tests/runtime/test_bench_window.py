"""bench-window: figures and their shape (no test asserts a time)."""

from __future__ import annotations

import json

from runtime_helpers import run_runtime
from specdeploy_runtime.bench import BenchOptions, run_bench


def test_bench_small():
    r = run_bench(BenchOptions(contexts=(256, 1024), window=128, block=8, repeats=3, warmup=1, bandwidth_mib=16))
    assert [row["context"] for row in r["rows"]] == [256, 1024]
    per_token = r["geometry"]["kv_bytes_per_token"]
    for row in r["rows"]:
        full, compact = row["full"], row["compact"]
        assert compact["kept_tokens"] == 128 and compact["kv_bytes"] == 128 * per_token
        assert full["kv_bytes"] >= row["context"] * per_token
        for x in (full, compact):
            assert x["step_ms"] > 0 and x["floor_ms"] > 0 and x["x_floor"] > 0 and x["min_ms"] <= x["step_ms"] <= x["max_ms"]
        assert row["speedup"] == full["step_ms"] / compact["step_ms"]
    assert r["bandwidth_bytes_per_s"] > 0 and set(r["summary"]) >= {"speedup_at_largest", "compact_growth"}


def test_bench_command():
    p = run_runtime("bench-window", "--contexts", "256,512", "--window", "128", "--block", "8", "--repeats", "2",
                    "--warmup", "1", "-o", "json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["window"] == 128 and r["keep"] == 128 and len(r["rows"]) == 2
    p = run_runtime("bench-window", "--contexts", "256", "--window", "128", "--block", "8", "--repeats", "2",
                    "--impl", "eager")
    assert p.returncode == 0, p.stderr
    assert "speedup" in p.stdout and "floor ms" in p.stdout
