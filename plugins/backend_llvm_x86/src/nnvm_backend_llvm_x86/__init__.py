"""The LLVM backend for x86-64 CPUs (target ``llvm``), and the LLVM code generator other CPUs reuse.

The Arm plugin builds on the same pieces with its own triple, CPU and C compiler::

    from nnvm_backend_llvm_x86.plugin import LLVMBackend          # subclass: resolve(), c_compiler()
    from nnvm_backend_llvm_x86.codegen import CodeGenLLVM         # PrimFunc -> LLVM IR, any triple
    from nnvm_backend_llvm_x86.toolchain import LLVMTarget, optimize, resolve_target
    from nnvm_backend_llvm_x86.library import LLVMKernelLibrary   # JIT or export (.so + blobs)
"""
