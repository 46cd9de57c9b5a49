"""What a backend plugin registers: a class that compiles loop programs for some target kinds.

The kernel calling convention every backend follows: a kernel named ``name`` is a C function
``int32_t name(void **args)`` whose ``args[k]`` is the data pointer of the k-th parameter buffer of
the ``PrimFunc`` (row-major, contiguous). It returns 0 on success. This is what the core's graph
executor calls, in-process or after ``nnvm.load`` of an exported file.
"""

from __future__ import annotations

from nnvm.target import Target


class KernelLibrary:
    """Compiled kernels in memory. Backends subclass this."""

    def address(self, name: str) -> int:
        """The address of kernel ``name`` (see the calling convention above)."""
        raise NotImplementedError

    def export(self, path: str, blobs: dict) -> None:
        """Write one deployable file holding the kernels plus named byte ``blobs`` (graph, weights).

        For native code this is a shared library exporting ``nnvm_blob_<name>`` (bytes) and
        ``nnvm_blob_<name>_size`` (uint64) for each blob, readable by ``nnvm.runtime.load``.
        """
        raise NotImplementedError

    def source(self) -> str:
        """Human-readable generated code (LLVM IR, OpenCL C, ...), for ``--dump-ir``."""
        return ""


class Backend:
    """A code generator. ``name`` is shown by ``nnvm plugins``; ``target_kinds`` are target names."""

    name: str = "?"
    target_kinds: tuple = ()

    def check_target(self, target: Target) -> None:
        """Raise ``TargetError`` for options this backend does not understand."""

    def build(self, funcs: list, target: Target) -> KernelLibrary:
        """Compile ``PrimFunc``s into one ``KernelLibrary``."""
        raise NotImplementedError

    def host_can_run(self, target: Target) -> bool:
        """Whether kernels for ``target`` execute in this process (False: an emulator is needed)."""
        return True
