"""The LLVM backend for x86-64 CPUs (target ``llvm``), and the LLVM code generator other CPUs reuse.

The schedules are not here: the core's CPU layer (``nnvm.cpu``, target key ``cpu``) serves this target,
sized by ``LLVMBackend.vector_lanes`` and with the blocked layout (``LLVMBackend.blocked_layout``).

This package's public surface, what another LLVM backend (the Arm plugin) builds on::

    LLVMBackend          # subclass: resolve(), c_compiler(), vector_lanes(), blocked_layout()
    CodeGenLLVM          # PrimFunc -> LLVM IR, any triple
    LLVMTarget, optimize, resolve_target   # target machines, option parsing, the O3 pipeline
    LLVMKernelLibrary    # JIT or export (.so + blobs)
    pool_build           # the thread pool (nnvm_pool.c) compiled by a given (cross) compiler
"""

from nnvm_backend_llvm_x86.codegen import CodeGenLLVM
from nnvm_backend_llvm_x86.library import LLVMKernelLibrary, pool_build
from nnvm_backend_llvm_x86.plugin import LLVMBackend
from nnvm_backend_llvm_x86.toolchain import LLVMTarget, optimize, resolve_target

__all__ = ["CodeGenLLVM", "LLVMBackend", "LLVMKernelLibrary", "LLVMTarget", "optimize", "pool_build",
           "resolve_target"]
