"""``Module.run`` from several threads at once: every thread gets what the module gives it alone, for a
compiled module and for the same module exported and read back with ``nnvm.load`` (issue 20: before,
4 threads x 20 runs of one module gave 78 wrong results of 80, silently). Whether the threads together
are no slower than the same runs in a row is a benchmark, ``bench/threads.py``, not a timed test.

The serial outputs are themselves checked against onnxruntime, so "what it gives alone" is right.
A small convolutional network keeps this quick on a busy machine.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from onnx import TensorProto, helper, numpy_helper

import nnvm

THREADS = 4
RUNS = 20  # per thread: 4 x 20 runs, as in issue 20
SHAPE = (1, 8, 32, 32)


def _conv_model():
    """conv-relu-conv-relu-pool-dense: parallel kernels, and an arena where a run's activations live."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, "w2"),
             numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1, name="dense")]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(_conv_model().SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    """The compiled model and the same module exported and loaded back."""
    mod = nnvm.compile(_conv_model(), target="llvm")
    path = tmp_path_factory.mktemp("concurrency") / "conv.so"
    mod.export(str(path))
    return {"compiled": mod, "loaded": nnvm.load(str(path))}


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(20)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(n)]


def _threaded(mod, xs: list, runs: int) -> list[list[np.ndarray]]:
    """Thread ``k`` runs ``xs[k]`` ``runs`` times; every output of every run, per thread."""
    def work(x):
        return [mod.run(x)[0] for _ in range(runs)]

    with ThreadPoolExecutor(len(xs)) as pool:
        return list(pool.map(work, xs))


def _check_serial(mod, session, xs: list) -> list[np.ndarray]:
    alone = [mod.run(x)[0] for x in xs]
    for x, want in zip(xs, alone):  # the serial results are right, so matching them means right
        np.testing.assert_allclose(want, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    return alone


@pytest.mark.parametrize("kind", ["compiled", "loaded"])
def test_threads_get_their_own_results(modules, session, kind):
    mod = modules[kind]
    xs = _inputs(THREADS)
    alone = _check_serial(mod, session, xs)
    outputs = _threaded(mod, xs, RUNS)
    wrong = sum(not np.array_equal(got, want)
                for per_thread, want in zip(outputs, alone) for got in per_thread)
    assert wrong == 0, f"{wrong} of {THREADS * RUNS} threaded runs differ from the same input run alone"


_input = arrays(np.float32, SHAPE, elements=st.floats(-4, 4, width=32))


@seed(20)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_input, min_size=2, max_size=8))
def test_property_random_inputs_from_threads_match_serial(modules, session, xs):
    """Random inputs, each run from its own thread (three rounds at once), equal the serial runs, which
    equal onnxruntime's."""
    mod = modules["compiled"]
    alone = _check_serial(mod, session, xs)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: mod.run(x)[0], xs * 3))
    for k, out in enumerate(got):
        np.testing.assert_array_equal(out, alone[k % len(xs)])
