"""extraArgs against the engine release's own argument parser (recorded snapshot): every spelling argparse accepts."""

from __future__ import annotations

import pytest

from testkit import pair
from specdeploy.core.checker import Options, analyze
from specdeploy.core.extraargs import check_extra_args

SGLANG = ("sglang", "0.5.23")
VLLM = ("vllm", "0.33.0")


def codes(engine_version, args):
    problems, known = check_extra_args(*engine_version, args)
    assert known
    return [(p.index, p.code) for p in problems]


@pytest.mark.parametrize("engine, args, want", [
    # owned settings under other spellings (dest-based)
    (VLLM, ["-n", "4"], [(0, "ExtraArgSetsOwnedFlag")]),                       # --nnodes
    (VLLM, ["-r", "3"], [(0, "ExtraArgSetsOwnedFlag")]),                       # --node-rank
    (VLLM, ["-n4"], [(0, "ExtraArgSetsOwnedFlag")]),                           # attached value
    (VLLM, ["--no-trust-remote-code"], [(0, "ExtraArgSetsOwnedFlag")]),        # BooleanOptionalAction negation
    (VLLM, ["--tensor_parallel_size=2"], [(0, "ExtraArgSetsOwnedFlag")]),      # underscores, = form
    (VLLM, ["--tensor-parallel", "2"], [(0, "ExtraArgSetsOwnedFlag")]),        # abbreviation
    (VLLM, ["--spec-tokens", "3"], [(0, "ExtraArgSetsOwnedFlag")]),
    (VLLM, ["--max-model-len", "4096"], [(0, "ExtraArgSetsOwnedFlag")]),
    (SGLANG, ["--nccl-init-addr", "10.0.0.1:1"], [(0, "ExtraArgSetsOwnedFlag")]),  # alias of --dist-init-addr
    (SGLANG, ["--speculative-alg", "EAGLE"], [(0, "ExtraArgSetsOwnedFlag")]),
    (SGLANG, ["--tensor-parallel-size", "2"], [(0, "ExtraArgSetsOwnedFlag")]),
    (SGLANG, ["--context-length=8192"], [(0, "ExtraArgSetsOwnedFlag")]),
    # flags the engine does not know: it would die at start-up after the GPUs were scheduled
    (VLLM, ["--no-such-flag"], [(0, "ExtraArgUnknown")]),
    (VLLM, ["--num-speculative-tokens", "3"], [(0, "ExtraArgUnknown")]),
    (VLLM, ["--enable-metrics"], [(0, "ExtraArgUnknown")]),                    # an SGLang flag
    (VLLM, ["--PORT", "1"], [(0, "ExtraArgUnknown")]),                         # wrong case
    (SGLANG, ["--speculative_algorithm", "EAGLE"], [(0, "ExtraArgUnknown")]),  # SGLang does not map underscores
    (SGLANG, ["--speculative-dflash-draft-window-size", "64"], [(0, "ExtraArgUnknown")]),  # gone in 0.5.23
    (SGLANG, ["--cuda-graph-max-bs", "32"], [(0, "ExtraArgUnknown")]),         # ambiguous in 0.5.23
    # values
    (VLLM, ["--max-num-seqs"], [(0, "ExtraArgValueMissing")]),
    (VLLM, ["--max-num-seqs", "many"], [(0, "ExtraArgInvalidValue")]),
    (SGLANG, ["--mem-fraction-static", "0.8", "stray"], [(2, "ExtraArgUnexpectedValue")]),
    # flags that rewrite the model configuration the gate just checked
    (VLLM, ["--hf-overrides", '{"num_hidden_layers": 2}'], [(0, "ExtraArgChangesModelConfig")]),
    (VLLM, ["--hf-config-path", "/tmp/x"], [(0, "ExtraArgChangesModelConfig")]),
    (VLLM, ["--config", "x.yaml"], [(0, "ExtraArgChangesModelConfig")]),
    (SGLANG, ["--json-model-override-args", '{"num_hidden_layers": 2}'], [(0, "ExtraArgChangesModelConfig")]),
    # fine
    (VLLM, ["--max-num-seqs", "64", "--gpu-memory-utilization=0.9", "--served-model-name", "qwen"], []),
    (VLLM, ["--max-num-batched-tokens", "8192", "--enable-prefix-caching"], []),
    (SGLANG, ["--mem-fraction-static", "0.8", "--chunked-prefill-size", "-1", "--max-running-requests=32"], []),
])
def test_extra_args_table(engine, args, want):
    assert codes(engine, args) == want


def test_messages_name_the_alternative():
    [p] = check_extra_args(*VLLM, ["--PORT", "1"])[0]
    assert "--port" in p.message
    [p] = check_extra_args(*VLLM, ["-n", "2"])[0]
    assert "-n (= --nnodes)" in p.message and "spec.nodes" in p.message
    [p] = check_extra_args(*SGLANG, ["--context-length", "2"])[0]
    assert "spec.engine.maxModelLen" in p.message


def test_unverified_release_checks_owned_flags_only_and_says_so():
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(engine="sglang", engine_version="0.5.19", extra_args=("--no-such-flag", "--tp", "2")))
    got = {(f.code, f.path) for f in a.findings}
    assert ("ExtraArgSetsOwnedFlag", "spec.engine.extraArgs[1]") in got
    assert ("ExtraArgsUnchecked", "spec.engine.extraArgs") in got
    assert not any(c == "ExtraArgUnknown" for c, _ in got)


def test_the_checker_reports_each_at_its_index():
    d, t = pair("qwen3-8b")
    a = analyze(d, t, Options(engine="vllm", engine_version="0.33.0",
                              extra_args=("--max-num-seqs", "4", "-n", "2", "--hf-overrides", "{}")))
    errs = [(f.code, f.path) for f in a.findings if f.severity.value == "error"]
    assert errs == [("ExtraArgSetsOwnedFlag", "spec.engine.extraArgs[2]"),
                    ("ExtraArgChangesModelConfig", "spec.engine.extraArgs[4]")]


def test_release_parser_read_once(monkeypatch):
    """The snapshot is read, decoded and indexed once per release (issue 23: 3 ms per admission review before);
    the cached parser gives the same answers as a fresh one."""
    from specdeploy.core import extraargs

    args = ["--max-num-seqs", "8", "--tensor-parallel", "2", "--no-such-flag"]
    extraargs.compiled_resolver.cache_clear()
    fresh = check_extra_args(*VLLM, args)
    reads = []
    real = extraargs.load_snapshot
    monkeypatch.setattr(extraargs, "load_snapshot", lambda *a: reads.append(a) or real(*a))
    for _ in range(3):
        assert check_extra_args(*VLLM, args) == fresh
    assert reads == []
    extraargs.compiled_resolver.cache_clear()
    assert check_extra_args(*VLLM, args) == fresh
    assert reads == [("vllm", "0.33.0")]
