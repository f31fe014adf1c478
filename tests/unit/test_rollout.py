"""Canary rollouts (core/rollout/canary.py): durations, the revision and what triggers it, the counters'
accumulation per pod, the judgement and the state machine. Tables, no I/O."""

from __future__ import annotations

import hashlib
import math

import pytest

from specdeploy.core import acceptance as acc
from specdeploy.core.rollout import canary as ro
from specdeploy.core.names import REVISION_ANNOTATION, TRACK_LABEL

# ----------------------------------------------------------------- durations


@pytest.mark.parametrize("text,seconds", [
    ("30s", 30), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400), ("500ms", 0.5), ("0", 0), ("2h0m0s", 7200),
    (" 10s ", 10), ("1m30s", 90), (".5m", 30), ("100us", 1e-4), ("1ns", 1e-9),
])
def test_parse_duration(text, seconds):
    assert ro.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "10", "-5m", "+5m", "10 m", "10d", "m", "1h30", "ten minutes", "1e3s", None, 600,
                                 True])
def test_parse_duration_refuses(bad):
    with pytest.raises(ValueError, match="30s"):
        ro.parse_duration(bad)


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59.9, "59s"), (120, "2m0s"), (600, "10m0s"), (5400, "1h30m0s"),
                                          (-3, "0s"), (math.nan, "0s")])
def test_format_duration(seconds, text):
    assert ro.format_duration(seconds) == text


# ----------------------------------------------------------------- revision


def test_revision_is_the_contracts_digest():
    want = hashlib.sha256(b"cfg|t0|d0").hexdigest()[:16]
    assert ro.revision("cfg", "t0", "d0") == want
    assert ro.revision("cfg", None, None) == hashlib.sha256(b"cfg||").hexdigest()[:16]
    assert ro.revision("cfg", None, None) == ro.revision("cfg", "", "")


@pytest.mark.parametrize("other", [("cfg2", "t0", "d0"), ("cfg", "t1", "d0"), ("cfg", "t0", "d1"), ("cfg", None, "d0"),
                                   ("cfg", "d0", "t0")])
def test_revision_changes_with_each_part(other):
    assert ro.revision(*other) != ro.revision("cfg", "t0", "d0")


# The trigger: which spec changes start a rollout. The revision is computed the way the reconciler does,
# from the rendered engine pod template (template_digest) and the resolved commits.

def _render(**spec):
    from test_render import do_render, make_cr, pod_template

    return pod_template(do_render(make_cr("vllm", "0.33.0", **spec)))


DRAFTER = "z-lab/Qwen3.6-27B-DFlash"
TARGET = "Qwen/Qwen3.6-27B"


@pytest.mark.parametrize("change,spec,starts", [
    ("replicas (scale)", {"replicas": 5}, False),
    ("replicas to zero", {"replicas": 0}, False),
    ("monitoring thresholds", {"monitoring": {"minAcceptanceLength": 2.0}}, False),
    ("drafter revision", {"drafter": {"model": DRAFTER, "revision": "v2"}}, True),
    ("target revision", {"target": {"model": TARGET, "revision": "abc"}}, True),
    ("engine version", {"engine": {"name": "vllm", "version": "0.32.0"}}, True),
    ("engine image", {"engine": {"name": "vllm", "version": "0.33.0", "image": "ghcr.io/x/vllm:custom"}}, True),
    ("extraArgs", {"engine": {"name": "vllm", "version": "0.33.0", "extraArgs": ["--max-num-seqs=8"]}}, True),
    ("speculation blockSize", {"speculation": {"blockSize": 8}}, True),
    ("pod cpu", {"pod": {"cpu": "4"}}, True),
    ("pod memory", {"pod": {"memory": "8Gi"}}, True),
    ("pod tolerations", {"pod": {"tolerations": [{"key": "a", "operator": "Exists"}]}}, True),
])
def test_trigger_spec_changes(change, spec, starts):
    base = ro.revision(ro.template_digest(_render()), "t" * 40, "d" * 40)
    changed = ro.revision(ro.template_digest(_render(**spec)), "t" * 40, "d" * 40)
    assert (changed != base) is starts, change


def test_trigger_retrained_drafter_under_the_same_name():
    """Same spec text, same template: a new resolved drafter (or target) commit is a new revision."""
    digest = ro.template_digest(_render())
    assert ro.template_digest(_render()) == digest  # deterministic
    assert ro.revision(digest, "t" * 40, "e" * 40) != ro.revision(digest, "t" * 40, "d" * 40)
    assert ro.revision(digest, "u" * 40, "d" * 40) != ro.revision(digest, "t" * 40, "d" * 40)


def test_render_config_hash_misses_image_and_pod_settings():
    """Why template_digest exists: the render's config hash covers the engine command only."""
    from test_render import do_render, make_cr

    base = do_render(make_cr("vllm", "0.33.0"))
    image = do_render(make_cr("vllm", "0.33.0", engine={"name": "vllm", "version": "0.33.0", "image": "x/y:z"}))
    assert image.config_hash == base.config_hash
    assert ro.template_digest(base.objects[1]["spec"]["template"]) != ro.template_digest(
        image.objects[1]["spec"]["template"])


