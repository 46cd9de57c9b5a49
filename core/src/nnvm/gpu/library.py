"""The device library every GPU backend shares: launch table, device-resident runs, one-file export and load.

A language plugin subclasses ``GPUKernelLibrary`` and implements the device in seven small methods
(``alloc``, ``free``, ``view``, ``copy_in``, ``copy_out``, ``new_stream`` / ``synchronize``, ``prepare`` /
``launch``); everything else is here, once:

- ``launch_table(program)``: what the runtime needs of a lowered ``GPUProgram`` (parameter sizes, which
  are read and written, temporaries, each kernel's grid and block), JSON-able, so it is exported as is;
  over symbolic dims a size is a term of them (``size_term``), which a device module evaluates for its
  binding (``bound_table``), and a call's dims go to the kernels in one small buffer;
- ``device_module(plan, params)`` (asked by ``nnvm.runtime.module.Module``): a ``DeviceModule`` that
  uploads the weights once and keeps the activation arena on the device; a run copies the inputs in and
  the outputs out, nothing else. Concurrent runs each take a device arena (buffer, stream, prepared
  launches) from a pool, so threads never share one;
- ``record`` / ``elapsed_ms`` (optional): marks a device can time itself with (CUDA events), asked for by
  ``DeviceModule.run(values, timings)`` and so by ``nnvm bench``, which reports device time beside wall time;
- ``address(name)``: the core's ``int32_t f(void **args)`` convention for ``nnvm.build``'s single
  functions, a C callback that copies the arguments in, launches and copies back what was written;
- ``export(path, blobs)`` / ``read_export(path, format)``: one zip file holding ``manifest.json`` (format,
  options, launch tables), the library's files (kernel source, cubin, PTX) and the blobs (graph, weights).

``bytes_to_device`` / ``bytes_from_device`` count every copy, so a test can prove what a run moves.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import zipfile

import numpy as np

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError, reading
from nnvm.runtime.kernel import KERNEL_TYPE
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import walk

DIMS_BUFFER = "nnvm_dims"  # the last parameter of a GPU function over symbolic dims: their values

EXPORT_VERSION = 2


def _nbytes(buf: S.Buffer):
    """A buffer's size in bytes: an int, or a size expression of its symbolic dims (``size_term``)."""
    count = simplify(math.prod((E.convert(d) for d in buf.shape), start=E.const(1, E.INDEX_DTYPE)))
    itemsize = np.dtype("bool" if buf.dtype == "bool" else buf.dtype).itemsize
    if isinstance(count, E.Const):
        return max(int(count.value), 1) * itemsize
    return ["mul", ["max", size_term(count), 1], itemsize]


_SIZE_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max}


def size_term(e):
    """A launch size or buffer size over symbolic dims as JSON: an int, ``["dim", name]`` or
    ``[op, a, b]`` (``_SIZE_OPS``), evaluated per binding by ``size_value``."""
    if isinstance(e, int):
        return e
    e = simplify(E.convert(e))
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return ["dim", e.name]
    if isinstance(e, E.Cast):
        return size_term(e.value)
    if isinstance(e, E.BinOp) and e.op in _SIZE_OPS:
        return [e.op, size_term(e.a), size_term(e.b)]
    raise Error(f"a launch or buffer size {e} is not arithmetic of the symbolic dims")


def size_value(term, dims: dict) -> int:
    """``size_term``'s value when each dim has its value in ``dims``."""
    if isinstance(term, int):
        return term
    if term[0] == "dim":
        return int(dims[term[1]])
    return int(_SIZE_OPS[term[0]](size_value(term[1], dims), size_value(term[2], dims)))


_SIZE_TEXT = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}


def size_text(term, times: int = 1) -> str:
    """A ``size_term`` (times ``times``) as text for listings: ``((N * 10) + 63) // 64``."""
    if isinstance(term, int):
        return str(term * times)
    if times != 1:
        return f"{size_text(term)} * {times}"
    if term[0] == "dim":
        return term[1]
    a, b = (size_text(t) for t in term[1:])
    return f"{term[0]}({a}, {b})" if term[0] in ("min", "max") else f"({a} {_SIZE_TEXT[term[0]]} {b})"


def bound_table(table: dict, dims: dict) -> dict:
    """A launch table whose sizes are expressions of symbolic dims, with every size evaluated for one
    binding (``{dim: value}``): what a device module for that binding launches and allocates."""
    def buffers(key):
        return [{**b, "nbytes": size_value(b["nbytes"], dims)} for b in table[key]]

    launches = [{**la, "grid": [max(size_value(g, dims), 1) for g in la["grid"]]} for la in table["launches"]]
    return {**table, "params": buffers("params"), "temporaries": buffers("temporaries"), "launches": launches}


