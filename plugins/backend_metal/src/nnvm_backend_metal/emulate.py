"""The CPU runner: the printed MSL compiled as C++ by clang and run under the core's fiber scheduler
(``nnvm.runtime.host_kernels``), for every machine that is not a Mac.

The source is not rewritten: its ``#include <metal_stdlib>`` finds ``host/metal_stdlib``, which brings
in ``host/metal_shim.h`` (address spaces as clang address spaces, vectors as ``ext_vector_type``,
``half``, ``threadgroup_barrier``). After the source come one trampoline per kernel,
``nnvm_thread_<kernel>(void **args)``: it checks at compile time that every pointer parameter is a
``device`` or ``constant`` buffer, unpacks the buffers from ``args`` and passes the running fiber's
thread and threadgroup positions as the last two parameters.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nnvm.errors import Error
from nnvm.runtime.host_kernels import HostSource
from nnvm_backend_metal.printer import KERNEL

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


class HostMetal(HostSource):
    """The kernels of one MSL source built for the CPU; ``launch`` takes an argument array of buffers
    and runs ``grid`` threadgroups of ``block`` threads."""

    def __init__(self, source: str):
        super().__init__(source, kernel=KERNEL, barrier="threadgroup_barrier", trampolines=_TRAMPOLINES,
                         what="the Metal kernels", compiler=clang(), flags=("-I", str(HOST_DIR)))
