"""One MXNet operator at a time, every attribute variant that matters, compared with MXNet 1.9.1 itself.

Each case is a symbol JSON written here (as MXNet writes it: string attributes, ``null`` variables) with
random weights. MXNet runs all cases in one subprocess of the reference venv (results cached by content);
nnvm imports the same symbol through the in-memory ``(symbol, arg_params, aux_params)`` path and evaluates
the graph with its numpy evaluator (the zoo tests compile for ``llvm``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from nnvm.graph.evaluate import evaluate_graph
from nnvm_frontend_mxnet.importer import load_mxnet
from nnvm_frontend_mxnet.symbol import AUX_INPUTS
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv


class FakeSymbol:
    """What nnvm needs of an ``mx.sym.Symbol``: ``tojson()`` (duck typing, no mxnet import)."""

    def __init__(self, text: str):
        self.text = text

    def tojson(self) -> str:
        return self.text


def _attr(v) -> str:
    return str(v)


def op_case(op, attrs, data, weights=(), *, extra=None, n_out=1, rtol=1e-5, seed=0):
    """A symbol of one operator node. ``data``: [(name, array)] bound at run time; ``weights``:
    [(name, array)] parameters, in the operator's input order after the data."""
    nodes, arg_nodes, inputs = [], [], []
    for name, _ in list(data) + list(weights):
        arg_nodes.append(len(nodes))
        inputs.append([len(nodes), 0, 1 if op in AUX_INPUTS and len(inputs) in AUX_INPUTS[op] else 0])
        nodes.append({"op": "null", "name": name, "inputs": []})
    nodes.append({"op": op, "name": f"{op.lower()}0", "attrs": {k: _attr(v) for k, v in attrs.items()},
                  "inputs": inputs})
    heads = [[len(nodes) - 1, k, 0] for k in range(n_out)]
    sym = json.dumps({"nodes": nodes, "arg_nodes": arg_nodes, "heads": heads,
                      "attrs": {"mxnet_version": ["int", 10901]}})
    return {"symbol": sym, "data": dict(data), "weights": dict(weights), "extra": dict(extra or {}),
            "rtol": rtol}


def rnd(*shape, seed=0, lo=None, hi=None, dtype=np.float32):
    rng = np.random.default_rng(seed)
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


X4 = rnd(2, 4, 7, 7)
W = [("w", rnd(6, 4, 3, 3, seed=1)), ("b", rnd(6, seed=2))]
BN = [("gamma", rnd(4, seed=1, lo=0.5, hi=2)), ("beta", rnd(4, seed=2)), ("mean", rnd(4, seed=3)),
      ("var", rnd(4, seed=4, lo=0.5, hi=2))]

