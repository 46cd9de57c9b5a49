"""Hand-written loop programs: vector nodes (Ramp, Broadcast), gathers, masks, lets, allocations."""

from __future__ import annotations

import numpy as np

from nnvm.tir import expr as E
from nnvm.tir import stmt as S


def _buf(name, n, dtype="float32"):
    return S.Buffer(name, (E.const(n),), dtype)


def _ramp(base, stride, lanes):
    return E.Ramp(E.convert(base), E.const(stride), lanes, f"int64x{lanes}")


def _bcast(value, lanes, dtype="float32"):
    return E.Broadcast(E.const(value, dtype), lanes, f"{dtype}x{lanes}")


def test_ramp_broadcast_contiguous_gather_scatter(build, close, rng):
    n, lanes = 64, 8
    A, B, C, D = (_buf(x, n) for x in "ABCD")
    i = E.Var("i")
    vec = f"float32x{lanes}"
    # B[8i : 8i+8] = A[8i : 8i+8] * 2 + 1           contiguous load and store
    contiguous = S.Store(B, _ramp(i * lanes, 1, lanes), E.BinOp(
        "add", E.BinOp("mul", E.Load(A, _ramp(i * lanes, 1, lanes), vec), _bcast(2.0, lanes), vec),
        _bcast(1.0, lanes), vec))
    # C[i] for i < 8 = sum of a stride-8 gather (A[i], A[i+8], ...) done lane-wise: C[8i + k] = A[k*8 + i]
    gather = S.Store(C, _ramp(i * lanes, 1, lanes), E.Load(A, _ramp(i, lanes, lanes), vec))
    # scatter: D[i + 8k] = A[8i + k]
    scatter = S.Store(D, _ramp(i, lanes, lanes), E.Load(A, _ramp(i * lanes, 1, lanes), vec))
    loop = S.For(i, E.const(0), E.const(n // lanes), S.ForKind.SERIAL, S.seq(contiguous, gather, scatter))
    f = build([S.PrimFunc("vec_ops", (A, B, C, D), loop)])["vec_ops"]
    a = rng.standard_normal(n).astype("float32")
    b, c, d = (np.zeros(n, "float32") for _ in range(3))
    f(a, b, c, d)
    close("contiguous", b, a * 2 + 1)
    close("gather", c, a.reshape(8, 8).T.reshape(-1))
    close("scatter", d, a.reshape(8, 8).T.reshape(-1))


def test_masked_vector_if_then_else_and_predicated_store(build, close, rng):
    """Lanes outside the mask never touch memory: reading A[60:68] of a 64-element A is safe."""
    n, lanes = 64, 8
    A, B, P = _buf("A", n), _buf("B", n + lanes), _buf("P", n + lanes)
    i = E.Var("i")
    vec = f"float32x{lanes}"
    idx = _ramp(i * lanes + 4, 1, lanes)
    inside = E.BinOp("lt", idx, E.Broadcast(E.const(n), lanes, f"int64x{lanes}"), f"boolx{lanes}")
    guarded = E.Call("if_then_else", (inside, E.Load(A, idx, vec), _bcast(-1.0, lanes)), vec)
    odd = _ramp(i * lanes + 4, 2, lanes)
    odd_inside = E.BinOp("lt", odd, E.Broadcast(E.const(n), lanes, f"int64x{lanes}"), f"boolx{lanes}")
    strided = E.Call("if_then_else", (odd_inside, E.Load(A, odd, vec), _bcast(0.0, lanes)), vec)
    body = S.seq(
        S.Store(B, _ramp(i * lanes, 1, lanes), E.BinOp("add", guarded, strided, vec)),
        S.Store(P, idx, _bcast(5.0, lanes), inside),  # predicated (masked) store
    )
    loop = S.For(i, E.const(0), E.const(n // lanes), S.ForKind.SERIAL, body)
    f = build([S.PrimFunc("masked", (A, B, P), loop)])["masked"]
    a = rng.standard_normal(n).astype("float32")
    b = np.zeros(n + lanes, "float32")
    p = np.zeros(n + lanes, "float32")
    f(a, b, p)
    padded = np.concatenate([a, np.full(3 * n, np.nan, "float32")])
    want = np.zeros(n + lanes, "float32")
    for blk in range(n // lanes):
        for k in range(lanes):
            j, o = blk * lanes + 4 + k, blk * lanes + 4 + 2 * k
            want[blk * lanes + k] = (padded[j] if j < n else -1.0) + (padded[o] if o < n else 0.0)
    close("masked if_then_else", b, want)
    want_p = np.zeros(n + lanes, "float32")
    want_p[4:n] = 5.0
    close("predicated store", p, want_p)


def test_let_letstmt_and_scalar_if(build, close, rng):
    n = 50
    A, B = _buf("A", n), _buf("B", n)
    i = E.Var("i")
    t = E.Var("t", "float32")
    u = E.Var("u", "float32")
    x = E.Load(A, i, "float32")
    value = E.Let(u, E.BinOp("mul", x, x, "float32"), E.BinOp("add", u, t, "float32"), "float32")
    body = S.LetStmt(t, E.BinOp("add", x, E.const(1.0), "float32"),
                     S.IfThenElse(E.BinOp("lt", i, E.const(25), "bool"),
                                  S.Store(B, i, value), S.Store(B, i, E.const(0.0))))
    loop = S.For(i, E.const(0), E.const(n), S.ForKind.SERIAL, body)
    f = build([S.PrimFunc("lets", (A, B), loop)])["lets"]
    a = rng.standard_normal(n).astype("float32")
    b = np.full(n, np.nan, "float32")
    f(a, b)
    want = np.where(np.arange(n) < 25, a * a + a + 1, 0).astype("float32")
    close("let", b, want)


def test_allocations_inside_parallel_loops_are_per_thread(build, close, rng):
    """Each iteration of the parallel loop fills a scratch buffer then reads it back reversed; a scratch
    buffer shared between threads would mix rows. One scratch is small (stack), one large (heap)."""
    rows = 16
    for cols, name in ((64, "small"), (20000, "large")):
        A, B = S.Buffer("A", (E.const(rows), E.const(cols)), "float32"), S.Buffer(
            "B", (E.const(rows), E.const(cols)), "float32")
        tmp = S.Buffer("tmp", (E.const(cols),), "float32")
        i, j, k = E.Var("i"), E.Var("j"), E.Var("k")
        fill = S.For(j, E.const(0), E.const(cols), S.ForKind.SERIAL,
                     S.Store(tmp, j, E.BinOp("mul", E.Load(A, i * cols + j, "float32"), E.const(3.0),
                                             "float32")))
        # a parallel loop nested in another one runs serially inside its thread
        read = S.For(k, E.const(0), E.const(cols), S.ForKind.PARALLEL,
                     S.Store(B, i * cols + k, E.Load(tmp, E.const(cols - 1) - k, "float32")))
        body = S.Allocate(tmp, S.seq(fill, read))
        loop = S.For(i, E.const(0), E.const(rows), S.ForKind.PARALLEL, body)
        f = build([S.PrimFunc(f"scratch_{name}", (A, B), loop)])[f"scratch_{name}"]
        a = rng.standard_normal((rows, cols)).astype("float32")
        b = np.zeros_like(a)
        for _ in range(3):
            f(a, b)
            close(f"per-thread scratch ({name})", b, (a * 3)[:, ::-1])


def test_vector_bool_and_half_memory(build, close):
    n, lanes = 16, 8
    A = _buf("A", n, "float16")
    M = _buf("M", n, "bool")
    i = E.Var("i")
    idx = _ramp(i * lanes, 1, lanes)
    half = E.Load(A, idx, f"float16x{lanes}")
    zero = E.Broadcast(E.const(0.0, "float16"), lanes, f"float16x{lanes}")
    positive = E.BinOp("gt", half, zero, f"boolx{lanes}")
    loop = S.For(i, E.const(0), E.const(n // lanes), S.ForKind.SERIAL, S.Store(M, idx, positive))
    f = build([S.PrimFunc("bools", (A, M), loop)])["bools"]
    a = np.linspace(-2, 2, n).astype("float16")
    m = np.zeros(n, bool)
    f(a, m)
    close("half > 0 as bool", m, a > 0)


def test_guard_the_same_for_every_lane_keeps_the_loop_vector(build, close, rng):
    """``for j: if i >= 1: B[8i + j] = A[8i + j] + A[8i + j - 8]`` (a border test on the outer loop,
    as a pooling window has) vectorizes: the guard stays scalar around a vector store. A guard on
    ``j`` itself keeps the loop a loop; both give numpy's numbers."""
    from nnvm.tir.vectorize import LLVM, vectorize_loop

    n, lanes = 64, 8
    A, B, C = (_buf(x, n) for x in "ABC")
    i, j = E.Var("i"), E.Var("j")
    k = i * lanes + j
    add = E.BinOp("add", E.Load(A, k, "float32"), E.Load(A, k - lanes, "float32"), "float32")
    invariant = S.For(j, E.const(0), E.const(lanes), S.ForKind.VECTORIZED,
                      S.IfThenElse(i >= 1, S.Store(B, k, add)))
    varying = S.For(j, E.const(0), E.const(lanes), S.ForKind.VECTORIZED,
                    S.IfThenElse(j >= 1, S.Store(C, k, E.Load(A, k, "float32"))))
    vector = vectorize_loop(invariant, LLVM)
    assert isinstance(vector, S.IfThenElse) and isinstance(vector.then_body.index, E.Ramp)
    assert vectorize_loop(varying, LLVM) is None
    body = S.For(i, E.const(0), E.const(n // lanes), S.ForKind.SERIAL, S.seq(invariant, varying))
    f = build([S.PrimFunc("guarded", (A, B, C), body)])["guarded"]
    a = rng.standard_normal(n).astype("float32")
    b, c = np.zeros(n, "float32"), np.zeros(n, "float32")
    f(a, b, c)
    want_b = np.concatenate([np.zeros(lanes, "float32"), a[lanes:] + a[:-lanes]])
    want_c = np.where(np.arange(n) % lanes >= 1, a, 0).astype("float32")
    close("invariant guard", b, want_b)
    close("guard on the lane", c, want_c)


def _ir_of(func) -> str:
    from nnvm_backend_llvm.codegen import CodeGenLLVM

    cg = CodeGenLLVM("x86_64-unknown-linux-gnu")
    cg.add_function(func)
    return cg.ir_text()


def test_index_arithmetic_once_per_block_and_rebound_lets(build, close, rng):
    """An unrolled body repeats its address arithmetic (``(f // 7)*7 + f % 7`` in every load and
    store): the code generator emits it once per block, yet a LetStmt binding the same variable again
    in that block (what unrolling a ``let`` gives) gets its new value, and floor division keeps its
    meaning for a loop that starts below zero."""
    n = 7 * 6
    A, B, C = _buf("A", n), _buf("B", n), _buf("C", n + 8)
    f, j, k = E.Var("f"), E.Var("j"), E.Var("k")

    def copy(offset):  # one unrolled copy: fresh nodes for the same index, and `let k` bound again
        base = E.BinOp("floordiv", f, E.const(7), "int64") * 7 + E.BinOp("floormod", f, E.const(7), "int64")
        return S.LetStmt(k, E.BinOp("add", base, E.const(offset), "int64"),
                         S.Store(B, base, E.cast("float32", k) + E.Load(A, base, "float32")))

    copies = S.For(f, E.const(0), E.const(n), S.ForKind.SERIAL, S.seq(copy(100), copy(200)))
    floor = S.Store(C, j + 8, E.cast("float32", E.BinOp("floordiv", j, E.const(3), "int64")
                                     + E.BinOp("floormod", j, E.const(3), "int64") * 10))
    func = S.PrimFunc("index_once", (A, B, C), S.seq(copies, S.For(j, E.const(-8), E.const(n + 8),
                                                                     S.ForKind.SERIAL, floor)))
    a = rng.standard_normal(n).astype("float32")
    b, c = np.zeros(n, "float32"), np.zeros(n + 8, "float32")
    build([func])["index_once"](a, b, c)
    close("the second let's value", b, np.arange(n) + 200 + a)
    js = np.arange(-8, n)
    close("floor division from -8", c, (js // 3 + (js % 3) * 10).astype("float32"))
    ir = _ir_of(func)
    # f starts at 0: its division by 7 is one sdiv, emitted once for the four loads and stores
    assert ir.count("sdiv i64 %\"f\", 7") == 1 and ir.count("srem i64 %\"f\", 7") == 1, ir
