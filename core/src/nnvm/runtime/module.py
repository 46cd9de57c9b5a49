"""The runnable module: kernels + execution plan + weights, in process or loaded from an exported file.

Running is a loop over pre-built kernel calls whose argument arrays (pointers into the activation
arena and the weights) are made once, so a run costs one ctypes call per kernel plus input/output
copies. ``load_module`` needs only the core: it reads the plan and weights from the shared library's
``nnvm_blob_*`` symbols and calls the kernels by address.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import sys
import tempfile
import threading

import numpy as np

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, InputError, ModelLoadError, reading
from nnvm.graph.ir import load_params, save_params
from nnvm.limits import check_allocation
from nnvm.runtime import artifact
from nnvm.runtime.kernel import SEQUENCE_TYPE, kernel_from_address
from nnvm.runtime.symbolic import evaluate, read_description, shown
from nnvm.runtime.threads import run_kernels

ARTIFACT_FORMAT = "nnvm-module"
ARTIFACT_VERSION = artifact.FORMAT_VERSION  # the graph section's version follows the footer's


# Emulation notes already printed in this process: API.md promises the user one line, not one per module.
_NOTES_SHOWN: set[str] = set()

class Module:
    """A compiled model. ``run`` takes inputs positionally or by name and returns a list of arrays."""

    def __init__(self, plan: dict, params: dict, library, target, stats: dict, graph=None,
                 symbolic: dict | None = None):
        self.plan = plan
        # an exported symbolic module's section (``runtime.symbolic.describe``): kept to export it again
        self.symbolic = symbolic
        self.params = {k: np.asarray(v, order="C") for k, v in params.items()}
        self.library = library
        self.target = target
        self._stats = stats
        self.graph = graph
        self._in_process = library.runs_in_process()
        # one foreign call a run where the library has a C loop over its kernels (else one a kernel)
        has_runner = self._in_process and hasattr(library, "sequence_runner")
        runner = library.sequence_runner() if has_runner else None
        self._sequence = SEQUENCE_TYPE(runner) if runner else None
        self._lock = threading.Lock()  # guards the pool of free workspaces and the one-time export
        self._kernels: dict = {}  # kernel name -> its ctypes function (``_prepared_call``)
        # a plan for one binding of symbolic dims: the values its kernels' dim arguments point at
        self._dim_index = {name: k for k, name in enumerate(plan.get("dims", {}))}
        self._dim_values = np.array(list(plan.get("dims", {}).values()) or [0], dtype=np.int64)
        _check_plan(plan, self.params)
        check_allocation(plan["arena_bytes"], "the model's activations")
        # a device's own runner (weights and activations in device memory), which takes every run
        self._device = library.device_module(plan, self.params) if hasattr(library, "device_module") else None
        first = _Workspace(self) if self._device is None else None
        # workspaces not in use by a run; a concurrent run makes one more
        self._free = [first] if first is not None else []
        views = first.inputs if first is not None else [None] * len(plan["inputs"])
        self._inputs = [(d["name"], tuple(d["shape"]), np.dtype(d["dtype"]), view)
                        for d, view in zip(plan["inputs"], views)]
        # The first workspace's kernel calls, for ``nnvm.bench``'s per-kernel profile (single threaded).
        self._calls = first.calls if first is not None else None
        self._exported = None  # an exported copy, for a library whose code runs out of process

    def _prepared_call(self, call: dict, base: int, dims: np.ndarray) -> tuple:
        fn = self._kernels.get(call["kernel"])
        if fn is None:  # a kernel serves many calls (a transformer's layers): looked up once
            fn = self._kernels[call["kernel"]] = kernel_from_address(self.library.address(call["kernel"]))
        ptrs = (ctypes.c_void_p * max(len(call["args"]), 1))()
        for k, ref in enumerate(call["args"]):
            if "dim" in ref:
                ptrs[k] = dims.ctypes.data + 8 * self._dim_index[ref["dim"]]
            else:
                ptrs[k] = base + ref["arena"] if "arena" in ref else self.params[ref["param"]].ctypes.data
        return fn, ctypes.cast(ptrs, ctypes.c_void_p), ptrs, call["kernel"]

    def _call_tables(self, calls: list) -> tuple:
        """``calls``' kernels and argument arrays as two C arrays, for the library's sequence runner."""
        n = max(len(calls), 1)
        kernels = (ctypes.c_void_p * n)(*[ctypes.cast(fn, ctypes.c_void_p).value for fn, *_ in calls])
        args = (ctypes.c_void_p * n)(*[arg.value for _fn, arg, *_ in calls])
        return kernels, args

    def _view(self, d: dict, arena: np.ndarray) -> np.ndarray:
        ref = d["ref"]
        if "param" in ref:
            return self.params[ref["param"]]
        dtype = np.dtype(d["dtype"])
        count = int(np.prod(d["shape"])) if d["shape"] else 1
        return np.frombuffer(arena, dtype=dtype, count=count, offset=ref["arena"]).reshape(d["shape"])

    # -- running ------------------------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [name for name, *_ in self._inputs]

    def run(self, *args, **kwargs) -> list[np.ndarray]:
        """Safe from any number of threads at once, each getting what it would get alone: a run's
        kernels execute where ``threads.run_kernels`` puts them (the main thread itself when no other run
        is under way, else one of the process's kernel-runner threads, one per thread-pool team the cores
        hold) in a workspace (activation arena and the kernel argument arrays pointing into it) that no
        other run uses meanwhile; the weights are shared and only read."""
        values = self._bind(args, kwargs)
        if self._device is not None:
            return self._device.run(values)
        if not self._in_process:
            return self._run_out_of_process(values)
        return run_kernels(self._run_in_workspace, values)

    def _run_in_workspace(self, values: list, shaped: tuple | None = None) -> list[np.ndarray]:
        """One run, where ``threads.run_kernels`` puts it. There are as many workspaces as runs at once,
        at most the number of runner slots, so with one the arena stays in cache."""
        with self._lock:
            ws = self._free.pop() if self._free else None
        if ws is None:
            ws = _Workspace(self)  # outside the lock: building one touches every kernel's arguments
        try:
            return ws.run(values) if shaped is None else ws.run_shaped(values, *shaped)
        finally:
            with self._lock:
                self._free.append(ws)

    __call__ = run

    @property
    def runs_shaped(self) -> bool:
        """Whether ``run_shaped`` serves this module: its kernels run here, on the host, or on a device
        whose runner takes a run's dims (``nnvm.gpu.library.DeviceModule.run_shaped``)."""
        if self._device is not None:
            return hasattr(self._device, "run_shaped")
        return self._in_process

    def run_shaped(self, values: list, dims: dict, output_shapes: list, keep=()) -> list[np.ndarray]:
        """A run of a plan made for larger dims (a bucket, ``nnvm.dynamic``) at smaller ones: ``values``
        (the plan's inputs in order, already checked) and ``dims`` (name -> value, each at most the
        plan's) with the outputs' shapes for them. Every buffer is at its planned offset and no larger
        than planned, so the plan's placements hold; the kernels read the dims from the workspace.
        ``keep``: on a device, the indices of outputs to leave there (``DeviceModule.run``)."""
        for (name, _, dtype, _), v in zip(self._inputs, values):
            if v.dtype != dtype:
                raise InputError(f"input {name!r} must be {dtype.name}, got {v.dtype.name}")
        dim_values = [int(dims.get(name, 1)) for name in self._dim_index]  # as ``specialised`` plans
        if self._device is not None:
            dims = dict(zip(self._dim_index, dim_values))
            return self._device.run_shaped(values, dims, output_shapes, keep)
        return run_kernels(self._run_in_workspace, values, (dim_values, output_shapes))

    def _run_out_of_process(self, values: list) -> list[np.ndarray]:
        """Code for another CPU (an Arm module on x86): export once, let the library run the file (under
        an emulator), and say so on stderr once per process (per distinct note). A library that no
        process here can run (x86 code using extensions this CPU lacks) says why instead."""
        reason = self.library.cannot_run_here() if hasattr(self.library, "cannot_run_here") else None
        if reason:
            raise Error(reason)
        with self._lock:  # one export and one note, whichever thread comes first; the runs need no lock
            if self._exported is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="nnvm-module-")
                path = os.path.join(self._tmpdir.name, "module.so")
                self.export(path)
                self._exported = path
            note = self.library.emulation_note()
            if note not in _NOTES_SHOWN:
                print(f"nnvm: {note}", file=sys.stderr)
                _NOTES_SHOWN.add(note)
        return self.library.run_exported(self._exported, values, self.plan["outputs"])

    def _bind(self, args, kwargs) -> list:
        given = inputs_by_name(self.input_names, args, kwargs)
        out = []
        for name, shape, dtype, _ in self._inputs:
            if name not in given:
                raise InputError(f"missing input {name!r} ({dtype.name}{list(shape)})")
            v = given[name]
            if not isinstance(v, np.ndarray):
                v = np.asarray(v)
            if v.shape != shape:
                raise InputError(f"input {name!r} must have shape {list(shape)}, got {list(v.shape)}")
            if v.dtype != dtype:
                raise InputError(f"input {name!r} must be {dtype.name}, got {v.dtype.name}")
            out.append(v)
        return out

    # -- inspection and export ----------------------------------------------------------------------
    def stats(self) -> dict:
        """Kernels, fused groups, weight and activation bytes, compile seconds per phase."""
        return dict(self._stats)

    def export(self, path: str, symbolic: dict | None = None) -> None:
        """Write one file with kernels, execution plan and weights; ``nnvm.load`` runs it. ``symbolic``:
        the dims and shape programs of a symbolic module whose plan was made for the dims' upper bounds
        (``SymbolicModule.export``), written as format v4; a bound module is v3."""
        symbolic = symbolic if symbolic is not None else self.symbolic
        if self.plan.get("dims") and symbolic is None:
            raise Error(f"cannot export {path}: the module's kernels take symbolic dims "
                        f"({', '.join(self.plan['dims'])}), and exporting them is not supported yet; compile "
                        "it with every dim bound (integers in shapes=) to export it")
        version = artifact.FORMAT_VERSION if symbolic is not None else artifact.BOUND_FORMAT_VERSION
        meta = {
            "format": ARTIFACT_FORMAT,
            "version": version,
            "target": str(self.target),
            "plan": self.plan,
            "stats": self._stats,
        }
        if symbolic is not None:
            meta["symbolic"] = symbolic
        blobs = {"graph": json.dumps(meta).encode(), "params": save_params(self.params)}
        path = os.fspath(path)
        self.library.export(path, blobs)
        if artifact.is_elf(path):  # the CPU targets' shared libraries; other formats check themselves
            artifact.seal(path, str(self.target).split()[0], getattr(self.library, "cpu_features", None),
                          version)


