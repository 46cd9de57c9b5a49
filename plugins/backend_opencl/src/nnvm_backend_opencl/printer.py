"""OpenCL C: the core's C-family printer with OpenCL's spelling of the few things that differ."""

from __future__ import annotations

from nnvm.tir import expr as E
from nnvm.tir.c_printer import CPrinter

_DIMS = {"x": 0, "y": 1, "z": 2}


class OpenCLPrinter(CPrinter):
    """``__kernel``/``__global``/``__local``, ``get_group_id``/``get_local_id``, ``vloadN``/``vstoreN``."""

    kernel_prefix = "__kernel void"
    global_qualifier = "__global"
    shared_qualifier = "__local"
    restrict = "restrict"

    def preamble(self, source: str) -> str:
        lines = []
        if "half" in source:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        if "double" in source:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(lines) + ("\n" if lines else "") + super().preamble(source)

    def thread_index(self, tag: str) -> str:
        kind, dim = tag.split(".")
        fn = "get_group_id" if kind == "blockIdx" else "get_local_id"
        return f"{fn}({_DIMS[dim]})"

    def barrier(self) -> str:
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        return f"vload{E.split_lanes(dtype)[1]}(0, {buf} + {base})"

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        return f"vstore{E.split_lanes(dtype)[1]}({value}, 0, {buf} + {base})"

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        if E.split_lanes(dtype)[1] > 1:
            return f"convert_{self.type_name(dtype)}({value})"
        return super().cast(value, dtype, from_dtype)
