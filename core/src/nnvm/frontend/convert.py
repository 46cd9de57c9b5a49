"""The conversion loop every frontend shares: check all operators first, then convert node by node.

``check_supported`` lists every unsupported operator of a model in one ``UnsupportedOperatorError``
before anything is converted; ``call_converter`` runs one converter and turns any failure into a
``ConvertError`` naming the source node (a ``FailedConversionError`` unless the converter raised
its own ``ConvertError``) (builder errors arrive as ``NodeError``s, whose ``reason`` is
put after the source node's label); ``bind_input`` turns a declared input shape plus the user's
``shapes=`` into the static shape the graph is built with (``binding_dims``: the symbolic dims a
specialisation of a symbolic module binds, and the declared shapes it learns).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterable, Iterator

from nnvm.errors import Error, InputError, UnboundDimError, UnsupportedOperatorError
from nnvm.frontend.context import ConversionContext, ConvertError, FailedConversionError
from nnvm.graph.dims import Dim, dim_expression

# A symbolic leading dimension with one of these names is the batch, and defaults to 1.
BATCH_NAMES = re.compile(r"^(n|b|bs|batch|batch_?size|batches|num_?batch(es)?)$", re.IGNORECASE)


def check_supported(nodes: Iterable[tuple[str, str]], supported: Callable[[str], bool], fmt: str,
                    path: str | None = None) -> None:
    """Raise one ``UnsupportedOperatorError`` naming every operator in ``nodes`` (``(op, node name)``
    pairs) for which ``supported(op)`` is false, each with its nodes; ``fmt`` names the format."""
    missing: dict[str, list[str]] = {}
    for op, name in nodes:
        if not supported(op):
            missing.setdefault(op, []).append(name)
    if missing:
        raise UnsupportedOperatorError(fmt, missing, path)


def unique_names(nodes: Iterable[tuple[str, str]]) -> list[str]:
    """One unique name per source node, from ``(name, op)`` pairs: the node's own name, or ``<op>_<index>``
    for an unnamed one; a repeated name gets ``_<index>`` appended. Every nnvm node a converter emits is
    named after it, so errors and fused-group listings point back at the user's model."""
    seen: set = set()
    out = []
    for i, (name, op) in enumerate(nodes):
        name = name or f"{op}_{i}"
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        out.append(name)
    return out


def call_converter(ctx: ConversionContext, fn: Callable, inputs: list) -> list:
    """``fn(ctx, inputs)`` as a list of values; every error names the node ``ctx`` is converting."""
    try:
        results = fn(ctx, inputs)
    except ConvertError:
        raise
    except Error as exc:  # from the builder (a NodeError) or a helper: name the source node instead
        raise FailedConversionError(f"{ctx.label}: {getattr(exc, 'reason', exc)}") from None
    except Exception as exc:  # a malformed node (missing attribute or input) in a model we accepted
        raise FailedConversionError(f"{ctx.label}: cannot convert ({type(exc).__name__}: {exc})") from exc
    return [results] if isinstance(results, str) else list(results)


def check_shape_keys(shapes: dict | None, known: list[str], where: str) -> dict:
    """``shapes`` as a dict, after checking it names only inputs of the model."""
    shapes = dict(shapes or {})
    for key in shapes:
        if key not in known:
            raise InputError(f"shapes= names {key!r}, which is not an input of {where} "
                             f"(inputs: {', '.join(known) or 'none'})")
    return shapes


class DimBinding:
    """Values for named symbolic dims while a model is imported (``binding_dims``), and what the import
    declared: input name -> its shape with ints and dim names (an unnamed dim is ``<input>:<axis>``)."""

    def __init__(self, values: dict, default: Callable[[str], int] | None = None, symbolic: bool = False):
        self.values = dict(values)
        self.default = default
        self.symbolic = symbolic  # every dim stays a ``graph.dims.Dim`` (a symbolic import)
        self.declared: dict[str, tuple] = {}
        self.requirements: list[tuple] = []  # (dim, limit, where): dim <= limit at every run

    def value(self, dim: str, name: str, axis: int) -> int | Dim:
        expr = dim_expression(dim)
        if expr is not None:  # ``past + seq``: the dims it names, each bound on its own
            if self.symbolic:
                return expr
            return expr.evaluate({n: self.value(n, name, axis) for n in expr.names})
        if self.symbolic:
            return Dim.named(dim)
        if dim not in self.values:
            if self.default is None:
                raise InputError(f"input {name!r} dim {axis} ({dim}) has no value in this binding")
            self.values[dim] = self.default(dim)
        return self.values[dim]