def test_template_digest_ignores_what_the_rollout_writes():
    t = {"metadata": {"labels": {"app": "x"}, "annotations": {"a": "1"}}, "spec": {"containers": [{"image": "i"}]}}
    marked = {"metadata": {"labels": {"app": "x", TRACK_LABEL: "canary"},
                           "annotations": {"a": "1", REVISION_ANNOTATION: "0123456789abcdef"}},
              "spec": {"containers": [{"image": "i"}]}}
    assert ro.template_digest(marked) == ro.template_digest(t)
    assert marked["metadata"]["labels"][TRACK_LABEL] == "canary"  # the argument is not changed
    other = {"metadata": {"labels": {"app": "x"}, "annotations": {"a": "2"}}, "spec": {"containers": [{"image": "i"}]}}
    assert ro.template_digest(other) != ro.template_digest(t)
    assert len(ro.template_digest(t)) == 16


# ----------------------------------------------------------------- parameters


def test_params_defaults():
    assert ro.params_from_spec(None) == ro.Params()
    assert ro.params_from_spec({}) == ro.Params()
    assert ro.Params() == ro.Params(600, 200, 0.9, 0.9, 0.01, 1800, True, 32)


SPEC = {"strategy": "Canary", "canary": {"replicas": 2}, "deadline": "1h",
        "analysis": {"window": "5m", "minDrafts": 50, "minAcceptanceRatio": 0.8, "minThroughputRatio": 0,
                     "maxErrorRate": 0.05, "probe": {"enabled": False, "maxTokens": 64}}}


def test_params_from_spec_dict():
    assert ro.params_from_spec(SPEC) == ro.Params(300, 50, 0.8, 0.0, 0.05, 3600, False, 64)


def test_params_from_spec_typed_model():
    class Typed:  # what api/types.Rollout (pydantic) gives: model_dump(by_alias=True)
        def model_dump(self, by_alias=False, exclude_none=False):
            assert by_alias
            return SPEC

    assert ro.params_from_spec(Typed()) == ro.params_from_spec(SPEC)


@pytest.mark.parametrize("analysis,field,default", [
    ({"window": "soon"}, "window_s", 600), ({"minDrafts": -1}, "min_drafts", 200),
    ({"minAcceptanceRatio": 1.5}, "min_acceptance_ratio", 0.9), ({"maxErrorRate": True}, "max_error_rate", 0.01),
    ({"probe": {"enabled": "yes"}}, "probe", True), ({"probe": {"maxTokens": 0}}, "probe_max_tokens", 32),
])
def test_params_out_of_range_fall_back(analysis, field, default):
    assert getattr(ro.params_from_spec({"analysis": analysis}), field) == default


# ----------------------------------------------------------------- totals


def test_totals_figures():
    t = ro.Totals(drafts=100, accepted_tokens=272, output_tokens=500, running_request_seconds=50, requests=40,
                  failed_requests=2, per_position_accepted=[90, 80])
    assert t.tau() == pytest.approx(3.72)
    assert t.tokens_per_second_per_request() == pytest.approx(10.0)
    assert t.error_rate() == pytest.approx(0.05)
    assert t.per_position() == [0.9, 0.8]
    assert t.speculates() is True
    empty = ro.Totals()
    assert (empty.tau(), empty.tokens_per_second_per_request(), empty.error_rate(), empty.speculates()) == \
        (None, None, None, None)
    assert ro.Totals(output_tokens=5).speculates() is False
    assert ro.Totals(requests=0, failed_requests=3).error_rate() == 1.0


def test_totals_add():
    a = ro.Totals(pods=1, drafts=1, accepted_tokens=2, per_position_accepted=[1.0], output_tokens=3, requests=4)
    b = ro.Totals(pods=2, drafts=10, failed_requests=1, per_position_accepted=[1.0, 2.0], running_request_seconds=5)
    s = a.add(b)
    assert s == ro.Totals(pods=3, drafts=11, accepted_tokens=2, per_position_accepted=[2.0, 2.0], output_tokens=3,
                          running_request_seconds=5, requests=4, failed_requests=1)
    assert a.per_position_accepted == [1.0] and b.drafts == 10  # inputs unchanged


# ----------------------------------------------------------------- accumulator


def vllm(drafts=0, draft_tokens=0, accepted=0, per_pos=(), gen=0, running=0, success=None, rejected=0, start=None,
         engines=("0",)):
    """A vLLM 0.33 /metrics exposition (counters split evenly over the DP engines)."""
    n = len(engines)
    out = ["# TYPE vllm:spec_decode_num_drafts counter"]
    for e in engines:
        lab = f'engine="{e}",model_name="m"'
        out += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts / n}",
                f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9",
                f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {draft_tokens / n}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted / n}",
                f"vllm:generation_tokens_total{{{lab}}} {gen / n}",
                f"vllm:num_requests_running{{{lab}}} {running}"]
        out += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {v / n}'
                for i, v in enumerate(per_pos)]
        for reason, v in (success or {}).items():
            out.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {v / n}')
    out.append(f'vllm:admission_rejections_total{{model_name="m",reason="max_num_queued_reqs"}} {rejected}')
    if start is not None:
        out.append(f"process_start_time_seconds {start}")
    return "\n".join(out) + "\n"


