#!/usr/bin/env bash
# Record the engine facts (what each release's own code does with DFlash drafters) into
# operator/specdeploy/data/facts/<engine>-<version>.json. Opt-in: downloads each release's
# wheel from PyPI (`pip download --no-deps`; nothing is installed), unpacks its Python
# sources and runs e2e/flagdrift/engine_facts.py on them.
#
# usage: e2e/flagdrift/record-facts.sh [ENGINE==VERSION ...]
#   default: every release the engine table covers, plus the last release before DFlash
# env: FACTS_CACHE (default ~/.cache/specdeploy/wheels): where wheels and sources are kept
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$ROOT/operator/specdeploy/data/facts"
CACHE="${FACTS_CACHE:-$HOME/.cache/specdeploy/wheels}"
PY="${PYTHON:-python3}"

if [ $# -eq 0 ]; then
  set -- sglang==0.5.10 \
    sglang==0.5.11 sglang==0.5.12 sglang==0.5.13 sglang==0.5.14 sglang==0.5.15 sglang==0.5.16 \
    sglang==0.5.17 sglang==0.5.18 sglang==0.5.19 sglang==0.5.20 sglang==0.5.21 sglang==0.5.22 sglang==0.5.23 \
    vllm==0.19.1 \
    vllm==0.20.0 vllm==0.20.1 vllm==0.20.2 vllm==0.21.0 vllm==0.22.0 vllm==0.22.1 vllm==0.23.0 vllm==0.24.0 \
    vllm==0.25.0 vllm==0.25.1 vllm==0.26.0 vllm==0.27.0 vllm==0.27.1 vllm==0.28.0 vllm==0.29.0 vllm==0.30.0 \
    vllm==0.31.0 vllm==0.32.0 vllm==0.33.0
fi

mkdir -p "$CACHE" "$OUT"
rc=0
for req in "$@"; do
  engine="${req%%==*}"; version="${req#*==}"
  case "$engine" in sglang|vllm) ;; *) echo "record-facts: unknown engine in $req" >&2; exit 2 ;; esac
  src="$CACHE/src/$engine-$version"
  if [ ! -d "$src/$engine" ]; then
    whl_dir="$CACHE/$engine-$version"
    mkdir -p "$whl_dir"
    if ! ls "$whl_dir"/*.whl >/dev/null 2>&1; then
      echo "record-facts: downloading $req"
      "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$whl_dir" "$req" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) || { echo "record-facts: no wheel for $req" >&2; rc=1; continue; }
    fi
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
  "$PY" "$HERE/engine_facts.py" --engine "$engine" --version "$version" --src "$src" --out "$OUT/$engine-$version.json"
  echo "record-facts: $engine $version -> ${OUT#"$ROOT"/}/$engine-$version.json"
done
exit "$rc"
