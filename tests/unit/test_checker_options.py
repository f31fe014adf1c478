"""The spec -> checker mapping is written once (api/types.checker_options): the typed path and the
lenient path (a spec pydantic refused) read the same fields through the same function."""

from __future__ import annotations

import copy
import dataclasses

from specdeploy.api import types as T
from specdeploy.api.loose import loose
from specdeploy.api.validation import parse
from specdeploy.core.checker import Options

SPEC = {
    "engine": {"name": "sglang", "version": "0.5.23", "extraArgs": ["--mem-fraction-static", "0.8"], "maxModelLen": 8192},
    "target": {"model": "Qwen/Qwen3-8B", "trustRemoteCode": True},
    "drafter": {"model": "z-lab/Qwen3-8B-DFlash-b16"},
    "speculation": {"method": "ddtree", "blockSize": 8, "draftWindow": 2048, "draftAttentionBackend": "fa3",
                    "ddtree": {"budget": 32, "topk": 4}, "guard": {"maxConcurrency": 32}},
    "gpu": {"type": "h100", "count": 4},
    "nodes": 2,
    "checks": {"accept": ["DrafterContextTooShort"]},
}


# The method knobs are exclusive (each applies to its own methods): two more specs cover them.
SPEC_EAGLE = {**SPEC, "speculation": {"method": "eagle3", "eagle": {"steps": 4, "topk": 2, "draftTokens": 8}}}
SPEC_NGRAM = {**{k: v for k, v in SPEC.items() if k != "drafter"},
              "speculation": {"method": "ngram", "ngram": {"lookupMin": 2, "lookupMax": 4, "numSpeculativeTokens": 3}}}


def test_the_lenient_path_reads_a_valid_spec_as_the_typed_path_does():
    default = dataclasses.asdict(Options())
    left = set(default)
    for spec in (SPEC, SPEC_EAGLE, SPEC_NGRAM):
        typed = T.SpeculativeDeploymentSpec.model_validate(spec)
        assert T.checker_options(typed) == T.checker_options(copy.deepcopy(spec), lenient=True) == typed.options()
        got = dataclasses.asdict(typed.options())
        left &= {k for k in got if got[k] == default[k]}
    # every field of Options is read from the spec (none left at its default by all three specs)
    assert sorted(left) == []


def test_lenient_keeps_well_typed_values_the_schema_refuses():
    raw = copy.deepcopy(SPEC)
    raw["speculation"]["blockSize"] = 100  # le=16 refuses it; the checker says why in its words
    raw["gpu"]["count"] = "four"  # wrong type: the default
    raw["nodes"] = True  # a bool is not an int
    del raw["engine"]["version"]  # required, missing: None
    opts = T.checker_options(raw, lenient=True)
    assert (opts.block_size, opts.gpu_count, opts.nodes, opts.engine_version) == (100, 1, 1, None)
    assert opts.engine == "sglang" and opts.accept == ("DrafterContextTooShort",)


def test_lenient_on_what_is_not_a_spec():
    assert T.checker_options(None, lenient=True) is None
    assert T.checker_options(["x"], lenient=True) is None
    opts = T.checker_options({}, lenient=True)
    assert opts == Options(engine=None, engine_version=None, gpu=None, target_model=None, drafter_model=None)


def test_loose_builds_nested_models_and_keeps_out_of_set_literals():
    s = loose(T.SpeculativeDeploymentSpec, {"engine": {"name": "tgi"}, "speculation": {"ddtree": {"budget": "x"}}})
    assert s.engine.name == "tgi" and s.engine.version is None and s.engine.extra_args == []
    assert s.speculation.ddtree is not None and s.speculation.ddtree.budget is None
    assert s.speculation.method == "dflash" and s.gpu.count == 1


def test_the_checker_message_stands_for_a_refused_field():
    cr, problems = parse({"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment",
                          "metadata": {"name": "x"}, "spec": {**SPEC, "speculation": {"blockSize": 100}}})
    assert cr is None
    hit = [p for p in problems if p.path == "spec.speculation.blockSize"]
    assert len(hit) == 1 and hit[0].code != "FieldValueOutOfRange", hit  # the checker's code, not the schema's
