"""``specdeploy bench report``: a SpeculativeBenchmark's results as a table, plots and an HTML page.

Input: the results ConfigMap's ``results.json`` (or a local copy), in any of the shapes the
operator and the client write (:func:`load_results`): the variants' result documents (Contract 3,
``core/bench/result.py``), or points that each carry their ``variant``; the recommendation
(Contract 4) from the document or the benchmark's ``status.recommendation``, else computed here
(``core/bench/reco.recommend``) when that module is present.

Output (``--out DIR``):
- ``tokens_per_s.png`` / ``.svg``: output tokens/s vs concurrency, one panel per context, one line
  per variant (the baseline, speculation off, dashed);
- ``tau.png`` / ``.svg``: acceptance length (tau) vs concurrency, same layout (speculation variants
  only: the baseline has no drafts);
- ``report.html``: the table, the recommendation, the PNGs embedded (base64) and the SVGs inline.

matplotlib (the ``report`` extra) with the Agg backend: no display needed. SVG text is kept as
text (``svg.fonttype: none``) so the labels are searchable.
"""

from __future__ import annotations

import base64
import html
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable

from .core.bench import result as br
from specdeploy.core.errors import Permanent

BASELINE = "baseline"
PLOTS = ("tokens_per_s", "tau")


class ReportError(Permanent, ValueError):
    """The results cannot be read (the message says what is wrong and where)."""


@dataclass(frozen=True)
class Row:
    variant: str
    point: br.PointResult
    equal: bool | None  # greedy outputs equal the baseline's at the same point shape
    speedup: float | None  # tokens/s over the baseline's at the same shape


def _is_result(d: Any) -> bool:
    return isinstance(d, dict) and "variant" in d and isinstance(d.get("points"), list)


def _variant_docs(doc: Any) -> list[dict]:
    """The variants' result documents from any of the accepted shapes:
    - the operator's ``results.json`` (controller/benchmark.py ``_finish``): ``points`` (each with its
      ``variant`` and ``equalToBaseline``), ``variants`` (the variants' settings), ``clients``;
    - ``{"variants": [<result document>, ...]}`` or a list of result documents (the clients' lines);
    - one result document."""
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise ReportError("results must be a JSON object or a list of variant results")
    for key in ("variants", "results"):
        items = doc.get(key)
        if isinstance(items, list) and items and all(_is_result(d) for d in items):
            return items
    if isinstance(doc.get("points"), list):  # flat points, each naming its variant
        clients = doc.get("clients") if isinstance(doc.get("clients"), dict) else {}
        order = [v.get("name") for v in doc.get("variants") or [] if isinstance(v, dict)]
        by: dict[str, list] = {}
        for i, p in enumerate(doc["points"]):
            if not isinstance(p, dict) or not isinstance(p.get("variant"), str):
                raise ReportError(f"points[{i}] has no variant")
            by.setdefault(p["variant"], []).append(p)
        names = [v for v in order if v in by] + [v for v in by if v not in order]
        return [{"variant": v, "client": (clients.get(v) or {}).get("client") or "unknown",
                 "clientVersion": (clients.get(v) or {}).get("clientVersion"), "points": by[v]} for v in names]
    if _is_result(doc):
        return [doc]
    raise ReportError("no results found: expected 'points' (the operator's results.json) or 'variants' "
                      "(the clients' result documents)")


def load_results(doc: Any) -> tuple[list[br.VariantResult], dict | None]:
    """(variant results validated as the operator validates them, the recommendation if present)."""
    docs = _variant_docs(doc)
    results = []
    for i, d in enumerate(docs):
        try:
            results.append(br.validate_result(d))
        except br.BenchResultError as e:
            name = d.get("variant") if isinstance(d, dict) else None
            raise ReportError(f"variant {name or i}: {e}") from None
    if not results:
        raise ReportError("the results hold no variant")
    reco = doc.get("recommendation") if isinstance(doc, dict) else None
    return results, reco if isinstance(reco, dict) else None


def given_equality(doc: Any) -> dict[tuple[str, str], bool | None]:
    """(variant, point id) -> the operator's ``equalToBaseline`` (it stays when digests were omitted
    from a large results.json)."""
    out: dict[tuple[str, str], bool | None] = {}
    for p in (doc.get("points") if isinstance(doc, dict) else None) or []:
        if isinstance(p, dict) and isinstance(p.get("equalToBaseline"), bool):
            out[(str(p.get("variant")), str(p.get("id")))] = p["equalToBaseline"]
    return out