def sglang(verify=0, gen=0, running=0, requests=0, aborted=0):
    lab = 'model_name="m",tp_rank="0"'
    return "\n".join([
        f'sglang:spec_verify_calls_total{{{lab}}} {verify}',
        f'sglang:generation_tokens_total{{model_name="m",is_streaming="false"}} {gen}',
        f'sglang:num_running_reqs{{{lab}}} {running}',
        f'sglang:num_requests_total{{model_name="m",is_streaming="false"}} {requests}',
        f'sglang:num_aborted_requests_total{{model_name="m"}} {aborted}',
        'sglang:spec_accept_length{model_name="m",tp_rank="0"} 3.0',
    ]) + "\n"


def test_first_scrape_only_primes():
    a = ro.Accumulator()
    a.observe("u1", "canary", "vllm", vllm(drafts=5000, accepted=9000, gen=20000, running=3), 0.0)
    t = a.totals("canary")
    assert t.pods == 1
    assert (t.drafts, t.accepted_tokens, t.output_tokens, t.running_request_seconds) == (0, 0, 0, 0)


def test_vllm_deltas_match_core_acceptance():
    a = ro.Accumulator()
    prev = vllm(drafts=100, draft_tokens=1500, accepted=200, per_pos=(80, 60), gen=1000, running=2,
                success={"stop": 10, "length": 5, "abort": 3, "error": 1}, rejected=1, engines=("0", "1"))
    cur = vllm(drafts=300, draft_tokens=4500, accepted=700, per_pos=(260, 200), gen=3000, running=4,
               success={"stop": 30, "length": 5, "abort": 4, "error": 2}, rejected=3, engines=("0", "1"))
    a.observe("u1", "stable", "vllm", prev, 10.0)
    a.observe("u1", "stable", "vllm", cur, 20.0)
    t = a.totals("stable")
    assert (t.drafts, t.draft_tokens, t.accepted_tokens, t.output_tokens) == (200, 3000, 500, 2000)
    assert t.per_position_accepted == [180, 140]
    assert t.running_request_seconds == pytest.approx((2 + 4) / 2 * 10)
    # requests: 20 stop + 1 abort + 1 error finished, 2 refused at admission; failed: the error and the refusals
    assert (t.requests, t.failed_requests) == (24, 3)
    ref = acc.acceptance_from_scrapes("vllm", prev, cur)
    assert t.tau() == pytest.approx(ref.length)
    assert t.per_position() == pytest.approx(list(ref.per_position))


def test_sglang_deltas_match_core_acceptance():
    a = ro.Accumulator()
    prev, cur = sglang(verify=100, gen=400, running=1, requests=10, aborted=0), \
        sglang(verify=150, gen=600, running=3, requests=14, aborted=1)
    a.observe("s1", "canary", "sglang", prev, 0.0)
    a.observe("s1", "canary", "sglang", cur, 4.0)
    t = a.totals("canary")
    assert (t.drafts, t.output_tokens, t.requests, t.failed_requests) == (50, 200, 4, 1)
    assert t.tau() == pytest.approx(4.0)
    assert t.tau() == pytest.approx(acc.acceptance_from_scrapes("sglang", prev, cur).length)
    assert t.running_request_seconds == pytest.approx(8.0)


def test_counter_reset_on_restart_counts_from_zero():
    a = ro.Accumulator()
    a.observe("u1", "canary", "vllm", vllm(drafts=1000, accepted=2000, gen=5000), 0.0)
    a.observe("u1", "canary", "vllm", vllm(drafts=50, accepted=100, gen=300), 10.0)  # restarted: lower
    t = a.totals("canary")
    assert (t.drafts, t.accepted_tokens, t.output_tokens) == (50, 100, 300)
    a.observe("u1", "canary", "vllm", vllm(drafts=80, accepted=160, gen=500), 20.0)
    assert a.totals("canary").drafts == 80


def test_restart_seen_by_process_start_time():
    """A restart between two scrapes whose counters already passed the old values: process_start_time_seconds
    says it; the counters count from zero."""
    a = ro.Accumulator()
    a.observe("u1", "canary", "vllm", vllm(drafts=100, accepted=100, running=2, start=1000.0), 0.0)
    a.observe("u1", "canary", "vllm", vllm(drafts=150, accepted=300, running=2, start=2000.0), 10.0)
    t = a.totals("canary")
    assert (t.drafts, t.accepted_tokens) == (150, 300)
    assert t.running_request_seconds == 0  # the gauge's integral does not span the restart
    a.observe("u1", "canary", "vllm", vllm(drafts=160, accepted=310, running=2, start=2000.0), 20.0)
    assert a.totals("canary").drafts == 160
    assert a.totals("canary").running_request_seconds == pytest.approx(20)


