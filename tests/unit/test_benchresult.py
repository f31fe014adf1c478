"""core/bench/result.py: the client's result line, found, bounded and validated (tables)."""

from __future__ import annotations

import copy
import json

import pytest

from specdeploy.core.bench import result as br
from testkit import DELETE, set_path

D0, D1 = br.text_digest("hello"), br.text_digest("world")


def point(**over):
    p = {"id": "k3/c64/n1", "context": 64, "concurrency": 1, "numPrompts": 2, "maxOutputTokens": 32,
         "completed": 2, "failed": 0, "outputTokensPerSecond": 123.4, "requestsPerSecond": 1.2, "durationS": 6.5,
         "ttftMs": {"p50": 1, "p90": 2, "p99": 3, "mean": 1.5}, "itlMs": {"p50": 4, "p90": 5, "p99": 6, "mean": 4.5},
         "acceptance": {"length": 3.4, "perPosition": [0.9, 0.8, 0.7], "drafts": 100, "draftTokens": 300,
                        "acceptedTokens": 240},
         "outputDigests": [D0, D1]}
    p.update(over)
    return p


def doc(**over):
    d = {"variant": "k3", "client": "vllm bench serve", "clientVersion": "0.32.0", "points": [point()]}
    d.update(over)
    return d


def line(d) -> str:
    return br.RESULT_PREFIX + json.dumps(d)


def test_round_trip_and_camel_case():
    r = br.parse_result_line("engine noise\n" + line(doc()) + "\n")
    assert r.variant == "k3" and r.client_version == "0.32.0"
    p = r.points[0]
    assert p.output_tokens_per_second == 123.4 and p.ttft_ms.p99 == 3 and p.acceptance.per_position == [0.9, 0.8, 0.7]
    assert r.to_doc()["points"][0]["acceptance"]["acceptedTokens"] == 240
    again = br.parse_result_line(br.format_result_line(r))
    assert again == r


def test_the_last_line_wins_and_crlf_and_trailing_lines():
    first = line(doc(variant="baseline"))
    last = line(doc(variant="k3"))
    assert br.parse_result_line(f"{first}\nlog\n{last}\r\nbye\n").variant == "k3"
    # a prefix inside a line is not a result line
    assert br.parse_result_line(f"{last}\nsaid: {line(doc(variant='other'))}\n").variant == "k3"


@pytest.mark.parametrize("text, words", [
    ("", "no SPECDEPLOY_BENCH_RESULT line"),
    ("Traceback (most recent call last):\n  boom\n", "no SPECDEPLOY_BENCH_RESULT line"),
    ("SPECDEPLOY_BENCH_RESULT {not json", "not valid JSON"),
    ("SPECDEPLOY_BENCH_RESULT " + json.dumps(doc())[:-20], "not valid JSON"),  # cut log
    ("SPECDEPLOY_BENCH_RESULT []", "must be a JSON object"),
    ("SPECDEPLOY_BENCH_RESULT " + "[" * 50 + "]" * 50, "nesting depth"),
    ("SPECDEPLOY_BENCH_RESULT " + "x" * (br.MAX_LINE_BYTES + 1), "over the limit"),
])
def test_bad_logs(text, words):
    with pytest.raises(br.BenchResultError, match=words):
        br.parse_result_line(text)


def bad(path, value):
    d = copy.deepcopy(doc())
    set_path(d, path, value)
    return d


