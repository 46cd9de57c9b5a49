"""Metal Shading Language: the core's C-family printer with Metal's spelling of what differs.

Buffers are ``device T* name [[buffer(i)]]``; the kernels take no scalars (every value they need is a
buffer or a constant in the text), so no ``constant`` argument struct is printed. Thread positions are
the last two parameters, ``uint3 nnvm_tid [[thread_position_in_threadgroup]]`` and
``uint3 nnvm_gid [[threadgroup_position_in_grid]]``; ``threadgroup`` arrays are hoisted to the top of
the kernel (Metal allows them at kernel scope only). Vectors have operators and overloaded math as in
OpenCL; loads and stores go through ``packed_floatN`` (no 16-byte alignment is assumed). Fast math is
on by default in Metal, so INF and NaN are bit patterns through ``as_type<>`` (and the native library
is built with fast math off). What Metal lacks (``erf``, vector conversions, which ``float4(int4)``
spells but clang reads as a bit cast) is printed as helpers on first use. Metal has no ``double``: a
float64 value is an error naming the kernel, as is a kernel beyond Apple's limits (``LIMITS``).
"""

from __future__ import annotations

import math
import re

from nnvm.gpu.c_printer import C_SCALAR_TYPES, CPrinter
from nnvm.tir import expr as E
from nnvm.tir import stmt as S

METAL_RESERVED = frozenset("""
kernel vertex fragment device constant threadgroup thread half uchar ushort uint ulong metal as_type
mem_flags threadgroup_barrier simdgroup_barrier select clamp mix saturate step smoothstep sign fract
precise fast dot cross length normalize distance any all packed_float4 float4 float3 float2 int4 uint3
""".split())
_LANES = "xyzw"

# Apple's limits for every Metal GPU family (Metal feature set tables): buffers bound to a kernel,
# threadgroup memory and threads per threadgroup.
LIMITS = {"buffers": 31, "threadgroup_bytes": 32 * 1024, "threads": 1024}

# erf to float precision: a Taylor series near zero, Numerical Recipes' erfc (fractional error
# < 1.2e-7) elsewhere.
ERF = """\
float nnvm_erf(float x) {
  float a = fabs(x);
  if (a < 0.5f) {
    float z = x * x;
    return x * (1.1283791671f + z * (-0.3761263890f + z * (0.1128379167f + z * (-0.0268661706f
             + z * (0.0052239776f + z * -0.0008548327f)))));
  }
  float t = 1.0f / (1.0f + 0.5f * a);
  float c = t * exp(-a * a - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f
            + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f
            + t * (-0.82215223f + t * 0.17087277f)))))))));
  return x >= 0.0f ? 1.0f - c : c - 1.0f;
}"""


