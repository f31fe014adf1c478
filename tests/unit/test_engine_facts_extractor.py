"""e2e/flagdrift/engine_facts.py on small synthetic engine trees: it records what the code does.

The real runs (record-facts.sh) read the engines' wheels; here tiny packages shaped like
SGLang and vLLM prove the probes run the functions and report their behaviour, including the
broken cases the table must catch (no +1, no sliding window, a target class that raises).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ef():
    spec = importlib.util.spec_from_file_location("engine_facts", ROOT / "e2e/flagdrift/engine_facts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


SGLANG_UTILS = """
    from typing import Any, List, Optional, Sequence
    import torch  # never imported: a stub

    def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> List[int]:
        if num_draft_layers == 1:
            return [num_target_layers // 2]
        start, end = 1, num_target_layers - 3
        if end < start:
            raise ValueError("too few layers")
        span = end - start
        return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]

    def get_dflash_layer_types(config: Any) -> Optional[Sequence[str]]:
        return getattr(config, "layer_types", None)

    def get_dflash_attention_sliding_window_size(config):
        lt = get_dflash_layer_types(config)
        if lt is None or "sliding_attention" not in lt:
            return None
        if getattr(config, "sliding_window", None) is None:
            raise ValueError("needs sliding_window")
        return int(config.sliding_window) - 1
    # DFLASH
"""

SGLANG_MODEL = """
    from sglang.srt.speculative.dflash_utils import get_dflash_attention_sliding_window_size, get_dflash_layer_types

    def _get_dflash_layer_attention_params(config, layer_id):
        lt = get_dflash_layer_types(config)
        if lt[layer_id] == "sliding_attention":
            return get_dflash_attention_sliding_window_size(config), "causal"
        return -1, "bidirectional"

    class DFlashDraftModel:
        def get_attention_sliding_window_size(self):
            return get_dflash_attention_sliding_window_size(self.config)

    EntryClass = [DFlashDraftModel]
"""

TARGETS = """
    class GoodForCausalLM:
        def set_dflash_layers_to_capture(self, layer_ids):
            if not self.pp_group.is_last_rank:
                return
            self.model.layers_to_capture = [i + 1 for i in layer_ids]

    class NoOffsetForCausalLM:
        def set_dflash_layers_to_capture(self, layer_ids):
            self.model.layers_to_capture = list(layer_ids)

    class StrictForCausalLM:
        def set_dflash_layers_to_capture(self, layer_ids):
            n = len(self.model.layers)
            if sorted(set(layer_ids)) != list(layer_ids) or not all(0 <= i < n - 1 for i in layer_ids):
                raise ValueError("bad ids")
            self.model.layers_to_capture = [i + 1 for i in layer_ids]

    class Inner:
        def set_dflash_layers_to_capture(self, ids):
            self.layers_to_capture = ids
            for i in ids:
                setattr(self.layers[i], "_capture", True)

    class WrapperForConditionalGeneration:
        def __init__(self, config, language_model_cls=Inner):
            self.language_model = language_model_cls(config)
        def set_dflash_layers_to_capture(self, layer_ids):
            self.language_model.set_dflash_layers_to_capture([i + 1 for i in layer_ids])

    EntryClass = [GoodForCausalLM, NoOffsetForCausalLM, StrictForCausalLM, WrapperForConditionalGeneration]
