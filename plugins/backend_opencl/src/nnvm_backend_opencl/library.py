"""The OpenCL device under the core's GPU library (``nnvm.gpu.library.GPUKernelLibrary``).

The core does the rest: the launch table, weights uploaded once and activations in device arenas
(a run copies inputs in and outputs out), the ``nnvm.build`` callback, and the one-file export (a zip
with ``files/kernels.cl``) that ``nnvm.load`` hands back to this backend to rebuild the program.
"""

from __future__ import annotations

import numpy as np

from nnvm.gpu.library import GPUKernelLibrary, size_text
from nnvm_backend_opencl import runtime

FORMAT = "nnvm-opencl"
SOURCE = "kernels.cl"


class OpenCLKernelLibrary(GPUKernelLibrary):
    """Kernels of one build: one OpenCL program on one device; buffers are ``cl.Buffer``s, views
    sub-buffers, streams command queues."""

    format = FORMAT
    language = "OpenCL"
    text_files = (SOURCE,)

    def __init__(self, source: str, tables: list, device: str = "default", blobs: dict | None = None):
        super().__init__(tables, {SOURCE: source}, {"device": device}, blobs)
        self.device = device
        self.program = runtime.build_program(source, device)
        self._ctx, _, self._dev = runtime.context(device)
        self.base_align = max(self._dev.mem_base_addr_align // 8, 1)

    @classmethod
    def from_files(cls, manifest: dict, files: dict, blobs: dict) -> OpenCLKernelLibrary:
        """The library of an exported file, the program built again for its device, with its blobs."""
        device = manifest["options"].get("device", "default")
        return cls(files[SOURCE], manifest["functions"], device, blobs)

    def describe_launch(self, launch: dict) -> str:
        size = ", ".join(size_text(g, b) for g, b in zip(launch["grid"], launch["block"]))
        return f"global ({size}) local {tuple(launch['block'])}"

    def alloc(self, nbytes: int):
        import pyopencl as cl

        return cl.Buffer(self._ctx, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))

    def free(self, buf) -> None:
        buf.release()

    def view(self, buf, offset: int, nbytes: int):
        return buf if offset == 0 and nbytes == buf.size else buf.get_sub_region(offset, nbytes)

    def copy_in(self, stream, buf, offset: int, host: np.ndarray) -> None:
        import pyopencl as cl

        cl.enqueue_copy(stream, buf, host, dst_offset=offset, is_blocking=False)

    def copy_out(self, stream, host: np.ndarray, buf, offset: int) -> None:
        import pyopencl as cl

        cl.enqueue_copy(stream, host, buf, src_offset=offset, is_blocking=False)

    def new_stream(self):
        import pyopencl as cl

        return cl.CommandQueue(self._ctx, self._dev)

    def synchronize(self, stream) -> None:
        stream.finish()

    def prepare(self, kernel: str, args: list):
        import pyopencl as cl

        k = cl.Kernel(self.program, kernel)  # one object per device arena: set_args is not thread-safe
        k.set_args(*args)
        return k

    def launch(self, stream, prepared, grid: list, block: list) -> None:
        import pyopencl as cl

        cl.enqueue_nd_range_kernel(stream, prepared, tuple(g * b for g, b in zip(grid, block)), tuple(block))

