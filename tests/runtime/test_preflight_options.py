"""The preflight re-runs the check with the options the operator checked (engine config ``checkerOptions``,
written by api/types.checker_options): every spec field the checker reads reaches the pod, none is re-mapped."""

from __future__ import annotations

import dataclasses

from runtime_helpers import make_cr, rendered_pod
from specdeploy.core.checker import Options
from specdeploy.core.engineconfig import EngineConfig


def test_the_engine_config_carries_the_specs_checker_options(tmp_path):
    spec = {"checks": {"accept": ["DrafterContextTooShort"]}, "speculation": {"draftWindow": "off"}}
    pod = rendered_pod(tmp_path, "vllm", **spec)
    ec = EngineConfig.model_validate(pod.engine_config)
    want = make_cr("vllm", "0.33.0", **spec).spec.options()
    assert ec.checker_options == want and isinstance(ec.checker_options, Options)
    assert (want.accept, want.draft_window) == (("DrafterContextTooShort",), "off")
    assert pod.engine_config["checkerOptions"]["drafterModel"] == "z-lab/Qwen3.6-27B-DFlash"  # camelCase, as the document


def test_a_field_the_checker_reads_reaches_the_preflight(tmp_path):
    pod = rendered_pod(tmp_path, "sglang")
    assert pod.codes() == set()
    # extra args were not in the preflight's own copy of the mapping (before issue 23): now the pod re-checks them
    pod.engine_config["checkerOptions"]["extraArgs"] = ["--speculative-algorithm", "EAGLE"]
    pod.write()
    assert "ExtraArgSetsOwnedFlag" in pod.codes()


def test_a_document_without_checker_options_is_refused(tmp_path):
    pod = rendered_pod(tmp_path, "sglang")
    del pod.engine_config["checkerOptions"]
    pod.write()
    assert pod.codes() == {"EngineConfigIncomplete"}


def test_checker_options_round_trip_through_the_document():
    o = Options(engine="vllm", engine_version="0.33.0", gpu="b300", extra_args=("--a",), accept=("B",), draft_window="off")
    ec = EngineConfig.model_validate({"engine": "vllm", "engineVersion": "0.33.0", "command": [], "args": [], "port": 1,
                                      "healthPath": "/h", "metricsPath": "/m", "target": {"model": "t"},
                                      "drafter": {"model": "d"}, "gpuProfile": "b300", "tensorParallelSize": 1,
                                      "nodes": 1, "checkerOptions": dataclasses.asdict(o),
                                      "speculation": {"method": "dflash", "blockSize": 16, "numSpeculativeTokens": 15,
                                                      "layerTypes": [], "targetLayerIds": []}})
    assert EngineConfig.model_validate_json(ec.to_json()).checker_options == o
