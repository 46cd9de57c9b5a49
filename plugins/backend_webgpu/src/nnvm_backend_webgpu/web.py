"""``mod.export("model.webgpu")``: a folder a web page fetches once and ``nnvm-webgpu.js`` runs.

The folder holds four files, each fetched once:

- ``manifest.json``: the module's execution plan (inputs, outputs, calls and their arguments: arena
  offsets or weights), each function's launch table, the weights' places in ``weights.bin``, and the
  device limits the kernels need (the runtime requests them, or says which one the adapter lacks);
- ``kernels.wgsl``: every kernel, one WGSL module;
- ``weights.bin``: every weight the plan uses, each at a multiple of 256 bytes (WebGPU's largest
  storage-buffer offset alignment), so the runtime uploads one buffer and binds weights at offsets;
- ``nnvm-webgpu.js``: the runtime (an ES module, no dependencies), a copy of the plugin's own.

Arena offsets are scaled to multiples of 256 as ``DeviceModule`` scales them for a device that asks,
which keeps every overlap of the plan and no other. ``nnvm.load`` reads the folder too (``read_web``).

A module with symbolic dims (``SymbolicModule.export``) writes version 2: the module keeps its symbolic
section (``runtime.symbolic.describe``: dims, bounds, shape programs) and its one plan for the upper
bounds, the launch tables their size terms (``gpu.library.size_term``); the runtime binds each run's dims
as ``DimSignature.bind`` does and evaluates grids and output shapes. A bound module is still version 1,
which ``nnvm-webgpu.js`` of before symbolic dims reads (and refuses version 2 in one sentence). A module
whose kernels bind a buffer read-only or fold a grid's y at run time (a barrier kernel over the dims:
the plugin's ``_fold_at_run``) writes version 3, which a runtime of version 2 refuses in its sentence
rather than making layouts the kernels do not match.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from importlib import resources

import numpy as np

from nnvm.errors import ModelLoadError, reading
from nnvm.gpu.library import bound_tables, check_manifest
from nnvm.graph.ir import load_params, save_params
from nnvm_backend_webgpu.wgsl import pack_plan

WEB_FORMAT = "nnvm-webgpu-web"
WEB_VERSION = 3  # a kernel with read-only bindings or a grid folding y (run-time folds of barrier kernels)
SYMBOLIC_WEB_VERSION = 2  # a module with symbolic dims; one without them is still written as 1, as before
BOUND_WEB_VERSION = 1
ALIGN = 256


def runtime_js() -> str:
    """The path of ``nnvm-webgpu.js``, the JavaScript runtime shipped with this plugin."""
    return str(resources.files("nnvm_backend_webgpu") / "js" / "nnvm-webgpu.js")


def _limits_needed(tables: list, arena: int, weight_bytes: int) -> dict:
    """The WebGPU limits (by JavaScript's names) the module needs, to request from the device: a binding
    is one parameter (or a packed buffer), a buffer the arena or all weights."""
    blocks = [la["block"] for t in tables for la in t["launches"]] or [[1, 1, 1]]
    bindings = [p["nbytes"] for t in tables for p in t["params"] + t["temporaries"]]
    bindings += [sum(-(-n // 4) * 4 for _, _, n in t["packed"]) for t in tables]
    return {
        "maxComputeWorkgroupSizeX": max(b[0] for b in blocks),
        "maxComputeWorkgroupSizeY": max(b[1] for b in blocks),
        "maxComputeWorkgroupSizeZ": max(b[2] for b in blocks),
        "maxComputeInvocationsPerWorkgroup": max(math.prod(b) for b in blocks),
        "maxStorageBuffersPerShaderStage": max([1] + [len(t["params"]) + len(t["temporaries"]) -
                                                      len(t["packed"]) + bool(t["packed"]) for t in tables]),
        "maxStorageBufferBindingSize": -(-max(bindings + [4]) // 4) * 4,
        "maxBufferSize": -(-max(bindings + [arena, weight_bytes, 4]) // 4) * 4,
    }


def _scaled(plan: dict) -> dict:
    """The plan with every arena offset a multiple of ``ALIGN`` (all scaled alike, when one is not)."""
    refs = [d["ref"] for d in plan["inputs"] + plan["outputs"]]
    refs += [r for c in plan["calls"] for r in c["args"]]
    k = -(-ALIGN // 64) if any(r["arena"] % ALIGN for r in refs if "arena" in r) else 1

    def ref(r):
        return {**r, "arena": r["arena"] * k} if "arena" in r else r

    return {**plan, "arena_bytes": plan["arena_bytes"] * k,
            "inputs": [{**d, "ref": ref(d["ref"])} for d in plan["inputs"]],
            "outputs": [{**d, "ref": ref(d["ref"])} for d in plan["outputs"]],
            "calls": [{**c, "args": [ref(r) for r in c["args"]]} for c in plan["calls"]],
            "placements": {n: [p[0] * k, *p[1:]] for n, p in plan.get("placements", {}).items()}}


def export_web(path: str, source: str, tables: list, blobs: dict) -> None:
    """Write the folder ``path`` (created, or its four files replaced) from a module's blobs."""
    meta = json.loads(bytes(blobs["graph"]).decode())
    plan = meta["plan"]
    tables = [{**t, "packed": pack_plan(t["params"], t["temporaries"])} for t in tables]
    # over symbolic dims the sizes are terms of them; the buffers are bound, and the limits asked, at the
    # plan's binding (every dim at its upper bound), which holds every smaller one
    bound = list(bound_tables({t["name"]: t for t in tables}, plan["dims"]).values()) if plan.get("dims") \
        else tables
    plan, params = _scaled(plan), load_params(blobs["params"])
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
    # the lowest version that says what the kernels need: a runtime of before reads what it can run
    needs_3 = any(la.get("read_only") or la.get("fold") == "y" for t in tables for la in t["launches"])
    version = WEB_VERSION if needs_3 else SYMBOLIC_WEB_VERSION if meta.get("symbolic") else BOUND_WEB_VERSION
    manifest = {"format": WEB_FORMAT, "version": version,
                "module": {**meta, "plan": plan}, "functions": tables, "weights": weights,
                "limits": _limits_needed(bound, plan["arena_bytes"], offset)}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    with open(os.path.join(path, "kernels.wgsl"), "w") as f:
        f.write(source)
    with open(os.path.join(path, "weights.bin"), "wb") as f:
        f.write(b"".join(chunks))
    shutil.copyfile(runtime_js(), os.path.join(path, "nnvm-webgpu.js"))


def read_web(path: str) -> tuple | None:
    """``(source, tables, blobs)`` of a folder ``export_web`` wrote, for ``nnvm.load``; None when ``path`` is
    not one. The launch tables are checked as an exported file's are; the plan by the ``Module``."""
    manifest_path = os.path.join(path, "manifest.json")
    if not (os.path.isdir(path) and os.path.isfile(manifest_path)):
        return None
    with reading(path, "not a readable nnvm WebGPU folder"):
        with open(manifest_path) as f:
            manifest = json.load(f)
        if not isinstance(manifest, dict) or manifest.get("format") != WEB_FORMAT:
            return None
        if manifest.get("version") not in (BOUND_WEB_VERSION, SYMBOLIC_WEB_VERSION, WEB_VERSION):
            raise ModelLoadError(f"{path}: WebGPU folder version {manifest.get('version')!r} is not "
                                 f"supported (expects {BOUND_WEB_VERSION} to {WEB_VERSION})")
        check_manifest({"options": {}, "files": [], "blobs": [], "functions": manifest["functions"]})
        with open(os.path.join(path, "kernels.wgsl")) as f:
            source = f.read()
        with open(os.path.join(path, "weights.bin"), "rb") as f:
            data = f.read()
        params = {}
        for name, w in manifest["weights"].items():
            if not (0 <= w["offset"] and w["offset"] + w["nbytes"] <= len(data)):
                raise ModelLoadError(f"{path}: weight {name!r} lies outside weights.bin")
            count = math.prod(w["shape"])
            params[name] = np.frombuffer(data, w["dtype"], count, w["offset"]).reshape(w["shape"])
        graph = json.dumps(manifest["module"]).encode()
    return source, manifest["functions"], {"graph": graph, "params": save_params(params)}
