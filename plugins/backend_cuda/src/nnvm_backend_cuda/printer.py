"""CUDA C++: the core's C-family printer with CUDA's spelling of what differs.

CUDA's vector structs (``float4`` ...) have no operators and CUDA's math functions take scalars, so
the element-wise helpers the kernels use (``nnvm_add``, ``nnvm_fmaxf``, ``nnvm_load4`` ...) are
printed into the preamble as ``__device__`` overloads, only those the kernels call. Loads and stores
of vectors go element by element (no 16-byte alignment is assumed). NVRTC defines neither ``INFINITY``
nor ``NAN``: both are bit patterns through ``__int_as_float``.
"""

from __future__ import annotations

import re

from nnvm.tir import expr as E
from nnvm.tir.c_printer import CPrinter

CUDA_RESERVED = frozenset("""
half __half uint uchar ushort ulonglong longlong threadIdx blockIdx blockDim gridDim warpSize
__syncthreads __shared__ __global__ __device__ __restrict__ __launch_bounds__ expf logf fmaxf fminf
rintf fabsf floorf powf fmodf sqrtf tanhf erff rsqrtf
""".split())
_VECTOR_NAMES = {"float": "float", "double": "double", "int": "int", "unsigned int": "uint",
                 "signed char": "char", "unsigned char": "uchar", "short": "short",
                 "unsigned short": "ushort", "long long": "longlong", "unsigned long long": "ulonglong"}
_LANES = "xyzw"
_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod"}


