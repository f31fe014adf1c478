"""Record the Prometheus series names an installed engine exports into its flag snapshot.

Run with the engine's own venv python (by run.sh, after the driver wrote the snapshot):
scans the engine package's source for string literals that are series names
(`"vllm:..."` / `"sglang:..."`, however the metric is declared) and stores the sorted
names under "metrics". The dashboards test checks every engine series it queries against
this list, so CI catches renamed metrics without installing the engines.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

# A whole string literal that is a series name: declared as name="vllm:..." or in tuples of
# (name, help) as vLLM's spec-decode metrics are. A superset of the exported names at worst.
PATTERN = {"vllm": re.compile(r"""["'](vllm:[a-zA-Z0-9_:]+)["']"""),
           "sglang": re.compile(r"""["'](sglang:[a-zA-Z0-9_:]+)["']""")}


def main(engine: str, snapshot: str) -> int:
    spec = importlib.util.find_spec(engine)
    if spec is None or not spec.submodule_search_locations:
        print(f"metric_names: {engine} is not importable here", file=sys.stderr)
        return 1
    root = Path(list(spec.submodule_search_locations)[0])
    names: set[str] = set()
    for path in root.rglob("*.py"):
        try:
            names.update(PATTERN[engine].findall(path.read_text(errors="replace")))
        except OSError:
            continue
    snap_path = Path(snapshot)
    doc = json.loads(snap_path.read_text())
    doc["metrics"] = sorted(names)
    snap_path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"metric_names: {len(names)} {engine} series recorded in {snap_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
