"""The ``.params`` reader against files MXNet 1.9.1 wrote and against what MXNet's ``nd.load`` reads.

MXNet runs in its own cached venv (``nnvm_testing.frontend_mxnet``); the forms MXNet 1.9.1 no longer
writes (V1 and legacy arrays, dtype codes its Python API cannot make) are built here byte by byte and
still checked against ``nd.load`` where MXNet can read them, else against numpy.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from nnvm.errors import ModelLoadError
from nnvm_frontend_mxnet.params import (
    V1_MAGIC,
    V2_MAGIC,
    V3_MAGIC,
    find_params,
    load_ndarray_list,
    load_params,
    read_ndarray_list,
    split_params,
)
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv


@pytest.fixture(scope="module")
def fixtures():
    return pytest_venv(testing.reader_fixtures)


@pytest.fixture(scope="module")
def mxnet_loaded(fixtures):
    """What MXNet's nd.load reads from every fixture, in one MXNet process (each start costs seconds)."""
    return dict(zip(fixtures, pytest_venv(testing.mxnet_load, list(fixtures.values()))))


# --- byte builders for hand-made files ----------------------------------------------------------------


def header(count: int) -> bytes:
    return struct.pack("<QQQ", 0x112, 0, count)


def names(*keys: str) -> bytes:
    encoded = [k.encode() for k in keys]
    return struct.pack("<Q", len(keys)) + b"".join(struct.pack("<Q", len(k)) + k for k in encoded)


def shape(dims, fmt="q") -> bytes:
    return struct.pack(f"<i{len(dims)}{fmt}", len(dims), *dims)


def v2(a: np.ndarray, code: int, magic: int = V2_MAGIC) -> bytes:
    return struct.pack("<Ii", magic, 0) + shape(a.shape) + struct.pack("<iii", 1, 0, code) + a.tobytes()


def v1(a: np.ndarray, code: int) -> bytes:
    return struct.pack("<I", V1_MAGIC) + shape(a.shape) + struct.pack("<iii", 1, 0, code) + a.tobytes()


def legacy(a: np.ndarray, code: int) -> bytes:
    return struct.pack(f"<{a.ndim + 1}I", a.ndim, *a.shape) + struct.pack("<iii", 1, 0, code) + a.tobytes()


def params_file(*arrays: bytes, keys=()) -> bytes:
    return header(len(arrays)) + b"".join(arrays) + names(*keys)


X = np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1


# --- files MXNet wrote ----------------------------------------------------------------------------------


def _same(ours, theirs) -> None:
    assert ours is not None
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("name", testing.FIXTURES)
def test_files_mxnet_wrote_read_as_nd_load_reads_them(fixtures, mxnet_loaded, name):
    theirs = mxnet_loaded[name]
    arrays, keys = load_ndarray_list(fixtures[name])
    if isinstance(theirs, list):
        assert keys == []
        assert len(arrays) == len(theirs)
        for ours, ref in zip(arrays, theirs):
            _same(ours, ref)
    else:
        assert keys == list(theirs)
        for key, ours in zip(keys, arrays):
            _same(ours, theirs[key])


def test_dtypes_sparse_and_bfloat16(fixtures):
    named = load_params(fixtures["dtypes.params"])
    assert {k: str(v.dtype) for k, v in named.items()} == {
        "arg:float32": "float32", "arg:float64": "float64", "arg:float16": "float16", "arg:uint8": "uint8",
        "arg:int8": "int8", "arg:int32": "int32", "arg:int64": "int64", "arg:bool": "bool",
        "aux:bfloat16": "float32"}  # bfloat16 widened to float32 values
    np.testing.assert_allclose(named["aux:bfloat16"], named["arg:float32"], rtol=2**-8)
    sparse = load_params(fixtures["sparse.params"])
    assert np.count_nonzero(sparse["arg:row_sparse"].any(axis=1)) == 2
    assert not sparse["arg:empty_row_sparse"].any() and sparse["arg:empty_row_sparse"].shape == (3, 2)
    assert sparse["arg:csr_float64"].dtype == np.float64


