"""TfIdfVectorizer over integer tokens, as comparisons with the constant n-gram pool.

The pool of n-grams is an attribute, so the operator is a fixed set of window comparisons: for each
n-gram size ``n`` and skip distance ``d`` (1 to ``max_skip_count + 1``; unigrams once, as skips do not
change them), the ``n`` strided windows of the input (``x[s], x[s + d], ... x[s + (n-1) d]`` for every
start ``s``) are compared with every pool n-gram of that size, the matches (all ``n`` equal) counted
per row; a constant 0/1 matrix adds each n-gram's count into its output column (``ngram_indexes``), and
the mode weighs the counts. String pools are out of scope (nnvm has no string tensors).
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter


def _pool_grams(ctx: Context, min_n: int, max_n: int) -> dict:
    """``{n: [(position in the pool's n-gram order, gram)]}`` for the sizes in ``[min_n, max_n]``. A gram
    listed twice is an error (onnxruntime refuses it too; which column it counts in is ambiguous)."""
    pool = list(ctx.attr("pool_int64s", ()))
    counts = list(ctx.attr("ngram_counts"))
    grams: dict = {}
    position = 0
    for level, start in enumerate(counts):
        n = level + 1
        end = counts[level + 1] if level + 1 < len(counts) else len(pool)
        for k in range(start, end - n + 1, n):
            gram = tuple(pool[k:k + n])
            if min_n <= n <= max_n:
                if gram in grams.setdefault(n, {}):
                    raise ctx.error(f"the pool lists the {n}-gram {gram} twice")
                grams[n][gram] = position
            position += 1
    return {n: sorted((pos, g) for g, pos in by_gram.items()) for n, by_gram in grams.items()}


@converter("TfIdfVectorizer")
def convert_tfidf_vectorizer(ctx: Context, inputs):
    if ctx.has_attr("pool_strings") and not ctx.has_attr("pool_int64s"):
        raise ctx.error("a pool of strings is not supported (nnvm has no string tensors)")
    x = inputs[0]
    shape = ctx.shape(x)
    if len(shape) not in (1, 2):
        raise ctx.error(f"the input must be [C] or [B, C], got rank {len(shape)}")
    rows = x if len(shape) == 2 else ctx.reshape(x, (1,) + tuple(shape))
    batch, width = ctx.shape(rows)
    min_n, max_n = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    skips = int(ctx.attr("max_skip_count"))
    indexes = list(ctx.attr("ngram_indexes"))
    out_size = max(indexes) + 1
    mode = ctx.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.error(f"unknown mode {mode!r} (TF, IDF or TFIDF)")
    dtype = np.dtype(ctx.dtype(x))
    columns, placement = [], []  # per-gram counts, [batch, m] each; each gram's output column
    for n, grams in sorted(_pool_grams(ctx, min_n, max_n).items()):
        table = np.array([g for _, g in grams], dtype=dtype)  # [m, n]
        count = None
        for d in range(1, (1 if n == 1 else skips + 1) + 1):
            starts = width - d * (n - 1)
            if starts <= 0:
                continue
            match = None
            for k in range(n):
                window = ctx.op("strided_slice", [rows], {"begin": (k * d,), "end": (k * d + starts,),
                                                          "strides": (1,), "axes": (1,)})
                window = ctx.reshape(window, (batch, 1, starts))
                wanted = ctx.param(table[:, k].reshape(-1, 1), f"gram{n}_{k}")
                eq = ctx.op("equal", [window, wanted])  # [batch, m, starts]
                match = eq if match is None else ctx.op("logical_and", [match, eq])
            found = ctx.op("sum", [ctx.cast(match, "float32")], {"axis": (2,), "keepdims": False})
            count = found if count is None else ctx.op("add", [count, found])
        if count is None:
            continue
        columns.append(count)
        placement.extend(indexes[pos] for pos, _ in grams)
    if not columns:
        counts = ctx.param(np.zeros((batch, out_size), np.float32), "counts")
    else:
        spread = np.zeros((len(placement), out_size), np.float32)
        spread[np.arange(len(placement)), placement] = 1.0
        joined = columns[0] if len(columns) == 1 else ctx.op("concatenate", columns, {"axis": 1})
        counts = ctx.op("matmul", [joined, ctx.param(spread, "spread")])  # exact: small integer sums
    weights = ctx.attr("weights")
    if mode == "TF":
        y = counts
    elif mode == "IDF":
        present = ctx.op("greater", [counts, ctx.param(np.float32(0), "zero")])
        w = np.ones(out_size, np.float32) if weights is None else np.asarray(weights, np.float32)
        y = ctx.op("where", [present, ctx.param(w, "weights"), ctx.param(np.float32(0), "zero")])
    elif weights is None:
        y = counts
    else:
        y = ctx.op("multiply", [counts, ctx.param(np.asarray(weights, np.float32), "weights")])
    return y if len(shape) == 2 else ctx.reshape(y, (out_size,))
