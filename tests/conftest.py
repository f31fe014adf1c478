"""Fixtures of the tests under tests/ (the helpers are in testkit.py: ``from testkit import ...``)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def tmp_config(tmp_path):
    """Write a config dict to a file and return its path."""

    def write(doc, name="config.json") -> str:
        p = tmp_path / name
        p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
        return str(p)

    return write
