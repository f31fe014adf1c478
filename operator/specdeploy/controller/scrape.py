"""Bounded scrapes: what the acceptance monitor reads of an engine's /metrics, and at what cost at most.

A scrape reads at most ``MAX_METRICS_BYTES`` of a body (``read_bounded``; more is a failed scrape, read no
further) and picks the engine's series out of it off the event loop (``engine_series`` in the monitor's ``new_parse_pool``, a small
thread pool): the lines named ``vllm:*``, ``sglang:*`` and ``process_start_time_seconds``, at most
``MAX_ENGINE_SERIES``; only those are kept and parsed (core/acceptance, core/rollout).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core.errors import Retryable

# Bounds on what one scrape may cost the operator (issue 37: a 200 MB body took it from 319 to 975 MiB and
# stalled the event loop for 30 s). A real engine's /metrics is well under 1 MiB (vLLM 0.33 with 8 data-parallel
# engines and 15 draft positions: ~0.3 MiB, most of it histogram buckets); 8 MiB leaves an order of magnitude of
# room, and SCRAPE_CONCURRENCY bodies at most are held at once (128 MiB in the worst case, under the chart's limit
# with the rest of the operator).
MAX_METRICS_BYTES = 8 * 1024 * 1024
SCRAPE_CONCURRENCY = 16
# The series the monitor reads (core/acceptance, core/rollout) are the engine's own (``vllm:``, ``sglang:``) and
# ``process_start_time_seconds`` (an engine restart); histogram buckets are never read. A vLLM with 8 DP engines
# exports a few hundred such lines; more than MAX_ENGINE_SERIES is not an engine we know (a failed scrape), and a
# line longer than MAX_SERIES_LINE bytes (labels of kilobytes) is skipped.
MAX_ENGINE_SERIES = 5000
MAX_SERIES_LINE = 2048
_ENGINE_LINE = re.compile(rb"^(?:vllm:|sglang:|process_start_time_seconds[ {])[^\n]*", re.MULTILINE)
PARSE_THREADS = 2  # the pool engine_series runs in (bounded: at most this many bodies are being picked at once)


class ScrapeRejected(Retryable):
    """A /metrics answer the monitor will not read (too large, too many series): a failed scrape."""


async def read_bounded(content: Any, length: int | None, limit: int = MAX_METRICS_BYTES) -> bytearray:
    """The body of an aiohttp response (``content``: its StreamReader; ``length``: its Content-Length), at most
    ``limit`` bytes, in one buffer (no joined copy): ScrapeRejected, read no further, when it says or turns out to
    be longer."""
    if length is not None and length > limit:
        raise ScrapeRejected(f"the /metrics body is {length} bytes (Content-Length), more than the {limit} a scrape "
                             "reads (MAX_METRICS_BYTES): not read")
    buf = bytearray()
    async for chunk in content.iter_any():
        if len(buf) + len(chunk) > limit:
            raise ScrapeRejected(f"the /metrics body is larger than the {limit} bytes a scrape reads "
                                 "(MAX_METRICS_BYTES): not read further")
        buf += chunk
    return buf


def engine_series(body: bytes | bytearray | str) -> str:
    """The lines of a /metrics body the monitor reads (named ``vllm:*``, ``sglang:*`` or
    ``process_start_time_seconds``; no histogram buckets, no line over MAX_SERIES_LINE bytes), as text for
    core/acceptance's parser. ScrapeRejected over MAX_METRICS_BYTES or MAX_ENGINE_SERIES such lines. Runs in a
    worker thread (the regular expression scans the body in C; only the picked lines are copied)."""
    data = body.encode("utf-8", errors="replace") if isinstance(body, str) else body
    if len(data) > MAX_METRICS_BYTES:
        raise ScrapeRejected(f"the /metrics body is larger than the {MAX_METRICS_BYTES} bytes a scrape reads "
                             "(MAX_METRICS_BYTES)")
    out: list[bytes] = []
    for m in _ENGINE_LINE.finditer(data):
        line = m.group().rstrip(b"\r")
        if len(line) > MAX_SERIES_LINE or line.split(b"{", 1)[0].split(b" ", 1)[0].endswith(b"_bucket"):
            continue
        out.append(line)
        if len(out) > MAX_ENGINE_SERIES:
            raise ScrapeRejected(f"the /metrics body has more than {MAX_ENGINE_SERIES} engine series "
                                 "(MAX_ENGINE_SERIES): not an engine's exposition")
    return b"\n".join(out).decode("utf-8", errors="replace")


def new_parse_pool() -> ThreadPoolExecutor:
    """The threads ``engine_series`` runs in: one pool per monitor (made on its first scrape, shut down by its
    close), at most PARSE_THREADS bodies picked at once."""
    return ThreadPoolExecutor(max_workers=PARSE_THREADS, thread_name_prefix="specdeploy-metrics")