def test_missing_scrape_is_skipped():
    a = ro.Accumulator()
    a.observe("u1", "stable", "vllm", vllm(drafts=10, running=1), 0.0)
    a.observe("u1", "stable", "vllm", None, 10.0)  # scrape failed
    a.observe("u1", "stable", "vllm", vllm(drafts=30, running=1), 20.0)
    t = a.totals("stable")
    assert t.drafts == 20
    assert t.running_request_seconds == pytest.approx(20)


def test_tracks_and_pods():
    a = ro.Accumulator()
    for uid, track in (("s1", "stable"), ("s2", "stable"), ("c1", "canary")):
        a.observe(uid, track, "vllm", vllm(drafts=0), 0.0)
        a.observe(uid, track, "vllm", vllm(drafts=10, accepted=20), 10.0)
    assert (a.totals("stable").pods, a.totals("stable").drafts) == (2, 20)
    assert (a.totals("canary").pods, a.totals("canary").drafts) == (1, 10)
    assert a.totals("other") == ro.Totals()  # no scrape at all: zero pods
    a.forget_pod("s2")
    a.forget_pod("nope")
    st = a.totals("stable")
    assert (st.pods, st.drafts) == (1, 20)  # what the gone pod measured stays
    assert a.totals("stable").pods == 1  # totals() does not change what it sums
    assert a.pods() == {"s1", "c1"}


def test_unknown_engine_and_garbage_do_not_raise():
    a = ro.Accumulator()
    a.observe("u1", "canary", "tgi", vllm(drafts=1), 0.0)
    a.observe("u1", "canary", "tgi", vllm(drafts=9), 1.0)
    a.observe("u2", "canary", "vllm", "garbage {{{", 0.0)
    a.observe("u2", "canary", "vllm", "\x00 nothing", 1.0)
    t = a.totals("canary")
    assert t.pods == 2 and t.drafts == 0


def test_series_new_in_a_later_scrape_counts_from_zero():
    """SGLang creates a labelled counter at its first increment: absent in the priming scrape."""
    a = ro.Accumulator()
    a.observe("s1", "canary", "sglang", 'sglang:num_running_reqs{tp_rank="0"} 0\n', 0.0)
    a.observe("s1", "canary", "sglang", sglang(verify=20, gen=60, requests=2), 5.0)
    t = a.totals("canary")
    assert (t.drafts, t.output_tokens, t.requests) == (20, 60, 2)


# ----------------------------------------------------------------- judge

P = ro.Params(window_s=600, min_drafts=200, min_acceptance_ratio=0.9, min_throughput_ratio=0.9, max_error_rate=0.01,
              deadline_s=1800, probe=True)
READY = ro.Health(pods=1, ready=1, restarts=0, crash_looping=False)
SAME = ro.Probe(prompts=4, identical=4, errors=0)


def T(tau=None, drafts=1000, tps=10.0, requests=100, failed=0, pods=1, output=None):
    """Totals with a given tau and tokens/s per running request."""
    accepted = (tau - 1) * drafts if tau is not None else 0
    return ro.Totals(pods=pods, drafts=drafts, accepted_tokens=accepted,
                     output_tokens=output if output is not None else (tps * 100 if tps else 0),
                     running_request_seconds=100 if tps is not None else 0, requests=requests, failed_requests=failed)


def J(stable=None, canary=None, health=READY, probe=SAME, elapsed=700, compare=True, p=P):
    return ro.judge(p, stable or T(3.72), canary or T(3.72), health, probe, elapsed, compare)


def test_acceptance_below_stable_message():
    v = J(T(3.72, drafts=1843), T(1.45, drafts=300))
    assert (v.decision, v.reason) == ("Rollback", "AcceptanceBelowStable")
    assert v.message == "canary tau 1.45 vs stable 3.72: 0.39 < 0.90"


@pytest.mark.parametrize("canary_tau,decision", [(3.6, "Promote"), (3.61, "Promote"), (3.59, "Rollback"),
                                                 (4.5, "Promote"), (1.0, "Rollback")])
def test_acceptance_threshold(canary_tau, decision):
    v = J(T(4.0), T(canary_tau))
    assert v.decision == decision
    if decision == "Rollback":
        assert v.reason == "AcceptanceBelowStable"


def test_acceptance_ratio_zero_turns_the_check_off():
    assert J(T(4.0), T(1.1), p=ro.Params(min_acceptance_ratio=0.0)).decision == "Promote"


def test_ratio_close_to_the_limit_prints_enough_digits():
    v = J(T(4.0), T(1 + 2.5968))  # 3.5968 / 4 = 0.8992
    assert v.reason == "AcceptanceBelowStable"
    assert v.message.endswith("0.899 < 0.900")


@pytest.mark.parametrize("canary_tps,decision", [(9.0, "Promote"), (9.01, "Promote"), (8.99, "Rollback"),
                                                 (20.0, "Promote")])
def test_throughput_threshold(canary_tps, decision):
    v = J(T(3.0, tps=10.0), T(3.0, tps=canary_tps))
    assert v.decision == decision
    if decision == "Rollback":
        assert v.reason == "ThroughputBelowStable"
        assert v.message == "canary 8.99 vs stable 10.00 tokens/s per running request: 0.899 < 0.900"