@pytest.mark.parametrize("d, where", [
    (bad(["variant"], "K3 bad"), "variant"),
    (bad(["variant"], DELETE), "variant"),
    (bad(["points"], DELETE), "points"),
    (bad(["client"], "x" * 300), "client"),
    (bad(["points", 0, "outputTokensPerSecond"], -1), "points[0].outputTokensPerSecond"),
    (bad(["points", 0, "outputTokensPerSecond"], 1e300), "points[0].outputTokensPerSecond"),
    (bad(["points", 0, "outputTokensPerSecond"], "fast"), "points[0].outputTokensPerSecond"),
    (bad(["points", 0, "ttftMs", "p50"], -3), "points[0].ttftMs.p50"),
    (bad(["points", 0, "ttftMs", "p99"], 1e12), "points[0].ttftMs.p99"),
    (bad(["points", 0, "acceptance", "length"], 0.5), "points[0].acceptance.length"),
    (bad(["points", 0, "acceptance", "perPosition"], [1.5]), "points[0].acceptance.perPosition[0]"),
    (bad(["points", 0, "acceptance", "perPosition"], [0.5] * 100), "points[0].acceptance.perPosition"),
    (bad(["points", 0, "outputDigests"], ["abc"]), "points[0].outputDigests[0]"),
    (bad(["points", 0, "outputDigests"], [D0.upper()]), "points[0].outputDigests[0]"),
    (bad(["points", 0, "context"], 0), "points[0].context"),
    (bad(["points", 0, "concurrency"], 1.5), "points[0].concurrency"),
    (bad(["points", 0, "id"], "../../etc"), "points[0].id"),
    (bad(["points", 0, "completed"], 10**9), "points[0].completed"),
    (bad(["points"], [point()] * (br.MAX_POINTS + 1)), "points"),
])
def test_invalid_documents_name_the_field(d, where):
    with pytest.raises(br.BenchResultError) as e:
        br.parse_result_line(line(d))
    assert f"invalid result at {where}:" in str(e.value)


def test_nan_and_infinity_are_refused():
    text = br.RESULT_PREFIX + json.dumps(doc()).replace("123.4", "NaN")
    with pytest.raises(br.BenchResultError, match="outputTokensPerSecond"):
        br.parse_result_line(text)
    text = br.RESULT_PREFIX + json.dumps(doc()).replace("123.4", "Infinity")
    with pytest.raises(br.BenchResultError, match="outputTokensPerSecond"):
        br.parse_result_line(text)


def test_unknown_fields_are_ignored_and_optional_fields_default():
    d = doc(newField=1)
    d["points"] = [{"id": "baseline/c64/n1", "context": 64, "concurrency": 1, "completed": 0,
                    "outputTokensPerSecond": 0, "acceptance": None, "future": [1, 2]}]
    r = br.parse_result_line(line(d))
    p = r.points[0]
    assert p.acceptance is None and p.output_digests == [] and p.ttft_ms.p50 is None and p.failed == 0


def test_the_search_is_bounded_to_the_log_tail():
    old = line(doc(variant="old"))
    filler = "x" * 100 + "\n"
    text = old + "\n" + filler * (br.MAX_LOG_TAIL_BYTES // len(filler) + 1)
    with pytest.raises(br.BenchResultError, match="no SPECDEPLOY_BENCH_RESULT"):
        br.parse_result_line(text)
    # bytes are accepted too (the API's raw log)
    assert br.parse_result_line(line(doc()).encode()).variant == "k3"


def test_format_refuses_a_line_over_the_limit():
    big = doc(points=[point(id=f"k3/c{i}", outputDigests=[D0] * 4000) for i in range(5)])
    with pytest.raises(br.BenchResultError, match="over the limit"):
        br.format_result_line(big)


@pytest.mark.parametrize("a, b, want, diff", [
    (point(), point(id="baseline/c64/n1"), True, []),
    (point(outputDigests=[D0, D0]), point(), False, [1]),
    (point(), point(concurrency=4), None, None),  # another shape
    (point(), point(maxOutputTokens=64), None, None),
    (point(outputDigests=[]), point(), None, None),  # no digests
    (point(outputDigests=[D0]), point(), None, None),  # a failed request: counts differ
])
def test_equal_to_baseline(a, b, want, diff):
    pa, pb = br.PointResult.model_validate(a), br.PointResult.model_validate(b)
    assert br.equal_to_baseline(pa, pb) is want
    assert br.differing_prompts(pa, pb) == diff


def test_text_digest_is_sha256_of_utf8():
    import hashlib

    assert br.text_digest("é!") == hashlib.sha256("é!".encode()).hexdigest()
    assert br.digests(["a", "b"]) == [br.text_digest("a"), br.text_digest("b")]
