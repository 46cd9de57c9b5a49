"""CUDA C++: the core's C-family printer with CUDA's spelling of what differs.

CUDA's vector structs (``float4`` ...) have no operators and CUDA's math functions take scalars, so
the element-wise helpers the kernels use (``nnvm_add``, ``nnvm_fmaxf``, ``nnvm_load4`` ...) are
printed into the preamble as ``__device__`` overloads, only those the kernels call. Loads and stores
of vectors go element by element (no 16-byte alignment is assumed). NVRTC defines neither ``INFINITY``
nor ``NAN``: both are bit patterns through ``__int_as_float``.
"""

from __future__ import annotations

import math
import re

from nnvm.gpu.c_printer import CPrinter
from nnvm.tir import expr as E
from nnvm_backend_cuda import dp4a

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
    index32_type = "int"
    reserved = CPrinter.reserved | CUDA_RESERVED
    reserved_prefixes = ("nnvm_", "__")
    helper_qualifier = "static __device__ __forceinline__"
    inf_literal = "__int_as_float(0x7f800000)"
    nan_literal = "__int_as_float(0x7fffffff)"

    def __init__(self):
        super().__init__()
        self._threads = 1

    def kernel(self, func) -> str:
        launch = func.attrs.get("launch", {})
        self._threads = math.prod(int(launch.get(f"threadIdx.{d}", 1)) for d in "xyz")
        return super().kernel(func)

    @property
    def kernel_prefix(self) -> str:
        return f'extern "C" __global__ void __launch_bounds__({self._threads})'

    def preamble(self, source: str) -> str:
        return ("#include <cuda_fp16.h>\n" if "half" in source else "") + super().preamble(source)

    def helper_text(self) -> str:
        # the base negates any value as ``-(x)``: the vectors the helpers use need the operator first
        helpers = list(self._helpers.values())
        used = set(re.findall(r"\b(float|double|int|char|short|longlong)([234])\b", "".join(helpers)))
        negs = [f"{self.helper_qualifier} {t}{n} operator-({t}{n} a) "
                f"{{ return make_{t}{n}({', '.join(f'-a.{c}' for c in _LANES[:int(n)])}); }}"
                for t, n in sorted(used)]
        return "".join(d + "\n" for d in [*negs, *helpers])

    def thread_index(self, tag: str) -> str:
        return tag  # threadIdx.x, blockIdx.y: CUDA's own spelling

    def declare_array(self, buffer, name: str, size: int) -> str:
        line = super().declare_array(buffer, name, size)
        # 8-bit tiles are read four bytes at a time by dp4a: word-aligned
        return f"alignas(4) {line}" if buffer.dtype in ("int8", "uint8") else line

    def tensor_intrin_call(self, call: E.TensorIntrinCall) -> str:
        if call.intrin.params.get("kernel") == "cuda.dp4a":
            return dp4a.print_call(self, call)
        return super().tensor_intrin_call(call)

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
            self.helper(f"nnvm_{fn}", f"template <{tpl}> {self.helper_qualifier} auto "
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

    def _lanewise(self, name: str, dtype: str, params: list, lane, ret: str | None = None) -> str:
        """Define ``__device__`` helper ``name`` once per signature: it returns the vector of ``dtype`` whose
        lane ``k`` (``.x`` ...) is ``lane(k, c)``, or, with ``ret="void"``, runs ``lane`` for each lane."""
        vt = self.type_name(dtype)
        sig = f"{name}({', '.join(params)})"
        parts = [lane(k, c) for k, c in enumerate(_LANES[:E.split_lanes(dtype)[1]])]
        body = " ".join(parts) if ret == "void" else f"return make_{vt}({', '.join(parts)});"
        self.helper(sig, f"{self.helper_qualifier} {ret or vt} {sig} {{ {body} }}")
        return name

    def vector_binary(self, op: str, a: str, b: str, dtype: str) -> str:
        if op not in _OPS:
            return f"({a} {op} {b})"  # comparisons and logic stay scalar: the vectorizer gives none here
        vt = self.type_name(dtype)
        name = self._lanewise(f"nnvm_{_OPS[op]}", dtype, [f"{vt} a", f"{vt} b"],
                              lambda k, c: f"a.{c} {op} b.{c}")
        return f"{name}({a}, {b})"

    def vector_call(self, name: str, args: list, dtype: str) -> str:
        vt = self.type_name(dtype)
        params = [f"{vt} a{i}" for i in range(len(args))]
        helper = self._lanewise(f"nnvm_{name}", dtype, params,
                                lambda k, c: f"{name}({', '.join(f'a{i}.{c}' for i in range(len(args)))})")
        return f"{helper}({', '.join(args)})"

    def broadcast(self, value: str, dtype: str) -> str:
        st = self.type_name(E.split_lanes(dtype)[0])
        return self._lanewise(f"nnvm_splat_{self.type_name(dtype)}", dtype, [f"{st} v"], lambda k, c: "v") + \
            f"({value})"

    def vector_cast(self, value: str, dtype: str, from_dtype: str) -> str:
        st = self.type_name(E.split_lanes(dtype)[0])
        return self._lanewise(f"nnvm_to_{self.type_name(dtype)}", dtype, [f"{self.type_name(from_dtype)} v"],
                              lambda k, c: f"({st})v.{c}") + f"({value})"

    def vector_load(self, buf: str, base: str, dtype: str) -> str:
        st = self.type_name(E.split_lanes(dtype)[0])  # element by element: no alignment assumed
        name = f"nnvm_load{E.split_lanes(dtype)[1]}"
        return self._lanewise(name, dtype, [f"const {st}* p"], lambda k, c: f"p[{k}]") + f"({buf} + {base})"

    def vector_store(self, buf: str, base: str, value: str, dtype: str) -> str:
        st, vt = self.type_name(E.split_lanes(dtype)[0]), self.type_name(dtype)
        name = self._lanewise(f"nnvm_store{E.split_lanes(dtype)[1]}", dtype, [f"{st}* p", f"{vt} v"],
                              lambda k, c: f"p[{k}] = v.{c};", ret="void")
        return f"{name}({buf} + {base}, {value})"
