"""The acceptance baseline and the regression verdict (core/rollout/baseline.py): tables, no I/O."""

from __future__ import annotations

import pytest

from specdeploy.core import acceptance as acc
from specdeploy.core.rollout import baseline as bl

P = bl.Params(regression_fraction=0.25, settle_seconds=60, min_drafts=200)
SPEC = {"engine": {"name": "vllm", "version": "0.33.0"}, "target": {"model": "Qwen/Qwen3-8B"},
        "drafter": {"model": "z-lab/Qwen3-8B-DFlash-b16", "revision": "main"}, "gpu": {"type": "b300", "count": 1}}
RESOLVED = {"drafterConfigDigest": "sha256:aaa", "targetConfigDigest": "sha256:bbb", "drafterRevision": "c0ffee",
            "image": "ghcr.io/x/vllm:0.33.0", "blockSize": 16, "numSpeculativeTokens": 15}


def A(length, drafts=100.0, per_position=()):
    return acc.Acceptance(engine="vllm", length=length, rate=None, per_position=tuple(per_position), drafts=drafts)


def S(length):  # SGLang: no draft counts
    return acc.Acceptance(engine="sglang", length=length, rate=None, window="instant")


def B(length=4.0, revision="r1", **kw):
    return bl.Baseline(length, revision, "T0", **kw)


# ----------------------------------------------------------------- revision


def _with(doc, path, value):
    import copy

    doc = copy.deepcopy(doc)
    cur = doc
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return doc


@pytest.mark.parametrize("where,path,value", [
    ("spec", "drafter.revision", "v2"), ("spec", "drafter.model", "other/drafter"),
    ("spec", "target.revision", "abc"), ("spec", "engine.version", "0.32.0"), ("spec", "engine.image", "my/vllm:1"),
    ("spec", "speculation.blockSize", 8), ("spec", "speculation.draftWindow", "off"),
    ("spec", "engine.extraArgs", ["--dtype", "float16"]),
    ("resolved", "drafterConfigDigest", "sha256:shifted-ids"), ("resolved", "drafterRevision", "deadbeef"),
    ("resolved", "image", "ghcr.io/x/vllm:0.33.1"), ("resolved", "numSpeculativeTokens", 7),
])
def test_revision_moves_with_what_changes_speculation(where, path, value):
    before = bl.speculation_revision(SPEC, RESOLVED)
    spec, resolved = (_with(SPEC, path, value), RESOLVED) if where == "spec" else (SPEC, _with(RESOLVED, path, value))
    assert bl.speculation_revision(spec, resolved) != before


@pytest.mark.parametrize("path,value", [
    ("replicas", 4), ("gpu.count", 2), ("pod.nodeSelector", {"a": "b"}), ("monitoring.minAcceptanceLength", 2.0),
    ("monitoring.regressionFraction", 0.1), ("checks.accept", ["TargetLayerIdsShifted"]),
])
def test_revision_ignores_what_does_not(path, value):
    assert bl.speculation_revision(_with(SPEC, path, value), RESOLVED) == bl.speculation_revision(SPEC, RESOLVED)


def test_revision_is_stable_and_short():
    r = bl.speculation_revision(SPEC, RESOLVED)
    assert r == bl.speculation_revision(dict(reversed(list(SPEC.items()))), dict(RESOLVED)) and len(r) == 12
    assert bl.speculation_revision(None, None) == bl.speculation_revision({}, {})
    assert bl.speculation_revision(SPEC, None) != r


# ----------------------------------------------------------------- params and stored form


@pytest.mark.parametrize("monitoring,want", [
    (None, bl.Params()),
    ({"regressionFraction": 0.1, "baselineSettleSeconds": 60, "baselineMinDrafts": 50}, bl.Params(0.1, 60, 50)),
    ({"regressionFraction": 1.5, "baselineSettleSeconds": -1, "baselineMinDrafts": True}, bl.Params()),
    ({"regressionFraction": "0.1"}, bl.Params()),
])
def test_params_from_spec(monitoring, want):
    assert bl.params_from_spec({"monitoring": monitoring} if monitoring is not None else {}) == want


@pytest.mark.parametrize("doc,want", [
    ({"length": 3.96, "revision": "r1", "since": "T0", "drafts": 1200}, B(3.96, drafts=1200.0)),
    ({"length": 3.96, "revision": "r1", "since": "T0", "resetToken": "x"}, B(3.96, reset_token="x")),
    ({"length": 0.5, "revision": "r1", "since": "T0"}, None),  # tau < 1 is no acceptance length
    ({"length": "4", "revision": "r1", "since": "T0"}, None),
    ({"length": 4.0, "revision": "", "since": "T0"}, None),
    ({"length": 4.0, "since": "T0"}, None),
    (None, None), ("garbage", None),
])
def test_baseline_from_status(doc, want):
    assert bl.Baseline.from_status(doc) == want


