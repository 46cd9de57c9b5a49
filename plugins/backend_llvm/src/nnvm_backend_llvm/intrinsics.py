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

import numpy as np
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
    if params.get("kernel") == DOT_U8S8_KERNEL:
        p = params
        return _emit_dot_u8s8(cg, call, p["m"], p["nb"], p["lanes"], p["k4"], p["isa"], p.get("window"),
                              p.get("prefetch", False))
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


# -- 8-bit dot products ------------------------------------------------------------------------------
DOT_U8S8_KERNEL = "llvm.dot_u8s8"
# lanes of each form: 16/8 x int32 on x86; 4 x int32 (one 128-bit NEON register, 16 bytes) on Arm
DOT_ISAS = {"avx512vnni": 16, "avxvnni": 8, "avx2": 8, "widened": 8, "usdot": 4, "sdot": 4, "neon": 4}


def dot_u8s8(m: int = 4, k4: int = 1, nb: int = 1, isa: str = "widened", window: tuple | None = None,
             prefetch: bool = False) -> TensorIntrin:
    """``c[t, i, j] += sum(int32(a[i, q, r]) * int32(b[t, q, j, r]) for q < k4, r < 4)``: ``m`` rows of uint8
    ``a`` against ``nb`` blocks of ``lanes`` int8 columns of ``b``, packed four consecutive ``r`` per 32-bit
    lane, the layout ``vpdpbusd`` reads; ``m x nb`` accumulator vectors stay in registers for the whole
    reduction. ``isa``: ``avx512vnni`` (16 lanes, one ``vpdpbusd`` per row, block and ``q``), ``avxvnni`` (8
    lanes, its VEX form), ``avx2`` (8 lanes, ``vpmaddwd`` on the bytes as 16-bit values, exact: see
    ``avx2_dot``), or ``widened`` (8 lanes, any CPU: the bytes widened to 16 bits, multiplied exactly); on
    Arm, 4 lanes (16 bytes): ``usdot`` (AArch64 ``+i8mm``: u8 x s8 in one instruction), ``sdot`` (AArch64
    ``+dotprod``, exact: see ``arm_body``) or ``neon`` (AArch64 or ARMv7 NEON, exact: see ``neon_dot``). Every
    form gives the exact sum, the same bits as ``vpdpbusd``. ``window=(kh, kw)`` adds two outer reduction
    axes, ``a[i, u, v, q, r]`` and ``b[t, u, v, q, j, r]`` (a convolution's kernel offsets, each with its own
    strides), so the accumulators stay in registers over the whole window. ``prefetch``: each step also
    prefetches the line of ``b`` the next call will read at that step, ``nb`` blocks further on (the next
    output channels' weights, which a convolution otherwise reads from L2, L3 or memory in a burst at the
    first row of each block): a hint, the result is the same; emitted for the x86 forms, where it was measured
    (ResNet-50 and ResNet-18 about 5 % faster at one thread, MobileNetV2 the same)."""
    if isa not in DOT_ISAS:
        raise ScheduleError(f"tensor intrinsic dot_u8s8: isa must be one of {', '.join(DOT_ISAS)}, "
                            f"got {isa!r}")
    for what, v in (("m", m), ("k4", k4), ("nb", nb)):
        if not isinstance(v, int) or v <= 0:
            raise ScheduleError(f"tensor intrinsic dot_u8s8: {what} must be a positive integer, got {v!r}")
    lanes = DOT_ISAS[isa]
    q = te.reduce_axis((0, k4), name="q")
    r = te.reduce_axis((0, 4), name="r")
    if window is None:
        a = te.placeholder((m, k4, 4), "uint8", name="a")
        b = te.placeholder((nb, k4, lanes, 4), "int8", name="b")
        c = te.compute((nb, m, lanes), lambda t, i, j: te.sum(a[i, q, r].astype("int32")
                                                              * b[t, q, j, r].astype("int32"), axis=[q, r]),
                       name="c")
        subscripts, tag = "iqr,tqjr->tij", ""
    else:
        kh, kw = window
        if not all(isinstance(v, int) and v > 0 for v in window):
            raise ScheduleError(f"tensor intrinsic dot_u8s8: window must be two positive integers, "
                                f"got {window}")
        a = te.placeholder((m, kh, kw, k4, 4), "uint8", name="a")
        b = te.placeholder((nb, kh, kw, k4, lanes, 4), "int8", name="b")
        u = te.reduce_axis((0, kh), name="u")
        v = te.reduce_axis((0, kw), name="v")
        c = te.compute((nb, m, lanes), lambda t, i, j: te.sum(
            a[i, u, v, q, r].astype("int32") * b[t, u, v, q, j, r].astype("int32"), axis=[u, v, q, r]),
            name="c")
        subscripts, tag = "iuvqr,tuvqjr->tij", f"x{kh}x{kw}"

    def reference(a, b, c):
        c += np.einsum(subscripts, a.astype(np.int64), b.astype(np.int64)).astype(c.dtype)

    tag += "_prefetch" if prefetch else ""
    return te.decl_tensor_intrin(c, reference, name=f"dot_u8s8_{isa}_{nb}x{m}x{lanes}x{k4}{tag}",
                                 params={"kernel": DOT_U8S8_KERNEL, "m": m, "nb": nb, "lanes": lanes,
                                         "k4": k4, "isa": isa, "window": window, "prefetch": prefetch})