def inputs_by_name(names: list, args: tuple, kwargs: dict) -> dict:
    """``mod.run``'s arguments, positional then by name, as ``{input name: value}``; a surplus, unknown
    or twice-given input is an ``InputError`` (a missing one is the caller's to report)."""
    if len(args) > len(names):
        raise InputError(f"the model takes {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
    given = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise InputError(f"the model has no input named {k!r} (inputs: {', '.join(names)})")
        if k in given:
            raise InputError(f"input {k!r} given twice")
        given[k] = v
    return given


def _check_plan(plan: dict, params: dict) -> None:
    """Every location the plan gives (inputs, outputs, kernel arguments) lies inside the arena or names a
    weight of the right size, so a plan read from a tampered file cannot point a kernel or a copy
    outside the memory it is given."""
    try:
        arena = plan["arena_bytes"]
        if not isinstance(arena, int) or arena < 0:
            raise ValueError(f"arena size {arena!r}")
        descs = list(plan["inputs"]) + list(plan["outputs"])
        refs = [(d["ref"], np.dtype(d["dtype"]).itemsize * _count(d["shape"]), d["name"]) for d in descs]
        refs += [(ref, None, call["kernel"]) for call in plan["calls"] for ref in call["args"]]
        for ref, nbytes, where in refs:
            if "dim" in ref:
                if ref["dim"] not in plan.get("dims", {}):
                    raise ValueError(f"{where} takes a dim {ref['dim']!r} the plan does not bind")
                continue
            if "param" in ref:
                if ref["param"] not in params:
                    raise ValueError(f"{where} uses a weight {ref['param']!r} the module does not have")
                if nbytes is not None and params[ref["param"]].nbytes != nbytes:
                    raise ValueError(f"{where}: weight {ref['param']!r} has the wrong size")
                continue
            offset, size = ref["arena"], ref.get("nbytes", nbytes)
            if nbytes is not None and size != nbytes:
                raise ValueError(f"{where} is {nbytes} bytes, its location says {size}")
            if not (isinstance(offset, int) and isinstance(size, int) and 0 <= offset
                    and size >= 0 and offset + size <= arena):
                raise ValueError(f"{where} at [{offset}, +{size}) lies outside the {arena}-byte arena")
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"the module's execution plan is inconsistent ({exc})") from None


