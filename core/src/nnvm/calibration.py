"""Post-training quantization arithmetic, independent of any model format: the ranges of calibration
tensors (min-max, percentile, entropy) and the scales and zero points made from them.

The conventions are onnxruntime's ``quantize_static`` ones, so a model quantized with them runs the same
in onnxruntime, OpenVINO and nnvm: activations uint8 asymmetric over a range widened to hold 0 (so 0 is
exact, padding included); weights int8 symmetric in [-127, 127] (zero point 0), per output channel or
per tensor; biases int32 at scale ``x_scale * w_scale`` (formed in float32), zero point 0.

Calibration runs the float model over the samples once for min-max and twice for the histogram methods
(the first pass fixes each histogram's range, so no histogram is ever re-binned):

- ``minmax``: the smallest and largest value seen.
- ``percentile``: the ``percentile`` (99.99 by default) of ``|x|`` over all samples, clipped to what was
  seen; a tensor that is never negative (a ReLU's output) keeps 0 as its lower end.
- ``entropy``: TensorRT's calibration (Migacz, "8-bit Inference with TensorRT", GTC 2017): a histogram of
  ``|x|`` in 2048 bins (exact zeros left out: they are exact at any scale); every candidate threshold's
  clipped distribution P is compared with its quantized form Q by the KL divergence, and the threshold
  of the smallest one is kept. A tensor that is never negative is quantized into 256 levels, a signed
  one into 128 per side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from nnvm.errors import Error

METHODS = ("minmax", "percentile", "entropy")
HISTOGRAM_BINS = 2048
INT32_MAX = 2**31 - 1


def check_method(method: str, percentile: float = 99.99) -> None:
    """One sentence for an unknown calibration method or a percentile outside (0, 100]."""
    if method not in METHODS:
        raise Error(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")
    if not 0.0 < float(percentile) <= 100.0:
        raise Error(f"percentile must lie in (0, 100], got {percentile}")


def calibrate(run: Callable[[object], dict], samples: Iterable, method: str = "minmax",
              percentile: float = 99.99) -> dict[str, tuple[float, float]]:
    """``{tensor name: (lo, hi)}`` over the calibration ``samples``; ``run(sample)`` returns the float
    tensors to calibrate by name."""
    check_method(method, percentile)
    samples = list(samples)
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for sample in samples:
        for name, array in run(sample).items():
            if array.size == 0:
                continue
            a_lo, a_hi = float(array.min()), float(array.max())
            if not (np.isfinite(a_lo) and np.isfinite(a_hi)):
                raise Error(f"calibration: tensor {name!r} holds inf or NaN for a calibration input; "
                            f"it cannot be quantized")
            lo[name] = min(lo.get(name, a_lo), a_lo)
            hi[name] = max(hi.get(name, a_hi), a_hi)
    if method == "minmax":
        return {name: (lo[name], hi[name]) for name in lo}
    top = {name: max(-lo[name], hi[name]) for name in lo}
    hists = {name: np.zeros(HISTOGRAM_BINS, np.int64) for name in lo}
    for sample in samples:
        for name, array in run(sample).items():
            if name in hists and top[name] > 0:
                # exact zeros (half of a ReLU's output) are exact in any range: they would only pull the
                # entropy threshold down by crowding the first bin, so they are left out
                magnitude = np.abs(array[array != 0])
                hists[name] += np.histogram(magnitude, HISTOGRAM_BINS, range=(0.0, top[name]))[0]
    ranges = {}
    for name in lo:
        if top[name] == 0:
            ranges[name] = (lo[name], hi[name])
            continue
        width = top[name] / HISTOGRAM_BINS
        if method == "percentile":
            cut = percentile_bins(hists[name], percentile)
        else:
            cut = entropy_bins(hists[name], 256 if lo[name] >= 0 else 128)
        threshold = cut * width
        ranges[name] = (max(lo[name], -threshold), min(hi[name], threshold))
    return ranges


def percentile_bins(hist: np.ndarray, percentile: float) -> int:
    """How many leading bins of ``hist`` hold ``percentile`` percent of its count."""
    cdf = np.cumsum(hist, dtype=np.float64)
    return int(min(np.searchsorted(cdf, cdf[-1] * percentile / 100.0) + 1, hist.size))


def entropy_bins(hist: np.ndarray, levels: int) -> int:
    """How many leading bins of ``hist`` to keep so that quantizing them into ``levels`` levels loses
    the least information (smallest KL(P || Q)); the outliers beyond are counted in the last bin kept."""
    hist = hist.astype(np.float64)
    if hist.size <= levels:
        return hist.size
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = sum(hist[i:])
    best, best_kl = hist.size, np.inf
    for i in range(levels, hist.size + 1):
        sliced = hist[:i]
        p = sliced.copy()
        p[-1] += tail[i]
        starts = (np.arange(levels) * i) // levels
        sizes = np.diff(np.append(starts, i))
        used = sliced > 0
        # Q: each level's count spread evenly over the bins that held something in the clipped histogram
        counts = np.add.reduceat(used, starts)
        per = np.divide(np.add.reduceat(sliced, starts), counts, out=np.zeros(levels), where=counts > 0)
        q = np.repeat(per, sizes) * used
        if q.sum() == 0:
            continue
        p /= p.sum()
        q = 0.9999 * q / q.sum() + 0.0001 / i  # smoothed: a P bin that Q left empty costs much, not infinity
        keep = p > 0
        kl = float(np.sum(p[keep] * np.log(p[keep] / q[keep])))
        if kl < best_kl:
            best, best_kl = i, kl
    return best


def activation_qparams(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """``(scale, zero_point)`` of a uint8 activation over ``[lo, hi]`` widened to hold 0."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = np.float32((hi - lo) / np.float32(255))
    if not np.isfinite(scale) or scale <= np.finfo(np.float32).tiny:
        return np.float32(1.0), np.uint8(0)
    zero_point = np.clip(np.round(-lo / scale), 0, 255)
    return scale, np.uint8(zero_point)