def test_arg_aux_and_gluon_keys(fixtures):
    arg, aux = split_params(load_params(fixtures["dtypes.params"]))
    assert "float32" in arg and list(aux) == ["bfloat16"]
    gluon = load_params(fixtures["gluon.params"])
    assert list(gluon) == ["0.weight", "0.bias", "1.gamma", "1.beta", "1.running_mean", "1.running_var",
                           "2.weight", "2.bias"]
    arg, aux = split_params(gluon)
    assert list(arg) == list(gluon) and aux == {}


def test_unnamed_list(fixtures):
    arrays, keys = load_ndarray_list(fixtures["unnamed.params"])
    assert keys == [] and [a.dtype for a in arrays] == [np.float32, np.int32]
    with pytest.raises(ModelLoadError, match="unnamed list of 2 arrays"):
        load_params(fixtures["unnamed.params"])


def test_v3_scalar_and_empty(fixtures):
    named = load_params(fixtures["v3.params"])
    assert named["scalar"].shape == () and named["scalar"] == np.float32(2.5)
    assert named["empty"].shape == (2, 0)


# --- forms MXNet 1.9.1 reads but no longer writes -------------------------------------------------------


def test_v1_legacy_and_empty_arrays_as_mxnet_reads_them(tmp_path):
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    files = {
        "v1": params_file(v1(X, 0), v1(ints, 6), keys=("arg:a", "arg:b")),
        "legacy": params_file(legacy(X, 0), legacy(X.astype(np.float16), 2), keys=("a", "b")),
        "v3": params_file(v2(np.float32(7).reshape(()), 0, magic=V3_MAGIC), keys=("s",)),
    }
    paths = []
    for name, data in files.items():
        paths.append(tmp_path / f"{name}.params")
        paths[-1].write_bytes(data)
    loaded = pytest_venv(testing.mxnet_load, paths)
    for path, theirs in zip(paths, loaded):
        assert isinstance(theirs, dict), f"MXNet cannot read {path.name}: {theirs}"
        ours = load_params(path)
        assert list(ours) == list(theirs)
        for key, value in ours.items():
            _same(value, theirs[key])


def test_uninitialised_array_is_none():
    """ndim 0 under V2/V1/legacy is an uninitialised NDArray: MXNet's loader stops the record right after
    the shape (its Python API then cannot even wrap it: "unknown storage type: -1"), so numpy decides."""
    empty = {"v2": struct.pack("<Ii", V2_MAGIC, 0) + shape(()), "v1": struct.pack("<I", V1_MAGIC) + shape(()),
             "legacy": struct.pack("<I", 0), "v3": struct.pack("<Ii", V3_MAGIC, 0) + struct.pack("<i", -1)}
    for form, record in empty.items():
        arrays, keys = read_ndarray_list(params_file(record, v2(X, 0), keys=("none", "x")), form)
        assert arrays[0] is None and keys == ["none", "x"], form
        _same(arrays[1], X)


@pytest.mark.parametrize("code, dtype", [(8, np.int16), (9, np.uint16), (10, np.uint32), (11, np.uint64)])
def test_dtype_codes_mxnet_python_cannot_make(code, dtype):
    a = (np.arange(6) * 7).astype(dtype).reshape(2, 3)
    arrays, _ = read_ndarray_list(params_file(v2(a, code), keys=("w",)))
    _same(arrays[0], a)


def test_bfloat16_bits():
    bits = np.array([0x3FC0, 0xC010, 0x7F80, 0x0001], dtype=np.uint16)  # 1.5, -2.25, inf, tiny subnormal
    arrays, _ = read_ndarray_list(params_file(v2(bits, 12), keys=("w",)))
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    _same(arrays[0], expected)
    assert arrays[0][:3].tolist() == [1.5, -2.25, np.inf]


