"""Helpers for tests/observability (test modules import them explicitly)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from specdeploy_dev import procs

ROOT = Path(__file__).resolve().parents[2]


def vllm_scrape(drafts: float, accepted: float, draft_tokens: float | None = None, per_pos: list[float] | None = None,
                engine: str = "0", model: str = "Qwen/Qwen3-8B", created: bool = True, total_suffix: bool = True) -> str:
    """A vLLM v1 exposition as prometheus_client writes it (HELP/TYPE, `_total`, `_created`)."""
    lab = f'engine="{engine}",model_name="{model}"'
    sfx = "_total" if total_suffix else ""
    out = []
    series = [("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts),
              ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
               draft_tokens if draft_tokens is not None else drafts * 15),
              ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted)]
    for base, doc, v in series:
        out += [f"# HELP {base}{sfx} {doc}", f"# TYPE {base}{sfx} counter", f"{base}{sfx}{{{lab}}} {float(v)}"]
        if created:
            out += [f"# HELP {base}_created {doc}", f"# TYPE {base}_created gauge",
                    f"{base}_created{{{lab}}} 1.7563e+09"]
    if per_pos:
        base = "vllm:spec_decode_num_accepted_tokens_per_pos"
        out += [f"# HELP {base}{sfx} Accepted tokens per draft position.", f"# TYPE {base}{sfx} counter"]
        for k, v in enumerate(per_pos):
            out.append(f'{base}{sfx}{{{lab},position="{k}"}} {float(v)}')
            if created:
                out.append(f'{base}_created{{{lab},position="{k}"}} 1.7563e+09')
    return "\n".join(out) + "\n"


def sglang_scrape(values: list[tuple[dict, float, float]], model: str = "Qwen/Qwen3-8B") -> str:
    """SGLang gauges; values: (extra labels, accept_length, accept_rate) per series."""
    out = ["# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
           "# TYPE sglang:spec_accept_length gauge"]
    rate_lines = ["# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.",
                  "# TYPE sglang:spec_accept_rate gauge"]
    for extra, length, rate in values:
        labels = {"engine_type": "unified", "model_name": model, "pp_rank": "0", "tp_rank": "0", **extra}
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        out.append(f"sglang:spec_accept_length{{{lab}}} {length}")
        rate_lines.append(f"sglang:spec_accept_rate{{{lab}}} {rate}")
    return "\n".join(out + rate_lines) + "\n"


# ----------------------------------------------------------------- promtool


def promtool() -> str:
    """Path of promtool; installs Debian's prometheus package via .ci/install-prometheus if missing."""
    exe = shutil.which("promtool")
    if exe:
        return exe
    subprocess.run([str(ROOT / ".ci" / "install-prometheus")], check=True, capture_output=True, timeout=900)
    exe = shutil.which("promtool")
    assert exe, "promtool is not installed (run .ci/install-prometheus)"
    return exe


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


_LABEL_T = re.compile(r"\{\{ \$labels\.([a-zA-Z_][a-zA-Z0-9_]*) \}\}")
_VALUE_T = re.compile(r"\{\{ \$value \| printf \"%\.(\d)f\" \}\}")


def expand(template: str, labels: dict, value: float | None = None) -> str:
    """The two Go-template forms the rules use: {{ $labels.x }} and {{ $value | printf "%.Nf" }}."""
    s = _LABEL_T.sub(lambda m: labels.get(m.group(1), ""), template)
    if value is not None:
        s = _VALUE_T.sub(lambda m: f"{value:.{m.group(1)}f}", s)
    assert "{{" not in s, s
    return s


def alert_rule(groups: list[dict], name: str) -> dict:
    for g in groups:
        for r in g["rules"]:
            if r.get("alert") == name:
                return r
    raise KeyError(name)


def expected_alert(groups: list[dict], name: str, labels: dict, value: float | None = None) -> dict:
    """An exp_alerts entry: the rule's labels merged over the series' labels, annotations expanded."""
    rule = alert_rule(groups, name)
    all_labels = {**labels, **rule.get("labels", {})}
    return {"exp_labels": all_labels,
            "exp_annotations": {k: expand(v, all_labels, value) for k, v in rule.get("annotations", {}).items()}}


def write_yaml(path: Path, doc) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    return path


def python() -> str:
    return sys.executable


def specdeploy_exe() -> Path:
    return Path(sys.executable).parent / "specdeploy"


def env() -> dict:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def acceptance_argv() -> list[str]:
    """`specdeploy acceptance` once cli.py wires it; until then the module's own __main__
    (the same add_parser/cmd_acceptance, so the same behaviour)."""
    try:
        from specdeploy.cli import build_parser

        parser = build_parser()
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        if "acceptance" in sub.choices:
            return [str(specdeploy_exe()), "acceptance"]
    except Exception:  # noqa: BLE001 - cli.py mid-edit by its owner: fall back
        pass
    return [sys.executable, "-m", "specdeploy.cli", "acceptance"]


def run_acceptance(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*acceptance_argv(), *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          env=env(), timeout=120)


# ----------------------------------------------------------------- Prometheus and Grafana dashboards


def prometheus_exe() -> str:
    """Path of the prometheus server binary (same Debian package as promtool)."""
    promtool()
    exe = shutil.which("prometheus") or "/usr/bin/prometheus"
    assert os.access(exe, os.X_OK), "prometheus is not installed (run .ci/install-prometheus)"
    return exe


GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}
_VAR = re.compile(r"\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<sel>.*),\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.S)


def variables_used(text: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _VAR.finditer(text)}


def grafana_regex(values: list[str]) -> str:
    """How Grafana's Prometheus data source writes a multi-value (or All) variable inside
    `=~"..."`: each value regex-escaped, joined as (a|b); one value as it is, escaped."""
    esc = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return esc[0] if len(esc) == 1 else "(" + "|".join(esc) + ")"


def substitute(text: str, values: dict[str, str], rate_interval: str = "1m") -> str:
    """Expand $var / ${var} as Grafana does before sending the query (builtins included)."""
    builtins = {"__rate_interval": rate_interval, "__interval": "15s", "__range": "1h", "__interval_ms": "15000",
                "__range_s": "3600"}

    def rep(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in builtins:
            return builtins[name]
        return values[name]

    return _VAR.sub(rep, text)


def label_values_query(query: str) -> tuple[str, str]:
    """label_values(<selector>, <label>) -> (selector, label)."""
    m = _LABEL_VALUES.match(query)
    assert m, f"not a label_values() variable query: {query}"
    return m.group("sel"), m.group("label")


def variable_query(var: dict) -> str:
    q = var["query"]
    return q["query"] if isinstance(q, dict) else q


def annotation_exprs(dashboard: dict) -> list[dict]:
    """The dashboard's Prometheus annotation queries (each with its ``expr``)."""
    return [a for a in dashboard.get("annotations", {}).get("list", []) if a.get("expr")]


def panel_exprs(dashboard: dict) -> list[tuple[dict, dict]]:
    """(panel, target) for every Prometheus target of every panel (rows' panels included)."""
    from specdeploy.observability.dashboards import panels_of

    return [(p, t) for p in panels_of(dashboard) for t in p.get("targets", [])]


OPERATOR_EXPORTER = r"""
import json, sys, time
from prometheus_client import start_http_server
from specdeploy.controller import metrics as m

# the acceptance monitor's gauges: [namespace, deployment, engine, drafter, tau, baseline, fraction]
for ns, dep, engine, drafter, tau, base, fraction in json.loads(sys.argv[1] if len(sys.argv) > 1 else "[]"):
    m.ACCEPTANCE_LENGTH.labels(ns, dep, engine, drafter).set(tau)
    m.ACCEPTANCE_BASELINE.labels(ns, dep, engine, drafter).set(base)
    m.ACCEPTANCE_REGRESSION_FRACTION.labels(ns, dep, engine, drafter).set(fraction)

m.RECONCILES.labels(result="success").inc(20)
m.RECONCILES.labels(result="error").inc(2)
m.ERRORS.labels(reason="DrafterCheckFailed").inc(2)
m.API_WRITES.labels(verb="patch", kind="Deployment").inc(4)
m.API_WRITES.labels(verb="create", kind="PodMonitor").inc(1)
m.CHECK_FAILURES.labels(code="DF001").inc(1)
m.QUEUE_DEPTH.set(1)
m.MANAGED.set(3)
m.LEADER.set(1)
m.LEADER_TRANSITIONS.inc()
for s in (0.004, 0.02, 0.02, 0.15):
    m.RECONCILE_SECONDS.observe(s)
# the rollout series: [namespace, deployment] of a canary under analysis (status.rollout as the reconciler has it)
rollouts = json.loads(sys.argv[2] if len(sys.argv) > 2 else "[]")
for ns, dep in rollouts:
    m.export_rollout(ns, dep, {"phase": "Analyzing", "analysis": [
        {"track": "stable", "pods": 2, "drafts": 1843, "tau": 3.72, "tokensPerSecondPerRequest": 11.2, "errorRate": 0.0},
        {"track": "canary", "pods": 1, "drafts": 210, "tau": 1.45, "tokensPerSecondPerRequest": 6.5, "errorRate": 0.0}]})
server, _thread = start_http_server(0, addr="127.0.0.1", registry=m.REGISTRY)
print(server.server_port, flush=True)
while True:  # an operator at work: every series keeps moving, so every rate() has data
    m.RECONCILES.labels(result="success").inc()
    m.RECONCILE_SECONDS.observe(0.02)
    m.API_WRITES.labels(verb="patch", kind="Deployment").inc()
    for ns, dep in rollouts:  # decisions keep coming, so the annotations' increase() has some
        m.count_rollout_decision(ns, dep, "Rollback", "AcceptanceBelowStable")
        m.count_rollout_decision(ns, dep, "Promote", "Promoted")
    time.sleep(0.25)
"""


def start_operator_exporter(timeout_s: float = 30, acceptance: list[tuple] = (),
                            rollouts: list[tuple[str, str]] = ()) -> tuple[subprocess.Popen, int]:
    """The operator's real metrics registry (controller/metrics.py), populated and served
    on a free loopback port by a child process (its global counters stay out of this one).
    ``acceptance``: (namespace, deployment, engine, drafter, tau, baseline, fraction) rows of
    the acceptance monitor's gauges; ``rollouts``: (namespace, deployment) of canaries under analysis
    (controller/metrics.export_rollout, and decisions counted all along)."""
    import json
    import select

    proc = subprocess.Popen([sys.executable, "-c", OPERATOR_EXPORTER, json.dumps([list(r) for r in acceptance]),
                             json.dumps([list(r) for r in rollouts])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env(), start_new_session=True)
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline().strip() if ready else ""
    if not line.isdigit():
        proc.kill()
        _out, err = proc.communicate(timeout=10)
        raise AssertionError(f"operator metrics exporter did not start: {line!r} {err[-2000:]}")
    return proc, int(line)


def stop_process(proc: subprocess.Popen) -> None:
    procs.stop_process(proc, 10)
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