class MetalPrinter(CPrinter):
    """``kernel void``, ``device``/``threadgroup``, position parameters, ``threadgroup_barrier``."""

    kernel_prefix = "kernel void"
    global_qualifier = "device"
    shared_qualifier = "threadgroup"
    helper_qualifier = "inline"  # Metal's C++: file-scope functions need no ``static``
    scalar_types = {**C_SCALAR_TYPES, "int8": "char", "int64": "long", "uint8": "uchar", "uint16": "ushort",
                    "uint32": "uint", "uint64": "ulong"}
    reserved = CPrinter.reserved | METAL_RESERVED
    reserved_prefixes = ("nnvm_", "simd_", "quad_", "atomic_")
    inf_literal = "as_type<float>(0x7f800000u)"
    nan_literal = "as_type<float>(0x7fc00000u)"

    def __init__(self):
        super().__init__()
        self._n_buffers = 0
        self._hoisted: list = []

    # -- kernels ----------------------------------------------------------------------------------
    def kernel(self, func) -> str:
        self._n_buffers, self._hoisted, self._kernel = 0, [], func.name
        launch = func.attrs.get("launch", {}) if hasattr(func, "attrs") else {}
        threads = math.prod(int(launch.get(f"threadIdx.{d}", 1)) for d in "xyz")
        if len(func.params) > LIMITS["buffers"]:
            raise self._error(f"{len(func.params)} buffers (Metal binds at most {LIMITS['buffers']})")
        if threads > LIMITS["threads"]:
            raise self._error(f"{threads} threads per threadgroup (Metal allows at most {LIMITS['threads']})")
        text = super().kernel(func)
        tg = sum(_bytes(line) for line in self._hoisted)
        if tg > LIMITS["threadgroup_bytes"]:
            raise self._error(f"{tg} bytes of threadgroup memory (Metal allows at most "
                              f"{LIMITS['threadgroup_bytes']})")
        head, body = text.split("\n", 1)
        return "\n".join([head, *self._hoisted, body])

    def param(self, buffer, name: str) -> str:
        self._n_buffers += 1
        return f"device {self.storage_type(buffer.dtype)}* {name} [[buffer({self._n_buffers - 1})]]"

    def extra_params(self, func) -> list:
        return ["uint3 nnvm_tid [[thread_position_in_threadgroup]]",
                "uint3 nnvm_gid [[threadgroup_position_in_grid]]"]

    def thread_index(self, tag: str) -> str:
        kind, dim = tag.split(".")
        return f"{'nnvm_gid' if kind == 'blockIdx' else 'nnvm_tid'}.{dim}"

    def barrier(self) -> str:
        return "threadgroup_barrier(mem_flags::mem_threadgroup);"

    def stmt(self, s, ind: int, out: list) -> None:
        if isinstance(s, S.Allocate) and s.buffer.scope == "shared":
            lines: list = []
            super().stmt(S.Allocate(s.buffer, S.Evaluate(E.Call("noop", [], "int32"))), 1, lines)
            self._hoisted.append(lines[0])  # the declaration, at kernel scope
            self.stmt(s.body, ind, out)
            return
        super().stmt(s, ind, out)

    def preamble(self, source: str) -> str:
        head = "#include <metal_stdlib>\nusing namespace metal;\n"
        return head + super().preamble(source)

    # -- types -----------------------------------------------------------------------------------
    def type_name(self, dtype: str) -> str:
        if E.split_lanes(dtype)[0] == "float64":
            raise self._error("float64 is not supported: Metal has no double (compute this operator in "
                              "float32)")
        return super().type_name(dtype)

    def const(self, c: E.Const) -> str:
        self.type_name(c.dtype)  # float64 constants are errors too
        return super().const(c)

    # -- calls -----------------------------------------------------------------------------------
    def call(self, name: str, args: list, dtype: str) -> str:
        fn = self.math_names.get(name, name)
        if fn in ("max", "min") and E.split_lanes(dtype)[1] == 1:
            # Metal's integer max/min take one type: mixed widths (long, int) are ambiguous, so both cast
            t = self.type_name(dtype)
            args = [f"(({t})({a}))" for a in args]
        if fn == "erf":
            fn = self.helper("nnvm_erf", f"{self.helper_qualifier} {ERF}")
            if E.split_lanes(dtype)[1] > 1:
                return self._lanewise("nnvm_erf", args, dtype)
        return super().call(fn, args, dtype)

    def _binop(self, e: E.BinOp) -> str:
        if e.op == "pow" and not E.is_float(e.a.dtype) and E.split_lanes(e.dtype)[1] > 1:
            t = self.type_name(e.dtype)  # vectors: no double to compute an integer power in, float
            return f"(({t})pow((float)({self.expr(e.a)}), (float)({self.expr(e.b)})))"
        return super()._binop(e)

    def _lanewise(self, fn: str, args: list, dtype: str) -> str:
        """``fn`` applied lane by lane through an overload printed once per vector type."""
        vt, name = self.type_name(dtype), fn
        lanes = E.split_lanes(dtype)[1]
        params = ", ".join(f"{vt} a{i}" for i in range(len(args)))
        body = " ".join(f"r.{c} = {fn}({', '.join(f'a{i}.{c}' for i in range(len(args)))});"
                        for c in _LANES[:lanes])
        self.helper(f"{name}({params})",
                    f"{self.helper_qualifier} {vt} {name}({params}) {{ {vt} r; {body} return r; }}")
        return f"{name}({', '.join(args)})"

    # -- vectors: operators and overloads as in OpenCL, packed loads and stores -------------------
    def vector_type(self, scalar: str, lanes: int) -> str:
        return f"{scalar}{lanes}"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        return f"{self.type_name(dtype)}(*(device packed_{self.type_name(dtype)}*)({buf} + {base}))"

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        vt = self.type_name(dtype)
        return f"*(device packed_{vt}*)({buf} + {base}) = packed_{vt}({value})"

    def broadcast(self, value: str, dtype: str) -> str:
        return f"{self.type_name(dtype)}({value})"

    def vector_cast(self, value: str, dtype: str, from_dtype: str) -> str:
        vt, ft = self.type_name(dtype), self.type_name(from_dtype)
        st = self.type_name(E.split_lanes(dtype)[0])
        body = " ".join(f"r.{c} = ({st})v.{c};" for c in _LANES[:E.split_lanes(dtype)[1]])
        self.helper(f"nnvm_to_{vt}({ft})",
                    f"{self.helper_qualifier} {vt} nnvm_to_{vt}({ft} v) {{ {vt} r; {body} return r; }}")
        return f"nnvm_to_{vt}({value})"


def _bytes(decl: str) -> int:
    """Bytes of a hoisted ``threadgroup T name[N];`` declaration."""
    m = re.match(r"\s*threadgroup (\w+) \w+\[(\d+)\];", decl)
    if not m:
        return 0
    size = {"char": 1, "uchar": 1, "bool": 1, "short": 2, "ushort": 2, "half": 2, "long": 8, "ulong": 8}
    return size.get(m.group(1), 4) * int(m.group(2))


KERNEL = re.compile(r"\bkernel\s+void\s+(\w+)\s*\(")  # group 1: the kernel's name


def kernel_names(source: str) -> list[str]:
    """The ``kernel void`` functions of an MSL source, in order."""
    return KERNEL.findall(source)
