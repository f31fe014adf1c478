#!/usr/bin/env bash
# Mutation testing of the security rules (issue 24 item 8): mutmut over core/policy.py and
# controller/ownership.py, against their fast unit tests. Slow (minutes): not part of .ci/test.
#
#   tools/mutation.sh [WORKDIR]        # default WORKDIR: a new temporary directory
#
# mutmut 3 imports the mutated copy from WORKDIR/mutants/src, so the package is staged under
# src/ there (the repository keeps it under operator/). Needs the test extra (mutmut).
# Prints mutmut's results; every surviving mutant is listed with why it is equivalent in
# docs/concepts/security.md ("Mutation testing"); a new survivor needs a test or an entry there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
work=${1:-$(mktemp -d -t specdeploy-mutation.XXXXXX)}
mkdir -p "$work/src" "$work/tests"
rm -rf "$work/src/specdeploy" "$work/tests" "$work/mutants"
cp -r "$root/operator/specdeploy" "$work/src/specdeploy"
mkdir -p "$work/tests/unit" "$work/tests/controller"
cp "$root"/tests/unit/{test_policy.py,test_policy_code.py} "$work/tests/unit/"
cp "$root"/tests/controller/{test_ownership.py,test_ownership_lost.py} "$work/tests/controller/"
cat > "$work/pyproject.toml" <<'TOML'
[tool.mutmut]
source_paths = ["src/specdeploy"]
only_mutate = ["*core/policy.py", "*controller/ownership.py"]
# the tests that start a subprocess would run the repository's code, not the mutant: left out
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "--rootdir", ".", "--import-mode=importlib",
                       "-k", "not render_applies and not refresh_command"]
pytest_add_cli_args_test_selection = ["tests/unit/test_policy.py", "tests/unit/test_policy_code.py",
                                      "tests/controller/test_ownership.py",
                                      "tests/controller/test_ownership_lost.py"]
TOML
cd "$work"
# the unit tests import their helpers as top-level modules (test_policy), as pytest's rootdir conftest does
export PYTHONPATH="$work/tests/unit${PYTHONPATH:+:$PYTHONPATH}"
"$py" -m mutmut run --max-children "${MUTMUT_CHILDREN:-2}" || true
"$py" -m mutmut results --all true 2>/dev/null || "$py" -m mutmut results
echo "workdir: $work (mutmut show NAME there for a mutant's diff)"