def test_throughput_ratio_zero_turns_the_check_off():
    assert J(T(3.0, tps=10.0), T(3.0, tps=1.0), p=ro.Params(min_throughput_ratio=0)).decision == "Promote"
    assert J(T(3.0, tps=10.0), T(3.0, tps=1.0)).reason == "ThroughputBelowStable"


@pytest.mark.parametrize("failed,requests,decision", [(0, 100, "Promote"), (1, 100, "Promote"), (2, 100, "Rollback"),
                                                      (1, 99, "Rollback"), (0, 0, "Promote")])
def test_error_rate_threshold(failed, requests, decision):
    v = J(canary=T(3.72, requests=requests, failed=failed))
    assert v.decision == decision
    if decision == "Rollback":
        assert v.reason == "ErrorRateAboveLimit"
        assert f"({failed} of {requests} requests failed)" in v.message
    if requests == 0:
        assert "error rate unknown" in v.message


def test_error_rate_of_the_stable_does_not_count():
    assert J(stable=T(3.72, requests=10, failed=10)).decision == "Promote"


@pytest.mark.parametrize("health,text", [
    (ro.Health(1, 0, 0, False, failed_to_start="ImagePullBackOff: no such image"), "failed to start: ImagePullBackOff"),
    (ro.Health(1, 0, 5, True), "crash-looping, 5 restart(s), 0/1 pods ready"),
    (ro.Health(2, 1, 1, False), "1 restart(s), 1/2 pods ready"),
])
def test_canary_crashing(health, text):
    for elapsed in (5, 700, 5000):  # before the window, after it, after the deadline: crashing comes first
        v = J(health=health, elapsed=elapsed)
        assert (v.decision, v.reason) == ("Rollback", "CanaryCrashing")
        assert text in v.message
        assert [r["track"] for r in v.table] == ["stable", "canary"]


def test_restarted_but_ready_is_not_crashing():
    assert J(health=ro.Health(1, 1, 2, False)).decision == "Promote"


def test_wait_during_the_window():
    v = J(T(3.72), T(3.72, drafts=120), elapsed=120)
    assert (v.decision, v.reason) == ("Wait", "Analyzing")
    assert v.message == "120/200 drafts on the canary, 2m0s of the 10m0s analysis window"
    v = J(elapsed=599)  # enough drafts, the window not over yet
    assert v.decision == "Wait" and v.message == "1000/200 drafts on the canary, 9m59s of the 10m0s analysis window"
    assert J(elapsed=600).decision == "Promote"


@pytest.mark.parametrize("stable_drafts,canary_drafts,decision,says", [
    (200, 200, "Promote", None), (200, 199, "Wait", "199/200 drafts on the canary"),
    (199, 200, "Wait", "199/200 drafts on the stable"), (10, 20, "Wait", "20/200 drafts on the canary, 10/200 drafts"),
])
def test_too_few_drafts(stable_drafts, canary_drafts, decision, says):
    v = J(T(3.0, drafts=stable_drafts), T(3.0, drafts=canary_drafts), elapsed=900)
    assert v.decision == decision
    if says:
        assert says in v.message and "15m0s since the canary started (analysis window 10m0s over; deadline 30m0s)" in v.message


def test_min_drafts_zero_still_needs_scrapes():
    p = ro.Params(min_drafts=0)
    v = J(T(3.0), T(3.0, pods=0, drafts=0, tps=None, requests=0), p=p)
    assert v.decision == "Wait" and "no scrape of the canary pods yet" in v.message
    v = J(T(3.0, pods=0, drafts=0), T(3.0), p=p)
    assert v.decision == "Wait" and "no scrape of the stable pods" in v.message


def test_deadline():
    short = (T(3.72), T(3.72, drafts=120))
    assert J(*short, elapsed=1799).decision == "Wait"
    v = J(*short, elapsed=1800)
    assert (v.decision, v.reason) == ("Rollback", "DeadlineExceeded")
    assert v.message == "deadline 30m0s passed undecided: 120/200 drafts on the canary, 30m0s since the canary started (analysis window 10m0s over; deadline 30m0s)"
    assert J(elapsed=1800).decision == "Promote"  # decidable at the deadline: judged
    assert J(T(3.72), T(1.2), elapsed=5000).reason == "AcceptanceBelowStable"


def test_deadline_while_the_canary_never_gets_ready():
    starting = ro.Health(1, 0, 0, False)
    v = J(health=starting, elapsed=60)
    assert (v.decision, v.reason) == ("Wait", "Progressing")
    assert v.message == "canary pods starting: 0/1 ready, 1m0s of the 10m0s analysis window"
    v = J(health=starting, elapsed=1800)
    assert (v.decision, v.reason) == ("Rollback", "DeadlineExceeded")
    assert J(health=ro.Health(0, 0, 0, False), elapsed=60).reason == "Progressing"