def bound_tables(tables: dict, dims: dict) -> dict:
    """``bound_table`` of every function, its values checked against the devices' limits
    (``check_tables``): a table read from a file may name a dim the plan does not bind, or grow past
    them at some binding."""
    try:
        bound = {name: bound_table(t, dims) for name, t in tables.items()}
        check_tables(list(bound.values()))
    except KeyError as exc:
        raise ModelLoadError(f"a launch table uses a dim {exc} that the plan does not bind") from None
    except _BadManifest as exc:
        raise ModelLoadError(f"at dims {dims}, {exc}") from None
    return bound


def is_symbolic_table(table: dict) -> bool:
    """Whether a launch table has sizes that depend on symbolic dims."""
    return any(not isinstance(b["nbytes"], int) for b in table["params"] + table["temporaries"]) or any(
        not isinstance(g, int) for la in table["launches"] for g in la["grid"])


def launch_table(program) -> dict:
    """The JSON-able description of a ``GPUProgram`` the runtime needs: buffer sizes, which parameters
    are read and written, and each kernel's grid (blocks) and block (threads) sizes as (x, y, z). Over
    symbolic dims a buffer size or a grid size is a ``size_term`` (``bound_table`` evaluates them)."""
    reads: set = set()
    writes: set = set()
    for k in program.kernels:
        walk(k.body, lambda n: reads.add(n.buffer) if isinstance(n, E.Load) else
             writes.add(n.buffer) if isinstance(n, S.Store) else None)
    params = [{"name": b.name, "nbytes": _nbytes(b), "read": b in reads, "written": b in writes}
              for b in program.params]
    temps = [{"name": b.name, "nbytes": _nbytes(b)} for b in program.temporaries]
    launches = []
    for k in program.kernels:
        launch = k.attrs.get("launch", {})
        block = [launch.get(f"threadIdx.{d}", 1) for d in "xyz"]
        grid = [size_term(launch.get(f"blockIdx.{d}", 1)) for d in "xyz"]
        # a backend folds this grid at run time (its value says how: webgpu's True or "y"), and binds these
        # of the kernel's buffers read-only (webgpu: the dims a uniform guard reads)
        extra = {"fold": launch["fold"]} if launch.get("fold") else {}
        if k.attrs.get("read_only"):
            extra["read_only"] = list(k.attrs["read_only"])
        launches.append({"kernel": k.name, "grid": grid, "block": block, **extra})
    return {"name": program.name, "params": params, "temporaries": temps, "launches": launches}


