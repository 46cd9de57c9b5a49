"""The CPU runner: the generated CUDA source compiled as host C++ and run under the core's fiber
scheduler (``nnvm.runtime.fibers``), for machines without an NVIDIA GPU.

The ``.cu`` text is not rewritten: ``host/cuda_shim.h`` is force-included before it (CUDA's keywords,
thread indices, ``__shared__``, ``__syncthreads``, vector structs) and ``host/`` is on the include path
so ``#include <cuda_fp16.h>`` finds a host stand-in. After the source come one trampoline per kernel,
``nnvm_thread_<kernel>(void **args)``, which unpack ``cuLaunchKernel``'s argument array (``args[i]``
points at the i-th argument's value; a device pointer is a host address here) and run one CUDA thread.
"""

from __future__ import annotations

import re
from pathlib import Path

from nnvm.runtime.fibers import HostKernels, compile_host_library
from nnvm_backend_cuda.compiler import kernel_names

HOST_DIR = Path(__file__).with_name("host")
SHIM = HOST_DIR / "cuda_shim.h"

_TRAMPOLINES = """
#include <cstddef>
#include <type_traits>
#include <utility>
template <typename... A, std::size_t... I>
static inline void nnvm_unpack(void (*f)(A...), void **args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>> *>(args[I])...);
}
template <typename... A>
static inline void nnvm_call(void (*f)(A...), void **args) {
  nnvm_unpack(f, args, std::index_sequence_for<A...>{});
}
"""


def _uses_barrier(source: str) -> dict:
    """Kernel name -> whether its body (up to the next kernel) calls ``__syncthreads``."""
    marks = [(m.start(), m.group(1)) for m in re.finditer(
        r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", source)]
    out = {}
    for i, (start, name) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(source)
        out[name] = "__syncthreads" in source[start:end]
    return out


class HostCUDA:
    """The kernels of one CUDA source, built for the CPU; ``launch`` takes ``cuLaunchKernel``'s arguments."""

    def __init__(self, source: str):
        self.source = source
        self.names = kernel_names(source)
        self.barriers = _uses_barrier(source)
        text = source + "\n" + _TRAMPOLINES + "".join(
            f'extern "C" void nnvm_thread_{k}(void **args) {{ nnvm_call({k}, args); }}\n' for k in self.names)
        path = compile_host_library(text, flags=("-std=c++17", "-I", str(HOST_DIR)), headers=(SHIM,),
                                    what="the CUDA kernels")
        self.lib = HostKernels.load(path)

    def launch(self, kernel: str, grid, block, args, *, reversed: bool | None = None) -> None:
        """Run ``kernel`` over ``grid`` x ``block`` with ``args`` (a ``void **``); threads of each block in
        reverse order when ``reversed`` (None: as ``NNVM_GPU_THREAD_ORDER`` says)."""
        self.lib.launch(f"nnvm_thread_{kernel}", args, grid, block, reversed=reversed,
                        fibers=self.barriers.get(kernel, True), kernel=kernel)
