"""``specdeploy operator run``: the operator process, its listeners, leader election and tenancy policy
from the command line."""

from __future__ import annotations

import argparse

from .common import Parser, UsageError, epilog, need_action


def default_bind_address(env=None) -> str:
    """Where the operator listens when no --bind-address/--metrics-bind-address is given: every
    IPv4 interface inside a pod (KUBERNETES_SERVICE_HOST is set in every container), loopback
    outside a cluster (a laptop running the operator against a kubeconfig exposes nothing)."""
    import os

    env = os.environ if env is None else env
    return "0.0.0.0" if env.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


def _bind_address(flag: str, value: str | None) -> str:
    import ipaddress

    if value is None:
        return default_bind_address()
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0 for every IPv4 "
                         "interface, :: for every interface)") from None
    return value


def cmd_operator_run(args: argparse.Namespace) -> int:
    import os

    from ..controller.main import run
    from ..controller.webhooks import DEFAULT_PORT, WebhookSettings

    bind = _bind_address("--bind-address", args.bind_address)
    metrics_bind = _bind_address("--metrics-bind-address", args.metrics_bind_address)
    if not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port} is not a port (1-65535, or 0 to disable)")
    given = [f for f, v in (("--webhook-port", args.webhook_port), ("--webhook-cert-dir", args.webhook_cert_dir),
                            ("--webhook-service", args.webhook_service),
                            ("--webhook-configuration", args.webhook_configuration)) if v]
    if given and not args.webhook:
        raise UsageError(f"{', '.join(given)}: the admission webhook server is off; add --webhook to serve it")
    port = 0
    if args.webhook:
        port = args.webhook_port if args.webhook_port is not None else _env_int("SPECDEPLOY_WEBHOOK_PORT", DEFAULT_PORT)
        if not 0 < port < 65536:
            raise UsageError(f"--webhook-port {port} is not a port (1-65535)")
    if args.webhook_cert_dir and not os.path.isdir(args.webhook_cert_dir):
        raise UsageError(f"--webhook-cert-dir {args.webhook_cert_dir}: not a directory")
    for svc in args.webhook_service or []:
        if svc.count(".") != 1 or not all(svc.split(".")):
            raise UsageError(f"--webhook-service {svc!r}: expected NAME.NAMESPACE")
    webhook = WebhookSettings(
        port=port, addr=bind, cert_dir=args.webhook_cert_dir, services=args.webhook_service or [],
        secret=args.webhook_secret, configuration=args.webhook_configuration,
        namespace=args.operator_namespace or os.environ.get("POD_NAMESPACE") or None)
    return run(args.namespace or [], args.all_namespaces, kubeconfig=args.kubeconfig, metrics_port=args.metrics_port,
               metrics_addr=metrics_bind, bind_addr=bind, liveness=args.liveness, resync_seconds=args.resync_seconds,
               verbose=args.verbose, webhook=webhook, policy=_policy_args(args),
               election=_election_args(args, webhook.namespace), health_port=args.health_port)


def _election_args(args: argparse.Namespace, operator_namespace: str | None):
    from ..controller.leader import LeaderElectionSettings
    from ..core.lease import LeaseTiming

    if args.health_port and not 0 < args.health_port < 65536:
        raise UsageError(f"--health-port {args.health_port} is not a port (1-65535, or 0 to disable)")
    timing = LeaseTiming(args.lease_duration, args.renew_deadline, args.retry_period)
    if not args.leader_elect:
        return LeaderElectionSettings(enabled=False, timing=timing)
    problems = timing.problems()
    if problems:
        raise UsageError("; ".join(problems))
    ns = args.leader_election_namespace or operator_namespace
    if not ns:
        raise UsageError("--leader-elect needs the namespace of the Lease: set --leader-election-namespace, "
                         "--operator-namespace or $POD_NAMESPACE")
    return LeaderElectionSettings(enabled=True, namespace=ns, name=args.leader_election_id, timing=timing)