class GPUKernelLibrary(KernelLibrary):
    """Kernels of one build for one device. ``tables``: ``launch_table`` of each function; ``files``: what
    the backend exports and reloads (name -> bytes or text); ``options``: the device choice, JSON-able.

    Subclasses set ``format`` (the export's name, ``nnvm-opencl``) and implement the device section."""

    format = "nnvm-gpu"
    language = "GPU"  # in messages: "the OpenCL kernel ... failed"
    base_align = 1  # bytes a view's offset must be a multiple of (OpenCL sub-buffers: the device's)
    # What ``open_export`` asks of an exported file (``read_export``): the files decoded as text (kernel
    # sources), the files that must be there (None: the text files) and the string options it must have.
    text_files: tuple = ()
    required_files: tuple | None = None
    required_options: tuple = ()

    def __init__(self, tables: list, files: dict, options: dict | None = None, blobs: dict | None = None):
        self.tables = {t["name"]: t for t in tables}
        self.files = dict(files)
        self.options = dict(options or {})
        self._blobs = blobs or {}
        self._callbacks: dict = {}
        self._single: dict = {}  # function -> (stream, buffers, prepared launches) for address()
        self._weights: dict = {}  # id(host array) -> (the array, its device buffer): ``device_weight``
        self._resident: list = []  # (capacity, buffer) of dropped ``DeviceTensor``s: ``resident_buffer``
        self._lock = threading.Lock()
        self.bytes_to_device = 0
        self.bytes_from_device = 0

    @classmethod
    def open_export(cls, path: str) -> GPUKernelLibrary | None:
        """The library of a file ``export`` wrote in this class's ``format`` (checked by ``read_export``),
        through ``from_files``; None when ``path`` is not such a file."""
        found = read_export(path, cls.format, cls.text_files, cls.required_files, cls.required_options)
        return None if found is None else cls.from_files(*found)

    @classmethod
    def from_files(cls, manifest: dict, files: dict, blobs: dict) -> GPUKernelLibrary:
        """The library of an exported file's checked ``manifest``, ``files`` and ``blobs``."""
        raise NotImplementedError(f"{cls.__name__} cannot be loaded from an exported file")

    # -- the device: what a language implements --------------------------------------------------
    def alloc(self, nbytes: int):
        """A device buffer of ``nbytes`` (at least 1)."""
        raise NotImplementedError

    def free(self, buf) -> None:
        """Release a buffer from ``alloc`` (views need no release)."""

    def view(self, buf, offset: int, nbytes: int):
        """A kernel argument for bytes ``[offset, offset + nbytes)`` of ``buf`` (``offset`` a multiple of
        ``base_align``): a pointer plus offset in CUDA, a sub-buffer in OpenCL."""
        raise NotImplementedError

    def copy_in(self, stream, buf, offset: int, host: np.ndarray) -> None:
        """Enqueue a copy of the contiguous ``host`` array to ``buf`` at ``offset`` on ``stream``."""
        raise NotImplementedError

    def copy_out(self, stream, host: np.ndarray, buf, offset: int) -> None:
        """Enqueue a copy from ``buf`` at ``offset`` into the contiguous ``host`` array on ``stream``."""
        raise NotImplementedError

    def new_stream(self):
        """An in-order queue of copies and launches (a CUDA stream, an OpenCL command queue)."""
        raise NotImplementedError

    def synchronize(self, stream) -> None:
        """Wait until everything enqueued on ``stream`` is done (copies to the host included)."""
        raise NotImplementedError

    def release_stream(self, stream) -> None:
        """Free a stream from ``new_stream`` that will not be used again (nothing by default)."""

    def record(self, stream, mark: str) -> bool:
        """Record a timing mark named ``mark`` at this point of ``stream`` (a CUDA event), for
        ``elapsed_ms`` once the stream is synchronized. False where the device cannot time its own work
        (the default): ``nnvm bench`` then reports wall time only."""
        return False

    def elapsed_ms(self, stream, start: str, stop: str) -> float:
        """Device milliseconds between two marks ``record``ed on ``stream``, after ``synchronize``."""
        raise NotImplementedError

    def prepare(self, kernel: str, args: list):
        """What ``launch`` needs to launch ``kernel`` on ``args`` (device buffers or views), made once per
        device arena: an OpenCL kernel object with its arguments set, a CUDA argument array."""
        return kernel, args

    def launch(self, stream, prepared, grid: list, block: list) -> None:
        """Enqueue one launch of a ``prepare``d kernel: ``grid`` blocks of ``block`` threads (x, y, z)."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------
    def to_device(self, stream, buf, offset: int, host: np.ndarray) -> None:
        self.copy_in(stream, buf, offset, host)
        with self._lock:
            self.bytes_to_device += host.nbytes

    def from_device(self, stream, host: np.ndarray, buf, offset: int) -> None:
        self.copy_out(stream, host, buf, offset)
        with self._lock:
            self.bytes_from_device += host.nbytes

    def source(self) -> str:
        """The kernels' source, after a comment listing each function's launches."""
        lines = ["// launches (x, y, z):"]
        for name, table in self.tables.items():
            for launch in table["launches"]:
                lines.append(f"//   {name}: {launch['kernel']} {self.describe_launch(launch)}")
        return "\n".join(lines) + "\n\n" + self.source_text()

    def describe_launch(self, launch: dict) -> str:
        """A launch's sizes in the language's words (OpenCL speaks of global and local sizes)."""
        return f"grid ({', '.join(map(size_text, launch['grid']))}) block {tuple(launch['block'])}"

    def source_text(self) -> str:
        """The kernel source the library was built from (the first text file by default)."""
        return next((v for v in self.files.values() if isinstance(v, str)), "")

    def blob(self, name: str) -> bytes:
        """A blob of the exported file this library was loaded from (``graph``, ``params``)."""
        if name not in self._blobs:
            raise ModelLoadError(f"this {self.language} module has no {name} section")
        return self._blobs[name]

    def device_weight(self, stream, array: np.ndarray):
        """``array`` in device memory, uploaded once per library: the modules of a symbolic model's
        bindings (``nnvm.dynamic``) share its kernels and its weights' arrays, so each weight is on the
        device once however many bindings run."""
        with self._lock:
            hit = self._weights.get(id(array))
            if hit is not None and hit[0] is array:
                return hit[1]
        host = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        buf = self.alloc(max(host.nbytes, 4))
        if host.nbytes:
            self.to_device(stream, buf, 0, host)
        with self._lock:
            self._weights[id(array)] = (array, buf)  # the array kept: its id names no other while here
        return buf

    def resident_buffer(self, nbytes: int):
        """A device buffer of at least ``nbytes`` for an output kept on the device (``DeviceTensor``): the
        smallest one a dropped tensor gave back that is large enough, else a new one, the given-back ones
        smaller than ``nbytes`` freed (a growing KV cache outgrows its buckets' buffers for good)."""
        with self._lock:
            fits = [k for k, (capacity, _) in enumerate(self._resident) if capacity >= nbytes]
            if fits:
                return self._resident.pop(min(fits, key=lambda k: self._resident[k][0]))
            outgrown = [buf for capacity, buf in self._resident if capacity < nbytes]
            self._resident = [(c, b) for c, b in self._resident if c >= nbytes]
        for buf in outgrown:
            self.free(buf)
        return nbytes, self.alloc(max(nbytes, 4))

    def give_back(self, capacity: int, buf) -> None:
        """A ``DeviceTensor``'s buffer, free again (its tensor dropped): kept for ``resident_buffer``."""
        with self._lock:
            self._resident.append((capacity, buf))

    def device_module(self, plan: dict, params: dict):
        """A ``DeviceModule`` running ``plan`` with weights and activations on the device."""
        return DeviceModule(self, plan, params)

    def launches(self, stream, function: str, prepared: list, table: dict | None = None) -> None:
        """Enqueue the launches of ``function`` (``prepared``: one per launch, in order); ``table``: its
        launch table bound to a binding of symbolic dims (``bound_table``), else the library's."""
        for launch, p in zip((table or self.tables[function])["launches"], prepared):
            self.launch(stream, p, launch["grid"], launch["block"])

    # -- single functions through the core's calling convention (nnvm.build) -------------------------
    def address(self, name: str) -> int:
        if name not in self.tables:
            raise Error(f"no kernel named {name!r} in this library (kernels: {', '.join(self.tables)})")
        if name not in self._callbacks:
            def call(args, _name=name):
                try:
                    with self._lock_single(_name):
                        self._run_single(_name, args)
                    return 0
                except Exception as exc:  # never let an exception cross the C boundary
                    print(f"nnvm {self.language.lower()}: kernel {_name} failed: {exc}", file=sys.stderr)
                    return 1

            self._callbacks[name] = KERNEL_TYPE(call)
        return ctypes.cast(self._callbacks[name], ctypes.c_void_p).value

    def _lock_single(self, name: str) -> threading.Lock:
        with self._lock:
            if name not in self._single:
                self._single[name] = {"lock": threading.Lock()}
            return self._single[name]["lock"]

    def _run_single(self, name: str, args) -> None:
        """Function ``name`` on ``args`` (a ``void **`` of host pointers): every argument copied in, the
        kernels launched, what they write copied back."""
        table = self.tables[name]
        if is_symbolic_table(table):
            raise Error(f"{name} takes symbolic dims; run it in a module compiled with nnvm.compile")
        state = self._single[name]
        if "bufs" not in state:
            state["stream"] = self.new_stream()
            state["bufs"] = [self.alloc(max(p["nbytes"], 4)) for p in table["params"] + table["temporaries"]]
            state["prepared"] = [self.prepare(launch["kernel"], state["bufs"])
                                 for launch in table["launches"]]
        stream, bufs = state["stream"], state["bufs"]
        ptrs = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
        hosts = []
        for k, p in enumerate(table["params"]):
            host = np.ctypeslib.as_array((ctypes.c_uint8 * p["nbytes"]).from_address(ptrs[k]))
            hosts.append(host)
            if p["read"]:
                self.to_device(stream, bufs[k], 0, host)
        self.launches(stream, name, state["prepared"])
        for k, p in enumerate(table["params"]):
            if p["written"]:
                self.from_device(stream, hosts[k], bufs[k], 0)
        self.synchronize(stream)

    # -- export ------------------------------------------------------------------------------------
    def export(self, path: str, blobs: dict) -> None:
        manifest = {"format": self.format, "version": EXPORT_VERSION, "options": self.options,
                    "functions": list(self.tables.values()), "files": list(self.files), "blobs": list(blobs)}
        files = {k: v.encode() if isinstance(v, str) else bytes(v) for k, v in self.files.items()}
        manifest["digest"] = content_digest(manifest, files, {k: bytes(v) for k, v in blobs.items()})
        out_dir = os.path.dirname(os.path.abspath(path))
        fd, partial = tempfile.mkstemp(prefix=".nnvm-", suffix=".zip", dir=out_dir)
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("manifest.json", json.dumps(manifest, indent=1))
                for name, data in self.files.items():
                    z.writestr(f"files/{name}", data)
                for blob, data in blobs.items():
                    z.writestr(f"blobs/{blob}", bytes(data))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)