def _emit_dot_u8s8(cg, call, m: int, nb: int, lanes: int, k4: int, isa: str, window=None, prefetch=False):
    from nnvm_backend_llvm.codegen_expr import I32, I64, PTR

    i8, i16 = ir.IntType(8), ir.IntType(16)
    rows = [[int(s.value) for s in row] for row in call.strides]
    if window is None:  # the window axes as loops of one step
        window = (1, 1)
        rows[0][1:1] = [0, 0]
        rows[1][1:1] = [0, 0]
    (sa0, sau, sav, sa1, sa2), (sbt, sbu, sbv, sb0, sb1, sb2), (sct, sc0, sc1) = rows
    if sa2 != 1 or sb2 != 1 or sb1 != 4 or sc1 != 1:
        raise ScheduleError(f"kernel {cg.frame.name}: {call.intrin.name} needs four consecutive bytes per "
                            f"lane and contiguous lanes (strides a {sa0, sa1, sa2}, b {sbt, sb0, sb1, sb2}, "
                            f"c {sct, sc0, sc1})")
    pa, pb, pc = [cg.element_ptr(r.buffer, cg.index(r.index)) for r in call.regions]
    vty = ir.VectorType(I32, lanes)
    bytes_ty = ir.VectorType(i8, 4 * lanes)

    def at(ptr, ety, offset):
        if isinstance(offset, int):
            offset = ir.Constant(I64, offset)
        return cg.builder.gep(ptr, [offset], inbounds=True, source_etype=ety)

    # NEON keeps each accumulator as two vectors of pair sums (lanes 0-1 and 2-3), added at the end
    halves = 2 if isa == "neon" else 1
    accs = [[[cg.entry_alloca(vty, 64) for _ in range(halves)] for _ in range(m)] for _ in range(nb)]
    bias = [cg.entry_alloca(vty, 64) for _ in range(nb)] if isa == "sdot" else []
    for slot in [x for row in accs for pair in row for x in pair] + bias:
        cg.builder.store(ir.Constant(vty, [ir.Constant(I32, 0)] * lanes), slot)
    if isa in ("avx512vnni", "avxvnni"):
        width = 32 * lanes
        vpdpbusd = cg.declare(f"llvm.x86.avx512.vpdpbusd.{width}", vty, [vty, vty, vty])
    if isa == "avx2":
        words_ty = ir.VectorType(i16, 2 * lanes)
        pmaddwd = cg.declare("llvm.x86.avx2.pmadd.wd", vty, [words_ty, words_ty])
    if isa in ("sdot", "usdot"):
        armdot = cg.declare(f"llvm.aarch64.neon.{isa}.v4i32.v16i8", vty, [vty, bytes_ty, bytes_ty])
        signs = ir.Constant(bytes_ty, [ir.Constant(i8, 0x80)] * 16)
    if isa == "neon":
        half_ty = ir.VectorType(i16, 8)
        aarch64 = str(cg.module.triple).startswith(("aarch64", "arm64"))
        if aarch64:  # add(acc, saddlp(x)) is selected as one sadalp
            saddlp = cg.declare("llvm.aarch64.neon.saddlp.v4i32.v8i16", vty, [half_ty])
        else:
            vpadals = cg.declare("llvm.arm.neon.vpadals.v4i32.v8i16", vty, [vty, half_ty])
    q, u, v = E.Var("dot.q"), E.Var("dot.u"), E.Var("dot.v")

    def widened(b, acc, a_word, b_bytes):
        """acc + per lane: sum over its 4 bytes of zext(a) * sext(b), in 16-bit products (exact:
        |255 * -128| < 2^15) added pairwise into 32 bits."""
        a4 = b.bitcast(a_word, ir.VectorType(i8, 4))
        mask = ir.Constant(ir.VectorType(I32, 4 * lanes), [t % 4 for t in range(4 * lanes)])
        spread = b.shuffle_vector(a4, ir.Constant(ir.VectorType(i8, 4), ir.Undefined), mask)
        wide_ty = ir.VectorType(i16, 4 * lanes)
        prod = b.mul(b.zext(spread, wide_ty), b.sext(b_bytes, wide_ty))
        wide32 = b.sext(prod, ir.VectorType(I32, 4 * lanes))
        total = acc
        for r in range(4):
            mask = ir.Constant(ir.VectorType(I32, lanes), [4 * j + r for j in range(lanes)])
            total = b.add(total, b.shuffle_vector(wide32, ir.Constant(wide32.type, ir.Undefined), mask))
        return total

    def avx2_weights(b, b_bytes):
        """A weight vector's bytes as two vectors of int16 pairs, sign-extended: bytes (0, 2) of each lane
        and bytes (1, 3), two shifts of the 16-bit words (``vpsllw``/``vpsraw``: no shuffle)."""
        words = b.bitcast(b_bytes, words_ty)
        eights = ir.Constant(words_ty, [ir.Constant(i16, 8)] * (2 * lanes))
        return b.ashr(b.shl(words, eights), eights), b.ashr(words, eights)

    def avx2_activation(b, a_word):
        """An activation word's bytes (0, 2) and (1, 3) zero-extended to int16 pairs in every lane: two
        masks and a shift of the broadcast word, once per row and step."""
        word = cg.splat(a_word, lanes)
        mask = ir.Constant(vty, [ir.Constant(I32, 0x00FF00FF)] * lanes)
        odd = b.lshr(word, ir.Constant(vty, [ir.Constant(I32, 8)] * lanes))
        return b.bitcast(b.and_(word, mask), words_ty), b.bitcast(b.and_(odd, mask), words_ty)

    def avx2_dot(b, acc, a_halves, w_halves):
        """acc + per lane the exact sum of 4 byte products, with ``vpmaddwd`` on 16-bit values: the
        activation's halves (``avx2_activation``) against the weight's (``avx2_weights``). Two multiplies
        per 32 products; ``vpmaddubsw``'s int16 pair sum of u8 x s8 would saturate (255 * 127 * 2 > 2^15),
        where ``vpdpbusd`` and onnxruntime's VNNI kernels do not, and splitting the bytes to keep it exact
        took four."""
        acc = b.add(acc, b.call(pmaddwd, [a_halves[0], w_halves[0]]))
        return b.add(acc, b.call(pmaddwd, [a_halves[1], w_halves[1]]))

    def neon_dot(b, pair, a_word, b_halves):
        """pair + the byte products of ``a`` (zero-extended) and one weight vector (sign-extended,
        ``b_halves``: its bytes 0-7 and 8-15 as int16), summed pairwise into 32 bits: a 16-bit ``mul``
        is exact (|255 * -128| < 2^15) and ``sadalp`` (ARMv7 ``vpadal.s16``) adds neighbouring products
        into the int32 lanes. The 4-byte sums come from adding the pairs once, after the reduction."""
        a16 = b.zext(b.bitcast(cg.splat(a_word, 2), ir.VectorType(i8, 8)), half_ty)  # vdup.32, ushll
        out = []
        for acc, wh in zip(pair, b_halves):
            prod = b.mul(a16, wh)
            out.append(b.add(acc, b.call(saddlp, [prod])) if aarch64 else b.call(vpadals, [acc, prod]))
        return out

    def offset(b, strides):
        total = ir.Constant(I64, 0)
        for var, stride in zip((u, v, q), strides):
            if stride:
                total = b.add(total, b.mul(cg.frame.vars[var], ir.Constant(I64, stride)))
        return total

    def body():
        b = cg.builder
        b_off = offset(b, (sbu, sbv, sb0))
        weights = [b.load(at(pb, i8, b.add(b_off, ir.Constant(I64, t * sbt))), typ=bytes_ty, align=1)
                   for t in range(nb)]
        if prefetch and isa in ("avx512vnni", "avxvnni", "avx2"):  # measured on x86 (bench/RESULTS.md)
            # not inbounds: past the last block it is an address nothing reads
            fetch = cg.declare("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
            for t in range(nb, 2 * nb):
                ahead = b.gep(pb, [b.add(b_off, ir.Constant(I64, t * sbt))], source_etype=i8)
                # into L2 (locality 2: ``prefetcht1``), 1 % faster than into L1 (ResNet-50, ResNet-18): the
                # line is read a block later, and a block's weights (up to 147 KB) outgrow L1 anyway
                b.call(fetch, [ahead, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
        if isa == "avx2":  # each weight vector as 16-bit pairs once a step, for every row
            weights = [avx2_weights(b, w) for w in weights]
        if isa == "neon":  # each weight vector widened once a step, for every row
            widen = [ir.Constant(ir.VectorType(I32, 8), list(range(h, h + 8))) for h in (0, 8)]
            weights = [[b.sext(b.shuffle_vector(w, ir.Constant(bytes_ty, ir.Undefined), mask), half_ty)
                        for mask in widen] for w in weights]
        a_off = offset(b, (sau, sav, sa1))
        for i in range(m):
            a_word = b.load(at(pa, i8, b.add(a_off, ir.Constant(I64, i * sa0))), typ=I32, align=1)
            a_splat = avx2_activation(b, a_word) if isa == "avx2" else cg.splat(a_word, lanes)
            for t, b_bytes in enumerate(weights):
                slots = accs[t][i]
                acc = [b.load(slot, typ=vty) for slot in slots]
                if isa == "neon":
                    acc = neon_dot(b, acc, a_word, b_bytes)
                elif isa == "widened":
                    acc = [widened(b, acc[0], a_word, b_bytes)]
                elif isa == "avx2":
                    acc = [avx2_dot(b, acc[0], a_splat, b_bytes)]
                else:
                    acc = [b.call(vpdpbusd, [acc[0], a_splat, b.bitcast(b_bytes, vty)])]
                for slot, value in zip(slots, acc):
                    b.store(value, slot)

    # AArch64's dot products read four words of a row at once where they are consecutive: one 16-byte
    # load (and one eor) per row feeds four by-element dot products (``sdot v0.4s, w.16b, a.4b[k]``)
    group = 4 if isa in ("sdot", "usdot") and sa1 == 4 and k4 % 4 == 0 else 1

    def arm_body():
        """``usdot`` as it is; ``sdot`` on ``a ^ 0x80`` (u8 -> s8, ``a - 128``), its products short by
        ``-128 * sum(b)``: ``bias`` sums that with one more ``sdot`` per weight vector (against bytes of
        -128), subtracted once at the end, so the result is exact. One extra instruction per ``m`` rows;
        folding ``128 * sum(b)`` into the compile-time zero point correction would save it."""
        b = cg.builder
        b_off = offset(b, (sbu, sbv, sb0 * group))
        weights = [[b.load(at(pb, i8, b.add(b_off, ir.Constant(I64, s * sb0 + t * sbt))), typ=bytes_ty,
                           align=1) for t in range(nb)] for s in range(group)]
        for t, slot in enumerate(bias):
            value = b.load(slot, typ=vty)
            for s in range(group):
                value = b.call(armdot, [value, weights[s][t], signs])
            b.store(value, slot)
        a_off = offset(b, (sau, sav, sa1 * group))
        for i in range(m):
            ptr = at(pa, i8, b.add(a_off, ir.Constant(I64, i * sa0)))
            if group == 4:
                words = b.load(ptr, typ=bytes_ty, align=1)
            else:
                words = b.bitcast(cg.splat(b.load(ptr, typ=I32, align=1), lanes), bytes_ty)
            if isa == "sdot":
                words = b.xor(words, signs)
            words = b.bitcast(words, vty)
            for s in range(group):
                if group == 4:  # word s of the row in every lane: the by-element operand
                    mask = ir.Constant(vty, [s] * lanes)
                    lane = b.bitcast(b.shuffle_vector(words, ir.Constant(vty, ir.Undefined), mask), bytes_ty)
                else:
                    lane = b.bitcast(words, bytes_ty)
                for t in range(nb):
                    (slot,) = accs[t][i]
                    # the lane operand last for sdot (by-element ``sdot``), first for usdot (``sudot``)
                    args = (weights[s][t], lane) if isa == "sdot" else (lane, weights[s][t])
                    b.store(b.call(armdot, [b.load(slot, typ=vty), *args]), slot)

    def loop(var, extent, inner):
        return lambda: cg.loop(var, I64, ir.Constant(I64, 0), ir.Constant(I64, extent), inner)

    arm = isa in ("sdot", "usdot")
    loop(u, window[0], loop(v, window[1], loop(q, k4 // group, arm_body if arm else body)))()
    b = cg.builder
    evens, odds = ([ir.Constant(I32, 2 * j + h) for j in range(lanes)] for h in (0, 1))
    for t in range(nb):
        for i, slots in enumerate(accs[t]):
            total = [b.load(slot, typ=vty) for slot in slots]
            if isa == "neon":  # lanes (0, 1) and (2, 3) of pair sums -> 4 sums: one addp
                total = b.add(b.shuffle_vector(total[0], total[1], ir.Constant(vty, evens)),
                              b.shuffle_vector(total[0], total[1], ir.Constant(vty, odds)))
            else:
                total = total[0]
            if bias:
                total = b.sub(total, b.load(bias[t], typ=vty))
            ptr = at(pc, I32, ir.Constant(I64, t * sct + i * sc0))
            b.store(b.add(b.load(ptr, typ=vty, align=4), total), ptr, align=4)
    return ir.Constant(I32, 0)
