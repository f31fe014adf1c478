"""specdeploy-runtime bench-client: the engine clients' real output parsed, the result line, and a run
of our own client against an OpenAI-compatible stand-in (fake tokenizer, the stand-in's vLLM counters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from specdeploy.core.bench import prompts as bp
from specdeploy.core.bench import result as br
from specdeploy.core.acceptance import Acceptance
from specdeploy_dev.engine_standin import EngineStandin
from specdeploy_runtime import benchclient as bc
from specdeploy_runtime import benchruns

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "bench"
VLLM_RANDOM = FIXTURES / "vllm-0.32.0-bench-serve-random.json"
VLLM_CUSTOM = FIXTURES / "vllm-0.32.0-bench-serve-custom.json"
SGLANG_RANDOM = FIXTURES / "sglang-0.5.23-bench-serving-random.jsonl"


def plan_doc(**over) -> dict:
    d = {"benchmark": "sweep", "variant": "k3", "engine": "vllm", "engineVersion": "0.32.0",
         "baseUrl": "http://127.0.0.1:1", "metricsUrl": "http://127.0.0.1:1/metrics", "model": "m", "tokenizer": "m",
         "prompts": {"kind": "generated", "seed": 0},
         "points": [{"id": "k3/c16/n1", "context": 16, "concurrency": 1, "numPrompts": 3, "maxOutputTokens": 5}],
         "temperature": 0, "client": "specdeploy"}
    d.update(over)
    return d


# ----------------------------------------------------------------- vLLM's real JSON


def test_vllm_bench_serve_real_json_is_parsed():
    doc = json.loads(VLLM_RANDOM.read_text())
    run = bc.parse_vllm_result(doc)
    assert (run.completed, run.failed) == (doc["completed"], doc["failed"]) == (4, 0)
    assert run.output_tokens == doc["total_output_tokens"] == 128
    assert run.input_tokens == doc["total_input_tokens"]
    assert run.output_tokens_per_second == doc["output_throughput"]
    assert run.requests_per_second == doc["request_throughput"] and run.duration_s == doc["duration"]
    assert run.ttft_ms == {"p50": doc["p50_ttft_ms"], "p90": doc["p90_ttft_ms"], "p99": doc["p99_ttft_ms"],
                           "mean": doc["mean_ttft_ms"]}
    assert run.itl_ms["p99"] == doc["p99_itl_ms"] and run.tpot_ms["mean"] == doc["mean_tpot_ms"]
    assert run.texts == doc["generated_texts"] and len(run.texts) == 4 and all(run.texts)
    # vLLM's percentiles are numpy's: our own client computes the same ones
    ttfts = doc["ttfts"]
    assert benchruns.percentile([t * 1000 for t in ttfts], 90) == pytest.approx(doc["p90_ttft_ms"], rel=1e-12)
    itls = [x * 1000 for row in doc["itls"] for x in row]
    assert benchruns.percentile(itls, 50) == pytest.approx(doc["p50_itl_ms"], rel=1e-12)


def test_vllm_bench_serve_custom_dataset_keeps_our_prompts_exact_and_in_order():
    doc = json.loads(VLLM_CUSTOM.read_text())
    sent = [json.loads(x)["prompt"] for x in VLLM_CUSTOM.with_suffix(".prompts.jsonl").read_text().splitlines()]
    run = bc.parse_vllm_result(doc)
    assert (run.completed, run.failed, run.output_tokens) == (4, 0, 4 * 32)
    assert doc["input_lens"] == [64] * 4 and run.input_tokens == 256  # cut by the engine's /tokenize: exact
    assert doc["num_prompts"] == len(sent) == 4 and len(run.texts) == 4 and len(set(run.texts)) == 4
    # the prompts are the bundled chat set from prompt i on, in order (no shuffle, no chat template)
    chat = bp.bundled("chat")
    assert [p.startswith(chat[i][:30]) for i, p in enumerate(sent)] == [True] * 4


def test_vllm_point_result_digests_and_acceptance_validate():
    doc = json.loads(VLLM_RANDOM.read_text())
    run = bc.parse_vllm_result(doc)
    point = br.PlanPoint.model_validate({"id": "k3/c64/n2", "context": 64, "concurrency": 2, "numPrompts": 4,
                                         "maxOutputTokens": 32})
    acc = Acceptance(engine="vllm", length=doc["spec_decode_acceptance_length"], rate=None,
                     per_position=tuple(doc["spec_decode_per_position_acceptance_rates"]),
                     drafts=doc["spec_decode_num_drafts"], draft_tokens=doc["spec_decode_draft_tokens"],
                     accepted=doc["spec_decode_accepted_tokens"])
    p = bc.point_result(point, run, acc)
    assert p.output_digests == [br.text_digest(t) for t in doc["generated_texts"]]
    assert p.acceptance.length == 1.5 and p.acceptance.drafts == 84
    line = br.format_result_line(br.VariantResult(variant="k3", client="vllm bench serve", points=[p]))
    assert br.parse_result_line("noise\n" + line).points[0] == p
    # a failed request: no digests (its empty text is not an output), not comparable
    failed = bc.parse_vllm_result({**doc, "completed": 3, "failed": 1, "errors": ["", "boom", "", ""]})
    p2 = bc.point_result(point, failed, None)
    assert p2.output_digests == [] and p2.errors == ["boom"] and p2.acceptance is None


def test_no_drafts_means_no_acceptance():
    doc = json.loads(VLLM_RANDOM.read_text())
    point = br.PlanPoint.model_validate({"id": "baseline/c64", "context": 64, "concurrency": 2, "numPrompts": 4,
                                         "maxOutputTokens": 32})
    acc = Acceptance(engine="vllm", length=None, rate=None, drafts=0.0)
    assert bc.point_result(point, bc.parse_vllm_result(doc), acc).acceptance is None


def test_not_vllm_json_is_refused():
    with pytest.raises(bc.BenchError, match="not its JSON"):
        bc.parse_vllm_result({"date": "x"})


@pytest.mark.parametrize("p", [0, 10, 50, 90, 99, 100])
def test_percentile_is_numpys(p):
    xs = [5.0, 1.0, 3.5, 9.25, 2.0, 7.0, 7.0]
    assert benchruns.percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)))


# ----------------------------------------------------------------- SGLang's real JSON line


def test_sglang_bench_serving_real_line_is_parsed():
    (doc,) = [json.loads(x) for x in SGLANG_RANDOM.read_text().splitlines() if x.strip()]
    run = bc.parse_sglang_result(doc, expected=4)
    assert (run.completed, run.failed) == (doc["completed"], 0) == (4, 0)
    assert run.output_tokens == doc["total_output_tokens"] == 128
    assert run.input_tokens == doc["total_input_tokens"] == 4 * 64  # --random-range-ratio 1: exact lengths
    assert run.output_tokens_per_second == doc["output_throughput"] and run.duration_s == doc["duration"]
    # SGLang names the median "median_*", vLLM "p50_*": both land in p50
    assert run.ttft_ms == {"p50": doc["median_ttft_ms"], "p90": doc["p90_ttft_ms"], "p99": doc["p99_ttft_ms"],
                           "mean": doc["mean_ttft_ms"]}
    assert run.itl_ms["p50"] == doc["median_itl_ms"] and run.tpot_ms["p99"] == doc["p99_tpot_ms"]
    assert run.texts == doc["generated_texts"] and all(run.texts)
    assert bc.parse_sglang_result(doc, expected=5).failed == 1  # the line has no prompt count: the plan's
    with pytest.raises(bc.BenchError, match="not its JSON"):
        bc.parse_sglang_result({"backend": "x"})


def test_sglang_source_is_sharegpt_shaped(tmp_path):
    plan = br.validate_plan(plan_doc(prompts={"kind": "bundled", "name": "code"}, engine="sglang"))
    path = bc.sglang_source(plan, plan.points[0], ["first prompt", "second prompt"], str(tmp_path))
    doc = json.loads(Path(path).read_text())
    assert len(doc) == plan.points[0].num_prompts
    assert all(len(e["conversations"]) == 2 for e in doc)  # SGLang keeps entries with >= 2 turns
    assert doc[0]["conversations"][0]["value"].startswith("first prompt second prompt")
    assert doc[1]["conversations"][0]["value"].startswith("second prompt first prompt")


# ----------------------------------------------------------------- client choice


def test_pick_client(tmp_path, monkeypatch):
    plan = br.validate_plan(plan_doc(client="auto"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bc.pick_client(plan) == ("specdeploy", [])
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    assert bc.pick_client(plan) == ("vllm", [str(exe)])
    assert bc.pick_client(br.validate_plan(plan_doc(client="specdeploy"))) == ("specdeploy", [])
    with pytest.raises(bc.BenchError, match="sglang package is not importable"):
        bc.pick_client(br.validate_plan(plan_doc(client="sglang", engine="sglang")))


def test_vllm_has_pandas_probes_the_scripts_interpreter(tmp_path):
    import importlib.util

    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\n")
    assert bc.vllm_has_pandas([str(script)]) is (importlib.util.find_spec("pandas") is not None)
    script.write_text("#!/nonexistent/python\n")
    assert bc.vllm_has_pandas([str(script)]) is False
    script.write_text("#!/usr/bin/env python3\n")
    assert bc.script_python(str(script)) == ["python3"]
    assert bc.vllm_has_pandas([str(tmp_path / "missing")]) is False


def test_client_version_from_the_interpreters_metadata(tmp_path):
    plan = br.validate_plan(plan_doc(engineVersion="0.33.0"))
    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\n")  # this interpreter has no vllm distribution
    assert bc.client_version("vllm", [str(script)], plan) == "0.33.0"
    assert bc.client_version("specdeploy", [], plan) == "0.1.0"


def test_vllm_dataset_args(tmp_path):
    gen = br.validate_plan(plan_doc())
    pt = gen.points[0]
    args = bc.vllm_dataset_args(gen, pt, lambda: pytest.fail("generated prompts come from vLLM"), str(tmp_path))
    assert args[:2] == ["--dataset-name", "random"] and "--random-input-len" in args
    assert args[args.index("--random-input-len") + 1] == "16" and args[args.index("--random-range-ratio") + 1] == "0"
    bundled = br.validate_plan(plan_doc(prompts={"kind": "bundled", "name": "code"}))
    args = bc.vllm_dataset_args(bundled, pt, lambda: ["a b", 'c "d"'], str(tmp_path))
    assert args[:2] == ["--dataset-name", "custom"] and "--disable-shuffle" in args and "--skip-chat-template" in args
    data = Path(args[args.index("--dataset-path") + 1]).read_text().splitlines()
    assert [json.loads(x)["prompt"] for x in data] == ["a b", 'c "d"']


# ----------------------------------------------------------------- our client against a stand-in


class FakeEngine:
    """/v1/completions (streamed, one word per chunk), /tokenize, /detokenize (one token per word, a BOS
    added by the completions count), /metrics (the stand-in's vLLM counters: one step per scrape)."""

    def __init__(self, usage: bool = True):
        self.standin = EngineStandin("vllm", "healthy", model_name="m", num_spec_tokens=3)
        self.usage = usage
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []
        self.prompts: list[str] = []
        self.chats: list[dict] = []
        eng = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _json(self, doc, code=200):
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/metrics":
                    body = eng.standin.metrics_text(advance=True).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._json({"error": "not found"}, 404)

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    ids = [eng.id(w) for w in req["prompt"].split()]
                    if req.get("add_special_tokens", True):
                        ids = [0] + ids
                    self._json({"tokens": ids, "count": len(ids)})
                elif self.path == "/detokenize":
                    self._json({"prompt": " ".join(eng.words[i - 1] for i in req["tokens"])})
                elif self.path == "/v1/chat/completions":  # a request set: tool calls as deltas, else content
                    eng.chats.append(req)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    last = req["messages"][-1]["content"]
                    if req.get("tools"):
                        deltas = [{"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": ""}}]},
                                  {"tool_calls": [{"index": 0, "function": {"arguments": json.dumps({"q": last[:12]})}}]}]
                    else:
                        deltas = [{"content": "{"}, {"content": f'"n": {len(last)}'}, {"content": "}"}]
                    for d in deltas:
                        self.wfile.write(f"data: {json.dumps({'choices': [{'delta': d}]})}\n\n".encode())
                    usage = {"choices": [], "usage": {"completion_tokens": len(deltas), "prompt_tokens": 20}}
                    self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                elif self.path == "/v1/completions":
                    n = req["max_tokens"]
                    prompt = req["prompt"]
                    if not req.get("stream"):  # the warm-up
                        return self._json({"choices": [{"text": " ok" * n}], "usage": {"completion_tokens": n}})
                    assert req["temperature"] == 0 and req["ignore_eos"] is True
                    eng.prompts.append(prompt)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    seed = len(prompt.split())
                    for k in range(n):
                        chunk = {"choices": [{"text": f" w{(seed + k) % 7}"}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    if eng.usage:
                        usage = {"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": seed + 1}}
                        self.wfile.write(f"data: {json.dumps(usage)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._json({"error": "not found"}, 404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def id(self, w: str) -> int:
        if w not in self.vocab:
            self.words.append(w)
            self.vocab[w] = len(self.words)
        return self.vocab[w]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def run_cli(plan: dict, tmp_path: Path, env_path: str | None = None) -> subprocess.CompletedProcess:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    env = {**os.environ, "PATH": env_path if env_path is not None else os.environ["PATH"]}
    return subprocess.run([sys.executable, "-m", "specdeploy_runtime.cli", "bench-client", "--plan", str(f)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


@pytest.mark.parametrize("prompts", [{"kind": "generated", "seed": 3}, {"kind": "bundled", "name": "chat"}])
def test_own_client_end_to_end_against_a_stand_in(tmp_path, prompts):
    with FakeEngine() as eng:
        plan = plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/metrics", prompts=prompts, points=[
            {"id": "k3/c16/n1", "context": 16, "concurrency": 1, "numPrompts": 3, "maxOutputTokens": 5},
            {"id": "k3/c40/n2", "context": 40, "concurrency": 2, "numPrompts": 4, "maxOutputTokens": 6}])
        p = run_cli(plan, tmp_path)
        assert p.returncode == 0, p.stderr
        last = p.stdout.strip().splitlines()[-1]
        assert last.startswith(br.RESULT_PREFIX)
        res = br.parse_result_line(p.stdout)
        sent = list(eng.prompts)
    assert res.variant == "k3" and res.client == "specdeploy" and len(res.points) == 2
    a, b = res.points
    # prompts of exactly `context` tokens as the engine counts them (the stand-in adds one BOS)
    assert [len(x.split()) + 1 for x in sent[:3]] == [16] * 3 and [len(x.split()) + 1 for x in sent[3:]] == [40] * 4
    assert len(set(sent[:3])) == 3
    assert (a.completed, a.failed, a.output_tokens, a.input_tokens) == (3, 0, 15, 48)
    assert (b.completed, b.output_tokens) == (4, 24) and b.concurrency == 2
    # the stand-in's counters advance one step per scrape: the point's delta is one step (healthy: 0.75^(k+1))
    assert a.acceptance.drafts == 100 and a.acceptance.per_position == [0.75, 0.56, 0.42]
    assert a.acceptance.length == pytest.approx(1 + (75 + 56 + 42) / 100)
    # digests: sha256 of each streamed text, in prompt order
    want = [br.text_digest("".join(f" w{(len(x.split()) + k) % 7}" for k in range(5))) for x in sent[:3]]
    assert a.output_digests == want
    assert a.ttft_ms.p50 is not None and a.itl_ms.p99 is not None and a.output_tokens_per_second > 0


def test_no_metrics_no_acceptance_and_no_usage_chunk(tmp_path):
    with FakeEngine(usage=False) as eng:
        p = run_cli(plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/not-metrics"), tmp_path)
    assert p.returncode == 0, p.stderr
    (pt,) = br.parse_result_line(p.stdout).points
    assert pt.acceptance is None  # no scrape, no window: never the averages since the engine started
    assert pt.completed == 3 and pt.output_tokens == 15  # one streamed chunk per token
    assert "scrape of" in p.stderr


def test_same_seed_same_prompts_other_seed_other_prompts(tmp_path):
    with FakeEngine() as eng:
        for seed in (1, 1, 2):
            plan = plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/metrics", prompts={"kind": "generated", "seed": seed})
            assert run_cli(plan, tmp_path).returncode == 0
        sent = list(eng.prompts)
    assert sent[0:3] == sent[3:6] and sent[0:3] != sent[6:9]


def test_bad_plan_and_dead_engine_exit_1_without_a_result_line(tmp_path):
    p = run_cli(plan_doc(temperature=0.7), tmp_path)
    assert p.returncode == 1 and br.RESULT_PREFIX not in p.stdout
    assert "invalid plan at temperature" in p.stderr and "Traceback" not in p.stderr
    p = run_cli(plan_doc(), tmp_path)  # nothing listens on port 1
    assert p.returncode == 1 and "does not answer a completion" in p.stderr and "Traceback" not in p.stderr
    f = tmp_path / "broken.json"
    f.write_text("{")
    q = subprocess.run([sys.executable, "-m", "specdeploy_runtime.cli", "bench-client", "--plan", str(f)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert q.returncode == 1 and "not valid JSON" in q.stderr


def test_bad_prompt_file_fails_the_run_with_the_line(tmp_path):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with FakeEngine() as eng:
        p = run_cli(plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/metrics",
                             prompts={"kind": "file", "path": str(bad)}), tmp_path)
    assert p.returncode == 1 and "line 2" in p.stderr and '"prompt"' in p.stderr


def test_prompts_file_beside_the_plan_when_its_mount_path_is_elsewhere(tmp_path):
    """The operator mounts plan.json and prompts.jsonl from one ConfigMap at /etc/specdeploy/bench; a runtime
    that puts the volume elsewhere (the dev kubelet) has the file beside the plan, not at the plan's path."""
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "alpha beta"}\n{"prompt": "gamma delta"}\n')
    (tmp_path / "plan.json").write_text(json.dumps(plan_doc(prompts={"kind": "file",
                                                                      "path": "/etc/specdeploy/bench/prompts.jsonl"})))
    plan = bc.load_plan(str(tmp_path / "plan.json"))
    assert plan.prompts.path == str(tmp_path / "prompts.jsonl")
    assert bc.load_prompt_set(plan) == ["alpha beta", "gamma delta"]
    (tmp_path / "prompts.jsonl").unlink()  # nothing beside it either: the path stays, the run says which file
    assert bc.load_plan(str(tmp_path / "plan.json")).prompts.path == "/etc/specdeploy/bench/prompts.jsonl"


def test_gauge_sampler_sees_the_peak_while_a_point_runs():
    import http.server
    import threading
    import time

    usage = iter([0.1, 0.9, 0.3] + [0.2] * 1000)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = (f'vllm:kv_cache_usage_perc{{engine="0"}} {next(usage)}\n'
                    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="10"} 1\n').encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
        with bc.GaugeSampler("vllm", url, interval_s=0.01) as s:
            deadline = time.monotonic() + 30
            while len(s.samples) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        n = len(s.samples)
        time.sleep(0.05)
        assert len(s.samples) == n  # stopped on exit
        costs = bc.point_costs("vllm", None, None, s.samples)
        assert costs["kvUsagePeak"] == 0.9 and costs["kvCapacityTokens"] == 160
    finally:
        srv.shutdown()
    with bc.GaugeSampler("vllm", None) as s:  # no metrics URL: no thread, no samples
        pass
    assert s.samples == []


@pytest.mark.parametrize("name", ["tool-call", "structured-output"])
def test_request_sets_are_replayed_as_captured_through_chat_completions(tmp_path, name):
    points = [{"id": "k3/c1024/n1", "context": 1024, "concurrency": 1, "numPrompts": 5, "maxOutputTokens": 64},
              {"id": "k3/c1024/n4", "context": 1024, "concurrency": 4, "numPrompts": 6, "maxOutputTokens": 64}]
    with FakeEngine() as eng:
        p = run_cli(plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/metrics", client="vllm",
                             prompts={"kind": "requests", "name": name, "seed": 7}, points=points), tmp_path)
        first = list(eng.chats)
        assert run_cli(plan_doc(baseUrl=eng.url, metricsUrl=eng.url + "/metrics",
                                prompts={"kind": "requests", "name": name, "seed": 7}, points=points), tmp_path).returncode == 0
        again = eng.chats[len(first):]
    assert p.returncode == 0, p.stderr
    assert "replayed by specdeploy's client" in p.stderr  # vllm bench serve cannot send tools or response formats
    res = br.parse_result_line(p.stdout)
    a, b = res.points
    assert (a.completed, a.failed, b.completed) == (5, 0, 6) and a.input_tokens == 100
    want = bp.sample_requests(bp.bundled_requests(name), 5, 7, 1) + bp.sample_requests(bp.bundled_requests(name), 6, 7, 4)
    def key(c):  # concurrency 4 sends its requests in parallel: compare that point as a multiset
        return json.dumps([c["messages"], c.get("tools"), c.get("response_format")], sort_keys=True)
    assert [c["messages"] for c in first[:5]] == [w["messages"] for w in want[:5]]  # concurrency 1: in order
    assert sorted(map(key, first[5:])) == sorted(map(key, want[5:]))
    for c in first:
        assert c["temperature"] == 0 and c["max_tokens"] == 64 and c["stream"] is True and "ignore_eos" not in c
    assert sorted(map(key, again)) == sorted(map(key, first))  # seeded: the same replay every run
    # tool-call fragments and content deltas are the output (digested for greedy equality)
    marker = "get_weather" if name == "tool-call" else '"n": '
    assert all(d for d in a.output_digests) and len(a.output_digests) == 5
    assert a.output_tokens == (2 if name == "tool-call" else 3) * 5
    sent_text = "".join(bc._piece({"delta": d}) for d in ([{"tool_calls": [{"function": {"name": "get_weather",
                                                                                       "arguments": "{}"}}]}]))
    assert sent_text == "get_weather{}" and marker


def test_request_set_errors_name_the_line_and_the_field(tmp_path):
    f = tmp_path / "requests.jsonl"
    f.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n'
                 '{"messages": [{"role": "user", "content": "hi"}], "logits_processors": ["x"]}\n')
    with FakeEngine() as eng:
        p = run_cli(plan_doc(baseUrl=eng.url, prompts={"kind": "requests", "path": str(f)}), tmp_path)
    assert p.returncode == 1
    assert "line 2: logits_processors cannot be replayed" in p.stderr