class CUDAPrinter(CPrinter):
    """``extern "C" __global__``, ``__launch_bounds__``, ``__shared__``, ``threadIdx.x``, ``__syncthreads()``
    and the element-wise vector helpers CUDA lacks."""

    global_qualifier = ""
    shared_qualifier = "__shared__"
    restrict = "__restrict__"
    reserved = CPrinter.reserved | CUDA_RESERVED
    reserved_prefixes = ("nnvm_", "__")
    inf_literal = "__int_as_float(0x7f800000)"
    nan_literal = "__int_as_float(0x7fffffff)"

    def __init__(self):
        super().__init__()
        self._helpers: dict = {}  # name -> definition, in first-use order
        self._threads = 1

    def kernel(self, func) -> str:
        launch = func.attrs.get("launch", {}) if hasattr(func, "attrs") else {}
        self._threads = 1
        for d in "xyz":
            self._threads *= int(launch.get(f"threadIdx.{d}", 1))
        return super().kernel(func)

    @property
    def kernel_prefix(self) -> str:
        return f'extern "C" __global__ void __launch_bounds__({self._threads})'

    def preamble(self, source: str) -> str:
        head = "#include <cuda_fp16.h>\n" if "half" in source else ""
        # the base negates any value as ``-(x)``: vectors need the operator
        helpers = list(self._helpers.values())
        used = set(re.findall(r"\b(float|double|int|char|short|longlong)([234])\b", "".join(helpers)))
        negs = [f"static __device__ __forceinline__ {t}{n} operator-({t}{n} a) "
                f"{{ return make_{t}{n}({', '.join(f'-a.{c}' for c in _LANES[:int(n)])}); }}"
                for t, n in sorted(used)]
        return head + super().preamble(source) + "".join(d + "\n" for d in [*negs, *helpers])

    def thread_index(self, tag: str) -> str:
        return tag  # threadIdx.x, blockIdx.y: CUDA's own spelling

    def barrier(self) -> str:
        return "__syncthreads();"

    # -- scalars: float32 functions carry CUDA's ``f`` suffix ------------------------------------------
    def call(self, name: str, args: list, dtype: str) -> str:
        fn = self.math_names.get(name, name)
        base, lanes = E.split_lanes(dtype)
        if fn in ("max", "min", "sign") and lanes == 1:
            # integer max/min of mixed widths (long long, long) are ambiguous overloads in CUDA; sign has
            # no CUDA function: templates, NaN and zero passed through as numpy does
            body = {"max": "a > b ? a : b", "min": "a < b ? a : b",
                    "sign": "a > 0 ? T(1) : (a < 0 ? T(-1) : a)"}[fn]
            params = "T a" if fn == "sign" else "A a, B b"
            tpl = "typename T" if fn == "sign" else "typename A, typename B"
            ret = "T" if fn == "sign" else "decltype(a + b)"
            self._helpers.setdefault(f"nnvm_{fn}", f"template <{tpl}> static __device__ __forceinline__ auto "
                                                   f"nnvm_{fn}({params}) -> {ret} {{ return {body}; }}")
            return f"nnvm_{fn}({', '.join(args)})"
        if base == "float32" and fn not in ("isnan", "isinf", "isfinite", "signbit"):
            fn += "f"
        if lanes > 1:
            return self.vector_call(fn, args, dtype)
        return f"{fn}({', '.join(args)})"

    # -- vectors: CUDA's structs, with helpers printed on first use ------------------------------------
    def vector_type(self, scalar: str, lanes: int) -> str:
        return f"{_VECTOR_NAMES[scalar]}{lanes}"

    def _helper(self, name: str, definition: str) -> str:
        self._helpers.setdefault(name + definition.split("(", 1)[1].split(")", 1)[0], definition)
        return name

    def _lanes(self, dtype: str) -> tuple:
        base, lanes = E.split_lanes(dtype)
        return self.type_name(dtype), self.type_name(base), _LANES[:lanes]

    def vector_binary(self, op: str, a: str, b: str, dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        if op in _OPS:
            name = f"nnvm_{_OPS[op]}"
            body = ", ".join(f"a.{c} {op} b.{c}" for c in ls)
            self._helper(name, f"static __device__ __forceinline__ {vt} {name}({vt} a, {vt} b) "
                               f"{{ return make_{vt}({body}); }}")
            return f"{name}({a}, {b})"
        return f"({a} {op} {b})"  # comparisons and logic stay scalar: the vectorizer gives none here

    def vector_call(self, name: str, args: list, dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        params = ", ".join(f"{vt} a{i}" for i in range(len(args)))
        body = ", ".join(f"{name}({', '.join(f'a{i}.{c}' for i in range(len(args)))})" for c in ls)
        helper = f"nnvm_{name}"
        self._helper(helper, f"static __device__ __forceinline__ {vt} {helper}({params}) "
                             f"{{ return make_{vt}({body}); }}")
        return f"{helper}({', '.join(args)})"

    def broadcast(self, value: str, dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        name = f"nnvm_splat_{vt}"
        self._helper(name, f"static __device__ __forceinline__ {vt} {name}({st} v) "
                           f"{{ return make_{vt}({', '.join('v' for _ in ls)}); }}")
        return f"{name}({value})"

    def vector_cast(self, value: str, dtype: str, from_dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        ft = self.type_name(from_dtype)
        name = f"nnvm_to_{vt}"
        self._helper(name, f"static __device__ __forceinline__ {vt} {name}({ft} v) "
                           f"{{ return make_{vt}({', '.join(f'({st})v.{c}' for c in ls)}); }}")
        return f"{name}({value})"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        name = f"nnvm_load{len(ls)}"
        self._helper(name, f"static __device__ __forceinline__ {vt} {name}(const {st}* p) "
                           f"{{ return make_{vt}({', '.join(f'p[{i}]' for i in range(len(ls)))}); }}")
        return f"{name}({buf} + {base})"

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        vt, st, ls = self._lanes(dtype)
        name = f"nnvm_store{len(ls)}"
        body = " ".join(f"p[{i}] = v.{c};" for i, c in enumerate(ls))
        self._helper(name, f"static __device__ __forceinline__ void {name}({st}* p, {vt} v) {{ {body} }}")
        return f"{name}({buf} + {base}, {value})"


def kernel_threads(source: str) -> dict:
    """Kernel name -> threads per block, read back from the ``__launch_bounds__`` the printer wrote."""
    return {m.group(2): int(m.group(1)) for m in re.finditer(
        r"__global__\s+void\s+__launch_bounds__\((\d+)\)\s+(\w+)\s*\(", source)}