def rows(results: Iterable[br.VariantResult], given: dict[tuple[str, str], bool | None] | None = None) -> list[Row]:
    results = list(results)
    base = {p.shape: p for r in results if r.variant == BASELINE for p in r.points}
    out = []
    for r in results:
        for p in r.points:
            b = base.get(p.shape)
            equal = None if r.variant == BASELINE or b is None else br.equal_to_baseline(p, b)
            if equal is None and given:
                equal = given.get((r.variant, p.id))
            speedup = None
            if b is not None and r.variant != BASELINE and b.output_tokens_per_second > 0 and p.completed:
                speedup = p.output_tokens_per_second / b.output_tokens_per_second
            out.append(Row(r.variant, p, equal, speedup))
    return out


def recommendation(results: list[br.VariantResult], given: dict | None) -> dict | None:
    if given:
        return given
    try:
        from .core.bench import reco as benchreco  # written with the operator side of the benchmark
    except ImportError:
        return None
    points = [{**p.model_dump(by_alias=True, mode="json"), "variant": r.variant} for r in results for p in r.points]
    return benchreco.recommend(points, [r.variant for r in results])


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


COLUMNS = ("VARIANT", "CONTEXT", "CONC", "DONE", "TOK/S", "SPEEDUP", "TTFT P50", "TTFT P99", "TPOT P50", "ITL P50",
           "TAU", "EQUAL")


def table_rows(rs: list[Row]) -> list[list[str]]:
    out = []
    for r in sorted(rs, key=lambda r: (r.point.context, r.point.concurrency, r.variant != BASELINE, r.variant)):
        p = r.point
        out.append([r.variant, str(p.context), str(p.concurrency), f"{p.completed}/{p.completed + p.failed}",
                    _f(p.output_tokens_per_second), "-" if r.speedup is None else f"{r.speedup:.2f}x",
                    _f(p.ttft_ms.p50), _f(p.ttft_ms.p99), _f(p.tpot_ms.p50 if p.tpot_ms else None, 2), _f(p.itl_ms.p50, 2),
                    _f(p.acceptance.length if p.acceptance else None, 2),
                    {True: "yes", False: "NO", None: "-"}[r.equal]])
    return out


def format_table(rs: list[Row]) -> str:
    return _columns(COLUMNS, table_rows(rs))


COST_COLUMNS = ("VARIANT", "CONTEXT", "CONC", "PREFIX HIT", "KV CAPACITY", "KV PEAK", "RSS PEAK")


def cost_rows(rs: list[Row]) -> list[list[str]]:
    """The hidden costs per point (core/bench/costs.py): empty when no point carries any."""
    if not any(r.point.costs for r in rs):
        return []
    out = []
    for r in sorted(rs, key=lambda r: (r.point.context, r.point.concurrency, r.variant != BASELINE, r.variant)):
        c = r.point.costs
        hit = c.prefix_cache_hit_rate if c else None
        out.append([r.variant, str(r.point.context), str(r.point.concurrency),
                    "-" if hit is None else f"{hit:.0%}",
                    "-" if not c or c.kv_capacity_tokens is None else f"{c.kv_capacity_tokens:,}",
                    "-" if not c or c.kv_usage_peak is None else f"{c.kv_usage_peak:.0%}",
                    "-" if not c or not c.resident_memory_peak_bytes else f"{c.resident_memory_peak_bytes / 2**30:.2f} GiB"])
    return out


def _columns(columns: tuple[str, ...], body: list[list[str]]) -> str:
    widths = [max(len(c), *(len(row[i]) for row in body)) if body else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines)


def format_costs(rs: list[Row]) -> str:
    body = cost_rows(rs)
    return _columns(COST_COLUMNS, body) if body else ""


