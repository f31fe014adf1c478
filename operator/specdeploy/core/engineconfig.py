"""The engine config document: what the operator hands the pod, one typed document.

Rendered by the operator into the engine ConfigMap (key ``engine-config.json``); parsed by
the pod runtime (preflight re-checks it against the mounted config.json files, launch execs
it). Everything the engine process gets is in here, already split into exec-form argv.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .checker import Options
from .memo import by_identity
from .methods import METHODS
from .names import GROUP_VERSION

ENGINE_CONFIG_KEY = "engine-config.json"
CHECK_REPORT_KEY = "check-report.json"
ENGINE_CONFIG_MOUNT = "/etc/specdeploy"


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ModelRef(_Doc):
    model: str = Field(description="What the engine is given: hub repo id or a path in the pod.")
    revision: Optional[str] = Field(default=None, description="Pinned revision, if any.")
    config_digest: Optional[str] = Field(default=None, description="sha256 of the config.json the check saw.")


class SpeculationPlan(_Doc):
    method: Literal[METHODS] = Field(description="Speculative method (spec.speculation.method).")  # type: ignore[valid-type]
    engine_method: Optional[str] = Field(
        default=None, description="The engine release's own name for the method (SGLang --speculative-algorithm, "
        "vLLM speculative_config.method).")
    steps: Optional[int] = Field(default=None, description="Draft steps (eagle3, eagle, draft_model, mtp).")
    topk: Optional[int] = Field(default=None, description="Top-k per draft step (eagle3, eagle, draft_model, mtp).")
    block_size: int = Field(description="Draft block size.")
    num_speculative_tokens: int = Field(description="Draft tokens per step (block size - 1).")
    draft_window: Optional[int] = Field(default=None, description="Compact draft cache window rendered, if any.")
    drafter_window: Optional[int] = Field(default=None, description="The drafter's trained sliding window, if any.")
    layer_types: list[str] = Field(description="Drafter layer attention kinds as the engines resolve them.")
    target_layer_ids: list[int] = Field(description="0-based target layer outputs the drafter reads.")
    native_window: Optional[int] = Field(default=None, description="Window the engine applies to sliding layers itself.")


class EngineConfig(_Doc):
    api_version: Literal[GROUP_VERSION] = Field(default=GROUP_VERSION, description="Document version.")  # type: ignore[valid-type]
    kind: Literal["EngineConfig"] = Field(default="EngineConfig", description="Document kind.")
    engine: Literal["sglang", "vllm"] = Field(description="Engine.")
    engine_version: str = Field(description="Engine release the flags were derived for.")
    command: list[str] = Field(description="Exec-form entrypoint.")
    args: list[str] = Field(description="Exec-form arguments (leader / single node).")
    worker_args: Optional[list[str]] = Field(default=None, description="Arguments for non-leader nodes (multi-node).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment the engine needs.")
    port: int = Field(description="HTTP port (API, health and metrics).")
    health_path: str = Field(description="Health endpoint.")
    metrics_path: str = Field(description="Prometheus metrics endpoint.")
    target: ModelRef = Field(description="Target model.")
    drafter: Optional[ModelRef] = Field(default=None, description="Drafter model (none for mtp, ngram, suffix).")
    speculation: SpeculationPlan = Field(description="Derived speculation settings.")
    gpu_profile: str = Field(description="GPU profile key.")
    tensor_parallel_size: int = Field(description="Tensor-parallel size (GPUs per replica).")
    nodes: int = Field(description="Nodes per replica.")
    checker_options: Optional[Options] = Field(
        default=None, description="The checker's options as the operator checked the spec (api/types.checker_options; "
        "the fields of core/checker.Options in camelCase): the preflight re-runs the check with them.")

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_none=True), sort_keys=True, indent=2) + "\n"

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()


@by_identity(64, name="engineconfig.digest")  # the same document object: the same digest (core/memo.py)
def config_digest(doc: object) -> str:
    """Digest of a config.json document, independent of key order and whitespace."""
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
