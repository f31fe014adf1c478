"""Record the tuned fused-MoE file names an installed engine looks up, into its flag snapshot.

Run with the engine's own venv python (by run.sh): calls the engine's ``get_config_file_name``
for a fixed table of (E, N, dtype, block_shape) on a B300 and an H200 device name and stores the
results under "tuning_file_names". The runtime's naming is tested against these in every CI run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest import mock

# (E, N, dtype, block_shape) cases: bf16, fp8 per-tensor, fp8 block, int4 (Kimi K2.x at TP 8)
CASES = [(128, 768, None, None), (256, 256, "fp8_w8a8", None), (256, 256, "fp8_w8a8", [128, 128]),
         (384, 256, "int4_w4a16", None)]
DEVICES = ["NVIDIA B300 SXM6 AC", "NVIDIA H200 NVL", "NVIDIA RTX PRO 6000 Blackwell Server Edition"]


def names(engine: str) -> list[dict]:
    out = []
    if engine == "sglang":
        import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config as m

        for dev in DEVICES:
            with mock.patch.object(m, "get_device_name", lambda dev=dev: dev.replace(" ", "_")):
                for e, n, dtype, block in CASES:
                    out.append({"device": dev, "E": e, "N": n, "dtype": dtype, "block_shape": block,
                                "file": m.get_config_file_name(e, n, dtype, block)})
    else:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import vllm.model_executor.layers.fused_moe.fused_moe as m
        import vllm.platforms as plat
        from vllm.utils import platform_utils as pu

        for dev in DEVICES:
            # the name torch reports; vLLM's own code turns it into the file form
            with mock.patch.object(plat.current_platform, "get_device_name", lambda device_id=0, dev=dev: dev):
                pu.get_device_name_as_file_name.cache_clear()
                for e, n, dtype, block in CASES:
                    out.append({"device": dev, "E": e, "N": n, "dtype": dtype, "block_shape": block,
                                "file": m.get_config_file_name(e, n, dtype, block)})
            pu.get_device_name_as_file_name.cache_clear()
    return out


def main(engine: str, snapshot: str) -> int:
    snap_path = Path(snapshot)
    doc = json.loads(snap_path.read_text())
    doc["tuning_file_names"] = names(engine)
    snap_path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(f"tuning_names: {len(doc['tuning_file_names'])} {engine} file names recorded in {snap_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
