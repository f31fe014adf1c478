"""A loopback HTTP server serving /metrics and /health: the plumbing the stand-ins share."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    """Subclasses set ``host``/``_port`` (via ``__init__``) and implement ``serve_metrics() -> str``."""

    thread_name = "metrics-standin"
    content_type = PROMETHEUS_TEXT

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self._port = host, port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests = 0

    def serve_metrics(self) -> str:
        raise NotImplementedError

    def serve_post(self, path: str, body: bytes) -> tuple[int, bytes, str] | None:
        """(status, body, content type) for a POST, or None: 404. None by default."""
        return None

    def serve_get(self, path: str) -> tuple[int, bytes, str] | None:
        """(status, body, content type) for a GET other than /metrics and /health, or None: 404."""
        return None

    def authorize(self, path: str, headers) -> tuple[int, bytes, str] | None:
        """The refusal of a request to ``path`` (GET other than /metrics and /health, or POST), or None: allowed."""
        return None

    def start(self):
        if self._server is not None:
            return self
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    standin.requests += 1
                    self._send(200, standin.serve_metrics().encode(), standin.content_type)
                elif path == "/health":
                    self._send(200, b"", "text/plain")
                else:
                    answer = standin.authorize(path, self.headers) or standin.serve_get(path)
                    self._send(*(answer or (404, b"not found\n", "text/plain")))

            def do_POST(self) -> None:  # noqa: N802 - subclasses that serve requests (serve_post) answer
                path = self.path.split("?", 1)[0]
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(min(n, 1 << 20)) if n > 0 else b""
                answer = standin.authorize(path, self.headers) or standin.serve_post(path, body)
                if answer is None:
                    self._send(404, b"not found\n", "text/plain")
                else:
                    self._send(*answer)

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, self._port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