def _policy_args(args: argparse.Namespace):
    from ..api.types import NAME_PATTERN
    from ..core.policy import TenancyPolicy

    import re

    names = {"--engine-service-account": [args.engine_service_account] if args.engine_service_account else [],
             "--allowed-service-account": args.allowed_service_account or [],
             "--allowed-token-secret": args.allowed_token_secret or [], "--allowed-pvc": args.allowed_pvc or []}
    for flag, values in names.items():
        for v in values:
            if not re.fullmatch(NAME_PATTERN, v):
                raise UsageError(f"{flag} {v!r} is not a Kubernetes object name")
    label = None
    if args.pvc_label:
        key, eq, value = args.pvc_label.partition("=")
        if not eq or not key:
            raise UsageError(f"--pvc-label {args.pvc_label!r}: expected KEY=VALUE")
        label = (key, value)
    node_paths = []
    for item in getattr(args, "cache_node_path", None) or []:
        name, eq, path = item.partition("=")
        if not eq or not re.fullmatch(NAME_PATTERN, name) or len(name) > 63:
            raise UsageError(f"--cache-node-path {item!r}: expected NAME=PATH with NAME a lowercase name")
        if not path.startswith("/") or any(seg in (".", "..") for seg in path.split("/")) or path.rstrip("/") == "":
            raise UsageError(f"--cache-node-path {item!r}: PATH must be an absolute directory without '.' or '..' "
                             "segments, and not /")
        node_paths.append((name, path))
    default = None
    if getattr(args, "default_cache", None) and args.default_cache != "emptyDir":
        kind, slash, ref = args.default_cache.partition("/")
        if kind not in ("pvc", "nodePath") or not slash or not re.fullmatch(NAME_PATTERN, ref):
            raise UsageError(f"--default-cache {args.default_cache!r}: expected emptyDir, pvc/CLAIM or nodePath/NAME")
        if kind == "nodePath" and ref not in dict(node_paths):
            raise UsageError(f"--default-cache {args.default_cache!r}: no --cache-node-path named {ref!r}")
        default = (kind, ref)
    kwargs: dict = {}
    if args.allowed_image_prefix:
        kwargs["image_prefixes"] = tuple(args.allowed_image_prefix)
    for flag, attr, field in (("--allowed-token-secret-key", "allowed_token_secret_key", "token_secret_keys"),
                              ("--allow-trust-remote-code-namespace", "allow_trust_remote_code_namespace",
                               "trust_remote_code_namespaces"),
                              ("--allow-trust-remote-code-model", "allow_trust_remote_code_model",
                               "trust_remote_code_models"),
                              ("--allowed-code-arg", "allowed_code_arg", "code_args"),
                              ("--allowed-toleration-key", "allowed_toleration_key", "toleration_keys"),
                              ("--allowed-node-selector-key", "allowed_node_selector_key", "node_selector_keys"),
                              ("--allowed-priority-class", "allowed_priority_class", "priority_classes")):
        values = getattr(args, attr, None)
        if values is None:
            continue  # the policy's default
        for v in values:
            if any(ch.isspace() or ch in "\x00=," for ch in v) or len(v) > 316:
                raise UsageError(f"{flag} {v!r}: expected a name without spaces, '=' or ','")
            if attr == "allowed_code_arg" and not v.startswith("--"):
                raise UsageError(f"{flag} {v!r}: expected an engine flag such as --chat-template")
        kwargs[field] = tuple(v for v in values if v)  # '' alone: none allowed
    return TenancyPolicy(engine_service_account=args.engine_service_account,
                         service_accounts=tuple(args.allowed_service_account or ()),
                         token_secrets=tuple(args.allowed_token_secret or ()), pvcs=tuple(args.allowed_pvc or ()),
                         pvc_label=label, cache_node_paths=tuple(node_paths), default_cache=default, **kwargs)


