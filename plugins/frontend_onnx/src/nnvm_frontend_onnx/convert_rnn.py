"""RNN, GRU and LSTM unrolled over their static sequence length into dense, elementwise and slicing
nodes.

The input projection of every time step is one ``dense`` over the whole sequence; each step then adds
the recurrent projection of the previous hidden state and applies the gate equations of the ONNX
specification (gate order ``i`` for RNN, ``z r h`` for GRU, ``i o f c`` for LSTM, peepholes ``i o f``).
Directions ``forward``, ``reverse`` and ``bidirectional``, ``layout`` 0 and 1, ``clip``,
``linear_before_reset``, ``input_forget`` and the activation attributes are handled. Per-batch
``sequence_lens`` shorter than the sequence are not (they need masking; reported as unsupported).
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend.compose import recurrent_direction
from nnvm.frontend.compose import take as _take
from nnvm_frontend_onnx.context import Context, converter

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}


def _activation(ctx: Context, name: str, x: str, alpha, beta) -> str:
    name = name.lower()
    if name in ("sigmoid", "tanh", "relu"):
        return ctx.op(name, [x])
    if name == "leakyrelu":
        return ctx.op("leaky_relu", [x], {"alpha": float(0.01 if alpha is None else alpha)})
    if name == "hardsigmoid":
        return ctx.op("hard_sigmoid", [x], {"alpha": float(0.2 if alpha is None else alpha),
                                            "beta": float(0.5 if beta is None else beta)})
    if name == "affine":
        return ctx.op("add", [ctx.op("multiply", [x, ctx.scalar(alpha, x)]), ctx.scalar(beta, x)])
    if name == "scaledtanh":
        inner = ctx.op("tanh", [ctx.op("multiply", [x, ctx.scalar(beta, x)])])
        return ctx.op("multiply", [inner, ctx.scalar(alpha, x)])
    if name == "elu":
        return ctx.op("elu", [x], {"alpha": float(1.0 if alpha is None else alpha)})
    if name == "softsign":
        return ctx.op("divide", [x, ctx.op("add", [ctx.op("abs", [x]), ctx.scalar(1.0, x)])])
    if name == "softplus":
        return ctx.op("softplus", [x])
    if name == "thresholdedrelu":
        keep = ctx.op("greater", [x, ctx.scalar(1.0 if alpha is None else alpha, x)])
        return ctx.op("where", [keep, x, ctx.scalar(0.0, x)])
    raise ctx.error(f"activation {name!r} is not supported")


@converter("RNN", "GRU", "LSTM")
def convert_recurrent(ctx: Context, inputs):
    op = ctx.op_type
    gates = GATES[op]
    x, w, r = inputs[:3]

    def opt(k):
        return inputs[k] if len(inputs) > k and inputs[k] else ""

    b, seq_lens, h0 = opt(3), opt(4), opt(5)
    c0, peep = (opt(6), opt(7)) if op == "LSTM" else ("", "")
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = ctx.transpose(x, (1, 0, 2))
    steps, batch, _ = ctx.shape(x)
    hidden = int(ctx.attr("hidden_size", ctx.shape(r)[-1]))
    direction = ctx.attr("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    if seq_lens:
        known = ctx.const(seq_lens, "the sequence_lens input")
        if not np.all(np.asarray(known) == steps):
            raise ctx.error("sequence_lens shorter than the sequence are not supported")
    acts = tuple(ctx.attr("activations", DEFAULT_ACTIVATIONS[op] * len(dirs)))
    per_dir = len(DEFAULT_ACTIVATIONS[op])
    alphas = list(ctx.attr("activation_alpha", ()))
    betas = list(ctx.attr("activation_beta", ()))
    clip = ctx.attr("clip")
    dtype = ctx.dtype(x)

    def act(d, k, v):
        j = d * per_dir + k
        return _activation(ctx, acts[j], v, alphas[j] if j < len(alphas) else None,
                           betas[j] if j < len(betas) else None)

    ys, hs, cs = [], [], []
    for d, name in enumerate(dirs):
        wd, rd = _take(ctx, w, 0, d), _take(ctx, r, 0, d)
        if b:
            bd = _take(ctx, b, 0, d)
            wb, rb = _take(ctx, bd, 0, 0, gates * hidden), _take(ctx, bd, 0, gates * hidden, gates * hidden)
        else:
            wb = rb = ctx.param(np.zeros(gates * hidden, dtype=dtype), "bias")
        h = _take(ctx, h0, 0, d) if h0 else ctx.param(np.zeros((batch, hidden), dtype=dtype), "h0")
        c = (_take(ctx, c0, 0, d) if c0 else ctx.param(np.zeros((batch, hidden), dtype=dtype), "c0")) \
            if op == "LSTM" else None
        peepholes = None
        if peep:
            pd = _take(ctx, peep, 0, d)
            peepholes = tuple(_take(ctx, pd, 0, k * hidden, hidden) for k in range(3))
        steps_out, h, c = recurrent_direction(
            ctx, op, x, wd, rd, wb, rb, h, c, name == "reverse", lambda k, v, d=d: act(d, k, v), clip,
            bool(ctx.attr("linear_before_reset", 0)), bool(ctx.attr("input_forget", 0)), peepholes)
        outs = dict(enumerate(steps_out))
        ys.append(
            ctx.op(
                "concatenate",
                [ctx.reshape(outs[t], (1, 1, batch, hidden)) for t in range(steps)],
                {"axis": 0},
            )
            if steps > 1
            else ctx.reshape(outs[0], (1, 1, batch, hidden))
        )
        hs.append(ctx.reshape(h, (1, batch, hidden)))
        if c is not None:
            cs.append(ctx.reshape(c, (1, batch, hidden)))

    def join(values, axis):
        return values[0] if len(values) == 1 else ctx.op("concatenate", values, {"axis": axis})

    y, y_h = join(ys, 1), join(hs, 0)
    y_c = join(cs, 0) if cs else None
    if layout:
        y = ctx.transpose(y, (2, 0, 1, 3))
        y_h = ctx.transpose(y_h, (1, 0, 2))
        y_c = ctx.transpose(y_c, (1, 0, 2)) if y_c is not None else None
    return [y, y_h] + ([y_c] if op == "LSTM" else [])
