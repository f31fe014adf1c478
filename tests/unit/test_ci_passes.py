"""The run rules .ci/test relies on: the serial mark and the opt-in skips (conftest.py at the root),
.ci/check-tools failing on a missing tool, and .ci/test-summary's skip list."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from pytest import mark as pytest_mark, raises as pytest_raises

from specdeploy_dev.harness import pod_ip_args, pod_ip_range, worker_env
from testkit import ROOT

SERIAL_MODULES = ["e2e/test_e2e_guard_vllm_cpu.py", "tests/controller/test_leader.py"]  # opt-in; marked
SHARED_MODULE = "tests/unit/test_engine_facts.py"


def pytest(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("SPECDEPLOY_E2E_VLLM_CPU", "SPECDEPLOY_E2E_IMAGES")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env={**environ, **(env or {})})


def collected(p: subprocess.CompletedProcess) -> set[str]:
    return {line.split("::")[0] for line in p.stdout.splitlines() if "::" in line}


def test_serial_pass_takes_the_opt_in_and_marked_modules_and_the_parallel_pass_the_rest():
    serial = pytest("--collect-only", "-q", "-m", "serial", *SERIAL_MODULES, SHARED_MODULE)
    assert collected(serial) == set(SERIAL_MODULES), serial.stdout[-2000:]
    parallel = pytest("--collect-only", "-q", "-m", "not serial", *SERIAL_MODULES, SHARED_MODULE)
    assert collected(parallel) == {SHARED_MODULE}, parallel.stdout[-2000:]


def test_alone_modules_leave_the_two_worker_serial_pass_for_the_last_one():
    serial = pytest("--collect-only", "-q", "-m", "serial and not alone", *SERIAL_MODULES, SHARED_MODULE)
    assert collected(serial) == {"e2e/test_e2e_guard_vllm_cpu.py"}, serial.stdout[-2000:]
    alone = pytest("--collect-only", "-q", "-m", "alone", *SERIAL_MODULES, SHARED_MODULE)
    assert collected(alone) == {"tests/controller/test_leader.py"}, alone.stdout[-2000:]


def test_the_serial_pass_starts_with_the_longest_module():
    # collected in this order, run longest first (conftest.LONGEST_FIRST); the shared module keeps its place
    p = pytest("--collect-only", "-q", "e2e/test_e2e_guard_vllm_cpu.py", "e2e/test_e2e_rollout_vllm_cpu.py", SHARED_MODULE)
    order = list(dict.fromkeys(line.split("::")[0] for line in p.stdout.splitlines() if "::" in line))
    assert order == ["e2e/test_e2e_rollout_vllm_cpu.py", "e2e/test_e2e_guard_vllm_cpu.py", SHARED_MODULE], p.stdout[-2000:]


def test_the_parallel_pass_starts_with_the_longest_module_too():
    # a module of one slow property test is not left for last (xdist alone sends the modules with most tests first)
    p = pytest("--collect-only", "-q", "-m", "not serial", SHARED_MODULE, "tests/controller/test_status_fuzz.py",
               "tests/controller/test_ssa_property.py")
    order = list(dict.fromkeys(line.split("::")[0] for line in p.stdout.splitlines() if "::" in line))
    assert order == ["tests/controller/test_ssa_property.py", "tests/controller/test_status_fuzz.py", SHARED_MODULE], \
        p.stdout[-2000:]


def test_both_worker_passes_keep_the_collection_order():
    passes = [line for line in (ROOT / ".ci" / "test").read_text().splitlines()
              if line.startswith("run_pass ") and " -n " in line]
    assert [line.split()[1] for line in passes] == ["parallel", "serial"]
    assert all("--dist loadfile --no-loadscope-reorder" in line for line in passes), passes


@pytest_mark.parametrize("worker, count, cores, want", [
    ("gw0", 2, 2, {"SPECDEPLOY_E2E_IP_RANGE": "2-127", "OMP_NUM_THREADS": "1"}),
    ("gw1", 2, 2, {"SPECDEPLOY_E2E_IP_RANGE": "128-253", "OMP_NUM_THREADS": "1"}),
    ("gw3", 4, 16, {"SPECDEPLOY_E2E_IP_RANGE": "191-253", "OMP_NUM_THREADS": "4"}),
    ("gw0", 3, 2, {"SPECDEPLOY_E2E_IP_RANGE": "2-85", "OMP_NUM_THREADS": "1"}),
    ("gw0", 1, 2, {}),   # one worker: the machine's defaults
    ("", 2, 2, {}),      # not under xdist
    ("master", 2, 2, {}),
])
def test_each_worker_gets_its_own_pod_addresses_and_share_of_the_cores(worker, count, cores, want):
    assert worker_env(worker, count, cores) == want


def test_worker_pod_addresses_never_overlap():
    for count in range(2, 9):
        seen: set[int] = set()
        for i in range(count):
            first, last = map(int, worker_env(f"gw{i}", count, 2)["SPECDEPLOY_E2E_IP_RANGE"].split("-"))
            ips = set(range(first, last + 1))
            assert 2 <= first <= last <= 254 and not ips & seen, (count, i)
            seen |= ips


def test_pod_ip_range_reads_the_workers_share_and_refuses_a_bad_one(monkeypatch):
    monkeypatch.delenv("SPECDEPLOY_E2E_IP_RANGE", raising=False)
    assert pod_ip_range() == (2, 254)
    monkeypatch.setenv("SPECDEPLOY_E2E_IP_RANGE", "128-253")
    assert pod_ip_range() == (128, 253)
    assert pod_ip_args(last=240) == ["--ip-range", "128-240"]
    monkeypatch.setenv("SPECDEPLOY_E2E_IP_RANGE", "1-300")
    with pytest_raises(ValueError, match="SPECDEPLOY_E2E_IP_RANGE=1-300: expected FIRST-LAST"):
        pod_ip_range()


def test_an_opt_in_module_skips_without_its_variable_and_names_it(tmp_path):
    p = pytest("-q", "-rs", "e2e/test_e2e_guard_vllm_cpu.py", f"--junitxml={tmp_path / 'r.xml'}")
    assert p.returncode == 0 and "3 skipped" in p.stdout, p.stdout[-2000:]
    assert "opt-in: SPECDEPLOY_E2E_VLLM_CPU=1" in p.stdout
    # .ci/test-summary ends a run with every skipped test and its reason
    s = subprocess.run([sys.executable, str(ROOT / ".ci" / "test-summary"), f"serial={tmp_path / 'r.xml'}"],
                       capture_output=True, text=True, timeout=60)
    assert s.returncode == 0 and "serial: 3 skipped" in s.stdout, s.stdout
    assert s.stdout.rstrip().splitlines()[-4] == "  3 x opt-in: SPECDEPLOY_E2E_VLLM_CPU=1 (bash .ci/test sets it)", s.stdout


def test_check_tools_fails_naming_what_is_missing(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "check-tools", tmp_path / ".ci" / "check-tools")
    p = subprocess.run(["bash", str(tmp_path / ".ci" / "check-tools")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    for tool in ("helm 3 (bash .ci/install-tools", "hadolint", "checkov (bash .ci/install-checkov)", "vllm (CPU build)"):
        assert tool in p.stderr, p.stderr


def test_parallel_workers_run_a_module_on_one_worker():
    modules = ["tests/dev/test_procs.py", "tests/unit/test_layer_ids.py"]
    p = pytest("-n", "2", "--dist", "loadfile", "-v", *modules)  # as .ci/test runs the parallel pass
    assert p.returncode == 0, p.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for line in p.stdout.splitlines():  # "[gw1] [ 50%] PASSED tests/dev/test_procs.py::test_x"
        if line.startswith("[gw") and " PASSED " in line:
            workers.setdefault(line.split(" PASSED ")[1].split("::")[0], set()).add(line.split("]")[0])
    assert set(workers) == set(modules) and all(len(w) == 1 for w in workers.values()), workers
