"""Fixtures of the dev-cluster tests (tests/dev)."""

from __future__ import annotations

import json
from typing import Iterator

import pytest


@pytest.fixture
def kubelet_log_on_failure(request, cluster) -> Iterator[None]:
    """On a failed test: the tail of the module's kubelet log (``cluster.kubelet_log``) and every pod's
    status. A module that starts a dev kubelet uses it with ``pytest.mark.usefixtures``."""
    before = request.session.testsfailed
    yield
    if request.session.testsfailed > before:
        print("== kubelet log (tail)\n" + "\n".join(cluster.kubelet_log.read_text().splitlines()[-60:]))
        for p in cluster.get_json("pods")["items"]:
            st = p.get("status") or {}
            print(f"== pod {p['metadata']['name']}: {st.get('phase')} "
                  + json.dumps((st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or [])))
