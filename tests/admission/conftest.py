"""Fixtures of the admission tests (helpers: admission_helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def client(server):
    """An HTTPS client of the module's webhook ``server`` (admission_helpers.ServerThread), one per test."""
    c = server.client()
    yield c
    c.close()
