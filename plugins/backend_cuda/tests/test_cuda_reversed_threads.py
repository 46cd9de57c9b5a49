"""The conformance suite's operators on ``cuda`` with the threads of every block run in reverse order
(``NNVM_GPU_THREAD_ORDER=reversed``) on the CPU runner: a kernel missing a barrier reads shared memory
before the threads that write it have run, and gives wrong numbers in one of the two orders.
"""

import pytest

from nnvm_conformance.suite import test_operator  # noqa: F401 - collected here

nnvm_conformance_targets = ["cuda"]
nnvm_conformance_models = []


@pytest.fixture(autouse=True)
def _reversed_threads(monkeypatch):
    monkeypatch.setenv("NNVM_GPU_THREAD_ORDER", "reversed")
