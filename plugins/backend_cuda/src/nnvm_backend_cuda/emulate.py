"""The CPU runner: the generated CUDA source compiled as host C++ and run under the core's fiber
scheduler (``nnvm.runtime.host_kernels``), for machines without an NVIDIA GPU.

The ``.cu`` text is not rewritten: ``host/cuda_shim.h`` is force-included before it (CUDA's keywords,
thread indices, ``__shared__``, ``__syncthreads``, vector structs) and ``host/`` is on the include path
so ``#include <cuda_fp16.h>`` finds a host stand-in. After the source come one trampoline per kernel,
``nnvm_thread_<kernel>(void **args)``, which unpack ``cuLaunchKernel``'s argument array (``args[i]``
points at the i-th argument's value; a device pointer is a host address here) and run one CUDA thread.
"""

from __future__ import annotations

from pathlib import Path

from nnvm.runtime.host_kernels import HostSource
from nnvm_backend_cuda.compiler import KERNEL

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


class HostCUDA(HostSource):
    """The kernels of one CUDA source, built for the CPU; ``launch`` takes ``cuLaunchKernel``'s arguments."""

    def __init__(self, source: str):
        super().__init__(source, kernel=KERNEL, barrier="__syncthreads", trampolines=_TRAMPOLINES,
                         what="the CUDA kernels", flags=("-std=c++17", "-I", str(HOST_DIR)), headers=(SHIM,))
