#!/usr/bin/env bash
# Record the dynamic-import sites of the pinned engine releases, and the CLI flags whose values reach them, into
# operator/specdeploy/data/codesites/<engine>-<version>.json (e2e/flagdrift/code_sites.py). Opt-in: downloads each
# release's wheel from PyPI (`pip download --no-deps`; nothing is installed) into the cache record-facts.sh uses.
# Then `python -m specdeploy.core.codeflags --check` and tests/unit/test_policy_code.py tell which flags the new
# record derived and which cited sites are gone.
#
# usage: e2e/flagdrift/record-code-sites.sh [ENGINE==VERSION ...]   (default: the releases with a parser snapshot)
# env: FACTS_CACHE (default ~/.cache/specdeploy/wheels)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$ROOT/operator/specdeploy/data/codesites"
CACHE="${FACTS_CACHE:-$HOME/.cache/specdeploy/wheels}"
PY="${PYTHON:-python3}"

[ $# -gt 0 ] || set -- vllm==0.33.0 sglang==0.5.23

mkdir -p "$CACHE" "$OUT"
for req in "$@"; do
  engine="${req%%==*}"; version="${req#*==}"
  case "$engine" in sglang|vllm) ;; *) echo "record-code-sites: unknown engine in $req" >&2; exit 2 ;; esac
  src="$CACHE/src/$engine-$version"
  if [ ! -d "$src/$engine" ]; then
    whl_dir="$CACHE/$engine-$version"
    mkdir -p "$whl_dir"
    ls "$whl_dir"/*.whl >/dev/null 2>&1 || "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$whl_dir" "$req"
    mkdir -p "$src.part"
    "$PY" - "$whl_dir" "$src.part" "$engine" <<'PYEOF'
import glob, sys, zipfile
(whl,) = glob.glob(sys.argv[1] + "/*.whl")
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(sys.argv[3] + "/") and name.endswith(".py"):
            z.extract(name, sys.argv[2])
PYEOF
    rm -rf "$src"; mv "$src.part" "$src"
  fi
  "$PY" "$HERE/code_sites.py" --engine "$engine" --version "$version" --src "$src" --out "$OUT/$engine-$version.json"
done
