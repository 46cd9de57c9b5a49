"""The conformance suite's operators on ``cuda`` with the threads of every block run in reverse order
(``NNVM_GPU_THREAD_ORDER=reversed``) on the CPU runner: a kernel missing a barrier reads shared memory
before the threads that write it have run, and gives wrong numbers in one of the two orders.

Only operators whose GPU schedules share memory between threads (tiled conv2d, dense and matmul, and
reductions split across threads) can miss a barrier; the rest run each thread on its own, in any order.
``test_cuda_conformance.py`` runs every operator in the forward order.
"""

import pytest

from nnvm_conformance.suite import test_operator  # noqa: F401 - collected here

nnvm_conformance_targets = ["cuda"]
nnvm_conformance_ops = ["conv2d", "conv2d_nchwc", "dense", "matmul", "softmax", "log_softmax", "sum", "mean",
                        "max", "min", "prod", "global_avg_pool2d", "global_max_pool2d", "instance_norm",
                        "layer_norm", "argmax", "argmin"]
nnvm_conformance_models = []


@pytest.fixture(autouse=True)
def _reversed_threads(monkeypatch):
    monkeypatch.setenv("NNVM_GPU_THREAD_ORDER", "reversed")