def test_find_params_takes_the_latest_epoch(tmp_path):
    sym = tmp_path / "net-symbol.json"
    sym.write_text("{}")
    with pytest.raises(ModelLoadError, match=r"no parameters beside .*net-symbol.json: expected net-NNNN"):
        find_params(sym)
    for epoch in ("0000", "0009", "0010", "0002"):
        (tmp_path / f"net-{epoch}.params").write_bytes(b"")
    (tmp_path / "network-0099.params").write_bytes(b"")
    (tmp_path / "net-0100.params.bak").write_bytes(b"")
    assert find_params(sym) == tmp_path / "net-0010.params"
    odd = tmp_path / "a[1]-symbol.json"
    (tmp_path / "a[1]-0003.params").write_bytes(b"")
    assert find_params(odd) == tmp_path / "a[1]-0003.params"


# --- malformed files: one sentence each -----------------------------------------------------------------

GOOD = params_file(v2(X, 0), v2(np.arange(3, dtype=np.int32), 4), keys=("arg:w", "aux:m"))
ROW_SPARSE = (struct.pack("<Ii", V2_MAGIC, 1) + shape((1, 2)) + shape((4, 2)) + struct.pack("<iii", 1, 0, 0)
              + struct.pack("<i", 6) + shape((1,)))


MALFORMED = {
    "empty": (b"", "not an MXNet .params file"),
    "wrong magic": (b"PK\x03\x04" + GOOD[4:], "not the NDArray list magic 0x112"),
    "lying count": (header(10**12) + GOOD[24:], "claims 1000000000000 arrays"),
    "huge ndim": (header(1) + struct.pack("<Iii", V2_MAGIC, 0, 10**6), "claims 1000000 dimensions"),
    "negative dim": (header(1) + struct.pack("<Ii", V2_MAGIC, 0) + shape((3, -5)), "negative dimension"),
    "empty but absurd": (header(1) + struct.pack("<Ii", V2_MAGIC, 0) + shape((0, 2**62))
                         + struct.pack("<iii", 1, 0, 0) + names("w"),
                         "claims the shape (0, 4611686018427387904)"),
    "lying size": (header(1) + struct.pack("<Ii", V2_MAGIC, 0) + shape((2**20, 2**20))
                   + struct.pack("<iii", 1, 0, 0) + b"\0" * 64, "needs 4398046511104 bytes but 64 are left"),
    "unknown dtype": (params_file(v2(X, 0)[:-48 - 4] + struct.pack("<i", 99) + X.tobytes(), keys=("w",)),
                      "unknown dtype code 99"),
    "unknown storage": (header(1) + struct.pack("<Ii", V2_MAGIC, 7), "unknown storage type 7"),
    "not a magic": (header(1) + struct.pack("<I", 0xDEADBEEF),
                    "neither an NDArray magic nor a plausible ndim"),
    "name count": (GOOD[:-len(names("arg:w", "aux:m"))] + names("arg:w"), "2 arrays but 1 names"),
    "trailing bytes": (GOOD + b"xyz", "3 bytes follow the last name"),
    "row index": (header(1) + ROW_SPARSE + np.ones(2, np.float32).tobytes()
                  + np.array([9], np.int64).tobytes() + names("w"), "row index outside 0..3"),
    "csr pointer": (header(1) + struct.pack("<Ii", V2_MAGIC, 2) + shape((2,)) + shape((2, 2))
                    + struct.pack("<iii", 1, 0, 0) + struct.pack("<i", 6) + shape((3,)) + struct.pack("<i", 6)
                    + shape((2,)) + np.ones(2, np.float32).tobytes() + np.array([0, 2, 1], np.int64).tobytes()
                    + np.array([0, 1], np.int64).tobytes() + names("w"), "row pointer that is not ascending"),
}