CASES = {
    # convolution
    "conv_pad_stride": op_case("Convolution", {"kernel": (3, 3), "num_filter": 6, "pad": (1, 1),
                                               "stride": (2, 2)}, [("x", X4)], W),
    "conv_groups_dilate_no_bias": op_case(
        "Convolution", {"kernel": (3, 3), "num_filter": 6, "num_group": 2, "dilate": (2, 1), "no_bias": True},
        [("x", X4)], [("w", rnd(6, 2, 3, 3, seed=1))]),
    "conv_depthwise": op_case("Convolution",
                              {"kernel": (3, 3), "num_filter": 4, "num_group": 4, "pad": (1, 1)}, [("x", X4)],
                              [("w", rnd(4, 1, 3, 3, seed=1)), ("b", rnd(4, seed=2))]),
    "conv_1d": op_case("Convolution", {"kernel": (3,), "num_filter": 5, "pad": (1,), "stride": (2,)},
                       [("x", rnd(2, 4, 11))], [("w", rnd(5, 4, 3, seed=1)), ("b", rnd(5, seed=2))]),
    "deconv_stride_pad_adj_groups": op_case(
        "Deconvolution", {"kernel": (3, 3), "num_filter": 6, "stride": (2, 2), "pad": (1, 1), "adj": (1, 1),
                          "num_group": 2}, [("x", X4)], [("w", rnd(4, 3, 3, 3, seed=1))]),
    "deconv_bias": op_case("Deconvolution", {"kernel": (4, 4), "num_filter": 3, "stride": (2, 2),
                                             "pad": (1, 1), "no_bias": False},
                           [("x", X4)], [("w", rnd(4, 3, 4, 4, seed=1)), ("b", rnd(3, seed=2))]),
    # batch norm: fix_gamma defaults to True (the stored gamma is ignored), eps to 1e-3
    "bn_defaults_fix_gamma": op_case("BatchNorm", {}, [("x", X4)], BN),
    "bn_fix_gamma_false": op_case("BatchNorm", {"fix_gamma": False, "eps": 1e-5}, [("x", X4)], BN),
    "bn_use_global_stats": op_case("BatchNorm", {"fix_gamma": False, "use_global_stats": True},
                                   [("x", X4)], BN),
    "bn_axis_last": op_case("BatchNorm", {"fix_gamma": False, "axis": -1}, [("x", rnd(2, 3, 4))], BN),
    "instance_norm": op_case("InstanceNorm", {}, [("x", X4)], BN[:2]),
    "layer_norm": op_case("LayerNorm", {}, [("x", rnd(2, 3, 4))], BN[:2]),
    "layer_norm_axis1": op_case("LayerNorm", {"axis": 1, "eps": 1e-3}, [("x", rnd(2, 4, 3))], BN[:2]),
    "l2norm_instance": op_case("L2Normalization", {}, [("x", X4)]),
    "l2norm_channel": op_case("L2Normalization", {"mode": "channel"}, [("x", X4)]),
    "l2norm_spatial": op_case("L2Normalization", {"mode": "spatial"}, [("x", X4)]),
    "lrn": op_case("LRN", {"nsize": 3, "alpha": 0.001, "beta": 0.75, "knorm": 2}, [("x", X4)]),
    # fully connected
    "fc_flatten": op_case("FullyConnected", {"num_hidden": 5}, [("x", rnd(2, 3, 2, 2))],
                          [("w", rnd(5, 12, seed=1)), ("b", rnd(5, seed=2))]),
    "fc_no_flatten": op_case("FullyConnected", {"num_hidden": 5, "flatten": False}, [("x", rnd(2, 3, 4))],
                             [("w", rnd(5, 4, seed=1)), ("b", rnd(5, seed=2))]),
    "fc_no_bias": op_case("FullyConnected", {"num_hidden": 5, "no_bias": True}, [("x", rnd(2, 4))],
                          [("w", rnd(5, 4, seed=1))]),
    # activations
    **{f"act_{a}": op_case("Activation", {"act_type": a}, [("x", X4)])
       for a in ("relu", "sigmoid", "tanh", "softrelu", "softsign")},
    **{f"leaky_{a}": op_case("LeakyReLU", {"act_type": a, "slope": 0.3}, [("x", X4)])
       for a in ("leaky", "elu", "selu", "gelu")},
    "leaky_prelu": op_case("LeakyReLU", {"act_type": "prelu"}, [("x", X4)], [("alpha", rnd(4, seed=1))]),
    "softmax_axis_temperature": op_case("softmax", {"axis": 1, "temperature": 2.0}, [("x", X4)]),
    "log_softmax": op_case("log_softmax", {}, [("x", X4)]),
    "softmax_output": op_case("SoftmaxOutput", {},
                              [("x", rnd(2, 3, 4)), ("label", np.zeros((2, 3), np.float32))]),
    "softmax_output_2d": op_case("SoftmaxOutput", {}, [("x", rnd(2, 5)), ("label", np.zeros(2, np.float32))]),
    "softmax_output_multi": op_case("SoftmaxOutput", {"multi_output": True},
                                    [("x", rnd(2, 3, 4)), ("label", np.zeros((2, 4), np.float32))]),
    "softmax_activation_channel": op_case("SoftmaxActivation", {"mode": "channel"}, [("x", X4)]),
    "softmax_activation_instance": op_case("SoftmaxActivation", {}, [("x", X4)]),
    "dropout": op_case("Dropout", {"p": 0.5}, [("x", X4)]),
    "clip": op_case("clip", {"a_min": -0.5, "a_max": 0.7}, [("x", X4)]),
    "upsampling": op_case("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1}, [("x", X4)]),
    "embedding": op_case("Embedding", {"input_dim": 6, "output_dim": 3},
                         [("x", np.array([[0, 5, 2], [1, 1, 3]], np.float32))], [("w", rnd(6, 3, seed=1))]),
}

# pooling: conventions, padding, count_include_pad (default True), global
_POOL = {
    "max_valid_pad": {"pool_type": "max", "kernel": (3, 3), "stride": (2, 2), "pad": (1, 1)},
    "avg_pad_default_count": {"pool_type": "avg", "kernel": (3, 3), "stride": (1, 1), "pad": (1, 1)},
    "avg_pad_exclude": {"pool_type": "avg", "kernel": (3, 3), "stride": (2, 2), "pad": (1, 1),
                        "count_include_pad": False},
    "max_full": {"pool_type": "max", "kernel": (3, 3), "stride": (2, 2), "pooling_convention": "full"},
    "avg_full_pad": {"pool_type": "avg", "kernel": (3, 3), "stride": (2, 2), "pad": (1, 1),
                     "pooling_convention": "full"},
    # the 'full' edge: with pad 1 the last window of a 6-wide axis (k 2, s 2) lies wholly in padding
    "max_full_padding_window": {"pool_type": "max", "kernel": (2, 2), "stride": (2, 2), "pad": (1, 1),
                                "pooling_convention": "full"},
    "global_avg": {"pool_type": "avg", "kernel": (1, 1), "global_pool": True},
    "global_max": {"pool_type": "max", "kernel": (1, 1), "global_pool": True},
    "sum": {"pool_type": "sum", "kernel": (2, 2), "stride": (2, 2)},
    "lp2": {"pool_type": "lp", "p_value": 2, "kernel": (2, 2), "stride": (1, 1)},
}
CASES.update({f"pool_{k}": op_case("Pooling", v, [("x", X4 if "window" not in k else rnd(1, 2, 6, 6))])
              for k, v in _POOL.items()})

# tensor operators
X3 = rnd(2, 3, 4)
CASES.update({
    "reshape_0_-1": op_case("Reshape", {"shape": (0, -1)}, [("x", X4)]),
    "reshape_-2": op_case("Reshape", {"shape": (2, -2)}, [("x", X4)]),
    "reshape_-3_-2": op_case("Reshape", {"shape": (-3, -2)}, [("x", X4)]),
    "reshape_-4": op_case("Reshape", {"shape": (-4, 1, -1, -2)}, [("x", X4)]),
    "reshape_-4_split_channels": op_case("Reshape", {"shape": (0, -4, 2, -1, -2)}, [("x", X4)]),
    "reshape_reverse": op_case("Reshape", {"shape": (-1, 0), "reverse": True}, [("x", X4)]),
    "flatten": op_case("Flatten", {}, [("x", X4)]),
    "transpose_default": op_case("transpose", {}, [("x", X3)]),
    "transpose_axes": op_case("transpose", {"axes": (1, 0, 2)}, [("x", X3)]),
    "slice": op_case("slice", {"begin": (0, 1), "end": (None, 3)}, [("x", X3)]),
    "slice_step": op_case("slice", {"begin": (None, None, 3), "end": (None, None, 0), "step": (1, 2, -1)},
                          [("x", X3)]),
    "slice_axis": op_case("slice_axis", {"axis": -1, "begin": 1, "end": None}, [("x", X3)]),
    "slice_like": op_case("slice_like", {"axes": (1, 2)}, [("x", X3), ("y", rnd(1, 2, 3))]),
    "expand_dims": op_case("expand_dims", {"axis": -1}, [("x", X3)]),
    "squeeze": op_case("squeeze", {"axis": 1}, [("x", rnd(2, 1, 3))]),
    "split_squeeze": op_case("split", {"num_outputs": 3, "axis": 1, "squeeze_axis": True}, [("x", X3)],
                             n_out=3),
    "slice_channel": op_case("SliceChannel", {"num_outputs": 2, "axis": -1}, [("x", X3)], n_out=2),
    "stack": op_case("stack", {"axis": 1, "num_args": 2}, [("x", X3), ("y", rnd(2, 3, 4, seed=1))]),
    "concat": op_case("Concat", {"dim": 2, "num_args": 2}, [("x", X3), ("y", rnd(2, 3, 2, seed=1))]),
    "tile": op_case("tile", {"reps": (2, 1, 1, 2)}, [("x", X3)]),
    "repeat_axis": op_case("repeat", {"repeats": 2, "axis": 1}, [("x", X3)]),
    "repeat_flat": op_case("repeat", {"repeats": 3}, [("x", X3)]),
    "pad_constant": op_case("Pad", {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 2, 2, 1),
                                    "constant_value": 1.5}, [("x", X4)]),
    "pad_edge": op_case("Pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 1, 2, 2, 1)}, [("x", X4)]),
    "pad_reflect": op_case("Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 1, 2, 2, 1)}, [("x", X4)]),
    "sum_axes": op_case("sum", {"axis": (0, 2)}, [("x", X3)]),
    "mean_keepdims": op_case("mean", {"axis": 1, "keepdims": True}, [("x", X3)]),
    "max_exclude": op_case("max", {"axis": 1, "exclude": True}, [("x", X3)]),
    "min_all": op_case("min", {}, [("x", X3)]),
    "prod": op_case("prod", {"axis": -1}, [("x", X3)]),
    "argmax": op_case("argmax", {"axis": 1}, [("x", X3)]),
    "argmax_all": op_case("argmax", {}, [("x", X3)]),
    "argmin_keepdims": op_case("argmin", {"axis": 2, "keepdims": True}, [("x", X3)]),
    "cast_fp16": op_case("Cast", {"dtype": "float16"}, [("x", X3)], rtol=1e-3),
    "cast_int32": op_case("Cast", {"dtype": "int32"}, [("x", X3 * 3)]),
    "zeros_like": op_case("zeros_like", {}, [("x", X3)]),
    "ones_like": op_case("ones_like", {}, [("x", X3)]),
    "where": op_case("where", {}, [("c", (X3 > 0).astype(np.float32)), ("x", X3),
                                   ("y", rnd(2, 3, 4, seed=1))]),
    "dot": op_case("dot", {}, [("x", rnd(3, 4)), ("y", rnd(4, 5, seed=1))]),
    "dot_transpose": op_case("dot", {"transpose_a": True, "transpose_b": True},
                             [("x", rnd(4, 3)), ("y", rnd(5, 4, seed=1))]),
    "dot_nd": op_case("dot", {}, [("x", rnd(2, 3, 4)), ("y", rnd(4, 5, seed=1))]),
    "batch_dot": op_case("batch_dot", {"transpose_b": True}, [("x", X3), ("y", rnd(2, 5, 4, seed=1))]),
    "elemwise_add": op_case("elemwise_add", {}, [("x", X3), ("y", rnd(2, 3, 4, seed=1))]),
    "broadcast_mul": op_case("broadcast_mul", {}, [("x", X3), ("y", rnd(1, 3, 1, seed=1))]),
    "broadcast_div": op_case("broadcast_div", {}, [("x", X3), ("y", rnd(2, 1, 4, seed=1, lo=0.5, hi=2))]),
    "broadcast_maximum": op_case("broadcast_maximum", {}, [("x", X3), ("y", rnd(1, 1, 4, seed=1))]),
    "broadcast_greater": op_case("broadcast_greater", {}, [("x", X3), ("y", rnd(1, 1, 4, seed=1))]),
    "broadcast_to": op_case("broadcast_to", {"shape": (2, 0, 4)}, [("x", rnd(2, 3, 1))]),
    "square": op_case("square", {}, [("x", X3)]),
    "rsqrt": op_case("rsqrt", {}, [("x", rnd(2, 3, lo=0.5, hi=2))]),
})
for _name, _scalar in [("_plus_scalar", 1.5), ("_minus_scalar", 0.5), ("_rminus_scalar", 2.0),
                       ("_mul_scalar", -3.0), ("_div_scalar", 4.0), ("_rdiv_scalar", 2.0),
                       ("_power_scalar", 2.0), ("_maximum_scalar", 0.1), ("_minimum_scalar", -0.2),
                       ("_greater_scalar", 0.0)]:
    CASES[_name] = op_case(_name, {"scalar": _scalar}, [("x", rnd(2, 3, lo=0.5, hi=2) if "div" in _name
                                                         else X3)])


# A pre-0.9 file as MXNet 0.8 wrote it: "param"/"attr" keys, two-element inputs, no mxnet_version, and no
# BatchNorm aux variables (MXNet adds bn_moving_mean/var when it loads it; so do we).
LEGACY = json.dumps({"nodes": [
    {"op": "null", "name": "data", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "null", "name": "conv_weight", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "null", "name": "conv_bias", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "Convolution", "name": "conv", "param": {"kernel": "(3, 3)", "num_filter": "4", "pad": "(1, 1)",
                                                    "stride": "(1, 1)", "no_bias": "False"},
     "attr": {"lr_mult": "1.0"}, "inputs": [[0, 0], [1, 0], [2, 0]], "backward_source_id": -1},
    {"op": "null", "name": "bn_gamma", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "null", "name": "bn_beta", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "BatchNorm", "name": "bn", "param": {"eps": "0.001", "fix_gamma": "True", "momentum": "0.9"},
     "inputs": [[3, 0], [4, 0], [5, 0]], "backward_source_id": -1},
    {"op": "Activation", "name": "relu", "param": {"act_type": "relu"}, "inputs": [[6, 0]],
     "backward_source_id": -1},
    {"op": "Pooling", "name": "pool", "param": {"kernel": "(3, 3)", "pool_type": "max", "stride": "(2, 2)",
                                                "pooling_convention": "full"}, "inputs": [[7, 0]],
     "backward_source_id": -1},
    {"op": "Flatten", "name": "flat", "param": {}, "inputs": [[8, 0]], "backward_source_id": -1},
    {"op": "null", "name": "fc_weight", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "null", "name": "fc_bias", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "5", "no_bias": "False"},
     "inputs": [[9, 0], [10, 0], [11, 0]], "backward_source_id": -1},
    {"op": "null", "name": "softmax_label", "param": {}, "inputs": [], "backward_source_id": -1},
    {"op": "SoftmaxOutput", "name": "softmax", "param": {}, "inputs": [[12, 0], [13, 0]],
     "backward_source_id": -1}],
    "arg_nodes": [0, 1, 2, 4, 5, 10, 11, 13], "heads": [[14, 0]]})
CASES["legacy_0_8_json"] = {
    "symbol": LEGACY, "data": {"data": rnd(2, 3, 8, 8)}, "extra": {"softmax_label": np.zeros(2, np.float32)},
    "rtol": 1e-5,
    "weights": {"conv_weight": rnd(4, 3, 3, 3, seed=1), "conv_bias": rnd(4, seed=2),
                "bn_gamma": rnd(4, seed=3, lo=0.5, hi=2), "bn_beta": rnd(4, seed=4),
                "bn_moving_mean": rnd(4, seed=5), "bn_moving_var": rnd(4, seed=6, lo=0.5, hi=2),
                "fc_weight": rnd(5, 64, seed=7), "fc_bias": rnd(5, seed=8)}}



def rnn_case(mode, layers, bidirectional, state_outputs, steps=3, batch=2, size=5, hidden=4):
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode]
    dirs = 2 if bidirectional else 1
    sizes = [size] + [dirs * hidden] * (layers - 1)
    n = sum(dirs * gates * hidden * (i + hidden + 2) for i in sizes)
    states = [("state", rnd(layers * dirs, batch, hidden, seed=2))]
    if mode == "lstm":
        states.append(("state_cell", rnd(layers * dirs, batch, hidden, seed=3)))
    n_out = 1 + (len(states) if state_outputs else 0)
    return op_case("RNN", {"mode": mode, "state_size": hidden, "num_layers": layers,
                           "bidirectional": bidirectional, "state_outputs": state_outputs, "p": 0.2},
                   [("x", rnd(steps, batch, size))], [("params", rnd(n, seed=1) * 0.5), *states],
                   n_out=n_out, rtol=1e-4)


