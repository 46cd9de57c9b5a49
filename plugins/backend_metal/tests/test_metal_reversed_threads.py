"""Operators whose GPU schedules share threadgroup memory between threads, on ``metal`` with the threads
of every threadgroup run in reverse order (``NNVM_GPU_THREAD_ORDER=reversed``) on the CPU runner: the
hoisted ``threadgroup`` arrays and ``threadgroup_barrier`` of the printed MSL must give the same numbers
in both orders. (The schedules are the shared ones ``test_cuda_reversed_threads.py`` covers in full;
this is the Metal spelling of them.)
"""

import pytest

from nnvm_conformance.suite import test_operator  # noqa: F401 - collected here

nnvm_conformance_targets = ["metal"]
nnvm_conformance_ops = ["conv2d", "dense", "matmul", "softmax", "sum", "layer_norm"]
nnvm_conformance_models = []


@pytest.fixture(autouse=True)
def _reversed_threads(monkeypatch):
    monkeypatch.setenv("NNVM_GPU_THREAD_ORDER", "reversed")
