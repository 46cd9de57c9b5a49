"""Tensor intrinsics of the LLVM backends (``Stage.tensorize``), emitted as LLVM IR by the code generator.

``gemm(m, n, k)`` is the register-blocked micro-kernel of a matrix product::

    c[i, j] += sum(a[i, r] * b[r, j] for r in range(k))     i < m, j < n

It keeps the ``m x n`` tile of ``c`` in ``m`` vector registers of ``n`` lanes for the whole ``r`` loop,
which runs ``k`` times: load a row of ``b`` (one vector load when its stride is 1), broadcast one
element of ``a`` per row and fuse multiply-add (``llvm.fmuladd``, an FMA instruction on AVX2 and
AVX-512). The tile is added into ``c`` once, at the end. With ``m = 4, n = 16`` on AVX2 that is 8 ymm
accumulators, the classic shape; ``m = 1`` is a vector-times-matrix kernel.

The IR is written inline at the call, in the kernel being compiled; nothing here depends on x86, so
the Arm backend (same code generator) offers it too.
"""

from __future__ import annotations

from llvmlite import ir

from nnvm import te
from nnvm.errors import Error, ScheduleError
from nnvm.te.tensorize import TensorIntrin
from nnvm.tir import expr as E

GEMM_KERNEL = "llvm.gemm"


def gemm(m: int = 4, n: int = 16, k: int = 8, dtype: str = "float32") -> TensorIntrin:
    """The ``m x n`` GEMM micro-kernel over ``k`` (accumulates ``c += a @ b``), for float dtypes."""
    for what, v in (("m", m), ("n", n), ("k", k)):
        if not isinstance(v, int) or v <= 0:
            raise ScheduleError(f"tensor intrinsic gemm: {what} must be a positive integer, got {v!r}")
    if dtype not in ("float32", "float64"):
        raise ScheduleError(f"tensor intrinsic gemm: dtype must be float32 or float64, got {dtype}")
    a = te.placeholder((m, k), dtype, name="a")
    b = te.placeholder((k, n), dtype, name="b")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")

    def reference(a, b, c):
        c += (a.astype("float64") @ b.astype("float64")).astype(c.dtype)

    return te.decl_tensor_intrin(c, reference, name=f"gemm_{m}x{n}x{k}",
                                 params={"kernel": GEMM_KERNEL, "m": m, "n": n, "k": k, "dtype": dtype})


TENSOR_INTRINSICS = {"gemm": gemm}


def emit_tensor_intrin(cg, call: E.TensorIntrinCall):
    """Emit ``call`` with the code generator ``cg`` (a ``CodeGenLLVM``); returns an i32 0."""
    params = call.intrin.params
    if params.get("kernel") != GEMM_KERNEL:
        raise Error(f"kernel {cg.frame.name}: the llvm backend does not implement the tensor intrinsic "
                    f"{call.intrin.name}; use one of te.backend_intrinsic('llvm', ...): "
                    f"{', '.join(TENSOR_INTRINSICS)}")
    return _emit_gemm(cg, call, params["m"], params["n"], params["k"], params["dtype"])


def _emit_gemm(cg, call, m: int, n: int, k: int, dtype: str):
    from nnvm_backend_llvm.codegen_expr import I32, I64, scalar_type

    bld = cg.builder
    ety = scalar_type(dtype)
    vty = ir.VectorType(ety, n)
    align = 4 if dtype == "float32" else 8
    ptrs = [cg.element_ptr(r.buffer, cg.index(r.index)) for r in call.regions]
    (sa0, sa1), (sb0, sb1), (sc0, sc1) = [[int(s.value) for s in row] for row in call.strides]
    pa, pb, pc = ptrs

    def at(ptr, offset):
        if isinstance(offset, int):
            offset = ir.Constant(I64, offset)
        return cg.builder.gep(ptr, [offset], inbounds=True, source_etype=ety)

    def load_row(ptr, offset, stride):
        b = cg.builder
        if stride == 1:
            return b.load(at(ptr, offset), typ=vty, align=align)
        row = ir.Constant(vty, ir.Undefined)
        for j in range(n):
            lane = b.load(at(ptr, b.add(offset, ir.Constant(I64, j * stride))), typ=ety, align=align)
            row = b.insert_element(row, lane, ir.Constant(I32, j))
        return row

    def store_row(ptr, offset, stride, value):
        b = cg.builder
        if stride == 1:
            b.store(value, at(ptr, offset), align=align)
            return
        for j in range(n):
            lane = b.extract_element(value, ir.Constant(I32, j))
            b.store(lane, at(ptr, b.add(offset, ir.Constant(I64, j * stride))), align=align)

    accs = [cg.entry_alloca(vty, 64) for _ in range(m)]
    zero = ir.Constant(vty, [ir.Constant(ety, 0.0)] * n)
    for slot in accs:
        bld.store(zero, slot)
    fma = cg.intrinsic("fmuladd", vty, [vty, vty, vty], [vty])
    r = E.Var("gemm.r")

    def body():
        b = cg.builder
        rr = cg.frame.vars[r]
        brow = load_row(pb, b.mul(rr, ir.Constant(I64, sb0)), sb1)
        a_off = b.mul(rr, ir.Constant(I64, sa1))
        for i, slot in enumerate(accs):
            a = b.load(at(pa, b.add(a_off, ir.Constant(I64, i * sa0))), typ=ety, align=align)
            acc = b.load(slot, typ=vty)
            b.store(b.call(fma, [cg.splat(a, n), brow, acc]), slot)

    cg.loop(r, I64, ir.Constant(I64, 0), ir.Constant(I64, k), body)
    b = cg.builder
    for i, slot in enumerate(accs):
        off = ir.Constant(I64, i * sc0)
        total = b.fadd(load_row(pc, off, sc1), b.load(slot, typ=vty))
        store_row(pc, off, sc1, total)
    return ir.Constant(I32, 0)
