"""The ``webgpu`` target: the loop program printed as WGSL, run through WebGPU (wgpu-native).

The stages are the GPU layer's (``nnvm.gpu.backend.GPUBackend``: lower for the GPU, vectorize, print,
compile); this plugin is the language and the driver:

- ``printer.WGSLPrinter`` spells the kernels in WGSL, checked against the device's limits;
- ``compile``: wgpu's shader compiler (naga) validates the module and makes a pipeline per kernel;
- ``library.WebGPUKernelLibrary`` runs them: weights on the device, activations in one arena buffer.

Two WebGPU limits are met in the same way on every device, so a module exported for the browser runs
wherever the kernels' own sizes do: more than 65535 workgroups along x fold into x and y
(``wgsl.fold_grid``; a grid of symbolic dims at run time, ``_fold_at_run``), and a function with more
than 8 buffers reads its last read-only ones through one packed binding (``wgsl.pack_plan``): ``_gpu``
tells the printer, ``compile`` puts both in the launch tables. The device is the first WebGPU adapter
(a GPU, or Mesa's lavapipe on the CPU); with none, compiling stops with one sentence saying what to
install.
"""

from __future__ import annotations

from dataclasses import replace

import nnvm
from nnvm.errors import Error, TargetError
from nnvm.gpu.backend import GPUBackend
from nnvm.gpu.library import launch_table
from nnvm.target import Target
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.vectorize import VectorTarget
from nnvm.tir.visit import walk
from nnvm_backend_webgpu import device as webgpu_device
from nnvm_backend_webgpu.library import WebGPUKernelLibrary
from nnvm_backend_webgpu.printer import WGSLPrinter
from nnvm_backend_webgpu.wgsl import DEFAULT_LIMITS, dims_binding, fold_grid, pack_plan


class WebGPUBackend(GPUBackend):
    """Compiles loop programs to WGSL for any WebGPU device."""

    name = "webgpu"
    target_kinds = ("webgpu",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    printer = WGSLPrinter
    vectors = VectorTarget(lanes=())  # scalar code: the arrays hold scalars, so no vector loads
    library = WebGPUKernelLibrary
    unsupported_dtypes = ("float64",)

    def check_target(self, target: Target) -> None:
        if target.options:
            raise TargetError(f"target {target}: the webgpu target takes no options, got "
                              f"{', '.join(sorted(target.options))}")

    def build_options(self, target: Target) -> dict:
        try:
            return {"limits": webgpu_device.limits()}
        except Error:
            return {"limits": {}}  # no adapter: WebGPU's guaranteed limits

    def make_printer(self, options: dict) -> WGSLPrinter:
        return WGSLPrinter(options["limits"])

    def _gpu(self, state: dict) -> dict:
        """The GPU layer's lowering, then each kernel told which parameters it reads packed (``attrs``),
        and no buffer larger than the device binds."""
        state = super()._gpu(state)
        limit = {**DEFAULT_LIMITS, **state["options"]["limits"]}["max_storage_buffer_binding_size"]
        for prog in state["programs"]:
            table = launch_table(prog)
            packed = pack_plan(table["params"], table["temporaries"])
            sizes = [(p["name"], p["nbytes"]) for p in table["params"] + table["temporaries"]]
            for name, nbytes in sizes + [("(packed)", sum(-(-n // 4) * 4 for _, _, n in packed))]:
                if isinstance(nbytes, int) and nbytes > limit:  # one over symbolic dims: checked at run
                    raise Error(f"{prog.name}: buffer {name} has {nbytes} bytes, more than this WebGPU "
                                f"device binds (max_storage_buffer_binding_size = {limit})")
            dims = dims_binding(table["params"], table["temporaries"], packed)
            folded = [_fold_at_run(k, dims) for k in prog.kernels]
            prog.kernels = [replace(k, attrs={**k.attrs, "packed": packed}) for k in folded]
        return state

    def compile(self, source: str, tables: list, options: dict) -> WebGPUKernelLibrary:
        # the grids as the printer folded them, the parameters as it packed them
        tables = [{**t, "launches": [{**la, "grid": fold_grid(la["grid"])} for la in t["launches"]],
                   "packed": pack_plan(t["params"], t["temporaries"])} for t in tables]
        return WebGPUKernelLibrary(source, tables)


def _fold_at_run(kernel, dims_binding: int):
    """``kernel`` marked to fold its grid at run time (``wgsl.fold_at_run``) where one axis is an expression
    of the dims and the next is free: x into y (``fold`` True), or y into z (``"y"``, a dense's row tiles),
    its ``blockIdx`` loop of that axis guarded by the grid's extent, so the spare workgroups of a folded
    dispatch do nothing. A barrier under that guard needs it uniform in WGSL's sense: the kernel then
    binds its dims (``dims_binding``) read-only (``attrs["read_only"]``), since WGSL counts a load from a
    read-only module-scope variable as uniform and one from a read-write buffer as not. A grid of the dims
    along z stays unfolded; a binding needing more than 65535 of its workgroups is refused at launch."""
    launch = kernel.attrs.get("launch", {})
    symbolic = [d for d in "xyz" if not isinstance(launch.get(f"blockIdx.{d}", 1), int)]
    if symbolic == ["x"] and "blockIdx.y" not in launch and "blockIdx.z" not in launch:
        axis, fold = "x", True
    elif symbolic == ["y"] and "blockIdx.z" not in launch:
        axis, fold = "y", "y"
    else:
        return kernel
    blocks = launch[f"blockIdx.{axis}"]

    def guard(s):  # None: no such blockIdx loop under the dims' reads (then the kernel stays unfolded)
        if isinstance(s, S.For) and s.thread_tag == f"blockIdx.{axis}":
            return replace(s, body=S.IfThenElse(s.var < blocks, s.body, None))
        if isinstance(s, (S.LetStmt, S.Allocate, S.AttrStmt, S.For)):
            body = guard(s.body)
            return None if body is None else replace(s, body=body)
        return None

    body = guard(kernel.body)
    if body is None:
        return kernel
    barriers: list = []
    walk(kernel.body, lambda n: barriers.append(n) if isinstance(n, E.Call) and n.name == "barrier" else None)
    read_only = {"read_only": [dims_binding]} if barriers else {}
    return replace(kernel, body=body, attrs={**kernel.attrs, **read_only,
                                             "launch": {**launch, "fold": fold}})


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(WebGPUBackend())
