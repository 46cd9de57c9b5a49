"""nnvm.calibration against numpy: ranges over calibration samples, scales and zero points."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.calibration import (
    HISTOGRAM_BINS,
    activation_qparams,
    calibrate,
    quantize_bias,
    quantize_weight,
)
from nnvm.errors import Error


def _samples(rng, n=6):
    return [{"relu": np.maximum(rng.standard_normal((4, 50)), 0).astype(np.float32),
             "signed": (rng.standard_normal((4, 50)) * 3).astype(np.float32)} for _ in range(n)]


def test_minmax_is_the_extremes_of_every_sample():
    samples = _samples(np.random.default_rng(0))
    ranges = calibrate(lambda s: s, samples, "minmax")
    for name in ("relu", "signed"):
        values = np.concatenate([s[name].ravel() for s in samples])
        assert ranges[name] == (float(values.min()), float(values.max()))


def test_percentile_is_numpys_within_two_bins():
    samples = _samples(np.random.default_rng(1), n=20)
    ranges = calibrate(lambda s: s, samples, "percentile", percentile=99.0)
    for name in ("relu", "signed"):
        values = np.concatenate([s[name].ravel() for s in samples])
        magnitude = np.abs(values[values != 0])
        want = np.percentile(magnitude, 99.0)
        bin_width = np.abs(values).max() / HISTOGRAM_BINS
        assert abs(ranges[name][1] - want) <= 2 * bin_width, name  # the upper edge of its bin
        assert ranges[name][0] == (0.0 if name == "relu" else max(values.min(), -ranges[name][1]))


def test_entropy_clips_rare_outliers_and_keeps_a_uniform_range():
    rng = np.random.default_rng(2)
    gauss = rng.standard_normal(200_000).astype(np.float32)
    gauss[:5] = 200.0  # five outliers far out: not worth 8 bits of range
    uniform = rng.uniform(0, 1, 200_000).astype(np.float32)
    ranges = calibrate(lambda s: s, [{"gauss": gauss, "uniform": uniform}], "entropy")
    # the least a signed tensor keeps is its 128 levels' worth of bins: 128 * 200 / 2048 = 12.5, not 200
    assert 2.0 < ranges["gauss"][1] <= 128 * 200.0 / HISTOGRAM_BINS + 1e-3
    assert ranges["uniform"][1] > 0.95


def test_bad_method_and_non_finite_values():
    with pytest.raises(Error, match="unknown calibration method 'kl'"):
        calibrate(lambda s: s, [{}], "kl")
    with pytest.raises(Error, match="tensor 't' holds inf or NaN"):
        calibrate(lambda s: s, [{"t": np.array([1.0, np.inf], np.float32)}])


@pytest.mark.parametrize("lo,hi", [(-1.5, 3.0), (0.0, 6.0), (0.5, 2.0), (-4.0, -1.0), (0.0, 0.0)])
def test_activation_qparams_hold_zero_and_the_range(lo, hi):
    scale, zp = activation_qparams(lo, hi)
    assert scale.dtype == np.float32 and zp.dtype == np.uint8
    # numpy's uint8 quantization of the range's ends and of 0: 0 exact, the ends within half a step
    q = np.clip(np.round(np.array([lo, 0.0, hi], np.float32) / scale) + int(zp), 0, 255)
    back = (q - int(zp)) * scale
    assert back[1] == 0.0
    assert np.all(np.abs(back - [lo, 0.0, hi]) <= scale / 2 + 1e-6)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_weights_symmetric_int8(axis):
    w = np.random.default_rng(3).normal(0, 1, (6, 5, 3)).astype(np.float32)
    w[2 if axis == 0 else 0] = 0.0  # an all-zero channel keeps scale 1
    q, scale = quantize_weight(w, axis)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and np.abs(q).max() == 127 and q.min() >= -127
    shape = [1] * 3
    if axis is not None:
        shape[axis] = -1
        assert scale.shape == (w.shape[axis],)
    assert np.all(np.abs(q * scale.reshape(shape) - w) <= scale.reshape(shape) / 2 + 1e-7)


def test_bias_scale_is_the_float32_product():
    w_scale = np.array([0.01, 0.02, 0.003], np.float32)
    x_scale = np.float32(0.05)
    bias = np.array([0.3, -1.7, 2.2], np.float32)
    q, scale = quantize_bias(bias, x_scale, w_scale)
    assert q.dtype == np.int32 and np.array_equal(scale, x_scale * w_scale)
    assert np.all(np.abs(q * scale.astype(np.float64) - bias) <= scale / 2 + 1e-7)
