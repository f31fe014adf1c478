"""A stand-in inference engine for tests: /metrics in vLLM's or SGLang's real format.

``EngineStandin(engine, mode)`` serves, on loopback:
- ``GET /metrics``: the engine's Prometheus text exposition (written by prometheus_client,
  as the engines do: counters with ``_total`` and ``_created`` samples), with the
  speculative-decoding series in the engines' real names and label sets, plus the series
  every engine exports anyway: generation tokens, running and waiting requests, and the
  time-to-first-token and inter-token-latency histograms (the engines' own bucket
  boundaries; SGLang also its ``gen_throughput`` gauge);
- ``GET /health``: 200 (vLLM and SGLang both answer 200 with an empty body when up);
- ``POST /v1/completions`` and ``GET /v1/models`` (below: greedy text from the prompt alone).

Modes (``set_mode`` changes it while serving):
- ``healthy``:   per-position acceptance a^(k+1) with a = 0.75: tau ~ 3.96 for 15 draft tokens;
- ``regressed``: a = 0.5: tau ~ 1.99, above the collapse floor but half the healthy tau (a
                 drafter or engine change that costs acceptance: ids shifted by one on a drafter
                 that still reads a useful layer);
- ``collapsed``: a = 0.05: tau ~ 1.05 (a wrong target_layer_ids, stale prefix-cache drafts);
- ``cliff``:     0.9^(k+1) for the first 4 positions, then 0.01: tau ~ 4.2 but a cliff
                 after position 3 (SGLang exports no per-position rates: only tau shows);
- ``none``:      no speculative-decoding series at all (speculation off / metrics missing).

vLLM counters advance in whole steps, never by the clock: each ``/metrics`` request first
advances ``auto_advance`` steps (default 1), and ``advance(steps)`` advances explicitly.
One step = ``drafts_per_step`` drafts (default 100) in every data-parallel engine, with
``round(drafts_per_step * rate_k)`` accepted tokens at position k. ``restart()`` zeroes the
counters (a counter reset, as after an engine restart). SGLang gauges are the mode's exact
tau and rate, the same on every tensor-parallel rank.

Throughput and latency follow the steps too, deterministically: each step is
``requests_per_step`` requests (default 4) with time to first token 0.05, 0.1, 0.2, 0.4 s
(cycled), and one inter-token-latency observation per generated token, of 25 ms / tau
(speculation makes tokens cheaper; a collapse shows as a slower stream). The request
gauges are constants: 4 running, 2 waiting (per DP engine / rank).

    python -m specdeploy_dev.engine_standin --engine vllm --mode healthy --port 8000
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from specdeploy.core import acceptance as acc
from specdeploy.core.acceptance import (SGLANG_ITL, SGLANG_THROUGHPUT, SGLANG_TTFT, SGLANG_WAITING, VLLM_ITL, VLLM_TTFT,
                                        VLLM_WAITING)
from .metrics_server import PROMETHEUS_TEXT, MetricsServer

MODES = ("healthy", "regressed", "collapsed", "cliff", "none")
CONTENT_TYPE = PROMETHEUS_TEXT


# The engines' default histogram buckets (vllm/v1/metrics/buckets.py in vLLM 0.33;
# TokenizerMetricsCollector in SGLang 0.5.23).
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0)
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                      0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
TTFT_SECONDS = (0.05, 0.1, 0.2, 0.4)  # cycled over the requests of a step
BASE_ITL_SECONDS = 0.025  # one target forward pass; divided by tau
REQUESTS_RUNNING, REQUESTS_WAITING = 4.0, 2.0



class Histogram:
    """A cumulative histogram as prometheus_client keeps one (count per bucket, sum)."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last is +Inf only
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        if n <= 0:
            return
        i = next((k for k, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += n
        self.sum += value * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, float]]:
        out, acc_ = [], 0
        for b, c in zip([*self.bounds, float("inf")], self.counts):
            acc_ += c
            out.append((floatToGoString(b), float(acc_)))
        return out


