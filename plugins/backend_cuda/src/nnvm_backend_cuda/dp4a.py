"""``dp4a``: four 8-bit products summed into an int32 by one instruction (sm_61 and up), a tensor intrinsic.

The intrinsic computes what ``qdense`` computes over four consecutive ``k``, zero points included::

    c[0, 0] += sum((int32(a[0, r]) - a_zp) * (int32(b[0, r]) - b_zp) for r < 4)

so the GPU dense schedule tensorizes the innermost four of the reduction with it (``te.backend_intrinsic(
target, "dp4a", ...)``; the backend offers it only where ``-arch`` has the instruction). The four bytes of
each operand are one aligned 32-bit load. PTX's ``dp4a.atype.btype`` takes each operand signed or
unsigned, so u8 x s8 is exact in one instruction; the zero points are taken out with the same instruction:
``sum((a - za)(b - zb)) = dp4a(a, b) - dp4a(a, zb4) - dp4a(za4, b) + 4 za zb`` (``za4``: the zero point in
every byte), exact in int32 wrapping arithmetic since the true sum fits. Compiled for the CPU (the host
runner), the helper is a plain loop over the bytes.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import ScheduleError

DP4A_ARCH = 61  # sm_61 (Pascal GP10x) and every later architecture
_PTX_TYPE = {"uint8": "u32", "int8": "s32"}
_C_TYPE = {"uint8": "unsigned int", "int8": "int"}
_C_BYTE = {"uint8": "unsigned char", "int8": "signed char"}


def has_dp4a(arch: str) -> bool:
    """Whether ``sm_XY`` has ``dp4a``."""
    return int(arch.removeprefix("sm_")) >= DP4A_ARCH


def _centered(v, zp: int):
    v = v.astype("int32")
    return v - te.const(zp, "int32") if zp else v  # as the qdense compute writes it (nnvm.ops.quant)


def dp4a(a_dtype: str = "uint8", b_dtype: str = "int8", a_zero_point: int = 0, b_zero_point: int = 0):
    """The tensor intrinsic (see the module docstring) for operands of these dtypes and zero points."""
    for what, dt in (("a_dtype", a_dtype), ("b_dtype", b_dtype)):
        if dt not in _PTX_TYPE:
            raise ScheduleError(f"tensor intrinsic dp4a: {what} must be uint8 or int8, got {dt!r}")
    a = te.placeholder((1, 4), a_dtype, name="a")
    b = te.placeholder((1, 4), b_dtype, name="b")
    r = te.reduce_axis((0, 4), name="r")
    c = te.compute((1, 1), lambda i, j: te.sum(
        _centered(a[i, r], a_zero_point) * _centered(b[j, r], b_zero_point), axis=r), name="c")

    def reference(a, b, c):
        c += ((a.astype(np.int64) - a_zero_point) @ (b.astype(np.int64) - b_zero_point).T).astype(c.dtype)

    name = f"dp4a_{a_dtype}_{b_dtype}_z{a_zero_point}_{b_zero_point}"
    return te.decl_tensor_intrin(c, reference, name=name, params={
        "kernel": "cuda.dp4a", "a_dtype": a_dtype, "b_dtype": b_dtype, "a_zero_point": a_zero_point,
        "b_zero_point": b_zero_point})


def helper(a_dtype: str, b_dtype: str) -> tuple[str, str]:
    """(name, definition) of the ``__device__`` function ``d = dp4a(a, b, c)`` for these operand types."""
    name = f"nnvm_dp4a_{_PTX_TYPE[a_dtype][0]}{_PTX_TYPE[b_dtype][0]}"
    ta, tb = _C_TYPE[a_dtype], _C_TYPE[b_dtype]
    ba, bb = _C_BYTE[a_dtype], _C_BYTE[b_dtype]
    ptx = f"dp4a.{_PTX_TYPE[a_dtype]}.{_PTX_TYPE[b_dtype]}"
    definition = (
        f"static __device__ __forceinline__ int {name}({ta} a, {tb} b, int c) {{\n"
        f"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= {DP4A_ARCH}0\n"
        f'  int d; asm("{ptx} %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d;\n'
        "#else\n"
        "  for (int k = 0; k < 4; ++k) {\n"
        f"    c += (int)({ba})((unsigned int)a >> (8 * k)) * (int)({bb})((unsigned int)b >> (8 * k));\n"
        "  }\n"
        "  return c;\n"
        "#endif\n"
        "}")
    return name, definition


def _splat(zp: int, dtype: str) -> str:
    """A zero point in each of the four bytes of a word, as a C literal of the operand's word type."""
    word = (zp & 0xFF) * 0x01010101
    return f"{word}u" if dtype == "uint8" else f"(int){word}u"


def print_call(printer, call) -> str:
    """The C expression of one ``dp4a`` call: the accumulator updated in place."""
    p = call.intrin.params
    (sa,), (sb,), _ = ([int(s.value) for s in row[1:]] for row in call.strides)
    if sa != 1 or sb != 1:
        raise printer._error(f"{call.intrin.name} needs four consecutive bytes of each operand "
                             f"(strides {sa}, {sb})")
    fn = printer.helper(*helper(p["a_dtype"], p["b_dtype"]))
    ra, rb, rc = call.regions
    ta, tb = _C_TYPE[p["a_dtype"]], _C_TYPE[p["b_dtype"]]
    a = f"*(const {ta}*)&{printer.name_of(ra.buffer)}[{printer.expr(ra.index)}]"
    b = f"*(const {tb}*)&{printer.name_of(rb.buffer)}[{printer.expr(rb.index)}]"
    c = f"{printer.name_of(rc.buffer)}[{printer.expr(rc.index)}]"
    za, zb = p["a_zero_point"], p["b_zero_point"]
    value = f"{fn}({a}, {b}, {c})"
    if zb:
        value += f" - {fn}({a}, {_splat(zb, p['b_dtype'])}, 0)"
    if za:
        value += f" - {fn}({_splat(za, p['a_dtype'])}, {b}, 0)"
    if za and zb:
        value += f" + {4 * za * zb}"
    return f"{c} = {value}"