def add_policy_args(pol) -> None:
    """The tenancy policy flags (core/policy.py): the operator's, and ``specdeploy render``'s."""
    pol.add_argument("--allowed-image-prefix", action="append", metavar="PREFIX",
                     help="image repository engine pods may run (repeatable; default: the project's runtime images, "
                     "ghcr.io/specdeploy/runtime)")
    pol.add_argument("--engine-service-account", metavar="NAME",
                     help="ServiceAccount engine pods run as when spec.pod.serviceAccountName is unset (always allowed)")
    pol.add_argument("--allowed-service-account", action="append", metavar="NAME",
                     help="another ServiceAccount spec.pod.serviceAccountName may name (repeatable; default: none)")
    pol.add_argument("--allowed-token-secret", action="append", metavar="NAME",
                     help="Secret a tokenSecretRef may name (repeatable; default: none; chart value hub.tokenSecrets)")
    pol.add_argument("--allowed-pvc", action="append", metavar="NAME", help="claim a spec may mount (repeatable)")
    pol.add_argument("--pvc-label", metavar="KEY=VALUE", help="claims carrying this label may be mounted too")
    pol.add_argument("--cache-node-path", action="append", metavar="NAME=PATH",
                     help="a node-local directory engine pods may use as their hub cache, named NAME "
                     "(spec.cache.nodePath: NAME); repeatable; chart value cache.nodePaths")
    pol.add_argument("--default-cache", metavar="emptyDir|pvc/CLAIM|nodePath/NAME",
                     help="hub cache of engine pods whose spec has no cache (default emptyDir); chart value "
                     "cache.default")
    pol.add_argument("--allowed-token-secret-key", action="append", metavar="KEY",
                     help="key of an allowed token Secret a tokenSecretRef may name (repeatable; default: token; chart "
                     "value hub.tokenSecretKeys)")
    pol.add_argument("--allow-trust-remote-code-namespace", action="append", metavar="NS",
                     help="namespace whose SpeculativeDeployments may set spec.target.trustRemoteCode ('*': every "
                     "namespace; repeatable; default: none; chart value policy.allowTrustRemoteCode.namespaces)")
    pol.add_argument("--allow-trust-remote-code-model", action="append", metavar="PREFIX",
                     help="model prefix (e.g. moonshotai/) whose targets may set spec.target.trustRemoteCode (repeatable; "
                     "default: none; chart value policy.allowTrustRemoteCode.modelPrefixes)")
    pol.add_argument("--allowed-code-arg", action="append", metavar="FLAG",
                     help="engine flag that loads code or opens pod files (data/codeflags.json, e.g. --chat-template) "
                     "spec.engine.extraArgs may use (repeatable; default: none; chart value policy.allowedCodeArgs)")
    pol.add_argument("--allowed-toleration-key", action="append", metavar="KEY|PREFIX*|*",
                     help="taint key spec.pod.tolerations may name (repeatable; default: *, the control-plane taints "
                     "only when listed by name; '' alone: none; chart value policy.allowedTolerationKeys)")
    pol.add_argument("--allowed-node-selector-key", action="append", metavar="KEY|PREFIX*|*",
                     help="label key spec.pod.nodeSelector may name (repeatable; default: *, the control-plane roles "
                     "only when listed by name; '' alone: none; chart value policy.allowedNodeSelectorKeys)")
    pol.add_argument("--allowed-priority-class", action="append", metavar="NAME|PREFIX*|*",
                     help="priority class spec.pod.priorityClassName may name (repeatable; default: *, system-* only "
                     "when listed by name; '' alone: none; chart value policy.allowedPriorityClasses)")


def _env_int(name: str, default: int) -> int:
    import os

    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