def read_export(path: str, format: str, text_files: tuple = (), required_files: tuple | None = None,
                required_options: tuple = ()) -> tuple | None:
    """``(manifest, files, blobs)`` of a file ``GPUKernelLibrary.export`` wrote in ``format``; None when
    ``path`` is not such a file. ``text_files``: the files to decode as UTF-8 (kernel sources);
    ``required_files`` (default ``text_files``) and ``required_options`` (string options) must be there.

    The file is a user's bytes: every structure is checked here (``check_manifest``), once for every GPU
    backend, before a buffer is allocated or a kernel launched; each problem is one ``ModelLoadError``."""
    if not zipfile.is_zipfile(path):
        return None
    guard = reading(path, "not a readable exported GPU module")  # until the manifest says which format
    try:
        with guard, zipfile.ZipFile(path) as z:
            if "manifest.json" not in z.namelist():
                return None
            manifest = json.loads(z.read("manifest.json"))
            if not isinstance(manifest, dict) or manifest.get("format") != format:
                return None
            guard.what = f"not a readable exported {format} module"
            if manifest.get("version") != EXPORT_VERSION:
                raise ModelLoadError(f"{path}: {format} module version {manifest.get('version')!r} is not "
                                     f"supported (expects version {EXPORT_VERSION})")
            check_manifest(manifest)
            files = {name: z.read(f"files/{name}") for name in manifest["files"]}
            blobs = {name: z.read(f"blobs/{name}") for name in manifest["blobs"]}
            if manifest.get("digest") != content_digest(manifest, files, blobs):
                raise ModelLoadError(f"{path}: the {format} module's contents do not match the checksum "
                                     "written at export (the file was changed or damaged)")
            files = {k: v.decode() if k in text_files else v for k, v in files.items()}
    except _BadManifest as exc:
        raise ModelLoadError(f"{path}: the {format} module's manifest is corrupt ({exc})") from None
    for name in text_files if required_files is None else required_files:
        if name not in files:
            raise ModelLoadError(f"{path}: the {format} module has no {name} file")
    for name in required_options:
        if not isinstance(manifest["options"].get(name), str):
            raise ModelLoadError(f"{path}: the {format} module's manifest has no {name} option")
    return manifest, files, blobs


