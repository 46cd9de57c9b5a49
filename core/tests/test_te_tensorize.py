"""tensorize: the loop program before and after, the numbers (reference interpreter vs numpy), and the
structural checks that refuse a loop nest the intrinsic does not compute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import nnvm
from nnvm import te
from nnvm.te.examples import gemm as matmul
from nnvm.te.examples import gemm_intrin
from nnvm.tir.interpreter import run_primfunc
from nnvm_testing.te_strategies import SETTINGS


def add_one_intrin(n):
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda j: x[j] + 1.0, name="y")

    def reference(x, y):
        y[...] = x + 1

    return te.decl_tensor_intrin(y, reference, name=f"add_one_{n}")


def dot_intrin(k):
    a = te.placeholder((k,), name="a")
    b = te.placeholder((k,), name="b")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((1,), lambda z: te.sum(a[r] * b[r], axis=r), name="c")

    def reference(a, b, c):
        c += np.dot(a, b)

    return te.decl_tensor_intrin(c, reference, name=f"dot_{k}")


def run(s, args, inputs, want, rtol=1e-5):
    """Interpret the lowered program and compare with numpy; the output starts as NaN so an element
    the program never writes shows up."""
    func = nnvm.lower(s, args)
    out = np.full(want.shape, np.nan, want.dtype)
    run_primfunc(func, [*inputs, out])
    np.testing.assert_allclose(out, want, rtol=rtol, atol=1e-5, err_msg=str(func))
    return str(func)


@pytest.fixture
def mats():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 32), dtype=np.float32)


def test_gemm_tile_with_split_reduction_accumulates(mats):
    A, B, C, k = matmul(8, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(xo, yo, ko, xi, yi, ki)
    before = str(nnvm.lower(s, [A, B, C]))
    assert "for k.inner in range(8):" in before
    s[C].tensorize(xi, gemm_intrin(4, 16, 8))
    after = run(s, [A, B, C], mats, mats[0] @ mats[1])
    # the initialisation stays a loop nest above the reduction; the call accumulates per k.outer step
    assert after == """\
def main(A: float32[8, 16], B: float32[16, 32], C: float32[8, 32]):
  for i.outer in range(2):
    for j.outer in range(2):
      for i.inner.init in range(4):
        for j.inner.init in range(16):
          C[((((i.outer * 128) + (i.inner.init * 32)) + (j.outer * 16)) + j.inner.init)] = 0.0f
      for k.outer in range(2):
        gemm_4x16x8(&A[((i.outer * 64) + (k.outer * 8))] strides (16, 1), \
&B[((k.outer * 256) + (j.outer * 16))] strides (32, 1), \
&C[((i.outer * 128) + (j.outer * 16))] strides (32, 1))"""


def test_gemm_over_the_whole_reduction(mats):
    A, B, C, _ = matmul(8, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[C].tensorize(xi, gemm_intrin(4, 16, 16))
    text = run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "for k" not in text
    assert "gemm_4x16x16(&A[(i.outer * 64)] strides (16, 1)" in text


def test_gemm_tensorized_inside_a_parallel_loop_and_a_transposed_read():
    """B stored transposed (``B[j, k]``): the intrinsic's ``b[r, j]`` gets strides (1, K)."""
    rng = np.random.default_rng(1)
    M, N, K = 4, 8, 6
    A = te.placeholder((M, K), name="A")
    BT = te.placeholder((N, K), name="BT")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * BT[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].parallel(C.op.axis[0])
    s[C].tensorize(ji, gemm_intrin(1, 4, K))
    a, bt = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((N, K), dtype=np.float32)
    text = run(s, [A, BT, C], [a, bt], a @ bt.T)
    assert "&BT[(j.outer * 24)] strides (1, 6)" in text


def test_elementwise_intrinsic_overwrites_with_strides():
    """``B[i, j] = A[j, i] + 1``, tensorized over a row of B: the read of A has stride 4 (a column)."""
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[j, i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].tensorize(B.op.axis[1], add_one_intrin(4))
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    text = run(s, [A, B], [a], a.T + 1)
    assert "add_one_4(&A[i] strides (4), &B[(i * 4)] strides (1))" in text


def test_dot_product_at_an_offset():
    """A convolution's inner product ``sum(A[i + r] * W[r])``: the region of A starts at ``i``."""
    A = te.placeholder((10,), name="A")
    W = te.placeholder((3,), name="W")
    r = te.reduce_axis((0, 3), name="r")
    B = te.compute((8,), lambda i: te.sum(A[i + r] * W[r], axis=r), name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=1)
    s[B].tensorize(ii, dot_intrin(3))
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal(10, dtype=np.float32), rng.standard_normal(3, dtype=np.float32)
    text = run(s, [A, W, B], [a, w], np.convolve(a, w[::-1], mode="valid"))
    assert "dot_3(&A[i.outer] strides (1), &W[0] strides (1), &B[i.outer] strides (0))" in text