CASES.update({
    "rnn_lstm": rnn_case("lstm", 1, False, True),
    "rnn_lstm_2_layers_bidirectional": rnn_case("lstm", 2, True, True),
    "rnn_gru_bidirectional": rnn_case("gru", 1, True, False),
    "rnn_gru_2_layers_states": rnn_case("gru", 2, False, True),
    "rnn_tanh": rnn_case("rnn_tanh", 1, False, True),
    "rnn_relu_bidirectional": rnn_case("rnn_relu", 2, True, False),
})


@pytest.fixture(scope="module")
def mxnet_outputs():
    cases = [(c["symbol"], c["weights"], {**c["data"], **c["extra"]}) for c in CASES.values()]
    results = pytest_venv(testing.mxnet_references, cases)
    return dict(zip(CASES, results))


def run_nnvm(case) -> list:
    arg = {k: v for k, v in case["weights"].items() if not k.endswith(("mean", "var"))}
    aux = {k: v for k, v in case["weights"].items() if k.endswith(("mean", "var"))}
    shapes = {k: v.shape for k, v in case["data"].items()}
    graph = load_mxnet((FakeSymbol(case["symbol"]), arg, aux), shapes=shapes)
    graph.validate()
    feeds = {k: v for k, v in case["data"].items() if k in graph.inputs}
    return evaluate_graph(graph, feeds)


def assert_close(got, want, rtol, what):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, MXNet gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what} output {k}: shape {g.shape}, MXNet {w.shape}"
        assert g.dtype == w.dtype, f"{what} output {k}: dtype {g.dtype}, MXNet {w.dtype}"
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        err = float(np.abs(g64 - w64).max() / max(np.abs(w64).max(), 1e-30)) if w.size else 0.0
        assert err <= rtol, f"{what} output {k} shape {w.shape}: max relative error {err:.3g} > {rtol}"


@pytest.mark.parametrize("name", list(CASES))
def test_operator_matches_mxnet(name, mxnet_outputs):
    case = CASES[name]
    assert_close(run_nnvm(case), mxnet_outputs[name], case["rtol"], name)