def quantize_weight(w: np.ndarray, axis: int | None, min_scale: np.ndarray | None = None):
    """``(int8 weight, float32 scale)``: symmetric in [-127, 127], one scale per slice along ``axis`` (a
    1-D scale) or one for the tensor (``axis=None``, a scalar). ``min_scale``: a floor per slice (so a
    bias still fits int32 at ``x_scale * w_scale``)."""
    w = np.asarray(w, np.float32)
    if axis is None:
        amax = np.abs(w).max(initial=0.0).astype(np.float32)
    else:
        amax = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1, initial=0.0)
    scale = (amax / np.float32(127)).astype(np.float32)
    scale = np.where(scale > np.finfo(np.float32).tiny, scale, np.float32(1.0)).astype(np.float32)
    if min_scale is not None:
        scale = np.maximum(scale, min_scale.astype(np.float32))
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def bias_min_weight_scale(bias: np.ndarray, x_scale: np.float32) -> np.ndarray:
    """The weight scale below which ``bias / (x_scale * w_scale)`` would overflow int32."""
    return (np.abs(np.asarray(bias, np.float64)) / (float(x_scale) * (INT32_MAX - 1))).astype(np.float32)


def quantize_bias(bias: np.ndarray, x_scale: np.float32, w_scale: np.ndarray):
    """``(int32 bias, float32 scale)`` with scale ``x_scale * w_scale`` formed in float32, as the
    integer kernels of onnxruntime (and nnvm's QDQ fusion) expect it."""
    scale = (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32)
    q = np.round(np.asarray(bias, np.float64) / scale.astype(np.float64))
    if np.any(np.abs(q) > INT32_MAX):
        raise Error("a bias does not fit int32 at scale x_scale * w_scale")
    return q.astype(np.int32), scale
