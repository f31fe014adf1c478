"""A stand-in engine for the weight-cache pod test (run by the dev kubelet as ``vllm``).

    cache_engine.py serve MODEL [--host H] [--port P] [--speculative-config JSON] [other engine flags]

Loads every model it is given from the hub cache the way the engine would (``snapshot_download`` under
``HF_HOME``), which with ``HF_HUB_OFFLINE=1`` (the rendered env when the preflight filled the cache) reads
the cache only; prints what it found; then serves ``GET /health`` and ``/metrics`` until SIGTERM."""

import http.server
import json
import os
import signal
import sys

args = sys.argv[1:]
if args and args[0] == "serve":
    args = args[1:]
model = args[0]


def flag(name):
    return args[args.index(name) + 1] if name in args else None


models = [model]
spec = flag("--speculative-config")
if spec:
    models.append(json.loads(spec)["model"])
import huggingface_hub as hh  # noqa: E402 - after HF_HOME/HF_HUB_OFFLINE are in the environment

for m in models:
    path = hh.snapshot_download(m, revision=flag("--revision") if m == model else None)
    files = sorted(os.listdir(path))
    print(f"loaded {m} from {path}: {len(files)} files (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')})", flush=True)


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer((flag("--host") or "127.0.0.1", int(flag("--port") or 8000)), H)
signal.signal(signal.SIGTERM, lambda *_: (srv.shutdown(), sys.exit(0)))
srv.serve_forever()
