"""``specdeploy operator run``: the operator process, its listeners, leader election and tenancy policy
from the command line."""

from __future__ import annotations

import argparse

from .common import Parser, UsageError, add_policy_args, epilog, need_action, policy_args

_policy_args = policy_args  # the tenancy policy from the flags (cli/common.py; render parses the same flags)


def default_bind_address(env=None) -> str:
    """Where the operator listens when no --bind-address/--metrics-bind-address is given: every
    IPv4 interface inside a pod (KUBERNETES_SERVICE_HOST is set in every container), loopback
    outside a cluster (a laptop running the operator against a kubeconfig exposes nothing)."""
    import os

    env = os.environ if env is None else env
    return "0.0.0.0" if env.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


def _bind_address(flag: str, value: str | None, env=None) -> str:
    import ipaddress

    if value is None:
        return default_bind_address(env)
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not an IP address (e.g. 127.0.0.1, 0.0.0.0 for every IPv4 "
                         "interface, :: for every interface)") from None
    return value


def port_in_use(addr: str, port: int) -> str | None:
    """Why ADDR:PORT cannot be listened on because another process holds it, or None. Bound as the servers bind
    (SO_REUSEADDR), so a port in TIME_WAIT is free and only a listener makes it busy."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "in use (another process listens there: `ss -ltnp` names it)"
            return None  # another reason (an address not on this host yet): the server's own bind reports it
    return None


def _check_ports(ports: list[tuple[str, str, int]]) -> None:
    """Each listener's port is free before anything starts: one line and exit 2, never a traceback and an
    operator left idle without its endpoints."""
    for flag, addr, port in ports:
        if port:
            why = port_in_use(addr, port)
            if why:
                raise UsageError(f"{flag} {port} on {addr}: {why}; stop that process or pass another {flag}")


def cmd_operator_run(args: argparse.Namespace) -> int:
    from ..controller.main import run

    return run(operator_settings(args))


def operator_settings(args: argparse.Namespace, env=None):
    """The one settings object (controller/settings.py) from the flags over the environment defaults (``env``:
    os.environ); a flag or an environment default that cannot be used is a UsageError naming it."""
    import os
    from dataclasses import replace

    from ..controller import settings as S
    from ..controller.webhooks import DEFAULT_PORT

    env = os.environ if env is None else env
    try:
        base = S.from_env(env)
    except S.SettingsError as e:
        raise UsageError(str(e)) from None
    bind = _bind_address("--bind-address", args.bind_address, env)
    metrics_bind = _bind_address("--metrics-bind-address", args.metrics_bind_address, env)
    if not 0 <= args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port} is not a port (1-65535, or 0 to disable)")
    given = [f for f, v in (("--webhook-port", args.webhook_port), ("--webhook-cert-dir", args.webhook_cert_dir),
                            ("--webhook-service", args.webhook_service),
                            ("--webhook-configuration", args.webhook_configuration),
                            ("--webhook-client-ca", args.webhook_client_ca),
                            ("--webhook-client-ca-from-cluster", args.webhook_client_ca_from_cluster),
                            ("--webhook-client-optional", args.webhook_client_optional),
                            ("--webhook-client-name", args.webhook_client_name)) if v]
    if given and not args.webhook:
        raise UsageError(f"{', '.join(given)}: the admission webhook server is off; add --webhook to serve it")
    port = 0
    if args.webhook:
        port = args.webhook_port if args.webhook_port is not None else S.webhook_port_default(env, DEFAULT_PORT)
        if not 0 < port < 65536:
            raise UsageError(f"--webhook-port {port} is not a port (1-65535)")
    if args.webhook_cert_dir and not os.path.isdir(args.webhook_cert_dir):
        raise UsageError(f"--webhook-cert-dir {args.webhook_cert_dir}: not a directory")
    if args.webhook_client_ca and not os.path.isfile(args.webhook_client_ca):
        raise UsageError(f"--webhook-client-ca {args.webhook_client_ca}: not a file")
    if args.webhook_client_ca and args.webhook_client_ca_from_cluster:
        raise UsageError("--webhook-client-ca and --webhook-client-ca-from-cluster: give one source of the client CA")
    for flag, value in (("--webhook-client-name", args.webhook_client_name),
                        ("--webhook-client-optional", args.webhook_client_optional)):
        if value and not (args.webhook_client_ca or args.webhook_client_ca_from_cluster):
            raise UsageError(f"{flag}: needs --webhook-client-ca or --webhook-client-ca-from-cluster (the CA that "
                             "signed the caller's certificate)")
    for svc in args.webhook_service or []:
        if svc.count(".") != 1 or not all(svc.split(".")):
            raise UsageError(f"--webhook-service {svc!r}: expected NAME.NAMESPACE")
    webhook = replace(
        base.webhook, port=port, addr=bind, cert_dir=args.webhook_cert_dir, services=args.webhook_service or [],
        secret=args.webhook_secret, configuration=args.webhook_configuration,
        client_ca=args.webhook_client_ca, client_names=args.webhook_client_name or [],
        client_ca_from_cluster=args.webhook_client_ca_from_cluster, client_optional=args.webhook_client_optional,
        namespace=args.operator_namespace or base.webhook.namespace)
    election = _election_args(args, webhook.namespace)
    _check_ports([("--metrics-port", metrics_bind, args.metrics_port), ("--webhook-port", bind, port),
                  ("--health-port", bind, args.health_port or 0)])
    listed = _engine_network_policy(args)
    if listed is None:  # not on the command line: the environment default
        listed = S.engine_ingress_from_env(env)
    reconciler = replace(base.reconciler, policy=_policy_args(args),
                         engine_network_policy=S.engine_network_policy(listed, webhook.namespace))
    if args.resync_seconds is not None:
        reconciler = replace(reconciler, resync_seconds=args.resync_seconds)
    return replace(
        base, namespaces=() if args.all_namespaces else tuple(args.namespace or ["default"]),
        kubeconfig=args.kubeconfig or None, metrics_port=args.metrics_port, metrics_addr=metrics_bind,
        health_port=args.health_port or 0, health_addr=bind, liveness=args.liveness, verbose=args.verbose,
        reconciler=reconciler, webhook=webhook, election=election)


def _engine_network_policy(args: argparse.Namespace) -> list[str] | None:
    from ..api.types import NAME_PATTERN

    import re

    listed = args.engine_ingress_namespace or []
    if listed and not args.engine_network_policy:
        raise UsageError("--engine-ingress-namespace: needs --engine-network-policy")
    for ns in listed:
        if not re.fullmatch(NAME_PATTERN, ns) or len(ns) > 63 or "." in ns:
            raise UsageError(f"--engine-ingress-namespace {ns!r} is not a namespace name")
    return listed if args.engine_network_policy else None


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
    orun.add_argument("--webhook-client-ca", metavar="FILE",
                      help="serve the webhooks only to callers with a client certificate signed by a CA in FILE (PEM): "
                      "the API server, configured to present one (docs/concepts/security.md, \"Webhook callers\")")
    orun.add_argument("--webhook-client-ca-from-cluster", action="store_true",
                      help="like --webhook-client-ca, with the front-proxy CA the cluster publishes (ConfigMap "
                      "kube-system/extension-apiserver-authentication, key requestheader-client-ca-file; names: "
                      "requestheader-allowed-names unless --webhook-client-name is given), read at start-up")
    orun.add_argument("--webhook-client-name", action="append", metavar="NAME",
                      help="with a client CA: and whose certificate names NAME (common name or DNS SAN; "
                      "repeatable; default: any certificate the CA signed)")
    orun.add_argument("--webhook-client-optional", action="store_true",
                      help="with a client CA: callers without a verified certificate (or with another name) are "
                      "served too, from the object they sent alone (no ConfigMap or hub cache is read for them); "
                      "default: they are refused")
    orun.add_argument("--operator-namespace", metavar="NS",
                      help="the operator's namespace (default: $POD_NAMESPACE); without one the self-signed "
                      "certificate is kept in memory only")
    orun.add_argument("--engine-network-policy", action="store_true",
                      help="give every SpeculativeDeployment a NetworkPolicy: its engine pods take connections only "
                      "from pods of its namespace, of the operator's and of --engine-ingress-namespace; and every "
                      "SpeculativeBenchmark variant one admitting only its client Job's pods and those namespaces "
                      "(docs/concepts/security.md, \"Engine network\")")
    orun.add_argument("--engine-ingress-namespace", action="append", metavar="NS",
                      help="with --engine-network-policy: pods of this namespace may reach engine pods too (e.g. the "
                      "monitoring namespace; repeatable)")
    orun.add_argument("--health-port", type=int, default=0, metavar="N",
                      help="port of /healthz and /readyz (ready: webhook serving, its caBundle verifying the certificate, caches "
                           "synced; 0: off)")
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