def _one_sentence(exc: ModelLoadError, where: str) -> str:
    msg = str(exc)
    assert "\n" not in msg and where in msg and msg.count(". ") == 0, msg
    return msg


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_is_one_sentence(tmp_path, case):
    data, expected = MALFORMED[case]
    path = tmp_path / "broken.params"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError) as info:
        load_ndarray_list(path)
    assert expected in _one_sentence(info.value, str(path))


def test_non_utf8_name(tmp_path):
    data = params_file(v2(X, 0))[:-8] + struct.pack("<Q", 1) + struct.pack("<Q", 2) + b"\xff\xfe"
    with pytest.raises(ModelLoadError, match="name 0 is not UTF-8"):
        read_ndarray_list(data, "x.params")


def test_every_truncation_is_one_sentence(tmp_path):
    sparse = header(1) + ROW_SPARSE + np.ones(2, np.float32).tobytes() + np.array([3], np.int64).tobytes()
    for data in (GOOD, sparse + names("w")):
        for cut in range(len(data)):
            with pytest.raises(ModelLoadError) as info:
                read_ndarray_list(data[:cut], "cut.params")
            _one_sentence(info.value, "cut.params")
        read_ndarray_list(data, "whole.params")  # and the whole file reads


def test_random_corruption_is_always_one_sentence():
    """Flipped bytes anywhere in dense and sparse files: a ModelLoadError or a read, never a traceback."""
    rng = np.random.default_rng(16)
    sparse = header(1) + ROW_SPARSE + np.ones(2, np.float32).tobytes() + np.array([3], np.int64).tobytes()
    for base in (GOOD, sparse + names("w")):
        for _ in range(3000):
            data = bytearray(base)
            for i in rng.integers(0, len(data), rng.integers(1, 4)):
                data[i] = rng.choice([0, 0xFF, int(rng.integers(256)), data[i] ^ (1 << int(rng.integers(8)))])
            try:
                read_ndarray_list(bytes(data), "fuzz.params")
            except ModelLoadError as exc:
                assert "\n" not in str(exc)


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match=r"cannot read the MXNet parameters .*nope.params"):
        load_params(tmp_path / "nope.params")


def test_corrupted_params_and_symbol_through_the_cli(tmp_path):
    """Issue 20: the reader fuzz above, through ``nnvm compile`` as a user runs it (exit 0, or exit 1
    with one line, never a traceback): a FullyConnected net whose ``.params`` is truncated or flipped,
    and whose symbol JSON is truncated."""
    import json

    from nnvm_testing.frontend_onnx.fuzz import check_cli

    rng = np.random.default_rng(20)
    symbol = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                        {"op": "null", "name": "fc_weight", "inputs": []},
                        {"op": "null", "name": "fc_bias", "inputs": []},
                        {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3"},
                         "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}],
              "arg_nodes": [0, 1, 2], "node_row_ptr": [0, 1, 2, 3, 4], "heads": [[3, 0, 0]],
              "attrs": {"mxnet_version": ["int", 10901]}}
    sym_text = json.dumps(symbol)
    good = params_file(v2(X, 0), v2(np.ones(3, np.float32), 0), keys=("arg:fc_weight", "arg:fc_bias"))
    sym, params = tmp_path / "net-symbol.json", tmp_path / "net-0000.params"
    argv = ["compile", str(sym), "--shape", "data=2x4", "--target", "llvm", "-o", str(tmp_path / "m.so")]
    sym.write_text(sym_text)
    params.write_bytes(good)
    assert check_cli(argv) == 0
    for _ in range(15):
        data = bytearray(good)
        for i in rng.integers(0, len(data), rng.integers(1, 4)):
            data[i] ^= 1 << int(rng.integers(8))
        params.write_bytes(bytes(data))
        check_cli(argv)
        params.write_bytes(good[:int(rng.integers(0, len(good)))])
        assert check_cli(argv) == 1
    params.write_bytes(good)
    for cut in rng.integers(1, len(sym_text), 8):
        sym.write_text(sym_text[:int(cut)])
        check_cli(argv)