"""


def sglang_tree(tmp_path: Path, *, native: bool = True) -> Path:
    files = {
        "sglang/srt/speculative/dflash_utils.py": SGLANG_UTILS,
        "sglang/srt/speculative/dflash_worker_v2.py": """
            class W:
                def alloc_memory_pool(self, req_to_token_pool=None):
                    self.draft.alloc(req_to_token_pool=None if self.use_compact_draft_cache else req_to_token_pool)
        """,
        "sglang/srt/server_args.py": 'FLAG = "--speculative-draft-window-size"\n',
        "sglang/srt/models/targets.py": TARGETS,
    }
    files["sglang/srt/models/dflash.py"] = SGLANG_MODEL if native else "class DFlashDraftModel:\n    pass\nEntryClass = DFlashDraftModel\n"
    return write(tmp_path, files)


def test_sglang_probes_run_the_engine_functions(ef, tmp_path):
    doc = ef.record("sglang", "9.9.9", sglang_tree(tmp_path))
    f = doc["facts"]
    assert f["dflash"]["value"] is True
    assert f["default_layer_ids"]["value"]["64,5"] == [1, 16, 31, 46, 61]
    assert f["default_layer_ids"]["value"]["4,1"] == [2]
    assert f["default_layer_ids"]["value"]["4,2"] == [1, 1]
    sw = f["sliding_window"]
    assert sw["native"]["value"] is True and sw["per_layer_window"]["value"] == [2047, 2047, -1]
    assert sw["window_left"]["value"]["mixed_no_window"].startswith("raises ValueError")
    assert f["window_flags"]["value"] == ["--speculative-draft-window-size"]
    assert f["compact_cache"]["value"] == "all_layers"
    cap = f["target_capture"]["value"]
    assert cap["GoodForCausalLM"]["offset"] == 1
    assert set(cap["GoodForCausalLM"]["probes"].values()) == {"accepted"}
    assert cap["NoOffsetForCausalLM"]["offset"] == 0          # a target class that forgot its +1
    assert cap["StrictForCausalLM"]["probes"]["last"] == "raises ValueError"
    assert cap["StrictForCausalLM"]["probes"]["duplicate"] == "raises ValueError"
    # the wrapper delegates to the class passed as a constructor default; the inner one indexes layers[id + 1]
    assert cap["WrapperForConditionalGeneration"]["offset"] == 1
    assert cap["WrapperForConditionalGeneration"]["probes"]["last"] == "raises IndexError"
    assert cap["WrapperForConditionalGeneration"]["probes"]["duplicate"] == "accepted"


def test_sglang_without_native_windows(ef, tmp_path):
    f = ef.record("sglang", "0.0.1", sglang_tree(tmp_path, native=False))["facts"]
    assert f["sliding_window"]["native"]["value"] is False and "per_layer_window" not in f["sliding_window"]


def test_no_dflash_is_recorded_as_such(ef, tmp_path):
    write(tmp_path, {"sglang/srt/server_args.py": "X = 1\n"})
    assert ef.record("sglang", "0.0.1", tmp_path)["facts"] == {"dflash": {"value": False, "evidence": "no speculative/dflash_utils.py"}}


VLLM_FILES = {
    "vllm/config/speculative.py": 'METHODS = ["eagle", "dflash"]\n',
    "vllm/model_executor/models/qwen3_dflash.py": """
        from vllm.config import get_current_vllm_config

        def _resolve_layer_attention(config, layer_idx):
            layer_types = getattr(config, "layer_types", None)
            dc = getattr(config, "dflash_config", None) or {}
            if layer_types is not None:
                n = sum(t == "sliding_attention" for t in layer_types)
                if 0 < n < len(layer_types) and not get_current_vllm_config().use_v2_model_runner:
                    raise NotImplementedError("V2 only")
            sliding = dc.get("use_swa", False) if layer_types is None else layer_types[layer_idx] == "sliding_attention"
            window = None
            if sliding:
                window = dc.get("swa_window_size", getattr(config, "sliding_window", None))
                if window is None:
                    raise ValueError("window")
            return window, sliding
    """,
    "vllm/model_executor/models/registry.py": """
        _SPECULATIVE_DECODING_MODELS = {
            "DFlashDraftModel": ("qwen3_dflash", "X"),
            "EagleLlamaForCausalLM": ("llama_eagle", "Y"),
        }
    """,
    "vllm/transformers_utils/configs/eagle.py": 'if not arch.startswith("DFlash"):\n    arch = "DFlash" + arch\n',
    "vllm/v1/worker/gpu_model_runner.py": """
        class GPUModelRunner:
            def _get_aux_layers(self):
                hf_config = self.speculative_config.draft_model_config.hf_config
                dflash_config = getattr(hf_config, "dflash_config", None)
                return tuple(dflash_config.get("target_layer_ids"))
    """,
    "vllm/v1/attention/backends/registry.py": """
        class AttentionBackendEnum:
            FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    """,
    "vllm/v1/attention/backends/flash_attn.py": """
        class FlashAttentionBackend:
            @classmethod
            def supports_non_causal(cls) -> bool:
                return True
    """,
}


def test_vllm_probes_catch_a_missing_plus_one(ef, tmp_path):
    f = ef.record("vllm", "9.9.9", write(tmp_path, VLLM_FILES))["facts"]
    assert f["layer_ids_offset"]["v1"]["value"] == 0          # reads the layer input: the broken case
    assert f["layer_ids_offset"]["v2"]["value"] is None
    cases = f["sliding_window"]["value"]["cases"]
    assert cases["mixed@v1"] == "raises NotImplementedError" and cases["mixed@v2"] == [2048, True]
    assert cases["sliding_no_window@v1"].startswith("raises ValueError")
    assert f["drafter_architectures"]["value"] == {"registered": ["DFlashDraftModel"], "renames_to_dflash": True}
    assert f["non_causal_backends"]["value"] == ["FLASH_ATTN"]
    assert f["draft_context"]["value"] == {"raises_draft_limit": False}


# ----------------------------------------------------------------- speculation guard probes

VLLM_GUARD_FILES = {
    "vllm/config/utils.py": """
        def config(cls):
            merged_config = ConfigDict(extra="forbid")
            return cls
    """,
    "vllm/config/speculative.py": """
        class SpeculativeConfig:
            num_speculative_tokens: int = 1
            num_speculative_tokens_per_batch_size: list | None = None
    """,
    "vllm/v1/spec_decode/dynamic/utils.py": """
        def build_dynamic_sd_schedule_lookup(schedule, vllm_max_batch_size, vllm_num_speculative_tokens):
            dense = [0] * (vllm_max_batch_size + 1)
            k = vllm_num_speculative_tokens
            for start, end, n in sorted(schedule):
                for b in range(start, vllm_max_batch_size + 1):
                    dense[b] = min(vllm_num_speculative_tokens, n)
            return dense
    """,
    "vllm/v1/core/sched/scheduler.py": """
        class Scheduler:
            def schedule(self):
                x = self.speculative_config.num_speculative_tokens_per_batch_size
                return SchedulerOutput(num_spec_tokens_to_schedule=x)
    """,
    "vllm/v1/worker/gpu_model_runner.py": """
        class R:
            def propose_draft_token_ids(self, spec_config, k):
                if spec_config.use_dflash():
                    return self.drafter.propose(num_speculative_tokens=num_spec_tokens_to_schedule)
    """,
    "vllm/v1/spec_decode/llm_base_proposer.py": """
        class P:
            def propose(self):
                if self.num_speculative_tokens == 0:
                    return []
    """,
}


def test_vllm_guard_probe_runs_the_schedule_lookup(ef, tmp_path):
    src = ef.Source(write(tmp_path, VLLM_GUARD_FILES), "vllm")
    g = ef.vllm_speculation_guard(src)["value"]
    assert g["disable_by_batch_size"] is False and g["unknown_keys_rejected"] is True
    assert g["batch_size_schedule"] == "num_speculative_tokens_per_batch_size"
    assert g["scheduler_reads_schedule"] and g["v1_runner_passes_k_to_dflash"] and g["drafter_skips_zero"]
    assert g["lookup"]["per_batch_size"] == [3, 3, 3, 0, 0, 0, 0, 0]


def test_vllm_guard_probe_catches_a_v0_key_and_a_runner_that_ignores_k(ef, tmp_path):
    files = dict(VLLM_GUARD_FILES)
    files["vllm/config/speculative.py"] = """
        class SpeculativeConfig:
            disable_by_batch_size: int | None = None
            num_speculative_tokens_per_batch_size: list | None = None
    """
    files["vllm/v1/worker/gpu_model_runner.py"] = """
        class R:
            def propose_draft_token_ids(self, spec_config):
                if spec_config.use_dflash():
                    return self.drafter.propose(num_speculative_tokens=self.num_spec_tokens)
    """
    g = ef.vllm_speculation_guard(ef.Source(write(tmp_path, files), "vllm"))["value"]
    assert g["disable_by_batch_size"] is True and g["v1_runner_passes_k_to_dflash"] is False
    files["vllm/config/speculative.py"] = "class SpeculativeConfig:\n    num_speculative_tokens: int = 1\n"
    g = ef.vllm_speculation_guard(ef.Source(write(tmp_path / "old", files), "vllm"))["value"]
    assert g["batch_size_schedule"] is None


def test_sglang_guard_probe_reads_the_adaptive_algorithms(ef, tmp_path):
    rel = "sglang/srt/speculative/adaptive_spec_params.py"
    body = """
        DEFAULT_ADAPTIVE_CONFIG = {"1": {}, "8": {}}

        def adaptive_unsupported_reason(server_args):
            if server_args.speculative_algorithm not in (ALGOS):
                return "no"
            return None
    """
    g = ef.sglang_speculation_guard(ef.Source(write(tmp_path, {rel: body.replace("ALGOS", '"EAGLE", "EAGLE3"')}),
                                              "sglang"))["value"]
    assert g == {"switch": "--speculative-adaptive", "algorithms": ["EAGLE", "EAGLE3"], "dflash": False,
                 "batch_size_tiers": ["1", "8"]}
    g = ef.sglang_speculation_guard(ef.Source(write(tmp_path / "b", {rel: body.replace("ALGOS", '"EAGLE", "DFLASH"')}),
                                              "sglang"))["value"]
    assert g["dflash"] is True
    g = ef.sglang_speculation_guard(ef.Source(write(tmp_path / "c", {"sglang/srt/x.py": "X = 1\n"}), "sglang"))
    assert g["value"]["switch"] is None


# ----------------------------------------------------------------- EAGLE-3 capture: which targets hand hidden states over

VLLM_CAPTURE_FILES = {
    "vllm/model_executor/models/interfaces.py": """
        class SupportsEagle3:
            supports_eagle3 = True
    """,
    "vllm/model_executor/models/llama.py": """
        from .interfaces import SupportsEagle3

        class LlamaForCausalLM(nn.Module, SupportsPP, SupportsEagle3):
            pass
    """,
    # inherits the interface through a class of another module
    "vllm/model_executor/models/mistral.py": """
        from vllm.model_executor.models.llama import LlamaForCausalLM

        class MistralForCausalLM(LlamaForCausalLM):
            pass
    """,
    "vllm/model_executor/models/mixtral.py": """
        class MixtralForCausalLM(nn.Module, SupportsLoRA, SupportsPP):
            pass
    """,
    "vllm/models/flint/__init__.py": """
        class FlintForCausalLM(nn.Module):
            pass
    """,
    "vllm/model_executor/models/registry.py": """
        _TEXT_GENERATION_MODELS = {
            "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
            "MistralForCausalLM": ("mistral", "MistralForCausalLM"),
            "MixtralForCausalLM": ("mixtral", "MixtralForCausalLM"),
            "FlintForCausalLM": ("vllm.models.flint", "FlintForCausalLM"),
        }
        _EMBEDDING_MODELS = {"LlamaModel": ("llama", "LlamaForCausalLM")}
    """,
    "vllm/v1/worker/gpu_model_runner.py": """
        class GPUModelRunner:
            def _setup_eagle3_aux_hidden_state_outputs(self):
                if not supports_eagle3(self.get_model()):
                    raise RuntimeError("Model does not support EAGLE3 interface")
    """,
}


def test_vllm_eagle3_capture_follows_the_interface_through_the_bases(ef, tmp_path):
    rec = ef.vllm_eagle3_capture(ef.Source(write(tmp_path, VLLM_CAPTURE_FILES), "vllm"))
    v = rec["value"]
    assert v["supported"] == {"LlamaForCausalLM": "vllm/model_executor/models/llama.py:LlamaForCausalLM",
                              "MistralForCausalLM": "vllm/model_executor/models/mistral.py:MistralForCausalLM"}
    assert set(v["unsupported"]) == {"MixtralForCausalLM", "FlintForCausalLM"}  # embedding tables are not targets
    assert "gpu_model_runner.py:3 _setup_eagle3_aux_hidden_state_outputs" in rec["evidence"]


def test_vllm_eagle3_capture_without_the_runner_check_says_so(ef, tmp_path):
    files = dict(VLLM_CAPTURE_FILES)
    files["vllm/v1/worker/gpu_model_runner.py"] = "class GPUModelRunner:\n    pass\n"
    assert ef.vllm_eagle3_capture(ef.Source(write(tmp_path, files), "vllm"))["evidence"].startswith("no supports_eagle3")


SGLANG_CAPTURE_FILES = {
    "sglang/srt/models/llama.py": """
        class LlamaForCausalLM(nn.Module):
            def set_eagle3_layers_to_capture(self, layer_ids=None):
                self.capture_aux_hidden_states = True

        class Phi3ForCausalLM(LlamaForCausalLM):
            pass

        EntryClass = [LlamaForCausalLM, Phi3ForCausalLM]
    """,
    "sglang/srt/models/mimo.py": """
        from sglang.srt.models.qwen2 import Qwen2ForCausalLM

        class MiMoForCausalLM(Qwen2ForCausalLM):
            pass

        EntryClass = MiMoForCausalLM
    """,
    "sglang/srt/models/qwen2.py": """
        class Qwen2ForCausalLM(nn.Module):
            def set_dflash_layers_to_capture(self, layer_ids):
                self.layers_to_capture = [i + 1 for i in layer_ids]
    """,
    "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py": """
        def configure_aux_hidden_state_capture(*, model, eagle_use_aux_hidden_state, ids):
            if eagle_use_aux_hidden_state:
                if not hasattr(model, "set_eagle3_layers_to_capture"):
                    raise ValueError("does not implement set_eagle3_layers_to_capture")
                model.set_eagle3_layers_to_capture(ids)
    """,
}


def test_sglang_eagle3_capture_reads_the_method_along_the_bases(ef, tmp_path):
    rec = ef.sglang_eagle3_capture(ef.Source(write(tmp_path, SGLANG_CAPTURE_FILES), "sglang"))
    v = rec["value"]
    assert v["supported"] == {
        "LlamaForCausalLM": "sglang/srt/models/llama.py:LlamaForCausalLM.set_eagle3_layers_to_capture",
        "Phi3ForCausalLM": "sglang/srt/models/llama.py:LlamaForCausalLM.set_eagle3_layers_to_capture"}
    assert v["unsupported"] == ["MiMoForCausalLM"]  # a DFlash capture hook is not an EAGLE-3 one
    assert rec["evidence"].startswith("sglang/srt/model_executor/model_runner_components/attention_backend_setup.py:2 "
                                      "configure_aux_hidden_state_capture")


# ----------------------------------------------------------------- DFlash family capture: vLLM's methods, SGLang's DSpark hook

def test_vllm_eagle3_capture_records_the_methods_that_need_the_hidden_states(ef, tmp_path):
    files = dict(VLLM_CAPTURE_FILES)
    files["vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"] = """
        def requires_aux_hidden_states(spec_config):
            if spec_config.method == "eagle3":
                return eagle_config.get("use_aux_hidden_state", True)
            return spec_config.method in ("dflash", "dspark", "extract_hidden_states")
    """
    rec = ef.vllm_eagle3_capture(ef.Source(write(tmp_path, files), "vllm"))
    assert rec["value"]["methods"] == ["dflash", "dspark", "eagle3", "extract_hidden_states"]
    assert "eagle3_utils.py:2 requires_aux_hidden_states" in rec["evidence"]
    assert ef.vllm_eagle3_capture(ef.Source(write(tmp_path / "b", VLLM_CAPTURE_FILES), "vllm"))["value"]["methods"] == []


def test_sglang_dspark_capture_reads_the_dspark_hook_along_the_bases(ef, tmp_path):
    files = dict(SGLANG_CAPTURE_FILES)
    files["sglang/srt/models/deepseek_v4.py"] = """
        class DeepseekV4ForCausalLM(nn.Module):
            def set_dspark_layers_to_capture(self, layer_ids):
                self.layers_to_capture = layer_ids

        class DeepseekV4ForCausalLMNextN(DeepseekV4ForCausalLM):
            pass

        EntryClass = [DeepseekV4ForCausalLM, DeepseekV4ForCausalLMNextN]
    """
    files["sglang/srt/model_executor/model_runner_components/attention_backend_setup.py"] = """
        def configure_aux_hidden_state_capture(*, model, dflash_use_aux_hidden_state, ids, is_dspark):
            if dflash_use_aux_hidden_state:
                if is_dspark and hasattr(model, "set_dspark_layers_to_capture"):
                    model.set_dspark_layers_to_capture(ids)
                elif hasattr(model, "set_dflash_layers_to_capture"):
                    model.set_dflash_layers_to_capture(ids)
                else:
                    raise ValueError("implements neither")
    """
    rec = ef.sglang_dspark_capture(ef.Source(write(tmp_path, files), "sglang"))
    hook = "sglang/srt/models/deepseek_v4.py:DeepseekV4ForCausalLM.set_dspark_layers_to_capture"
    assert rec["value"]["supported"] == {"DeepseekV4ForCausalLM": hook, "DeepseekV4ForCausalLMNextN": hook}
    assert rec["evidence"].startswith("sglang/srt/model_executor/model_runner_components/attention_backend_setup.py:2 "
                                      "configure_aux_hidden_state_capture")
    rec = ef.sglang_dspark_capture(ef.Source(write(tmp_path / "b", SGLANG_CAPTURE_FILES), "sglang"))
    assert rec["value"]["supported"] == {} and rec["evidence"].startswith("no set_dspark_layers_to_capture check")
