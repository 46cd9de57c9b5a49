"""A model cut at its data-dependent nodes, as it runs and as one exported file.

``Stages`` runs compiled stages and host ops (``nnvm.runtime.host_ops``) in turn: the in-process module
(``nnvm.staged.StagedModule``, which also compiles) and the module ``nnvm.load`` reads back from a file
are both ``Stages``, so they run the same loop and the same host code. ``write`` puts every stage's own
exported file (a bound or symbolic module, or a staged one for a rest cut again), each host op's name,
attributes and wiring, the constants the host ops read and the fresh dims' bounds in one file; ``load``
reads it with the core alone. Layout (little-endian)::

    offset  size  field
         0     8  magic "NNVMSTG\\0"
         8     4  format version (``STAGED_FORMAT_VERSION``)
        12     4  CRC-32 (zlib's) of every byte from offset 16 to the end
        16     8  h, the description's size in bytes (JSON)
        24     4  n, the note's size in bytes
        28     4  reserved, zero
        32     n  note: ASCII, the first host node as ``name (Op)``, for a runtime that cannot run host ops
                  (the C runtime's ``nnvm_module_load``) to name it in its refusal
      32+n     h  description: inputs, outputs, bounds, steps (compiled: its blob; host: node, op, attrs,
                  inputs, outputs, fresh dim and where it is carried), the constants' blob
    32+n+h        blobs, each at the offset the description gives from here

A stage's blob is its module's file as that module exports it; loading writes it to a private temporary
directory (with the suffix it was exported under) and loads it there, as ``nnvm.load`` loads any file.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass

import numpy as np

from nnvm.errors import Error, InputError, ModelLoadError
from nnvm.graph.ir import load_params, save_params
from nnvm.runtime.host_ops import HOST_OPS, HostOp
from nnvm.runtime.module import inputs_by_name

MAGIC = b"NNVMSTG\0"
STAGED_FORMAT_VERSION = 1  # the newest this nnvm reads and writes
PREFIX = struct.Struct("<8sIIQII")
assert PREFIX.size == 32
MAX_NOTE_BYTES = 1024
_CHUNK = 1 << 22


@dataclass
class Stage:
    """A compiled stage: its module, the values it reads and those it computes (in its output order)."""

    module: object
    inputs: list
    outputs: list


@dataclass
class HostStage:
    """A data-dependent node between stages, and the fresh dim its outputs carry."""

    op: HostOp
    dim: str
    where: tuple | None = None  # (output, axis) carrying the dim


class Stages:
    """Compiled stages and host ops run in turn (``run``); ``bounds`` holds every fresh dim's (and the
    user's) ``(lo, hi or None)``, and a host op's result outside them is an ``InputError``."""

    def __init__(self, inputs: list, outputs: list, constants: dict, stages: list, bounds: dict,
                 seconds: float = 0.0):
        self.input_names = list(inputs)
        self.output_names = list(outputs)
        self._constants = dict(constants)
        self._stages = stages
        self.bounds = bounds
        self._seconds = seconds
        self._lock = threading.Lock()
        self._last: dict = {}  # fresh dim -> its value in the latest run
        # each compiled stage's inputs in its module's order, read once: a run passes them positionally
        self._wiring = [None if isinstance(s, HostStage) else list(s.module.input_names) for s in stages]

    @property
    def dims(self) -> list:
        return [s.dim for s in self._host_stages()]

    def _host_stages(self) -> list:
        out = []
        for s in self._stages:
            if isinstance(s, HostStage):
                out.append(s)
            elif isinstance(s.module, Stages):
                out.extend(s.module._host_stages())
        return out

    def run(self, *args, **kwargs) -> list[np.ndarray]:
        """Outputs for the given inputs (positionally or by name), each with its actual shape."""
        given = inputs_by_name(self.input_names, args, kwargs)
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise InputError(f"missing input {missing[0]!r}")
        env = dict(self._constants)
        env.update({k: v if isinstance(v, np.ndarray) else np.asarray(v) for k, v in given.items()})
        for stage, names in zip(self._stages, self._wiring):
            if names is None:
                op = stage.op
                results = op.run([env.get(v) if v else None for v in op.inputs])
                env.update((v, r) for v, r in zip(op.outputs, results) if v)
                self._check_fresh(stage, results)
            else:  # a stage's arrays go in as they came out of the last, never copied here
                env.update(zip(stage.outputs, stage.module.run(*[env[n] for n in names])))
        return [env[name] for name in self.output_names]

    __call__ = run

    def _check_fresh(self, stage: HostStage, results: list) -> None:
        """The fresh dim's value (read where it is first carried) within its bounds."""
        if stage.where is None:
            return
        k, axis = stage.where
        value = results[k].shape[axis]
        lo, hi = self.bounds[stage.dim]
        if value < lo or (hi is not None and value > hi):
            raise InputError(f"node {stage.op.node} ({stage.op.op}) gives {stage.dim} = {value}, outside its "
                             f"bounds [{lo}, {hi}]")
        with self._lock:
            self._last[stage.dim] = value

    def stats(self) -> dict:
        """The compiled stages' statistics summed (kernels, nodes, bytes, fused groups, compile seconds; a
        host node counts as one node before and after), and
        ``symbolic``: ``mode`` ``"stages"``, each stage (compiled: its mode and dims; host: the node, its
        operator, the fresh dim, its bounds and its value in the latest run)."""
        summed = ("kernels", "distinct_kernels", "nodes_before", "nodes_after", "weight_bytes",
                  "activation_bytes_planned", "activation_bytes_naive", "activation_bytes_lower_bound")
        out: dict = {key: 0 for key in summed}
        out.update({"fused_groups": [], "compile_seconds": {}})
        described = []
        for k, stage in enumerate(self._stages):
            if isinstance(stage, HostStage):
                out["nodes_before"] += 1  # the host node, in the model and run as it is
                out["nodes_after"] += 1
                with self._lock:
                    last = self._last.get(stage.dim)
                described.append({"kind": "host", "node": stage.op.node, "op": stage.op.op, "dim": stage.dim,
                                  "bounds": list(self.bounds[stage.dim]), "last": last})
                continue
            st = stage.module.stats()
            for key in summed:
                out[key] += st.get(key, 0) or 0
            cache = st.get("kernel_cache") or {}  # compiled, from cache, deduplicated: summed too
            mine = out.setdefault("kernel_cache", {})
            for key, value in cache.items():
                mine[key] = mine.get(key, 0) + value if isinstance(value, int) and key != "jobs" else value
            out["fused_groups"] += st.get("fused_groups", [])
            out["compile_seconds"][f"stage{k}"] = st.get("compile_seconds", {})
            sym = st.get("symbolic")
            entry = {"kind": "compiled", "inputs": list(stage.inputs), "outputs": list(stage.outputs),
                     "mode": sym["mode"] if sym else "bound", "dims": sym.get("dims", {}) if sym else {}}
            if sym and "stages" in sym:  # the rest cut again at a later data-dependent node
                entry["stages"] = sym["stages"]
            described.append(entry)
        out["compile_seconds"]["staging"] = self._seconds
        dims = {d: list(b) for d, b in self.bounds.items()}
        for entry in described:  # every dim of every stage, a later cut's fresh dims included
            for d, b in entry.get("dims", {}).items():
                dims.setdefault(d, b)
        out["symbolic"] = {"mode": "stages", "dims": dims, "stages": described}
        return out

    def export(self, path: str) -> None:
        """One file holding every stage's module and every host op's description (``write``)."""
        write(self, path)


