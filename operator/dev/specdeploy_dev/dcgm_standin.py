"""A stand-in NVIDIA DCGM exporter for tests: ``GET /metrics`` in dcgm-exporter's format.

dcgm-exporter (Go, default counters CSV) writes plain gauges with HELP/TYPE lines and no
``_created`` samples, one series per GPU with the labels ``gpu`` (index), ``UUID``,
``pci_bus_id``, ``device`` (``nvidia<N>``), ``modelName``, ``Hostname``,
``DCGM_FI_DRIVER_VERSION``, and, with its Kubernetes pod mapping on, ``container``,
``namespace`` and ``pod`` of the workload that holds the GPU (GPUs held by no pod carry no
such labels). Served here: ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` and
``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_MEM_COPY_UTIL`` (%), ``DCGM_FI_DEV_POWER_USAGE`` (W).

Values are deterministic, fixed per GPU (no clock): utilisation ``util`` (default 87 + GPU
index), memory ``fb_used`` of ``fb_total`` MiB (defaults: 90% of an 80 GiB H100).

    python -m specdeploy_dev.dcgm_standin --pod demo/qwen3-vllm-0 --pod demo/qwen3-sglang-0 --port 9400
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from .metrics_server import PROMETHEUS_TEXT, MetricsServer

CONTENT_TYPE = PROMETHEUS_TEXT
DRIVER_VERSION = "550.54.15"
H100 = "NVIDIA H100 80GB HBM3"

FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
)


@dataclass(frozen=True)
class Gpu:
    index: int
    hostname: str = "gpu-node-0"
    model_name: str = H100
    namespace: str = ""  # with pod: the workload holding it (Kubernetes mapping)
    pod: str = ""
    container: str = "engine"
    util: float | None = None
    fb_total: float = 81559.0
    fb_used: float | None = None

    @property
    def uuid(self) -> str:
        return f"GPU-{self.hostname.encode().hex()[:8]:0>8}-0000-4000-8000-{self.index:012d}"

    def labels(self) -> dict[str, str]:
        out = {"gpu": str(self.index), "UUID": self.uuid, "pci_bus_id": f"00000000:{0x18 + self.index:02X}:00.0",
               "device": f"nvidia{self.index}", "modelName": self.model_name, "Hostname": self.hostname,
               "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION}
        if self.pod:
            out.update({"container": self.container, "namespace": self.namespace, "pod": self.pod})
        return out

    def values(self) -> dict[str, float]:
        used = self.fb_used if self.fb_used is not None else round(self.fb_total * 0.9)
        util = self.util if self.util is not None else 87.0 + self.index
        return {"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.6),
                "DCGM_FI_DEV_FB_FREE": self.fb_total - used, "DCGM_FI_DEV_FB_USED": used,
                "DCGM_FI_DEV_POWER_USAGE": 350.0 + 3 * util}


def gpus_for_pods(pods: list[tuple[str, str]], gpus_per_pod: int = 1, hostname: str = "gpu-node-0",
                  spare: int = 0) -> list[Gpu]:
    """GPUs of one node: `gpus_per_pod` for each (namespace, pod), then `spare` held by no pod."""
    out, i = [], 0
    for ns, pod in pods:
        for _ in range(gpus_per_pod):
            out.append(Gpu(i, hostname=hostname, namespace=ns, pod=pod))
            i += 1
    out += [Gpu(i + k, hostname=hostname) for k in range(spare)]
    return out


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(gpus: list[Gpu]) -> str:
    lines = []
    for name, doc in FIELDS:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        for g in gpus:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in g.labels().items())
            v = g.values()[name]
            lines.append(f"{name}{{{lab}}} {v:g}")
    return "\n".join(lines) + "\n"


class DcgmStandin(MetricsServer):

    thread_name = "dcgm-standin"
    def __init__(self, gpus: list[Gpu], host: str = "127.0.0.1", port: int = 0):
        self.gpus = list(gpus)
        MetricsServer.__init__(self, host, port)

    def metrics_text(self) -> str:
        return render(self.gpus)

    def serve_metrics(self) -> str:
        return self.metrics_text()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specdeploy_dev.dcgm_standin",
                                description="Serve /metrics like NVIDIA's dcgm-exporter (for tests).")
    p.add_argument("--pod", action="append", default=[], metavar="NAMESPACE/POD",
                   help="a pod holding GPUs (repeat); without any, GPUs carry no Kubernetes labels")
    p.add_argument("--gpus-per-pod", type=int, default=1)
    p.add_argument("--spare", type=int, default=0, help="GPUs held by no pod")
    p.add_argument("--hostname", default="gpu-node-0")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=9400)
    a = p.parse_args(argv)
    pods = [tuple(x.split("/", 1)) for x in a.pod]
    if any(len(x) != 2 for x in pods):
        p.error("--pod takes NAMESPACE/POD")
    gpus = gpus_for_pods(pods, a.gpus_per_pod, a.hostname, a.spare) if pods else \
        [Gpu(i, hostname=a.hostname) for i in range(max(1, a.spare))]
    s = DcgmStandin(gpus, host=a.host, port=a.port).start()
    print(f"DCGM exporter stand-in ({len(gpus)} GPUs) on {s.url}", flush=True)
    from .engine_standin import serve_forever

    return serve_forever(s)


if __name__ == "__main__":
    sys.exit(main())