def _count(shape) -> int:
    n = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            raise ValueError(f"bad shape {shape!r}")
        n *= d
    return n


RECYCLE_MIN_BYTES = 1 << 20  # outputs from this size are copied out into recycled buffers
RECYCLED_OUTPUTS = 2


class _Workspace:
    """What one run writes: an activation arena, views of the inputs and outputs in it, and each kernel's
    argument array (arena addresses and the module's shared weights), built once and reused by every
    run that takes this workspace from the module's pool."""

    def __init__(self, mod: Module):
        plan = mod.plan
        self.arena = _aligned_bytes(max(plan["arena_bytes"], 1))
        self.inputs = [mod._view(d, self.arena) for d in plan["inputs"]]
        self.outputs = [mod._view(d, self.arena) for d in plan["outputs"]]
        self.recycled: dict = {}  # output index -> arrays handed out by earlier runs (``_copy_out``)
        base = self.arena.ctypes.data
        # the dims the kernels read: the plan's binding, or a run's (``run_shaped``)
        self.dims = mod._dim_values.copy()
        self.plan_dims = mod._dim_values.copy()
        self.plan = plan
        # (kernel, its argument array as void*, the array kept alive, kernel name)
        self.calls = ([mod._prepared_call(call, base, self.dims) for call in plan["calls"]]
                      if mod._in_process else [])
        self.sequence = mod._sequence
        self.tables = mod._call_tables(self.calls) if self.sequence is not None else None

    def run(self, values: list) -> list[np.ndarray]:
        for view, value in zip(self.inputs, values):
            view[...] = value
        return self._run_kernels(self.outputs)

    def run_shaped(self, values: list, dim_values: list, output_shapes: list) -> list[np.ndarray]:
        """``run`` with the dims and the inputs' and outputs' shapes of this run (``Module.run_shaped``).

        Where the plan lists an input's or output's kernel arguments (``make_plan``'s ``bindable``), they
        point at the caller's array (a C-contiguous input, read in place) and at a fresh array handed
        back as the output (written in place) for this run, instead of a copy through the arena each
        way: a decoder's ``present`` outputs, fed back as the next step's ``past``, are then never
        copied but by the graph's own ``Concat(past, new)``."""
        self.dims[:len(dim_values)] = dim_values
        moved: list = []  # (argument array, index, arena address) to put back after the run
        fresh: set = set()
        try:
            for d, value in zip(self.plan["inputs"], values):
                if "uses" in d and value.flags.c_contiguous and value.flags.aligned:
                    self._point(d["uses"], value.ctypes.data, moved)
                elif "arena" in d["ref"]:
                    _arena_view(self.arena, value.dtype, value.shape, d["ref"]["arena"])[...] = value
            outputs = []
            for i, (d, shape, view) in enumerate(zip(self.plan["outputs"], output_shapes, self.outputs)):
                if "uses" in d:
                    out = self._fresh(i, shape, np.dtype(d["dtype"]), d["ref"]["nbytes"])
                    self._point(d["uses"], out.ctypes.data, moved)
                    fresh.add(i)
                elif "arena" in d["ref"]:
                    out = _arena_view(self.arena, np.dtype(d["dtype"]), shape, d["ref"]["arena"])
                else:
                    out = view
                outputs.append(out)
            return self._run_kernels(outputs, fresh)
        finally:
            for ptrs, a, address in reversed(moved):
                ptrs[a] = address
            self.dims[:] = self.plan_dims

    def _fresh(self, i: int, shape: tuple, dtype: np.dtype, capacity: int) -> np.ndarray:
        """An array for output ``i`` that the kernels write in place and the caller then owns: from
        ``RECYCLE_MIN_BYTES``, a view of a buffer an earlier run handed out and its holders have since
        dropped (``_copy_out``'s reasons: a fresh one is page-faulted in by the kernel's stores), sized
        for the plan's bucket so every binding it serves fits."""
        nbytes = dtype.itemsize * math.prod(shape)
        if nbytes < RECYCLE_MIN_BYTES:
            return np.empty(shape, dtype)
        kept = self.recycled.setdefault(("in place", i), [])  # flat bytes, apart from _copy_out's
        for buf in kept:
            # references: ``kept``, ``buf`` and getrefcount's argument; an array handed out adds one
            if sys.getrefcount(buf) == 3 and buf.nbytes >= nbytes:
                return buf[:nbytes].view(dtype).reshape(shape)
        buf = np.empty(max(nbytes, capacity), np.uint8)
        kept.append(buf)
        del kept[:-RECYCLED_OUTPUTS]
        return buf[:nbytes].view(dtype).reshape(shape)

    def _point(self, uses: list, address: int, moved: list) -> None:
        for k, a in uses:
            ptrs = self.calls[k][2]
            moved.append((ptrs, a, ptrs[a]))
            ptrs[a] = address

    def _run_kernels(self, outputs: list, fresh: set = frozenset()) -> list[np.ndarray]:
        if self.sequence is not None:
            failed = ctypes.c_int64(-1)
            rc = self.sequence(len(self.calls), *self.tables, ctypes.byref(failed))
            if rc != 0:
                raise Error(f"kernel {self.calls[failed.value][3]} failed with status {rc}")
        else:
            for fn, arg, _keep, kernel in self.calls:
                rc = fn(arg)
                if rc != 0:
                    raise Error(f"kernel {kernel} failed with status {rc}")
        return [view if i in fresh else self._copy_out(i, view) for i, view in enumerate(outputs)]

    def _copy_out(self, i: int, view: np.ndarray) -> np.ndarray:
        """Output ``i`` as an array of its own, in a buffer an earlier run handed out and its holders have
        since dropped where there is one (nothing but this list refers to it): its pages are mapped
        already. A fresh array of a large output is page-faulted in on every run: GPT-2's 206 MB of
        batch-8 logits took 380-560 ms a run to copy out, a fifth of the run on 2 threads, where copying
        into a buffer already touched takes 20. Up to ``RECYCLED_OUTPUTS`` buffers an output are kept, so
        a loop that holds the last result while it asks for the next still finds one free."""
        if view.nbytes < RECYCLE_MIN_BYTES:
            return np.array(view, copy=True)
        kept = self.recycled.setdefault(i, [])
        for buf in kept:
            # references: ``kept``, ``buf`` and getrefcount's argument; a user's array, or a view of it
            # (whose base is the buffer), adds one
            if sys.getrefcount(buf) == 3 and buf.shape == view.shape:
                np.copyto(buf, view)
                return buf
        buf = np.array(view, copy=True)
        kept.append(buf)
        del kept[:-RECYCLED_OUTPUTS]
        return buf


