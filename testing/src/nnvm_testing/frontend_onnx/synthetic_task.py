"""A labelled image task that trained weights can be made for without a download (numpy only).

Random-weight networks are chaotic: rounding their input to uint8 alone changes MobileNetV2's top-1 for
10% of inputs, so a quantizer's top-1 agreement measured on them says little (bench/RESULTS.md,
session 21). ``scripts/train_synthetic.py`` trains ResNet-18 and MobileNetV2 on this task in the torch
venv; their decisions then follow the input with a margin, as a deployed classifier's do.

Ten classes: the orientation of the dominant grating in five bins of 36 degrees, times whether it is
seen whole or through a Gaussian window. Each image adds a weaker grating at any orientation, a colour
per grating, a global gain and offset and pixel noise, clipped to the range of ImageNet-normalized
pixels. The training script imports this file by path, so it stays free of nnvm imports.
"""

from __future__ import annotations

import numpy as np

CLASSES = 10
SIZE = 32


def labelled_images(count: int, seed: int, size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """``(images [count, 3, size, size] float32, labels [count] int64)``, seeded."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size] / size
    images = np.empty((count, 3, size, size), np.float32)
    labels = rng.integers(0, CLASSES, count)
    for n, label in enumerate(labels):
        angle = (label % 5 + rng.uniform(0.0, 1.0)) * np.pi / 5
        x = _grating(rng, xx, yy, angle, windowed=label >= 5) * rng.uniform(1.0, 2.0)
        x = x + 0.35 * _grating(rng, xx, yy, rng.uniform(0.0, np.pi), windowed=rng.random() < 0.5)
        x = x * np.exp(rng.normal(0.0, 0.3)) + rng.normal(0.0, 0.5, (3, 1, 1))
        x += rng.uniform(0.0, 0.4) * rng.standard_normal((3, size, size))
        images[n] = np.clip(x, -2.12, 2.64)
    return images, labels.astype(np.int64)


def _grating(rng, xx, yy, angle: float, windowed: bool) -> np.ndarray:
    freq = rng.uniform(1.5, 5.0)
    g = np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + rng.uniform(0.0, 6.3))
    if windowed:
        cx, cy, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.12, 0.25)
        g = g * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    colour = rng.normal(0.0, 1.0, (3, 1, 1))
    colour /= max(float(np.abs(colour).max()), 0.3)
    return g[None] * colour
