"""Fixtures for the operator tests: run an operator through compute, schedule, lowering and the
reference interpreter, and build single-node ONNX models for onnxruntime references.

Operators come straight from ``nnvm.ops.standard`` (not the plugin manager), so these tests do not
depend on which plugins happen to be installed.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.graph.ir import TensorType
from nnvm.ops.registry import OpRegistry
from nnvm.te.tensor import ComputeOp
from nnvm.tir.interpreter import run_primfunc


def _max_error(got: np.ndarray, want: np.ndarray) -> str:
    if got.dtype == bool or want.dtype == bool or got.size == 0:
        return f"{int(np.sum(got != want))} elements differ"
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    diff = np.where(np.isnan(got) & np.isnan(want), 0, diff) if got.dtype.kind == "f" else diff
    k = int(np.nanargmax(diff)) if diff.size else 0
    return f"max abs error {np.nanmax(diff):.3g} at flat index {k} (got {got.flat[k]}, want {want.flat[k]})"


class OpHarness:
    """Runs standard operators the way the compiler does, on tiny inputs, through the interpreter."""

    def __init__(self):
        from nnvm.ops import standard

        self.registry = OpRegistry()
        for opdef in standard.all_ops():
            self.registry.register(opdef, "nnvm-std-ops")

    def get(self, name: str):
        return self.registry.get(name)

    def infer(self, name: str, arrays: list, attrs: dict | None = None) -> list[TensorType]:
        opdef = self.get(name)
        attrs = opdef.normalize_attrs(attrs or {}, "test")
        types = [None if a is None else TensorType(a.shape, str(a.dtype)) for a in arrays]
        return opdef.infer_type(types, attrs)

    def lower(self, name: str, arrays: list, attrs: dict | None = None, schedule: str = "inline"):
        """(PrimFunc, output types, output tensors) for the operator on inputs shaped like ``arrays``.

        ``schedule``: "inline" inlines the injective intermediate stages, "root" computes every stage
        in its own loop nest, "generic" is the compiler's generic CPU schedule (fused, parallel and
        vectorized loops).
        """
        opdef = self.get(name)
        attrs = opdef.normalize_attrs(attrs or {}, "test")
        out_types = self.infer(name, arrays, attrs)
        inputs = [te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in enumerate(arrays)]
        outs = opdef.compute(inputs, attrs, out_types)
        assert len(outs) == len(out_types), (
            f"{name}: compute gave {len(outs)} outputs, infer_type {len(out_types)}")
        for t, ty in zip(outs, out_types):
            shape = tuple(int(d.value) for d in t.shape)
            assert (shape, t.dtype) == (ty.shape, ty.dtype), (
                f"{name}: compute made {t.dtype}{list(shape)} but infer_type said {ty}")
        assert all(isinstance(t.op, ComputeOp) and t.op.tag == name for t in outs), (
            f"{name}: the output stages are tagged {[t.op.tag for t in outs]}, not with the operator's name")
        if schedule == "generic":
            from nnvm.generic_schedule import generic_schedule

            sch = generic_schedule(outs)
        else:
            sch = te.create_schedule([t.op for t in outs])
        if schedule == "inline":
            for stage in sch.stages:
                if isinstance(stage.op, ComputeOp) and not stage.is_output and not stage.op.reduce_axis:
                    stage.compute_inline()
        return nnvm.lower(sch, inputs + list(outs), name=name), out_types, outs

    def run(self, name: str, arrays: list, attrs: dict | None = None, schedule: str = "inline") -> list:
        """The operator's outputs computed by its lowered loop program in the interpreter."""
        func, out_types, _ = self.lower(name, arrays, attrs, schedule)
        results = [np.zeros(t.shape, t.dtype) for t in out_types]
        run_primfunc(func, [np.require(a, requirements='C') for a in arrays] + results)
        return results

    def evaluate(self, name: str, arrays: list, attrs: dict | None = None) -> list[np.ndarray]:
        opdef = self.get(name)
        return opdef.evaluate(list(arrays), opdef.normalize_attrs(attrs or {}, "test"))

    def check(self, name: str, arrays: list, attrs: dict | None, expected, rtol: float = 1e-5,
              atol: float = 1e-6, schedule: str = "inline") -> None:
        """Interpreter, ``evaluate`` and ``infer_type`` all agree with the reference ``expected``."""
        expected = [np.asarray(e) for e in (expected if isinstance(expected, list | tuple) else [expected])]
        where = f"{name} on {[tuple(a.shape) for a in arrays]} with {attrs or {}} ({schedule} schedule)"
        types = self.infer(name, arrays, attrs)
        inferred, wanted = [t.shape for t in types], [e.shape for e in expected]
        assert inferred == wanted, f"{where}: infer_type says {inferred}, the reference has {wanted}"
        for how, outs in (("interpreter", self.run(name, arrays, attrs, schedule)),
                          ("evaluate", self.evaluate(name, arrays, attrs))):
            assert len(outs) == len(expected), f"{where}: {how}: {len(outs)} outputs, want {len(expected)}"
            for k, (got, want, ty) in enumerate(zip(outs, expected, types)):
                what = f"{where}: {how} output {k}"
                assert got.shape == want.shape, f"{what} has shape {got.shape}, want {want.shape}"
                assert str(got.dtype) == ty.dtype, f"{what} is {got.dtype}, infer_type says {ty.dtype}"
                ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                 equal_nan=True) if got.dtype != bool else np.array_equal(got, want)
                assert ok, f"{what}: {_max_error(got, want)}"


@pytest.fixture(scope="session")
def ops() -> OpHarness:
    return OpHarness()


def _onnx_dtype(dtype) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def run_onnx(op_type: str, inputs: list, attrs: dict | None = None, num_outputs: int = 1,
             opset: int = 21) -> list[np.ndarray]:
    """Run one ONNX node in onnxruntime: the reference for operators numpy does not have."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    names = [f"x{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"y{k}" for k in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node], "single",
        [helper.make_tensor_value_info(n, _onnx_dtype(a.dtype), a.shape) for n, a in zip(names, inputs) if n],
        [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(names, inputs) if n})


@pytest.fixture(scope="session")
def onnx_ref():
    return run_onnx


@pytest.fixture(autouse=True)
def core_plugins_only(monkeypatch):
    """Core tests see only the core's built-in plugins, whatever else the environment has installed."""
    from nnvm import plugins

    monkeypatch.setenv("NNVM_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reset()
    yield
    monkeypatch.delenv("NNVM_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    plugins.reset()