def _add_histogram(fam: HistogramMetricFamily, labels: list[str], h: Histogram, created: float) -> None:
    """Buckets, _count, _sum, and the `_created` sample prometheus_client's Histogram writes."""
    fam.add_metric(labels, h.buckets(), h.sum)
    fam.samples.append(Sample(fam.name + "_created", dict(zip(fam._labelnames, labels)), created, None, None))  # noqa: SLF001


def position_rates(mode: str, num_spec_tokens: int) -> list[float]:
    """Per-position acceptance rates (cumulative, non-increasing) of a mode."""
    if mode == "healthy":
        return [0.75 ** (k + 1) for k in range(num_spec_tokens)]
    if mode == "regressed":
        return [0.5 ** (k + 1) for k in range(num_spec_tokens)]
    if mode == "collapsed":
        return [0.05 ** (k + 1) for k in range(num_spec_tokens)]
    if mode == "cliff":
        return [0.9 ** (k + 1) if k < 4 else 0.01 for k in range(num_spec_tokens)]
    return []


def _strip(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


class _Collector:
    def __init__(self, standin: "EngineStandin"):
        self.s = standin

    def collect(self) -> Iterator:
        yield from self.s._families()


class EngineStandin(MetricsServer):

    thread_name = "engine-standin"
    def __init__(self, engine: str = "vllm", mode: str = "healthy", *, model_name: str = "Qwen/Qwen3-8B",
                 num_spec_tokens: int = 15, drafts_per_step: int = 100, auto_advance: int = 1, dp: int = 1,
                 tp: int = 1, host: str = "127.0.0.1", port: int = 0, requests_per_step: int = 4):
        if engine not in acc.ENGINES:
            raise ValueError(f"engine must be one of {acc.ENGINES}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.engine, self.mode, self.model_name = engine, mode, model_name
        self.num_spec_tokens, self.drafts_per_step, self.auto_advance = num_spec_tokens, drafts_per_step, auto_advance
        self.dp, self.tp = max(1, dp), max(1, tp)
        self.requests_per_step = max(0, requests_per_step)
        self.requests_running = REQUESTS_RUNNING  # the running-requests gauge (per DP engine / rank); tests set it
        MetricsServer.__init__(self, host, port)
        self._lock = threading.Lock()
        self._created = time.time()
        self.restart()

    # ------------------------------------------------------------- state
    def restart(self) -> None:
        """Zero every counter (what an engine restart does to its counters)."""
        with self._lock:
            self.steps = 0
            self.drafts = 0
            self.draft_tokens = 0
            self.per_pos = [0] * self.num_spec_tokens
            self.generation_tokens = 0
            vllm = self.engine == "vllm"
            self.ttft = Histogram(VLLM_TTFT_BUCKETS if vllm else SGLANG_TTFT_BUCKETS)
            self.itl = Histogram(VLLM_ITL_BUCKETS if vllm else SGLANG_ITL_BUCKETS)
            self._created = time.time()

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        with self._lock:
            self.mode = mode

    def advance(self, steps: int = 1) -> None:
        """Advance the counters by whole steps (per data-parallel engine)."""
        with self._lock:
            self._advance(steps)

    def _advance(self, steps: int) -> None:
        if steps <= 0:
            return
        rates = position_rates(self.mode, self.num_spec_tokens)
        for _ in range(steps):
            self.steps += 1
            accepted = 0
            if rates:
                self.drafts += self.drafts_per_step
                self.draft_tokens += self.drafts_per_step * self.num_spec_tokens
                for k, r in enumerate(rates):
                    n = round(self.drafts_per_step * r)
                    self.per_pos[k] += n
                    accepted += n
                tokens = self.drafts_per_step + accepted
            else:
                tokens = self.drafts_per_step
            self.generation_tokens += tokens
            for r in range(self.requests_per_step):
                self.ttft.observe(TTFT_SECONDS[r % len(TTFT_SECONDS)])
            self.itl.observe(self.inter_token_latency(), tokens)

    def inter_token_latency(self) -> float:
        """Seconds between output tokens in the current mode: BASE_ITL_SECONDS / tau."""
        return round(BASE_ITL_SECONDS / (self.expected_length() or 1.0), 6)

    def throughput(self) -> float:
        """SGLang's gen_throughput gauge (tokens/s): one token per inter-token latency per running request."""
        return round(REQUESTS_RUNNING / self.inter_token_latency(), 3)

    def expected_length(self) -> float | None:
        """tau of one step of the current mode (what a two-scrape reading reports)."""
        rates = position_rates(self.mode, self.num_spec_tokens)
        if not rates:
            return None
        return 1.0 + sum(round(self.drafts_per_step * r) for r in rates) / self.drafts_per_step

    # ------------------------------------------------------------- exposition
    def _families(self) -> Iterator:
        if self.engine == "vllm":
            yield from self._vllm_families()
        else:
            yield from self._sglang_families()

    def _vllm_families(self) -> Iterator:
        labels = ["model_name", "engine"]
        engines = [str(i) for i in range(self.dp)]
        created = self._created
        running = GaugeMetricFamily(acc.VLLM_REQUESTS_RUNNING, "Number of requests in model execution batches.",
                                    labels=labels)
        gen = CounterMetricFamily(_strip(acc.VLLM_GENERATION_TOKENS), "Number of generation tokens processed.",
                                  labels=labels)
        waiting = GaugeMetricFamily(VLLM_WAITING, "Number of requests waiting to be processed.", labels=labels)
        ttft = HistogramMetricFamily(VLLM_TTFT, "Histogram of time to first token in seconds.", labels=labels)
        itl = HistogramMetricFamily(VLLM_ITL, "Histogram of inter-token latency in seconds.", labels=labels)
        for e in engines:
            running.add_metric([self.model_name, e], self.requests_running)
            waiting.add_metric([self.model_name, e], REQUESTS_WAITING)
            gen.add_metric([self.model_name, e], float(self.generation_tokens), created=created)
            _add_histogram(ttft, [self.model_name, e], self.ttft, created)
            _add_histogram(itl, [self.model_name, e], self.itl, created)
        yield running
        yield waiting
        yield gen
        yield ttft
        yield itl
        if self.mode == "none":
            return
        for name, doc, value in ((acc.VLLM_DRAFTS, "Number of spec decoding drafts.", self.drafts),
                                 (acc.VLLM_DRAFT_TOKENS, "Number of draft tokens.", self.draft_tokens),
                                 (acc.VLLM_ACCEPTED, "Number of accepted tokens.",
                                  sum(self.per_pos))):
            fam = CounterMetricFamily(_strip(name), doc, labels=labels)
            for e in engines:
                fam.add_metric([self.model_name, e], float(value), created=created)
            yield fam
        pos = CounterMetricFamily(_strip(acc.VLLM_ACCEPTED_PER_POS), "Accepted tokens per draft position.",
                                  labels=labels + [acc.VLLM_POSITION_LABEL])
        for e in engines:
            for k, v in enumerate(self.per_pos):
                pos.add_metric([self.model_name, e, str(k)], float(v), created=created)
        yield pos

    def _sglang_families(self) -> Iterator:
        base = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        labels = base + (["dp_rank"] if self.dp > 1 else [])

        def ranks():
            for d in range(self.dp):
                for t in range(self.tp):
                    yield [self.model_name, "unified", str(t), "0", "0"] + ([str(d)] if self.dp > 1 else [])

        running = GaugeMetricFamily(acc.SGLANG_REQUESTS_RUNNING, "The number of running requests.", labels=labels)
        waiting = GaugeMetricFamily(SGLANG_WAITING, "The number of requests in the waiting queue.", labels=labels)
        throughput = GaugeMetricFamily(SGLANG_THROUGHPUT, "The generation throughput (token/s).", labels=labels)
        for lv in ranks():
            running.add_metric(lv, self.requests_running)
            waiting.add_metric(lv, REQUESTS_WAITING)
            throughput.add_metric(lv, self.throughput())
        yield running
        yield waiting
        yield throughput
        gen = CounterMetricFamily(_strip(acc.SGLANG_GENERATION_TOKENS), "Number of generation tokens processed.",
                                  labels=["model_name"])
        gen.add_metric([self.model_name], float(self.generation_tokens), created=self._created)
        yield gen
        # The tokenizer manager's histograms: labels model_name, engine_type (TTFT adds is_streaming).
        ttft = HistogramMetricFamily(SGLANG_TTFT, "Histogram of time to first token in seconds.",
                                     labels=["model_name", "engine_type", "is_streaming"])
        _add_histogram(ttft, [self.model_name, "unified", "true"], self.ttft, self._created)
        yield ttft
        itl = HistogramMetricFamily(SGLANG_ITL, "Histogram of inter-token latency in seconds.",
                                    labels=["model_name", "engine_type"])
        _add_histogram(itl, [self.model_name, "unified"], self.itl, self._created)
        yield itl
        if self.mode == "none":
            return
        tau = self.expected_length() or 1.0
        rate = (tau - 1.0) / self.num_spec_tokens
        for name, doc, value in (
                (acc.SGLANG_ACCEPT_LENGTH, "The average acceptance length of speculative decoding.", tau),
                (acc.SGLANG_ACCEPT_RATE, "The average acceptance rate of speculative decoding "
                 "(`accepted tokens / total draft tokens` in batch).", rate)):
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for lv in ranks():
                fam.add_metric(lv, value)
            yield fam

    def metrics_text(self, advance: bool = False) -> str:
        """The exposition as /metrics serves it (optionally advancing first, as a request does)."""
        with self._lock:
            if advance:
                self._advance(self.auto_advance)
            reg = CollectorRegistry(auto_describe=False)
            reg.register(_Collector(self))
            return generate_latest(reg).decode("utf-8")

    # ------------------------------------------------------------- server
    def serve_metrics(self) -> str:
        return self.metrics_text(advance=True)

    # ------------------------------------------------------------- completions (SpeculativeBenchmark tests)
    # ``POST /v1/completions`` (OpenAI's completions API, non-streaming, as vLLM and SGLang serve it):
    # greedy text that depends only on the prompt and max_tokens (``completion_text``), so outputs with
    # and without speculation are equal, as the engines' greedy outputs must be. Each request advances
    # the counters one step and takes ``max_tokens`` x the inter-token latency, which grows with the
    # requests running at once, faster with speculation (drafting costs batch capacity): speculation
    # wins at low concurrency and loses above a crossover, deterministically in the counters and
    # roughly in the clock. ``sleep_scale`` 0 answers at once.
    # ``output_salt``: a non-empty salt changes every greedy output (an engine whose outputs differ from the
    # target's: what the canary probe must catch, controller/probe.py). ``api_key``: when set, the /v1 routes
    # answer 401 without ``Authorization: Bearer <api_key>`` (as vLLM's and SGLang's --api-key do; /metrics and
    # /health stay open). ``GET /v1/models`` lists ``model_name``.
    sleep_scale: float = 0.2
    running: int = 0
    output_salt: str = ""
    api_key: str | None = None

    def authorize(self, path: str, headers) -> tuple[int, bytes, str] | None:
        import json as _json

        if self.api_key is None or not path.startswith("/v1/"):
            return None
        if (headers.get("Authorization") or "") == f"Bearer {self.api_key}":
            return None
        return 401, _json.dumps({"error": "Unauthorized"}).encode(), "application/json"

    def serve_get(self, path: str) -> tuple[int, bytes, str] | None:
        import json as _json

        if path != "/v1/models":
            return None
        doc = {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "standin"}]}
        return 200, _json.dumps(doc).encode(), "application/json"

    def serve_post(self, path: str, body: bytes) -> tuple[int, bytes, str] | None:
        import json as _json

        if path != "/v1/completions":
            return None
        try:
            req = _json.loads(body or b"{}")
            prompt, max_tokens = req.get("prompt", ""), int(req.get("max_tokens") or 16)
            if isinstance(prompt, list):
                prompt = " ".join(str(p) for p in prompt)
        except (ValueError, TypeError) as e:
            return 400, _json.dumps({"error": {"message": f"bad request: {e}"}}).encode(), "application/json"
        if req.get("model") not in (None, self.model_name):
            return 404, _json.dumps({"error": {"message": f"The model `{req.get('model')}` does not exist."}}).encode(), \
                "application/json"
        with self._lock:
            self.running += 1
            running = self.running
        try:
            tau = self.expected_length() or 1.0
            penalty = 0.6 if self.expected_length() else 0.1
            time.sleep(self.sleep_scale * max_tokens * BASE_ITL_SECONDS * (1 + penalty * (running - 1)) / tau)
            self.advance(1)
        finally:
            with self._lock:
                self.running -= 1
        text = completion_text(self.output_salt + str(prompt), max_tokens)
        doc = {"id": "cmpl-standin", "object": "text_completion", "created": int(time.time()), "model": self.model_name,
               "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
               "usage": {"prompt_tokens": len(str(prompt).split()), "completion_tokens": max_tokens,
                         "total_tokens": len(str(prompt).split()) + max_tokens}}
        return 200, _json.dumps(doc).encode(), "application/json"


