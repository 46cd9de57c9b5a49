"""Keras 3's MultiHeadAttention from matmul, reshape, transpose and softmax.

Its query/key/value projections are EinsumDense layers with kernels ``(dim, heads, key_dim)`` and biases
``(heads, key_dim)``; the output projection's kernel is ``(heads, value_dim, *output_shape)``. The
weights arrive in the order query, key, value, output (kernel, then bias when ``use_bias``).
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_keras.context import CONVERTERS, Context

_UNSUPPORTED_CALL = ("query_mask", "value_mask", "key_mask", "attention_mask", "return_attention_scores",
                     "use_causal_mask")


def _project(ctx: Context, x: str, kernel: np.ndarray, bias) -> str:
    """(B, T, dim) through a ``(dim, heads, k)`` kernel: (B, heads, T, k)."""
    b, t, dim = ctx.shape(x)
    if kernel.ndim != 3 or kernel.shape[0] != dim:
        raise ctx.error(f"projection kernel of shape {kernel.shape} does not fit an input of width {dim}")
    _, heads, k = kernel.shape
    y = ctx.op("matmul", [x, ctx.param(kernel.reshape(dim, heads * k), "kernel")])
    if bias is not None:
        y = ctx.op("add", [y, ctx.param(bias.reshape(heads * k), "bias")])
    return ctx.transpose(ctx.reshape(y, (b, t, heads, k)), (0, 2, 1, 3))


@CONVERTERS.register("MultiHeadAttention")
def multi_head_attention(ctx: Context, inputs):
    """softmax(q k^T / sqrt(key_dim)) v per head over the sequence axis, then the output projection."""
    for key in ("use_gate",):
        if ctx.attr(key, False):
            raise ctx.error(f"{key}=True is not supported")
    if ctx.attr("sliding_window") is not None:
        raise ctx.error("sliding_window is not supported")
    called = sorted(k for k in _UNSUPPORTED_CALL if ctx.kwargs.get(k) not in (None, False))
    if called or "key" in ctx.kwargs or "value" in ctx.kwargs:
        raise ctx.error(f"calls with {', '.join(called) or 'key/value keyword tensors'} are not supported "
                        f"(pass query, value and key positionally, without masks)")
    if len(inputs) not in (2, 3):
        raise ctx.error(f"takes query, value and an optional key, got {len(inputs)} tensors")
    q, v = ctx.last(inputs[0]), ctx.last(inputs[1])
    k = ctx.last(inputs[2]) if len(inputs) == 3 else v
    if any(ctx.rank(t) != 3 for t in (q, k, v)):
        raise ctx.error("only rank-3 (batch, sequence, features) query, key and value are supported")
    axes = ctx.attr("attention_axes")
    if axes not in (None, [1], (1,), 1, [-2], (-2,), -2):
        raise ctx.error(f"attention_axes={axes} is not supported (only the sequence axis)")
    bias = bool(ctx.attr("use_bias", True))
    per = 2 if bias else 1
    if len(ctx.weights) != 4 * per:
        raise ctx.error(f"has {len(ctx.weights)} weights in the file, expected {4 * per}")
    w = [ctx.weight(i, "a projection weight") for i in range(4 * per)]
    kernels, biases = w[::per], (w[1::per] if bias else [None] * 4)
    key_dim = kernels[0].shape[-1]
    qh = _project(ctx, q, kernels[0], biases[0])  # (B, H, T, key_dim)
    kh = _project(ctx, k, kernels[1], biases[1])  # (B, H, S, key_dim)
    vh = _project(ctx, v, kernels[2], biases[2])  # (B, H, S, value_dim)
    qh = ctx.op("multiply", [qh, ctx.scalar(1.0 / float(np.sqrt(key_dim)), qh)])
    scores = ctx.op("softmax", [ctx.op("matmul", [qh, ctx.transpose(kh, (0, 1, 3, 2))])], {"axis": 3})
    o = ctx.transpose(ctx.op("matmul", [scores, vh]), (0, 2, 1, 3))  # (B, T, H, value_dim)
    b, t, heads, value_dim = ctx.shape(o)
    out_kernel = kernels[3]
    if out_kernel.shape[:2] != (heads, value_dim):
        raise ctx.error(f"output kernel of shape {out_kernel.shape} does not fit {heads} heads of width "
                        f"{value_dim}")
    y = ctx.op("matmul", [ctx.reshape(o, (b, t, heads * value_dim)),
                          ctx.param(out_kernel.reshape(heads * value_dim, -1), "kernel")])
    if biases[3] is not None:
        y = ctx.op("add", [y, ctx.param(biases[3].reshape(-1), "bias")])
    return ctx.reshape(y, (b, t, *out_kernel.shape[2:]))
