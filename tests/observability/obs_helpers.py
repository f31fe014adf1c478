"""Helpers for tests/observability (no conftest here: tests/conftest.py stays the only one)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

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
    return [sys.executable, "-m", "specdeploy.acceptance_cli", "acceptance"]


def run_acceptance(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*acceptance_argv(), *args], input=stdin, capture_output=True, text=True, cwd=ROOT,
                          env=env(), timeout=120)
