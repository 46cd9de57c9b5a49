"""OpenCL kernels behind the core's kernel calling convention, and the exported file format.

The runtime (``nnvm.runtime.module.Module``) calls every kernel as ``int32_t f(void **args)`` with
host pointers into its arena and weights. Here each function of the library is such a C callback
(``ctypes``) that copies the arguments its kernels read to device buffers, launches its kernels in
order (a function lowers to several launches when it has several root loop nests) and copies back
what they write. Correctness first: the copies cost bandwidth, not correctness, and keep the runtime
identical for every backend.

Export is a zip file: ``manifest.json`` (the launch table of every function), ``kernels.cl`` (the
OpenCL C source) and one ``blobs/<name>`` entry per blob (graph, weights). ``nnvm.load`` recognises
the zip and asks the ``opencl`` backend to rebuild the library from it.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import tempfile
import zipfile

import numpy as np

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError
from nnvm.runtime.kernel import KERNEL_TYPE
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.visit import walk
from nnvm_backend_opencl import runtime

FORMAT = "nnvm-opencl"
VERSION = 1


def _nbytes(buf: S.Buffer) -> int:
    count = math.prod(int(E.convert(d).value) for d in buf.shape)
    return max(count, 1) * np.dtype("bool" if buf.dtype == "bool" else buf.dtype).itemsize


def launch_table(program) -> dict:
    """The JSON-able description of a ``GPUProgram`` the runtime needs: buffer sizes, which parameters
    are read and written, and each kernel's global and local sizes (x, y, z)."""
    reads: set = set()
    writes: set = set()
    for k in program.kernels:
        walk(k.body, lambda n: reads.add(n.buffer) if isinstance(n, E.Load) else
             writes.add(n.buffer) if isinstance(n, S.Store) else None)
    params = [{"name": b.name, "nbytes": _nbytes(b), "read": b in reads, "written": b in writes}
              for b in program.params]
    temps = [{"name": b.name, "nbytes": _nbytes(b)} for b in program.temporaries]
    launches = []
    for k in program.kernels:
        launch = k.attrs.get("launch", {})
        local = [launch.get(f"threadIdx.{d}", 1) for d in "xyz"]
        blocks = [launch.get(f"blockIdx.{d}", 1) for d in "xyz"]
        launches.append({"kernel": k.name, "global": [b * t for b, t in zip(blocks, local)], "local": local})
    return {"name": program.name, "params": params, "temporaries": temps, "launches": launches}


class OpenCLKernelLibrary(KernelLibrary):
    """Kernels of one build: one OpenCL program; ``address(name)`` is a C callback running function
    ``name`` on the device."""

    def __init__(self, source: str, tables: list, device: str = "default", blobs: dict | None = None):
        self.source_text = source
        self.tables = {t["name"]: t for t in tables}
        self.device = device
        self._blobs = blobs or {}
        self.program = runtime.build_program(source, device)
        self._callbacks: dict = {}
        self._buffers: dict = {}
        self._kernels: dict = {}

    def source(self) -> str:
        """The OpenCL C of every kernel, after a comment listing each function's launches."""
        lines = ["// launches (global size, local size as x, y, z):"]
        for name, table in self.tables.items():
            for launch in table["launches"]:
                lines.append(f"//   {name}: {launch['kernel']} global {tuple(launch['global'])} "
                             f"local {tuple(launch['local'])}")
        return "\n".join(lines) + "\n\n" + self.source_text

    def blob(self, name: str) -> bytes:
        """A blob of the exported file this library was loaded from (``graph``, ``params``)."""
        if name not in self._blobs:
            raise ModelLoadError(f"this OpenCL module has no {name} section")
        return self._blobs[name]

    def address(self, name: str) -> int:
        if name not in self.tables:
            raise Error(f"no kernel named {name!r} in this library (kernels: {', '.join(self.tables)})")
        if name not in self._callbacks:
            def call(args, _name=name):
                try:
                    self.run(_name, args)
                    return 0
                except Exception as exc:  # never let an exception cross the C boundary
                    print(f"nnvm opencl: kernel {_name} failed: {exc}", file=sys.stderr)
                    return 1

            self._callbacks[name] = KERNEL_TYPE(call)
        return ctypes.cast(self._callbacks[name], ctypes.c_void_p).value

    def _device_buffers(self, name: str) -> list:
        import pyopencl as cl

        if name not in self._buffers:
            ctx, _, _ = runtime.context(self.device)
            table = self.tables[name]
            self._buffers[name] = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, size=max(p["nbytes"], 4))
                                   for p in table["params"] + table["temporaries"]]
        return self._buffers[name]

    def _kernel(self, name: str, bufs: list):
        """The kernel object with its arguments set, made once (setting arguments costs Python time)."""
        import pyopencl as cl

        if name not in self._kernels:
            kernel = cl.Kernel(self.program, name)
            kernel.set_args(*bufs)
            self._kernels[name] = kernel
        return self._kernels[name]

    def run(self, name: str, args) -> None:
        """Run function ``name`` on ``args`` (a ``void **`` of host pointers, one per parameter)."""
        import pyopencl as cl

        _, queue, _ = runtime.context(self.device)
        table = self.tables[name]
        ptrs = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
        bufs = self._device_buffers(name)
        hosts = []
        for k, p in enumerate(table["params"]):
            host = np.ctypeslib.as_array((ctypes.c_uint8 * p["nbytes"]).from_address(ptrs[k]))
            hosts.append(host)
            if p["read"]:
                cl.enqueue_copy(queue, bufs[k], host, is_blocking=False)
        for launch in table["launches"]:
            kernel = self._kernel(launch["kernel"], bufs)
            cl.enqueue_nd_range_kernel(queue, kernel, tuple(launch["global"]), tuple(launch["local"]))
        for k, p in enumerate(table["params"]):
            if p["written"]:
                cl.enqueue_copy(queue, hosts[k], bufs[k], is_blocking=False)
        queue.finish()

    # -- export -----------------------------------------------------------------------------------
    def export(self, path: str, blobs: dict) -> None:
        manifest = {"format": FORMAT, "version": VERSION, "device": self.device,
                    "functions": list(self.tables.values()), "blobs": list(blobs)}
        out_dir = os.path.dirname(os.path.abspath(path))
        fd, partial = tempfile.mkstemp(prefix=".nnvm-", suffix=".zip", dir=out_dir)
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("manifest.json", json.dumps(manifest, indent=1))
                z.writestr("kernels.cl", self.source_text)
                for blob, data in blobs.items():
                    z.writestr(f"blobs/{blob}", bytes(data))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def load_library(path: str) -> OpenCLKernelLibrary | None:
    """The library of an exported zip (``OpenCLKernelLibrary.export``), built for its device, with its
    blobs; None when ``path`` is not such a file."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as z:
            if "manifest.json" not in z.namelist():
                return None
            manifest = json.loads(z.read("manifest.json"))
            if manifest.get("format") != FORMAT:
                return None
            source = z.read("kernels.cl").decode()
            blobs = {name: z.read(f"blobs/{name}") for name in manifest.get("blobs", [])}
    except (KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path}: not an exported OpenCL module ({exc})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ModelLoadError(f"{path}: OpenCL module format {manifest.get('format')} "
                             f"v{manifest.get('version')} is not supported (expects {FORMAT} v{VERSION})")
    return OpenCLKernelLibrary(source, manifest["functions"], manifest.get("device", "default"), blobs)
