"""Registers the core's graph passes through the same hook any pass plugin uses.

The pass table lives here, above every pass module, so the modules import one another one way only
(``alter_op_layout`` uses ``builtin``'s helpers; nothing below imports the table).
"""

from nnvm.hookspecs import hookimpl
from nnvm.passes.alter_op_layout import alter_op_layout
from nnvm.passes.builtin import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    fuse_ops,
    infer_types,
    simplify_inference,
)
from nnvm.passes.combine_parallel import combine_parallel_matmuls
from nnvm.passes.fold_scale import fold_scale_axis
from nnvm.passes.manager import Pass


@hookimpl
def nnvm_register_passes(register):
    for p in all_passes():
        register(p)


def all_passes() -> list:
    """The core's passes. Opt levels: 0 shape inference and one kernel per node; 1 inference
    simplification and folding; 2 operator fusion; 3 everything (layout passes, when present)."""

    return [
        Pass("infer_types", infer_types, 0, (), "shapes and dtypes of every value"),
        Pass("simplify_inference", simplify_inference, 1, ("infer_types",),
             "batch_norm to scale and shift; dropout and identity removed; x ** 2|3|4 as multiplies"),
        Pass("fold_scale_axis", fold_scale_axis, 1, ("infer_types",),
             "per-channel scale and shift after conv2d/dense folded into its weights and a bias_add"),
        Pass("combine_parallel_matmuls", combine_parallel_matmuls, 3, ("infer_types",),
             "products of one activation by several constant weights as one product and a slice each "
             "(graphs with symbolic dims: a decoder's q, k, v)"),
        Pass("alter_op_layout", alter_op_layout, 3, ("infer_types",),
             "operators the backend prefers in a blocked layout (NCHW[x]c) rewritten, transforms at borders"),
        Pass("fold_constants", fold_constants, 1, ("infer_types",),
             "subgraphs that depend only on weights evaluated at compile time"),
        Pass("eliminate_common_subexpressions", eliminate_common_subexpressions, 1, (),
             "identical nodes computed once"),
        Pass("eliminate_dead_code", eliminate_dead_code, 1, (), "unused nodes and weights dropped"),
        Pass("fuse_ops", fuse_ops, 0, ("infer_types",),
             "nodes partitioned into kernels (opt level 2+: elementwise fused into producers)"),
    ]
