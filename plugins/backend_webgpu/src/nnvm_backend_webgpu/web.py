"""``mod.export("model.webgpu")``: a folder a web page fetches once and ``nnvm-webgpu.js`` runs.

The folder holds four files, each fetched once:

- ``manifest.json``: the execution plan (inputs, outputs, calls with their arguments), each function's
  launch table, the weights' places in ``weights.bin`` and the device limits the kernels need;
- ``kernels.wgsl``: every kernel, one WGSL module;
- ``weights.bin``: every weight the kernels read, each at a multiple of 256 bytes (WebGPU's largest
  storage-buffer offset alignment), so the runtime uploads one buffer and binds weights at offsets;
- ``nnvm-webgpu.js``: the runtime (an ES module, no dependencies), a copy of the plugin's own.

Arena offsets are scaled to multiples of 256 the way ``DeviceModule`` scales them for a device that
asks, which keeps every overlap of the plan and no other.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources

import numpy as np

from nnvm.graph.ir import load_params

WEB_FORMAT = "nnvm-webgpu-web"
WEB_VERSION = 1
ALIGN = 256


def runtime_js() -> str:
    """The path of ``nnvm-webgpu.js``, the JavaScript runtime shipped with this plugin."""
    return str(resources.files("nnvm_backend_webgpu") / "js" / "nnvm-webgpu.js")


def _limits_needed(tables: list, plan: dict, arena: int, weights: dict) -> dict:
    """The WebGPU limits (by JavaScript's names) the module needs, to request from the device."""
    launches = [la for t in tables for la in t["launches"]]
    biggest = max([arena] + [w["nbytes"] for w in weights.values()] +
                  [p["nbytes"] for t in tables for p in t["temporaries"]])
    return {
        "maxComputeWorkgroupSizeX": max([1] + [la["block"][0] for la in launches]),
        "maxComputeWorkgroupSizeY": max([1] + [la["block"][1] for la in launches]),
        "maxComputeWorkgroupSizeZ": max([1] + [la["block"][2] for la in launches]),
        "maxComputeInvocationsPerWorkgroup": max([1] + [int(np.prod(la["block"])) for la in launches]),
        "maxStorageBuffersPerShaderStage": max([1] + [len(t["params"]) + len(t["temporaries"])
                                                      for t in tables]),
        "maxStorageBufferBindingSize": -(-biggest // 4) * 4,
        "maxBufferSize": -(-biggest // 4) * 4,
    }


def export_web(path: str, source: str, tables: list, blobs: dict) -> None:
    """Write the folder ``path`` (created, or its four files replaced)."""
    meta = json.loads(bytes(blobs["graph"]).decode())
    plan, params = meta["plan"], load_params(blobs["params"])
    scale = -(-ALIGN // 64) if any(r["arena"] % ALIGN for r in _arena_refs(plan)) else 1
    used = {r["param"] for c in plan["calls"] for r in c["args"] if "param" in r}
    used |= {d["ref"]["param"] for d in plan["outputs"] if "param" in d["ref"]}
    weights, chunks, offset = {}, [], 0
    for name in sorted(used):
        arr = np.ascontiguousarray(params[name])
        weights[name] = {"offset": offset, "nbytes": arr.nbytes, "dtype": str(arr.dtype),
                         "shape": list(arr.shape)}
        size = -(-max(arr.nbytes, 4) // ALIGN) * ALIGN
        chunks.append(arr.tobytes() + b"\0" * (size - arr.nbytes))
        offset += size

    def ref(r):
        return {"arena": r["arena"] * scale, "nbytes": r["nbytes"]} if "arena" in r else {"param": r["param"]}

    manifest = {
        "format": WEB_FORMAT, "version": WEB_VERSION, "target": meta["target"],
        "inputs": [{**d, "ref": ref(d["ref"])} for d in plan["inputs"]],
        "outputs": [{**d, "ref": ref(d["ref"])} for d in plan["outputs"]],
        "calls": [{"function": c["kernel"], "args": [ref(r) for r in c["args"]]} for c in plan["calls"]],
        "arena_bytes": plan["arena_bytes"] * scale,
        "functions": tables, "weights": weights,
        "limits": _limits_needed(tables, plan, plan["arena_bytes"] * scale, weights),
    }
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(path, "kernels.wgsl"), "w") as f:
        f.write(source)
    with open(os.path.join(path, "weights.bin"), "wb") as f:
        f.write(b"".join(chunks))
    shutil.copyfile(runtime_js(), os.path.join(path, "nnvm-webgpu.js"))


def _arena_refs(plan: dict) -> list:
    descs = [d["ref"] for d in plan["inputs"] + plan["outputs"]]
    return [r for r in descs + [r for c in plan["calls"] for r in c["args"]] if "arena" in r]

