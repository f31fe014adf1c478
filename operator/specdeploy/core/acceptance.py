"""Speculative-decoding acceptance from engine metrics (pure: standard library only).

One source of truth for the engines' metric names (the Prometheus rules in
``specdeploy.observability.rules`` import them from here) and for the math
(docs/reference/metrics.md; /work/shared/reference/dflash-engines.md section 4):

- acceptance length  tau = 1 + accepted / drafts      (the bonus token included; 1 <= tau <= B)
- acceptance rate        = accepted / draft_tokens
- per-position rate_i    = accepted_per_pos_i / drafts  (cumulative: a prefix is accepted,
                                                         so rate_0 >= rate_1 >= ...)

vLLM exports counters: the numbers above come from their *increase* between two scrapes
(Prometheus semantics: a value lower than before is a counter reset, and the new value is
the increase since the reset; a series that is new in the second scrape counts from 0).
With one scrape only, the counters' values are used as they are: averages since the
engine started. Data-parallel engines (label ``engine``) and every other label are summed.

SGLang exports gauges, already averaged by the engine over its last logging interval.
Tensor/pipeline/expert-parallel ranks (``tp_rank``, ``pp_rank``, ``moe_ep_rank``) of one
data-parallel rank report the same value: they are averaged (never summed) into one value
per data-parallel rank (every other label, ``dp_rank`` included, tells the DP ranks
apart); DP ranks are then averaged **with equal weight** (the gauges carry no draft
counts to weigh them by). A gauge of 0 means "no speculative step logged yet" (tau >= 1
for any real step) and is left out; NaN values are left out everywhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, NamedTuple

ENGINES = ("vllm", "sglang")

# ----------------------------------------------------------------- metric names
# vLLM v1 (vllm/v1/spec_decode/metrics.py): counters, labels model_name, engine (DP index);
# the per-position counter adds position="0".."B-2". Exposed with the `_total` suffix
# (prometheus_client also writes a `<base>_created` sample per series: ignored).
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
VLLM_COUNTERS = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_ACCEPTED_PER_POS)
VLLM_POSITION_LABEL = "position"
VLLM_DP_LABEL = "engine"
# Always-present vLLM series (used by the "metrics missing" alert and the stand-in engine) and the
# latency/queue series the dashboards and the stand-in engine use (vLLM 0.33; docs/reference/metrics.md).
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
# Finished requests by label finished_reason = stop|length|abort|error|repetition (vllm/v1/metrics/loggers.py,
# PrometheusStatLogger.record: counter_request_success[finished_request.finish_reason]; the reasons are
# vllm/v1/engine/__init__.py FinishReason: "error" is a request-level internal error, always answered with a 500;
# "abort" is the client going away). Requests refused at admission by a queue limit never finish: they are
# counted by vllm:admission_rejections_total (AsyncLLM._record_admission_rejection; labels model_name, reason).
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_FINISHED_REASON_LABEL = "finished_reason"
VLLM_FINISHED_ERROR = "error"
VLLM_ADMISSION_REJECTIONS = "vllm:admission_rejections_total"

# SGLang (python/sglang/srt/metrics/collector.py): gauges, labels model_name, engine_type,
# tp_rank, pp_rank, moe_ep_rank (newer builds), dp_rank (with data parallelism).
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
SGLANG_GAUGES = (SGLANG_ACCEPT_LENGTH, SGLANG_ACCEPT_RATE)
SGLANG_RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank", "pid")
SGLANG_DP_LABEL = "dp_rank"
SGLANG_GENERATION_TOKENS = "sglang:generation_tokens_total"
# Counters incremented per finished request (observability/metrics_collector.py observe_one_finished_request,
# SGLang >= 0.5.23 at least): verification passes and generated tokens. SGLang's own per-request acceptance
# length is completion_tokens / spec_verify_ct, so Δgeneration_tokens / Δverify_calls is the same quantity,
# summable across pods and ranks; the spec_accept_length gauge is the fallback on releases without the counter.
SGLANG_VERIFY_CALLS = "sglang:spec_verify_calls_total"
# Requests (SGLang 0.5.23 observability/metrics_collector.py): num_requests_total counts every request that
# finished (observe_one_finished_request, called by TokenizerManager for each finished state, aborted ones too;
# label is_streaming); num_aborted_requests_total counts TokenizerManager.abort_request calls
# (observe_one_aborted_request): a client that went away and a request the server failed alike, SGLang does not
# tell them apart in its counters.
SGLANG_REQUESTS = "sglang:num_requests_total"
SGLANG_ABORTED_REQUESTS = "sglang:num_aborted_requests_total"
# Where a figure came from (status.acceptance.source, the recording rules' `source` label).
SOURCE_VLLM = "vllmCounters"
SOURCE_SGLANG_COUNTERS = "sglangVerifyCalls"
SOURCE_SGLANG_GAUGE = "sglangAcceptLengthGauge"
SGLANG_REQUESTS_RUNNING = "sglang:num_running_reqs"
SGLANG_WAITING = "sglang:num_queue_reqs"
SGLANG_THROUGHPUT = "sglang:gen_throughput"
SGLANG_TTFT = "sglang:time_to_first_token_seconds"
SGLANG_ITL = "sglang:inter_token_latency_seconds"

# The operator's own acceptance gauges (controller/metrics.py registers them; the rules and
# dashboards read them; the operator's other series are in core/names.py): the acceptance monitor's figures per SpeculativeDeployment.
OP_LABELS = ("namespace", "deployment", "engine", "drafter")
OP_LENGTH = "specdeploy_acceptance_length"
OP_RATE = "specdeploy_acceptance_rate"
OP_PER_POSITION = "specdeploy_acceptance_per_position"  # + label position
OP_BASELINE = "specdeploy_acceptance_baseline_length"
OP_REGRESSION_FRACTION = "specdeploy_acceptance_regression_fraction"
# spec.speculation.guard (core/rollout/guard.py) as resolved: running requests per engine from which speculation loses.
OP_GUARD_MAX_CONCURRENCY = "specdeploy_guard_max_concurrency"

# ----------------------------------------------------------------- health thresholds
DEFAULT_MONITOR_INTERVAL = 30.0  # seconds between the acceptance monitor's rounds (chart acceptanceIntervalSeconds)
DEFAULT_MIN_LENGTH = 1.5  # tau below this: AcceptanceCollapsed
CLIFF_HIGH = 0.30  # a position at or above this is "healthy"
CLIFF_LOW = 0.05  # a position below this is "near zero"

# Health reasons (also the `reason` of the SpeculationHealthy condition).
HEALTHY = "Healthy"
COLLAPSED = "AcceptanceCollapsed"
REGRESSED = "AcceptanceRegressed"  # tau below the deployment's baseline (core/rollout/baseline.py)
CLIFF = "AcceptanceCliff"
NO_METRICS = "NoMetrics"
NO_TRAFFIC = "NoTraffic"
# Health statuses.
OK, DEGRADED, UNKNOWN = "Healthy", "Degraded", "Unknown"


# ----------------------------------------------------------------- parsing


class Sample(NamedTuple):
    name: str
    labels: tuple[tuple[str, str], ...]  # sorted (name, value) pairs
    value: float

    def label(self, key: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == key:
                return v
        return default


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_value(text: str) -> float | None:
    t = text.strip()
    low = t.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if not t or not (t[0].isdigit() or t[0] in "+-."):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _parse_labels(line: str, i: int) -> tuple[str | None, list[tuple[str, str]], int] | None:
    """Parse `{a="x",b="y"}` starting at line[i] == '{'; return (quoted name or None, pairs,
    index after '}'). A quoted string without `=` is an OpenMetrics 2 metric name."""
    pairs: list[tuple[str, str]] = []
    qname: str | None = None
    i += 1
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return qname, pairs, i + 1
        if i < n and line[i] == '"':  # OpenMetrics 2: quoted metric name or label name
            q = _parse_quoted(line, i)
            if q is None:
                return None
            key, i = q
        else:
            m = _LABEL_NAME.match(line, i)
            if not m:
                return None
            key, i = m.group(0), m.end()
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "=":
            i += 1
            while i < n and line[i] in " \t":
                i += 1
            q = _parse_quoted(line, i)
            if q is None:
                return None
            value, i = q
            pairs.append((key, value))
        elif qname is None and not pairs and line[i - 1] == '"':
            qname = key
        else:
            return None
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return qname, pairs, i + 1
        return None


def _parse_quoted(line: str, i: int) -> tuple[str, int] | None:
    if i >= len(line) or line[i] != '"':
        return None
    out = []
    i += 1
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n:
            nxt = line[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        out.append(c)
        i += 1
    return None


def parse_line(line: str) -> Sample | None:
    """One sample line of the Prometheus text format (0.0.4) or OpenMetrics; None if not one.

    Handles label escapes, NaN/+Inf/-Inf, a trailing timestamp and an OpenMetrics exemplar
    (`... value [ts] # {labels} value [ts]`), and the OpenMetrics 2 quoted-name form
    `{"name",label="v"} value`."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    i = 0
    name = None
    m = _NAME.match(line)
    if m:
        name, i = m.group(0), m.end()
    pairs: list[tuple[str, str]] = []
    if i < len(line) and line[i] == "{":
        parsed = _parse_labels(line, i)
        if parsed is None:
            return None
        qname, pairs, i = parsed
        if qname is not None:
            if name is not None:
                return None
            name = qname
    if name is None:
        return None
    rest = line[i:]
    if not rest or (rest[0] not in " \t" and not line[i - 1] == "}"):
        return None
    # Drop an exemplar: everything from " # " on.
    hash_at = rest.find(" # ")
    if hash_at >= 0:
        rest = rest[:hash_at]
    fields = rest.split()
    if not fields or len(fields) > 2:
        return None
    value = _parse_value(fields[0])
    if value is None:
        return None
    if len(fields) == 2 and _parse_value(fields[1]) is None:
        return None
    return Sample(name, tuple(sorted(dict(pairs).items())), value)


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of an exposition; lines that are not samples (comments, HELP/TYPE,
    garbage) are skipped, never an error. A repeated series keeps its last value."""
    if not isinstance(text, str):
        return []
    seen: dict[tuple[str, tuple], int] = {}
    out: list[Sample] = []
    for raw in text.splitlines():
        s = parse_line(raw)
        if s is None:
            continue
        key = (s.name, s.labels)
        if key in seen:
            out[seen[key]] = s
        else:
            seen[key] = len(out)
            out.append(s)
    return out


def series_by_labels(samples: Iterable[Sample], name: str) -> dict[tuple, float]:
    """Series of one counter by label set. Accepts the name with or without `_total`
    (OpenMetrics family names and old text format); never the `_created` sample."""
    base = name[: -len("_total")] if name.endswith("_total") else name
    wanted = {base + "_total", base}
    found_total: dict[tuple, float] = {}
    found_bare: dict[tuple, float] = {}
    for s in samples:
        if s.name in wanted and not math.isnan(s.value):
            (found_total if s.name.endswith("_total") else found_bare)[s.labels] = s.value
    return found_total or found_bare


# ----------------------------------------------------------------- result


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of one scrape (SGLang) or one scrape interval (vLLM)."""

    engine: str
    length: float | None  # tau, bonus token included; None when there were no drafts
    rate: float | None  # accepted / draft tokens
    per_position: tuple[float, ...] = ()  # rate_i for position 0.. (vLLM only)
    drafts: float | None = None  # drafts in the window (vLLM); None for SGLang
    draft_tokens: float | None = None
    accepted: float | None = None
    window: str = "interval"  # "interval" (two vLLM scrapes), "cumulative" (one), "instant" (SGLang)
    interval_s: float | None = None
    series: int = 0  # series aggregated (vLLM: DP engines x model; SGLang: rank series)
    groups: int = 0  # vLLM: DP engines; SGLang: DP ranks averaged
    resets: int = 0  # counter resets seen between the two scrapes
    notes: tuple[str, ...] = field(default=())
    source: str = ""  # SOURCE_*: which series the length was computed from
    verify_calls: float | None = None  # SGLang counters: verification passes in the window
    generation_tokens: float | None = None  # SGLang counters: tokens generated in the window

    @property
    def drafts_per_second(self) -> float | None:
        if self.drafts is None or not self.interval_s or self.window != "interval":
            return None
        return self.drafts / self.interval_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_position"] = list(self.per_position)
        d["notes"] = list(self.notes)
        d["drafts_per_second"] = self.drafts_per_second
        return d