def test_baseline_round_trips_through_status():
    b = bl.Baseline(3.9612, "r1", "T0", 1234.0, "tok")
    assert b.to_status() == {"length": 3.96, "revision": "r1", "since": "T0", "drafts": 1234, "resetToken": "tok"}
    assert bl.Baseline.from_status(b.to_status()) == bl.Baseline(3.96, "r1", "T0", 1234.0, "tok")
    assert B().to_status() == {"length": 4.0, "revision": "r1", "since": "T0"}


# ----------------------------------------------------------------- learning


def _feed(windows, baseline=None, *, revision="r1", dt=30.0, params=P, current_config=True, token=None):
    """Feed (length, drafts) windows every dt seconds; returns (baseline, settling, index settled at)."""
    settling, at = None, None
    for i, (length, drafts) in enumerate(windows):
        before = baseline
        baseline, settling = bl.step(baseline, settling, A(length, drafts), revision=revision, now=i * dt,
                                     now_text=f"T{i}", params=params, current_config=current_config, token=token)
        if baseline is not before and at is None:
            at = i
    return baseline, settling, at


def test_first_baseline_needs_time_drafts_and_samples():
    # 30s windows, 100 drafts each: 60s needs the 3rd window (t=60), 200 drafts the 2nd, 3 samples the 3rd
    b, s, at = _feed([(4.0, 100)] * 5)
    assert at == 2 and b == bl.Baseline(4.0, "r1", "T2", 300.0) and s is None
    # fewer drafts per window: the draft count decides
    b, _s, at = _feed([(4.0, 40)] * 6)
    assert at == 4 and b.drafts == 200
    # the time decides
    b, _s, at = _feed([(4.0, 1000)] * 4, params=bl.Params(0.25, 90, 1))
    assert at == 3


def test_a_collapsed_window_restarts_settling():
    # healthy, collapsed (below the 1.5 floor), healthy x3: the baseline is the healthy windows only
    windows = [(4.0, 100), (4.0, 100), (1.05, 100), (4.0, 100), (4.0, 100), (4.0, 100)]
    settling, baseline = None, None
    for i, (length, drafts) in enumerate(windows):
        baseline, settling = bl.step(baseline, settling, A(length, drafts), revision="r1", now=i * 30.0,
                                     now_text=f"T{i}", params=P, min_length=1.5)
    assert baseline == bl.Baseline(4.0, "r1", "T5", 300.0)
    # without the floor the collapse is averaged in (the old behaviour this guards against)
    b, _s, _at = _feed(windows)
    assert b.length < 4.0


def test_the_baseline_is_the_draft_weighted_mean():
    b, _s, _at = _feed([(2.0, 100), (4.0, 300), (4.0, 0), (4.0, 100)])  # a window without drafts is no sample
    assert b.length == pytest.approx((2.0 * 100 + 4.0 * 300 + 4.0 * 100) / 500)


def test_sglang_settles_on_windows_alone():
    settling, base = None, None
    for i, tau in enumerate([3.0, 4.0, 5.0]):
        base, settling = bl.step(base, settling, S(tau), revision="r1", now=i * 30.0, now_text=f"T{i}", params=P)
    assert base == bl.Baseline(4.0, "r1", "T2", None)


def test_only_the_latest_settled_run_counts():
    """A collapse early in a revision's life, fixed without a spec change, does not drag the
    baseline down: the baseline is the mean of the latest windows that satisfy the settling rules."""
    long, short = bl.Params(0.25, 600, 200), bl.Params(0.25, 60, 200)
    base, settling = None, None
    for i, tau in enumerate([1.05, 1.05] + [4.0] * 8):  # 300 s: not settled at 600 s
        base, settling = bl.step(base, settling, A(tau), revision="r1", now=i * 30.0, now_text="T", params=long)
    assert base is None and len(settling.samples) == 10
    # the settling time is lowered (spec.monitoring changed): the latest 60 s settle at once
    base, settling = bl.step(base, settling, A(4.0), revision="r1", now=300.0, now_text="T", params=short)
    assert settling is None and base.length == pytest.approx(4.0) and base.drafts == 300


def test_low_traffic_reaches_back_for_drafts():
    b, _s, at = _feed([(4.0, 10)] * 30, params=bl.Params(0.25, 60, 200))
    assert at == 19 and b.drafts == 200  # 20 windows hold 200 drafts


def test_no_evidence_changes_nothing():
    s = bl.Settling("r1", ((0.0, 4.0, 100.0, 100.0),))
    for a in (None, A(None, drafts=0.0), A(3.0, drafts=0.0)):
        assert bl.step(None, s, a, revision="r1", now=99.0, now_text="T", params=P) == (None, s)


def test_rollout_windows_are_not_averaged():
    b, s, at = _feed([(4.0, 100)] * 5, current_config=False)
    assert (b, s, at) == (None, None, None)


def test_this_revisions_baseline_is_fixed():
    b = B(4.0)
    assert bl.step(b, None, A(2.0), revision="r1", now=1e6, now_text="T", params=P) == (b, None)


