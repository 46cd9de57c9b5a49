"""Data-dependent output shapes: a model cut into compiled stages at the nodes whose output shape their
input values decide (``NonZero``, ``TopK`` with a computed k, ``Range`` over computed bounds), each such
node run on the host between them (docs/dynamic-shapes.md, "Data-dependent output shapes").

``nnvm.compile`` gets a ``DataDependentError`` from the frontend when such a node's deciding input is
not known when importing. The frontend that read the model cuts it there (``Frontend.split``): the nodes
before it (stage 1, compiled as any model is: bound or symbolic), the node itself (a ``HostOp``: numpy on
the host, as onnxruntime's CPU kernels allocate their output once they know its size), and the rest
(compiled symbolic, its inputs typed with stage 1's output shapes and the node's outputs carrying a
**fresh dim**, ``nonzero_0``, bounded by the input's size where there is one). The rest may be cut again
at a later such node. One compile; each run binds the fresh dims from the node's actual output, and the
rest's ``SymbolicModule`` plans memory per bucket of them as for any dim.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nnvm.errors import DataDependentError, Error, InputError
from nnvm.frontend import find_frontend
from nnvm.frontend.convert import symbolic_shape
from nnvm.graph.dims import Dim, dim_expression
from nnvm.runtime.host_ops import HostOp  # noqa: F401  (what a frontend's ``Split.op`` is)
from nnvm.runtime.staged_file import HostStage, Stage, Stages


@dataclass
class Split:
    """A model cut at its first data-dependent node (``Frontend.split``). ``before`` computes
    ``before_outputs`` from ``before_inputs`` (None: nothing to compute); ``after(types)`` builds the rest
    (None: nothing left) given ``{value: (dtype, shape of ints and dim names)}`` for its inputs that the
    earlier stages compute; ``constants`` are values the host op reads that no stage computes."""

    inputs: list
    input_types: dict  # model input -> (dtype, declared shape: ints, dim names or None)
    outputs: list
    before: object
    before_inputs: list
    before_outputs: list
    op: HostOp
    after: Callable | None
    after_inputs: list
    after_outputs: list
    constants: dict = field(default_factory=dict)


def _as_dim(d):
    if isinstance(d, str):
        return dim_expression(d) or Dim.named(d)
    return d


def _text(shape) -> tuple:
    """A shape of ints and ``Dim``s as ints and dim names (what a frontend writes as ``dim_param``s)."""
    return tuple(d if isinstance(d, int) else str(d) for d in shape)


def _names(shape) -> set:
    return {n for d in shape if isinstance(d, Dim) for n in d.names}


def _upper(hi, bounds: dict):
    """An upper bound (an int or a ``Dim``) as an int from the dims' upper bounds; None if unbounded."""
    if hi is None or isinstance(hi, int):
        return hi
    tops = {n: bounds.get(n, (1, None))[1] for n in hi.names}
    return None if None in tops.values() else int(hi.evaluate(tops))


def compile_staged(model, exc: DataDependentError, target, shapes, bounds, options, compile_any, **kwargs):
    """``model`` compiled as stages cut at the node ``exc`` names; ``compile_any`` (``nnvm.compile``'s
    dispatch) compiles each stage, and cuts the rest again where it meets another such node."""
    frontend = find_frontend(model)
    if frontend.split is None:
        raise Error(f"{exc}; the model cannot be cut into stages there (its frontend does not split "
                    "models), so bind that input's value") from None
    t0 = time.perf_counter()
    split = frontend.split(model, exc)
    shapes, bounds = dict(shapes or {}), dict(bounds or {})
    types: dict = {}  # value -> (dtype, shape of ints and Dims), for every value a stage hands on
    for name in split.inputs:
        dtype, declared = split.input_types[name]
        given = shapes.get(name)
        shape = symbolic_shape(name, declared, given) if given is not None or declared is not None else None
        types[name] = (dtype, tuple(_as_dim(d) for d in shape) if shape is not None else None)

    user = set(bounds)

    def stage_bounds(names: list, later: bool = False) -> dict:
        """The bounds on the dims of a stage's inputs; for the rest (``later``) also the user's bounds on
        dims no stage has made yet (a later cut's fresh dim)."""
        dims = set().union(*(_names(types[v][1] or ()) for v in names)) if names else set()
        known = set().union(*(_names(t[1] or ()) for t in types.values()))
        return {d: b for d, b in bounds.items() if d in dims or (later and d in user and d not in known)}

    stages: list = []
    if split.before is not None:
        mine = {k: v for k, v in shapes.items() if k in split.before_inputs}
        first = compile_any(split.before, target, mine, stage_bounds(split.before_inputs), options, **kwargs)
        out_types = first.output_types() if hasattr(first, "output_types") else \
            [(d["dtype"], tuple(d["shape"])) for d in first.plan["outputs"]]
        for value, (dtype, shape) in zip(split.before_outputs, out_types):
            types[value] = (dtype, tuple(Dim.named(f"{value}:{k}") if d is None else d
                                         for k, d in enumerate(shape)))
        stages.append(Stage(first, split.before_inputs, split.before_outputs))
    op = split.op
    taken = set().union(*(_names(t[1] or ()) for t in types.values()))  # a user's bound may name it
    fresh = next(f"{op.op.lower()}_{k}" for k in range(len(taken) + 1) if f"{op.op.lower()}_{k}" not in taken)
    in_types = []
    for v in op.inputs:
        if v in split.constants:
            value = np.asarray(split.constants[v])
            in_types.append((value.dtype.name, value.shape))
        else:
            in_types.append(types.get(v) if v else None)
    out_types, hi = op.types(in_types, fresh)
    for value, ty in zip(op.outputs, out_types):
        if value:
            types[value] = ty
    if fresh in bounds:  # the user's own bound on the fresh dim (a Range's length)
        lo, user_hi = bounds[fresh]
        hi = _upper(hi, bounds)
        bounds[fresh] = (lo, user_hi if hi is None else min(hi, user_hi) if user_hi is not None else hi)
    else:
        bounds[fresh] = (0, _upper(hi, bounds))
    key = Dim.named(fresh)
    where = next(((k, a) for k, (_, shape) in enumerate(out_types) for a, d in enumerate(shape) if d == key),
                 None)
    stages.append(HostStage(op, fresh, where))
    if split.after is not None:
        inner = [v for v in split.after_inputs if v not in split.inputs]
        rest = split.after({v: (types[v][0], _text(types[v][1])) for v in inner})
        mine = {v: _text(types[v][1]) for v in split.after_inputs if types[v][1] is not None}
        second = compile_any(rest, target, mine, stage_bounds(split.after_inputs, later=True), options,
                             **kwargs)
        stages.append(Stage(second, split.after_inputs, split.after_outputs))
    else:  # nothing after the node: a bound naming no dim of the model is the user's slip
        known = set().union(*(_names(t[1] or ()) for t in types.values()))
        unknown = sorted(user - known)
        if unknown:
            raise InputError(f"bounds= names {', '.join(map(repr, unknown))}, which is no dim of the model "
                             f"(dims: {', '.join(sorted(known))})")
    return StagedModule(split, stages, {d: bounds[d] for d in bounds}, time.perf_counter() - t0)


class StagedModule(Stages):
    """A model cut at its data-dependent nodes: compiled stages and host ops run in turn (``run``);
    ``export`` writes them all to one file that ``nnvm.load`` runs with the core alone."""

    def __init__(self, split: Split, stages: list, bounds: dict, seconds: float):
        super().__init__(split.inputs, split.outputs, split.constants, stages, bounds, seconds)