def counter_increase(prev: dict[tuple, float] | None, cur: dict[tuple, float]) -> tuple[dict[tuple, float], int]:
    """Per-series increase (Prometheus semantics) and the number of resets seen."""
    out: dict[tuple, float] = {}
    resets = 0
    for labels, v in cur.items():
        if not math.isfinite(v):
            continue
        if prev is None:
            out[labels] = max(v, 0.0)
            continue
        p = prev.get(labels)
        if p is None or not math.isfinite(p):
            out[labels] = max(v, 0.0)  # new series: counts from 0
        elif v < p:
            resets += 1
            out[labels] = max(v, 0.0)  # reset: the value is the increase since the reset
        else:
            out[labels] = v - p
    return out, resets


def _vllm(prev_text: str | None, cur_text: str, interval_s: float | None) -> Acceptance | None:
    cur = parse_exposition(cur_text)
    cur_drafts = series_by_labels(cur, VLLM_DRAFTS)
    if not cur_drafts:
        return None
    prev = parse_exposition(prev_text) if prev_text is not None else None
    notes: list[str] = []
    total_resets = 0
    sums: dict[str, float | None] = {}
    per_pos: dict[int, float] = {}
    for name in VLLM_COUNTERS:
        c = series_by_labels(cur, name)
        p = series_by_labels(prev, name) if prev is not None else None
        inc, resets = counter_increase(p, c)
        total_resets = max(total_resets, resets)
        if name == VLLM_ACCEPTED_PER_POS:
            for labels, v in inc.items():
                pos = dict(labels).get(VLLM_POSITION_LABEL, "")
                if pos.isdigit() and len(pos) < 4:
                    per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + v
        else:
            sums[name] = sum(inc.values()) if c else None
    if prev is not None and not series_by_labels(prev, VLLM_DRAFTS):
        notes.append("the first scrape has no speculative-decoding counters: values are since the engine started")
        window = "cumulative"
    else:
        window = "interval" if prev is not None else "cumulative"
    if window == "cumulative" and prev is None:
        notes.append("one scrape: averages since the engine started (give two scrapes for a window)")
    if total_resets:
        notes.append(f"{total_resets} counter reset(s) between the scrapes (engine restarted?)")
    drafts = sums.get(VLLM_DRAFTS) or 0.0
    accepted = sums.get(VLLM_ACCEPTED)
    draft_tokens = sums.get(VLLM_DRAFT_TOKENS)
    engines = {dict(l).get(VLLM_DP_LABEL, "") for l in cur_drafts}
    length = rate = None
    positions: tuple[float, ...] = ()
    if drafts > 0 and accepted is not None:
        length = 1.0 + accepted / drafts
    if draft_tokens and accepted is not None:
        rate = accepted / draft_tokens
    if drafts > 0 and per_pos:
        n = max(per_pos) + 1
        positions = tuple(per_pos.get(i, 0.0) / drafts for i in range(n))
    if drafts == 0:
        notes.append("no drafts in the window: no traffic, acceptance unknown")
    return Acceptance(engine="vllm", length=length, rate=rate, per_position=positions, drafts=drafts,
                      draft_tokens=draft_tokens, accepted=accepted, window=window,
                      interval_s=interval_s if window == "interval" else None, series=len(cur_drafts),
                      groups=len(engines), resets=total_resets, notes=tuple(notes), source=SOURCE_VLLM)