WORDS = ("alpha", "beta", "gamma", "delta", "kernel", "token", "draft", "block", "pod", "node", "cache", "layer")


def completion_text(prompt: str, max_tokens: int) -> str:
    """The stand-in's greedy output: ``max_tokens`` words, a function of the prompt alone."""
    import hashlib

    seed = hashlib.sha256(prompt.encode()).digest()
    return "".join(" " + WORDS[seed[i % len(seed)] % len(WORDS)] for i in range(max(0, max_tokens)))


def vllm_main(argv: list[str] | None = None) -> int:
    """``vllm serve MODEL [flags]`` played by the stand-in (the dev kubelet's ``--exec vllm=...``): binds
    ``--host``/``--port``, serves MODEL's name, drafts ``num_speculative_tokens`` of ``--speculative-config``
    (healthy acceptance), or exports no speculative series without one (speculation off); with ``VLLM_API_KEY``
    set, the /v1 routes need it, as vLLM's do. Other flags are accepted and ignored."""
    import json as _json

    p = argparse.ArgumentParser(prog="vllm (engine stand-in)")
    p.add_argument("serve")
    p.add_argument("model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--speculative-config", default=None)
    a, _ = p.parse_known_args(argv)
    sc = _json.loads(a.speculative_config) if a.speculative_config else None
    k = int(sc.get("num_speculative_tokens") or 1) if sc else 1
    s = EngineStandin("vllm", "healthy" if sc else "none", model_name=a.model, num_spec_tokens=k, auto_advance=0,
                      host=a.host, port=a.port)
    s.api_key = os.environ.get("VLLM_API_KEY") or None  # vLLM's own variable (spec.engine.apiKey): /v1 needs it
    s.start()
    print(f"engine stand-in as vllm serve {a.model} ({'speculative, k=' + str(k) if sc else 'no speculation'}) "
          f"on {s.url}; Application startup complete", flush=True)
    return serve_forever(s)


