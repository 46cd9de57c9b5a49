"""Operators several formats have that nnvm builds from its primitives, written once for every frontend.

``conv2d_transpose``: a transposed (fractionally strided) convolution, ONNX's ConvTranspose and MXNet's
Deconvolution, as a plain ``conv2d`` over the input spread with zeros. ``recurrent_direction``: one
direction of an RNN/GRU/LSTM layer unrolled over its static sequence (ONNX's RNN ops, MXNet's RNN).
"""

from __future__ import annotations

from nnvm.frontend.context import ConversionContext


def conv2d_transpose(ctx: ConversionContext, x: str, w: str, strides, dilations, begins, ends, out_pad,
                     groups: int) -> str:
    """The transposed convolution of NCHW ``x`` with ``w`` (C, M/groups, kh, kw): spread the input with
    ``stride - 1`` zeros between elements, pad each side by ``(k - 1) * dilation`` minus the padding
    ``begins``/``ends`` (``out_pad`` more at the end), and convolve (stride 1) with the kernel flipped
    in space and its in/out channels swapped per group. Output size per axis:
    ``stride * (in - 1) + (k - 1) * dilation + 1 - begin - end + out_pad``."""
    n, c, h, wd = ctx.shape(x)
    _, m_per_group, kh, kw = ctx.shape(w)
    strides, dilations = tuple(strides), tuple(dilations)
    y = x
    if strides != (1, 1):  # (N, C, H, W) -> (N, C, (H-1)*sh+1, (W-1)*sw+1), zeros between elements
        y = ctx.reshape(y, (n, c, h, 1, wd, 1))
        width = (0, 0, 0, 0, 0, 0, 0, strides[0] - 1, 0, 0, 0, strides[1] - 1)
        y = ctx.op("pad", [y], {"pad_width": width, "pad_value": 0.0, "mode": "constant"})
        y = ctx.reshape(y, (n, c, h * strides[0], wd * strides[1]))
        y = ctx.op("strided_slice", [y], {"begin": (0, 0), "strides": (1, 1), "axes": (2, 3),
                                          "end": ((h - 1) * strides[0] + 1, (wd - 1) * strides[1] + 1)})
    full = [(k - 1) * d + 1 for k, d in zip((kh, kw), dilations)]
    lo = [f - 1 - b for f, b in zip(full, begins)]
    hi = [f - 1 - e + op for f, e, op in zip(full, ends, out_pad)]
    if any(v > 0 for v in lo + hi):
        width = (0, 0, 0, 0, max(lo[0], 0), max(hi[0], 0), max(lo[1], 0), max(hi[1], 0))
        y = ctx.op("pad", [y], {"pad_width": width, "pad_value": 0.0, "mode": "constant"})
    if any(v < 0 for v in lo + hi):  # more padding than the kernel reaches: crop instead
        shape = ctx.shape(y)
        y = ctx.op("strided_slice", [y], {"begin": (max(-lo[0], 0), max(-lo[1], 0)), "strides": (1, 1),
                                          "end": (shape[2] - max(-hi[0], 0), shape[3] - max(-hi[1], 0)),
                                          "axes": (2, 3)})
    k = ctx.reshape(w, (groups, c // groups, m_per_group, kh, kw))
    k = ctx.transpose(k, (0, 2, 1, 3, 4))
    k = ctx.reshape(k, (groups * m_per_group, c // groups, kh, kw))
    k = ctx.op("strided_slice", [k], {"begin": (kh - 1, kw - 1), "end": (-kh - 1, -kw - 1),
                                      "strides": (-1, -1), "axes": (2, 3)})
    return ctx.op("conv2d", [y, k], {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": dilations,
                                     "groups": groups})


def take(ctx: ConversionContext, v: str, axis: int, k: int, n: int = 1) -> str:
    """``v[..., k:k+n, ...]`` along ``axis``, with the axis dropped when ``n`` is 1."""
    out = ctx.op("strided_slice", [v], {"begin": (k,), "end": (k + n,), "strides": (1,), "axes": (axis,)})
    if n == 1:
        shape = ctx.shape(v)
        out = ctx.reshape(out, shape[:axis] + shape[axis + 1:])
    return out


def recurrent_direction(ctx: ConversionContext, cell: str, x: str, w: str, r: str, wb: str, rb: str, h: str,
                        c: str | None, reverse: bool, act, clip=None, linear_before_reset: bool = False,
                        input_forget: bool = False, peepholes=None):
    """One direction of an RNN/GRU/LSTM layer unrolled over the static sequence of ``x`` (T, N, I).

    Weights in ONNX's gate order: ``w`` (G*H, I), ``r`` (G*H, H), biases ``wb``/``rb`` (G*H) with gates
    ``i`` (RNN), ``z r h`` (GRU), ``i o f c`` (LSTM); ``h``/``c`` (N, H) the initial states;
    ``act(k, v)`` the cell's k-th activation (ONNX's defaults: sigmoid for gates, tanh otherwise);
    ``peepholes`` (p_i, p_o, p_f) or None. The input projection of all steps is one ``dense``. Returns
    ``(outputs by step, last h, last c)``."""
    steps, batch, _ = ctx.shape(x)
    hidden = ctx.shape(r)[-1]
    gates = ctx.shape(r)[0] // hidden

    def clipped(v):
        return ctx.op("clip", [v], {"a_min": -float(clip), "a_max": float(clip)}) if clip is not None else v

    proj = ctx.op("dense", [ctx.reshape(x, (steps * batch, ctx.shape(x)[2])), w])
    if cell == "GRU" and linear_before_reset:  # the n gate's recurrent bias goes inside r * (...)
        rb_zr = ctx.op("pad", [take(ctx, rb, 0, 0, 2 * hidden)],
                       {"pad_width": (0, hidden), "mode": "constant"})
        proj = ctx.op("add", [proj, ctx.op("add", [wb, rb_zr])])
    else:
        proj = ctx.op("add", [proj, ctx.op("add", [wb, rb])])
    proj = ctx.reshape(proj, (steps, batch, gates * hidden))
    outs = {}
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        xt = take(ctx, proj, 0, t)
        rec = ctx.op("dense", [h, r])

        def gate(k, src):
            return take(ctx, src, 1, k * hidden, hidden)

        if cell == "RNN":
            h = act(0, clipped(ctx.op("add", [xt, rec])))
        elif cell == "GRU":
            z = act(0, clipped(ctx.op("add", [gate(0, xt), gate(0, rec)])))
            rr = act(0, clipped(ctx.op("add", [gate(1, xt), gate(1, rec)])))
            if linear_before_reset:
                rec_n = ctx.op("add", [gate(2, rec), take(ctx, rb, 0, 2 * hidden, hidden)])
                inner = ctx.op("multiply", [rr, rec_n])
            else:
                inner = ctx.op("dense", [ctx.op("multiply", [rr, h]), take(ctx, r, 0, 2 * hidden, hidden)])
            cand = act(1, clipped(ctx.op("add", [gate(2, xt), inner])))
            one_minus = ctx.op("subtract", [ctx.scalar(1.0, z), z])
            h = ctx.op("add", [ctx.op("multiply", [one_minus, cand]), ctx.op("multiply", [z, h])])
        else:
            pre = ctx.op("add", [xt, rec])
            pi, po, pf = peepholes if peepholes else (None, None, None)
            gi = gate(0, pre) if pi is None else ctx.op("add", [gate(0, pre), ctx.op("multiply", [pi, c])])
            gf = gate(2, pre) if pf is None else ctx.op("add", [gate(2, pre), ctx.op("multiply", [pf, c])])
            i_t = act(0, clipped(gi))
            f_t = act(0, clipped(gf))
            if input_forget:
                f_t = ctx.op("subtract", [ctx.scalar(1.0, i_t), i_t])
            c_t = act(1, clipped(gate(3, pre)))
            c = ctx.op("add", [ctx.op("multiply", [f_t, c]), ctx.op("multiply", [i_t, c_t])])
            go = gate(1, pre) if po is None else ctx.op("add", [gate(1, pre), ctx.op("multiply", [po, c])])
            o_t = act(0, clipped(go))
            h = ctx.op("multiply", [o_t, act(2, c)])
        outs[t] = h
    return [outs[t] for t in range(steps)], h, c
