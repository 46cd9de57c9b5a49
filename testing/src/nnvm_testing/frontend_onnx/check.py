"""Check an imported graph against onnxruntime: the reference every ONNX frontend test compares with."""

from __future__ import annotations

import numpy as np


def single_node_model(op_type: str, inputs, attrs: dict | None = None, *, constants=(), opset: int = 13,
                      n_outputs: int = 1, domain: str = ""):
    """A one-node ONNX model. ``inputs`` is a list of ``(name, array)`` (name "" for an omitted input);
    those named in ``constants`` become initializers, the others graph inputs. Outputs: ``y0``, ``y1``..."""
    from onnx import helper, numpy_helper

    graph_inputs, inits = [], []
    for name, value in inputs:
        if not name:
            continue
        value = np.asarray(value)
        if name in constants:
            inits.append(numpy_helper.from_array(value, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
    outputs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, [name for name, _ in inputs], outputs, name=f"{op_type.lower()}_node",
                            domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], f"single_{op_type}", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_onnxruntime(model, feeds: dict) -> list:
    """The outputs of ``model`` (a ModelProto or path) for ``feeds`` on onnxruntime's CPU provider."""
    import onnxruntime as ort

    data = model if isinstance(model, str) else model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # keep "unused initializer" warnings out of test output
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def relative_error(got, want) -> float:
    """max |got - want| / max |want| (absolute error where ``want`` is all zeros)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = np.abs(want).max() if want.size else 0.0
    diff = np.abs(got - want).max() if want.size else 0.0
    return float(diff / scale) if scale > 0 else float(diff)


def assert_matches_onnxruntime(model, feeds: dict, *, shapes=None, rtol: float = 1e-4) -> list:
    """Import ``model``, evaluate the graph in numpy, and compare every output with onnxruntime.

    Returns the imported graph's outputs. A failure names the output, shapes and the relative error.
    """
    from nnvm.graph.evaluate import evaluate_graph
    from nnvm_frontend_onnx.importer import load_onnx

    graph = load_onnx(model, shapes=shapes)
    graph.validate()
    got = evaluate_graph(graph, {k: v for k, v in feeds.items() if k in graph.inputs})
    want = run_onnxruntime(model, feeds)
    assert len(got) == len(want), f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        assert g.shape == w.shape, f"output {k} ({graph.outputs[k]}): shape {g.shape}, onnxruntime {w.shape}"
        assert graph.types[graph.outputs[k]].shape == w.shape, \
            f"output {k}: inferred type {graph.types[graph.outputs[k]]}, onnxruntime shape {w.shape}"
        if w.dtype.kind in "biu" or w.dtype == bool:
            assert np.array_equal(g, w), f"output {k} ({graph.outputs[k]}): values differ from onnxruntime"
        else:
            err = relative_error(g, w)
            assert err < rtol, f"output {k} ({graph.outputs[k]}) shape {w.shape}: relative error {err:.3g}"
    return got
