"""What one operator case is: a seeded stream of examples, a numpy reference and a tolerance.

An ``Example`` is concrete inputs and attributes for one node. An ``OpCase`` draws examples from a
Hypothesis strategy (shapes, attributes, dtypes, and an integer seed for the values, so arrays are
made by numpy quickly rather than element by element by Hypothesis), computes the expected outputs
with its own numpy reference (never with nnvm's ``evaluate``), and says how far a backend may be
from it. Tolerances are in units of the output dtype's machine epsilon, so one rule covers float32
and float64:

    |got - want| <= eps * (rtol_ulps * |want| + atol_ulps * scale)

where ``scale`` is what the rounding error grows with: 1 for elementwise operators on values of
order one, the sum of magnitudes of the terms for reductions, convolutions and products. Integer
and bool outputs must match exactly.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

EXACT_KINDS = "biu"  # bool, signed and unsigned integers: compared exactly


@dataclass(frozen=True)
class Example:
    """Inputs and attributes of one node; ``out_dtypes`` overrides the dtype the outputs must have.

    Attributes whose names start with ``_`` are for the reference only and never reach the node
    (the untransformed kernel of a Winograd convolution, say). ``constants``: positions of inputs that
    are the graph's constant weights rather than its inputs, so a backend's compile-time paths (weights
    packed by ``alter_op_layout``) are what runs; a graph holding such an example compiles at
    ``opt_level=3``.
    """

    inputs: tuple
    attrs: dict
    out_dtypes: tuple | None = None
    constants: tuple = ()

    @property
    def node_attrs(self) -> dict:
        return {k: v for k, v in self.attrs.items() if not k.startswith("_")}

    def describe(self) -> str:
        """Shapes, dtypes and attributes as one line, for failure messages and the report."""
        ins = ", ".join(f"{'const ' if k in self.constants else ''}{a.dtype}{list(a.shape)}"
                        for k, a in enumerate(self.inputs))
        attrs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.node_attrs.items()))
        return f"({ins})" + (f" {{{attrs}}}" if attrs else "")


@dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= eps * (rtol_ulps * |want| + atol_ulps * scale)``; ``why`` goes in the docs."""

    rtol_ulps: float
    atol_ulps: float
    why: str


@dataclass(frozen=True)
class OpCase:
    """How to check operator ``op`` on any target.

    - ``examples``: a strategy of ``Example`` (shapes, attributes, dtypes, value seed).
    - ``reference(inputs, attrs) -> list[np.ndarray]``: the expected outputs. Floating results may be
      float64 (more precise than the output); integer and bool results must have the output dtype.
    - ``scale(example) -> float``: the magnitude the absolute tolerance grows with (default 1).
    """

    op: str
    examples: st.SearchStrategy
    reference: Callable
    tolerance: Tolerance
    scale: Callable | None = None
    count: int = 8  # examples per run; they are compiled together as one graph

    def expected_dtypes(self, example: Example, wants: list) -> list[str]:
        """The dtype each output must have: exact results keep theirs, floats follow the inputs."""
        if example.out_dtypes is not None:
            return list(example.out_dtypes)
        floats = [str(a.dtype) for a in example.inputs if a.dtype.kind == "f"]
        default = floats[0] if floats else str(example.inputs[0].dtype)
        return [str(w.dtype) if w.dtype.kind in EXACT_KINDS else default for w in wants]

    def seed(self) -> int:
        """The Hypothesis seed of this operator's examples: fixed per operator name."""
        return zlib.crc32(self.op.encode())


@dataclass
class Comparison:
    """One output of one example against its reference."""

    ok: bool
    max_abs_error: float
    worst_ratio: float = 0.0  # max over elements of error / allowed error (> 1 fails)
    detail: str = ""
    extra: dict = field(default_factory=dict)


