"""Tenancy policy (pure): what a SpeculativeDeployment may make the operator do.

Whoever may create a SpeculativeDeployment gets the operator's ServiceAccount to create pods
for them. Without a policy that would let them run any image, under any ServiceAccount of the
namespace, with any Secret key as ``HF_TOKEN``, mounting any claim. The policy narrows each to
what an administrator allowed (chart values -> operator flags -> ``SPECDEPLOY_POLICY``):

| what | spec field | allowed by (chart value / operator flag) | default |
|---|---|---|---|
| image | `spec.engine.image` | `policy.allowedImagePrefixes` / `--allowed-image-prefix` | the project's runtime images |
| pod ServiceAccount | `spec.pod.serviceAccountName` | `policy.allowedServiceAccounts` / `--allowed-service-account`; `policy.engineServiceAccount` / `--engine-service-account` is always allowed and the default | none other |
| hub token Secret | `spec.{target,drafter}.tokenSecretRef` | `hub.tokenSecrets` / `--allowed-token-secret` | none |
| engine API key Secret | `spec.engine.apiKey.secretKeyRef` | the same list as hub token Secrets | none |
| model claim | `spec.{target,drafter}.pvc`, `spec.tuning.pvc`, `spec.cache.pvc` | `policy.allowedPVCs` / `--allowed-pvc`, or claims labelled `policy.pvcLabel` / `--pvc-label` | none |
| node-local hub cache | `spec.cache.nodePath` (a name, never a path) | `cache.nodePaths` / `--cache-node-path NAME=PATH` | none |

The cache a spec without `spec.cache` gets (`cache.default` / `--default-cache`) is the
administrator's choice and is not checked against the lists above. A host path is only ever one an
administrator listed: a spec names it, it cannot spell one (a hostPath volume of its own choosing
would let it read or overwrite any directory of the node).

The same function runs in the admission webhook and in the reconciler (a CR admitted before a
policy change is refused at reconcile with a condition; nothing is applied).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from .cache import node_path_refusal
from .engines import RUNTIME_IMAGE_REPO
from .findings import Finding, Severity, Source

POLICY_ENV = "SPECDEPLOY_POLICY"


@dataclass(frozen=True)
class TenancyPolicy:
    image_prefixes: tuple[str, ...] = (RUNTIME_IMAGE_REPO,)
    engine_service_account: str | None = None
    service_accounts: tuple[str, ...] = ()
    token_secrets: tuple[str, ...] = ()
    pvcs: tuple[str, ...] = ()
    pvc_label: tuple[str, str] | None = None
    cache_node_paths: tuple[tuple[str, str], ...] = ()  # (name, absolute node path)
    default_cache: tuple[str, str] | None = None  # ("pvc", claim) | ("nodePath", name); None: emptyDir
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_env(self) -> str:
        d = asdict(self)
        d.pop("extra")
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_env(cls, text: str | None) -> "TenancyPolicy":
        if not text:
            return cls()
        d = json.loads(text)
        return cls(image_prefixes=tuple(d.get("image_prefixes") or ()), engine_service_account=d.get("engine_service_account"),
                   service_accounts=tuple(d.get("service_accounts") or ()), token_secrets=tuple(d.get("token_secrets") or ()),
                   pvcs=tuple(d.get("pvcs") or ()),
                   pvc_label=tuple(d["pvc_label"]) if d.get("pvc_label") else None,  # type: ignore[arg-type]
                   cache_node_paths=tuple(tuple(x) for x in d.get("cache_node_paths") or ()),  # type: ignore[misc]
                   default_cache=tuple(d["default_cache"]) if d.get("default_cache") else None)  # type: ignore[arg-type]

    def node_path(self, name: str) -> str | None:
        """The node directory an administrator listed under ``name``, or None."""
        return dict(self.cache_node_paths).get(name)


def normalize_image(ref: str) -> str:
    """An image reference as the container runtime resolves it: docker.io/library/ for short names."""
    name = ref
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def image_allowed(ref: str, prefixes: tuple[str, ...]) -> bool:
    img = normalize_image(ref)
    for p in prefixes:
        base = normalize_image(p.rstrip("/")) if "/" in p.rstrip("/") else p.rstrip("/")
        if img == base or (img.startswith(base) and img[len(base)] in ":@/"):
            return True
    return False


def check_policy(spec, policy: TenancyPolicy, pvc_labels: Mapping[str, Mapping[str, str] | None] | None = None) -> list[Finding]:
    """Policy refusals for a spec. ``pvc_labels``: claim name -> its labels (None: the claim does not exist);
    without it a label rule cannot be decided here and is left to the reconciler."""
    out: list[Finding] = []

    def refuse(code: str, path: str, msg: str) -> None:
        out.append(Finding(Severity.ERROR, code, Source.SPEC, path, msg))

    if spec.engine.image and not image_allowed(spec.engine.image, policy.image_prefixes):
        allowed = ", ".join(policy.image_prefixes) or "none"
        refuse("PolicyImageNotAllowed", "spec.engine.image",
               f"image {spec.engine.image!r} is not under an allowed repository ({allowed}); leave spec.engine.image unset "
               "for the runtime image, or ask an administrator to add its repository to the chart value "
               "policy.allowedImagePrefixes (operator flag --allowed-image-prefix)")
    sa = spec.pod.service_account_name
    if sa and sa != policy.engine_service_account and sa not in policy.service_accounts:
        allowed = ", ".join(filter(None, (policy.engine_service_account, *policy.service_accounts))) or "none"
        refuse("PolicyServiceAccountNotAllowed", "spec.pod.serviceAccountName",
               f"engine pods may not run as ServiceAccount {sa!r} (allowed: {allowed}): its token would give the "
               "deployment's pods that account's rights. Remove the field, or ask an administrator to add it to the "
               "chart value policy.allowedServiceAccounts (operator flag --allowed-service-account)")
    for role, src in spec.model_sources():
        ref = src.token_secret_ref
        if ref is not None and ref.name not in policy.token_secrets:
            allowed = ", ".join(policy.token_secrets) or "none"
            refuse("PolicyTokenSecretNotAllowed", f"spec.{role}.tokenSecretRef.name",
                   f"Secret {ref.name!r} is not a hub token Secret (allowed: {allowed}): its key {ref.key!r} would be "
                   "handed to the engine as HF_TOKEN. Use an allowed Secret, or ask an administrator to add it to the "
                   "chart value hub.tokenSecrets (operator flag --allowed-token-secret)")
    key = getattr(spec.engine, "api_key", None)
    if key is not None and key.secret_key_ref.name not in policy.token_secrets:
        allowed = ", ".join(policy.token_secrets) or "none"
        refuse("PolicyApiKeySecretNotAllowed", "spec.engine.apiKey.secretKeyRef.name",
               f"Secret {key.secret_key_ref.name!r} is not one the operator may hand to engines (allowed: {allowed}; the "
               "hub token Secrets): its key would be put into the engine's environment. Use an allowed Secret, or ask "
               "an administrator to add it to the chart value hub.tokenSecrets (operator flag --allowed-token-secret)")
    claims = [(f"spec.{r}.pvc.claimName", s.pvc.claim_name) for r, s in spec.model_sources()
              if s.pvc is not None]
    if spec.tuning.pvc is not None:
        claims.append(("spec.tuning.pvc.claimName", spec.tuning.pvc.claim_name))
    cache = getattr(spec, "cache", None)
    if cache is not None and cache.pvc is not None:
        claims.append(("spec.cache.pvc.claimName", cache.pvc.claim_name))
    if cache is not None and cache.node_path is not None and policy.node_path(cache.node_path) is None:
        out.append(node_path_refusal(cache.node_path, policy))
    for path, claim in claims:
        if claim in policy.pvcs:
            continue
        label = policy.pvc_label
        if label is not None:
            if pvc_labels is None or claim not in pvc_labels:
                continue  # decided where the claim can be read (the reconciler)
            labels = pvc_labels[claim]
            if labels is not None and labels.get(label[0]) == label[1]:
                continue
        rule = ", ".join(policy.pvcs) if policy.pvcs else ""
        if label is not None:
            rule = (rule + "; or " if rule else "") + f"claims labelled {label[0]}={label[1]}"
        how = f"label the claim {label[0]}={label[1]}, or " if label else ""
        refuse("PolicyClaimNotAllowed", path,
               f"claim {claim!r} may not be mounted (allowed: {rule or 'none'}): it could hold another team's data. "
               f"{how.capitalize()}ask an administrator to add it to the chart value policy.allowedPVCs (operator flag "
               "--allowed-pvc) or to set policy.pvcLabel (--pvc-label)")
    return out


def policy_needs_claims(spec, policy: TenancyPolicy) -> list[str]:
    """Claims whose labels the I/O edge must read to decide the label rule."""
    if policy.pvc_label is None:
        return []
    names = [s.pvc.claim_name for _, s in spec.model_sources() if s.pvc is not None]
    if spec.tuning.pvc is not None:
        names.append(spec.tuning.pvc.claim_name)
    cache = getattr(spec, "cache", None)
    if cache is not None and cache.pvc is not None:
        names.append(cache.pvc.claim_name)
    return [n for n in names if n not in policy.pvcs]
