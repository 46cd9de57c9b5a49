"""Thread binding and shared memory lowered for GPUs (nnvm.gpu.kernels), run by the reference interpreter.

Every program here is checked twice: its printed form (what a backend prints from) and its numbers
against numpy, with threads of a barrier-holding loop run in lockstep as on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm import te
from nnvm.errors import ScheduleError
from nnvm.gpu.kernels import insert_barriers, lower_for_gpu
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.interpreter import run_primfunc
from nnvm.tir.visit import walk


def _matmul_shared(n=16, tile=4):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    for iv, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        s[C].bind(iv, tag)
    s[CL].compute_at(s[C], tj)
    ko, _ = s[CL].split(CL.op.reduce_axis[0], factor=tile)
    for shared in (AS, BS):
        s[shared].compute_at(s[CL], ko)
        ax0, ax1 = s[shared].op.axis
        s[shared].bind(ax0, "threadIdx.y")
        s[shared].bind(ax1, "threadIdx.x")
    return s, [A, B, C]


def _count(node, pred) -> int:
    found = []
    walk(node, lambda n: found.append(n) if pred(n) else None)
    return len(found)


def _is_barrier(n) -> bool:
    return isinstance(n, E.Call) and n.name == "barrier"


def test_shared_tiles_get_barriers_launch_sizes_and_match_numpy():
    s, args = _matmul_shared()
    prog = lower_for_gpu(lower_schedule(s, args, "mm"))
    (kernel,) = prog.kernels
    assert kernel.attrs["launch"] == {"blockIdx.y": 4, "blockIdx.x": 4, "threadIdx.y": 4, "threadIdx.x": 4}
    text = str(kernel)
    # the block's shared tiles are allocated once per block, outside the thread loops
    assert text.index("A.shared = allocate(float32[4*4], shared)") < text.index("for threadIdx.y")
    # for each chunk of k: wait until the previous chunk is read, load, wait until loaded, compute
    loop = text[text.index("for k.outer"):]
    first, last = loop.index("barrier()"), loop.rindex("barrier()")
    assert first < loop.index("A.shared[") < last < loop.index("k.inner")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16), dtype="float32"), rng.standard_normal((16, 16), dtype="float32")
    c = np.zeros((16, 16), "float32")
    run_primfunc(kernel, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_without_barriers_the_lockstep_interpreter_sees_the_race():
    """The barriers are what makes the program right: dropping them reads tiles not yet loaded."""
    s, args = _matmul_shared()
    (kernel,) = lower_for_gpu(lower_schedule(s, args, "mm")).kernels

    def strip(stmt):
        from nnvm.tir.visit import rewrite

        return rewrite(stmt, lambda n: S.Seq(()) if isinstance(n, S.Evaluate) and _is_barrier(n.value)
                       else None)

    racy = S.PrimFunc(kernel.name, kernel.params, strip(kernel.body), kernel.attrs)
    assert _count(racy.body, _is_barrier) == 0
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 16), dtype="float32"), rng.standard_normal((16, 16), dtype="float32")
    c = np.zeros((16, 16), "float32")
    run_primfunc(racy, [a, b, c])  # without lockstep points each thread runs to completion alone
    assert not np.allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_smaller_thread_loops_are_guarded_and_block_level_stores_run_once():
    n = 10
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((1,), lambda i: A[0] + 1.0, name="C")
    s = te.create_schedule([B.op, C.op])
    bo, bi = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    prog = lower_for_gpu(lower_schedule(s, [A, B, C], "two"))
    assert [k.attrs["launch"] for k in prog.kernels] == [{"blockIdx.x": 2, "threadIdx.x": 8}, {}]
    a = np.arange(n, dtype="float32")
    b, c = np.zeros(n, "float32"), np.zeros(1, "float32")
    for kernel in prog.kernels:
        run_primfunc(kernel, [a, b, c])
    np.testing.assert_array_equal(b, a * 2)
    np.testing.assert_array_equal(c, [1.0])


def test_rfactor_across_threads_combines_in_shared_memory_on_thread_zero():
    n, m = 4, 100
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=16)
    rf = s.rfactor(B, ki)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[rf].compute_at(s[B], B.op.axis[0])
    s[rf].set_scope("shared")
    s[rf].bind(s[rf].op.axis[0], "threadIdx.x")
    (kernel,) = lower_for_gpu(lower_schedule(s, [A, B], "rsum")).kernels
    text = str(kernel)
    assert "if (threadIdx.x == 0):" in text and _count(kernel.body, _is_barrier) >= 1
    a = np.random.default_rng(2).standard_normal((n, m), dtype="float32")
    b = np.zeros(n, "float32")
    run_primfunc(kernel, [a, b])
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_vthread_runs_serially_in_each_thread():
    n = 16
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    vo, rest = s[B].split(B.op.axis[0], nparts=2)
    to, _ = s[B].split(rest, factor=2)
    s[B].bind(vo, "vthread")
    s[B].bind(to, "threadIdx.x")
    (kernel,) = lower_for_gpu(lower_schedule(s, [A, B], "v")).kernels
    assert kernel.attrs["launch"] == {"threadIdx.x": 4}
    a = np.arange(n, dtype="float32")
    b = np.zeros(n, "float32")
    run_primfunc(kernel, [a, b])
    np.testing.assert_array_equal(b, a + 1)


def test_insert_barriers_write_after_read_in_a_loop():
    buf = S.Buffer("T", (E.const(4),), "float32", "shared")
    out = S.Buffer("O", (E.const(4),), "float32")
    k, t = E.Var("k"), E.Var("t")
    write = S.Store(buf, t, E.const(1.0))
    read = S.Store(out, t, E.Load(buf, E.const(3) - t, "float32"))
    loop = S.For(k, E.const(0), E.const(2), S.ForKind.SERIAL, S.seq(write, read))
    text = str(insert_barriers(loop))
    assert text.split("\n")[1:] == ["  barrier()", "  T[t] = 1.0f", "  barrier()", "  O[t] = T[(3 - t)]"]


def test_binding_one_thread_axis_twice_names_stage_and_axes():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], "threadIdx.x")
    with pytest.raises(ScheduleError, match=r"stage B: threadIdx.x is already bound to axis i.*j"):
        s[B].bind(B.op.axis[1], "threadIdx.x")


def test_cooperative_copy_with_more_threads_than_outputs_is_not_cut_by_the_outer_guard():
    """Six outputs, but the copy of the 6x8 weight tile uses 16 threads: the outer loop's guard
    ``threadIdx.x < 6`` must not stop threads 6..15 from doing their part of the copy."""
    n, k = 6, 24
    A = te.placeholder((k,), name="A")
    W = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n,), lambda j: te.sum(A[r] * W[j, r], axis=r), name="C")
    s = te.create_schedule(C.op)
    WS = s.cache_read(W, "shared", [C])
    CL = s.cache_write(C, "local")
    s[C].bind(C.op.axis[0], "threadIdx.x")
    s[CL].compute_at(s[C], C.op.axis[0])
    ro, _ = s[CL].split(CL.op.reduce_axis[0], factor=8)
    s[WS].compute_at(s[CL], ro)
    fused = s[WS].fuse(*s[WS].op.axis)
    _, t = s[WS].split(fused, factor=16)
    s[WS].bind(t, "threadIdx.x")
    (kernel,) = lower_for_gpu(lower_schedule(s, [A, W, C], "gemv")).kernels
    assert kernel.attrs["launch"] == {"threadIdx.x": 16}
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal(k, dtype="float32"), rng.standard_normal((n, k), dtype="float32")
    c = np.zeros(n, "float32")
    run_primfunc(kernel, [a, w, c])
    np.testing.assert_allclose(c, w @ a, rtol=1e-5, atol=1e-5)


def test_symbolic_dims_are_a_buffer_read_at_the_top_and_grids_are_their_expressions():
    """Issue 39 on GPU targets: a function over a symbolic ``N`` takes its value in one int64 buffer after
    its parameters, read into ``N`` before the grid; the generic schedule splits ``N * 10`` by 64 threads
    with the last block's tail guarded, and the launch table's grid and sizes are terms of ``N`` that
    ``bound_table`` evaluates per binding."""
    from nnvm.gpu.block_schedules import schedule_generic
    from nnvm.gpu.library import bound_table, launch_table, size_text, size_value
    from nnvm.graph.dims import dim_var

    n = dim_var("N")
    A = te.placeholder((n, 10), name="A")
    B = te.compute((n, 10), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    prog = lower_for_gpu(lower_schedule(schedule_generic([B]), [A, B], "f"))
    (kernel,) = prog.kernels
    assert [b.name for b in kernel.params] == ["A", "B", "nnvm_dims"]
    text = str(kernel)
    assert text.index("N = nnvm_dims[0]") < text.index("for blockIdx.x in range((((N * 10) + 63) // 64))")
    assert "if (((blockIdx.x * 64) + threadIdx.x) < (N * 10))" in text
    table = launch_table(prog)
    assert [size_value(g, {"N": 13}) for g in table["launches"][0]["grid"]] == [3, 1, 1]
    assert size_text(table["launches"][0]["grid"][0], 64) == "(((N * 10) + 63) // 64) * 64"  # OpenCL's global
    bound = bound_table(table, {"N": 13})
    assert [p["nbytes"] for p in bound["params"]] == [520, 520, 8]
    assert bound["launches"][0]["grid"] == [3, 1, 1] and bound["launches"][0]["block"] == [64, 1, 1]


def test_a_thread_loop_over_a_symbolic_extent_is_refused():
    from nnvm.graph.dims import dim_var

    n = dim_var("N")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], "threadIdx.x")
    with pytest.raises(ScheduleError, match="bound to threadIdx.x needs a constant extent"):
        lower_for_gpu(lower_schedule(s, [A, B], "f"))
