"""numpy references of the MIL ops ``make_ops.py`` builds, written from the MIL op documentation."""

from __future__ import annotations

import math

import numpy as np


def weight() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)


def conv(x, w, strides, pads):
    """pads: (top, bottom, left, right)."""
    t, b, l, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    o, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // strides[0] + 1
    ow = (xp.shape[3] - kw) // strides[1] + 1
    y = np.zeros((x.shape[0], o, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * strides[0] : i * strides[0] + kh, j * strides[1] : j * strides[1] + kw]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return y


def pool(x, kernel, strides, pads, reduce, ceil=False, exclude=True):
    t, b, l, r = pads
    h, w = x.shape[2:]
    sizes = []
    for n, k, s, p0, p1 in ((h, kernel[0], strides[0], t, b), (w, kernel[1], strides[1], l, r)):
        span = n + p0 + p1 - k
        out = (math.ceil(span / s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + p0:
            out -= 1
        sizes.append(out)
    y = np.zeros(x.shape[:2] + tuple(sizes))
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            y0, x0 = i * strides[0] - t, j * strides[1] - l
            win = x[:, :, max(y0, 0) : min(y0 + kernel[0], h), max(x0, 0) : min(x0 + kernel[1], w)]
            if reduce == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = win.shape[2] * win.shape[3] if exclude else kernel[0] * kernel[1]
                y[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return y


def conv_transpose(x, w, strides, pads):
    """The definition: each input pixel scatters its weighted kernel; pads (top, bottom, left, right)
    are cropped from the full output. ``w`` is (C_in, C_out, kh, kw)."""
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    out = np.zeros((n, m, (h - 1) * strides[0] + kh, (wd - 1) * strides[1] + kw))
    for i in range(h):
        for j in range(wd):
            out[:, :, i * strides[0] : i * strides[0] + kh, j * strides[1] : j * strides[1] + kw] += (
                np.einsum("nc,cmab->nmab", x[:, :, i, j], w)
            )
    t, b, l, r = pads
    return out[:, :, t : out.shape[2] - b, l : out.shape[3] - r]


def transposed_weight() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((3, 2, 3, 2)).astype(np.float32)


def bilinear(x, oh, ow, align):
    """Each output pixel from its source coordinate: align corners, or half-pixel centres clamped."""

    def coords(n, out):
        i = np.arange(out)
        src = i * (n - 1) / (out - 1) if align else np.clip((i + 0.5) * n / out - 0.5, 0, n - 1)
        lo = np.floor(src).astype(int)
        return lo, np.minimum(lo + 1, n - 1), src - lo

    y0, y1, fy = coords(x.shape[2], oh)
    x0, x1, fx = coords(x.shape[3], ow)
    top = x[:, :, y0][..., x0] * (1 - fx) + x[:, :, y0][..., x1] * fx
    bottom = x[:, :, y1][..., x0] * (1 - fx) + x[:, :, y1][..., x1] * fx
    return top * (1 - fy)[:, None] + bottom * fy[:, None]


def same(n, k, s):
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def reference(name: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if name == "activations":
        return np.concatenate(
            [
                np.clip(4 * x64, 0, 6),
                x64 / (1 + np.exp(-x64)),
                np.where(x64 > 0, x64, 0.7 * (np.exp(x64) - 1)),
                np.log1p(np.exp(x64)),
                np.where(x64 > 0, x64, 0.2 * x64),
                np.where(x64 > 0.5, x64, 0),
                np.clip(x64, -0.5, 0.3),
                np.where(x64 > 0, x64, np.array([0.1, 0.2, 0.3]).reshape(1, 3, 1, 1) * x64),
                0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2))),
                np.tanh(x64),
            ],
            axis=1,
        )
    if name == "linear_matmul":
        w = np.random.default_rng(2).standard_normal((5, 8))
        a = x64 @ w.T + np.arange(5)
        return a @ np.swapaxes(x64 @ w.T, -1, -2)
    if name == "batch_norm":
        r = lambda v: np.array(v).reshape(1, 3, 1, 1)  # noqa: E731
        return (x64 - r([0.5, 0.0, -0.5])) / np.sqrt(r([1.0, 4.0, 0.25]) + 1e-3) * r([1.0, 2.0, 0.5]) + r(
            [0.1, -0.2, 0.3]
        )
    if name == "reshape_squeeze":
        return x64.reshape(1, 21, 8, 1)
    if name == "reduce_log_sum_exp":
        return np.log(np.exp(x64).sum(axis=1))
    if name == "upsample_bilinear_half":
        return bilinear(x64, 14, 12, False)
    if name == "upsample_bilinear_align":
        return bilinear(x64, 14, 16, True)
    if name == "conv_transpose":
        return conv_transpose(x64, transposed_weight(), (2, 3), (1, 0, 0, 1))
    if name == "conv_custom_pad":
        return conv(x64, weight(), (2, 1), (0, 2, 1, 0))
    if name == "conv_same":
        return conv(x64, weight(), (2, 2), same(7, 3, 2) + same(8, 3, 2))
    if name == "avg_pool_exclude_ceil":
        return pool(x64, (3, 3), (2, 2), (1, 1, 1, 1), "avg", ceil=True, exclude=True)
    if name == "max_pool_same":
        return pool(x64, (2, 3), (2, 2), same(7, 2, 2) + same(8, 3, 2), "max")
    if name == "pad_reflect":
        return np.pad(x64, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect")
    if name == "softmax_axis1":
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if name == "gelu_tanh":
        return 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    if name == "layer_norm":
        mean = x64.mean(axis=(2, 3), keepdims=True)
        return (x64 - mean) / np.sqrt(x64.var(axis=(2, 3), keepdims=True) + 1e-5)
    if name == "reduce_max_keep":
        return x64.max(axis=(1, 3), keepdims=True)
    if name == "sigmoid_hard":
        return np.clip(0.3 * x64 + 0.4, 0, 1)
    if name == "concat_relu":
        return np.concatenate([x64, np.maximum(x64, 0)], axis=2)
    if name == "affine_dequantize":
        return x64 + (np.arange(8) * 30 - 100.0) * 0.05
    if name == "lut_to_dense":
        return x64 * np.array([-1.5, 0.25, 2.0, 3.5])[[0, 1, 2, 3, 3, 2, 1, 0]]
    if name == "split_slice":
        return x64[:, :, 2:7]
    if name == "slice_by_index":
        return x64[0:1, 2:0:-1, 1:6:2, 7:0:-3]
    if name == "gather":
        return x64[..., [3, -1, 0]]
    if name == "instance_norm":
        mean = x64.mean(axis=(2, 3), keepdims=True)
        return (x64 - mean) / np.sqrt(x64.var(axis=(2, 3), keepdims=True) + 1e-5)
    if name == "upsample_nearest":
        return x64.repeat(2, axis=2).repeat(3, axis=3)
    raise KeyError(name)


CASES = [
    "activations",
    "linear_matmul",
    "batch_norm",
    "reshape_squeeze",
    "reduce_log_sum_exp",
    "upsample_bilinear_half",
    "upsample_bilinear_align",
    "conv_transpose",
    "conv_custom_pad",
    "conv_same",
    "avg_pool_exclude_ceil",
    "max_pool_same",
    "pad_reflect",
    "softmax_axis1",
    "gelu_tanh",
    "layer_norm",
    "reduce_max_keep",
    "sigmoid_hard",
    "concat_relu",
    "affine_dequantize",
    "lut_to_dense",
    "split_slice",
    "slice_by_index",
    "gather",
    "instance_norm",
    "upsample_nearest",
]


NN_CASES = [
    "prelu",
    "upsample_nearest",
    "upsample_bilinear_align",
    "upsample_bilinear_half",
    "crop",
    "reduce_mean_hw",
    "reduce_l2_chw",
    "lrn",
    "mvn",
    "split",
    "slice_width",
    "conv_same_fp16",
    "deconvolution",
    "conv_valid_border",
    "conv_same",
    "conv_quantized",
    "avg_pool_last_pixel",
    "max_pool_same",
    "global_avg",
    "leaky_relu",
    "sigmoid_hard",
    "batchnorm",
    "scale_bias",
    "padding_reflect",
    "l2_normalize",
    "softmax_nd",
]


def nn_reference(name: str, x: np.ndarray) -> np.ndarray:
    """NeuralNetwork layers (``make_nn_ops.py``), from NeuralNetwork.proto's documentation."""
    x64 = x.astype(np.float64)
    per_channel = (1, 3, 1, 1)
    if name == "prelu":
        return np.where(x64 > 0, x64, np.array([0.1, 0.2, 0.3]).reshape(per_channel) * x64)
    if name == "upsample_nearest":
        return x64.repeat(2, axis=2).repeat(3, axis=3)
    if name == "upsample_bilinear_align":
        return bilinear(x64, 14, 16, True)
    if name == "upsample_bilinear_half":
        return bilinear(x64, 14, 24, False)
    if name == "crop":
        return x64[:, :, 2:, 1:6]
    if name == "reduce_mean_hw":
        return x64.mean(axis=(2, 3), keepdims=True)
    if name == "reduce_l2_chw":
        return np.sqrt((x64**2).sum(axis=(1, 2, 3), keepdims=True))
    if name == "lrn":
        sq = np.pad(x64**2, ((0, 0), (1, 1), (0, 0), (0, 0)))
        window = sq[:, 0:3] + sq[:, 1:4] + sq[:, 2:5]
        return x64 / (2.0 + 0.3 / 3 * window) ** 0.75
    if name == "mvn":
        centered = x64 - x64.mean(axis=(2, 3), keepdims=True)
        return centered / (np.sqrt((centered**2).mean(axis=(2, 3), keepdims=True)) + 1e-5)
    if name == "split":
        return x64[:, 1:2]
    if name == "slice_width":
        return x64[..., 1:7:2]
    if name == "conv_same_fp16":
        return conv(
            x64, weight().astype(np.float16).astype(np.float64), (2, 2), same(7, 3, 2) + same(8, 3, 2)
        )
    if name == "deconvolution":
        return conv_transpose(x64, transposed_weight(), (2, 3), (0, 0, 0, 0))
    if name == "conv_valid_border":
        return conv(x64, weight(), (2, 1), (0, 2, 1, 0))
    if name == "conv_same":
        return conv(x64, weight(), (2, 2), same(7, 3, 2) + same(8, 3, 2))
    if name == "conv_quantized":
        levels = np.round((weight().transpose(2, 3, 1, 0) + 3) * 40).clip(0, 255)
        return conv(x64, (levels * 0.025 - 3.0).transpose(3, 2, 0, 1), (1, 1), (0, 0, 0, 0))
    if name == "avg_pool_last_pixel":
        return pool(x64, (3, 3), (2, 2), (1, 1, 1, 1), "avg", ceil=True, exclude=True)
    if name == "max_pool_same":
        return pool(x64, (2, 3), (2, 2), same(7, 2, 2) + same(8, 3, 2), "max")
    if name == "global_avg":
        return x64.mean(axis=(2, 3), keepdims=True)
    if name == "leaky_relu":
        return np.where(x64 > 0, x64, 0.1 * x64)
    if name == "sigmoid_hard":
        return np.clip(0.3 * x64 + 0.4, 0, 1)
    if name == "batchnorm":
        gamma, beta = np.array([1.0, 2.0, 0.5]), np.array([0.1, -0.2, 0.3])
        mean, var = np.array([0.5, 0.0, -0.5]), np.array([1.0, 4.0, 0.25])
        r = lambda v: v.reshape(per_channel)  # noqa: E731
        return (x64 - r(mean)) / np.sqrt(r(var) + 1e-5) * r(gamma) + r(beta)
    if name == "scale_bias":
        return x64 * np.array([1.0, -2.0, 3.0]).reshape(per_channel) + np.array([0.5, 0.0, -1.0]).reshape(
            per_channel
        )
    if name == "padding_reflect":
        return np.pad(x64, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect")
    if name == "l2_normalize":
        return x64 / np.sqrt((x64**2).sum(axis=(1, 2, 3), keepdims=True) + 1e-6)
    if name == "softmax_nd":
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    raise KeyError(name)


def ios18_reference(x: np.ndarray) -> np.ndarray:
    """``make_ops.ios18_compression``: the decompressed weights computed from their definitions."""
    data = np.arange(-8, 8).reshape(2, 8)
    a = (data - np.repeat([[1, 0], [0, -1]], 4, axis=1)) * np.repeat([[0.5, 0.25], [1.0, 2.0]], 4, axis=1)
    luts = np.array([[-1.0, 0.5, 2.0, 4.0], [3.0, 1.0, -2.0, 0.0]])
    b = np.stack([luts[row][np.arange(8) % 4] for row in range(2)])  # indices 0 1 2 3 0 1 2 3 per row
    return x.astype(np.float64) * a + b
