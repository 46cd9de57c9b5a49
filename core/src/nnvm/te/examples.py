"""The matmul of API.md and its schedule, and a GEMM tensor intrinsic, defined once for the docs, the
benchmarks and the tests."""

from __future__ import annotations

from nnvm.te.schedule import Schedule, create_schedule
from nnvm.te.tensor import compute, placeholder, reduce_axis
from nnvm.te.tensor import sum as te_sum
from nnvm.te.tensorize import decl_tensor_intrin


def matmul(n: int, dtype: str = "float32"):
    """``C = A @ B`` for n x n matrices; returns ``(A, B, C, k)`` with ``k`` the reduce axis."""
    return gemm(n, n, n, dtype)


def gemm(m: int, n: int, k: int, dtype: str = "float32"):
    """``C = A @ B`` with ``A`` m x k and ``B`` k x n; returns ``(A, B, C, k)`` with ``k`` the reduce
    axis."""
    A = placeholder((m, k), dtype, name="A")
    B = placeholder((k, n), dtype, name="B")
    r = reduce_axis((0, k), name="k")
    C = compute((m, n), lambda i, j: te_sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C, r


def gemm_intrin(m: int, n: int, k: int, dtype: str = "float32", reducer=None):
    """A GEMM micro-kernel declared in Python: ``c += a @ b`` on an m x n x k tile, named
    ``gemm_{m}x{n}x{k}``; ``reducer`` (default ``te.sum``) replaces the sum to make one that a sum
    does not match."""
    a = placeholder((m, k), dtype, name="a")
    b = placeholder((k, n), dtype, name="b")
    r = reduce_axis((0, k), name="r")
    reduce = reducer or te_sum
    c = compute((m, n), lambda i, j: reduce(a[i, r] * b[r, j], axis=r), name="c")

    def reference(a, b, c):
        c += a @ b

    return decl_tensor_intrin(c, reference, name=f"gemm_{m}x{n}x{k}")


def matmul_api_schedule(n: int) -> tuple[Schedule, list]:
    """API.md's schedule: 32x32 tiles, k split by 4 and unrolled, j vectorized, i.outer parallel."""
    A, B, C, k = matmul(n)
    s = create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(ko, xi, ki, yi)
    s[C].unroll(ki)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    return s, [A, B, C]
