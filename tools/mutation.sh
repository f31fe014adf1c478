#!/usr/bin/env bash
# Mutation testing of the rules (issue 24 item 8, issue 43): mutmut over the modules of each group, against
# the group's fast tests. Slow (minutes to hours): not part of .ci/test.
#
#   tools/mutation.sh [-g GROUP[,GROUP...]] [-b SECONDS] [-f FILE_GLOB] [WORKDIR]
#
#   -g  groups (default policy): policy (core/policy.py, controller/ownership.py), checker (core/checker/
#       eagle3.py, mtp.py, fit.py), rollout (core/rollout/canary.py, controller/plan.py), executor
#       (controller/executor.py), memory (core/memory.py), or all
#   -f  only the group's files matching this glob (e.g. '*checker/mtp.py'): a smaller run
#   -b  time budget in seconds (default 0: none); the run is interrupted then and the results so far are
#       listed (the mutants not reached show as "not checked")
#   WORKDIR  default: a new temporary directory; an existing one resumes where its last run stopped
#
# mutmut 3 imports the mutated copy from WORKDIR/mutants/src, so the package is staged under src/ there (the
# repository keeps it under operator/). Needs the test extra (mutmut). MUTMUT_CHILDREN (default 1 here: the
# machine is shared) sets mutmut's parallel children; run it under `nice`. Every surviving mutant is listed with
# why it is equivalent in docs/concepts/security.md ("Mutation testing"); a new survivor needs a test or an
# entry there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
groups=policy budget=0 only=""
while getopts "g:b:f:" opt; do
  case $opt in
    g) groups=$OPTARG ;;
    b) budget=$OPTARG ;;
    f) only=$OPTARG ;;
    *) echo "usage: $0 [-g GROUP,...] [-b SECONDS] [-f FILE_GLOB] [WORKDIR]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $groups == all ]] && groups=policy,checker,rollout,executor,memory

declare -A SRC TESTS
SRC[policy]="core/policy.py controller/ownership.py"
TESTS[policy]="unit/test_policy.py unit/test_policy_code.py controller/test_ownership.py controller/test_ownership_lost.py"
SRC[checker]="core/checker/eagle3.py core/checker/mtp.py core/checker/fit.py"
TESTS[checker]="unit/test_method_gates.py unit/test_gate_pins.py unit/test_memory.py unit/test_memory_pins.py unit/test_checker_rules.py"
SRC[rollout]="core/rollout/canary.py controller/plan.py"
TESTS[rollout]="unit/test_rollout.py controller/test_rollout_plan.py controller/test_plan.py"
SRC[executor]="controller/executor.py"
TESTS[executor]="controller/test_executor_ownership.py controller/test_controller_units.py"
SRC[memory]="core/memory.py"
TESTS[memory]="unit/test_memory.py unit/test_memory_pins.py"

mutate=() selection=()
for g in ${groups//,/ }; do
  [[ -n ${SRC[$g]:-} ]] || { echo "unknown group $g (policy, checker, rollout, executor, memory, all)" >&2; exit 2; }
  for f in ${SRC[$g]}; do
    # shellcheck disable=SC2053  # a glob match on purpose
    [[ -z $only || $f == $only || */$f == $only ]] && mutate+=("\"*$f\"")
  done
  for t in ${TESTS[$g]}; do selection+=("\"tests/$t\""); done
done
((${#mutate[@]})) || { echo "no file of $groups matches -f $only" >&2; exit 2; }
join() { local IFS=,; echo "$*"; }

work=${1:-$(mktemp -d -t specdeploy-mutation.XXXXXX)}
mkdir -p "$work/src"
rm -rf "$work/src/specdeploy" "$work/tests" "$work/examples"
cp -r "$root/operator/specdeploy" "$work/src/specdeploy"
# the test modules with their helpers (test modules import each other's helpers by name), fixtures, examples
mkdir -p "$work/tests"
cp -r "$root"/tests/{conftest.py,testkit.py,fixtures,unit,controller,admission} "$work/tests/"
cp -r "$root/examples" "$work/examples"
cat > "$work/pyproject.toml" <<TOML
[tool.mutmut]
source_paths = ["src/specdeploy"]
only_mutate = [$(join "${mutate[@]}")]
# the tests that start a subprocess would run the repository's code, not the mutant: left out
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--rootdir", ".", "--import-mode=importlib",
                       "-m", "not serial", "-k", "not render_applies and not refresh_command"]
pytest_add_cli_args_test_selection = [$(join "${selection[@]}")]
TOML
cd "$work"
# the tests import their helpers as top-level modules (testkit, test_policy, ...), as pytest's rootdir conftest
# does; the dev and runtime packages (not mutated) from the repository
export PYTHONPATH="$work/tests/unit:$work/tests/controller:$work/tests/admission:$work/tests:$root/operator/dev:$root/runtime${PYTHONPATH:+:$PYTHONPATH}"
echo "mutating: ${mutate[*]}; tests: ${selection[*]}; budget: ${budget}s; workdir: $work"
if [[ $budget -gt 0 ]]; then
  timeout --signal=INT --kill-after=60 "$budget" "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" || true
else
  "$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-1}" || true
fi
"$py" -m mutmut results --all true 2>/dev/null || "$py" -m mutmut results
echo "workdir: $work (mutmut show NAME there for a mutant's diff)"
