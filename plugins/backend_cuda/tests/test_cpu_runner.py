"""The CPU runner (the core's fiber scheduler + the CUDA shim) on hand-written CUDA, against numpy.

Every kernel runs in both thread orders: a kernel with its barriers gives the same numbers in both;
the one without its barrier gives wrong numbers in at least one.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.errors import Error
from nnvm_backend_cuda.compiler import compile_cuda
from nnvm_backend_cuda.emulate import HostCUDA
from nnvm_testing.backend_cuda import BLOCK_SUM, DIVERGENT, REVERSE, REVERSE_NO_BARRIER, SAXPY, Args

ORDERS = [False, True]


@pytest.mark.parametrize("reversed_", ORDERS)
def test_kernel_without_barrier_runs_each_thread_to_completion(reversed_):
    rt = HostCUDA(SAXPY)
    assert rt.barriers == {"saxpy": False}
    a = np.random.default_rng(0).standard_normal(1000).astype("float32")
    b = np.zeros_like(a)
    args = Args(b, a, 1000)
    rt.launch("saxpy", (16, 1, 1), (64, 1, 1), args.array, reversed=reversed_)
    np.testing.assert_allclose(b, 2 * a + 1, rtol=1e-6)


@pytest.mark.parametrize("reversed_", ORDERS)
def test_shared_memory_and_barrier(reversed_):
    rt = HostCUDA(REVERSE)
    x = np.arange(256, dtype="float32")
    y = np.zeros_like(x)
    args = Args(y, x)
    rt.launch("reverse", (4, 1, 1), (64, 1, 1), args.array, reversed=reversed_)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())


@pytest.mark.parametrize("reversed_", ORDERS)
def test_tree_reduction_2d_block_and_vector_loads(reversed_):
    rt = HostCUDA(BLOCK_SUM)
    x = np.random.default_rng(1).standard_normal((6, 512)).astype("float32")
    y = np.zeros(6, dtype="float32")
    args = Args(y, x)
    rt.launch("block_sum", (6, 1, 1), (32, 4, 1), args.array, reversed=reversed_)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_missing_barrier_shows_up_in_one_thread_order():
    rt = HostCUDA(REVERSE_NO_BARRIER)
    x = np.arange(128, dtype="float32")
    want = x.reshape(2, 64)[:, ::-1].ravel()
    wrong = 0
    for order in ORDERS:
        y = np.zeros_like(x)
        args = Args(y, x)
        rt.launch("reverse_racy", (2, 1, 1), (64, 1, 1), args.array, reversed=order)
        wrong += not np.array_equal(y, want)
    assert wrong >= 1


def test_divergent_barrier_is_an_error_not_a_hang():
    rt = HostCUDA(DIVERGENT)
    y = np.zeros(32, dtype="float32")
    args = Args(y)
    with pytest.raises(Error, match=r"kernel divergent: divergent barrier: 16 of 32 threads"):
        rt.launch("divergent", (1, 1, 1), (32, 1, 1), args.array)


def test_the_same_source_compiles_with_nvrtc():
    for src in (SAXPY, REVERSE, BLOCK_SUM):
        assert compile_cuda(src, "sm_80").cubin


def test_host_compile_error_is_an_error():
    with pytest.raises(Error, match="do not compile as host C"):
        HostCUDA('extern "C" __global__ void broken(float* a) { a[0] = not_declared; }')
