"""Recurrent layers (SimpleRNN, LSTM, GRU), unrolled over the time steps, which are static here.

The input projection of every step is one matmul; each step then adds its recurrent projection
(``dense`` with the transposed recurrent kernel) and applies the gates. ``go_backwards`` walks the steps
in reverse and, as Keras does, returns the sequence in that (reversed) order.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_keras.context import CONVERTERS, Context
from nnvm_frontend_keras.convert_layers import activation


def _check(ctx: Context) -> None:
    for key in ("return_state", "stateful"):
        if ctx.attr(key, False):
            raise ctx.error(f"{key}=True is not supported")
    if ctx.attr("time_major", False):
        raise ctx.error("time_major=True is not supported")


def _steps(ctx: Context, x: str, kernel, bias) -> list:
    """``x @ kernel + bias`` of every time step, as (N, units) values in processing order."""
    n, t, _ = ctx.shape(x)
    proj = ctx.op("matmul", [x, ctx.param(kernel, "kernel")])
    if bias is not None:
        proj = ctx.op("add", [proj, ctx.param(bias, "bias")])
    width = ctx.shape(proj)[2]
    order = range(t - 1, -1, -1) if ctx.attr("go_backwards", False) else range(t)
    return [ctx.reshape(ctx.op("strided_slice", [proj], {"begin": (i,), "end": (i + 1,), "axes": (1,)}),
                        (n, width)) for i in order]


def _gate(ctx: Context, v: str, k: int, units: int) -> str:
    return ctx.op("strided_slice", [v], {"begin": (k * units,), "end": ((k + 1) * units,), "axes": (1,)})


def _result(ctx: Context, states: list) -> str:
    if not ctx.attr("return_sequences", False):
        return states[-1]
    n, units = ctx.shape(states[0])
    return ctx.op("concatenate", [ctx.reshape(h, (n, 1, units)) for h in states], {"axis": 1})


def _recurrent(ctx: Context, h: str, weight) -> str:
    return ctx.op("dense", [h, ctx.param(np.ascontiguousarray(weight.T), "recurrent_kernel")])


@CONVERTERS.register("SimpleRNN")
def simple_rnn(ctx: Context, inputs):
    _check(ctx)
    x = ctx.last(inputs[0])
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    bias = ctx.weight(2, "the bias") if ctx.attr("use_bias", True) else None
    units = rec.shape[0]
    h = ctx.param(np.zeros((ctx.shape(x)[0], units), np.float32), "h0")
    states = []
    for xp in _steps(ctx, x, kernel, bias):
        h = activation(ctx, ctx.op("add", [xp, _recurrent(ctx, h, rec)]), ctx.attr("activation", "tanh"))
        states.append(h)
    return _result(ctx, states)


@CONVERTERS.register("LSTM")
def lstm(ctx: Context, inputs):
    """Gates i, f, c, o (Keras's order); c' = f c + i act(c~), h' = o act(c')."""
    _check(ctx)
    x = ctx.last(inputs[0])
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    bias = ctx.weight(2, "the bias") if ctx.attr("use_bias", True) else None
    units = rec.shape[0]
    act, rec_act = ctx.attr("activation", "tanh"), ctx.attr("recurrent_activation", "sigmoid")
    zeros = np.zeros((ctx.shape(x)[0], units), np.float32)
    h, c = ctx.param(zeros, "h0"), ctx.param(zeros, "c0")
    states = []
    for xp in _steps(ctx, x, kernel, bias):
        z = ctx.op("add", [xp, _recurrent(ctx, h, rec)])
        i, f, g, o = (_gate(ctx, z, k, units) for k in range(4))
        i, f, o = activation(ctx, i, rec_act), activation(ctx, f, rec_act), activation(ctx, o, rec_act)
        c = ctx.op("add", [ctx.op("multiply", [f, c]), ctx.op("multiply", [i, activation(ctx, g, act)])])
        h = ctx.op("multiply", [o, activation(ctx, c, act)])
        states.append(h)
    return _result(ctx, states)


@CONVERTERS.register("GRU")
def gru(ctx: Context, inputs):
    """Gates z, r, h (Keras's order); with ``reset_after`` (Keras 3's default) the reset gate scales the
    recurrent projection after its bias, else the state before it."""
    _check(ctx)
    x = ctx.last(inputs[0])
    kernel, rec = ctx.weight(0, "the kernel"), ctx.weight(1, "the recurrent kernel")
    units = rec.shape[0]
    reset_after = ctx.attr("reset_after", True)
    bias = ctx.weight(2, "the bias") if ctx.attr("use_bias", True) else np.zeros(
        (2, 3 * units) if reset_after else (3 * units,), np.float32)
    in_bias, rec_bias = (bias[0], bias[1]) if reset_after else (bias, None)
    act, rec_act = ctx.attr("activation", "tanh"), ctx.attr("recurrent_activation", "sigmoid")
    h = ctx.param(np.zeros((ctx.shape(x)[0], units), np.float32), "h0")
    one = ctx.param(np.float32(1.0), "one")
    states = []
    for xp in _steps(ctx, x, kernel, in_bias):
        xz, xr, xh = (_gate(ctx, xp, k, units) for k in range(3))
        if reset_after:
            hp = ctx.op("add", [_recurrent(ctx, h, rec), ctx.param(rec_bias, "recurrent_bias")])
            hz, hr, hh = (_gate(ctx, hp, k, units) for k in range(3))
            z = activation(ctx, ctx.op("add", [xz, hz]), rec_act)
            r = activation(ctx, ctx.op("add", [xr, hr]), rec_act)
            cand = activation(ctx, ctx.op("add", [xh, ctx.op("multiply", [r, hh])]), act)
        else:
            hzr = _recurrent(ctx, h, rec[:, :2 * units])
            z = activation(ctx, ctx.op("add", [xz, _gate(ctx, hzr, 0, units)]), rec_act)
            r = activation(ctx, ctx.op("add", [xr, _gate(ctx, hzr, 1, units)]), rec_act)
            cand = activation(ctx, ctx.op("add", [xh, _recurrent(ctx, ctx.op("multiply", [r, h]),
                                                                  rec[:, 2 * units:])]), act)
        # h' = z h + (1 - z) h~
        h = ctx.op("add", [ctx.op("multiply", [z, h]),
                           ctx.op("multiply", [ctx.op("subtract", [one, z]), cand])])
        states.append(h)
    return _result(ctx, states)