def test_tensorize_a_stage_computed_at_another():
    """A tensorized producer inside its consumer's loop: the call addresses the local tile."""
    rng = np.random.default_rng(3)
    A, B, C, k = matmul(8, 16, 4)
    D = te.compute((8, 16), lambda i, j: C[i, j] * 2.0, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[0])
    s[C].tensorize(C.op.axis[0], gemm_intrin(1, 16, 4))
    a, b = rng.standard_normal((8, 4), dtype=np.float32), rng.standard_normal((4, 16), dtype=np.float32)
    text = run(s, [A, B, D], [a, b], 2 * (a @ b))
    assert "C = allocate(float32[1*16], global)" in text
    # C's own row loop has one iteration: the kernel's row stride is irrelevant (0)
    assert "gemm_1x16x4(&A[(i * 4)] strides (0, 1), &B[0] strides (16, 1), &C[0] strides (0, 1))" in text


# ---------------------------------------------------------------------------------------------------
# structural mismatches: the stage, the axis and what differed


def _tiled(k_split=8):
    A, B, C, k = matmul(8, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    ko, ki = s[C].split(k, factor=k_split)
    s[C].reorder(xo, yo, ko, xi, yi, ki)
    return s, [A, B, C], C, xi


def _lower_error(s, args, *fragments):
    with pytest.raises(nnvm.ScheduleError) as info:
        nnvm.lower(s, args)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in the error: {msg}"
    return msg


def test_mismatched_extent_names_the_loop():
    s, args, C, xi = _tiled()
    s[C].tensorize(xi, gemm_intrin(4, 16, 4))
    _lower_error(s, args, "stage C: tensorize at axis i.inner with gemm_4x16x4",
                 "loop k.inner runs 8 iterations but the intrinsic's axis r has 4")


def test_mismatched_loop_count():
    s, args, C, xi = _tiled()
    yi = s[C].leaf_iter_vars[4]
    s[C].tensorize(yi, gemm_intrin(4, 16, 8))
    _lower_error(s, args, "stage C: tensorize at axis j.inner",
                 "(j.inner, k.inner) are 1 spatial and 1 reduce, the intrinsic has 2 spatial and 1 reduce")


def test_mismatched_reducer():
    s, args, C, xi = _tiled()
    s[C].tensorize(xi, gemm_intrin(4, 16, 8, reducer=te.max))
    _lower_error(s, args, "does not match the intrinsic", "the stage reduces with sum (float32), "
                 "the intrinsic with max")


def test_mismatched_arithmetic():
    A, B, _, k = matmul(8, 32, 16)
    C = te.compute((8, 32), lambda i, j: te.sum(A[i, k] - B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[C].tensorize(xi, gemm_intrin(4, 16, 16))
    _lower_error(s, [A, B, C], "stage C: tensorize at axis i.inner", "does not match the intrinsic",
                 "where the intrinsic has (a[i, r] * b[r, j])")


def test_mismatched_dtype():
    A, B, C, k = matmul(4, 16, 8, dtype="float64")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], gemm_intrin(4, 16, 8))
    _lower_error(s, [A, B, C], "stage C: tensorize at axis i", "float64", "float32")


def test_read_that_depends_on_an_axis_the_intrinsic_ignores():
    A = te.placeholder((16, 8), name="A")
    B = te.placeholder((8, 16), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((1, 16), lambda i, j: te.sum(A[j, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], gemm_intrin(1, 16, 8))
    _lower_error(s, [A, B, C], "stage C: tensorize at axis i",
                 "A is indexed by j but the intrinsic reads a without it")


def test_fused_loops_are_not_an_offset_plus_strides():
    A = te.placeholder((4, 4), name="A")
    B = te.compute((4, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(B.op.axis[0], B.op.axis[1])
    s[B].tensorize(f, add_one_intrin(16))
    _lower_error(s, [A, B], "stage B: tensorize at axis i.j.fused", "not an offset plus a multiple")


def test_uneven_split_inside_the_region():
    A, B, C, k = matmul(6, 16, 8)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ii, gemm_intrin(4, 16, 8))
    _lower_error(s, [A, B, C], "stage C: tensorize at axis i.inner",
                 "the loops of axis i do not tile it evenly")


def test_axis_split_after_tensorize():
    s, args, C, xi = _tiled()
    s[C].tensorize(xi, gemm_intrin(4, 16, 8))
    s[C].split(xi, factor=2)
    _lower_error(s, args, "stage C: tensorize at axis i.inner", "split or fused after tensorize")


def test_tensorize_needs_an_intrinsic_and_an_axis_of_the_stage():
    s, args, C, xi = _tiled()
    with pytest.raises(nnvm.ScheduleError, match="stage C: tensorize of axis i.inner needs a tensor"):
        s[C].tensorize(xi, "gemm")
    A = args[0]
    D = te.compute((8, 16), lambda i, j: A[i, j] * 2.0, name="D")
    with pytest.raises(nnvm.ScheduleError, match="stage C: axis i does not belong to this stage"):
        s[C].tensorize(D.op.axis[0], gemm_intrin(4, 16, 8))


def test_declaration_errors():
    x = te.placeholder((4, 4), name="x")
    y = te.compute((4,), lambda j: x[j, j] * 2.0, name="y")
    with pytest.raises(nnvm.ScheduleError, match="tensor intrinsic y: x\\[j, j\\] uses an axis twice"):
        te.decl_tensor_intrin(y, lambda x, y: None)
    z = te.compute((3,), lambda j: x[j + 1, 0] * 2.0, name="z")
    with pytest.raises(nnvm.ScheduleError, match="must be indexed by plain axis variables"):
        te.decl_tensor_intrin(z, lambda x, y: None)
    w = te.compute((4,), lambda j: x[j, j] * 2.0, name="w")
    with pytest.raises(nnvm.ScheduleError, match="reference must be a function"):
        te.decl_tensor_intrin(w, None)


def test_loops_of_the_region_may_come_in_any_order(mats):
    """The region is replaced whole: loops are paired with the intrinsic's axes by the axis they walk."""
    A, B, C, k = matmul(8, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(xo, yo, ko, ki, yi, xi)
    s[C].tensorize(ki, gemm_intrin(4, 16, 8))
    text = run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "gemm_4x16x8(&A[((i.outer * 64) + (k.outer * 8))] strides (16, 1)" in text


def test_packed_layout_read_through_split_indices(mats):
    """B packed as Bp[j // 16, k, j % 16]: once the loops' ranges are known the indices are linear
    (``j.outer``, ``k``, ``j.inner``), so the kernel reads 16 contiguous floats per k."""
    A, B, _, _ = matmul(8, 32, 16)
    Bp = te.compute((2, 16, 16), lambda jo, kq, ji: B[kq, jo * 16 + ji], name="Bp")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((8, 32), lambda i, j: te.sum(A[i, k] * Bp[j // 16, k, j % 16], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[C].tensorize(xi, gemm_intrin(4, 16, 16))
    text = run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "&Bp[(j.outer * 256)] strides (16, 1)" in text


# ---------------------------------------------------------------------------------------------------
# soundness: whatever the schedule, tensorize either refuses it or computes the right numbers


@SETTINGS
@given(st.data())
def test_random_tensorize_is_refused_or_correct(data):
    """Random matmul shapes, random splits and orders of the loops, a random axis to tensorize and a
    random kernel size: lowering raises ``ScheduleError`` or the program equals numpy. Half the
    examples are built to match (kernel sizes dividing the shape, loops tiled by them)."""
    m, n, k = (data.draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    M, N = m * data.draw(st.integers(1, 3)), n * data.draw(st.integers(1, 3))
    K = k * data.draw(st.integers(1, 2))
    A, B, C, r = matmul(M, N, K)
    s = te.create_schedule(C.op)
    if data.draw(st.booleans()):  # the canonical tiling, loops inside the region in a random order
        xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], m, n)
        ko, ki = s[C].split(r, factor=k)
        inner = data.draw(st.permutations([xi, yi, ki]))
        s[C].reorder(xo, yo, ko, *inner)
        axis = inner[0]
    else:  # anything: random splits and a random order, a random axis
        for _ in range(data.draw(st.integers(0, 3))):
            leaf = data.draw(st.sampled_from(list(s[C].leaf_iter_vars)))
            s[C].split(leaf, factor=data.draw(st.integers(1, 4)))
        s[C].reorder(*data.draw(st.permutations(list(s[C].leaf_iter_vars))))
        axis = data.draw(st.sampled_from(list(s[C].leaf_iter_vars)))
        m, n, k = (data.draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    s[C].tensorize(axis, gemm_intrin(m, n, k))
    try:
        func = nnvm.lower(s, [A, B, C])
    except nnvm.ScheduleError:
        event("refused")
        return
    event("tensorized")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    out = np.full((M, N), np.nan, np.float32)
    run_primfunc(func, [a, b, out])
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4, err_msg=str(func))
