"""The SpeculativeDeployment API's shared vocabulary: the base model (camelCase JSON, unknown fields refused),
the RE2-compatible patterns, and the model sources and Secret/ConfigMap references both kinds use.

Part of the API types; import them from ``specdeploy.api.types`` (the one public module, docs/reference/api.md).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ..core import engines, gpus, methods
from ..core.checker import model_reference_problem

EngineName = Literal[engines.ENGINE_NAMES]  # type: ignore[valid-type]
Method = Literal[methods.METHODS]  # type: ignore[valid-type]
GpuType = Literal[gpus.PROFILE_KEYS]  # type: ignore[valid-type]

# RE2-compatible (Kubernetes evaluates OpenAPI patterns with Go regexp): no look-arounds.
MODEL_PATTERN = r"^/?[A-Za-z0-9_.][A-Za-z0-9_./-]*$"
REVISION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
IMAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
VERSION_PATTERN = r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?([.+-]?[A-Za-z0-9.]+)?$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?|[mk])?$"
QUANTITY_MAX = 24  # characters: bounded before any arithmetic (a 400-digit memory would overflow a float)


class SpecModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the SpeculativeDeployment's namespace."""

    name: str = Field(description="Name of the ConfigMap.", pattern=NAME_PATTERN, max_length=253)
    key: str = Field(default="config.json", description="Key holding the config.json document.",
                     pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)


class SecretKeyRef(SpecModel):
    """A key of a Secret in the SpeculativeDeployment's namespace."""

    name: str = Field(description="Name of the Secret.", pattern=NAME_PATTERN, max_length=253)
    key: str = Field(default="token", description="Key holding the value.", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)


class ConfigSource(SpecModel):
    """Where the model's config.json comes from when not from the model source itself."""

    config_map_key_ref: Optional[ConfigMapKeyRef] = Field(
        default=None, description="Read config.json from this ConfigMap key instead of the model source."
    )


class PvcSource(SpecModel):
    """A PersistentVolumeClaim holding model files; `model` is then a path inside it."""

    claim_name: str = Field(description="Name of the PersistentVolumeClaim.", pattern=NAME_PATTERN, max_length=253)


class ModelSource(SpecModel):
    """A model: a hub repository id, or a path inside a PersistentVolumeClaim."""

    model: str = Field(
        description="Hub repository id (e.g. `Qwen/Qwen3.6-27B`) or, with `pvc`, a path inside the claim. "
        "Never starts with '-'; no '.' or '..' segments.",
        pattern=MODEL_PATTERN,
        max_length=512,
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": "!self.matches('(^|/)[.][.]?(/|$)')", "message": "model may not contain '.' or '..' path segments"}
        ]},
    )
    revision: Optional[str] = Field(
        default=None, description="Hub revision (branch, tag or commit) to pin; the resolved commit is recorded in status. "
        "No '.' or '..' segments.",
        pattern=REVISION_PATTERN, max_length=128,
        json_schema_extra={"x-kubernetes-validations": [
            {"rule": "!self.matches('(^|/)[.][.]?(/|$)')", "message": "revision may not contain '.' or '..' path segments"}
        ]},
    )
    config_from: Optional[ConfigSource] = Field(
        default=None, description="Where to read config.json from; default: the model source itself."
    )
    pvc: Optional[PvcSource] = Field(default=None, description="Serve the model from this claim instead of the hub.")
    token_secret_ref: Optional[SecretKeyRef] = Field(
        default=None, description="Hub access token for gated or private repositories (Secret key)."
    )

    @field_validator("model")
    @classmethod
    def _safe_model(cls, v: str) -> str:
        problem = model_reference_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("revision")
    @classmethod
    def _safe_revision(cls, v: str | None) -> str | None:
        if v is not None and any(seg in (".", "..") for seg in v.split("/")):
            raise ValueError("revision may not contain '.' or '..' path segments (a hub URL built from it would "
                             "leave the repository); name a branch, tag or commit")
        return v


class TargetSource(ModelSource):
    """The target model being served."""

    trust_remote_code: bool = Field(
        default=False, description="Allow the engine to run the model repository's own Python code (auto_map)."
    )


class ApiKeySource(SpecModel):
    """Where the engine's API key comes from: a Secret key, handed to the engine through an environment
    variable (never written into the pod spec or from the spec into argv)."""

    secret_key_ref: SecretKeyRef = Field(
        description="The Secret key holding the API key. The Secret must be one the administrator allows for hub "
        "tokens (chart value hub.tokenSecrets, operator flag --allowed-token-secret).",
    )
