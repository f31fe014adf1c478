"""Run the real ``prometheus`` binary on loopback for tests: config, start, query, stop.

    with Prometheus([scrape_job("demo/vllm", "127.0.0.1:8000")], rule_files=[rules]) as prom:
        prom.wait_until(lambda: prom.query("up == 1"), deadline_s=30, what="targets up")
        prom.query('specdeploy:acceptance_length:rate5m')   # -> the result list

The harness writes a ``prometheus.yml`` (global scrape/evaluation interval, the scrape
jobs, the rule files) into a temporary directory that also holds the TSDB, picks a free
loopback port, starts ``prometheus`` (Debian's package: ``.ci/install-prometheus``), waits
for ``/-/ready`` with a deadline, and talks to the HTTP API (``/api/v1/query``,
``/api/v1/series``, ``/api/v1/rules``, ``/api/v1/alerts``, ``/api/v1/targets``) with the
standard library only. ``stop()`` sends SIGTERM, waits, then SIGKILL; the directory goes
with it. Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from .procs import stop_process

T = TypeVar("T")


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


def find_exe(name: str = "prometheus") -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def scrape_job(name: str, *targets: str, labels: dict[str, str] | None = None, honor_labels: bool = False,
               metrics_path: str = "/metrics", interval: str | None = None) -> dict:
    """One scrape_configs entry with static targets (host:port) and extra target labels."""
    job: dict[str, Any] = {"job_name": name, "metrics_path": metrics_path, "honor_labels": honor_labels,
                           "static_configs": [{"targets": list(targets), "labels": dict(labels or {})}]}
    if interval:
        job["scrape_interval"] = interval
        job["scrape_timeout"] = interval
    return job


class Prometheus:
    def __init__(self, scrape_configs: list[dict], rule_files: list[str | Path] = (), *,
                 scrape_interval: str = "1s", evaluation_interval: str = "1s", exe: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, log_level: str = "warn", start_timeout_s: float = 60):
        self.scrape_configs = list(scrape_configs)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.scrape_interval, self.evaluation_interval = scrape_interval, evaluation_interval
        self.exe = exe or find_exe()
        self.host, self._port = host, port
        self.log_level = log_level
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.dir: Path | None = None
        self._log = None
        self.port = 0

    # ------------------------------------------------------------- config
    def config(self) -> dict:
        return {"global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                           "evaluation_interval": self.evaluation_interval},
                "rule_files": [str(p) for p in self.rule_files],
                "scrape_configs": self.scrape_configs}

    # ------------------------------------------------------------- lifecycle
    def start(self) -> "Prometheus":
        if self.proc is not None:
            return self
        if not self.exe:
            raise PrometheusError("prometheus is not installed (run .ci/install-prometheus)")
        self.dir = Path(tempfile.mkdtemp(prefix="specdeploy-prometheus-"))
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        last = ""
        for _attempt in range(3):  # a free port can be taken between probe and bind: retry
            self.port = self._port or free_port(self.host)
            log_path = self.dir / "prometheus.log"
            self._log = open(log_path, "wb")
            self.proc = subprocess.Popen(
                [self.exe, f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address={self.host}:{self.port}", f"--log.level={self.log_level}",
                 "--storage.tsdb.retention.time=1h", "--web.enable-lifecycle"],
                stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir,
                start_new_session=True)
            try:
                self._wait_ready()
                return self
            except PrometheusError as e:
                last = str(e)
                self._terminate()
                if self._port:
                    break
        self.stop()
        raise PrometheusError(last)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited ({self.proc.returncode if self.proc else '?'}): {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after {self.start_timeout_s:g}s: {self.log()}")

    def _terminate(self) -> None:
        p, self.proc = self.proc, None
        if p is not None:
            stop_process(p, 15)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        self._terminate()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log(self, tail: int = 4000) -> str:
        if self.dir is None or not (self.dir / "prometheus.log").exists():
            return ""
        return (self.dir / "prometheus.log").read_text(errors="replace")[-tail:]

    def __enter__(self) -> "Prometheus":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------- HTTP API
    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path>; returns `data`; raises PrometheusError on an error status."""
        items = []
        for k, v in params.items():
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                items.append((k, str(x)))
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(items)}" if items else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read())
            except ValueError:
                raise PrometheusError(f"{path}: HTTP {e.code}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query: the result list (vector: [{metric, value}], scalar: one entry)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", **params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def series(self, *match: str, start: float | None = None) -> list[dict]:
        params: dict[str, Any] = {"match[]": list(match)}
        if start is not None:
            params["start"] = start
        return self.api("series", **params)

    def label_values(self, label: str, *match: str) -> list[str]:
        params: dict[str, Any] = {"match[]": list(match)} if match else {}
        return self.api(f"label/{urllib.parse.quote(label)}/values", **params)

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def rules(self) -> list[dict]:
        return self.api("rules")["groups"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def wait_until(self, probe: Callable[[], T], deadline_s: float, what: str, interval_s: float = 0.5) -> T:
        """Call probe until it returns something truthy (returned), or fail at the deadline
        with the last value or error."""
        end = time.monotonic() + deadline_s
        last: Any = None
        while True:
            try:
                got = probe()
                if got:
                    return got
                last = got
            except PrometheusError as e:
                last = e
            if self.proc is None or self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited while waiting for {what}: {self.log()}")
            if time.monotonic() >= end:
                raise PrometheusError(f"no {what} after {deadline_s:g}s (last: {last!r})")
            time.sleep(interval_s)