def test_stable_that_does_not_speculate():
    no_spec = T(None, drafts=0, tps=10.0)  # output tokens, no drafts
    v = J(no_spec, T(3.0), elapsed=600)
    assert v.decision == "Promote"
    assert "the stable track does not speculate: tau not compared" in v.message
    assert J(no_spec, T(3.0), elapsed=599).decision == "Wait"
    # the other figures still count: a speculating canary slower than the plain stable is refused
    assert J(T(None, drafts=0, tps=12.0), T(3.0, tps=10.0), elapsed=600).reason == "ThroughputBelowStable"
    # no traffic at all on the stable is not "does not speculate": wait for drafts, then the deadline
    idle = T(None, drafts=0, tps=None, output=0, requests=0)
    v = J(idle, T(3.0), elapsed=900)
    assert v.decision == "Wait" and "0/200 drafts on the stable" in v.message
    assert J(idle, T(3.0), elapsed=1800).reason == "DeadlineExceeded"


def test_canary_that_does_not_speculate_is_tau_one():
    v = J(T(3.72), T(None, drafts=0, tps=12.0), elapsed=600)
    assert (v.decision, v.reason) == ("Rollback", "AcceptanceBelowStable")
    assert v.message == "canary tau 1.00 (it does not speculate) vs stable 3.72: 0.27 < 0.90"
    assert J(T(3.72), T(None, drafts=0, tps=12.0), elapsed=599).decision == "Wait"


def test_neither_speculates():
    v = J(T(None, drafts=0), T(None, drafts=0), elapsed=600)
    assert v.decision == "Promote" and "tau not compared" in v.message


def test_none_figures_skip_their_check():
    v = J(T(3.0, tps=None), T(3.0, tps=None))
    assert v.decision == "Promote"
    assert "throughput not compared" in v.message
    assert "tokensPerSecondPerRequest" not in v.table[0]


@pytest.mark.parametrize("probe,compare,decision", [
    (ro.Probe(4, 3, 0, "prompt 2 differs at token 7"), True, "Rollback"),
    (ro.Probe(4, 3, 0), False, "Promote"),
    (ro.Probe(4, 2, 2), True, "Promote"),  # no answer is not a difference
    (ro.Probe(4, 4, 0), True, "Promote"),
])
def test_probe(probe, compare, decision):
    v = J(probe=probe, compare=compare)
    assert v.decision == decision
    if decision == "Rollback":
        assert v.reason == "OutputsDiffer"
        assert v.message == ("1 of 4 probe prompts gave different outputs on the canary at temperature 0: "
                             "prompt 2 differs at token 7")
    if not compare:
        assert "outputs not compared" in v.message


def test_probe_pending():
    v = J(probe=None)
    assert v.decision == "Wait" and "probe not run yet" in v.message
    assert J(probe=None, compare=False).decision == "Promote"
    assert J(probe=None, p=ro.Params(probe=False)).decision == "Promote"
    assert J(probe=ro.Probe(4, 0, 0), p=ro.Params(probe=False)).decision == "Promote"  # probe off: ignored
    assert J(probe=None, elapsed=1800).reason == "DeadlineExceeded"


def test_order_of_checks():
    bad_all = dict(stable=T(4.0, tps=10.0), canary=T(1.5, tps=1.0, requests=10, failed=5))
    assert J(**bad_all, probe=ro.Probe(4, 0, 0)).reason == "OutputsDiffer"
    assert J(**bad_all).reason == "AcceptanceBelowStable"
    assert J(stable=T(4.0, tps=10.0), canary=T(4.0, tps=1.0, requests=10, failed=5)).reason == "ThroughputBelowStable"
    assert J(stable=T(4.0), canary=T(4.0, requests=10, failed=5)).reason == "ErrorRateAboveLimit"


def test_promote_message_has_the_numbers():
    v = J(T(3.72), T(3.80))
    assert v.decision == "Promote" and v.reason == "Promoted"
    assert "canary tau 3.80 vs stable 3.72: 1.02 >= 0.90" in v.message
    assert "probe: 4/4 outputs identical" in v.message
    assert "canary error rate 0.00 <= 0.01 (0 of 100 requests failed)" in v.message


def test_table_rows():
    s = ro.Totals(pods=2, drafts=1843, accepted_tokens=1843 * 2.72, output_tokens=1120, running_request_seconds=100,
                  requests=40, failed_requests=0)
    c = ro.Totals(pods=1, drafts=120.4, accepted_tokens=0, requests=3, failed_requests=1)
    v = ro.judge(P, s, c, READY, SAME, 60, stable_revision="aaaa", canary_revision="bbbb")
    assert v.table == [
        {"track": "stable", "revision": "aaaa", "pods": 2, "drafts": 1843, "tau": 3.72,
         "tokensPerSecondPerRequest": 11.2, "requests": 40, "failedRequests": 0, "errorRate": 0.0},
        {"track": "canary", "revision": "bbbb", "pods": 1, "drafts": 120, "tau": 1.0, "requests": 3,
         "failedRequests": 1, "errorRate": 0.3333},
    ]
    empty = ro.judge(P, ro.Totals(), ro.Totals(), READY, None, 0).table
    assert empty == [{"track": "stable", "pods": 0, "drafts": 0, "requests": 0, "failedRequests": 0},
                     {"track": "canary", "pods": 0, "drafts": 0, "requests": 0, "failedRequests": 0}]


