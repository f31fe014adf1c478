"""The operator process's collector settings (controller/webhooks.py)."""
import gc

import pytest

from specdeploy.controller.webhooks import GC_THRESHOLD, settle_gc


@pytest.fixture
def gc_state():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_settle_gc_freezes_start_up_and_raises_the_young_threshold(gc_state):
    gc.set_threshold(700, 10, 10)  # CPython's defaults
    settle_gc()
    assert gc.get_threshold() == GC_THRESHOLD and GC_THRESHOLD[0] > 700
    assert gc.get_freeze_count() > 0


def test_settle_gc_leaves_thresholds_someone_set(gc_state):
    gc.set_threshold(500, 5, 5)
    settle_gc()
    assert gc.get_threshold() == (500, 5, 5)