def content_digest(manifest: dict, files: dict, blobs: dict) -> str:
    """SHA-256 of everything an export holds (the manifest but its ``digest``, every file and blob), so a
    launch table, plan or kernel changed after export is refused whole: the checks below catch what is
    malformed, but a well-formed grid larger than the kernel was written for can only be caught here."""
    h = hashlib.sha256(json.dumps({k: v for k, v in manifest.items() if k != "digest"}, sort_keys=True)
                       .encode())
    for kind, members in (("files", files), ("blobs", blobs)):
        for name in sorted(members):
            data = members[name]
            h.update(f"\0{kind}/{name}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


class _BadManifest(ModelLoadError):
    """What ``check_manifest`` found wrong, a phrase that ``read_export`` puts after the file's name."""


# Launch limits every device we target honours: threads per block (CUDA, Metal, the OpenCL devices we
# run on) and blocks along one dimension (CUDA's x limit, the largest of the three).
MAX_BLOCK_THREADS = 1024
MAX_GRID = 2**31 - 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_size_term(term, depth: int = 0) -> bool:
    """Whether ``term`` is a well-formed ``size_term`` (an int, ``["dim", name]``, ``[op, a, b]``), so
    ``size_value`` cannot fail on it but for a dim its binding lacks."""
    if _is_int(term):
        return abs(term) < 2**48
    if not isinstance(term, list) or depth > 64 or not term:
        return False
    if term[0] == "dim":
        return len(term) == 2 and isinstance(term[1], str)
    return (term[0] in _SIZE_OPS and len(term) == 3
            and all(is_size_term(t, depth + 1) for t in term[1:]))


def check_manifest(manifest: dict) -> None:
    """Raise ``_BadManifest`` unless ``manifest`` has the structure ``export`` writes: options a dict,
    ``files`` and ``blobs`` lists of distinct plain names, each function a launch table (``check_tables``)."""
    def need(ok: bool, what: str):
        if not ok:
            raise _BadManifest(what)

    need(isinstance(manifest.get("options"), dict), "options is not a dict")
    for key in ("files", "blobs"):
        names = manifest.get(key)
        need(isinstance(names, list) and all(isinstance(n, str) and n and "/" not in n and "\\" not in n
                                             and n not in (".", "..") for n in names),
             f"{key} is not a list of file names")
        need(len(set(names)) == len(names), f"{key} names a file twice")
    functions = manifest.get("functions")
    need(isinstance(functions, list) and all(isinstance(f, dict) for f in functions),
         "functions is not a list of launch tables")
    check_tables(functions, symbolic=True)


def check_tables(functions: list, symbolic: bool = False) -> None:
    """Raise ``_BadManifest`` unless each function is a launch table whose buffer sizes are non-negative
    integers and whose launches name a kernel with three positive grid and block sizes inside the
    devices' limits. ``symbolic``: a buffer size or a grid may be a well-formed ``size_term`` instead,
    whose values are checked once bound (``DeviceModule``: the plan's dims, then each run's)."""
    def need(ok: bool, what: str):
        if not ok:
            raise _BadManifest(what)

    def term(v) -> bool:
        return symbolic and not _is_int(v) and is_size_term(v)

    seen = set()
    for f in functions:
        name = f.get("name")
        need(isinstance(name, str) and name not in seen,
             f"a function has no name or a repeated one ({name!r})")
        seen.add(name)
        for key, flags in (("params", ("read", "written")), ("temporaries", ())):
            bufs = f.get(key)
            need(isinstance(bufs, list) and all(isinstance(b, dict) for b in bufs),
                 f"{name}: {key} is not a list")
            for b in bufs:
                need(isinstance(b.get("name"), str), f"{name}: a buffer in {key} has no name")
                need(term(b.get("nbytes")) or _is_int(b.get("nbytes")) and 0 <= b["nbytes"] < 2**48,
                     f"{name}: buffer {b['name']!r} has size {b.get('nbytes')!r}")
                for flag in flags:
                    need(isinstance(b.get(flag), bool), f"{name}: buffer {b['name']!r} has no {flag} flag")
        launches = f.get("launches")
        need(isinstance(launches, list) and all(isinstance(la, dict) for la in launches),
             f"{name}: launches is not a list")
        for la in launches:
            need(isinstance(la.get("kernel"), str) and la["kernel"].isidentifier(),
                 f"{name}: a launch names no kernel")
            for key in ("grid", "block"):
                dims = la.get(key)
                need(isinstance(dims, list) and len(dims) == 3 and all(
                    (key == "grid" and term(d)) or _is_int(d) and 1 <= d <= MAX_GRID for d in dims),
                     f"{name}: kernel {la['kernel']} has {key} {dims!r}, not three positive sizes")
            need(math.prod(la["block"]) <= MAX_BLOCK_THREADS,
                 f"{name}: kernel {la['kernel']} has {math.prod(la['block'])} threads per block, more than "
                 f"{MAX_BLOCK_THREADS}")
            need(all(not _is_int(g) or g * b <= MAX_GRID for g, b in zip(la["grid"], la["block"])),
                 f"{name}: kernel {la['kernel']} has a grid of more than {MAX_GRID} threads along one axis")


def check_plan_against_tables(plan: dict, tables: dict, params: dict, arena_bytes: int) -> None:
    """Every call of ``plan`` names a function of the library, passes one argument per parameter of its
    launch table, and each argument is at least as large as the table says the kernels touch: an arena
    location inside the arena, a weight of at least that many bytes; and the table binds no argument
    smaller than the plan's tensor (a binding cut short reads zeros on WebGPU, silently). The plan's own
    locations are checked by the ``Module`` (``_check_plan``); this ties them to what the device kernels
    read and write."""
    try:
        for call in plan["calls"]:
            name = call["kernel"]
            if name not in tables:
                raise ValueError(f"it calls a function {name!r} the kernels do not have")
            table = tables[name]
            args, dims = split_dim_args(call["args"])
            if len(args) + bool(dims) != len(table["params"]) or bool(dims) != (
                    bool(table["params"]) and table["params"][-1]["name"] == DIMS_BUFFER):
                raise ValueError(f"{name} takes {len(table['params'])} arguments, the plan gives "
                                 f"{len(call['args'])}")
            for ref, p in zip(args, table["params"]):
                if _is_int(ref.get("nbytes")) and _is_int(p["nbytes"]) and p["nbytes"] < ref["nbytes"]:
                    # a binding smaller than its tensor: reads past it give zeros on WebGPU, not an error
                    raise ValueError(f"{name}'s argument {p['name']} is bound as {p['nbytes']} bytes, "
                                     f"its tensor has {ref['nbytes']}")
                if "arena" in ref:
                    if ref["arena"] + p["nbytes"] > arena_bytes:
                        raise ValueError(f"{name}'s argument {p['name']} ({p['nbytes']} bytes at "
                                         f"{ref['arena']}) lies outside the {arena_bytes}-byte arena")
                elif (have := np.asarray(params[ref["param"]]).nbytes) < p["nbytes"]:
                    raise ValueError(f"{name} reads {p['nbytes']} bytes of weight {ref['param']!r}, which "
                                     f"has {have}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelLoadError(f"the module's execution plan does not match its kernels ({exc})") from None


def split_dim_args(args: list) -> tuple[list, list]:
    """A plan call's arguments as (buffer references, names of the dims it passes): a GPU kernel takes
    the dims in one buffer, its last parameter (``kernels.DIMS_BUFFER``)."""
    return [r for r in args if "dim" not in r], [r["dim"] for r in args if "dim" in r]


class DeviceTensor:
    """An output kept in device memory by a run (``SymbolicModule.run_resident``), to be an input of a later
    run of a module of the same library, whose kernels then read it where it is: a decoder's ``present``
    fed back as the next step's ``past`` never crosses to the host. ``numpy()`` (or ``np.asarray``)
    copies it out. Dropping it gives its buffer back to the library for a later output."""

    def __init__(self, lib: GPUKernelLibrary, buf, capacity: int, shape: tuple, dtype):
        self.lib, self.buffer, self.capacity = lib, buf, capacity
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            stream = self.lib.new_stream()
            self.lib.from_device(stream, out.reshape(-1).view(np.uint8), self.buffer, 0)
            self.lib.synchronize(stream)
            self.lib.release_stream(stream)
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceTensor({self.dtype.name}{list(self.shape)}, {self.lib.language})"

    def __del__(self):
        try:
            self.lib.give_back(self.capacity, self.buffer)
        except Exception:  # noqa: BLE001  (interpreter shutdown: nothing to give back to)
            pass


class _DeviceArena:
    """One run's device state: the activation arena, temporaries, a stream and every launch prepared.
    A call over symbolic dims gets a small buffer of their values (one per distinct list of dims)."""

    def __init__(self, lib: GPUKernelLibrary, module: DeviceModule):
        self.stream = lib.new_stream()
        self.arena = lib.alloc(max(module.arena_bytes, 1))
        self.owned = [self.arena]
        self.calls = []
        self.args = []  # each call's kernel arguments, for a run rebinding some (``DeviceModule._rebound``)
        self.rebound: dict = {}  # the rebinding -> (its calls, the buffers they point at), a few kept
        self.dim_buffers: dict = {}  # the dims' names a call passes -> the buffer of their values
        self.dims = None  # the dims those buffers hold now, when a run (``run_shaped``) changed them
        dim_buffers = self.dim_buffers
        for call in module.plan["calls"]:
            table = module.tables[call["kernel"]]
            refs, dims = split_dim_args(call["args"])
            args = []
            for ref, p in zip(refs, table["params"]):
                if "arena" in ref:
                    args.append(lib.view(self.arena, module.offset(ref["arena"]), max(p["nbytes"], 1)))
                else:
                    args.append(module.weights[ref["param"]])
            if dims:
                if tuple(dims) not in dim_buffers:
                    values = np.array([module.plan["dims"][d] for d in dims], dtype=np.int64)
                    dim_buffers[tuple(dims)] = buf = lib.alloc(values.nbytes)
                    self.owned.append(buf)
                    lib.to_device(self.stream, buf, 0, values.view(np.uint8))
                args.append(dim_buffers[tuple(dims)])
            for t in table["temporaries"]:
                buf = lib.alloc(max(t["nbytes"], 4))
                self.owned.append(buf)
                args.append(buf)
            self.args.append(args)
            self.calls.append((call["kernel"], [lib.prepare(launch["kernel"], args)
                                                for launch in table["launches"]], table))
        lib.synchronize(self.stream)


class DeviceModule:
    """Runs an execution plan on the device: weights uploaded once, here; activations in device arenas
    (one per concurrent run, from a pool); a run copies inputs in and outputs out."""

    def __init__(self, lib: GPUKernelLibrary, plan: dict, params: dict):
        # a plan for one binding of symbolic dims: the launch tables' sizes evaluated for it
        self.tables = bound_tables(lib.tables, plan["dims"]) if plan.get("dims") else lib.tables
        if not plan.get("dims") and any(is_symbolic_table(t) for t in lib.tables.values()):
            raise ModelLoadError("the kernels' launch sizes depend on symbolic dims, and the plan binds none")
        check_plan_against_tables(plan, self.tables, params, plan["arena_bytes"])
        self.lib = lib
        self.plan = plan
        # Views must start at multiples of the device's alignment: the plan's offsets (multiples of 64)
        # are scaled up when the device wants more, which keeps every overlap of the plan (and no other).
        self._scale = max(1, -(-lib.base_align // 64)) if any(
            ref["arena"] % lib.base_align for call in plan["calls"] for ref in call["args"] if "arena" in ref
        ) else 1
        self.arena_bytes = plan["arena_bytes"] * self._scale
        self.params = params
        stream = lib.new_stream()
        self.weights = {}
        for call in plan["calls"]:
            for ref in call["args"]:
                name = ref.get("param")
                if name is not None and name not in self.weights:
                    self.weights[name] = lib.device_weight(stream, params[name])
        lib.synchronize(stream)
        lib.release_stream(stream)
        self._pool: list = []
        self._pool_lock = threading.Lock()
        self._bound: dict = {}  # dim values -> the launch tables bound to them (``_tables_for``)

    def offset(self, arena_offset: int) -> int:
        return arena_offset * self._scale

    def _take(self) -> _DeviceArena:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return _DeviceArena(self.lib, self)

    def run_shaped(self, values: list, dims: dict, output_shapes: list, keep=()) -> list:
        """A run of this plan, made for a bucket of dim values (``nnvm.dynamic``), at smaller ones
        (``dims``: each plan dim's value) with the outputs' shapes for them: every buffer at its planned
        offset and no larger than planned; the kernels get this run's dims and grids. ``keep``: indices of
        outputs to hand back as ``DeviceTensor``s; a value may be a ``DeviceTensor`` (``run``)."""
        return self.run(values, shaped=(dims, output_shapes), keep=keep)

    def _rebound(self, arena: _DeviceArena, points: dict) -> list:
        """``arena``'s calls with the kernel arguments ``points`` (``(call, argument)`` -> a device buffer)
        pointing there instead of into the arena, prepared once per distinct rebinding (a decoding loop
        alternates two: each step's ``present`` is the next step's ``past``)."""
        key = tuple(sorted((k, a, id(buf)) for (k, a), buf in points.items()))
        found = arena.rebound.get(key)
        if found is None:
            calls = list(arena.calls)
            for k in sorted({k for k, _ in points}):
                args = list(arena.args[k])
                for (kk, a), buf in points.items():
                    if kk == k:
                        args[a] = buf
                function, _, table = calls[k]
                prepared = [self.lib.prepare(la["kernel"], args) for la in table["launches"]]
                calls[k] = (function, prepared, table)
            if len(arena.rebound) >= 4:
                arena.rebound.pop(next(iter(arena.rebound)))
            found = arena.rebound[key] = (calls, list(points.values()))  # the buffers kept: ids stay theirs
        return found[0]

    def _resident(self, values: list, shaped: tuple | None, keep) -> tuple[dict, dict, list]:
        """(the kernel arguments to rebind, the kept outputs by index, the values as the run copies them
        in): a ``DeviceTensor`` input of this library whose arguments the plan lists (``uses``) is read
        where it is, another one copied through the host; a kept output with ``uses`` is written into a
        buffer of its own (``resident_buffer``), another one copied out as usual."""
        points, kept, values = {}, {}, list(values)
        for i, (d, v) in enumerate(zip(self.plan["inputs"], values)):
            if isinstance(v, DeviceTensor):
                if v.lib is self.lib and "uses" in d:
                    points.update({(k, a): v.buffer for k, a in d["uses"]})
                else:
                    values[i] = v.numpy()
        for i in keep:
            d = self.plan["outputs"][i]
            if "uses" in d:
                capacity, buf = self.lib.resident_buffer(d["ref"]["nbytes"])
                shape = d["shape"] if shaped is None else shaped[1][i]
                kept[i] = DeviceTensor(self.lib, buf, capacity, shape, d["dtype"])
                points.update({(k, a): buf for k, a in d["uses"]})
        return points, kept, values

    def _tables_for(self, dims: dict) -> dict:
        """The launch tables bound to ``dims`` (a few kept: a decoding loop repeats its steps' shapes)."""
        key = tuple(sorted(dims.items()))
        tables = self._bound.get(key)
        if tables is None:
            tables = bound_tables(self.lib.tables, dims)
            with self._pool_lock:
                if len(self._bound) >= 16:
                    self._bound.pop(next(iter(self._bound)))
                self._bound[key] = tables
        return tables

    def _set_dims(self, arena: _DeviceArena, dims: dict | None) -> None:
        """Point ``arena``'s dims buffers at ``dims`` (None: the plan's own)."""
        if arena.dims == dims:
            return
        values = self.plan["dims"] if dims is None else dims
        for names, buf in arena.dim_buffers.items():
            self.lib.to_device(arena.stream, buf, 0,
                               np.array([values[n] for n in names], dtype=np.int64).view(np.uint8))
        arena.dims = dims

    def run(self, values: list, timings: dict | None = None, shaped: tuple | None = None,
            keep=()) -> list:
        """The outputs for ``values`` (arrays in the plan's input order, already checked). With a
        ``timings`` dict, where the device can time its own work (``record``), it gets ``device_ms`` (the
        whole run on the device, copies included) and ``kernels_ms`` (the launches alone). ``shaped``:
        ``(dims, output shapes)`` of a run at smaller dims than planned (``run_shaped``). ``keep``: the
        indices of outputs handed back as ``DeviceTensor``s; a value may be a ``DeviceTensor`` of this
        library, which the kernels then read in place (``_resident``)."""
        lib = self.lib
        resident = keep or any(isinstance(v, DeviceTensor) for v in values)
        points, kept, values = self._resident(values, shaped, keep) if resident else ({}, {}, values)
        arena = self._take()
        try:
            stream = arena.stream
            if arena.dim_buffers:
                self._set_dims(arena, None if shaped is None else dict(shaped[0]))
            run_tables = None if shaped is None else self._tables_for(shaped[0])
            calls = self._rebound(arena, points) if points else arena.calls
            timed = timings is not None and lib.record(stream, "start")
            for d, v in zip(self.plan["inputs"], values):
                # an empty one (a KV cache's first past) moves nothing, one on the device neither
                if "arena" in d["ref"] and not isinstance(v, DeviceTensor) and v.size:
                    host = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
                    lib.to_device(stream, arena.arena, self.offset(d["ref"]["arena"]), host)
            if timed:
                lib.record(stream, "kernels")
            for function, prepared, table in calls:
                lib.launches(stream, function, prepared, run_tables[function] if run_tables else table)
            if timed:
                lib.record(stream, "kernels_done")
            outs = []
            for i, d in enumerate(self.plan["outputs"]):
                if i in kept:
                    outs.append(kept[i])
                    continue
                if "param" in d["ref"]:
                    outs.append(np.array(self.params[d["ref"]["param"]], copy=True))
                    continue
                out = np.empty(d["shape"] if shaped is None else shaped[1][i], dtype=d["dtype"])
                if out.nbytes:
                    lib.from_device(stream, out.reshape(-1).view(np.uint8), arena.arena,
                                    self.offset(d["ref"]["arena"]))
                outs.append(out)
            if timed:
                lib.record(stream, "done")
            lib.synchronize(stream)
            if timed:
                timings["device_ms"] = lib.elapsed_ms(stream, "start", "done")
                timings["kernels_ms"] = lib.elapsed_ms(stream, "kernels", "kernels_done")
            return outs
        finally:
            with self._pool_lock:
                self._pool.append(arena)