def _plain(value, where: str):
    """An attribute as a JSON value (ONNX's byte strings as text); ``where`` names it in the refusal."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise Error(f"{where} is of type {type(value).__name__}, which an exported file cannot hold")


def write(mod: Stages, path) -> None:
    """Export ``mod`` to ``path``: each compiled stage exported by its own module (under ``path``'s
    suffix, so a GPU target's stage is its own format) and packed with the host ops' descriptions; the
    stages' files are copied in chunks, never all held in memory."""
    path = os.fspath(path)
    suffix = os.path.splitext(path)[1]
    with tempfile.TemporaryDirectory(prefix="nnvm-staged-") as tmp:
        files, steps = [], []
        for k, stage in enumerate(mod._stages):
            if isinstance(stage, HostStage):
                op = stage.op
                steps.append({"kind": "host", "node": op.node, "op": op.op,
                              "attrs": {a: _plain(v, f"cannot export {path}: node {op.node} ({op.op})'s "
                                                       f"attribute {a}") for a, v in op.attrs.items()},
                              "inputs": list(op.inputs),
                              "outputs": list(op.outputs), "dim": stage.dim,
                              "where": list(stage.where) if stage.where is not None else None})
                continue
            file = os.path.join(tmp, f"stage{k}{suffix}")
            try:
                stage.module.export(file)
            except Error as exc:  # named by the user's file, not the temporary one
                raise type(exc)(str(exc).replace(file, f"{path} (stage {k})")) from None
            if not os.path.isfile(file):  # a .webgpu export is nnvm-webgpu.js's folder: no host step there
                raise Error(f"cannot export {path}: its stages are written as folders for another runtime "
                            f"(a {suffix} export), which has no place for the host step between them; "
                            "export to a file nnvm.load reads (m.so)")
            files.append(file)
            steps.append({"kind": "compiled", "blob": len(files) - 1, "suffix": suffix,
                          "inputs": list(stage.inputs), "outputs": list(stage.outputs)})
        files.append(os.path.join(tmp, "constants"))
        with open(files[-1], "wb") as f:
            f.write(save_params(mod._constants))
        offsets, at = [], 0
        for file in files:
            offsets.append([at, os.path.getsize(file)])
            at += offsets[-1][1]
        description = {"inputs": mod.input_names, "outputs": mod.output_names,
                       "bounds": {d: list(b) for d, b in mod.bounds.items()}, "steps": steps,
                       "constants": len(files) - 1, "blobs": offsets}
        head = json.dumps(description).encode()
        first = mod._host_stages()[0].op
        note = f"{first.node} ({first.op})".encode("ascii", errors="replace")[:MAX_NOTE_BYTES]
        partial = f"{path}.{os.getpid()}.{threading.get_ident()}.partial"  # a reader never sees half a file
        try:
            with open(partial, "wb") as out:
                out.write(bytes(16))  # magic, version and checksum, written last
                crc = 0
                for part in (PREFIX.pack(MAGIC, 0, 0, len(head), len(note), 0)[16:], note, head):
                    out.write(part)
                    crc = zlib.crc32(part, crc)
                for file in files:
                    with open(file, "rb") as f:
                        while chunk := f.read(_CHUNK):
                            out.write(chunk)
                            crc = zlib.crc32(chunk, crc)
                out.seek(0)
                out.write(MAGIC + struct.pack("<II", STAGED_FORMAT_VERSION, crc & 0xFFFFFFFF))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def is_staged(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(8) == MAGIC
    except OSError:
        return False


class LoadedStages(Stages):
    """An exported staged module loaded back (``nnvm.load``); its stages' files live in a private
    temporary directory for as long as it does (an emulated stage runs its file out of process)."""

    def __init__(self, *args, files, **kwargs):
        super().__init__(*args, **kwargs)
        self._files = files


def load(path: str, load_module) -> LoadedStages:
    """The module in the staged file at ``path``; ``load_module`` loads each stage's file (``nnvm.load``,
    passed in so that a stage cut again is itself read through here). A truncated, corrupted or newer file
    is a ``ModelLoadError`` of one sentence naming it."""
    with open(path, "rb") as f:
        return _load(f, path, load_module)


def _crc32_from(f, start: int) -> int:
    """The CRC-32 of ``f`` from ``start`` to its end, read in chunks (a file of weights is not held)."""
    f.seek(start)
    crc = 0
    while chunk := f.read(_CHUNK):
        crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


def _load(f, path: str, load_module) -> LoadedStages:
    size = os.fstat(f.fileno()).st_size
    if size < PREFIX.size:
        raise ModelLoadError(f"{path}: the file is only {size} bytes, too short for an exported nnvm staged "
                             "module (truncated?)")
    magic, version, crc, head_size, note_size, _ = PREFIX.unpack(f.read(PREFIX.size))
    if version > STAGED_FORMAT_VERSION:
        raise ModelLoadError(f"{path}: staged module format v{version} is newer than this nnvm reads "
                             f"(v{STAGED_FORMAT_VERSION}); upgrade nnvm or export it again")
    if version < 1 or PREFIX.size + note_size + head_size > size or _crc32_from(f, 16) != crc:
        raise ModelLoadError(f"{path}: checksum or size mismatch: the staged module file is truncated or "
                             "corrupted")
    base = PREFIX.size + note_size + head_size

    def blob(k: int, out=None):
        """Blob ``k``'s bytes, or copied to the file ``out`` in chunks."""
        at, n = desc["blobs"][k]
        if at < 0 or n < 0 or base + at + n > size:
            raise ValueError(f"blob {k} lies outside the file")
        f.seek(base + at)
        if out is None:
            return f.read(n)
        while n > 0:
            chunk = f.read(min(_CHUNK, n))
            out.write(chunk)
            n -= len(chunk)

    files = tempfile.TemporaryDirectory(prefix="nnvm-staged-")
    try:
        f.seek(PREFIX.size + note_size)
        desc = json.loads(f.read(head_size).decode())
        stages: list = []
        for k, step in enumerate(desc["steps"]):
            if step["kind"] == "host":
                if step["op"] not in HOST_OPS:
                    raise ModelLoadError(f"{path}: node {step['node']} ({step['op']}) is an operator this "
                                         "nnvm cannot run on the host; upgrade nnvm")
                op = HostOp(step["node"], step["op"], step["inputs"], step["outputs"], step["attrs"])
                where = tuple(step["where"]) if step["where"] is not None else None
                stages.append(HostStage(op, step["dim"], where))
                continue
            file = os.path.join(files.name, f"stage{k}{step['suffix']}")
            with open(file, "wb") as out:
                blob(step["blob"], out)
            try:
                module = load_module(file)
            except ModelLoadError as exc:  # named by the user's file, not the temporary one
                text = str(exc)
                raise ModelLoadError(f"{path} (stage {k})" + text[len(file):] if text.startswith(file)
                                     else f"{path}: {text}") from None
            stages.append(Stage(module, step["inputs"], step["outputs"]))
        constants = load_params(blob(desc["constants"]))
        bounds = {d: (lo, hi) for d, (lo, hi) in desc["bounds"].items()}
        return LoadedStages(desc["inputs"], desc["outputs"], constants, stages, bounds, files=files)
    except ModelLoadError:
        files.cleanup()
        raise
    except (KeyError, TypeError, ValueError, IndexError, UnicodeDecodeError, Error) as exc:
        files.cleanup()
        raise ModelLoadError(f"{path}: the staged module's description is corrupt ({exc})") from None