def add_parsers(sub) -> None:
    op = sub.add_parser("operator", help="the operator",
                        description="The operator process. The chart runs `specdeploy operator run` with its flags.",
                        epilog=epilog(["specdeploy operator run --namespace models",
                                       "specdeploy operator run -A --kubeconfig ~/.kube/config"],
                                      ok=None))
    osub = op.add_subparsers(dest="operator_command", metavar="ACTION", parser_class=Parser)
    op.set_defaults(func=need_action(op, "an action: run"))
    orun = osub.add_parser("run", help="run the operator (in-cluster, or against KUBECONFIG)",
                           description="Run the operator: watch SpeculativeDeployments, check each pair, render and "
                           "apply the engine workload, write status, monitor acceptance, serve /metrics and the "
                           "admission webhooks. Runs until SIGTERM.",
                           epilog=epilog(["specdeploy operator run --namespace models --webhook-port 0",
                                          "specdeploy operator run -A --allowed-pvc models --cache-node-path "
                                          "nvme=/mnt/nvme/hf --default-cache nodePath/nvme"],
                                         ok="stopped cleanly (SIGTERM)", findings="the operator stopped on an error"))
    scope = orun.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", metavar="NS", help="watch this namespace (repeatable; default: default)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace")
    orun.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: in-cluster, else $KUBECONFIG)")
    orun.add_argument("--metrics-port", type=int, default=8080, metavar="N", help="port of /metrics (0: off)")
    orun.add_argument("--metrics-bind-address", metavar="ADDR",
                      help="address /metrics listens on (default: 127.0.0.1 outside a cluster, 0.0.0.0 in a pod; "
                      "the chart passes 0.0.0.0)")
    orun.add_argument("--bind-address", metavar="ADDR",
                      help="address the admission webhook server and the health probes (--health-port) listen on "
                      "(default: 127.0.0.1 outside a cluster, 0.0.0.0 in a pod; the chart passes 0.0.0.0)")
    orun.add_argument("--liveness", metavar="URL", help="kopf liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    orun.add_argument("--resync-seconds", type=float, metavar="S", help="full resync period (default 60)")
    orun.add_argument("--webhook", action="store_true",
                      help="serve the admission webhooks /validate and /mutate over HTTPS (off by default: only an API "
                      "server with the chart's webhook configurations calls them; the chart turns it on)")
    orun.add_argument("--webhook-port", type=int, metavar="N",
                      help="HTTPS port of the webhook server (with --webhook; default 9443, or $SPECDEPLOY_WEBHOOK_PORT)")
    orun.add_argument("--webhook-cert-dir", metavar="DIR",
                      help="serve tls.crt/tls.key from DIR (e.g. a cert-manager Secret); caBundle is then left alone. "
                      "Default: a self-signed certificate kept in --webhook-secret")
    orun.add_argument("--webhook-service", action="append", metavar="NAME.NAMESPACE",
                      help="the webhook Service: the self-signed certificate's DNS names (NAME, NAME.NS, NAME.NS.svc, "
                      "NAME.NS.svc.cluster.local)")
    orun.add_argument("--webhook-secret", default="specdeploy-webhook-tls", metavar="NAME",
                      help="Secret in the operator's namespace holding the self-signed CA and certificate")
    orun.add_argument("--webhook-configuration", metavar="NAME",
                      help="Validating- and MutatingWebhookConfiguration whose caBundle the operator keeps current "
                      "(self-signed mode)")
    orun.add_argument("--operator-namespace", metavar="NS",
                      help="the operator's namespace (default: $POD_NAMESPACE); without one the self-signed "
                      "certificate is kept in memory only")
    orun.add_argument("--health-port", type=int, default=0, metavar="N",
                      help="port of /healthz and /readyz (ready: webhook serving and caches synced; 0: off)")
    le = orun.add_argument_group("leader election (several replicas: one reconciles, every one serves the webhooks; "
                                 "docs/concepts/high-availability.md)")
    le.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=False,
                    help="hold a coordination.k8s.io/v1 Lease before reconciling (default: off, a single process; "
                    "the chart turns it on)")
    le.add_argument("--leader-election-namespace", metavar="NS",
                    help="namespace of the Lease (default: --operator-namespace, else $POD_NAMESPACE)")
    le.add_argument("--leader-election-id", default="specdeploy-operator", metavar="NAME", help="name of the Lease")
    le.add_argument("--lease-duration", type=float, default=15.0, metavar="S",
                    help="how long followers wait after the last renewal they saw before taking over (default 15)")
    le.add_argument("--renew-deadline", type=float, default=10.0, metavar="S",
                    help="the leader stops writing when it has not renewed for this long (default 10; "
                    "< --lease-duration)")
    le.add_argument("--retry-period", type=float, default=2.0, metavar="S",
                    help="time between tries to acquire or renew (default 2)")
    add_policy_args(orun.add_argument_group("tenancy policy (what a SpeculativeDeployment may make the operator do)"))
    orun.add_argument("--verbose", "-v", action="store_true")
    orun.set_defaults(func=cmd_operator_run)
