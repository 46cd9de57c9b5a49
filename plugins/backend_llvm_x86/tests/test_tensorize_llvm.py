"""The LLVM backend's tensor intrinsic (``gemm``, ``intrinsics.py``): matmuls tensorized with it,
compiled for the host and compared with numpy; the same programs in the reference interpreter."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnvm
from nnvm import te
from nnvm.tir.interpreter import run_primfunc
from nnvm_testing.te_strategies import SETTINGS


def matmul(m, n, k, dtype="float32", transposed_b=False):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((n, k) if transposed_b else (k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    if transposed_b:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C, r


def tensorized(M, N, K, m, n, k, dtype="float32", split_k=True, parallel=False, transposed_b=False):
    """``C = A @ B`` tiled m x n, the reduction split by k (or whole), the tile one gemm call."""
    A, B, C, r = matmul(M, N, K, dtype, transposed_b)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], m, n)
    if split_k:
        ko, ki = s[C].split(r, factor=k)
        s[C].reorder(xo, yo, ko, xi, yi, ki)
    if parallel:
        s[C].parallel(xo)
    s[C].tensorize(xi, te.backend_intrinsic("llvm", "gemm", m=m, n=n, k=k if split_k else K, dtype=dtype))
    return s, [A, B, C]


def check(s, args, transposed_b=False, rtol=1e-5):
    """Compile for the host, run, compare with numpy (in float64); the interpreter too."""
    A, B, C = args
    rng = np.random.default_rng(7)
    shape = lambda t: tuple(int(d.value) for d in t.shape)  # noqa: E731
    a = rng.standard_normal(shape(A)).astype(A.dtype)
    b = rng.standard_normal(shape(B)).astype(B.dtype)
    bb = b.T if transposed_b else b
    want = (a.astype("float64") @ bb.astype("float64")).astype(C.dtype)
    f = nnvm.build(s, args, target="llvm")
    got = np.full(shape(C), np.nan, C.dtype)
    f(a, b, got)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-4, err_msg=f"compiled {f.func}")
    interp = np.full(shape(C), np.nan, C.dtype)
    run_primfunc(f.func, [a, b, interp])
    np.testing.assert_allclose(interp, want, rtol=rtol, atol=1e-4, err_msg=f"interpreted {f.func}")
    return f


def test_gemm_4x16_micro_kernel_in_a_tiled_matmul():
    s, args = tensorized(64, 64, 64, 4, 16, 8)
    f = check(s, args)
    assert "gemm_4x16x8(" in str(f.func)
    # the kernel's accumulators are vectors, updated by fused multiply-adds
    ir = f.source()
    assert re.search(r"<16 x float>", ir), "the micro-kernel did not produce 16-lane vectors"
    if "avx" in f.library.target.features:
        assert re.search(r"vfmadd\w*ps\s+.*%[yz]mm", f.library.assembly()), "no vector FMA in the kernel"


def test_gemm_over_the_whole_reduction_in_parallel():
    s, args = tensorized(32, 48, 20, 4, 16, 20, split_k=False, parallel=True)
    check(s, args)


def test_gemv_kernel_float64():
    s, args = tensorized(6, 16, 12, 1, 16, 4, dtype="float64")
    check(s, args)


def test_strided_b_rows_take_the_gather_path():
    """B stored transposed: a row of the kernel's ``b`` is a column of B (stride K, not 1)."""
    s, args = tensorized(8, 16, 12, 2, 8, 4, transposed_b=True)
    f = check(s, args, transposed_b=True)
    assert "strides (1, 12)" in str(f.func)


def test_unknown_intrinsic_name_and_foreign_intrinsic():
    with pytest.raises(nnvm.ScheduleError,
                       match="no tensor intrinsic named 'conv' \\(offered: dot_u8s8, gemm\\)"):
        te.backend_intrinsic("llvm", "conv")
    # an intrinsic declared only in Python has no LLVM implementation: a clear error, not a crash
    A, B, C, r = matmul(4, 16, 8)
    a = te.placeholder((4, 8), name="a")
    b = te.placeholder((8, 16), name="b")
    rr = te.reduce_axis((0, 8), name="r")
    c = te.compute((4, 16), lambda i, j: te.sum(a[i, rr] * b[rr, j], axis=rr), name="c")
    mine = te.decl_tensor_intrin(c, lambda a, b, c: c.__iadd__(a @ b), name="my_gemm")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], mine)
    with pytest.raises(nnvm.Error, match="does not implement the tensor intrinsic my_gemm"):
        nnvm.build(s, [A, B, C], target="llvm")


# Fewer examples than the lowering properties: the space is small (kernel sizes x layouts x split or
# not), and each example compiles a module, the costly part.
@settings(SETTINGS, max_examples=50)
@given(st.data())
def test_random_tensorized_matmuls(data):
    """Random shapes that the kernel tiles evenly, random kernel sizes, split or whole reduction."""
    m = data.draw(st.sampled_from([1, 2, 4]))
    n = data.draw(st.sampled_from([4, 8, 16]))
    k = data.draw(st.integers(1, 6))
    M, N = m * data.draw(st.integers(1, 3)), n * data.draw(st.integers(1, 2))
    K = k * data.draw(st.integers(1, 3))
    split_k, transposed_b = data.draw(st.booleans()), data.draw(st.booleans())
    s, args = tensorized(M, N, K, m, n, k, split_k=split_k, parallel=data.draw(st.booleans()),
                         transposed_b=transposed_b)
    check(s, args, transposed_b=transposed_b)


def test_packed_b_with_a_wide_kernel():
    """B packed in 32-column panels (what fast GEMMs do), the 8x32 kernel over k steps of 16."""
    M = N = K = 64
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    Bp = te.compute((N // 32, K, 32), lambda jo, kq, ji: B[kq, jo * 32 + ji], name="Bp")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * Bp[j // 32, k, j % 32], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 32)
    ko, ki = s[C].split(k, factor=16)
    s[C].reorder(xo, yo, ko, xi, yi, ki)
    s[C].parallel(xo)
    s[C].tensorize(xi, te.backend_intrinsic("llvm", "gemm", m=8, n=32, k=16))
    f = check(s, [A, B, C])
    assert "gemm_8x32x16(" in str(f.func) and "strides (32, 1)" in str(f.func)
