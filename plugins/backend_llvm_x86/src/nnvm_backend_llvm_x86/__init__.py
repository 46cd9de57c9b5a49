"""The LLVM backend for x86-64 CPUs (target ``llvm``): the target facts on the shared LLVM layer.

The code generator, toolchain, kernel library and thread pool are ``nnvm_backend_llvm``'s; the
schedules are the core's CPU layer (``nnvm.cpu``, target key ``cpu``), sized by
``X86Backend.vector_lanes`` and with the blocked layout (``X86Backend.blocked_layout``).
"""

from nnvm_backend_llvm_x86.plugin import X86Backend

__all__ = ["X86Backend"]