# ----------------------------------------------------------------- step

NOW = 1764620000.0


def O(**kw):
    base = dict(strategy="Canary", desired_revision="new", stable_revision="old", canary_revision="new",
                canary_created=NOW - 60, stable_rolled=False, refused_revision=None, request=None, request_handled=None,
                verdict=None, now=NOW, replicas=2)
    base.update(kw)
    return ro.Observed(**base)


WAITING = ro.Verdict("Wait", "Analyzing", "120/200 drafts on the canary, 2m0s of the 10m0s analysis window", [])
STARTING = ro.Verdict("Wait", "Progressing", "canary pods starting: 0/1 ready, 0s of the 10m0s analysis window", [])
BAD = ro.Verdict("Rollback", "AcceptanceBelowStable", "canary tau 1.45 vs stable 3.72: 0.39 < 0.90", [])
GOOD = ro.Verdict("Promote", "Promoted", "canary tau 3.80 vs stable 3.72: 1.02 >= 0.90", [])


@pytest.mark.parametrize("kw", [dict(strategy="RollingUpdate"), dict(stable_revision=None), dict(replicas=0),
                                dict(strategy="RollingUpdate", verdict=BAD)])
def test_step_rolling_update_and_first_deploy(kw):
    s = ro.step(O(**kw))
    assert (s.phase, s.stable_template, s.canary, s.condition[:2], s.decision) == \
        ("Stable", "desired", False, ("True", "Stable"), None)


def test_step_desired_is_stable():
    s = ro.step(O(desired_revision="old", canary_revision=None, stable_rolled=True))
    assert (s.phase, s.stable_template, s.canary, s.condition) == \
        ("Stable", "desired", False, ("True", "Stable", "serving revision old"))
    # the spec went back to the stable revision while a canary of another one ran: the canary goes
    s = ro.step(O(desired_revision="old", canary_revision="new", verdict=WAITING))
    assert (s.phase, s.canary) == ("Stable", False)


def test_step_new_revision_starts_a_canary():
    s = ro.step(O(canary_revision=None, canary_created=None))
    assert (s.phase, s.stable_template, s.canary, s.condition[:2], s.decision) == \
        ("Progressing", "live", True, ("Unknown", "Analyzing"), None)
    # a canary of an older revision (the spec changed again mid-analysis): updated, its verdict does not count
    s = ro.step(O(canary_revision="older", verdict=BAD))
    assert (s.phase, s.stable_template, s.canary, s.refused_revision) == ("Progressing", "live", True, None)


@pytest.mark.parametrize("verdict,phase", [(None, "Progressing"), (STARTING, "Progressing"), (WAITING, "Analyzing")])
def test_step_analysis(verdict, phase):
    s = ro.step(O(verdict=verdict))
    assert (s.phase, s.stable_template, s.canary, s.condition[:2]) == (phase, "live", True, ("Unknown", "Analyzing"))
    if verdict is not None:
        assert s.condition[2] == verdict.message


def test_step_rollback_verdict():
    s = ro.step(O(verdict=BAD))
    assert (s.phase, s.stable_template, s.canary, s.refused_revision) == ("RolledBack", "live", False, "new")
    assert s.condition == ("False", "AcceptanceBelowStable", BAD.message)
    assert s.decision == {"result": "Rollback", "reason": "AcceptanceBelowStable", "message": BAD.message,
                          "at": "2025-12-01T20:13:20Z"}


def test_step_refused_revision_stays_rolled_back():
    last = {"result": "Rollback", "reason": "AcceptanceBelowStable", "message": BAD.message, "at": "x"}
    s = ro.step(O(canary_revision=None, refused_revision="new", last_phase="RolledBack", last_decision=last))
    assert (s.phase, s.stable_template, s.canary, s.decision, s.refused_revision) == \
        ("RolledBack", "live", False, None, "new")
    assert s.condition[:2] == ("False", "AcceptanceBelowStable")
    assert s.condition[2].startswith(BAD.message)
    s = ro.step(O(canary_revision=None, refused_revision="new"))  # no decision recorded: still refused
    assert (s.phase, s.canary, s.condition[0]) == ("RolledBack", False, "False")
    # a further spec change is a new revision: analysed
    s = ro.step(O(desired_revision="newer", canary_revision=None, refused_revision="new"))
    assert (s.phase, s.canary, s.refused_revision) == ("Progressing", True, "new")


def test_step_retry():
    s = ro.step(O(canary_revision=None, refused_revision="new", request="retry@1", request_handled="abort@0"))
    assert (s.phase, s.canary, s.refused_revision, s.request_handled) == ("Progressing", True, None, "retry@1")
    # acted on once: the same value again does nothing
    s = ro.step(O(canary_revision=None, refused_revision="new", request="retry@1", request_handled="retry@1"))
    assert (s.phase, s.canary, s.request_handled) == ("RolledBack", False, "retry@1")


