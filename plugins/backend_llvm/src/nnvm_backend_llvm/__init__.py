"""The LLVM layer every CPU target shares: code generator, toolchain, kernel library, glue, thread pool.

Not a plugin itself (it registers no backend): the target plugins (``nnvm-backend-llvm-x86``: target
``llvm``; ``nnvm-backend-llvm-arm``: ``aarch64``, ``armv7``; a vendor's, such as
``examples/backend_riscv``) subclass its backends and declare their target facts. Its public surface::

    LLVMBackend          # subclass: resolve(), vector_lanes(), vector_registers(), broadcast_operand(),
                         # blocked_layout(), code_features(), signature_features, tuned_dir
    CrossLLVMBackend     # subclass for a target this host may not run: toolchains = {kind: CrossToolchain}
    CrossToolchain       # triple, default CPU and features, cross gcc, ELF machine and class, qemu
    CodeGenLLVM          # PrimFunc -> LLVM IR, any triple
    LLVMTarget, optimize, resolve_target, feature_switches, host_triple, host_cpu, host_features
    LLVMKernelLibrary    # JIT or export (.so + blobs + the C entry point)
    pool_build           # the thread pool (nnvm_pool.c) compiled by a given (cross) compiler
    run_artifact, build_runner, runtime_sizes   # nnvm-run (the C runtime) under the emulator
"""

from nnvm_backend_llvm.backend import CrossLLVMBackend, LLVMBackend, same_platform
from nnvm_backend_llvm.codegen import CodeGenLLVM
from nnvm_backend_llvm.cross import CrossToolchain
from nnvm_backend_llvm.library import LLVMKernelLibrary, pool_build
from nnvm_backend_llvm.runner import build_runner, run_artifact, runtime_sizes
from nnvm_backend_llvm.toolchain import (
    LLVMTarget,
    feature_switches,
    host_cpu,
    host_features,
    host_triple,
    optimize,
    resolve_target,
)

__all__ = ["CodeGenLLVM", "CrossLLVMBackend", "CrossToolchain", "LLVMBackend", "LLVMKernelLibrary",
           "LLVMTarget", "build_runner", "feature_switches", "host_cpu", "host_features", "host_triple",
           "optimize", "pool_build", "resolve_target", "run_artifact", "runtime_sizes", "same_platform"]
