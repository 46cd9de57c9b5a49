"""The staged module file (``nnvm.runtime.staged_file``) with the core alone: host steps written,
read back and run against numpy, and a damaged, newer or unknown-operator file refused in one sentence.
(Files with compiled stages, from ONNX models, against onnxruntime: tests/test_staged_export.py.)"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

import nnvm
from nnvm.errors import InputError, ModelLoadError
from nnvm.runtime import staged_file
from nnvm.runtime.host_ops import HostOp
from nnvm.runtime.staged_file import HostStage, Stages


def _host_only() -> Stages:
    """``NonZero(x)`` then ``Compress(x, c)`` along axis 1, and a constant ``TopK`` k over ``x``'s rows."""
    return Stages(
        ["x", "c"], ["nz", "kept", "top", "where"], {"k": np.array([2], np.int64)},
        [HostStage(HostOp("n", "NonZero", ["x"], ["nz"]), "nonzero_0", (0, 1)),
         HostStage(HostOp("p", "Compress", ["x", "c"], ["kept"], {"axis": 1}), "compress_0", (0, 1)),
         HostStage(HostOp("t", "TopK", ["x", "k"], ["top", "where"], {"axis": -1, "largest": 0}), "topk_0",
                   (0, 1))],
        {"nonzero_0": (0, 12), "compress_0": (0, 4), "topk_0": (0, 4)})


def test_host_steps_round_trip_against_numpy(tmp_path):
    path = tmp_path / "m.so"
    _host_only().export(str(path))
    mod = nnvm.load(str(path))
    rng = np.random.default_rng(0)
    for x, c in [(rng.integers(0, 2, (3, 4)).astype(np.float32), np.array([1, 0, 1, 1], bool)),
                 (np.zeros((3, 4), np.float32), np.zeros(4, bool))]:
        nz, kept, top, where = mod.run(x=x, c=c)
        np.testing.assert_array_equal(nz, np.stack(np.nonzero(x)).astype(np.int64))
        np.testing.assert_array_equal(kept, np.compress(c, x, axis=1))
        order = np.argsort(x, axis=-1, kind="stable")[:, :2]
        np.testing.assert_array_equal(where, order)
        np.testing.assert_array_equal(top, np.take_along_axis(x, order, -1))
    assert mod.stats()["symbolic"]["stages"][0]["last"] == 0  # the last run: nothing nonzero


def test_a_fresh_dim_outside_its_bounds_is_one_sentence(tmp_path):
    path = tmp_path / "m.so"
    _host_only().export(str(path))
    with pytest.raises(InputError, match=r"^node p \(Compress\) gives compress_0 = 5, outside its bounds "
                                         r"\[0, 4\]$"):
        nnvm.load(str(path)).run(x=np.zeros((3, 5), np.float32), c=np.ones(5, bool))


def _rewrite(data: bytes, version: int | None = None, desc=None) -> bytes:
    """``data`` with another version or description, its checksum right."""
    _, old_version, _, head, note, _ = staged_file.PREFIX.unpack_from(data)
    start = staged_file.PREFIX.size + note
    body = data[start:start + head] if desc is None else desc
    tail = struct.pack("<QII", len(body), note, 0) + data[32:start] + body + data[start + head:]
    return staged_file.MAGIC + struct.pack("<II", version or old_version, zlib.crc32(tail)) + tail


@pytest.mark.parametrize("damage,expected", [
    ("truncated", "checksum or size mismatch: the staged module file is truncated or corrupted"),
    ("flipped", "checksum or size mismatch: the staged module file is truncated or corrupted"),
    ("newer", "staged module format v2 is newer than this nnvm reads (v1); upgrade nnvm or export it again"),
    ("unknown op", "node n (Where2) is an operator this nnvm cannot run on the host; upgrade nnvm"),
    ("bad description", "the staged module's description is corrupt"),
])
def test_a_damaged_newer_or_unknown_file_is_one_sentence(tmp_path, damage, expected):
    good = tmp_path / "good.so"
    _host_only().export(str(good))
    data = good.read_bytes()
    if damage == "truncated":
        data = data[: len(data) - 7]
    elif damage == "flipped":
        data = data[:40] + bytes([data[40] ^ 0x20]) + data[41:]
    elif damage == "newer":
        data = _rewrite(data, version=2)
    else:
        _, _, _, head, note, _ = staged_file.PREFIX.unpack_from(data)
        text = data[32 + note:32 + note + head]
        data = _rewrite(data, desc=text.replace(b'"NonZero"', b'"Where2"') if damage == "unknown op"
                        else text.replace(b'"steps"', b'"stepz"'))
    bad = tmp_path / "bad.so"
    bad.write_bytes(data)
    with pytest.raises(ModelLoadError) as info:
        nnvm.load(str(bad))
    assert str(info.value).startswith(f"{bad}: {expected}"), str(info.value)
    assert "\n" not in str(info.value)
