"""MXNet ``.params`` files (the NDArray list format of ``mx.nd.save``) read without mxnet.

MXNet 1.9.1 only imports beside numpy < 1.24, so this reader decodes the byte format itself. The layout
(little-endian), as MXNet's ``NDArray::Save``/``NDArray::Load`` write and read it:

    u64 0x112, u64 reserved, u64 N, N arrays, u64 K, K names (u64 length + UTF-8 bytes; K = 0: a list)

An array starts with a u32 magic: 0xF993FAC9 (V2) or 0xF993FACA (V3, numpy shape semantics) are followed
by an i32 storage type (0 dense, 1 row_sparse, 2 csr), for sparse arrays the storage shape, the shape
(i32 ndim + ndim i64 dims), i32 device type + id, i32 dtype, for sparse arrays each auxiliary array's
i32 dtype and shape, then the C-order data and the auxiliary data. 0xF993FAC8 (V1) has no storage type;
any other word is the ndim of the legacy form whose dims are u32. An array with no shape (V1/V2/legacy
ndim 0; V3 ndim -1 or a -1 dim) is an uninitialised NDArray: the record ends there and we return None
(V3 ndim 0 is a scalar). Sparse arrays are returned dense.

Every malformed file is one ``ModelLoadError`` sentence that names the file and what is wrong; sizes are
checked against the bytes left before anything is allocated, so a lying header cannot make us allocate
gigabytes.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import reading

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
MAX_ELEMENTS = 2**48  # no real array comes near; beyond it even an empty shape is a corrupt header
MAX_NDIM = 32  # MXNet's own limit is far lower in practice; anything above is a corrupt header.

DENSE, ROW_SPARSE, CSR = 0, 1, 2
_NUM_AUX = {DENSE: 0, ROW_SPARSE: 1, CSR: 2}

BFLOAT16 = 12
# MXNet's (mshadow's) dtype codes. bfloat16 has no numpy dtype: it is read as uint16 bits and widened
# to float32 (exactly: a bfloat16 is the top half of a float32).
DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"), 4: np.dtype("<i4"),
    5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype("?"), 8: np.dtype("<i2"), 9: np.dtype("<u2"),
    10: np.dtype("<u4"), 11: np.dtype("<u8"), BFLOAT16: np.dtype("<u2"),
}
DTYPE_NAMES = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8", 6: "int64",
               7: "bool", 8: "int16", 9: "uint16", 10: "uint32", 11: "uint64", 12: "bfloat16"}


class _Reader:
    """A cursor over the file's bytes whose every read checks what is left first."""

    def __init__(self, data: bytes, source: str):
        self.data = memoryview(data)
        self.pos = 0
        self.source = source

    def fail(self, what: str) -> ModelLoadError:
        return ModelLoadError(f"{self.source} is not a valid MXNet .params file: {what} (at byte {self.pos})")

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or n > self.left():
            raise self.fail(f"it is truncated: {what} needs {n} bytes but {self.left()} are left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size, what))

    def u64(self, what: str) -> int:
        return self.unpack("<Q", what)[0]

    def i32(self, what: str) -> int:
        return self.unpack("<i", what)[0]

    def u32(self, what: str) -> int:
        return self.unpack("<I", what)[0]

    def shape(self, what: str, dim_format: str = "q", ndim: int | None = None) -> tuple[int, ...] | None:
        """A TShape: i32 ndim then the dims. None for ndim -1 (unknown, numpy semantics)."""
        if ndim is None:
            ndim = self.i32(f"the ndim of {what}")
        if ndim == -1:
            return None
        if ndim < 0 or ndim > MAX_NDIM:
            raise self.fail(f"{what} claims {ndim} dimensions")
        dims = self.unpack(f"<{ndim}{dim_format}", f"the dims of {what}") if ndim else ()
        if any(d < -1 for d in dims):
            raise self.fail(f"{what} has a negative dimension {dims}")
        return tuple(dims)

    def array(self, dtype_code: int, shape: tuple[int, ...], what: str) -> np.ndarray:
        dtype = DTYPES.get(dtype_code)
        if dtype is None:
            raise self.fail(f"{what} has the unknown dtype code {dtype_code}")
        count, span = 1, 1
        for d in shape:
            count *= d
            span *= max(d, 1)
        if span > MAX_ELEMENTS:  # even with no elements, numpy refuses such a shape
            raise self.fail(f"{what} claims the shape {shape}")
        nbytes = count * dtype.itemsize
        if nbytes > self.left():  # before allocating: a lying shape must not allocate
            raise self.fail(f"it is truncated: {what} of shape {shape} ({DTYPE_NAMES[dtype_code]}) needs "
                            f"{nbytes} bytes but {self.left()} are left")
        raw = np.frombuffer(self.take(nbytes, what), dtype=dtype, count=count).reshape(shape)
        if dtype_code == BFLOAT16:
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(dtype.newbyteorder("="), copy=True)


def _read_array(r: _Reader, index: int) -> np.ndarray | None:
    what = f"array {index}"
    magic = r.u32(f"the magic of {what}")
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = r.i32(f"the storage type of {what}")
        if stype not in _NUM_AUX:
            raise r.fail(f"{what} has the unknown storage type {stype}")
        nad = _NUM_AUX[stype]
        sshape = r.shape(f"the storage shape of {what}") if nad else None
        shape = r.shape(f"the shape of {what}")
        if shape is None or (magic == V2_MAGIC and not shape) or (magic == V3_MAGIC and -1 in shape):
            return None  # an uninitialised NDArray: MXNet stops reading the record here
    elif magic == V1_MAGIC:
        stype, nad, sshape = DENSE, 0, None
        shape = r.shape(f"the shape of {what}")
        if not shape:
            return None
    else:  # legacy: the word is the ndim, the dims are u32
        if magic > MAX_NDIM:
            raise r.fail(f"{what} starts with 0x{magic:08X}, neither an NDArray magic nor a plausible ndim")
        stype, nad, sshape = DENSE, 0, None
        shape = r.shape(f"the shape of {what}", dim_format="I", ndim=magic)
        if not shape:
            return None
    if -1 in shape:
        raise r.fail(f"{what} has an unknown dimension in its shape {shape}")
    r.unpack("<ii", f"the device of {what}")  # where it lived when saved: irrelevant here
    dtype = r.i32(f"the dtype of {what}")
    if dtype not in DTYPES:
        raise r.fail(f"{what} has the unknown dtype code {dtype}")
    aux = []
    for i in range(nad):
        aux_type = r.i32(f"the dtype of auxiliary array {i} of {what}")
        aux_shape = r.shape(f"the shape of auxiliary array {i} of {what}")
        if aux_shape is None or aux_type not in DTYPES or DTYPES[aux_type].kind not in "iu":
            raise r.fail(f"auxiliary array {i} of {what} has dtype code {aux_type} and shape {aux_shape}, "
                         "not an integer index array")
        aux.append((aux_type, aux_shape))
    if nad == 0:
        return r.array(dtype, shape, f"the data of {what}")
    if sshape is None or -1 in sshape:
        raise r.fail(f"the sparse {what} has no storage shape")
    values = r.array(dtype, sshape, f"the values of {what}")
    aux_data = [r.array(t, s, f"auxiliary array {i} of {what}") for i, (t, s) in enumerate(aux)]
    return _densify(r, what, stype, shape, values, aux_data)


def _densify(r: _Reader, what: str, stype: int, shape, values: np.ndarray, aux: list) -> np.ndarray:
    """A row_sparse or csr array as the dense array MXNet's ``tostype('default')`` gives."""
    # The dense result is as large as the shape says: bound it by what a sane model holds (the data
    # in the file are much smaller than the shape here, so the file length is no guide).
    count = span = 1
    for d in shape:
        count, span = count * d, span * max(d, 1)
    if count * values.itemsize > 2**34 or span > MAX_ELEMENTS:
        raise r.fail(f"the sparse {what} claims the dense shape {shape}, over 16 GiB")
    dense = np.zeros(shape, dtype=values.dtype)
    if stype == ROW_SPARSE:
        (idx,) = aux
        if len(shape) < 1 or idx.ndim != 1 or values.shape != (idx.shape[0], *shape[1:]):
            raise r.fail(f"the row_sparse {what} has values of shape {values.shape} and indices of shape "
                         f"{idx.shape} that do not fit its shape {shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= shape[0]):
            raise r.fail(f"the row_sparse {what} has a row index outside 0..{shape[0] - 1}")
        dense[idx.astype(np.int64)] = values
        return dense
    indptr, indices = aux
    if len(shape) != 2 or indptr.shape != (shape[0] + 1,) or values.ndim != 1 \
            or indices.shape != values.shape:
        raise r.fail(f"the csr {what} has values {values.shape}, indptr {indptr.shape} and indices "
                     f"{indices.shape} that do not fit its shape {shape}")
    indptr = indptr.astype(np.int64)
    if indptr[0] != 0 or indptr[-1] != values.size or np.any(np.diff(indptr) < 0):
        raise r.fail(f"the csr {what} has a row pointer that is not ascending from 0 to {values.size}")
    if indices.size and (indices.min() < 0 or indices.max() >= shape[1]):
        raise r.fail(f"the csr {what} has a column index outside 0..{shape[1] - 1}")
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    dense[rows, indices.astype(np.int64)] = values
    return dense


def read_ndarray_list(data: bytes, source: str = "<bytes>") -> tuple[list[np.ndarray | None], list[str]]:
    """The arrays and names of an NDArray list (names empty for an unnamed list, as ``nd.save([...])``)."""
    r = _Reader(data, source)
    if len(data) < 8 or r.u64("the header") != LIST_MAGIC:
        head = bytes(data[:8]).hex() or "nothing"
        raise ModelLoadError(f"{source} is not an MXNet .params file: it starts with {head}, not the "
                             "NDArray list magic 0x112")
    r.u64("the reserved word")
    count = r.u64("the array count")
    if count > r.left() // 4:  # every array takes at least its 4-byte magic
        raise r.fail(f"it claims {count} arrays in {r.left()} bytes")
    arrays = [_read_array(r, i) for i in range(count)]
    num_names = r.u64("the name count")
    if num_names not in (0, count):
        raise r.fail(f"it holds {count} arrays but {num_names} names")
    names = []
    for i in range(num_names):
        length = r.u64(f"the length of name {i}")
        raw = bytes(r.take(length, f"name {i}"))
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise r.fail(f"name {i} is not UTF-8") from None
    if r.left():
        raise r.fail(f"{r.left()} bytes follow the last name")
    return arrays, names


def load_ndarray_list(path: str | os.PathLike) -> tuple[list[np.ndarray | None], list[str]]:
    """``read_ndarray_list`` of a file; a missing or unreadable file is a ``ModelLoadError`` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the MXNet parameters {os.fspath(path)}: {exc.strerror}") from None
    with reading(os.fspath(path), "not a valid MXNet .params file"):  # what the checks below miss
        return read_ndarray_list(data, os.fspath(path))


def load_params(path: str | os.PathLike) -> dict[str, np.ndarray | None]:
    """The named arrays of a ``.params`` file, keys as stored (``arg:``/``aux:`` or gluon's plain keys)."""
    arrays, names = load_ndarray_list(path)
    if not names and arrays:
        raise ModelLoadError(f"{os.fspath(path)} holds an unnamed list of {len(arrays)} arrays, not named "
                             "model parameters")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ModelLoadError(f"{os.fspath(path)} names the parameter {dup!r} twice")
    return dict(zip(names, arrays))


def split_params(named: dict[str, np.ndarray | None]) -> tuple[dict, dict]:
    """``(arg_params, aux_params)`` as ``mx.model.load_checkpoint`` gives them: ``arg:``/``aux:`` prefixes
    stripped. Unprefixed keys (gluon ``save_parameters``) all go into ``arg_params``; which of them are
    auxiliary states is then known only from the symbol (``symbol.Symbol.aux_names``)."""
    arg, aux = {}, {}
    for key, value in named.items():
        kind, sep, name = key.partition(":")
        if sep and kind == "aux":
            aux[name] = value
        elif sep and kind == "arg":
            arg[name] = value
        else:
            arg[key] = value
    return arg, aux


_EPOCH = re.compile(r"-(\d+)\.params$")


def find_params(symbol_path: str | os.PathLike) -> Path:
    """The parameters beside ``net-symbol.json``: the ``net-NNNN.params`` of the latest epoch.

    ``save_checkpoint``/``export`` write ``prefix-symbol.json`` and one ``prefix-NNNN.params`` per epoch;
    a plain ``net.json`` is also matched to ``net-NNNN.params``, and to ``net.params`` when no epoch file
    is there.
    """
    path = Path(symbol_path)
    name = path.name
    prefix = name[: -len("-symbol.json")] if name.endswith("-symbol.json") else path.stem
    epochs = []
    for candidate in path.parent.glob(f"{glob_escape(prefix)}-*.params"):
        m = _EPOCH.search(candidate.name)
        if m and candidate.name == f"{prefix}-{m.group(1)}.params":
            epochs.append((int(m.group(1)), candidate))
    if epochs:
        return max(epochs)[1]
    plain = path.parent / f"{prefix}.params"
    if plain.exists():
        return plain
    raise ModelLoadError(f"no parameters beside {os.fspath(symbol_path)}: expected {prefix}-NNNN.params in "
                         f"{os.fspath(path.parent) or '.'} (or name the file with params=)")


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)