def _sglang_gauge(samples: list[Sample], name: str) -> tuple[float | None, int, int]:
    """(value, series used, DP groups) of one SGLang gauge: mean over ranks per DP group,
    then the equal-weight mean over DP groups."""
    groups: dict[tuple, list[float]] = {}
    n = 0
    for s in samples:
        if s.name != name or not math.isfinite(s.value) or s.value <= 0:
            continue
        key = tuple((k, v) for k, v in s.labels if k not in SGLANG_RANK_LABELS)
        groups.setdefault(key, []).append(s.value)
        n += 1
    if not groups:
        return None, 0, 0
    means = [sum(v) / len(v) for v in groups.values()]
    return sum(means) / len(means), n, len(groups)


def _sglang(prev_text: str | None, cur_text: str, interval_s: float | None = None) -> Acceptance | None:
    cur = parse_exposition(cur_text)
    counters = _sglang_counters(prev_text, cur, interval_s)
    if counters is not None and counters.length is not None:
        return counters
    present = any(s.name in SGLANG_GAUGES for s in cur)
    if not present:
        return counters
    length, n_len, g_len = _sglang_gauge(cur, SGLANG_ACCEPT_LENGTH)
    rate, n_rate, g_rate = _sglang_gauge(cur, SGLANG_ACCEPT_RATE)
    notes = list(counters.notes) if counters is not None else []
    if length is None:
        notes.append("spec_accept_length is 0 or absent: no speculative step logged yet")
    if g_len > 1:
        notes.append(f"{g_len} data-parallel groups averaged with equal weight")
    return Acceptance(engine="sglang", length=length, rate=rate, window="instant", series=max(n_len, n_rate),
                      groups=max(g_len, g_rate), notes=tuple(notes), source=SOURCE_SGLANG_GAUGE)


