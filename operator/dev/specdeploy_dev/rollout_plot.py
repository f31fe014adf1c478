"""The canary timeline plot of docs/how-to/roll-out-safely.md: tau of the stable and the canary pods over time,
the decision marked, one panel per scenario.

e2e/test_e2e_rollout_vllm_cpu.py records a timeline per scenario (every ~2 s: each engine pod's own
``vllm:spec_decode_*`` counters by track, the operator's ``status.rollout``) and writes them as JSON to
``$SPECDEPLOY_E2E_ROLLOUT_TIMELINE`` (default: the loop's work directory, ``rollout-timeline.json``). Rendered with::

    .venv/bin/python -m specdeploy_dev.rollout_plot TIMELINE.json docs/images/rollout-tau.png

The lines are tau = 1 + accepted / drafts from the engines' counters, summed over a track's pods, counted from
each pod's first scrape in the scenario (deltas, as the operator's analysis counts them); the markers are the
taus the operator recorded in ``status.rollout.analysis``. matplotlib (the ``report`` extra), Agg backend.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

COLORS = {"stable": "C0", "canary": "C3"}
LEAD = 30.0  # seconds of the canary's start-up shown before it was ready
TAIL = 30.0  # seconds shown after the decision
MIN_DRAFTS = 5  # a track's line starts once it has this many draft steps (tau of 1 or 2 drafts is noise)


def series(scenario: dict[str, Any], track: str) -> tuple[list[float], list[float]]:
    """(seconds since apply, tau) of one track's engine counters."""
    xs, ys = [], []
    for s in scenario.get("samples") or []:
        t = (s.get("tracks") or {}).get(track) or {}
        drafts, accepted = t.get("drafts") or 0, t.get("accepted") or 0
        if drafts >= MIN_DRAFTS:
            xs.append(float(s["t"]))
            ys.append(1 + accepted / drafts)
    return xs, ys


def operator_points(scenario: dict[str, Any], track: str) -> tuple[list[float], list[float]]:
    """(seconds since apply, tau) each time the operator's status.rollout.analysis row of ``track`` changed."""
    xs, ys, last = [], [], None
    for s in scenario.get("samples") or []:
        row = next((r for r in s.get("analysis") or [] if r.get("track") == track), None)
        tau = (row or {}).get("tau")
        if isinstance(tau, (int, float)) and tau != last and ((row or {}).get("drafts") or 0) >= MIN_DRAFTS:
            xs.append(float(s["t"]))
            ys.append(float(tau))
            last = tau
    return xs, ys


def canary_ready_at(scenario: dict[str, Any]) -> float | None:
    return next((float(s["t"]) for s in scenario.get("samples") or []
                 if ((s.get("tracks") or {}).get("canary") or {}).get("ready")), None)


def render(timeline: list[dict[str, Any]], out: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(timeline), figsize=(5.2 * len(timeline), 3.9), squeeze=False,
                             constrained_layout=True)
    for ax, sc in zip(axes[0], timeline):
        top = 2.0
        for track in ("stable", "canary"):
            xs, ys = series(sc, track)
            if xs:
                ax.plot(xs, ys, color=COLORS[track], label=f"{track} (engine counters)")
                top = max(top, max(ys))
            px, py = operator_points(sc, track)
            if px:
                ax.plot(px, py, "o", color=COLORS[track], markersize=4, label=f"{track} (operator's analysis)")
                top = max(top, max(py))
        ready = canary_ready_at(sc)
        left = 0.0
        if ready is not None:
            # the canary's boot is most of the time and nothing is judged during it: shown from LEAD s before it ended
            left = max(0.0, ready - LEAD)
            ax.axvspan(left, ready, color="0.9", label=f"canary starting (ready at {ready:.0f} s)")
        d = sc.get("decision") or {}
        if d.get("t") is not None:
            ax.axvline(float(d["t"]), color="black", linestyle="--",
                       label=f"{d.get('result')}: {d.get('reason')} at {float(d['t']):.0f} s")
        ax.set_ylim(1, top * 1.15)
        # up to TAIL s after the decision (a promotion's stable roll after it is the Deployment's, not the analysis)
        ax.set_xlim(left=left, right=float(d["t"]) + TAIL if d.get("t") is not None else None)
        ax.set_xlabel("seconds since the change was applied")
        ax.set_ylabel("acceptance length (tau)")
        ax.set_title((sc.get("title") or sc.get("scenario") or "") + (f": {d['result']}" if d.get("result") else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="center left")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdeploy_dev.rollout_plot", description=__doc__.split("\n\n")[0])
    p.add_argument("timeline", help="the JSON e2e/test_e2e_rollout_vllm_cpu.py wrote")
    p.add_argument("out", help="the PNG to write")
    p.add_argument("--scenarios", default="", help="comma-separated scenario keys to plot (default: all)")
    a = p.parse_args(argv)
    with open(a.timeline, encoding="utf-8") as f:
        timeline = json.load(f)
    want = [x for x in a.scenarios.split(",") if x]
    if want:
        timeline = [sc for sc in timeline if sc.get("scenario") in want]
    if not timeline:
        print(f"{a.timeline}: no scenario to plot", file=sys.stderr)
        return 1
    print(render(timeline, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
