"""The CPU runner: the printed MSL compiled as C++ by clang and run under the core's fiber scheduler
(``nnvm.runtime.fibers``), for every machine that is not a Mac.

The source is not rewritten: its ``#include <metal_stdlib>`` finds ``host/metal_stdlib``, which brings
in ``host/metal_shim.h`` (address spaces as clang address spaces, vectors as ``ext_vector_type``,
``half``, ``threadgroup_barrier``). After the source come one trampoline per kernel,
``nnvm_thread_<kernel>(void **args)``: it checks at compile time that every pointer parameter is a
``device`` or ``constant`` buffer, unpacks the buffers from ``args`` and passes the running fiber's
thread and threadgroup positions as the last two parameters.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from nnvm.errors import Error
from nnvm.runtime.fibers import HostKernels, compile_host_library
from nnvm_backend_metal.printer import kernel_names

HOST_DIR = Path(__file__).with_name("host")
SHIM = HOST_DIR / "metal_shim.h"

_TRAMPOLINES = """
#include <cstddef>
#include <tuple>
#include <utility>
template <typename T> using nnvm_plain = std::remove_cv_t<std::remove_reference_t<T>>;
template <typename... A, std::size_t... I>
static inline void nnvm_unpack(void (*f)(A...), void **args, std::index_sequence<I...>) {
  using P = std::tuple<nnvm_plain<A>...>;
  static_assert((nnvm_is_buffer<std::tuple_element_t<I, P>>::value && ...),
                "a kernel buffer parameter must be in the device or constant address space");
  f(*static_cast<std::tuple_element_t<I, P> *>(args[I])..., nnvm_uint3(nnvm_thread_idx),
    nnvm_uint3(nnvm_block_idx));
}
template <typename... A>
static inline void nnvm_call(void (*f)(A...), void **args) {
  nnvm_unpack(f, args, std::make_index_sequence<sizeof...(A) - 2>{});
}
"""


def clang() -> str:
    """The clang++ that compiles MSL as C++ (g++ cannot: no ``ext_vector_type``, no address spaces)."""
    for name in ("clang++", "clang++-16", "clang++-15", "clang++-14"):
        if shutil.which(name):
            return name
    raise Error("running Metal kernels on the CPU needs clang++ (apt-get install clang; make install does)")


def _uses_barrier(source: str) -> dict:
    """Kernel name -> whether its body (up to the next kernel) calls ``threadgroup_barrier``."""
    marks = [(m.start(), m.group(1)) for m in re.finditer(r"\bkernel\s+void\s+(\w+)\s*\(", source)]
    return {name: "threadgroup_barrier" in source[start:marks[i + 1][0] if i + 1 < len(marks) else None]
            for i, (start, name) in enumerate(marks)}


class HostMetal:
    """The kernels of one MSL source built for the CPU; ``launch`` takes an argument array of buffers."""

    def __init__(self, source: str):
        self.source = source
        self.names = kernel_names(source)
        self.barriers = _uses_barrier(source)
        text = source + "\n" + _TRAMPOLINES + "".join(
            f'extern "C" void nnvm_thread_{k}(void **args) {{ nnvm_call({k}, args); }}\n' for k in self.names)
        path = compile_host_library(text, compiler=clang(), flags=("-I", str(HOST_DIR)),
                                    what="the Metal kernels")
        self.lib = HostKernels.load(path)

    def launch(self, kernel: str, grid, block, args, *, reversed: bool | None = None) -> None:
        """Run ``kernel`` over ``grid`` threadgroups of ``block`` threads with ``args`` (a ``void **``)."""
        self.lib.launch(f"nnvm_thread_{kernel}", args, grid, block, reversed=reversed,
                        fibers=self.barriers.get(kernel, True), kernel=kernel)
