"""Loop nests over a stage's leaf loops: shared by lowering (``nnvm.te.lower``) and tensorize, which
replaces the innermost loops of a nest by a call.
"""

from __future__ import annotations

from dataclasses import replace

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.lower import guarded
from nnvm.tir.visit import substitute


def _leaf_loop(stage, iv: E.IterVar, ranges: dict, var: E.Var, body: S.Stmt) -> S.Stmt:
    attrs = stage.iter_var_attrs.get(iv, {})
    kind = attrs.get("kind", S.ForKind.SERIAL)
    ext = ranges[iv][1]
    annotations = tuple(attrs.get("pragmas", ()))
    return S.For(var, E.const(0), E.convert(ext), kind, body, attrs.get("thread_tag", ""), annotations)


def reduction_nest(stage, red: E.Reduce, out, vmap: dict, ranges: dict, spatial_guards: list,
                   update: S.Stmt, inner_stmts: dict, stop: int | None = None) -> S.Stmt:
    """The nest of a reduction stage around its ``update``: the leaf loops outside the first reduce
    loop; inside them the output's initialisation, over serial copies of the spatial loops further
    in; then the loops from the first reduce one to ``stop`` (default: all) around ``update``.

    ``stop`` is where a tensorized stage's call replaces the loops; the initialisation never goes
    inside it, so the call always accumulates into an initialised region.
    """
    leaves = list(stage.leaf_iter_vars)
    stop = len(leaves) if stop is None else stop
    leaf_vars = {iv: iv.var for iv in leaves}
    spatial_idx = tuple(vmap[iv.var] for iv in stage.op.axis)
    init_value = red.init if red.init is not None else red.combiner.identity(red.dtype)
    init = guarded(S.Store(out, spatial_idx, substitute(init_value, vmap)), spatial_guards)
    first_reduce = next((k for k, iv in enumerate(leaves) if iv.kind == E.IterKind.REDUCE), len(leaves))
    first_reduce = min(first_reduce, stop)
    outer, inner = leaves[:first_reduce], leaves[first_reduce:stop]
    init_leaves = [iv for iv in leaves[first_reduce:] if iv.kind != E.IterKind.REDUCE]
    init_vars = {iv: E.Var(iv.var.name + ".init", E.INDEX_DTYPE) for iv in init_leaves}
    init = substitute(init, {leaf_vars[iv]: init_vars[iv] for iv in init_leaves})
    init_nest = wrap_loops(stage, init_leaves, init_vars, ranges, init, {}, drop_kinds=True)
    update_nest = wrap_loops(stage, inner, leaf_vars, ranges, update, inner_stmts)
    return wrap_loops(stage, outer, leaf_vars, ranges, S.seq(init_nest, update_nest), inner_stmts)


def wrap_loops(stage, leaves, leaf_vars, ranges, body, inner_stmts, drop_kinds=False):
    """``body`` inside the loops of ``leaves`` (outermost first; variables from ``leaf_vars``), with
    the stages of ``inner_stmts`` computed first inside their loop. ``drop_kinds``: the loops run
    serially and bind no thread (the copies of the spatial loops that initialise a reduction)."""
    for iv in reversed(leaves):
        if iv in inner_stmts:
            nests = [nest for _, nest in inner_stmts[iv]]
            body = S.seq(*nests, body)
            for buf, _ in reversed(inner_stmts[iv]):
                for b in buf:
                    body = S.Allocate(b, body)
        loop = _leaf_loop(stage, iv, ranges, leaf_vars[iv], body)
        if drop_kinds and loop.kind in (S.ForKind.PARALLEL, S.ForKind.THREAD_BINDING):
            loop = replace(loop, kind=S.ForKind.SERIAL, thread_tag="")
        body = loop
    return body