def format_recommendation(reco: dict | None) -> str:
    if not reco:
        return "recommendation: none (no recommendation in the results and none could be computed)"
    lines = [f"recommendation: {reco.get('summary') or '(no summary)'}"]
    for b in reco.get("bands") or []:
        sp = b.get("speedup")
        where = f"  context {b.get('context')}, concurrency {b.get('concurrency')}: "
        if b.get("best") == BASELINE:
            lines.append(where + f"baseline (speculation off) {_f(b.get('outputTokensPerSecond'))} tok/s")
            continue
        method = f" ({b['method']})" if b.get("method") else ""
        lines.append(where + f"{b.get('best')}{method} {_f(b.get('outputTokensPerSecond'))} tok/s vs baseline "
                     f"{_f(b.get('baselineTokensPerSecond'))}" + (f" ({sp:.2f}x)" if isinstance(sp, (int, float)) else ""))
    for c in reco.get("crossover") or []:
        lines.append(f"  crossover at context {c.get('context')}: "
                     f"{c.get('concurrency') if c.get('concurrency') is not None else 'none'} ({c.get('reason', '')})")
    g = reco.get("guard") or {}
    if g:
        lines.append(f"  guard: maxConcurrency {g.get('maxConcurrency')}, maxContext {g.get('maxContext')}")
    for e in reco.get("excluded") or []:
        lines.append(f"  excluded: {e.get('variant')} ({e.get('reason', '')})")
    for c in reco.get("calibration") or []:
        cross = ", ".join(f"context {x.get('context')}: {x.get('concurrency') if x.get('concurrency') is not None else 'none'}"
                          for x in c.get("crossover") or [])
        measured = c.get("measuredTau")
        lines.append(f"  calibration: {c.get('variant')} assumed tau {c.get('assumedTau')}"
                     + (f" (measured {measured})" if measured is not None else "")
                     + f", best speedup {_f(c.get('bestSpeedup'), 2)}x, crossover {cross or 'none'}")
    for c in reco.get("costs") or []:
        lost = ": PREFIX CACHE LOST" if c.get("prefixCacheLost") else ""
        lines.append(f"  cost: {c.get('variant')} vs baseline: {c.get('vsBaseline', '')}{lost}")
    return "\n".join(lines)


# ----------------------------------------------------------------- plots (matplotlib, Agg)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("the plots need matplotlib: pip install 'specdeploy[report]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    import matplotlib.pyplot as plt

    return plt


def _figure(rs: list[Row], metric: str, title: str):
    plt = _pyplot()
    contexts = sorted({r.point.context for r in rs})
    variants = list(dict.fromkeys(r.variant for r in rs))
    if metric == "tau":
        variants = [v for v in variants if v != BASELINE]
    fig, axes = plt.subplots(1, len(contexts), figsize=(max(5.0, 4.2 * len(contexts)), 3.8), squeeze=False,
                             constrained_layout=True)
    ylabel = "output tokens/s" if metric == "tokens_per_s" else "acceptance length (tau)"
    concs = sorted({r.point.concurrency for r in rs})
    values = [(r.point.output_tokens_per_second if metric == "tokens_per_s" else
               (r.point.acceptance.length if r.point.acceptance else None)) for r in rs]
    top = max([v for v in values if v is not None] or [1.0])  # one scale for every panel
    for ax, ctx in zip(axes[0], contexts):
        for v in variants:
            pts = sorted((r for r in rs if r.variant == v and r.point.context == ctx), key=lambda r: r.point.concurrency)
            xs, ys = [], []
            for r in pts:
                y = (r.point.output_tokens_per_second if r.point.completed else None) if metric == "tokens_per_s" \
                    else (r.point.acceptance.length if r.point.acceptance else None)
                if y is not None:
                    xs.append(r.point.concurrency)
                    ys.append(y)
            if not xs:
                continue
            label = "baseline (speculation off)" if v == BASELINE else f"{v} (speculation on)"
            style = {"linestyle": "--", "color": "black"} if v == BASELINE else {}
            ax.plot(xs, ys, marker="o", label=label, **style)
        # honest axes: tokens/s from 0; tau from 1 (no drafts accepted) with room above the best
        if metric == "tokens_per_s":
            ax.set_ylim(bottom=0, top=max(1.0, top) * 1.1)
        else:
            ax.set_ylim(bottom=1, top=max(2.0, top * 1.1))
        ax.set_title(f"context {ctx} tokens")
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        if len(concs) > 1 and concs[-1] / max(concs[0], 1) >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(concs)
        ax.set_xticklabels([str(c) for c in concs])
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        elif metric == "tau":
            ax.text(0.5, 0.5, "no speculation variant measured", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(title)
    return plt, fig


def _variant_costs(rs: list[Row]) -> list[tuple[str, float | None, int | None]]:
    """(variant, prefix-cache hit rate over its points, KV capacity) in plan order."""
    from .core.bench.reco import variant_costs

    out = []
    for v in dict.fromkeys(r.variant for r in rs):
        c = variant_costs([{"costs": r.point.costs.model_dump(by_alias=True) if r.point.costs else None}
                           for r in rs if r.variant == v]) or {}
        out.append((v, c.get("prefixCacheHitRate"), c.get("kvCapacityTokens")))
    return out


def _cost_figure(rs: list[Row], title: str):
    plt = _pyplot()
    data = _variant_costs(rs)
    fig, (cap_ax, hit_ax) = plt.subplots(1, 2, figsize=(max(6.0, 1.6 * len(data) + 4), 3.8), constrained_layout=True)
    names = [v for v, _, _ in data]
    colors = ["black" if v == BASELINE else "C0" for v in names]
    cap_ax.bar(names, [c or 0 for _, _, c in data], color=colors)
    cap_ax.set_ylabel("KV cache capacity (tokens)")
    cap_ax.set_title("KV capacity the engine reports")
    hit_ax.bar(names, [100 * (h or 0) for _, h, _ in data], color=colors)
    hit_ax.set_ylim(0, 100)
    hit_ax.set_ylabel("prefix-cache hit rate (%)")
    hit_ax.set_title("prefix-cache hits over the points")
    for ax, vals in ((cap_ax, [c for *_, c in data]), (hit_ax, [h for _, h, _ in data])):
        for i, val in enumerate(vals):
            if val is None:
                ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=8)
        ax.tick_params(axis="x", labelrotation=30)
    fig.suptitle(title)
    return plt, fig


