"""Symbolic modules: one compiled model for every input shape within its bounds (docs/dynamic-shapes.md).

``nnvm.compile(model, shapes={"input_ids": ("batch", "seq")}, bounds={"seq": (1, 2048)})`` returns a
``SymbolicModule``. Its inputs' shapes hold named dims, learnt from the frontend's input binding
(``frontend.convert.binding_dims``): the model's own ``dim_param``s, the names ``shapes=`` gives, and
``<input>:<axis>`` for an unnamed dim. ``run`` binds every dim from the arrays it is given, checks each
against its bounds and against the other inputs carrying it (one sentence naming the input and the
dim), and runs the module specialised for that binding: the static compiler's module for exactly those
shapes, compiled the first time the binding is seen (the kernel cache shares what does not depend on
it) and kept in a small cache, most recently used last.

This is stage 2a of issue 39: the user's contract end to end on every target. Symbolic-extent kernels
(one compile for every shape) replace the per-binding compile in a later stage, with the cache kept as
the bucket mechanism.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import OrderedDict

import numpy as np

from nnvm.compiler import compile_model
from nnvm.errors import DataDependentError, Error, InputError
from nnvm.frontend.convert import DimBinding, binding_dims
from nnvm.graph.dims import Dim, dim_expression
from nnvm.graph.ir import Graph
from nnvm.lowering import group_calls
from nnvm.options import Options
from nnvm.runtime.module import Module, inputs_by_name, load_module
from nnvm.runtime.plan import bind_types, inplace_pairs, make_plan, view_placements
from nnvm.runtime.symbolic import DimSignature, describe, shown

MAX_SPECIALISATIONS = 8  # modules kept, one per binding; each holds its own prepared weights


def bucket(value: int, hi: int | None = None) -> int:
    """The dim value a memory plan is made for, serving every value up to it: a power of two up to 64,
    then a multiple of 64 (at most twice the bytes, and a 64-step decode builds about 3 plans)."""
    if value <= 1:
        return value
    up = min(1 << (value - 1).bit_length(), -(-value // 64) * 64)
    return up if hi is None else max(value, min(up, hi))


def _grows(d) -> bool:
    """Whether dim ``d`` never shrinks as its names grow: non-negative coefficients (the constant term
    aside: ``seq - 1``), no ``%``; a plan for larger dims then has room for every buffer at smaller ones."""
    return not isinstance(d, Dim) or _poly_grows(d._key)


def _poly_grows(key: tuple) -> bool:
    def atom_grows(atom):  # a dim, or a division of a growing polynomial by a constant
        return atom[0] == "var" or (atom[0] == "floordiv" and _poly_grows(atom[1])
                                    and all(not mono for mono, _ in atom[2]))

    return all((c >= 0 or not mono) and all(atom_grows(a) for a in mono) for mono, c in key)


def wants_symbolic(shapes: dict | None, bounds: dict | None) -> bool:
    """Whether ``nnvm.compile`` keeps dims symbolic: ``bounds=`` given, or ``shapes=`` naming a dim
    (a string) or leaving one open (None)."""
    if bounds:
        return True
    return any(not isinstance(d, int | np.integer) for shape in (shapes or {}).values() for d in shape)


def _checked_bounds(bounds: dict | None) -> dict:
    """``bounds`` as ``{dim: (lo, hi or None)}``, each ``1 <= lo <= hi``."""
    out = {}
    for dim, b in (bounds or {}).items():
        try:
            lo, hi = b
            lo, hi = int(lo), None if hi is None else int(hi)
        except (TypeError, ValueError):
            raise InputError(f"bounds= gives dim {dim!r} {b!r}; expected a pair (lo, hi)") from None
        if lo < 0 or (hi is not None and hi < lo):  # 0: an empty past (a KV cache's first step)
            raise InputError(f"bounds= gives dim {dim!r} the empty or negative range [{lo}, {hi}]")
        out[dim] = (lo, hi)
    return out


def compile_symbolic(model, target, shapes: dict | None, bounds: dict | None, options: Options,
                     **kwargs) -> SymbolicModule:
    """What ``nnvm.compile`` runs for a symbolic compile: the model imported and compiled once with every
    dim at its lower bound (1 when unbounded), which checks that it converts and compiles and tells the
    inputs' symbolic shapes; that module serves its binding."""
    if isinstance(model, Graph):
        raise InputError("symbolic dims (a name in shapes=, or bounds=) need a model file or framework "
                         "object, not an nnvm Graph, for now; bind every dim with integers in shapes=")
    bounds = _checked_bounds(bounds)
    t0 = time.perf_counter()
    binding = DimBinding({}, symbolic=True)
    try:  # one compile whose kernels take the dims
        with binding_dims(binding):
            whole = compile_model(model, target=target, shapes=shapes, options=options, **kwargs)
        why = None
    except DataDependentError:  # the model is cut into stages there (nnvm.staged), not compiled per binding
        raise
    except Exception as exc:  # noqa: BLE001  (anything the symbolic path cannot do yet: one compile a binding)
        whole, why = None, f"{type(exc).__name__}: {exc}" if not isinstance(exc, Error) else str(exc)
    if whole is None:
        binding = DimBinding({}, default=lambda dim: bounds.get(dim, (1, None))[0])
        with binding_dims(binding):
            first = compile_model(model, target=target, shapes=shapes, options=options, **kwargs)
    else:
        first = whole
    declared = {name: binding.declared[name] for name in first.input_names}
    dims = list(dict.fromkeys(n for shape in declared.values() for d in shape if isinstance(d, str)
                              for n in _dim_names(d)))
    unknown = sorted(set(bounds) - set(dims))
    if unknown:
        raise InputError(f"bounds= names {', '.join(map(repr, unknown))}, which is no symbolic dim of the "
                         f"model's inputs (dims: {', '.join(dims) or 'none'})")
    mod = SymbolicModule(model, target, shapes, bounds, options, kwargs, declared, dims, whole, why,
                         binding.requirements if whole is not None else [])
    if whole is None:
        mod._remember({d: binding.values[d] for d in dims}, first, time.perf_counter() - t0)
    else:
        mod._compile_seconds[None] = time.perf_counter() - t0
        mod._last = whole
    return mod


