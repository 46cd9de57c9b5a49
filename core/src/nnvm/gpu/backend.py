"""``GPUBackend``: the stage pipeline every GPU language runs, written once.

A GPU language plugin is a printer, a compiler call and a runtime. Its backend class subclasses this
one and sets three things (Triton's backends list their stages the same way):

- ``printer``: its ``nnvm.gpu.c_printer.CPrinter`` subclass (how the language spells a kernel; any class
  whose ``program(kernels)`` returns the source of all kernels will do);
- ``vectors``: the ``nnvm.tir.vectorize.VectorTarget`` its vector types can express;
- ``library``: its ``nnvm.gpu.library.GPUKernelLibrary`` subclass (the runtime: device calls, export),

and implements ``compile(source, tables, options)``, the driver call that turns the printed source into
that library. ``build_options(target)`` says what of the target the compile needs (CUDA's ``-arch``).

``build`` runs ``stages`` over all its functions, in order:

1. ``gpu``: ``nnvm.gpu.kernels.lower_for_gpu``: thread loops -> launch sizes and thread indices, shared
   buffers at block level, barriers; one launch per root loop nest;
2. ``vectorize``: ``nnvm.tir.vectorize``: vectorized loops -> vector loads, stores, arithmetic;
3. ``print``: ``printer`` writes one source for all kernels;
4. ``compile``: ``compile`` builds it, with each function's launch table (``launch_table``).

``open_foreign`` (for ``nnvm.load``) hands a file to ``library.open_export``.

A new language (WebGPU's WGSL, say) is therefore three small things: the printer subclass, the call
that turns its source into a library (a shader module, a program), and the library's device section
(``GPUKernelLibrary``: allocate, copy, launch). Schedules come with the target key ``gpu``.
"""

from __future__ import annotations

import time
from dataclasses import replace

from nnvm.backend import Backend
from nnvm.gpu.c_printer import CPrinter
from nnvm.gpu.kernels import lower_for_gpu
from nnvm.gpu.library import GPUKernelLibrary, launch_table
from nnvm.target import Target
from nnvm.tir.vectorize import C_FAMILY, VectorTarget, vectorize_loops


class GPUBackend(Backend):
    """Compiles loop programs to one source in a C-family GPU language and hands it to the driver."""

    printer: type[CPrinter] = CPrinter
    vectors: VectorTarget = C_FAMILY
    library: type[GPUKernelLibrary] = GPUKernelLibrary
    stages = (("gpu", "_gpu"), ("vectorize", "_vectorize"), ("print", "_print"), ("compile", "_compile"))

    def build_options(self, target: Target) -> dict:
        """What ``compile`` needs to know of ``target`` (CUDA's architecture, OpenCL's device kind),
        resolved once per build. None by default."""
        return {}

    def make_printer(self, options: dict) -> CPrinter:
        """The printer for one build, given ``build_options`` (WebGPU's carries the device's limits)."""
        return self.printer()

    def compile(self, source: str, tables: list, options: dict) -> GPUKernelLibrary:
        """The library of ``source`` (all kernels of the build, printed) for the launch ``tables`` (one per
        function): the language's compiler and driver. Errors here are the compiler's, as ``Error``s."""
        raise NotImplementedError(f"{type(self).__name__} must say how its source is compiled")

    def build(self, funcs: list, target: Target) -> GPUKernelLibrary:
        state = {"funcs": list(funcs), "options": self.build_options(target), "seconds": {}}
        for stage, method in self.stages:
            start = time.perf_counter()
            state = getattr(self, method)(state)
            state["seconds"][stage] = time.perf_counter() - start
        return state["library"]

    def open_foreign(self, path: str) -> GPUKernelLibrary | None:
        """The library of a file ``library.export`` wrote; None when the file is not this language's."""
        return self.library.open_export(path)

    # -- stages -----------------------------------------------------------------------------------
    def _gpu(self, state: dict) -> dict:
        state["programs"] = [lower_for_gpu(f) for f in state["funcs"]]
        return state

    def _vectorize(self, state: dict) -> dict:
        for prog in state["programs"]:
            prog.kernels = [replace(k, body=vectorize_loops(k.body, self.vectors)) for k in prog.kernels]
        return state

    def _print(self, state: dict) -> dict:
        kernels = [k for prog in state["programs"] for k in prog.kernels]
        state["source"] = self.make_printer(state["options"]).program(kernels)
        return state

    def _compile(self, state: dict) -> dict:
        tables = [launch_table(p) for p in state["programs"]]
        state["library"] = self.compile(state["source"], tables, state["options"])
        return state