def test_step_promote_verdict_then_stable_rolls():
    s = ro.step(O(verdict=GOOD))
    assert (s.phase, s.stable_template, s.canary) == ("Promoting", "desired", True)
    assert s.condition[:2] == ("True", "Promoted")
    assert s.decision["result"] == "Promote" and s.decision["message"] == GOOD.message
    # the stable template is at desired, its pods not yet: the canary keeps serving
    s = ro.step(O(stable_revision="new", last_phase="Promoting", verdict=WAITING))
    assert (s.phase, s.stable_template, s.canary, s.decision) == ("Promoting", "desired", True, None)
    # the cache has not seen the stable template change yet: still promoting, whatever the verdict now
    s = ro.step(O(last_phase="Promoting", verdict=WAITING))
    assert (s.phase, s.stable_template, s.canary, s.decision) == ("Promoting", "desired", True, None)
    # rolled: the canary goes
    last = {"result": "Promote", "reason": "Promoted", "message": GOOD.message, "at": "x"}
    s = ro.step(O(stable_revision="new", stable_rolled=True, last_phase="Promoting", last_decision=last))
    assert (s.phase, s.stable_template, s.canary) == ("Stable", "desired", False)
    assert s.condition[:2] == ("True", "Promoted") and GOOD.message in s.condition[2]
    s = ro.step(O(stable_revision="new", stable_rolled=True, canary_revision=None, last_phase="Stable",
                  last_decision=last))
    assert (s.phase, s.canary, s.condition[:2]) == ("Stable", False, ("True", "Promoted"))


def test_step_abort_request():
    s = ro.step(O(verdict=WAITING, request="abort@5"))
    assert (s.phase, s.stable_template, s.canary, s.refused_revision, s.request_handled) == \
        ("RolledBack", "live", False, "new", "abort@5")
    assert s.condition[:2] == ("False", "Aborted") and "abort@5" in s.condition[2]
    assert s.decision["result"] == "Rollback" and s.decision["reason"] == "Aborted"


def test_step_promote_request():
    s = ro.step(O(verdict=WAITING, request="promote@7"))
    assert (s.phase, s.stable_template, s.canary, s.request_handled) == ("Promoting", "desired", True, "promote@7")
    assert s.decision["result"] == "Promote" and "promote@7" in s.decision["message"]
    # promote while the canary of desired is not there yet: the stable takes desired, no canary to keep
    s = ro.step(O(canary_revision=None, request="promote@8"))
    assert (s.phase, s.stable_template, s.canary) == ("Promoting", "desired", False)
    s = ro.step(O(stable_revision="new", canary_revision=None, last_phase="Promoting"))
    assert (s.phase, s.stable_template, s.canary) == ("Promoting", "desired", False)
    # an abort that wins over a promote verdict
    assert ro.step(O(verdict=GOOD, request="abort")).phase == "RolledBack"


def test_step_requests_are_acted_on_once():
    s = ro.step(O(verdict=WAITING, request="promote@7", request_handled="promote@7"))
    assert (s.phase, s.decision, s.request_handled) == ("Analyzing", None, "promote@7")
    # a request with nothing to act on is recorded, so a later canary is not promoted by it
    s = ro.step(O(desired_revision="old", canary_revision=None, stable_rolled=True, request="promote@9"))
    assert (s.phase, s.request_handled) == ("Stable", "promote@9")
    s = ro.step(O(verdict=WAITING, request="promote@9", request_handled=s.request_handled))
    assert s.phase == "Analyzing"
    s = ro.step(O(strategy="RollingUpdate", request="abort@1"))
    assert s.request_handled == "abort@1"
    # an unknown request is neither acted on nor recorded
    s = ro.step(O(verdict=WAITING, request="yolo", request_handled="promote@7"))
    assert (s.phase, s.request_handled) == ("Analyzing", "promote@7")


@pytest.mark.parametrize("value,action", [("promote", "promote"), ("promote@1764620000000", "promote"),
                                          (" Abort@x", "abort"), ("retry@", "retry"), ("rollback", None), (None, None),
                                          ("", None)])
def test_request_action(value, action):
    assert ro.request_action(value) == action


def test_a_ratio_exactly_at_its_floor_passes_despite_float_rounding():
    """spec.rollout.analysis.minAcceptanceRatio is a floor the canary may reach: canary tau >= ratio x stable tau
    passes. Counters where that holds exactly in integers (1827/2030 = 0.9 = 9/10) but the float division rounds
    down (2.827 / 3.03 = 0.8999999999999999) still promote (issue 43: the epsilon of _below_floor)."""
    stable = ro.Totals(pods=1, drafts=1000, accepted_tokens=1030, output_tokens=1000, running_request_seconds=100,
                       requests=100)
    canary = ro.Totals(pods=1, drafts=1000, accepted_tokens=827, output_tokens=1000, running_request_seconds=100,
                       requests=100)
    assert canary.tau() / stable.tau() < 0.9  # the float rounding this guards against
    v = J(stable, canary)
    assert v.decision == "Promote", v.message
    # one accepted token fewer is really below the floor
    canary.accepted_tokens = 826
    assert J(stable, canary).reason == "AcceptanceBelowStable"