class SymbolicModule:
    """A compiled model whose inputs have symbolic dims; ``run`` takes any shape within the bounds."""

    def __init__(self, model, target, shapes, bounds: dict, options: Options, kwargs: dict, declared: dict,
                 dims: list, whole=None, why: str | None = None, requirements: list = ()):
        self._model, self._target, self._shapes = model, target, shapes
        self._options, self._kwargs = options, kwargs
        # one compile for every binding (its kernels take the dims), or None and ``why``: one a binding
        self._whole, self.why_specialised = whole, why
        self._bucketed = False  # plans made for a bucket of dim values (``bucket``), run shaped
        if whole is not None:
            self._calls = group_calls(whole.graph)
            # the plan lists the kernels' calls; a view (an in-place concatenation) has none
            for call, planned in zip([c for c in self._calls if not c.get("view")], whole.plan["calls"]):
                call["kernel"] = planned["kernel"]
            self._pairs = inplace_pairs(whole.graph, self._calls)  # hold for every binding
            # views over a symbolic batch are placed for one image (nnvm.batch_loop.image_views)
            self._places = (view_placements(bind_types(whole.graph, dict.fromkeys(whole.plan["dims"], 1)),
                                            self._calls)
                            if any(c.get("view") for c in self._calls) else None)
            types = whole.graph.types
            self._output_shapes = [types[v].shape for v in whole.graph.outputs]
            # every buffer no larger at smaller dims: one plan serves every binding below its own
            self._sizes_grow = all(_grows(d) for ty in types.values() for d in ty.shape)
            self._bucketed = whole.runs_shaped and self._sizes_grow
        self.input_shapes = declared  # input name -> shape of ints and dim names
        self.dims = dims
        # the bounds ({dim: (lo, hi)}) and requirements ((dim, limit, where): dim <= limit) each run checks
        self.signature = DimSignature(declared, {d: bounds.get(d, (1, None)) for d in dims}, requirements)
        self._modules: OrderedDict = OrderedDict()  # binding (dim values in ``dims`` order) -> Module
        self._compile_seconds: dict = {}  # binding -> seconds its specialisation took
        self._last = None
        self._tmpdir = None  # exports of an emulated CPU's module (``_emulated``), by their dims
        self._exports: dict = {}
        self._lock = threading.Lock()  # the cache; a new binding compiles under it, once

    # -- binding ------------------------------------------------------------------------------------
    @property
    def bounds(self) -> dict:
        """``{dim: (lo, hi or None)}``: the signature's own, so a change (``Decoder`` opens ``past`` to 0)
        holds for the runs' checks."""
        return self.signature.bounds

    @property
    def requirements(self) -> list:
        return self.signature.requirements

    @property
    def input_names(self) -> list[str]:
        return list(self.input_shapes)

    @property
    def target(self):
        return self._last.target

    @property
    def plan(self) -> dict:
        """The execution plan of the most recently run specialisation (its outputs' names and shapes)."""
        return self._last.plan

    @property
    def graph(self):
        """The graph of the most recently run specialisation."""
        return self._last.graph

    def output_types(self) -> list:
        """Each output's ``(dtype, shape)``: shapes with ``Dim``s where one compile serves every binding,
        else None for each axis (``nnvm.staged`` types the next stage's inputs with them)."""
        if self._whole is None:
            return [(d["dtype"], (None,) * len(d["shape"])) for d in self._last.plan["outputs"]]
        types = self._whole.graph.types
        return [(types[v].dtype, types[v].shape) for v in self._whole.graph.outputs]

    def bind_dims(self, arrays: dict) -> dict:
        """Each dim's value from the input ``arrays`` (by name), checked (``DimSignature.bind``): rank and
        static dims as declared, every dim within its bounds and the same in every input carrying it."""
        return self.signature.bind({name: a.shape for name, a in arrays.items()})

    def _arrays(self, args, kwargs) -> dict:
        names = self.input_names
        given = inputs_by_name(names, args, kwargs)
        for name in names:
            if name not in given:
                raise InputError(f"missing input {name!r} {shown(self.input_shapes[name])}")
        return {k: v if isinstance(v, np.ndarray) else np.asarray(v) for k, v in given.items()}

    # -- running ------------------------------------------------------------------------------------
    def run(self, *args, **kwargs) -> list[np.ndarray]:
        """Outputs for inputs of any shape within the bounds (positionally or by name), each with its
        actual shape. Safe from several threads at once."""
        arrays = self._arrays(args, kwargs)
        values = self.bind_dims(arrays)
        whole = self._whole
        if whole is not None and whole._device is None and not whole._in_process:  # an emulated CPU
            return self._emulated(values).run(**arrays)
        mod = self.specialised(values)
        if mod.plan.get("dims") is None or not mod.runs_shaped:
            return mod.run(**arrays)
        out_shapes = [tuple(d.evaluate(values) if isinstance(d, Dim) else d for d in shape)
                      for shape in self._output_shapes]
        return mod.run_shaped([arrays[n] for n in mod.input_names], values, out_shapes)

    __call__ = run

    def run_resident(self, feeds: dict, keep=()) -> list:
        """``run`` on ``feeds`` (by name), leaving the outputs named in ``keep`` on a GPU target's device:
        they come back as ``gpu.library.DeviceTensor``s, which a later run takes as inputs and its kernels
        read in place (a decoder's ``present`` fed back as ``past``: ``generate.Decoder``). Where the
        kernels run on the host, or an output shares storage, an array comes back as from ``run``."""
        outputs = [d["name"] for d in self.plan["outputs"]]  # the same names at every binding
        unknown = sorted(set(keep) - set(outputs))
        if unknown:
            raise InputError(f"keep= names {', '.join(map(repr, unknown))}, which is no output of the model")
        whole = self._whole
        if whole is None or whole._device is None:  # on the host: the kernels read the arrays in place
            return self.run(**{k: np.asarray(v) for k, v in feeds.items()})
        arrays = {k: v if hasattr(v, "shape") and hasattr(v, "dtype") else np.asarray(v)
                  for k, v in inputs_by_name(self.input_names, (), feeds).items()}
        for name in self.input_names:
            if name not in arrays:
                raise InputError(f"missing input {name!r} {shown(self.input_shapes[name])}")
        values = self.bind_dims(arrays)
        mod = self.specialised(values)
        out_shapes = [tuple(d.evaluate(values) if isinstance(d, Dim) else d for d in shape)
                      for shape in self._output_shapes]
        return mod.run_shaped([arrays[n] for n in mod.input_names], values, out_shapes,
                              keep={outputs.index(n) for n in keep})

    def specialised(self, values: dict):
        """The module for one binding (``{dim: value}``), compiled when first asked for."""
        if self._bucketed:  # one plan serves a bucket of bindings
            values = {d: bucket(v, self.bounds[d][1]) for d, v in values.items()}
        key = tuple(values[d] for d in self.dims)
        with self._lock:
            mod = self._modules.get(key)
            if mod is None and self._whole is not None:  # the same kernels, a memory plan for this binding
                t0 = time.perf_counter()
                mod = self._planned(values)
                self._remember(values, mod, time.perf_counter() - t0)
            elif mod is None:
                t0 = time.perf_counter()
                with binding_dims(DimBinding(values)):
                    mod = compile_model(self._model, target=self._target, shapes=self._shapes,
                                        options=self._options, **self._kwargs)
                self._remember(values, mod, time.perf_counter() - t0)
            else:
                self._modules.move_to_end(key)
            self._last = mod
        return mod

    def _planned(self, values: dict) -> Module:
        """A module of the one compile's kernels with a memory plan for the binding ``values``."""
        whole = self._whole
        dims = {d: values.get(d, 1) for d in whole.plan["dims"]}
        bound = bind_types(whole.graph, dims)
        plan = make_plan(bound, self._calls, pairs=self._pairs, bindable=True, places=self._places)
        plan["dims"] = dims
        return Module(plan, whole.params, whole.library, whole.target, whole.stats(), bound)

    def _remember(self, values: dict, mod, seconds: float) -> None:
        key = tuple(values[d] for d in self.dims)
        self._modules[key] = mod
        self._compile_seconds[key] = seconds
        self._last = mod
        while len(self._modules) > MAX_SPECIALISATIONS:
            old, _ = self._modules.popitem(last=False)
            self._compile_seconds.pop(old, None)

    # -- inspection and export ----------------------------------------------------------------------
    def stats(self) -> dict:
        """The statistics of the most recently run specialisation (``Module.stats``), and ``symbolic``:
        the dims with their bounds, the inputs' symbolic shapes, and each binding compiled (seconds)."""
        with self._lock:
            out = dict(self._last.stats())
            out["symbolic"] = {
                "dims": {d: list(b) for d, b in self.bounds.items()},
                "inputs": {k: list(v) for k, v in self.input_shapes.items()},
                # "kernels": one compile, its kernels take the dims; "per binding": a compile each (why)
                "mode": "kernels" if self._whole is not None else "per binding",
                "why_per_binding": self.why_specialised,
                "specialisations": [{"dims": dict(zip(self.dims, key)) if key is not None else None,
                                     "seconds": sec} for key, sec in self._compile_seconds.items()],
            }
        return out

    def export(self, path: str) -> None:
        """One file that runs every binding within the bounds (``nnvm.load``, the C runtime's
        ``nnvm_module_run_shaped``): the kernels, which take the dims, one memory plan made for every dim
        at its upper bound, and the shapes as programs over the dims (``runtime.symbolic.describe``).
        Every buffer grows with the dims (``_grows``), so a smaller binding fits at the same offsets,
        as in a bucket's plan here; a dim without an upper bound, or a size that may shrink, refuses.
        A GPU target's file is its library's zip (``gpu.library``) with the same section: the launch
        table's grids and sizes stay terms of the dims, bound per run (``DeviceModule.run_shaped``)."""
        what = f"cannot export {path}: the module has symbolic dims ({', '.join(self.dims)})"
        if self._whole is None:
            raise Error(f"{what} and compiles once per binding ({self.why_specialised}); an exported module "
                        "needs kernels that take the dims")
        open_ended = [d for d, (_, hi) in self.bounds.items() if hi is None]
        if open_ended:
            raise Error(f"{what}, and {', '.join(map(repr, open_ended))} has no upper bound: an exported "
                        "module plans its memory once, for the largest binding; compile it with bounds= "
                        f"giving each dim a maximum (bounds={{{open_ended[0]!r}: (1, 512)}})")
        if not self._sizes_grow:
            raise Error(f"{what}, and a buffer's size may shrink as the dims grow (a remainder or a negative "
                        "term), so no one memory plan serves every binding; compile it with every dim bound "
                        "(integers in shapes=) to export it")
        extra = [d for d in self._whole.plan["dims"] if d not in self.dims]
        if extra:
            raise Error(f"{what}, and its kernels take {', '.join(extra)}, which no input carries")
        self._export_planned(path, {d: hi for d, (_, hi) in self.bounds.items()})

    def _export_planned(self, path: str, upper: dict) -> None:
        """``export`` with one plan for the dims ``upper``, which bound the file's dims from above."""
        mod = self._planned(upper)
        outputs = list(zip(self._whole.graph.outputs, self._output_shapes))
        signature = DimSignature(self.input_shapes, {d: (lo, upper[d]) for d, (lo, _) in self.bounds.items()},
                                 self.requirements)
        mod.export(path, symbolic=describe(signature, self.dims, outputs))

    def _emulated(self, values: dict):
        """The module for a CPU this host runs under an emulator only, for ``values``: the kernels exported
        with a plan for their bucket (``bucket``; the whole bounds where every dim has one), loaded back
        and run by the target's ``nnvm-run`` through its library; one export a bucket, cached."""
        if all(hi is not None for _, hi in self.bounds.values()):
            upper = {d: hi for d, (_, hi) in self.bounds.items()}
        else:
            upper = {d: bucket(v, self.bounds[d][1]) for d, v in values.items()}
        key = tuple(upper[d] for d in self.dims)
        with self._lock:
            found = self._exports.get(key)
            if found is None:
                if self._tmpdir is None:
                    self._tmpdir = tempfile.TemporaryDirectory(prefix="nnvm-symbolic-")
                path = os.path.join(self._tmpdir.name, f"module-{len(self._exports)}.so")
                self._export_planned(path, upper)
                found = self._exports[key] = load_module(path)
            return found


def _dim_names(d: str) -> tuple:
    """The dims a declared dim binds: itself, or the names in ``past + seq``."""
    expr = dim_expression(d)
    return (d,) if expr is None else expr.names