def serve_forever(server) -> int:
    """Block until interrupted, then stop ``server`` (a started stand-in)."""
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdeploy_dev.engine_standin",
                                description="Serve /metrics and /health like a vLLM or SGLang engine (for tests).")
    p.add_argument("--engine", choices=acc.ENGINES, default="vllm")
    p.add_argument("--mode", choices=MODES, default="healthy")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model-name", default="Qwen/Qwen3-8B")
    p.add_argument("--num-spec-tokens", type=int, default=15, help="draft tokens per step (B-1)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel engines/ranks")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (SGLang series per DP rank)")
    p.add_argument("--auto-advance", type=int, default=1, help="counter steps per /metrics request")
    p.add_argument("--requests-per-step", type=int, default=4, help="time-to-first-token observations per step")
    a = p.parse_args(argv)
    s = EngineStandin(a.engine, a.mode, model_name=a.model_name, num_spec_tokens=a.num_spec_tokens, dp=a.dp, tp=a.tp,
                      auto_advance=a.auto_advance, host=a.host, port=a.port,
                      requests_per_step=a.requests_per_step).start()
    print(f"engine stand-in ({a.engine}, {a.mode}) on {s.url}", flush=True)
    return serve_forever(s)


if __name__ == "__main__":
    sys.exit(vllm_main(sys.argv[2:]) if sys.argv[1:2] == ["--as-vllm"] else main())