def compare(got: np.ndarray, want: np.ndarray, dtype: str, tolerance: Tolerance, scale: float) -> Comparison:
    """Whether ``got`` (the backend's output) is within ``tolerance`` of ``want`` (the reference)."""
    got = np.asarray(got)
    if str(got.dtype) != dtype:
        return Comparison(False, float("inf"), float("inf"), f"dtype {got.dtype}, expected {dtype}")
    if got.shape != want.shape:
        return Comparison(False, float("inf"), float("inf"), f"shape {got.shape}, expected {want.shape}")
    if got.size == 0:
        return Comparison(True, 0.0)
    if got.dtype.kind in EXACT_KINDS:
        expected = want.astype(dtype)
        bad = got != expected
        err = float(np.abs(got.astype(np.float64) - expected.astype(np.float64)).max())
        if not bad.any():
            return Comparison(True, 0.0)
        k = int(np.flatnonzero(bad.reshape(-1))[0])
        detail = (f"{int(bad.sum())} elements differ, first at flat index {k}: got {got.reshape(-1)[k]}, "
                  f"expected {expected.reshape(-1)[k]}")
        return Comparison(False, err, float("inf"), detail)
    eps = float(np.finfo(got.dtype).eps)
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    same_inf = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore"):
        err = np.where(both_nan | same_inf, 0.0, np.abs(g - w))
    err = np.where(np.isnan(err), np.inf, err)
    magnitude = np.abs(np.where(np.isfinite(w), w, 0.0))
    allowed = eps * (tolerance.rtol_ulps * magnitude + tolerance.atol_ulps * scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / allowed)  # an exact tolerance allows no error at all
    k = int(np.argmax(ratio))
    worst = float(ratio.reshape(-1)[k])
    max_err = float(err.max())
    ok = worst <= 1.0
    detail = "" if ok else (f"max abs error {max_err:.3g}; worst at flat index {k}: got {g.reshape(-1)[k]!r},"
                            f" expected {w.reshape(-1)[k]!r} (allowed {allowed.reshape(-1)[k]:.3g})")
    return Comparison(ok, max_err, worst, detail)


# ---------------------------------------------------------------------------------------------------
# strategy helpers shared by the case modules


def rng_of(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


SEEDS = st.integers(0, 2**32 - 1)
FLOATS = ("float32", "float64")
SIGNED_INTS = ("int32", "int64", "int8")
NUMBERS = FLOATS + ("int32", "int64")


def shapes(min_rank: int = 1, max_rank: int = 4, min_side: int = 1, max_side: int = 6):
    """Shapes of ranks min_rank..max_rank with sides min_side..max_side."""
    return st.integers(min_rank, max_rank).flatmap(
        lambda r: st.tuples(*[st.integers(min_side, max_side)] * r))


def values(rng: np.random.Generator, shape, dtype: str, kind: str = "signed") -> np.ndarray:
    """Random values of ``dtype``: ``kind`` is signed, positive, unit, nonzero, ties or bool.

    ``ties`` draws from a handful of values so that equal elements (comparisons, argmax ties) occur.
    """
    shape = tuple(shape)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        ranges = {"positive": (1, 10), "nonzero": (1, 10), "ties": (-2, 2), "unit": (-1, 1)}
        lo, hi = ranges.get(kind, (-10, 10))
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
        out = rng.integers(lo, hi + 1, shape)
        if kind == "nonzero" and info.min < 0:
            out = out * rng.choice([-1, 1], shape)
        return out.astype(dtype)
    if kind == "positive":
        out = rng.uniform(0.05, 4.0, shape)
    elif kind == "unit":
        out = rng.uniform(-1.0, 1.0, shape)
    elif kind == "nonzero":
        out = rng.uniform(0.5, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif kind == "ties":
        out = rng.integers(-2, 3, shape) * 0.5
    else:
        out = rng.uniform(-3.0, 3.0, shape)
    return np.asarray(out, dtype=dtype)


def broadcast_pair(out: tuple, rng_draw) -> tuple:
    """A shape that broadcasts to ``out``: leading axes dropped, some sides set to 1."""
    drop, ones = rng_draw
    shape = out[min(drop, len(out)):] if len(out) > 1 else out
    return tuple(1 if (ones >> k) & 1 else d for k, d in enumerate(shape)) or (1,)


@st.composite
def broadcast_shapes(draw, count: int, max_rank: int = 4, max_side: int = 5):
    """``count`` shapes that broadcast together (numpy rules)."""
    out = draw(shapes(1, max_rank, 1, max_side))
    result = []
    for _ in range(count):
        drop = draw(st.integers(0, len(out) - 1))
        ones = draw(st.integers(0, 2 ** len(out) - 1))
        result.append(broadcast_pair(out, (drop, ones)))
    if all(s != out for s in result):
        result[draw(st.integers(0, count - 1))] = out  # at least one input has the full shape
    return result


def max_abs(*arrays) -> float:
    """The largest magnitude among the arrays (1 for empty ones)."""
    return max([float(np.abs(a.astype(np.float64)).max()) for a in arrays if a.size] or [1.0])
