"""A container program for the dev kubelet tests (run as a local process by the kubelet).

    kubelet_app.py [--host H --port P] [--read FILE]... [--env NAME]... [--write FILE TEXT]
                   [--exit-after S --code N] [--message TEXT] [--unhealthy] [--child FILE]

Prints what it reads and sees, writes the termination message (to $SPECDEPLOY_TERMINATION_LOG,
the pod's terminationMessagePath), serves GET /healthz on H:P (500 with --unhealthy; header X-Pod: the pod's
name), exits
with N after S seconds (or serves until SIGTERM)."""

import argparse
import http.server
import os
import signal
import sys
import threading

p = argparse.ArgumentParser()
p.add_argument("--host")
p.add_argument("--port", type=int)
p.add_argument("--read", action="append", default=[])
p.add_argument("--env", action="append", default=[])
p.add_argument("--write", nargs=2, action="append", default=[])
p.add_argument("--exit-after", type=float)
p.add_argument("--code", type=int, default=0)
p.add_argument("--message")
p.add_argument("--unhealthy", action="store_true")
p.add_argument("--child", help="start a child process that writes 'SIGTERM' to this file when it gets SIGTERM")
a = p.parse_args()

for path, text in a.write:
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}", flush=True)
for path in a.read:
    with open(path) as f:
        print(f"read {path}: {f.read()}", flush=True)
for name in a.env:
    print(f"env {name}={os.environ.get(name, '<unset>')}", flush=True)
print(f"argv {sys.argv[1:]}", flush=True)
if a.message:
    # process mode names the file in the environment; in a container it is at terminationMessagePath
    with open(os.environ.get("SPECDEPLOY_TERMINATION_LOG", "/dev/termination-log"), "w") as f:
        f.write(a.message)

if a.child:  # a worker of the main process (as an engine's): the main process stops it, not the kubelet
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              f"def term(*_):\n    open({a.child!r}, 'w').write('SIGTERM')\n    sys.exit(0)\n"
                              "signal.signal(signal.SIGTERM, term)\n"
                              "while True:\n    time.sleep(1)\n"])
    print(f"child {child.pid}", flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
if a.port:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(500 if a.unhealthy else 200)
            self.send_header("X-Pod", os.environ.get("HOSTNAME", ""))  # which pod answered (through a Service)
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((a.host, a.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening on {a.host}:{server.server_address[1]}", flush=True)
done.wait(a.exit_after)
print("exiting", flush=True)
sys.exit(a.code)