def _sglang_counters(prev_text: str | None, cur: list[Sample], interval_s: float | None) -> Acceptance | None:
    """tau = Δ sglang:generation_tokens_total / Δ sglang:spec_verify_calls_total (both counted per finished
    request); None when the release exports no verify counter. Without a finished request in the window the
    length is None (the caller falls back to the gauge)."""
    verify = series_by_labels(cur, SGLANG_VERIFY_CALLS)
    if not verify:
        return None
    prev = parse_exposition(prev_text) if prev_text is not None else None
    v_inc, v_resets = counter_increase(series_by_labels(prev, SGLANG_VERIFY_CALLS) if prev is not None else None, verify)
    gen = series_by_labels(cur, SGLANG_GENERATION_TOKENS)
    g_inc, g_resets = counter_increase(series_by_labels(prev, SGLANG_GENERATION_TOKENS) if prev is not None else None, gen)
    calls, tokens = sum(v_inc.values()), sum(g_inc.values())
    window = "interval" if prev is not None and series_by_labels(prev, SGLANG_VERIFY_CALLS) else "cumulative"
    notes = []
    if window == "cumulative":
        notes.append("one scrape (or the first with the counter): averages since the engine started")
    resets = max(v_resets, g_resets)
    if resets:
        notes.append(f"{resets} counter reset(s) between the scrapes (engine restarted?)")
    length = None
    if calls > 0 and gen:
        length = tokens / calls
    elif calls <= 0:
        notes.append("no request finished in the window: the verify counter did not move")
    rate, _, _ = _sglang_gauge(cur, SGLANG_ACCEPT_RATE)
    groups = {dict(l).get(SGLANG_DP_LABEL, "") for l in verify}
    return Acceptance(engine="sglang", length=length, rate=rate, window=window,
                      interval_s=interval_s if window == "interval" else None, series=len(verify),
                      groups=len(groups), resets=resets, notes=tuple(notes), source=SOURCE_SGLANG_COUNTERS,
                      verify_calls=calls, generation_tokens=tokens)


