"""User mistakes are one sentence naming the file, node or input (exit 1 from the CLI), never a
traceback; and the ways a model reaches the frontend: ``-symbol.json`` with the latest ``.params`` beside
it, ``params=``, an in-memory ``(symbol, arg_params, aux_params)`` read by duck typing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nnvm
from nnvm.errors import InputError, ModelLoadError, UnsupportedOperatorError
from nnvm.frontend import ConvertError
from nnvm_frontend_mxnet.importer import load_mxnet
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv


class FakeSymbol:
    def __init__(self, text):
        self.text = text

    def tojson(self):
        return self.text


class FakeNDArray:
    """What nnvm needs of an ``mx.nd.NDArray``: ``asnumpy()``."""

    def __init__(self, value):
        self.value = value

    def asnumpy(self):
        return self.value


def _symbol(ops) -> str:
    """``data`` through a chain of ``(op, name, attrs)`` nodes."""
    nodes = [{"op": "null", "name": "data", "inputs": []}]
    for op, name, attrs in ops:
        nodes.append({"op": op, "name": name, "attrs": attrs, "inputs": [[len(nodes) - 1, 0, 0]]})
    return json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[len(nodes) - 1, 0, 0]],
                       "attrs": {"mxnet_version": ["int", 10901]}})


IMAGE = "data=1x3x224x224"
FC_BN = json.dumps({"nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "fc_weight", "inputs": []},
    {"op": "null", "name": "fc_bias", "inputs": []},
    {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3"},
     "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
    *({"op": "null", "name": f"bn_{k}", "inputs": []}
      for k in ("gamma", "beta", "moving_mean", "moving_var")),
    {"op": "BatchNorm", "name": "bn", "attrs": {},
     "inputs": [[3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 1], [7, 0, 1]]}],
    "arg_nodes": [0, 1, 2, 4, 5, 6, 7], "heads": [[8, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}})


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def resnet18(tmp_path_factory):
    return pytest_venv(testing.zoo_models, ["resnet18_v1"])["resnet18_v1"]


def test_unsupported_operators_are_listed_at_once_in_one_sentence(tmp_path):
    sym = _symbol([("relu", "r1", {}), ("_contrib_ROIAlign", "roi1", {}), ("Frobnicate", "frob1", {}),
                   ("_contrib_ROIAlign", "roi2", {}), ("relu", "r2", {})])
    with pytest.raises(UnsupportedOperatorError) as err:
        load_mxnet((FakeSymbol(sym), {}, {}), shapes={"data": (1, 4)})
    assert str(err.value) == ("the MXNet model uses 2 unsupported operators: Frobnicate (nodes: frob1); "
                              "_contrib_ROIAlign (nodes: roi1, roi2)")
    path = tmp_path / "net-symbol.json"
    path.write_text(sym)
    empty = tmp_path / "net-0000.params"
    empty.write_bytes((0x112).to_bytes(8, "little") + bytes(8) + bytes(8) + bytes(8))  # an empty list
    proc = _cli("compile", str(path), "--target", "llvm", "--shape", "data=1x4")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"in {path} uses 2 unsupported operators: Frobnicate (nodes: frob1); _contrib_ROI" in proc.stderr


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.5, 0.999])
def test_truncated_params_is_one_sentence_exit_1(tmp_path, resnet18, fraction):
    shutil.copy(resnet18.symbol, tmp_path / "net-symbol.json")
    data = resnet18.params.read_bytes()
    (tmp_path / "net-0000.params").write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelLoadError) as err:
        nnvm.load_model(str(tmp_path / "net-symbol.json"), shapes={"data": (1, 3, 224, 224)})
    assert "net-0000.params" in str(err.value) and "\n" not in str(err.value)
    proc = _cli("compile", str(tmp_path / "net-symbol.json"), "--target", "llvm", "--shape", IMAGE)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "net-0000.params" in proc.stderr


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.999])
def test_truncated_symbol_json_is_one_sentence_exit_1(tmp_path, resnet18, fraction):
    text = resnet18.symbol.read_bytes()
    (tmp_path / "net-symbol.json").write_bytes(text[: int(len(text) * fraction)])
    shutil.copy(resnet18.params, tmp_path / "net-0000.params")
    with pytest.raises(ModelLoadError) as err:
        load_mxnet(str(tmp_path / "net-symbol.json"), shapes={"data": (1, 3, 224, 224)})
    assert "net-symbol.json" in str(err.value) and "\n" not in str(err.value)
    proc = _cli("compile", str(tmp_path / "net-symbol.json"), "--target", "llvm", "--shape", IMAGE)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "net-symbol.json" in proc.stderr


def test_latest_epoch_params_and_params_option(tmp_path, resnet18):
    shutil.copy(resnet18.symbol, tmp_path / "net-symbol.json")
    (tmp_path / "net-0001.params").write_bytes(b"not params")
    shutil.copy(resnet18.params, tmp_path / "net-0012.params")  # the latest epoch wins
    shapes = {"data": (1, 3, 224, 224)}
    graph, params = nnvm.load_model(str(tmp_path / "net-symbol.json"), shapes=shapes)
    assert graph.types[graph.outputs[0]].shape == (1, 1000)
    with pytest.raises(ModelLoadError, match="net-0001.params"):
        nnvm.load_model(str(tmp_path / "net-symbol.json"), shapes=shapes,
                        params=str(tmp_path / "net-0001.params"))
    os.remove(tmp_path / "net-0012.params")
    os.remove(tmp_path / "net-0001.params")
    with pytest.raises(ModelLoadError, match="no parameters beside .*net-symbol.json"):
        nnvm.load_model(str(tmp_path / "net-symbol.json"), shapes=shapes)
    with pytest.raises(nnvm.Error, match="the mxnet frontend takes no option 'epoch'"):
        nnvm.load_model(str(tmp_path / "net-symbol.json"), shapes=shapes, epoch=3)
    # any .json holding MXNet nodes is recognised by its content
    shutil.copy(resnet18.symbol, tmp_path / "plain.json")
    shutil.copy(resnet18.params, tmp_path / "plain-0000.params")
    graph, _ = nnvm.load_model(str(tmp_path / "plain.json"), shapes=shapes)
    assert graph.types[graph.outputs[0]].shape == (1, 1000)


def test_in_memory_symbol_and_ndarrays_by_duck_typing():
    """``(symbol, arg_params, aux_params)`` as a user's mxnet holds them, checked against numpy."""
    rng = np.random.default_rng(0)
    sym = FC_BN
    p = {"fc_weight": rng.normal(size=(3, 8)), "fc_bias": rng.normal(size=3),
         "bn_gamma": rng.uniform(1, 2, 3), "bn_beta": rng.normal(size=3),
         "bn_moving_mean": rng.normal(size=3), "bn_moving_var": rng.uniform(1, 2, 3)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    arg = {k: FakeNDArray(v) for k, v in p.items() if "moving" not in k}
    aux = {k: FakeNDArray(v) for k, v in p.items() if "moving" in k}
    x = rng.normal(size=(2, 2, 4)).astype(np.float32)
    mod = nnvm.compile((FakeSymbol(sym), arg, aux), target="llvm", shapes={"data": x.shape})
    (got,) = mod.run(x)
    fc = x.reshape(2, -1) @ p["fc_weight"].T + p["fc_bias"]
    # fix_gamma defaults to True (gamma read as 1), eps to 1e-3
    want = (fc - p["bn_moving_mean"]) / np.sqrt(p["bn_moving_var"] + 1e-3) + p["bn_beta"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_input_and_node_errors_name_what_is_wrong():
    sym = _symbol([("Dropout", "drop1", {"p": "0.5", "mode": "always"})])
    with pytest.raises(ConvertError, match=r"^node drop1 \(Dropout\): mode='always'"):
        load_mxnet((FakeSymbol(sym), {}, {}), shapes={"data": (1, 4)})
    sym = _symbol([("relu", "r1", {})])
    with pytest.raises(InputError, match="input 'data' of the MXNet model has no declared shape; pass"):
        load_mxnet((FakeSymbol(sym), {}, {}))
    with pytest.raises(InputError, match="shapes= names 'date', which is not an input"):
        load_mxnet((FakeSymbol(sym), {}, {}), shapes={"date": (1, 4)})
    sym = _symbol([("Reshape", "resh", {"shape": "(5, -1)"})])
    with pytest.raises(ConvertError, match=r"^node resh \(Reshape\): shape=\(5, -1\) gives"):
        load_mxnet((FakeSymbol(sym), {}, {}), shapes={"data": (2, 4)})
    weights = {k: np.ones(3, np.float32) for k in ("fc_bias", "bn_gamma", "bn_beta")}
    aux = {k: np.ones(3, np.float32) for k in ("bn_moving_mean", "bn_moving_var")}
    with pytest.raises(ModelLoadError, match="the parameter 'fc_weight' has no value"):
        load_mxnet((FakeSymbol(FC_BN), {**weights, "fc_weight": None}, aux), shapes={"data": (1, 2, 5, 5)})
    with pytest.raises(ModelLoadError, match="the parameters hold no 'fc_weight', which node fc "
                                             r"\(FullyConnected\) reads"):
        load_mxnet((FakeSymbol(FC_BN), weights, aux), shapes={"data": (1, 2, 5, 5)})


def test_plugins_lists_mxnet():
    proc = _cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    rows = info["frontend"]
    assert any(row["name"] == "mxnet" and row["distribution"] == "nnvm-frontend-mxnet" for row in rows)
