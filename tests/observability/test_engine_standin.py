"""The stand-in engine (dev/engine_standin.py): real formats, modes, deterministic counters."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from obs_helpers import ROOT, env
from specdeploy.core import acceptance as acc
from specdeploy_dev.engine_standin import MODES, EngineStandin
from specdeploy_dev.procs import stop_process


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def test_serves_metrics_and_health_on_loopback():
    with EngineStandin("vllm", "healthy") as s:
        assert s.host == "127.0.0.1"
        status, ctype, body = _get(s.url + "/health")
        assert status == 200
        status, ctype, body = _get(s.metrics_url)
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        with pytest.raises(urllib.error.HTTPError):
            _get(s.url + "/nope")
    with pytest.raises(RuntimeError):
        s.port  # noqa: B018 - stopped


def test_vllm_format_is_what_prometheus_client_parses():
    s = EngineStandin("vllm", "healthy", dp=2, num_spec_tokens=7)
    s.advance(3)
    text = s.metrics_text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    drafts = fams["vllm:spec_decode_num_drafts"]
    assert drafts.type == "counter"
    assert {x.name for x in drafts.samples} == {"vllm:spec_decode_num_drafts_total"}
    # prometheus_client's text format declares `_created` as a gauge family of its own.
    assert fams["vllm:spec_decode_num_drafts_created"].type == "gauge"
    assert "vllm:spec_decode_num_drafts_created{" in text
    totals = [x for x in drafts.samples if x.name.endswith("_total")]
    assert {x.labels["engine"] for x in totals} == {"0", "1"} and all(x.value == 300 for x in totals)
    per_pos = [x for x in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples if x.name.endswith("_total")]
    assert sorted({x.labels["position"] for x in per_pos}) == [str(k) for k in range(7)]
    assert set(per_pos[0].labels) == {"model_name", "engine", "position"}


def test_sglang_format_and_labels():
    s = EngineStandin("sglang", "healthy", tp=2, dp=2)
    fams = {f.name: f for f in text_string_to_metric_families(s.metrics_text())}
    g = fams["sglang:spec_accept_length"]
    assert g.type == "gauge" and len(g.samples) == 4
    assert set(g.samples[0].labels) == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}
    assert all(x.value == pytest.approx(s.expected_length()) for x in g.samples)


@pytest.mark.parametrize("engine", acc.ENGINES)
@pytest.mark.parametrize("mode", MODES)
def test_modes_read_back_through_the_acceptance_math(engine, mode):
    s = EngineStandin(engine, mode, auto_advance=0)
    s.advance(2)
    prev = s.metrics_text()
    s.advance(5)
    cur = s.metrics_text()
    a = acc.acceptance_from_scrapes(engine, prev, cur, 15.0)
    # "regressed" is healthy on its own: only a baseline (core/rollout/baseline.py) tells it from healthy
    expected = {"healthy": "Healthy", "regressed": "Healthy", "collapsed": "AcceptanceCollapsed",
                "cliff": "AcceptanceCliff" if engine == "vllm" else "Healthy", "none": "NoMetrics"}[mode]
    assert acc.health(a).reason == expected
    if mode != "none":
        assert a.length == pytest.approx(s.expected_length())
        if engine == "vllm":
            assert a.drafts == 5 * s.drafts_per_step
            # per-position acceptance decays with position, as the engine's counters make it
            assert len(a.per_position) == s.num_spec_tokens
            assert all(x >= y for x, y in zip(a.per_position, a.per_position[1:]))
            assert a.per_position[0] > a.per_position[-1]
            assert 1 + sum(a.per_position) == pytest.approx(a.length)


def test_counters_advance_per_request_and_explicitly_not_by_clock():
    s = EngineStandin("vllm", "healthy", auto_advance=0)
    a = s.metrics_text(advance=True)
    time.sleep(0.05)
    assert s.metrics_text(advance=True) == a  # nothing moves by itself
    s.advance(4)
    assert s.drafts == 400
    s.auto_advance = 2
    s.metrics_text(advance=True)
    assert s.drafts == 600


def test_restart_is_a_counter_reset_and_mode_switch():
    s = EngineStandin("vllm", "healthy", auto_advance=0)
    s.advance(10)
    prev = s.metrics_text()
    s.restart()
    s.set_mode("collapsed")
    s.advance(1)
    a = acc.acceptance_from_scrapes("vllm", prev, s.metrics_text())
    assert a.resets >= 1 and a.drafts == 100 and acc.health(a).reason == "AcceptanceCollapsed"


def test_module_entry_point_serves(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "specdeploy_dev.engine_standin", "--engine", "sglang", "--mode",
                          "collapsed", "--port", str(port)], cwd=ROOT, env=env(), stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert f"127.0.0.1:{port}" in line
        _, _, body = _get(f"http://127.0.0.1:{port}/metrics")
        a = acc.acceptance_from_scrapes("sglang", None, body)
        assert acc.health(a).reason == "AcceptanceCollapsed"
    finally:
        stop_process(p, 10)