def running_requests(engine: str, text: str) -> float | None:
    """Requests in the running batch of one engine pod's scrape (vLLM ``vllm:num_requests_running``, SGLang
    ``sglang:num_running_reqs``): the largest series (one scheduler's batch: DP engines and DP ranks schedule
    apart, TP ranks repeat the same figure); None when the pod exports no such gauge."""
    name = {"vllm": VLLM_REQUESTS_RUNNING, "sglang": SGLANG_REQUESTS_RUNNING}.get(engine)
    if name is None:
        return None
    values = [s.value for s in parse_exposition(text) if s.name == name and math.isfinite(s.value)]
    return max(values) if values else None


def acceptance_from_scrapes(engine: str, prev_text: str | None, cur_text: str,
                            interval_s: float | None = None) -> Acceptance | None:
    """Acceptance from one or two scrapes of one engine's /metrics text.

    vLLM: with ``prev_text`` the counters' increase from it to ``cur_text``; without, the
    averages since the engine started. SGLang: where the release exports ``sglang:spec_verify_calls_total``,
    the same from its counters (generated tokens per verification pass); otherwise, or when no request
    finished in the window, the ``spec_accept_length`` gauge of ``cur_text``. ``source`` says which. Returns None when the engine exports no speculative-decoding metrics at all.
    Never raises on malformed text (unparseable lines are skipped)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if not isinstance(cur_text, str):
        return None
    if interval_s is not None and not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s)
                                       and interval_s > 0):
        interval_s = None
    if engine == "vllm":
        return _vllm(prev_text if isinstance(prev_text, str) else None, cur_text, interval_s)
    return _sglang(prev_text if isinstance(prev_text, str) else None, cur_text, interval_s)


def combine(items: Iterable[Acceptance | None]) -> Acceptance | None:
    """Acceptance of several pods of one deployment: vLLM sums the counters (so pods weigh by
    drafts); SGLang averages the pods' values with equal weight. None when all are None."""
    got = [a for a in items if a is not None]
    if not got:
        return None
    engine = got[0].engine
    if any(a.engine != engine for a in got):
        raise ValueError("cannot combine acceptance of different engines")
    if len(got) == 1:
        return got[0]
    if engine == "sglang" and all(a.source == SOURCE_SGLANG_COUNTERS for a in got):
        calls = sum(a.verify_calls or 0.0 for a in got)
        tokens = sum(a.generation_tokens or 0.0 for a in got)
        rates = [a.rate for a in got if a.rate is not None]
        windows = {a.window for a in got}
        return Acceptance(engine="sglang", length=tokens / calls if calls > 0 else None,
                          rate=sum(rates) / len(rates) if rates else None,
                          window=windows.pop() if len(windows) == 1 else "mixed",
                          interval_s=max((a.interval_s for a in got if a.interval_s), default=None),
                          series=sum(a.series for a in got), groups=sum(a.groups for a in got),
                          resets=sum(a.resets for a in got), notes=(f"{len(got)} pods summed",),
                          source=SOURCE_SGLANG_COUNTERS, verify_calls=calls, generation_tokens=tokens)
    if engine == "sglang":
        lengths = [a.length for a in got if a.length is not None]
        rates = [a.rate for a in got if a.rate is not None]
        return Acceptance(engine="sglang", length=sum(lengths) / len(lengths) if lengths else None,
                          rate=sum(rates) / len(rates) if rates else None, window="instant",
                          series=sum(a.series for a in got), groups=sum(a.groups for a in got),
                          notes=(f"{len(got)} pods averaged with equal weight",),
                          source=SOURCE_SGLANG_GAUGE if any(a.source == SOURCE_SGLANG_GAUGE for a in got) else "")
    drafts = sum(a.drafts or 0.0 for a in got)
    acc_parts = [a.accepted for a in got if a.accepted is not None]
    tok_parts = [a.draft_tokens for a in got if a.draft_tokens is not None]
    accepted = sum(acc_parts) if acc_parts else None
    draft_tokens = sum(tok_parts) if tok_parts else None
    n = max((len(a.per_position) for a in got), default=0)
    per_pos_counts = [sum((a.per_position[i] * (a.drafts or 0.0)) if i < len(a.per_position) else 0.0 for a in got)
                      for i in range(n)]
    windows = {a.window for a in got}
    intervals = [a.interval_s for a in got if a.interval_s]
    return Acceptance(
        engine="vllm",
        length=1.0 + accepted / drafts if drafts > 0 and accepted is not None else None,
        rate=accepted / draft_tokens if draft_tokens and accepted is not None else None,
        per_position=tuple(c / drafts for c in per_pos_counts) if drafts > 0 else (),
        drafts=drafts, draft_tokens=draft_tokens, accepted=accepted,
        window=windows.pop() if len(windows) == 1 else "mixed",
        interval_s=max(intervals) if intervals else None,
        series=sum(a.series for a in got), groups=sum(a.groups for a in got),
        resets=sum(a.resets for a in got), notes=(f"{len(got)} pods summed",), source=SOURCE_VLLM)


