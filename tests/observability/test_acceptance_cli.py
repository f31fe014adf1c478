"""`specdeploy acceptance` as a real process: files, stdin, URLs (the stand-in engine), exit codes."""

from __future__ import annotations

import json

import pytest

from obs_helpers import run_acceptance, sglang_scrape, vllm_scrape
from specdeploy_dev.engine_standin import EngineStandin


@pytest.fixture
def scrapes(tmp_path):
    def write(name: str, text: str) -> str:
        p = tmp_path / name
        p.write_text(text)
        return str(p)

    return write


def test_done_means_vllm_two_scrapes_tau_4(scrapes):
    a = scrapes("a.prom", vllm_scrape(drafts=1000, accepted=2500))
    b = scrapes("b.prom", vllm_scrape(drafts=1100, accepted=2800))
    r = run_acceptance("--engine", "vllm", a, b, "--interval", "30")
    assert r.returncode == 0, r.stderr
    assert "acceptance length (tau) 4.00" in r.stdout and "300 accepted" in r.stdout and "100 drafts" in r.stdout
    j = run_acceptance("--engine", "vllm", a, b, "--interval", "30", "--output", "json")
    doc = json.loads(j.stdout)
    assert doc["acceptance"]["length"] == pytest.approx(4.0) and doc["acceptance"]["drafts"] == 100
    assert doc["acceptance"]["draftsPerSecond"] == pytest.approx(100 / 30)
    assert doc["health"]["reason"] == "Healthy"


def test_done_means_sglang_reports_the_gauges(scrapes):
    s = scrapes("s.prom", sglang_scrape([({"tp_rank": "0"}, 3.42, 0.176), ({"tp_rank": "1"}, 3.42, 0.176)]))
    r = run_acceptance("--engine", "sglang", s, "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["acceptance"]["length"] == pytest.approx(3.42) and doc["acceptance"]["rate"] == pytest.approx(0.176)
    t = run_acceptance("--engine", "sglang", s)
    assert "acceptance length (tau) 3.42" in t.stdout and "acceptance rate 0.176" in t.stdout


def test_collapsed_exits_1_and_stdin_works(scrapes):
    r = run_acceptance("--engine", "sglang", "-", stdin=sglang_scrape([({}, 1.03, 0.002)]))
    assert r.returncode == 1 and "AcceptanceCollapsed" in r.stdout


def test_baseline_judges_a_regression_as_the_operator_does(scrapes):
    a = scrapes("a.prom", vllm_scrape(drafts=1000, accepted=2500))
    b = scrapes("b.prom", vllm_scrape(drafts=1100, accepted=2650))  # tau 2.50 between them
    assert run_acceptance("--engine", "vllm", a, b).returncode == 0  # above the floor: healthy alone
    r = run_acceptance("--engine", "vllm", a, b, "--baseline", "4.0")
    assert r.returncode == 1 and "AcceptanceRegressed" in r.stdout
    assert "2.50 is 38% below the baseline 4.00" in r.stdout and "revision" not in r.stdout
    ok = run_acceptance("--engine", "vllm", a, b, "--baseline", "4.0", "--regression-fraction", "0.5", "-o", "json")
    doc = json.loads(ok.stdout)
    assert ok.returncode == 0 and doc["health"]["reason"] == "Healthy" and doc["health"]["baseline"] == 4.0
    assert "baseline 4.00" in doc["health"]["message"]
    for bad in (["--baseline", "0.5"], ["--baseline", "x"], ["--baseline", "4", "--regression-fraction", "1.5"]):
        e = run_acceptance("--engine", "vllm", a, b, *bad)
        assert e.returncode == 2 and "Traceback" not in e.stderr and e.stderr.strip()


def test_no_spec_metrics_exits_1(scrapes):
    s = scrapes("plain.prom", 'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n')
    r = run_acceptance("--engine", "vllm", s)
    assert r.returncode == 1 and "NoMetrics" in r.stdout


@pytest.mark.parametrize("args, fragment", [
    (["/nonexistent/metrics.prom"], "file not found"),
    (["http://127.0.0.1:9/metrics"], "cannot fetch"),
])
def test_unusable_input_exits_2_in_one_line(args, fragment):
    r = run_acceptance("--engine", "vllm", *args)
    assert r.returncode == 2
    assert fragment in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_not_a_scrape_exits_2(scrapes, tmp_path):
    s = scrapes("x.json", '{"not": "metrics"}')
    r = run_acceptance("--engine", "vllm", s)
    assert r.returncode == 2 and "no Prometheus samples" in r.stderr
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00")
    r = run_acceptance("--engine", "vllm", str(binary))
    assert r.returncode == 2 and "UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_bad_interval_is_a_usage_error(scrapes):
    s = scrapes("a.prom", vllm_scrape(1, 1))
    r = run_acceptance("--engine", "vllm", s, "--interval", "-3")
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.parametrize("mode, reason, code", [
    ("healthy", "Healthy", 0), ("collapsed", "AcceptanceCollapsed", 1), ("cliff", "AcceptanceCliff", 1),
    ("none", "NoMetrics", 1),
])
def test_against_the_vllm_standin_over_http(mode, reason, code):
    with EngineStandin("vllm", mode, dp=2) as s:
        r = run_acceptance("--engine", "vllm", s.metrics_url, s.metrics_url, "-o", "json")
        assert r.returncode == code, r.stderr
        doc = json.loads(r.stdout)
        assert doc["health"]["reason"] == reason
        if mode != "none":
            assert doc["acceptance"]["length"] == pytest.approx(s.expected_length())
            assert doc["acceptance"]["window"] == "interval" and doc["acceptance"]["groups"] == 2


def test_one_vllm_url_with_interval_scrapes_twice():
    with EngineStandin("vllm", "healthy") as s:
        r = run_acceptance("--engine", "vllm", s.metrics_url, "--interval", "0.2", "-o", "json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["acceptance"]["window"] == "interval" and s.requests == 2
        assert doc["acceptance"]["length"] == pytest.approx(s.expected_length())


def test_against_the_sglang_standin_over_http():
    with EngineStandin("sglang", "collapsed", tp=4, dp=2) as s:
        r = run_acceptance("--engine", "sglang", s.metrics_url, "-o", "json")
        doc = json.loads(r.stdout)
        assert r.returncode == 1 and doc["health"]["reason"] == "AcceptanceCollapsed"
        assert doc["acceptance"]["length"] == pytest.approx(s.expected_length())
        assert doc["acceptance"]["series"] == 8 and doc["acceptance"]["groups"] == 2
