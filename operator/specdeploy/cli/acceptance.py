"""`specdeploy acceptance`: speculative-decoding acceptance from engine /metrics scrapes.

    specdeploy acceptance --engine vllm|sglang SCRAPE [SCRAPE2] [--interval SECONDS] [--output text|json]
                          [--min-length TAU] [--baseline TAU [--regression-fraction F]]

SCRAPE is a file holding a /metrics exposition, '-' for stdin, or an http(s) URL.
- SGLang: one scrape; its gauges are the answer.
- vLLM: two scrapes (the counters' increase between them). With one URL and --interval,
  the URL is scraped twice, --interval seconds apart. With one scrape only, the answer is
  the average since the engine started.
--interval with two scrapes is the seconds between them (for drafts per second).

--baseline judges a regression as the operator does against status.acceptance.baseline
(core/rollout/baseline.py): tau more than --regression-fraction (default 0.25) below it.

Exit: 0 healthy (or no traffic to judge); 1 collapsed, regressed, cliff, or no speculative
metrics; 2 unusable input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from ..core import acceptance as acc
from ..core.rollout import baseline as bl
from .common import OUTPUTS, UsageError, camel_keys, epilog, number_type, print_doc, seconds

PROG = "specdeploy acceptance"
MAX_BYTES = 64 * 1024 * 1024


class InputError(UsageError):
    """Unusable input: one line, exit 2 (the CLI's UsageError)."""


def _is_url(s: str) -> bool:
    return s.startswith(("http://", "https://"))


def read_scrape(src: str, timeout: float = 10.0) -> str:
    if _is_url(src):
        import urllib.error
        import urllib.request

        try:
            req = urllib.request.Request(src, headers={"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"})
            with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (user-given URL)
                data = r.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise InputError(f"{src}: HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise InputError(f"{src}: cannot fetch: {e.reason}") from None
        except (OSError, ValueError) as e:
            raise InputError(f"{src}: cannot fetch: {str(e)[:200] or type(e).__name__}") from None
    else:
        try:
            if src == "-":
                data = sys.stdin.buffer.read(MAX_BYTES + 1)
            else:
                with open(src, "rb") as fh:
                    data = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            raise InputError(f"file not found: {src}") from None
        except IsADirectoryError:
            raise InputError(f"{src} is a directory, not a scrape") from None
        except OSError as e:
            raise InputError(f"cannot read {src}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{src}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{src} is not UTF-8 text") from None


_baseline = number_type(lambda v: math.isfinite(v) and v >= 1.0,
                        "{text} is no acceptance length: tau is at least 1 (bonus token included)", name="baseline")
_fraction = number_type(lambda v: math.isfinite(v) and 0 < v < 1,
                        "{text} must be between 0 and 1 (0.25: 25% below the baseline)", name="fraction")


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _text(a: acc.Acceptance | None, h: acc.Health, msg: str, engine: str) -> str:
    if a is None:
        return f"{engine}: no speculative-decoding metrics in the scrape\nhealth: {h.status} ({h.reason}): {msg}"
    lines = []
    head = f"{engine}: acceptance length (tau) {_fmt(a.length)}, acceptance rate {_fmt(a.rate, '.3f')}"
    if a.engine == "vllm":
        where = {"interval": "between the scrapes", "cumulative": "since the engine started"}.get(a.window, a.window)
        head += (f" ({_fmt(a.accepted, '.0f')} accepted of {_fmt(a.draft_tokens, '.0f')} draft tokens, "
                 f"{_fmt(a.drafts, '.0f')} drafts {where}")
        if a.drafts_per_second is not None:
            head += f", {a.drafts_per_second:.2f} drafts/s over {a.interval_s:g} s"
        head += f"; {a.groups} engine(s))"
    else:
        head += f" (gauges: {a.series} series, {a.groups} data-parallel group(s))"
    lines.append(head)
    if a.per_position:
        lines.append("per position: " + " ".join(f"{i}:{r:.3f}" for i, r in enumerate(a.per_position)))
    for n in a.notes:
        lines.append(f"note: {n}")
    lines.append(f"health: {h.status} ({h.reason}): {msg}")
    return "\n".join(lines)


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def cmd_acceptance(args: argparse.Namespace) -> int:
    """Unusable input raises InputError: the CLI's main prints it (one line; JSON with -o json), exit 2."""
    try:
        return _run(args)
    except BrokenPipeError:
        return 0


def _run(args: argparse.Namespace) -> int:
    scrapes = list(args.scrape)
    if len(scrapes) > 2:
        raise InputError(f"at most two scrapes, got {len(scrapes)}")
    if scrapes.count("-") > 1:
        raise InputError("stdin ('-') can be only one of the scrapes")
    engine = args.engine
    prev = cur = None
    interval = args.interval
    if engine == "sglang":
        if len(scrapes) == 2:
            # Gauges: the newer scrape is the answer.
            read_scrape(scrapes[0])
        cur = read_scrape(scrapes[-1])
    elif len(scrapes) == 2:
        prev, cur = read_scrape(scrapes[0]), read_scrape(scrapes[1])
    elif _is_url(scrapes[0]) and interval:
        prev = read_scrape(scrapes[0])
        t0 = time.monotonic()
        time.sleep(interval)
        cur = read_scrape(scrapes[0])
        interval = time.monotonic() - t0
    else:
        cur = read_scrape(scrapes[0])
    a = acc.acceptance_from_scrapes(engine, prev, cur, interval)
    if a is None and not acc.parse_exposition(cur):
        raise InputError(f"{scrapes[-1]}: no Prometheus samples in it (is it a /metrics scrape?)")
    base = bl.Baseline(args.baseline, "", "") if args.baseline is not None else None
    h, msg = bl.judge(a, args.min_length, base, revision=None, fraction=args.regression_fraction)
    if args.output in ("json", "yaml"):
        health = {"status": h.status, "reason": h.reason, "message": msg, "min_length": args.min_length}
        if base is not None:
            health.update(baseline=args.baseline, regression_fraction=args.regression_fraction)
        doc = {"engine": engine, "found": a is not None, "acceptance": a.to_dict() if a else None, "health": health}
        # camelCase keys, like every other command's JSON (and Kubernetes)
        print_doc(camel_keys(_finite(doc)), args.output)
    else:
        print(_text(a, h, msg, engine))
    return 1 if h.reason in (acc.COLLAPSED, acc.REGRESSED, acc.CLIFF, acc.NO_METRICS) else 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "acceptance", help="speculative-decoding acceptance from engine /metrics scrapes",
        description="Acceptance length (tau, bonus token included), acceptance rate and per-position rates from "
                    "one SGLang scrape or two vLLM scrapes (a file, '-' for stdin, or an http(s) URL). Exit 0: "
                    "healthy or no traffic; 1: collapsed, regressed (with --baseline), cliff, or no speculative "
                    "metrics; 2: unusable input.",
        epilog=epilog(["specdeploy acceptance --engine vllm before.txt after.txt --interval 60",
                       "specdeploy acceptance --engine vllm http://engine:8000/metrics --interval 30 -o json",
                       "specdeploy acceptance --engine sglang http://engine:30000/metrics"],
                      ok="healthy, or no traffic to judge",
                      findings="collapsed, regressed (with --baseline), cliff, or no speculative metrics",
                      json_errors=True))
    p.add_argument("--engine", required=True, choices=acc.ENGINES, help="the engine that wrote the scrapes")
    p.add_argument("scrape", nargs="+", metavar="SCRAPE",
                   help="SCRAPE [SCRAPE2]: /metrics text (file, '-', or URL); vLLM: older first")
    p.add_argument("--interval", type=seconds, metavar="SECONDS",
                   help="seconds between the two scrapes; with one vLLM URL: scrape it twice this far apart")
    p.add_argument("--min-length", type=seconds, default=acc.DEFAULT_MIN_LENGTH, metavar="TAU",
                   help=f"collapse threshold for tau (default {acc.DEFAULT_MIN_LENGTH})")
    p.add_argument("--baseline", type=_baseline, metavar="TAU",
                   help="judge a regression against this tau (e.g. the deployment's status.acceptance.baseline.length)")
    p.add_argument("--regression-fraction", type=_fraction, default=bl.DEFAULT_REGRESSION_FRACTION, metavar="F",
                   help=f"with --baseline: tau below baseline x (1 - F) is a regression (default "
                        f"{bl.DEFAULT_REGRESSION_FRACTION})")
    p.add_argument("--output", "-o", choices=OUTPUTS, default="text")
    p.set_defaults(func=cmd_acceptance)
    return p