# ----------------------------------------------------------------- health


class Health(NamedTuple):
    status: str  # Healthy | Degraded | Unknown
    reason: str  # Healthy | AcceptanceCollapsed | AcceptanceRegressed | AcceptanceCliff | NoMetrics | NoTraffic


def cliff_position(per_position: Iterable[float], high: float = CLIFF_HIGH, low: float = CLIFF_LOW) -> int | None:
    """The position where acceptance falls off a cliff, or None.

    Definition (the Prometheus rule ``specdeploy:acceptance_cliff:rate5m`` evaluates the
    same one): with per-position rates r_0, r_1, ..., there is a cliff when
      r_0 >= high, some r_k < low, and no r_k lies in [low, high).
    Per-position rates are cumulative (non-increasing), so this says: there is a k >= 1
    with r_{k-1} >= high and r_k < low, i.e. acceptance drops from healthy to near zero
    in one step. Natural decay (r_k ~ a^(k+1)) always passes through the band: a one-step
    drop from >= 0.30 to < 0.05 needs a ratio under 1/6 between neighbours. The position
    returned is the first k with r_k < low."""
    r = [x for x in per_position]
    if not r or any(not isinstance(x, (int, float)) or math.isnan(x) for x in r):
        return None
    if r[0] < high:
        return None
    if any(low <= x < high for x in r):
        return None
    for k, x in enumerate(r):
        if x < low:
            return k
    return None


