"""Create latency of the stand-in API server against raw kmock 0.8.

    python -m specdeploy_dev.bench_apiserver [--creates 200]

The server runs on its own event loop in a background thread; the client is aiohttp on the main
thread over loopback (one keep-alive connection, sequential requests), creating ConfigMaps.
Stand-in: measured with 0, 1000 and 5000 ConfigMaps already stored (preloaded in-process).
Raw kmock 0.8: measured after 0 and 300 earlier requests (its cost grows with its request history,
so the measured creates themselves also add to it).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

import aiohttp

from specdeploy_dev import apiserver

CMS = "/api/v1/namespaces/default/configmaps"


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def _measure(url: str, prefix: str, count: int) -> list[float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(url) as session:
        for i in range(count):
            started = time.perf_counter()
            async with session.post(CMS, json=_cm(f"{prefix}-{i}")) as resp:
                await resp.read()
                if resp.status not in (200, 201):
                    raise RuntimeError(f"create failed: {resp.status}")
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


async def _warm(url: str, count: int) -> None:
    async with aiohttp.ClientSession(url) as session:
        for i in range(count):
            async with session.post(CMS, json=_cm(f"warm-{i}")) as resp:
                await resp.read()


def _summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return f"median {statistics.median(ordered):7.2f} ms   p99 {p99:7.2f} ms"


class _RawKmockThread:
    def __init__(self) -> None:
        import kmock
        self._kmock = kmock
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.url = ""
        threading.Thread(target=lambda: self._loop.run_until_complete(self._main()), daemon=True).start()
        if not self._ready.wait(20):
            raise RuntimeError("raw kmock did not start")

    async def _main(self) -> None:
        kmock = self._kmock
        self._stop = asyncio.Event()
        emulator = kmock.KubernetesEmulator()
        emulator.resources["v1/configmaps"] = kmock.ResourceInfo(kind="ConfigMap", namespaced=True)
        async with emulator, kmock.Server(emulator) as server:
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdeploy_dev.bench_apiserver")
    parser.add_argument("--creates", type=int, default=200, help="creates measured per point (default 200)")
    args = parser.parse_args(argv)
    n = args.creates

    print(f"create latency of a ConfigMap over loopback HTTP, {n} sequential creates per point")
    with apiserver.serve_in_thread() as srv:
        stored = 0
        for target in (0, 1000, 5000):
            def preload(emu: apiserver.Emulator, start: int = stored, stop: int = target) -> None:
                for i in range(start, stop):
                    emu.create_object(_cm(f"pre-{i}"))
            srv.call(preload)
            stored = target
            latencies = asyncio.run(_measure(srv.url, f"m{target}", n))
            stored += n
            print(f"stand-in     {target:5d} objects stored    {_summary(latencies)}")

    for earlier in (0, 300):
        raw = _RawKmockThread()
        try:
            if earlier:
                asyncio.run(_warm(raw.url, earlier))
            latencies = asyncio.run(_measure(raw.url, "m", n))
            print(f"raw kmock    {earlier:5d} earlier requests  {_summary(latencies)}")
        finally:
            raw.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
