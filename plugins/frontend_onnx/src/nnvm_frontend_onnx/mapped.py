"""An ONNX file's large weights read in place: the file is mapped, the protobuf parsed without them.

Reading VGG-19's 548 MB file the ordinary way copies every weight three times (the file into a bytes
object, protobuf's parse into the message, ``numpy_helper.to_array`` into an array): most of a warm
compile. Here the file is mapped read-only, the protobuf's wire format is walked just deep enough
(model -> graph -> initializer -> ``raw_data``) to find where each large initializer's bytes lie, the
message is parsed from a copy of the file without those bytes, and each weight is a numpy view of the
mapping: pages are read when a pass first touches them, and never copied by the reader.

The walk is an optimisation, not a second parser: anything it does not expect (a malformed or truncated
field, a wire type it skips, two initializers of one name) makes ``split`` return None and the caller
parses the file the ordinary way, which gives the ordinary error. A view of the mapping must not outlive
a compile inside a module: the compiler copies every weight that still views a file (``nnvm.graph.ir``'s
``detached``), so a module never depends on the file being left as it was.
"""

from __future__ import annotations

import mmap

import numpy as np

MIN_MAPPED_BYTES = 1 << 16  # smaller tensors stay in the message: shape constants, biases
# TensorProto.DataType -> numpy, for the types whose raw_data is the array's bytes as they are
RAW_DTYPES = {1: "<f4", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 6: "<i4", 7: "<i8", 9: "?", 10: "<f2",
              11: "<f8", 12: "<u4", 13: "<u8"}
MODEL_GRAPH, GRAPH_INITIALIZER = 7, 5
TENSOR_DATA_TYPE, TENSOR_NAME, TENSOR_RAW_DATA = 2, 8, 9


class _Malformed(Exception):
    """The walk met something it does not handle; the ordinary parse decides."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf, pos: int, end: int):
    """``(field, wire type, header start, value start, value end)`` of each field in ``buf[pos:end]``."""
    while pos < end:
        start = pos
        tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, value_end = _varint(buf, pos, end)
        elif wire == 1:
            value_end = pos + 8
        elif wire == 5:
            value_end = pos + 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            value_end = pos + length
        else:  # groups (3, 4) and undefined wire types
            raise _Malformed
        if field == 0 or value_end > end:
            raise _Malformed
        yield field, wire, start, pos, value_end
        pos = value_end


def _message(buf, start: int, end: int, rewrite: dict) -> bytes:
    """The bytes of the message ``buf[start:end]`` with each length-delimited field whose number is in
    ``rewrite`` replaced by ``rewrite[field](value start, value end)`` (None: the field dropped)."""
    out = bytearray()
    for field, wire, header, value_start, value_end in _fields(buf, start, end):
        if wire == 2 and field in rewrite:
            inner = rewrite[field](value_start, value_end)
            if inner is not None:
                out += _encode_varint(field << 3 | 2) + _encode_varint(len(inner)) + inner
        else:
            out += buf[header:value_end]
    return bytes(out)


def split(buf) -> tuple[bytes, dict] | None:
    """``(the model's bytes without its large raw_data fields, {initializer name: (dtype, offset,
    nbytes)})`` for a serialized ``ModelProto`` in ``buf``; None when there is nothing to leave out or
    the walk does not understand the bytes."""
    places: dict[str, tuple] = {}

    def tensor(start: int, end: int) -> bytes:
        name, dtype, raw = None, None, None
        for field, wire, _, value_start, value_end in _fields(buf, start, end):
            if field == TENSOR_NAME and wire == 2:
                name = bytes(buf[value_start:value_end]).decode("utf-8", "replace")
            elif field == TENSOR_DATA_TYPE and wire == 0:
                dtype = RAW_DTYPES.get(_varint(buf, value_start, value_end)[0])
            elif field == TENSOR_RAW_DATA and wire == 2:
                raw = (value_start, value_end - value_start)
        if name is None or dtype is None or raw is None or raw[1] < MIN_MAPPED_BYTES:
            return bytes(buf[start:end])
        if name in places:
            raise _Malformed
        places[name] = (dtype, *raw)
        return _message(buf, start, end, {TENSOR_RAW_DATA: lambda s, e: None})

    def graph(start: int, end: int) -> bytes:
        return _message(buf, start, end, {GRAPH_INITIALIZER: tensor})

    try:
        skeleton = _message(buf, 0, len(buf), {MODEL_GRAPH: graph})
    except _Malformed:
        return None
    return (skeleton, places) if places else None


def open_mapped(path: str) -> mmap.mmap:
    """The whole file mapped read-only, its pages mapped at once (``MAP_POPULATE`` where the system has
    it: one pass over the page cache instead of a fault every few pages while the weights are read)."""
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)


def view(mapping, dtype: str, offset: int, nbytes: int, dims) -> np.ndarray | None:
    """The initializer's array as a read-only view of the mapping; None when its byte count does not
    match its dims (the caller reports the tensor)."""
    shape = tuple(int(d) for d in dims)
    itemsize = np.dtype(dtype).itemsize
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) * itemsize != nbytes:
        return None
    return np.frombuffer(mapping, dtype=dtype, count=nbytes // itemsize, offset=offset).reshape(shape)
