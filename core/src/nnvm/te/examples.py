"""The matmul of API.md and its schedule, defined once for the docs, the benchmarks and the tests."""

from __future__ import annotations

from nnvm.te.schedule import Schedule, create_schedule
from nnvm.te.tensor import compute, placeholder, reduce_axis
from nnvm.te.tensor import sum as te_sum


def matmul(n: int, dtype: str = "float32"):
    """``C = A @ B`` for n x n matrices; returns ``(A, B, C, k)`` with ``k`` the reduce axis."""
    A = placeholder((n, n), dtype, name="A")
    B = placeholder((n, n), dtype, name="B")
    k = reduce_axis((0, n), name="k")
    C = compute((n, n), lambda i, j: te_sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


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
