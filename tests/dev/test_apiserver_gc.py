"""The embedded API server process tunes its garbage collector as the operator does (apiserver/server.py)."""
import gc

import pytest

from specdeploy_dev.apiserver import server


@pytest.fixture
def gc_state():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_settle_gc_freezes_and_raises_the_young_threshold(gc_state):
    gc.set_threshold(700, 10, 10)
    server.settle_gc()
    assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_freeze_count() > 0


def test_settle_gc_leaves_thresholds_someone_set(gc_state):
    gc.set_threshold(500, 5, 5)
    server.settle_gc()
    assert gc.get_threshold() == (500, 5, 5)
