"""The canary timeline plot (specdeploy_dev.rollout_plot): series from the recorded counters, the operator's points,
and a PNG from a small timeline in the shape e2e/test_e2e_rollout_vllm_cpu.py writes."""

from __future__ import annotations

import json

from specdeploy_dev import rollout_plot as rp


def timeline() -> list[dict]:
    samples = []
    for i in range(10):
        canary = {"drafts": 10.0 * i, "accepted": 5.0 * i, "pods": 1, "ready": i >= 3}
        stable = {"drafts": 20.0 * i, "accepted": 54.0 * i, "pods": 1, "ready": True}
        analysis = [{"track": "stable", "tau": 3.7, "drafts": 100},
                    {"track": "canary", "tau": 1.5 if i < 6 else 1.45, "drafts": 3 if i == 4 else 10 * i}] if i >= 4 else None
        samples.append({"t": 2.0 * i, "phase": "Analyzing", "tracks": {"stable": stable, "canary": canary},
                        "analysis": analysis})
    return [{"scenario": "a", "title": "shifted drafter: rolled back", "samples": samples,
             "decision": {"t": 17.0, "result": "Rollback", "reason": "AcceptanceBelowStable"}}]


def test_series_start_at_min_drafts_and_give_tau_from_the_counters():
    xs, ys = rp.series(timeline()[0], "canary")
    assert xs[0] == 2.0 and all(y == 1.5 for y in ys)  # 10 drafts at i=1: 1 + 5/10
    xs, ys = rp.series(timeline()[0], "stable")
    assert xs[0] == 2.0 and ys[0] == 1 + 54 / 20
    px, py = rp.operator_points(timeline()[0], "canary")
    assert (px, py) == ([10.0, 12.0], [1.5, 1.45])  # from MIN_DRAFTS drafts on, only when the recorded tau changed
    assert rp.canary_ready_at(timeline()[0]) == 6.0


def test_render_writes_a_png(tmp_path):
    src = tmp_path / "timeline.json"
    src.write_text(json.dumps(timeline()))
    out = tmp_path / "rollout.png"
    assert rp.main([str(src), str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rp.main([str(src), str(tmp_path / "none.png"), "--scenarios", "zz"]) == 1
