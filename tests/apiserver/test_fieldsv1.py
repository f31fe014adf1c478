"""fieldsV1 encoding (ssa.py): the shared trees are exactly what building each set gives."""

from __future__ import annotations

import json
import random

from specdeploy_dev.apiserver import ssa


def test_sets_of_one_shape_share_their_subtrees_and_encode_exactly():
    spec = {("f:spec",) + tuple(f"f:k{i}_{j}" for j in range(d)) for i in range(20) for d in range(1, 4)}
    spec |= {("f:spec", "f:containers", 'k:{"name":"engine"}'), ("f:spec", "f:containers", 'k:{"name":"engine"}', "f:image")}

    def child(uid: str) -> frozenset:
        ref = f'k:{{"uid":"{uid}"}}'
        return frozenset(spec | {("f:metadata", "f:labels", "f:app"), ("f:metadata", "f:ownerReferences", ref),
                                 ("f:metadata", "f:ownerReferences", ref, "f:name")})

    a, b = ssa._encoded(child("u-1")), ssa._encoded(child("u-2"))
    for uid, tree in (("u-1", a), ("u-2", b)):
        assert json.dumps(tree) == json.dumps(ssa.to_fields_v1(child(uid)))  # keys in order too
        assert ssa.from_fields_v1(tree) == set(child(uid))
    assert a["f:spec"] is b["f:spec"] and a["f:metadata"] != b["f:metadata"]


def test_built_trees_equal_to_fields_v1_on_random_sets():
    rnd = random.Random(7)
    pes = ["f:a", "f:b", "f:metadata", "f:spec", 'k:{"name":"x"}', "v:1", "i:0", "f:c"]
    for _ in range(3000):
        paths = frozenset(tuple(rnd.choice(pes) for _ in range(rnd.randint(1, 5))) for _ in range(rnd.randint(1, 40)))
        assert json.dumps(ssa._build(paths)) == json.dumps(ssa.to_fields_v1(paths))
