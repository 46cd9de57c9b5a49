"""Reading CoreML files: the Model protobuf of an ``.mlmodel`` or an ``.mlpackage``, and ``weight.bin``.

The protobuf classes are coremltools' own generated ``*_pb2`` modules, loaded under a private package
name so that reading a model does not run ``coremltools/__init__.py`` (seconds: it imports its
converters and warns about native libraries that do not exist off macOS). The generated modules
import each other relatively and register the same descriptors, so classes loaded here and through
``coremltools.proto`` are the same classes.

``weight.bin`` (ML Program weights): a 64-byte header (u32 count, u32 version), then at each offset
a 64-byte record (u32 magic 0xDEADBEEF, u32 dtype, u64 size in bytes, u64 absolute data offset) and
its 64-byte aligned data.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import struct
import sys
import types
from pathlib import Path

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import reading

_PROTO_PACKAGE = "nnvm_frontend_coreml._coreml_proto"


def proto(module: str = "Model_pb2"):
    """coremltools' generated protobuf module ``module`` (``Model_pb2``, ``MIL_pb2``, ...)."""
    if f"coremltools.proto.{module}" in sys.modules:
        return sys.modules[f"coremltools.proto.{module}"]
    if _PROTO_PACKAGE not in sys.modules:
        spec = importlib.util.find_spec("coremltools")
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError("reading CoreML models needs coremltools (pip install coremltools)")
        pkg = types.ModuleType(_PROTO_PACKAGE)
        pkg.__path__ = [os.path.join(spec.submodule_search_locations[0], "proto")]
        sys.modules[_PROTO_PACKAGE] = pkg
    return importlib.import_module(f"{_PROTO_PACKAGE}.{module}")


def looks_like_coreml(model) -> bool:
    """A CoreML Model protobuf object, or a directory holding an ``.mlpackage`` manifest."""
    if isinstance(model, str | os.PathLike):
        return os.path.isfile(os.path.join(os.fspath(model), "Manifest.json"))
    return type(model).__name__ == "Model" and hasattr(model, "mlProgram") and hasattr(model, "neuralNetwork")


def read_model(model):
    """``(spec, weights_dir, where)``: the Model protobuf, the folder ``@model_path`` refers to (None
    for an ``.mlmodel`` or an in-memory spec) and the name used in error messages."""
    if not isinstance(model, str | os.PathLike):
        if looks_like_coreml(model):
            return model, None, "the CoreML model"
        raise ModelLoadError(f"a {type(model).__name__} is not a CoreML model")
    path = Path(model)
    where = str(path)
    if not path.exists():
        raise ModelLoadError(f"{where}: no such file")
    weights_dir = None
    if path.is_dir():
        model_file = _package_model_file(path)
        weights_dir = model_file.parent
    else:
        model_file = path
    spec = proto().Model()
    with reading(model_file, "not a CoreML Model protobuf"):
        spec.ParseFromString(model_file.read_bytes())
    if spec.specificationVersion == 0 or spec.WhichOneof("Type") is None:
        raise ModelLoadError(f"{model_file}: not a CoreML Model protobuf (no specification version or model)")
    return spec, weights_dir, where


def _package_model_file(path: Path) -> Path:
    """The Model protobuf of an ``.mlpackage``, found through ``Manifest.json``'s root model entry."""
    manifest = path / "Manifest.json"
    if not manifest.is_file():
        raise ModelLoadError(f"{path}: not an .mlpackage (no Manifest.json)")
    with reading(manifest, "corrupt package manifest"):
        info = json.loads(manifest.read_bytes())
        entry = info["itemInfoEntries"][info["rootModelIdentifier"]]
        model_file = path / "Data" / entry["path"]
        if not model_file.is_file():
            raise ModelLoadError(f"{path}: the manifest names {entry['path']}, which is not in the package")
    return model_file


# weight.bin dtype codes -> (numpy dtype, bits per element; < 8: packed, least significant bits first)
BLOB_DTYPES = {
    1: (np.float16, 16),
    2: (np.float32, 32),
    3: (np.uint8, 8),
    4: (np.int8, 8),
    6: (np.int16, 16),
    7: (np.uint16, 16),
    8: (np.int8, 4),
    9: (np.uint8, 1),
    10: (np.uint8, 2),
    11: (np.uint8, 4),
    12: (np.uint8, 3),
    13: (np.uint8, 6),
    14: (np.int32, 32),
    15: (np.uint32, 32),
}
BLOB_MAGIC = 0xDEADBEEF


class WeightFile:
    """One ``weight.bin``, read once; ``blob(offset, count)`` is the array whose record is at ``offset``."""

    def __init__(self, path: Path):
        self.path = path
        if not path.is_file():
            raise ModelLoadError(f"{path}: the weight file is missing")
        with reading(path, "the weight file cannot be read"):
            self.data = path.read_bytes()
        if len(self.data) < 64:
            raise ModelLoadError(
                f"{path}: corrupt weight file ({len(self.data)} bytes, shorter than its header)"
            )

    def blob(self, offset: int, count: int | None = None) -> np.ndarray:
        """The flat array stored at ``offset``; ``count`` elements (needed for sub-byte types)."""
        if offset + 64 > len(self.data):
            raise ModelLoadError(
                f"{self.path}: no weight blob at offset {offset} (the file has {len(self.data)} bytes)"
            )
        magic, code, size, start = struct.unpack_from("<IIQQ", self.data, offset)
        if magic != BLOB_MAGIC:
            raise ModelLoadError(
                f"{self.path}: corrupt weight blob at offset {offset} (magic {magic:#x}, "
                f"expected {BLOB_MAGIC:#x})"
            )
        if code not in BLOB_DTYPES:
            raise ModelLoadError(
                f"{self.path}: weight blob at offset {offset} has data type {code}, "
                "which this frontend does not read"
            )
        if start + size > len(self.data):
            raise ModelLoadError(
                f"{self.path}: weight blob at offset {offset} runs past the end of the file "
                f"({start} + {size} > {len(self.data)} bytes)"
            )
        dtype, bits = BLOB_DTYPES[code]
        raw = np.frombuffer(self.data, np.uint8, size, start)
        if bits >= 8:
            return raw.view(np.dtype(dtype).newbyteorder("<")).astype(dtype)
        return unpack_bits(raw, bits, count, signed=dtype == np.int8)


def unpack_bits(raw: np.ndarray, bits: int, count: int | None, signed: bool = False) -> np.ndarray:
    """Sub-byte values packed least significant bits first (CoreML's layout), as uint8 or int8."""
    flat = np.unpackbits(raw, bitorder="little")
    n = len(flat) // bits if count is None else int(count)
    if n * bits > len(flat):
        raise ModelLoadError(
            f"a packed weight blob holds {len(flat) // bits} {bits}-bit values, not the {n} its type declares"
        )
    groups = flat[: n * bits].reshape(n, bits).astype(np.int32)
    values = (groups << np.arange(bits, dtype=np.int32)).sum(axis=1)
    if signed:
        values = np.where(values >= 1 << (bits - 1), values - (1 << bits), values)
        return values.astype(np.int8)
    return values.astype(np.uint8)
