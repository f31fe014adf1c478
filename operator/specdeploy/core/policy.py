"""Tenancy policy (pure): what a SpeculativeDeployment may make the operator do.

Whoever may create a SpeculativeDeployment gets the operator's ServiceAccount to create pods
for them. Without a policy that would let them run any image, under any ServiceAccount of the
namespace, with any Secret key as ``HF_TOKEN``, mounting any claim. The policy narrows each to
what an administrator allowed (chart values -> operator flags -> ``OperatorSettings.policy``):

| what | spec field | allowed by (chart value / operator flag) | default |
|---|---|---|---|
| image | `spec.engine.image` | `policy.allowedImagePrefixes` / `--allowed-image-prefix` | the project's runtime images |
| pod ServiceAccount | `spec.pod.serviceAccountName` | `policy.allowedServiceAccounts` / `--allowed-service-account`; `policy.engineServiceAccount` / `--engine-service-account` is always allowed and the default | none other |
| hub token Secret | `spec.{target,drafter}.tokenSecretRef` | `hub.tokenSecrets` / `--allowed-token-secret` | none |
| engine API key Secret | `spec.engine.apiKey.secretKeyRef.name` | the same list as hub token Secrets | none |
| engine API key Secret key | `spec.engine.apiKey.secretKeyRef.key` | `policy.allowedApiKeySecretKeys` / `--allowed-api-key-secret-key` | `token` |
| model claim | `spec.{target,drafter}.pvc`, `spec.tuning.pvc`, `spec.cache.pvc` | `policy.allowedPVCs` / `--allowed-pvc`, or claims labelled `policy.pvcLabel` / `--pvc-label` | none |
| node-local hub cache | `spec.cache.nodePath` (a name, never a path) | `cache.nodePaths` / `--cache-node-path NAME=PATH`, bound to namespaces by `cache.nodePaths.NAME.namespaces` / `--cache-node-path-namespaces NAME=NS,...` (unbound: every namespace, a shared cache) | none |
| absolute model path | `spec.{target,drafter}.model` starting with `/` without a `pvc` | only under the hub cache mount when the cache is a claim or a node path bound to this namespace by name | nowhere else |
| token Secret key | `spec.{target,drafter}.tokenSecretRef.key` | `hub.tokenSecretKeys` / `--allowed-token-secret-key` | `token` |
| remote code | `spec.target.trustRemoteCode: true` | `policy.allowTrustRemoteCode.namespaces` / `--allow-trust-remote-code-namespace`, `.modelPrefixes` / `--allow-trust-remote-code-model` | nowhere |
| engine flags that load code or open pod files | `spec.engine.extraArgs` | `policy.allowedCodeArgs` / `--allowed-code-arg` (flag names; the flags are listed per engine in data/codeflags.json) | none |
| engine flags that connect out of the pod (OTLP, tool servers, KV-event publishers, encoder/weight peers) | `spec.engine.extraArgs` | `policy.allowedEgressArgs` / `--allowed-egress-arg` (flag names; `loads: egress` in data/codeflags.json) | none |
| tolerations | `spec.pod.tolerations[*].key` | `policy.allowedTolerationKeys` / `--allowed-toleration-key` | any key but the control-plane taints; never a toleration without a key |
| node selector | `spec.pod.nodeSelector` keys | `policy.allowedNodeSelectorKeys` / `--allowed-node-selector-key` | any key but the control-plane node roles |
| priority class | `spec.pod.priorityClassName` | `policy.allowedPriorityClasses` / `--allowed-priority-class` | any but `system-*` |

Allow-list patterns of the last three: a name, `PREFIX*`, or `*`. The control-plane keys
(``CONTROL_PLANE_KEYS``) and ``system-*`` priority classes pass only when listed by their exact name,
never through a pattern: a default that admits them would let a tenant schedule engine pods onto the
control plane or preempt cluster-critical pods.

The cache a spec without `spec.cache` gets (`cache.default` / `--default-cache`) is the
administrator's choice and is not checked against the lists above, except a node path's namespace
binding: a namespace the default's node path is not bound to gets an emptyDir. A host path is only ever one an
administrator listed: a spec names it, it cannot spell one (a hostPath volume of its own choosing
would let it read or overwrite any directory of the node).

The same function runs in the admission webhook and in the reconciler (a CR admitted before a
policy change is refused at reconcile with a condition; nothing is applied).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from .cache import HF_HOME, node_path_refusal
from .engines import RUNTIME_IMAGE_REPO
from .findings import Finding, Severity, Source
from .memo import MiB, bounded

CONTROL_PLANE_KEYS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
SYSTEM_PRIORITY_PREFIX = "system-"
DEFAULT_TOKEN_SECRET_KEYS = ("token",)
# spec.engine.apiKey's keys: a list of its own (an administrator may keep API keys and hub tokens under different
# keys of one Secret, and allow one use without the other); the default is the field's own default key.
DEFAULT_API_KEY_SECRET_KEYS = ("token",)


@dataclass(frozen=True)
class TenancyPolicy:
    image_prefixes: tuple[str, ...] = (RUNTIME_IMAGE_REPO,)
    engine_service_account: str | None = None
    service_accounts: tuple[str, ...] = ()
    token_secrets: tuple[str, ...] = ()
    pvcs: tuple[str, ...] = ()
    pvc_label: tuple[str, str] | None = None
    cache_node_paths: tuple[tuple[str, str], ...] = ()  # (name, absolute node path)
    # (name, namespaces that may use it; "*": every namespace); a listed name without a row: every namespace
    cache_node_path_namespaces: tuple[tuple[str, tuple[str, ...]], ...] = ()
    default_cache: tuple[str, str] | None = None  # ("pvc", claim) | ("nodePath", name); None: emptyDir
    token_secret_keys: tuple[str, ...] = DEFAULT_TOKEN_SECRET_KEYS
    trust_remote_code_namespaces: tuple[str, ...] = ()  # "*": every namespace
    trust_remote_code_models: tuple[str, ...] = ()  # model prefixes (a path boundary: "org/" or "org")
    code_args: tuple[str, ...] = ()  # engine flags that load code or open files, allowed by name
    egress_args: tuple[str, ...] = ()  # engine flags that connect out of the pod, allowed by name
    toleration_keys: tuple[str, ...] = ("*",)
    node_selector_keys: tuple[str, ...] = ("*",)
    priority_classes: tuple[str, ...] = ("*",)
    api_key_secret_keys: tuple[str, ...] = DEFAULT_API_KEY_SECRET_KEYS  # spec.engine.apiKey.secretKeyRef.key
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
        lists = {k: tuple(d[k]) for k in ("token_secret_keys", "trust_remote_code_namespaces", "trust_remote_code_models",
                                          "code_args", "egress_args", "toleration_keys", "node_selector_keys",
                                          "priority_classes", "api_key_secret_keys")
                 if k in d}
        return cls(**lists, image_prefixes=tuple(d.get("image_prefixes") or ()),
                   engine_service_account=d.get("engine_service_account"),
                   service_accounts=tuple(d.get("service_accounts") or ()), token_secrets=tuple(d.get("token_secrets") or ()),
                   pvcs=tuple(d.get("pvcs") or ()),
                   pvc_label=tuple(d["pvc_label"]) if d.get("pvc_label") else None,  # type: ignore[arg-type]
                   cache_node_paths=tuple(tuple(x) for x in d.get("cache_node_paths") or ()),  # type: ignore[misc]
                   cache_node_path_namespaces=tuple((n, tuple(ns)) for n, ns in d.get("cache_node_path_namespaces") or ()),
                   default_cache=tuple(d["default_cache"]) if d.get("default_cache") else None)  # type: ignore[arg-type]

    def node_path(self, name: str) -> str | None:
        """The node directory an administrator listed under ``name``, or None."""
        return dict(self.cache_node_paths).get(name)

    def node_path_namespaces(self, name: str) -> tuple[str, ...] | None:
        """The namespaces bound to node path ``name`` (``*``: every one), or None: not bound (every namespace)."""
        return dict(self.cache_node_path_namespaces).get(name)

    def node_path_allowed(self, name: str, namespace: str | None, by_name: bool = False) -> bool:
        """``namespace`` may use the listed node path ``name``; ``by_name``: only when bound to it by its name (not
        through ``*`` or an unbound, shared path: every namespace writes there)."""
        if self.node_path(name) is None:
            return False
        bound = self.node_path_namespaces(name)
        if bound is None or "*" in bound:
            return not by_name
        return namespace is not None and namespace in bound


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


def name_allowed(name: str, patterns: tuple[str, ...], exact_only: bool = False) -> bool:
    """``name`` matches one of ``patterns`` (a name, ``PREFIX*`` or ``*``); ``exact_only``: a listed name only."""
    for p in patterns:
        if name == p:
            return True
        if not exact_only and p.endswith("*") and name.startswith(p[:-1]):
            return True
    return False


def model_prefix_allowed(model: str, prefixes: tuple[str, ...]) -> bool:
    """``model`` is one of ``prefixes`` or lies under one (a path boundary: ``Qwen`` covers ``Qwen/x``, not
    ``QwenEvil/x``)."""
    for p in prefixes:
        base = p.rstrip("/")
        if base and (model == base or model.startswith(base + "/")):
            return True
    return False


def trust_remote_code_allowed(policy: TenancyPolicy, namespace: str | None, model: str) -> bool:
    ns_ok = namespace is not None and ("*" in policy.trust_remote_code_namespaces
                                       or namespace in policy.trust_remote_code_namespaces)
    return ns_ok or model_prefix_allowed(model, policy.trust_remote_code_models)


@bounded("policy.risky_dests", 64, 8 * MiB)
def _risky_dests(engine: str, version: str, snapshot: str) -> tuple[Any, dict[str, tuple[str, str]]]:
    """(the release's parser or None, destination -> (risky flag, kind)): read once per release (pure inputs: the
    recorded data files do not change while running)."""
    from . import codeflags
    from .extraargs import compiled_resolver

    try:
        r = compiled_resolver(engine, version, snapshot)
    except (LookupError, KeyError):
        return None, {}
    by_dest: dict[str, tuple[str, str]] = {}
    for flag, kind in codeflags.risky_flags(engine).items():
        entry = r.options.get(flag)
        if entry and entry.get("dest"):
            by_dest[entry["dest"]] = (flag, kind)
    return r, by_dest


def code_arg_uses(spec) -> list[tuple[int, str, str]]:
    """(index in extraArgs, the engine's flag, code|file|egress|unreviewed) for each extraArgs flag that loads code,
    opens files of the pod or connects out of it (core/codeflags.py), resolved with the release's parser where one is recorded
    (abbreviations and other spellings of the same destination included), else by name."""
    from . import codeflags, engines as eng
    from .extraargs import is_flag

    args = [str(a) for a in spec.engine.extra_args]
    if not args:
        return []
    engine = spec.engine.name
    risky = codeflags.risky_flags(engine)
    if not risky:
        return []
    cpu = getattr(getattr(spec, "gpu", None), "type", None) == "cpu"
    build = eng.cpu_build(engine) if cpu else None
    r, by_dest = _risky_dests(engine, spec.engine.version.lstrip("vV"), build.snapshot if build else engine)
    out = []
    for i, tok in enumerate(args):
        if not is_flag(tok):
            continue
        name = tok.partition("=")[0]
        if r is not None:
            opt, _sub, _why = r.resolve(name)
            if opt is None and not name.startswith("--") and len(name) > 2:
                opt = name[:2] if name[:2] in r.options else None
            entry = r.options.get(opt) if opt else None
            hit = by_dest.get(entry.get("dest") or "") if entry else None
            if hit is not None and not opt.startswith("--no-"):  # type: ignore[union-attr]
                out.append((i, *hit))
            continue
        # no parser recorded for this release: by name, every abbreviation counted
        base = name.partition(".")[0]
        base = "--" + base[2:].replace("_", "-") if base.startswith("--") else base
        if base.startswith("--no-") or len(base) <= 2:
            continue
        for flag, kind in sorted(risky.items()):
            if flag == base or (base.startswith("--") and flag.startswith(base)):
                out.append((i, flag, kind))
                break
    return out


def api_key_allowed(policy: TenancyPolicy, secret: str, key: str) -> bool:
    """Whether ``spec.engine.apiKey`` may name ``key`` of Secret ``secret``: the Secret is a hub token Secret and
    the key an allowed API key key (check_policy's rule; the acceptance monitor asks it again before it reads the
    Secret for the canary probe)."""
    return secret in policy.token_secrets and key in policy.api_key_secret_keys


@dataclass
class PolicyCheck:
    """One spec judged against the tenancy policy: what every policy rule reads (see ``check_policy``) and the
    refusals so far."""

    spec: Any
    policy: TenancyPolicy
    pvc_labels: Mapping[str, Mapping[str, str] | None] | None
    namespace: str | None
    out: list[Finding] = field(default_factory=list)

    def refuse(self, code: str, path: str, msg: str) -> None:
        self.out.append(Finding(Severity.ERROR, code, Source.SPEC, path, msg))


def check_image(c: PolicyCheck) -> None:
    """The engine image is under an allowed repository."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    if spec.engine.image and not image_allowed(spec.engine.image, policy.image_prefixes):
        allowed = ", ".join(policy.image_prefixes) or "none"
        refuse("PolicyImageNotAllowed", "spec.engine.image",
               f"image {spec.engine.image!r} is not under an allowed repository ({allowed}); leave spec.engine.image unset "
               "for the runtime image, or ask an administrator to add its repository to the chart value "
               "policy.allowedImagePrefixes (operator flag --allowed-image-prefix)")


def check_service_account(c: PolicyCheck) -> None:
    """The engine pods' ServiceAccount is the engine's own or an allowed one."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    sa = spec.pod.service_account_name
    if sa and sa != policy.engine_service_account and sa not in policy.service_accounts:
        allowed = ", ".join(filter(None, (policy.engine_service_account, *policy.service_accounts))) or "none"
        refuse("PolicyServiceAccountNotAllowed", "spec.pod.serviceAccountName",
               f"engine pods may not run as ServiceAccount {sa!r} (allowed: {allowed}): its token would give the "
               "deployment's pods that account's rights. Remove the field, or ask an administrator to add it to the "
               "chart value policy.allowedServiceAccounts (operator flag --allowed-service-account)")


def check_token_secrets(c: PolicyCheck) -> None:
    """Each model's hub token comes from an allowed Secret and key."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    for role, src in spec.model_sources():
        ref = src.token_secret_ref
        if ref is not None and ref.name not in policy.token_secrets:
            allowed = ", ".join(policy.token_secrets) or "none"
            refuse("PolicyTokenSecretNotAllowed", f"spec.{role}.tokenSecretRef.name",
                   f"Secret {ref.name!r} is not a hub token Secret (allowed: {allowed}): its key {ref.key!r} would be "
                   "handed to the engine as HF_TOKEN. Use an allowed Secret, or ask an administrator to add it to the "
                   "chart value hub.tokenSecrets (operator flag --allowed-token-secret)")
        elif ref is not None and ref.key not in policy.token_secret_keys:
            allowed = ", ".join(policy.token_secret_keys) or "none"
            refuse("PolicyTokenSecretKeyNotAllowed", f"spec.{role}.tokenSecretRef.key",
                   f"key {ref.key!r} of Secret {ref.name!r} is not a hub token key (allowed: {allowed}): any other key "
                   "of an allowed Secret would be handed to the engine as HF_TOKEN too. Use an allowed key, or ask an "
                   "administrator to add it to the chart value hub.tokenSecretKeys (operator flag "
                   "--allowed-token-secret-key)")


def check_trust_remote_code(c: PolicyCheck) -> None:
    """trustRemoteCode only where the policy allows it (namespace or model prefix)."""
    spec, policy, namespace, refuse = c.spec, c.policy, c.namespace, c.refuse
    if spec.target.trust_remote_code and not trust_remote_code_allowed(policy, namespace, spec.target.model):
        rules = [f"namespaces {', '.join(policy.trust_remote_code_namespaces)}"] if policy.trust_remote_code_namespaces else []
        if policy.trust_remote_code_models:
            rules.append(f"models under {', '.join(policy.trust_remote_code_models)}")
        refuse("PolicyTrustRemoteCodeNotAllowed", "spec.target.trustRemoteCode",
               f"trustRemoteCode runs the model repository's own Python code in the engine pod (allowed: "
               f"{'; '.join(rules) or 'nowhere'}). Set it to false, or ask an administrator to allow this namespace "
               "or model in the chart value policy.allowTrustRemoteCode (namespaces, modelPrefixes; operator flags "
               "--allow-trust-remote-code-namespace, --allow-trust-remote-code-model)")


def check_code_args(c: PolicyCheck) -> None:
    """extraArgs that load code, open pod paths or connect out are allowed by name."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    for i, flag, kind in code_arg_uses(spec):
        if kind == "egress":
            if flag not in policy.egress_args:
                refuse("PolicyEgressArgNotAllowed", f"spec.engine.extraArgs[{i}]",
                       f"{flag} makes the engine connect to an address or URL its value names, out of the pod (allowed "
                       f"such flags: {', '.join(policy.egress_args) or 'none'}). Remove it, or ask an administrator to "
                       "add it to the chart value policy.allowedEgressArgs (operator flag --allowed-egress-arg)")
            continue
        if flag in policy.code_args:
            continue
        what = {"code": "makes the engine import or run code named by its value",
                "file": "makes the engine open a path of the pod's filesystem"}.get(
            kind, "is not yet classified (data/codeflags.json) and counts as loading code")
        refuse("PolicyCodeArgNotAllowed", f"spec.engine.extraArgs[{i}]",
               f"{flag} {what} (allowed such flags: {', '.join(policy.code_args) or 'none'}). Remove it, or ask an "
               "administrator to add it to the chart value policy.allowedCodeArgs (operator flag --allowed-code-arg)")


def check_tolerations(c: PolicyCheck) -> None:
    """Each toleration names an allowed taint key (control-plane keys only by name)."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    pod = spec.pod
    for i, t in enumerate(pod.tolerations):
        path = f"spec.pod.tolerations[{i}]"
        if not t.key:
            refuse("PolicyTolerationNotAllowed", f"{path}.key",
                   "a toleration without a key tolerates every taint (control-plane and NoExecute taints included); "
                   "name the taint's key")
        elif not name_allowed(t.key, policy.toleration_keys, exact_only=t.key in CONTROL_PLANE_KEYS):
            refuse("PolicyTolerationNotAllowed", f"{path}.key",
                   f"toleration key {t.key!r} is not allowed (allowed: {_shown(policy.toleration_keys)}; the "
                   f"control-plane taints {', '.join(CONTROL_PLANE_KEYS)} only when listed by name). Remove it, or "
                   "ask an administrator to add it to the chart value policy.allowedTolerationKeys (operator flag "
                   "--allowed-toleration-key)")


def check_node_selector(c: PolicyCheck) -> None:
    """Each node selector key is allowed (control-plane roles only by name)."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    pod = spec.pod
    for key in pod.node_selector:
        if not name_allowed(key, policy.node_selector_keys, exact_only=key in CONTROL_PLANE_KEYS):
            refuse("PolicyNodeSelectorNotAllowed", f"spec.pod.nodeSelector[{key}]",
                   f"node selector key {key!r} is not allowed (allowed: {_shown(policy.node_selector_keys)}; the "
                   f"control-plane roles {', '.join(CONTROL_PLANE_KEYS)} only when listed by name). Remove it, or ask "
                   "an administrator to add it to the chart value policy.allowedNodeSelectorKeys (operator flag "
                   "--allowed-node-selector-key)")


def check_priority_class(c: PolicyCheck) -> None:
    """The priority class is allowed (system-* only by name)."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    pod = spec.pod
    pc = pod.priority_class_name
    if pc and not name_allowed(pc, policy.priority_classes, exact_only=pc.startswith(SYSTEM_PRIORITY_PREFIX)):
        refuse("PolicyPriorityClassNotAllowed", "spec.pod.priorityClassName",
               f"priority class {pc!r} is not allowed (allowed: {_shown(policy.priority_classes)}; system-* classes "
               "only when listed by name: they preempt cluster-critical pods). Remove it, or ask an administrator to "
               "add it to the chart value policy.allowedPriorityClasses (operator flag --allowed-priority-class)")


def check_api_key(c: PolicyCheck) -> None:
    """The engine API key comes from an allowed Secret and key."""
    spec, policy, refuse = c.spec, c.policy, c.refuse
    key = getattr(spec.engine, "api_key", None)
    if key is not None and key.secret_key_ref.name not in policy.token_secrets:
        allowed = ", ".join(policy.token_secrets) or "none"
        refuse("PolicyApiKeySecretNotAllowed", "spec.engine.apiKey.secretKeyRef.name",
               f"Secret {key.secret_key_ref.name!r} is not one the operator may hand to engines (allowed: {allowed}; the "
               "hub token Secrets): its key would be put into the engine's environment. Use an allowed Secret, or ask "
               "an administrator to add it to the chart value hub.tokenSecrets (operator flag --allowed-token-secret)")
    elif key is not None and not api_key_allowed(policy, key.secret_key_ref.name, key.secret_key_ref.key):
        allowed = ", ".join(policy.api_key_secret_keys) or "none"
        refuse("PolicyApiKeySecretKeyNotAllowed", "spec.engine.apiKey.secretKeyRef.key",
               f"key {key.secret_key_ref.key!r} of Secret {key.secret_key_ref.name!r} is not an engine API key key "
               f"(allowed: {allowed}): any other key of an allowed Secret would be put into the engine's environment "
               "and sent by the operator's canary probe. Use an allowed key, or ask an administrator to add it to the "
               "chart value policy.allowedApiKeySecretKeys (operator flag --allowed-api-key-secret-key)")


def check_cache_node_path(c: PolicyCheck) -> None:
    """A node-path hub cache is one an administrator bound to this namespace."""
    spec, policy, namespace = c.spec, c.policy, c.namespace
    cache = getattr(spec, "cache", None)
    if cache is not None and cache.node_path is not None and not policy.node_path_allowed(cache.node_path, namespace):
        c.out.append(node_path_refusal(cache.node_path, policy, namespace))


def check_model_paths(c: PolicyCheck) -> None:
    """A model named by a pod path is served only from a claim or a bound cache."""
    spec, policy, namespace, refuse = c.spec, c.policy, c.namespace, c.refuse
    for role, src in spec.model_sources():
        if src.pvc is None and is_model_path(src.model) and not model_path_allowed(src.model, spec, policy, namespace):
            refuse("PolicyModelPathNotAllowed", f"spec.{role}.model",
                   f"model {src.model!r} is a path of the engine pod, not a hub repository id (ORG/NAME): it would serve "
                   "whatever lies there (another "
                   "tenant's model in a shared node cache, files of the image). Name a hub repository, or serve the "
                   f"path from a claim (spec.{role}.pvc: the path is then inside the claim); a path under the hub "
                   f"cache ({HF_HOME}/) is served only from a claim cache or a node path an administrator bound to this "
                   "namespace by name (chart value cache.nodePaths.NAME.namespaces, operator flag "
                   "--cache-node-path-namespaces)")


def check_claims(c: PolicyCheck) -> None:
    """Every claim mounted (models, tuning, cache) is allowed by name or label."""
    spec, policy, pvc_labels, refuse = c.spec, c.policy, c.pvc_labels, c.refuse
    claims = [(f"spec.{r}.pvc.claimName", s.pvc.claim_name) for r, s in spec.model_sources()
              if s.pvc is not None]
    if spec.tuning.pvc is not None:
        claims.append(("spec.tuning.pvc.claimName", spec.tuning.pvc.claim_name))
    cache = getattr(spec, "cache", None)
    if cache is not None and cache.pvc is not None:
        claims.append(("spec.cache.pvc.claimName", cache.pvc.claim_name))
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


# The tenancy policy's rules, in the order their refusals are reported.
POLICY_RULES = (check_image, check_service_account, check_token_secrets, check_trust_remote_code, check_code_args,
                check_tolerations, check_node_selector, check_priority_class, check_api_key, check_cache_node_path,
                check_model_paths, check_claims)


def check_policy(spec, policy: TenancyPolicy, pvc_labels: Mapping[str, Mapping[str, str] | None] | None = None,
                 namespace: str | None = None) -> list[Finding]:
    """Policy refusals for a spec. ``pvc_labels``: claim name -> its labels (None: the claim does not exist);
    without it a label rule cannot be decided here and is left to the reconciler. ``namespace``: the CR's
    (the trustRemoteCode namespace rule; None: only the model prefix rule applies)."""
    check = PolicyCheck(spec, policy, pvc_labels, namespace)
    for rule in POLICY_RULES:
        rule(check)
    return check.out


def is_model_path(model: str) -> bool:
    """A model reference the engine reads as a directory of the pod, not a hub repository id: absolute, or more
    '/'-separated segments than ORG/NAME (a relative path from the engine's working directory)."""
    return model.startswith("/") or model.count("/") > 1


def model_path_allowed(model: str, spec, policy: TenancyPolicy, namespace: str | None) -> bool:
    """An absolute model path without a claim is served only from the pod's hub cache mount (``HF_HOME``) and only
    when that cache is this namespace's own: a claim (the claim rule applies to it) or a node path bound to this
    namespace by name. Anything else is a path of the image or of a cache other namespaces write."""
    from .cache import NODE_PATH, PVC, CacheError, plan_cache

    parts = model.split("/")
    if any(p in (".", "..") for p in parts) or not model.startswith(HF_HOME + "/"):
        return False
    try:
        plan = plan_cache(spec, policy, namespace)
    except CacheError:
        return False
    if plan.kind == PVC:
        return True
    return plan.kind == NODE_PATH and policy.node_path_allowed(plan.node_path_name or "", namespace, by_name=True)


def _shown(patterns: tuple[str, ...]) -> str:
    return ", ".join(patterns) or "none"


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