def test_a_new_revision_within_the_fraction_replaces_the_baseline():
    b, _s, at = _feed([(3.5, 100)] * 4, baseline=B(4.0, "r0"))
    assert at == 2 and (b.length, b.revision) == (3.5, "r1")


def test_a_better_revision_raises_the_bar():
    b, _s, _at = _feed([(6.0, 100)] * 4, baseline=B(4.0, "r0"))
    assert (b.length, b.revision) == (6.0, "r1")


def test_a_worse_revision_keeps_the_carried_baseline():
    """The shifted-ids case: the spec changed and tau fell: the old baseline stays the bar."""
    old = B(4.0, "r0")
    b, s, at = _feed([(2.5, 100)] * 10, baseline=old)
    assert b is old and at is None and s.revision == "r1" and 3 <= len(s.samples) < 10  # still measuring


def test_reset_token_is_recorded_with_the_learned_baseline():
    b, _s, _at = _feed([(2.5, 100)] * 4, token="accept-1")
    assert b.reset_token == "accept-1"


@pytest.mark.parametrize("token,baseline,handled,want", [
    (None, B(), None, (B(), False)),  # no annotation: the baseline stands
    ("a", B(), None, (None, True)),  # a baseline learned before the annotation: reset
    ("a", B(reset_token="a"), None, (B(reset_token="a"), False)),  # learned after this reset (restart-safe)
    ("a", B(), "a", (None, False)),  # acted on, status not written yet: still gone, settling goes on
    ("b", B(reset_token="a"), "a", (None, True)),  # a new value
    ("a", None, None, (None, True)),
    ("a", None, "a", (None, False)),  # relearning
])
def test_apply_reset(token, baseline, handled, want):
    assert bl.apply_reset(baseline, token, handled) == want


def test_reset_token_from_annotations():
    assert bl.reset_token({bl.RESET_ANNOTATION: "x" * 500}) == "x" * bl.MAX_TOKEN
    assert bl.reset_token({bl.RESET_ANNOTATION: ""}) is None
    assert bl.reset_token(None) is None and bl.reset_token({"other": "1"}) is None
    assert bl.RESET_ANNOTATION == "specdeploy.io/reset-acceptance-baseline"


# ----------------------------------------------------------------- verdict


@pytest.mark.parametrize("a,baseline,revision,reason", [
    (A(3.9), B(4.0), "r1", acc.HEALTHY),
    (A(3.1), B(4.0), "r1", acc.HEALTHY),  # 22.5% below: within 25%
    (A(2.9), B(4.0), "r1", acc.REGRESSED),  # 27.5% below
    (A(2.9), B(4.0), "r2", acc.REGRESSED),  # against a carried-over baseline
    (A(1.2), B(4.0), "r1", acc.COLLAPSED),  # a collapse is the stronger statement
    (A(2.9), None, "r1", acc.HEALTHY),  # no baseline yet: the floor only
    (A(2.5, per_position=[0.9, 0.01]), B(4.0), "r1", acc.REGRESSED),  # regression wins over cliff
    (A(4.0, per_position=[0.9, 0.01]), B(4.0), "r1", acc.CLIFF),
    (A(None, drafts=0.0), B(4.0), "r1", acc.NO_TRAFFIC),
    (None, B(4.0), "r1", acc.NO_METRICS),
])
def test_judge(a, baseline, revision, reason):
    h, msg = bl.judge(a, 1.5, baseline, revision=revision, fraction=0.25)
    assert h.reason == reason and msg
    assert h.status == {acc.HEALTHY: acc.OK, acc.NO_TRAFFIC: acc.UNKNOWN, acc.NO_METRICS: acc.UNKNOWN}.get(
        reason, acc.DEGRADED)


def test_regression_message_gives_both_numbers_and_the_way_out():
    _h, same = bl.judge(A(2.5), 1.5, B(4.0, "r1"), revision="r1", fraction=0.25)
    assert "2.50" in same and "4.00" in same and "38% below" in same and "this revision (r1)" in same
    assert bl.RESET_ANNOTATION in same
    _h, carried = bl.judge(A(2.5), 1.5, B(4.0, "r0"), revision="r1", fraction=0.25)
    assert "learned on revision r0" in carried and "now runs revision r1" in carried
    assert "drafter, target, engine or speculation settings changed" in carried
    _h, healthy = bl.judge(A(3.9), 1.5, B(4.0, "r0"), revision="r1", fraction=0.25)
    assert healthy.startswith("acceptance length 3.90") and "carried over from revision r0" in healthy


def test_the_fraction_is_the_threshold():
    assert bl.judge(A(3.5), 1.5, B(4.0), revision="r1", fraction=0.1)[0].reason == acc.REGRESSED
    assert bl.judge(A(3.5), 1.5, B(4.0), revision="r1", fraction=0.2)[0].reason == acc.HEALTHY
