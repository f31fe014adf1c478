"""specdeploy bench report: table, recommendation, PNG/SVG plots and the HTML page (from --from-file and
from a ConfigMap through kubectl on the embedded API server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy import benchreport as rep
from specdeploy.cli import main
from specdeploy.core.bench import result as br

ROOT = Path(__file__).resolve().parents[2]
# bench-client's real result lines for the trained tiny pair on vLLM's CPU build (speculation off and on)
RESULTS = ROOT / "tests" / "fixtures" / "bench" / "tiny-sweep-results.json"


def results_doc() -> dict:
    return json.loads(RESULTS.read_text())


def operator_doc(omit_digests: bool = False) -> dict:
    """The results.json the operator writes (controller/benchmark.py ``_finish``) from these lines."""
    from specdeploy.core.bench.reco import equal_to_baseline, recommend

    doc = results_doc()
    order = [v["variant"] for v in doc["variants"]]
    points = [{**p, "variant": v["variant"]} for v in doc["variants"] for p in v["points"]]
    eq = equal_to_baseline(points)
    for p in points:
        p["equalToBaseline"] = eq.get(p["id"])
        if omit_digests:
            p.pop("outputDigests")
    full = {"benchmark": "tiny-sweep", "deployment": "tiny", "variants": [{"name": v} for v in order],
            "clients": {v["variant"]: {"client": v["client"], "clientVersion": v["clientVersion"]} for v in doc["variants"]},
            "points": points, "recommendation": recommend(points, order)}
    if omit_digests:
        full["digestsOmitted"] = True
    return full


def test_fixture_is_real_client_output():
    doc = results_doc()
    variants = {v["variant"]: v for v in doc["variants"]}
    assert set(variants) == {"baseline", "k3"} and variants["k3"]["client"] == "vllm bench serve"
    assert all(p["acceptance"] is None for p in variants["baseline"]["points"])
    assert all(p["acceptance"]["length"] >= 1 for p in variants["k3"]["points"])


def test_rows_speedup_and_greedy_equality():
    results, reco = rep.load_results(results_doc())
    rs = rep.rows(results)
    spec = [r for r in rs if r.variant == "k3"]
    assert spec and all(r.equal is True for r in spec)  # greedy outputs equal with and without speculation
    base = {r.point.shape: r.point for r in rs if r.variant == "baseline"}
    for r in spec:
        assert r.speedup == pytest.approx(r.point.output_tokens_per_second / base[r.point.shape].output_tokens_per_second)
    # one changed digest shows as NO
    doc = results_doc()
    k3 = next(v for v in doc["variants"] if v["variant"] == "k3")
    k3["points"][0]["outputDigests"][0] = "0" * 64
    rs2 = rep.rows(rep.load_results(doc)[0])
    assert [r.equal for r in rs2 if r.variant == "k3"][0] is False
    assert "NO" in rep.format_table(rs2)


@pytest.mark.parametrize("shape", ["variants", "results", "list", "points", "operator", "operator-no-digests"])
def test_accepted_shapes(shape):
    doc = results_doc()
    if shape.startswith("operator"):
        doc = operator_doc(omit_digests=shape.endswith("no-digests"))
        results, reco = rep.load_results(doc)
        assert [r.variant for r in results] == ["baseline", "k3"] and results[1].client == "vllm bench serve"
        assert reco == doc["recommendation"]
        rs = rep.rows(results, rep.given_equality(doc))
        assert [r.equal for r in rs if r.variant == "k3"] == [True] * 4  # from digests, or the operator's verdict
        return
    if shape == "results":
        doc = {"results": doc["variants"]}
    elif shape == "list":
        doc = doc["variants"]
    elif shape == "points":
        doc = {"points": [{**p, "variant": v["variant"]} for v in doc["variants"] for p in v["points"]]}
    results, _ = rep.load_results(doc)
    assert sorted(r.variant for r in results) == ["baseline", "k3"]


@pytest.mark.parametrize("doc, words", [
    ({"nothing": 1}, "no results found"),
    ("text", "must be a JSON object"),
    ({"variants": []}, "no results found"),
    ([], "no variant"),
    ({"variants": [{"variant": "k3", "client": "x", "points": [{"id": "a", "context": -1}]}]},
     "variant k3: invalid result at points[0].context"),
    ({"points": [{"id": "a"}]}, "points[0] has no variant"),
])
def test_bad_results(doc, words):
    with pytest.raises(rep.ReportError) as e:
        rep.load_results(doc)
    assert words in str(e.value)


def test_report_from_file_writes_readable_png_svg_html(tmp_path, capsys):
    import matplotlib.image as mpimg

    f = tmp_path / "results.json"
    f.write_text(RESULTS.read_text())
    out = tmp_path / "report"
    assert main(["bench", "report", "tiny-sweep", "--from-file", str(f), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    header = text.splitlines()[0].split()
    assert header[:3] == ["VARIANT", "CONTEXT", "CONC"] and "TAU" in header and "EQUAL" in header
    assert "recommendation:" in text and "tokens_per_s.png" in text
    # computed by core/bench/reco.py from the real figures: k3 (tau 1.15-1.5 on random prompts) loses everywhere
    assert "context 64, concurrency 1: baseline (speculation off) 222.0 tok/s" in text
    assert "crossover at context 64: 1 " in text and "guard: maxConcurrency 1" in text
    for name in ("tokens_per_s", "tau"):
        img = mpimg.imread(out / f"{name}.png")
        h, w = img.shape[:2]
        assert w >= 600 and h >= 400, (name, w, h)  # two context panels side by side
        assert img.std() > 0.01  # not a blank image
        svg = (out / f"{name}.svg").read_text()
        assert "concurrency" in svg and "context 64 tokens" in svg and "context 256 tokens" in svg
    assert "output tokens/s" in (out / "tokens_per_s.svg").read_text()
    assert "baseline (speculation off)" in (out / "tokens_per_s.svg").read_text()
    assert "acceptance length (tau)" in (out / "tau.svg").read_text()
    assert "k3 (speculation on)" in (out / "tau.svg").read_text()
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and page.count("<svg") == 2
    for words in ("output tokens/s", "acceptance length (tau)", "concurrency", "<th>TOK/S</th>", "<td>k3</td>"):
        assert words in page, words


def test_json_output(tmp_path, capsys):
    f = tmp_path / "results.json"
    f.write_text(RESULTS.read_text())
    assert main(["bench", "report", "tiny-sweep", "--from-file", str(f), "--out", str(tmp_path / "o"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["benchmark"] == "tiny-sweep" and set(doc["files"]) >= {"tokens_per_s.png", "tau.png", "report.html"}
    k3 = [p for p in doc["points"] if p["variant"] == "k3"]
    assert k3 and all(p["equalToBaseline"] is True and p["speedup"] > 0 for p in k3)
    assert "outputDigests" not in k3[0]


def test_recommendation_from_the_document_is_printed(tmp_path, capsys):
    doc = results_doc()
    doc["recommendation"] = {"summary": "k3 wins everywhere measured (1.9x)", "bands": [
        {"context": 64, "concurrency": 1, "best": "k3", "outputTokensPerSecond": 210.0, "baselineTokensPerSecond": 110.0,
         "speedup": 1.91}], "crossover": [{"context": 64, "concurrency": None, "reason": "speculation pays"}],
        "guard": {"maxConcurrency": None, "maxContext": None}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    assert main(["bench", "report", "x", "--from-file", str(f), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "recommendation: k3 wins everywhere measured (1.9x)" in out
    assert "context 64, concurrency 1: k3 210.0 tok/s vs baseline 110.0 (1.91x)" in out


@pytest.mark.parametrize("argv, words", [
    (["--from-file", "/nonexistent/results.json"], "file not found: /nonexistent/results.json"),
    (["--from-file", "BAD"], "is not valid JSON"),
])
def test_errors_exit_2_one_line(tmp_path, argv, words):
    if "BAD" in argv:
        bad = tmp_path / "bad.json"
        bad.write_text("{nope")
        argv = ["--from-file", str(bad)]
    p = subprocess.run([sys.executable, "-m", "specdeploy.cli", "bench", "report", "x", *argv, "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith("specdeploy bench report: error:")
    pj = subprocess.run([sys.executable, "-m", "specdeploy.cli", "bench", "report", "x", *argv, "-o", "json"],
                        capture_output=True, text=True, timeout=120)
    assert pj.returncode == 2 and json.loads(pj.stdout)["exitCode"] == 2


def test_bench_without_action_exits_2(capsys):
    assert main(["bench"]) == 2
    assert "choose an action" in capsys.readouterr().err


def test_the_result_lines_round_trip_into_the_fixture():
    # what the operator stores is what the client printed: every variant validates as a result line
    for v in results_doc()["variants"]:
        line = br.format_result_line(v)
        assert br.parse_result_line(line).to_doc() == br.validate_result(v).to_doc()


def test_hidden_costs_table_plot_and_recommendation(tmp_path, capsys):
    import matplotlib.image as mpimg

    doc = results_doc()
    docs = doc if isinstance(doc, list) else doc.get("variants", [doc])
    for v in docs:  # the engine's figures as the client records them (core/bench/costs.py)
        k3 = v["variant"] != "baseline"
        for p in v["points"]:
            p["costs"] = {"prefixCacheQueries": 1000, "prefixCacheHits": 0 if k3 else 610,
                          "prefixCacheHitRate": 0.0 if k3 else 0.61, "prefixCacheSource": "counters", "kvCapacityTokens": 62_000 if k3 else 100_000,
                          "kvUsagePeak": 0.4, "residentMemoryPeakBytes": 2**31}
    f = tmp_path / "results.json"
    f.write_text(json.dumps(doc))
    out = tmp_path / "report"
    assert main(["bench", "report", "tiny-sweep", "--from-file", str(f), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "PREFIX HIT  KV CAPACITY  KV PEAK  RSS PEAK" in text
    assert "61%         100,000      40%      2.00 GiB" in text and "0%          62,000" in text
    assert "cost: k3 vs baseline: KV capacity -38% (62,000 vs 100,000 tokens), prefix cache 0% vs 61%" in text
    assert "PREFIX CACHE LOST" in text and "prefix cache hit nothing under k3" in text and "costs.png" in text
    img = mpimg.imread(out / "costs.png")
    assert img.std() > 0.01
    svg = (out / "costs.svg").read_text()
    assert "KV cache capacity (tokens)" in svg and "prefix-cache hit rate (%)" in svg
    page = (out / "report.html").read_text()
    assert "<h2>hidden costs</h2>" in page and page.count("data:image/png;base64,") == 3
