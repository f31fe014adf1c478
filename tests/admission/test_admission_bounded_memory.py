"""Issue 37 hole 3: distinct reviews against a 1 MiB drafter config keep the webhook's memory bounded.

Every review here is a new option set (its own 128 x 4 KiB extraArgs, the CRD's limits: ~0.5 MiB per Options
value, the key of four memos) against a drafter config.json padded to 1 MiB whose 150000 target_layer_ids are
4000 target_layer_ids all out of range (150000 such ids once made 150000 findings, ~60 MiB, kept per option
set). Each cache stays within its
entry and byte bounds, and what they hold together within the budget in docs/concepts/security.md. Counters
only: no RSS or timing assertion."""

from __future__ import annotations

import asyncio
import copy

from admission_helpers import DRAFTER_CM, QWEN, TARGET_CM, TEST_POLICY, FakeResolver, configmap, example_configs, \
    example_cr, review_request
from specdeploy.controller import admission
from specdeploy.controller.webhooks import OperatorConfigs
from specdeploy.core import memo
from specdeploy.core.findings import PER_CODE_MAX

REVIEWS = 300
BUDGET = 256 * memo.MiB  # every cache together (docs/concepts/security.md "Bounded memory")


OUT_OF_RANGE = 4000  # under modelconfig.LIST_MAX: each id is checked


def _one_mib_drafter() -> dict:
    _, d = example_configs(QWEN)
    d = copy.deepcopy(d)
    d["dflash_config"]["target_layer_ids"] = list(range(64, 64 + OUT_OF_RANGE))  # the target has 64 layers
    d["padding"] = {f"field-{i}": f"value-{i}" * 4 for i in range(20_000)}  # an extra field: not read, kept
    return d


def _cr(i: int) -> dict:
    cr = example_cr(QWEN)
    # distinct, the CRD's maximum count and length (a stray value: ExtraArgUnexpectedValue, quoted in its message)
    cr["spec"]["engine"]["extraArgs"] = [f"pad-{i}-{j}-{'x' * 4000}" for j in range(128)]
    return cr


def test_distinct_reviews_against_a_one_mib_drafter_stay_within_every_bound():
    t, d = example_configs(QWEN)
    resolver = FakeResolver()
    resolver.add(configmap(TARGET_CM, t))
    big = configmap(DRAFTER_CM, _one_mib_drafter())
    assert len(big["data"]["config.json"]) > 1 << 20
    resolver.add(big)
    lookup = OperatorConfigs(None, resolver)
    admission._PAIR_MEMO.clear()
    admission._OPTIONS_MEMO.clear()
    for i in range(REVIEWS):
        r = asyncio.run(admission.areview(review_request(_cr(i)), configs_lookup=lookup, policy=TEST_POLICY))["response"]
        assert r["allowed"] is False
        if i == 0:  # the first PER_CODE_MAX findings of the code, then one that counts the rest
            causes = [c["message"] for c in r["status"]["details"]["causes"] if "TargetLayerOutOfRange" in c["message"]
                      or "is outside the target's 64 layers" in c["message"]]
            assert len(causes) == PER_CODE_MAX + 1 and f"and {OUT_OF_RANGE - PER_CODE_MAX} more" in causes[-1], causes[-2:]
            assert all(len(c["message"]) <= 1024 for c in r["status"]["details"]["causes"])
    held = 0
    for cache in memo.caches():
        info = cache.info()
        assert info.currsize <= info.maxsize and info.nbytes <= info.max_bytes, cache.name
        held += info.nbytes
    # the option-keyed memos evicted by bytes long before their entry bounds, and what they hold, walked, is within
    # the bound too (their sizes are estimated without a walk: options_bytes, findings_bytes)
    for cache in (admission._PAIR_MEMO, admission._OPTIONS_MEMO, *(c for c in memo.caches()
                                                                   if c.name in ("checker.options", "checker.analyze"))):
        assert 0 < len(cache) < REVIEWS and cache.nbytes <= cache.max_bytes <= 16 * memo.MiB, cache.info()
        assert memo.approx_size(cache.items()) <= cache.max_bytes * 1.25, cache.name
    assert held <= BUDGET
    assert sum(c.max_bytes for c in memo.caches()) <= BUDGET  # the bounds themselves fit the budget
