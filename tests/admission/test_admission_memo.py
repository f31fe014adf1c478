"""What a review costs the webhook (issue 23 item 7): its ConfigMap documents are read-only for the checker's memos
(core/memo.py), yet a ConfigMap edited in place (a new resourceVersion) is checked with its new content, never an
old answer; and a review leaves no garbage cycle behind."""

from __future__ import annotations

import asyncio
import copy

from admission_helpers import DRAFTER_CM, QWEN, TARGET_CM, TEST_POLICY, FakeResolver, configmap, example_configs, \
    example_cr, review_request, with_spec
from specdeploy.controller import admission
from specdeploy.controller.webhooks import OperatorConfigs
from specdeploy.core import memo


def _review(lookup, cr) -> dict:
    return asyncio.run(admission.areview(review_request(cr), configs_lookup=lookup, policy=TEST_POLICY))["response"]


def test_cached_documents_are_read_only_and_an_edited_configmap_is_checked_afresh():
    resolver = FakeResolver()
    t, d = example_configs(QWEN)
    resolver.add(configmap(TARGET_CM, t))
    drafter_cm = configmap(DRAFTER_CM, d)
    resolver.add(drafter_cm)
    lookup = OperatorConfigs(None, resolver)
    for i in range(3):  # new options each time (the memoized per-option answers do not hit): the parsed views do
        r = _review(lookup, with_spec(example_cr(QWEN), **{"engine.extraArgs": [f"--max-num-seqs={i + 1}"]}))
        assert r["allowed"] is True, r
    assert all(memo.is_read_only(doc) for doc in lookup._parsed.values()) and len(lookup._parsed) == 2

    broken = copy.deepcopy(d)
    broken["dflash_config"]["target_layer_ids"][4] = 64  # the target has 64 layers
    edited = configmap(DRAFTER_CM, broken)
    edited["metadata"]["uid"] = drafter_cm["metadata"]["uid"]
    edited["metadata"]["resourceVersion"] = "2"
    resolver.add(edited)
    for i in range(2):  # the same options as an admitted review above, and new ones
        r = _review(lookup, with_spec(example_cr(QWEN), **{"engine.extraArgs": [f"--max-num-seqs={i + 1}"]}))
        assert r["allowed"] is False and "layer id 64 is outside the target's 64 layers" in r["status"]["message"]


def test_a_review_whose_configs_are_unknown_leaves_no_garbage_cycle():
    """The lookup's ConfigsUnavailable is kept without its traceback: its frames (the parsed spec, the request) would
    otherwise form a cycle with it, and every object-level review would leave work for the garbage collector."""
    import gc

    lookup = OperatorConfigs(None, FakeResolver())  # knows no ConfigMap: every review takes the object-level path
    cr = example_cr(QWEN)
    _review(lookup, cr)
    gc.collect()
    gc.disable()
    try:
        for i in range(3):
            r = _review(lookup, with_spec(cr, **{"engine.extraArgs": [f"--max-num-seqs={i + 1}"]}))
            assert r["allowed"] is True and any("not known at admission" in w for w in r["warnings"]), r
            assert any("is not in the watch cache" in w for w in r["warnings"])
        assert gc.collect() == 0
    finally:
        gc.enable()