_BINDING: contextvars.ContextVar[DimBinding | None] = contextvars.ContextVar("nnvm_dim_binding", default=None)


@contextlib.contextmanager
def binding_dims(binding: DimBinding) -> Iterator[DimBinding]:
    """Within the block, ``bind_input`` keeps every symbolic dim (the model's names, and names given in
    ``shapes=``) and gives it its value from ``binding``, recording each input's symbolic shape in
    ``binding.declared``: how a symbolic module (``nnvm.dynamic``) learns its inputs' dims from any
    frontend, and how it imports a specialisation."""
    token = _BINDING.set(binding)
    try:
        yield binding
    finally:
        _BINDING.reset(token)


def require_at_most(dim, limit, where: str) -> None:
    """Record that symbolic ``dim`` must be at most ``limit`` (an int or a dim) at every run, for a
    conversion that relies on it (``where``: the node): a ``Slice`` of a 512-row table up to ``seq``. The
    symbolic module checks it when a run binds the dims; outside a symbolic import there is nothing to do."""
    binding = _BINDING.get()
    if binding is None or not binding.symbolic:
        raise Error(f"{where}: {dim} <= {limit} can only be required of a symbolic import")
    binding.requirements.append((dim, limit, where))


def symbolic_shape(name: str, declared, given) -> tuple:
    """Input ``name``'s shape with dims kept by name: ``given`` (the user's ``shapes=`` entry, ints, names
    or None) over ``declared`` (the model's); a dim with neither a value nor a name is ``<name>:<axis>``."""
    shown = "(" + ", ".join(str(d) for d in declared) + ")" if declared is not None else "unknown"
    if given is not None:
        if declared is not None and len(given) != len(declared):
            raise InputError(f"shapes= gives input {name!r} the shape {tuple(given)}, but the model "
                             f"declares rank {len(declared)} {shown}")
        base = list(given)
        for i, d in enumerate(base):  # None in shapes=: keep what the model says
            if d is None and declared is not None:
                base[i] = declared[i]
    elif declared is None:
        raise InputError(f"input {name!r} has no declared shape; pass shapes={{{name!r}: (...)}}")
    else:
        base = list(declared)
    out = []
    for i, d in enumerate(base):
        if isinstance(d, str) and d and d != "?":
            out.append(d)
        elif d is None or isinstance(d, str) or int(d) < 0:
            out.append(f"{name}:{i}")
        else:
            out.append(int(d))
    return tuple(out)


def bind_input(name: str, declared, shapes: dict, where: str) -> tuple:
    """The static shape of input ``name``: ``shapes[name]`` if given (same rank as ``declared``),
    else ``declared``, whose entries are ints or symbolic names (str, or None for unknown); a
    symbolic leading batch dimension (``N``, ``batch``) becomes 1, any other one is an error.
    ``declared=None`` means the format declares no shape at all. Inside ``binding_dims`` every symbolic
    dim takes its value from the binding instead."""
    binding = _BINDING.get()
    if binding is not None:
        shape = symbolic_shape(name, declared, shapes.get(name))
        binding.declared[name] = shape
        return tuple(d if isinstance(d, int) else binding.value(d, name, i) for i, d in enumerate(shape))
    shown = "(" + ", ".join(str(d) for d in declared) + ")" if declared is not None else "unknown"
    if name in shapes:
        if any(d is None or isinstance(d, str) for d in shapes[name]):
            raise InputError(f"shapes= gives input {name!r} the shape {tuple(shapes[name])} with symbolic "
                             "dims, which only nnvm.compile keeps (a module for every shape); give integers "
                             "here")
        shape = tuple(int(d) for d in shapes[name])
        if declared is not None and len(shape) != len(declared):
            raise InputError(f"shapes= gives input {name!r} the shape {shape}, but the model "
                             f"declares rank {len(declared)} {shown}")
        return shape
    if declared is None:
        raise InputError(f"input {name!r} of {where} has no declared shape; pass shapes={{{name!r}: (...)}}")
    shape = []
    for i, d in enumerate(declared):
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        elif i == 0 and isinstance(d, str) and BATCH_NAMES.match(d):
            shape.append(1)
        else:
            raise UnboundDimError(f"input {name!r} has a symbolic dimension {i} ({d!r}) in shape {shown}; "
                             f"bind it with shapes={{{name!r}: (...)}}, or keep it symbolic (a name in "
                             "shapes=, or bounds=)")
    return tuple(shape)