def write_report(name: str, rs: list[Row], reco: dict | None, out_dir: str) -> dict[str, str]:
    """Write the plots (PNG and SVG) and report.html into ``out_dir``; returns {kind: path}."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise ReportError(f"cannot create {out_dir}: {e.strerror}") from None
    files: dict[str, str] = {}
    svgs: dict[str, str] = {}
    pngs: dict[str, bytes] = {}
    titles = {"tokens_per_s": f"{name}: output tokens/s vs concurrency",
              "tau": f"{name}: acceptance length (tau) vs concurrency",
              "costs": f"{name}: hidden costs per variant"}
    for metric in PLOTS + (("costs",) if cost_rows(rs) else ()):
        plt, fig = _cost_figure(rs, titles[metric]) if metric == "costs" else _figure(rs, metric, titles[metric])
        try:
            for ext in ("png", "svg"):
                path = os.path.join(out_dir, f"{metric}.{ext}")
                fig.savefig(path, dpi=120 if ext == "png" else None, format=ext)
                files[f"{metric}.{ext}"] = path
        finally:
            plt.close(fig)
        with open(files[f"{metric}.svg"], encoding="utf-8") as fh:
            svgs[metric] = fh.read()
        with open(files[f"{metric}.png"], "rb") as fh:
            pngs[metric] = fh.read()
    page = render_html(name, rs, reco, pngs, svgs)
    path = os.path.join(out_dir, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    files["report.html"] = path
    return files


def render_html(name: str, rs: list[Row], reco: dict | None, pngs: dict[str, bytes], svgs: dict[str, str]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in table_rows(rs))
    reco_html = "<pre>" + e(format_recommendation(reco)) + "</pre>"
    costs = cost_rows(rs)
    cost_html = ("<h2>hidden costs</h2>\n<table><thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in COST_COLUMNS)
                 + "</tr></thead><tbody>" + "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>"
                                                    for row in costs) + "</tbody></table>\n") if costs else ""
    figs = []
    for metric in pngs:
        png = base64.b64encode(pngs[metric]).decode()
        svg = svgs[metric]
        svg = svg[svg.find("<svg"):] if "<svg" in svg else svg  # inline: no XML declaration / doctype
        figs.append(f'<h2>{e(metric)}</h2>\n<img alt="{e(metric)} (PNG)" src="data:image/png;base64,{png}">\n'
                    f'<details><summary>SVG</summary>\n{svg}\n</details>')
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{e(name)}: speculative benchmark</title>\n"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}</style></head>\n"
            f"<body><h1>{e(name)}: speculative benchmark</h1>\n{reco_html}\n"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n{cost_html}" + "\n".join(figs)
            + "\n</body></html>\n")


def report_doc(name: str, rs: list[Row], reco: dict | None, files: dict[str, str]) -> dict[str, Any]:
    return {"benchmark": name,
            "points": [{"variant": r.variant, **r.point.model_dump(by_alias=True, mode="json", exclude={"output_digests"}),
                        "equalToBaseline": r.equal, "speedup": r.speedup} for r in rs],
            "recommendation": reco, "files": files}


def parse_json_text(text: str, source: str) -> Any:
    from .core.safejson import loads

    try:
        return loads(text, max_depth=32)
    except ValueError as e:
        raise ReportError(f"{source} is not valid JSON: {e}") from None


__all__ = ["ReportError", "Row", "load_results", "given_equality", "rows", "recommendation", "format_table", "format_recommendation",
           "write_report", "render_html", "report_doc", "parse_json_text"]
