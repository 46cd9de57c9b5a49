"""DFT as two matrix products with constant cosine and sine tables.

The transform length is static, so ``X[k] = sum_n x[n] exp(-+2 pi i k n / L)`` is a matmul of the real
and imaginary parts (the signal axis moved last) with ``cos`` and ``sin`` tables computed in float64
here; ``onesided`` keeps the first ``L // 2 + 1`` frequencies, ``inverse`` flips the sign and divides
by ``L``, ``dft_length`` truncates or zero-pads the signal first.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis


@converter("DFT")
def convert_dft(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    if ctx.opset >= 20:
        axis_v = inputs[2] if len(inputs) > 2 else ""
        axis = ctx.const_ints(axis_v, "the axis input")[0] if axis_v else -2
    else:
        axis = ctx.attr("axis", 1)
    axis = normalize_axis(axis, rank, ctx)
    if axis == rank - 1:
        raise ctx.error("the axis cannot be the last (real/imaginary) axis")
    length_v = inputs[1] if len(inputs) > 1 else ""
    n_in = shape[axis]
    length = ctx.const_ints(length_v, "the dft_length input")[0] if length_v else n_in
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    dtype = ctx.dtype(x)
    work = "float64"  # float32 sums leave errors of 1e-6 where the exact result is 0

    def part(k: int) -> str:
        piece = ctx.op(
            "strided_slice", [x], {"begin": (k,), "end": (k + 1,), "strides": (1,), "axes": (rank - 1,)}
        )
        piece = ctx.cast(ctx.reshape(piece, shape[:-1]), work)
        perm = tuple(d for d in range(rank - 1) if d != axis) + (axis,)
        return ctx.transpose(piece, perm)

    real = part(0)
    imag = part(1) if shape[-1] == 2 else None
    if inverse and onesided:  # a Hermitian half spectrum in, a real signal of 2 * (n - 1) out
        return _irfft(ctx, real, imag, n_in, rank, axis, dtype, work)
    n_out = length // 2 + 1 if onesided else length
    n = np.arange(min(n_in, length))[:, None]  # samples beyond the length are dropped; missing ones are 0
    k = np.arange(n_out)[None, :]
    angle = 2 * np.pi * n * k / length
    cos = ctx.param(np.cos(angle).astype(work), "cos")
    sin = ctx.param((np.sin(angle) * (1 if inverse else -1)).astype(work), "sin")
    if n_in > length:
        real = ctx.op(
            "strided_slice", [real], {"begin": (0,), "end": (length,), "strides": (1,), "axes": (rank - 2,)}
        )
        if imag is not None:
            imag = ctx.op(
                "strided_slice",
                [imag],
                {"begin": (0,), "end": (length,), "strides": (1,), "axes": (rank - 2,)},
            )
    # (xr + i xi)(cos + i sin') with sin' = -+sin: real = xr cos - xi sin', imag = xr sin' + xi cos
    out_r = ctx.op("matmul", [real, cos])
    out_i = ctx.op("matmul", [real, sin])
    if imag is not None:
        out_r = ctx.op("subtract", [out_r, ctx.op("matmul", [imag, sin])])
        out_i = ctx.op("add", [out_i, ctx.op("matmul", [imag, cos])])
    if inverse:
        scale = ctx.param(np.asarray(1.0 / length, dtype=work), "scale")
        out_r, out_i = ctx.op("multiply", [out_r, scale]), ctx.op("multiply", [out_i, scale])
    moved = ctx.shape(out_r)
    both = ctx.op(
        "concatenate",
        [ctx.reshape(out_r, moved + (1,)), ctx.reshape(out_i, moved + (1,))],
        {"axis": rank - 1},
    )
    back = list(range(rank - 2))
    back.insert(axis, rank - 2)
    return ctx.cast(ctx.transpose(both, tuple(back) + (rank - 1,)), dtype)


def _irfft(ctx: Context, real: str, imag, n_in: int, rank: int, axis: int, dtype: str, work: str) -> str:
    """The real inverse of a one-sided spectrum: the missing half is the conjugate mirror, so every
    frequency but 0 and L/2 counts twice."""
    length = 2 * (n_in - 1)
    k = np.arange(n_in)[:, None]
    n = np.arange(length)[None, :]
    angle = 2 * np.pi * k * n / length
    twice = np.where((k == 0) | (2 * k == length), 1.0, 2.0) / length
    out = ctx.op("matmul", [real, ctx.param((np.cos(angle) * twice).astype(work), "cos")])
    if imag is not None:
        out = ctx.op(
            "subtract",
            [out, ctx.op("matmul", [imag, ctx.param((np.sin(angle) * twice).astype(work), "sin")])],
        )
    moved = ctx.shape(out)
    out = ctx.reshape(out, moved + (1,))
    back = list(range(rank - 2))
    back.insert(axis, rank - 2)
    return ctx.cast(ctx.transpose(out, tuple(back) + (rank - 1,)), dtype)


@converter("STFT")
def convert_stft(ctx: Context, inputs):
    """Frames of the signal (a ``take`` of constant indices), times the window, each transformed by
    the cosine and sine tables of the frame length."""
    signal = inputs[0]
    batch, length, parts = ctx.shape(signal)
    step = ctx.const_ints(inputs[1], "the frame_step input")[0]
    window = inputs[2] if len(inputs) > 2 and inputs[2] else ""
    if len(inputs) > 3 and inputs[3]:
        frame = ctx.const_ints(inputs[3], "the frame_length input")[0]
    elif window:
        frame = ctx.shape(window)[0]
    else:
        raise ctx.error("neither a window nor frame_length is given")
    frames = 1 + (length - frame) // step
    bins = frame // 2 + 1 if ctx.attr("onesided", 1) else frame
    work = "float64"
    index = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).astype(np.int64)
    framed = ctx.cast(ctx.op("take", [signal, ctx.param(index, "frames")], {"axis": 1}), work)  # B,F,L,C
    if window:
        framed = ctx.op("multiply", [framed, ctx.reshape(ctx.cast(window, work), (1, 1, frame, 1))])

    def part(k):
        v = ctx.op("strided_slice", [framed], {"begin": (k,), "end": (k + 1,), "strides": (1,), "axes": (3,)})
        return ctx.reshape(v, (batch, frames, frame))

    angle = 2 * np.pi * np.arange(frame)[:, None] * np.arange(bins)[None, :] / frame
    cos, sin = ctx.param(np.cos(angle), "cos"), ctx.param(-np.sin(angle), "sin")
    real = part(0)
    out_r, out_i = ctx.op("matmul", [real, cos]), ctx.op("matmul", [real, sin])
    if parts == 2:
        imag = part(1)
        out_r = ctx.op("subtract", [out_r, ctx.op("matmul", [imag, sin])])
        out_i = ctx.op("add", [out_i, ctx.op("matmul", [imag, cos])])
    shape = (batch, frames, bins, 1)
    both = ctx.op("concatenate", [ctx.reshape(out_r, shape), ctx.reshape(out_i, shape)], {"axis": 3})
    return ctx.cast(both, ctx.dtype(signal))


@converter("MelWeightMatrix")
def convert_mel_weight_matrix(ctx: Context, inputs):
    """A constant: every input decides the output's shape or values, so the matrix is computed here (in
    the operator's own arithmetic: the edges' mels in their input type, bins floored to ints)."""
    n_mel = int(np.asarray(ctx.const(inputs[0], "num_mel_bins")).reshape(()))
    dft = int(np.asarray(ctx.const(inputs[1], "dft_length")).reshape(()))
    rate = int(np.asarray(ctx.const(inputs[2], "sample_rate")).reshape(()))
    low, high = (np.asarray(ctx.const(v, what)).reshape(())
                 for v, what in ((inputs[3], "lower_edge_hertz"), (inputs[4], "upper_edge_hertz")))
    if n_mel <= 0 or dft <= 0 or rate <= 0:
        raise ctx.error("num_mel_bins, dft_length and sample_rate must be positive")
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    edges = np.arange(n_mel + 2) * ((high_mel - low_mel) / (n_mel + 2)) + low_mel
    hertz = 700 * np.expm1(edges / 2595 * np.log(10))
    bins = (((dft + 1) * hertz) // rate).astype(np.int64)
    n_spec = dft // 2 + 1
    if bins.min() < 0 or bins.max() >= n_spec:
        raise ctx.error(f"the mel edges fall outside the {n_spec} spectrogram bins")
    out = np.zeros((n_spec, n_mel))
    j = np.arange(n_spec)
    for i in range(n_mel):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            rising = (j >= left) & (j <= center)
            out[rising, i] = (j[rising] - left) / (center - left)
        if right > center:
            falling = (j >= center) & (j < right)
            out[falling, i] = (right - j[falling]) / (right - center)
    return ctx.param(out.astype(ctx.attr_dtype("output_datatype", "float32")), "mel")
