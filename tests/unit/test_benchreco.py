"""SpeculativeBenchmark recommendation (pure): bands, crossover, guard, exclusions, edge cases."""

from __future__ import annotations

from specdeploy.core.bench.reco import equal_to_baseline, recommend

SAME = ["a" * 64, "b" * 64]
OTHER = ["a" * 64, "c" * 64]


def pt(variant, context, concurrency, tps, *, digests=SAME, failed=0, completed=4, tau=None):
    p = {"id": f"{variant}/c{context}/n{concurrency}", "variant": variant, "context": context,
         "concurrency": concurrency, "numPrompts": 4, "maxOutputTokens": 32, "completed": completed,
         "failed": failed, "outputTokensPerSecond": tps, "outputDigests": list(digests)}
    if tau is not None:
        p["acceptance"] = {"length": tau}
    return p


def table(rows):
    """rows: {(variant, context, concurrency): tps}"""
    return [pt(v, c, n, tps) for (v, c, n), tps in rows.items()]


def test_speculation_wins_low_load_and_loses_high():
    pts = table({("baseline", 64, 1): 100, ("baseline", 64, 4): 300, ("baseline", 64, 8): 500,
                 ("k3", 64, 1): 210, ("k3", 64, 4): 280, ("k3", 64, 8): 400,
                 ("k7", 64, 1): 190, ("k7", 64, 4): 250, ("k7", 64, 8): 380})
    r = recommend(pts, ["baseline", "k3", "k7"])
    assert [(b["concurrency"], b["best"]) for b in r["bands"]] == [(1, "k3"), (4, "baseline"), (8, "baseline")]
    assert r["bands"][0]["speedup"] == 2.1 and r["bands"][0]["baselineTokensPerSecond"] == 100
    assert r["crossover"] == [{"context": 64, "concurrency": 4,
                               "reason": "speculation no faster from concurrency 4 (k3 280 tok/s vs baseline 300)"}]
    assert r["guard"] == {"maxConcurrency": 4, "maxContext": None}
    assert r["best"] == "baseline" and r["excluded"] == []
    assert "speculation off from concurrency 4" in r["summary"] and "2.10x" in r["summary"]


def test_never_loses_means_no_guard():
    pts = table({("baseline", 64, 1): 100, ("baseline", 64, 2): 150, ("k3", 64, 1): 200, ("k3", 64, 2): 260})
    r = recommend(pts, ["baseline", "k3"])
    assert r["guard"] == {"maxConcurrency": None, "maxContext": None}
    assert r["crossover"][0]["concurrency"] is None and "pays at every measured concurrency" in r["crossover"][0]["reason"]
    assert r["best"] == "k3"


def test_a_dip_followed_by_a_win_is_not_a_crossover():
    pts = table({("baseline", 64, 1): 100, ("baseline", 64, 2): 150, ("baseline", 64, 4): 200,
                 ("k3", 64, 1): 200, ("k3", 64, 2): 140, ("k3", 64, 4): 260})
    assert recommend(pts, ["baseline", "k3"])["crossover"][0]["concurrency"] is None


def test_guard_is_the_smallest_crossover_and_max_context():
    pts = table({("baseline", 64, 1): 100, ("baseline", 64, 8): 400, ("baseline", 4096, 1): 80, ("baseline", 4096, 8): 300,
                 ("k3", 64, 1): 200, ("k3", 64, 8): 380, ("k3", 4096, 1): 70, ("k3", 4096, 8): 200})
    r = recommend(pts, ["baseline", "k3"])
    assert [(x["context"], x["concurrency"]) for x in r["crossover"]] == [(64, 8), (4096, 1)]
    assert r["guard"] == {"maxConcurrency": 1, "maxContext": 64}


def test_ties_go_to_the_baseline_then_to_plan_order():
    pts = table({("baseline", 64, 1): 100, ("k3", 64, 1): 100, ("k7", 64, 1): 100})
    r = recommend(pts, ["baseline", "k3", "k7"])
    assert r["bands"][0]["best"] == "baseline" and r["crossover"][0]["concurrency"] == 1
    pts = table({("baseline", 64, 1): 100, ("k3", 64, 1): 150, ("k7", 64, 1): 150})
    assert recommend(pts, ["baseline", "k3", "k7"])["bands"][0]["best"] == "k3"


def test_unequal_outputs_exclude_the_variant():
    pts = [pt("baseline", 64, 1, 100), pt("k3", 64, 1, 300, digests=OTHER), pt("k7", 64, 1, 150)]
    eq = equal_to_baseline(pts)
    assert eq == {"baseline/c64/n1": None, "k3/c64/n1": False, "k7/c64/n1": True}
    r = recommend(pts, ["baseline", "k3", "k7"])
    assert r["bands"][0]["best"] == "k7"
    assert r["excluded"] == [{"variant": "k3", "reason": "greedy outputs differ from the baseline's at context 64 concurrency 1"}]
    assert "excluded: k3" in r["summary"]


def test_no_baseline():
    pts = [pt("k3", 64, 1, 200), pt("k7", 64, 1, 250)]
    assert equal_to_baseline(pts) == {"k3/c64/n1": None, "k7/c64/n1": None}
    r = recommend(pts, ["k3", "k7"])
    assert r["bands"] == [{"context": 64, "concurrency": 1, "best": "k7", "outputTokensPerSecond": 250}]
    assert r["crossover"][0]["concurrency"] is None and "no baseline" in r["crossover"][0]["reason"]
    assert r["guard"]["maxConcurrency"] is None and r["summary"].startswith("no baseline measured")


def test_failed_and_missing_points_are_skipped():
    pts = [pt("baseline", 64, 1, 100), pt("baseline", 64, 4, 300, failed=1),
           pt("k3", 64, 1, 200), pt("k3", 64, 4, 100)]  # no usable baseline at 4: no judgement there
    r = recommend(pts, ["baseline", "k3"])
    assert [(b["concurrency"], b["best"]) for b in r["bands"]] == [(1, "k3"), (4, "k3")]
    assert "speedup" not in r["bands"][1]
    assert r["crossover"][0]["concurrency"] is None
    pts = [pt("baseline", 64, 1, 100), pt("k3", 64, 1, 0, completed=0)]
    r = recommend(pts, ["baseline", "k3"])
    assert r["excluded"] == [{"variant": "k3", "reason": "no point completed without failed requests"}]
    assert r["bands"][0]["best"] == "baseline"
    assert recommend([], ["baseline", "k3"])["summary"] == "no usable point: nothing to recommend"


def test_digest_counts_must_match():
    pts = [pt("baseline", 64, 1, 100), pt("k3", 64, 1, 120, digests=SAME[:1])]
    assert equal_to_baseline(pts)["k3/c64/n1"] is None