def health(acceptance: Acceptance | None, min_length: float = DEFAULT_MIN_LENGTH, *, cliff_high: float = CLIFF_HIGH,
           cliff_low: float = CLIFF_LOW, min_drafts: float = 0.0) -> Health:
    """Judge one Acceptance. In order:
    - NoMetrics (Unknown): the engine exports no speculative-decoding metrics (None);
    - NoTraffic (Unknown): no drafts in the window (vLLM) or no step logged (SGLang), or
      fewer than ``min_drafts`` drafts;
    - AcceptanceCollapsed (Degraded): tau < ``min_length``;
    - AcceptanceCliff (Degraded): ``cliff_position(per_position)`` is not None (vLLM only:
      SGLang exports no per-position rates);
    - Healthy."""
    if acceptance is None:
        return Health(UNKNOWN, NO_METRICS)
    if acceptance.length is None or (acceptance.drafts is not None and acceptance.drafts < max(min_drafts, 1e-12)):
        return Health(UNKNOWN, NO_TRAFFIC)
    if acceptance.length < min_length:
        return Health(DEGRADED, COLLAPSED)
    if cliff_position(acceptance.per_position, cliff_high, cliff_low) is not None:
        return Health(DEGRADED, CLIFF)
    return Health(OK, HEALTHY)


def health_message(acceptance: Acceptance | None, min_length: float = DEFAULT_MIN_LENGTH, *,
                   cliff_high: float = CLIFF_HIGH, cliff_low: float = CLIFF_LOW) -> str:
    """One line for humans (and the condition message)."""
    h = health(acceptance, min_length, cliff_high=cliff_high, cliff_low=cliff_low)
    if h.reason == NO_METRICS:
        return "the engine exports no speculative-decoding metrics (is speculative decoding on? SGLang needs --enable-metrics)"
    assert acceptance is not None
    if h.reason == NO_TRAFFIC:
        return "no speculative steps in the window: acceptance unknown"
    tau = f"acceptance length {acceptance.length:.2f}"
    if h.reason == COLLAPSED:
        return f"{tau} is below {min_length:g}: speculation has collapsed"
    if h.reason == CLIFF:
        k = cliff_position(acceptance.per_position, cliff_high, cliff_low)
        prev = acceptance.per_position[k - 1] if k else 0.0
        return (f"{tau}, but per-position acceptance falls from {prev:.2f} at position {k - 1} to "
                f"{acceptance.per_position[k]:.3f} at position {k}")
    return f"{tau}"
