"""OpenCL C: the core's C-family printer with OpenCL's spelling of the few things that differ."""

from __future__ import annotations

from nnvm.gpu.c_printer import C_SCALAR_TYPES, CPrinter
from nnvm.tir import expr as E

_DIMS = {"x": 0, "y": 1, "z": 2}

# OpenCL C's own type names and builtins (math, common, integer, geometric, relational, sync), which a
# value may not take as its name, on top of C's.
OPENCL_RESERVED = frozenset("""
half uchar ushort uint ulong size_t kernel global local constant private __kernel __global __local
acospi asinpi atanpi cospi exp10 fract mad pown powr rootn sincos sinpi tanpi abs_diff add_sat hadd rhadd
clamp clz mad_hi mad_sat mul_hi rotate sub_sat upsample popcount degrees mix radians step smoothstep sign
cross dot distance length normalize isequal isnotequal isgreater isless isnormal any all bitselect select
shuffle shuffle2 barrier
""".split())

# Rounds a float to the nearest half (what a cast to float16 means), through vstore_half.
ROUND_HALF = """\
float nnvm_round_half(float x) {
  ushort h;
  vstore_half(x, 0, (__private half*)&h);
  return vload_half(0, (__private half*)&h);
}"""


class OpenCLPrinter(CPrinter):
    """``__kernel``/``__global``/``__local``, ``get_group_id``/``get_local_id``, ``vloadN``/``vstoreN``."""

    kernel_prefix = "__kernel void"
    global_qualifier = "__global"
    shared_qualifier = "__local"
    restrict = "restrict"
    scalar_types = {**C_SCALAR_TYPES, "int8": "char", "int64": "long", "uint8": "uchar", "uint16": "ushort",
                    "uint32": "uint", "uint64": "ulong"}
    reserved = CPrinter.reserved | OPENCL_RESERVED
    reserved_prefixes = ("get_", "convert_", "vload", "vstore", "as_", "atomic_", "nnvm_")
    helper_qualifier = ""  # a plain function, like nnvm_round_half

    def preamble(self, source: str) -> str:
        lines = []
        if "half" in source:
            lines.append(ROUND_HALF)
        if "double" in source:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return "\n".join(lines) + ("\n" if lines else "") + super().preamble(source)

    # float16 without cl_khr_fp16 (PoCL's CPU device has none): ``half`` only in global memory, read
    # and written with vload_half / vstore_half, computed in float, rounded to half where cast.
    def type_name(self, dtype: str) -> str:
        base, lanes = E.split_lanes(dtype)
        return super().type_name(E.with_lanes("float32", lanes) if base == "float16" else dtype)

    def storage_type(self, dtype: str) -> str:
        return "half" if dtype == "float16" else super().storage_type(dtype)

    def alloc_type(self, buffer) -> str:
        return "float" if buffer.dtype == "float16" else super().alloc_type(buffer)

    def scalar_load(self, buffer, buf: str, index: str) -> str:
        if buffer.dtype == "float16" and buffer.scope == "global":
            return f"vload_half({index}, {buf})"
        return super().scalar_load(buffer, buf, index)

    def scalar_store(self, buffer, buf: str, index: str, value: str) -> str:
        if buffer.dtype == "float16" and buffer.scope == "global":
            return f"vstore_half({value}, {index}, {buf})"
        return super().scalar_store(buffer, buf, index, value)

    def const(self, c) -> str:
        if E.split_lanes(c.dtype)[0] == "float16":
            return super().const(E.Const(c.value, E.with_lanes("float32", E.split_lanes(c.dtype)[1])))
        return super().const(c)

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

    def broadcast(self, value: str, dtype: str) -> str:
        return f"(({self.type_name(dtype)})({value}))"

    def vector_cast(self, value: str, dtype: str, from_dtype: str) -> str:
        return f"convert_{self.type_name(dtype)}({value})"

    def cast(self, value: str, dtype: str, from_dtype: str) -> str:
        if dtype == "float16":
            return f"nnvm_round_half((float)({value}))"
        return super().cast(value, dtype, from_dtype)