def _arena_view(arena: np.ndarray, dtype: np.dtype, shape: tuple, offset: int) -> np.ndarray:
    count = math.prod(shape)
    return np.frombuffer(arena, dtype=dtype, count=count, offset=offset).reshape(shape)


def _aligned_bytes(n: int, align: int = 64) -> np.ndarray:
    raw = np.zeros(n + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n]


class SharedLibrary(KernelLibrary):
    """Kernels in a shared library on disk, found by symbol name."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(os.path.abspath(path))
        except OSError as exc:
            raise ModelLoadError(f"{path}: cannot be loaded as a compiled nnvm module ({exc})") from None
        self.path = path

    def blob(self, name: str):
        try:
            size = ctypes.c_uint64.in_dll(self.lib, f"nnvm_blob_{name}_size").value
            addr = ctypes.addressof(ctypes.c_uint8.in_dll(self.lib, f"nnvm_blob_{name}"))
        except ValueError:
            raise ModelLoadError(f"{self.path}: not an nnvm module (no {name} section)") from None
        return (ctypes.c_uint8 * size).from_address(addr)

    def address(self, name: str) -> int:
        try:
            return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value
        except AttributeError:
            raise ModelLoadError(f"{self.path}: the kernel {name} is missing") from None

    def export(self, path: str, blobs: dict) -> None:

        shutil.copyfile(self.path, path)

    def source(self) -> str:
        return ""


class ExportedSymbolicModule:
    """An exported symbolic module loaded back (``nnvm.load``): ``run`` takes any shape within the bounds.
    Each run binds the dims from the inputs' shapes (``DimSignature``, the messages of ``nnvm.dynamic``),
    evaluates the outputs' shapes from their programs, and runs the file's one plan, made for every dim
    at its upper bound, at those dims (``Module.run_shaped``): no planning or compiling after loading."""

    def __init__(self, module: Module, symbolic: dict):
        self.module = module
        self.signature, self.dims, self._outputs = read_description(symbolic)
        planned = {d["name"] for d in module.plan["inputs"]}
        if set(self.signature.inputs) != planned:
            raise ValueError(f"inputs {sorted(self.signature.inputs)}, the plan's {sorted(planned)}")
        if len(self._outputs) != len(module.plan["outputs"]):
            raise ValueError("it lists another number of outputs than the plan")
        planned = module.plan.get("dims", {})
        for d, (_, hi) in self.signature.bounds.items():  # every run's dims within the plan's
            if d in planned and (hi is None or hi > planned[d]):
                raise ValueError(f"dim {d!r} goes up to {hi}, above the {planned[d]} its plan is made for")

    @property
    def input_names(self) -> list[str]:
        return self.module.input_names

    @property
    def bounds(self) -> dict:
        return dict(self.signature.bounds)

    @property
    def input_shapes(self) -> dict:
        return dict(self.signature.inputs)

    @property
    def plan(self) -> dict:
        return self.module.plan

    @property
    def target(self):
        return self.module.target

    def run(self, *args, **kwargs) -> list[np.ndarray]:
        """Outputs for inputs of any shape within the bounds, each with its actual shape; thread-safe."""
        return self._run(inputs_by_name(self.input_names, args, kwargs))

    def run_resident(self, feeds: dict, keep=()) -> list:
        """``run``, leaving the outputs named in ``keep`` on a GPU target's device
        (``nnvm.dynamic.SymbolicModule.run_resident``, whose ``DeviceTensor``s a later run takes)."""
        outputs = [d["name"] for d in self.module.plan["outputs"]]
        unknown = sorted(set(keep) - set(outputs))
        if unknown:
            raise InputError(f"keep= names {', '.join(map(repr, unknown))}, which is no output of the model")
        return self._run(inputs_by_name(self.input_names, (), feeds), {outputs.index(n) for n in keep})

    def _run(self, given: dict, keep=()) -> list:
        for name in self.input_names:
            if name not in given:
                raise InputError(f"missing input {name!r} {shown(self.signature.inputs[name])}")
        on_device = self.module._device is not None
        arrays = {k: v if isinstance(v, np.ndarray) or on_device and hasattr(v, "shape") else np.asarray(v)
                  for k, v in given.items()}
        values = self.signature.bind({k: a.shape for k, a in arrays.items()})
        vector = [values.get(d, 0) for d in self.dims]
        shapes = [tuple(d if isinstance(d, int) else evaluate(d.code, vector) for d in shape)
                  for shape in self._outputs]
        ordered = [arrays[n] for n in self.input_names]
        if self.module.runs_shaped:
            return self.module.run_shaped(ordered, values, shapes, keep)
        for (name, _, dtype, _), v in zip(self.module._inputs, ordered):
            if v.dtype != dtype:
                raise InputError(f"input {name!r} must be {dtype.name}, got {v.dtype.name}")
        return self.module._run_out_of_process(ordered)  # the file, run by nnvm-run (emulated)

    __call__ = run

    def stats(self) -> dict:
        out = self.module.stats()
        out["symbolic"] = {"dims": {d: list(b) for d, b in self.signature.bounds.items()},
                           "inputs": {k: list(v) for k, v in self.signature.inputs.items()},
                           "mode": "exported", "arena_bytes": self.module.plan["arena_bytes"]}
        return out

    def export(self, path: str) -> None:
        self.module.export(path)


def load_module(path) -> Module:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelLoadError(f"{path}: no such file")
    if artifact.is_elf(path):
        with reading(path, "not a readable nnvm module"):  # the footer and ELF header reader
            _check_artifact(path)
    try:
        lib = SharedLibrary(path)
    except ModelLoadError:
        lib = _foreign_library(path)
        if lib is None:
            raise
    with reading(path, "the module's graph section is corrupt"):
        meta = json.loads(bytes(lib.blob("graph")).decode())
    if not isinstance(meta, dict):
        raise ModelLoadError(f"{path}: the module's graph section is corrupt")
    version = meta.get("version")
    if (meta.get("format") != ARTIFACT_FORMAT or not isinstance(version, int)
            or not artifact.OLDEST_FORMAT_VERSION <= version <= ARTIFACT_VERSION):
        raise ModelLoadError(f"{path}: module format {meta.get('format')} v{version} is not supported by "
                             f"this nnvm (expects {ARTIFACT_FORMAT} v{artifact.OLDEST_FORMAT_VERSION} to "
                             f"v{ARTIFACT_VERSION})")
    with reading(path, "the module's graph or weights section is corrupt"):
        params = load_params(lib.blob("params"))
        plan, target, stats = meta["plan"], meta["target"], meta["stats"]
    symbolic = meta.get("symbolic")
    try:
        mod = Module(plan, params, lib, target, stats, symbolic=symbolic)
    except ModelLoadError as exc:
        raise ModelLoadError(f"{path}: {exc}") from None
    if not mod._in_process:
        mod._exported = path
    if symbolic is None:
        return mod
    try:
        return ExportedSymbolicModule(mod, symbolic)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, Error) as exc:
        raise ModelLoadError(f"{path}: the module's symbolic dims section is corrupt ({exc})") from None


def _check_artifact(path: str) -> None:
    """The footer, checksum and ELF header (``artifact.check``), and for a module of another CPU that no
    installed backend can run, one sentence saying which CPU it is for, before anything is loaded."""
    footer = artifact.check(path)
    if footer["machine"] == artifact.host_machine():
        missing = artifact.host_lacks(footer["probes"])
        if missing:
            raise ModelLoadError(f"{path}: compiled for a CPU with {', '.join(missing)}, which this CPU "
                                 f"lacks; compile it again here (target '{footer['target']}'), or for the "
                                 "oldest CPU of the fleet (e.g. 'llvm -mcpu=x86-64-v3')")
        return  # runs here with the core alone (plugins may not even be loaded)
    from nnvm.plugins import backends

    if footer["target"] not in backends():
        raise ModelLoadError(f"{path}: a module for the {footer['target']} target "
                             f"({artifact.machine_name(footer['machine'])}), and no installed nnvm backend "
                             "runs that target on this machine")


def _foreign_library(path: str):
    """A library for a file ``dlopen`` refused (built for another CPU), from the first installed backend
    that recognises it (``Backend.open_foreign``); None when none does."""
    from nnvm.plugins import backends

    seen = set()
    for _, backend in backends().values():
        if id(backend) in seen:
            continue
        seen.add(id(backend))
        lib = backend.open_foreign(path) if hasattr(backend, "open_foreign") else None
        if lib is not None:
            return lib
    return None
