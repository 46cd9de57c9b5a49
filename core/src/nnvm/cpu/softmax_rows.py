"""Softmax along the last axis as two row kernels that compute each ``exp`` once (the layout pass's form).

The core's softmax is three stages (row maximum, sum of ``exp(x - max)``, output ``exp(x - max) / sum``)
and a row's output is computed in the same loop as its sum, which is the sum's only reader: so every
element's ``exp`` is computed twice, once for the sum and once for the output (a stage computed inside a
row's loop may have one reader, and the exponentials have two). Here softmax is::

    softmax_exp:        e[.., j] = exp(x[.., j] - max_j x[.., :])      # one exp a element, stored (the
                                                                       # maximum skips NaN: one instruction)
    softmax_normalize:  y[.., j] = e[.., j] * (1 / sum_j e[.., :])     # the row read twice from cache

two kernels of one row loop each (``schedule_softmax.py``), the rows in between small enough to stay in
the core's caches. ``softmax_exp`` flushes results under float32's smallest normal number to exactly 0:
a causal mask's -1e9 (GPT-2) otherwise sent half of each row through ``exp``'s gradual underflow to a
denormal number, which the CPU computes in microcode (the masked softmax ran 2.1x slower than an
unmasked one). A probability under 1e-38 is 0 in any float32 sum it takes part in.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.cpu.switches import enabled
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import OpDef, OpPattern

EXP_FLOOR = -87.0  # exp below this is under float32's smallest normal number (exp(-87.34))

# The row's largest number, NaN skipped: select(v > m, v, m) is one vmaxps where a maximum that propagates
# NaN takes four instructions a vector, in the row's one dependent chain. A row with a NaN still comes out
# NaN from softmax: that element's exp is NaN, and so is the row's sum.
_largest = te.comm_reducer(lambda m, v: te.select(v > m, v, m), lambda dt: -np.inf, name="max_skipping_nan")


def _rows_infer(op: str):
    def infer(in_types, attrs):
        (x,) = require_inputs(op, in_types, ("data",))
        if x.dtype != "float32" or not x.shape:
            raise Error(f"{op}: the data must be float32 with at least one axis, got {x.dtype} {x.shape}")
        return [TensorType(x.shape, x.dtype)]
    return infer


def _exp_compute(inputs, attrs, out_types):
    (x,) = inputs
    *lead, n = shape_of(x)
    k = te.reduce_axis((0, n), name="k")
    row_max = _largest if enabled("softmax_max_skips_nan") else te.max
    m = te.compute(tuple(lead), lambda *i: row_max(x[(*i, k)], axis=k), name="softmax_exp_max", tag="max")
    floor = te.const(EXP_FLOOR, "float32")

    def body(*i):
        z = x[i] - m[i[:-1]]
        if enabled("softmax_bounded_exp"):
            # z is in [floor, 0] or NaN where the select keeps exp's value: the short exp, no clamp
            return te.select(z < floor, te.const(0.0, "float32"), te.exp_bounded(z))
        if not enabled("softmax_select"):
            return te.select(z < floor, te.const(0.0, "float32"), te.exp(te.maximum(z, floor)))
        # one compare for both selects; maximum() also orders NaN (4 vector instructions with AVX2)
        low = z < floor
        return te.select(low, te.const(0.0, "float32"), te.exp(te.select(low, floor, z)))

    return [te.compute(tuple(shape_of(x)), body, name="softmax_exp", tag="softmax_exp")]


def _exp_eval(xs, attrs):
    (x,) = xs
    z = x.astype(np.float64) - np.where(np.isnan(x), -np.inf, x).max(axis=-1, keepdims=True)
    return [np.where(z < EXP_FLOOR, 0.0, np.exp(np.maximum(z, EXP_FLOOR)))]


def _normalize_compute(inputs, attrs, out_types):
    (e,) = inputs
    *lead, n = shape_of(e)
    k = te.reduce_axis((0, n), name="k")
    s = te.compute(tuple(lead), lambda *i: te.sum(e[(*i, k)], axis=k), name="softmax_normalize_sum",
                   tag="sum")
    one = te.const(1.0, "float32")
    return [te.compute(tuple(shape_of(e)), lambda *i: e[i] * (one / s[i[:-1]]), name="softmax_normalize",
                       tag="softmax_normalize")]


def _normalize_eval(xs, attrs):
    (e,) = xs
    e = e.astype(np.float64)
    return [e / e.sum(axis=-1, keepdims=True)]


SOFTMAX_EXP = OpDef("softmax_exp", _rows_infer("softmax_exp"), _exp_compute, OpPattern.OPAQUE,
                    num_inputs=(1, 1), evaluate=checked_evaluate(_rows_infer("softmax_exp"), _exp_eval),
                    doc="exp(x - max(x)) along the last axis (the maximum skips NaN), 0 below float32's "
                        "smallest normal number (the first half of softmax as the x86 layout pass splits it)")
SOFTMAX_NORMALIZE = OpDef("softmax_normalize", _rows_infer("softmax_normalize"), _normalize_compute,
                          OpPattern.OPAQUE, num_inputs=(1, 1),
                          evaluate=checked_evaluate(_rows_infer("softmax_normalize"), _normalize_eval),
                          doc="x / sum(x) along the last axis (the second half of softmax as the x86 "
                              "layout pass splits it)")
