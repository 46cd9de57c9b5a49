"""Recurrent layers (SimpleRNN, LSTM, GRU) on the shared unroll ``nnvm.frontend.compose.recurrent_direction``
(the time steps are static here).

Keras's weights become the shared unroll's (ONNX's) form: kernels transposed to (gates * units, in),
LSTM gates reordered from Keras's i f c o to i o f c, GRU's ``reset_after`` (Keras 3's default) is
``linear_before_reset`` with the second bias row as the recurrent bias. ``go_backwards`` walks the steps
in reverse and, as Keras does, returns the sequence in that (reversed) order.
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend import compose
from nnvm_frontend_keras.context import CONVERTERS, Context
from nnvm_frontend_keras.convert_layers import activation


def _run(ctx: Context, x: str, cell: str, kernel, rec, in_bias, rec_bias, acts: list,
         reset_after: bool = False):
    for key in ("return_state", "stateful", "time_major"):
        if ctx.attr(key, False):
            raise ctx.error(f"{key}=True is not supported")
    x = ctx.last(x)
    n = ctx.shape(x)[0]
    units = rec.shape[0]
    seq = ctx.transpose(x, (1, 0, 2))  # (T, N, I), as the shared unroll takes it
    zeros = np.zeros((n, units), np.float32)
    h0, c0 = ctx.param(zeros, "h0"), (ctx.param(zeros, "c0") if cell == "LSTM" else None)
    outs, _, _ = compose.recurrent_direction(
        ctx, cell, seq, ctx.param(np.ascontiguousarray(kernel.T), "kernel"),
        ctx.param(np.ascontiguousarray(rec.T), "recurrent_kernel"), ctx.param(in_bias, "bias"),
        ctx.param(rec_bias, "recurrent_bias"), h0, c0, bool(ctx.attr("go_backwards", False)),
        lambda k, v: activation(ctx, v, acts[k]), linear_before_reset=reset_after)
    if ctx.attr("go_backwards", False):
        outs = outs[::-1]
    if not ctx.attr("return_sequences", False):
        return outs[-1]
    return ctx.op("concatenate", [ctx.reshape(h, (n, 1, units)) for h in outs], {"axis": 1})


def _bias(ctx: Context, i: int, size: int) -> np.ndarray:
    return ctx.weight(i, "the bias") if ctx.attr("use_bias", True) else np.zeros(size, np.float32)


@CONVERTERS.register("SimpleRNN")
def simple_rnn(ctx: Context, inputs):
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    units = rec.shape[0]
    return _run(ctx, inputs[0], "RNN", kernel, rec, _bias(ctx, 2, units), np.zeros(units, np.float32),
                [ctx.attr("activation", "tanh")])


def _lstm_order(w) -> np.ndarray:
    """Keras's gate blocks i f c o (last axis) as the unroll's i o f c."""
    i, f, c, o = np.split(w, 4, axis=-1)
    return np.concatenate([i, o, f, c], axis=-1)


@CONVERTERS.register("LSTM")
def lstm(ctx: Context, inputs):
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    units = rec.shape[0]
    act, rec_act = ctx.attr("activation", "tanh"), ctx.attr("recurrent_activation", "sigmoid")
    bias = _lstm_order(_bias(ctx, 2, 4 * units))
    return _run(ctx, inputs[0], "LSTM", _lstm_order(kernel), _lstm_order(rec), bias,
                np.zeros(4 * units, np.float32), [rec_act, act, act])


@CONVERTERS.register("GRU")
def gru(ctx: Context, inputs):
    """Gates z r h in both Keras and the unroll; ``reset_after`` applies the reset gate to the recurrent
    projection after its bias (ONNX's ``linear_before_reset``), else to the state before it."""
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    units = rec.shape[0]
    reset_after = bool(ctx.attr("reset_after", True))
    act, rec_act = ctx.attr("activation", "tanh"), ctx.attr("recurrent_activation", "sigmoid")
    if reset_after:
        bias = _bias(ctx, 2, (2, 3 * units)).reshape(2, 3 * units)
        in_bias, rec_bias = bias[0], bias[1]
    else:
        in_bias, rec_bias = _bias(ctx, 2, 3 * units), np.zeros(3 * units, np.float32)
    return _run(ctx, inputs[0], "GRU", kernel, rec, in_bias, rec_bias, [rec_act, act], reset_after)


_MERGES = {"sum": "add", "mul": "multiply", "ave": "add"}


@CONVERTERS.register("Bidirectional")
def bidirectional(ctx: Context, inputs):
    """The wrapped layer forward and backward (its own ``backward_layer`` config when the file has one,
    else the forward's with ``go_backwards`` flipped), each with half the weights; the backward sequence is
    flipped back to time order before the two are merged as ``merge_mode`` says."""
    name, op_type, attrs, weights = ctx.name, ctx.op_type, ctx.attrs, ctx.weights
    forward = attrs.get("layer") or {}
    backward = attrs.get("backward_layer")
    if not isinstance(backward, dict):
        cfg = dict(forward.get("config") or {})
        cfg["go_backwards"] = not cfg.get("go_backwards", False)
        backward = {"class_name": forward.get("class_name"), "config": cfg}
    merge = attrs.get("merge_mode", "concat")
    if merge not in ("concat", "sum", "mul", "ave"):
        raise ctx.error(f"merge_mode {merge!r} is not supported")
    outs = []
    half = len(weights) // 2
    for part, sub, ws in (("forward", forward, weights[:half]), ("backward", backward, weights[half:])):
        cls = sub.get("class_name")
        if cls not in ("SimpleRNN", "LSTM", "GRU"):
            raise ctx.error(f"wraps a {cls!r} layer (only SimpleRNN, LSTM and GRU)")
        ctx.begin(f"{name}/{part}", cls, sub.get("config") or {})
        ctx.weights = ws
        try:
            outs.append(CONVERTERS.lookup(cls)(ctx, inputs))
        finally:
            ctx.begin(name, op_type, attrs)
            ctx.weights = weights
    fwd, bwd = outs
    if forward.get("config", {}).get("return_sequences", False):
        t = ctx.shape(bwd)[1]
        bwd = ctx.op("take", [bwd, ctx.param(np.arange(t - 1, -1, -1, dtype=np.int32), "reversed")],
                     {"axis": 1})
    if merge == "concat":
        return ctx.op("concatenate", [fwd, bwd], {"axis": ctx.rank(fwd) - 1})
    y = ctx.op(_MERGES[merge], [fwd, bwd])
    return ctx.op("multiply", [y, ctx.scalar(0.5, y)]) if merge == "ave" else y
