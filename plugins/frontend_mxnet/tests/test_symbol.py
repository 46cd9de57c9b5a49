"""The symbol JSON parser against MXNet 1.9.1 itself: the model zoo it exports, and legacy files as MXNet
loads and upgrades them (``mx.sym.load(...).tojson()``, its ``list_arguments``/``list_auxiliary_states``).
"""

from __future__ import annotations

import json
import re

import pytest

from nnvm.errors import ModelLoadError
from nnvm_frontend_mxnet.params import load_params, split_params
from nnvm_frontend_mxnet.symbol import Symbol, load_symbol, loads_symbol, parse_attr
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv


@pytest.fixture(scope="module")
def zoo():
    return pytest_venv(testing.zoo_models)


def _mxnet_view(texts: list[str]) -> list[dict]:
    views = pytest_venv(testing.mxnet_symbols, texts)
    for view in views:
        assert "error" not in view, view
    return views


def _names_by_kind(sym: Symbol, kinds: dict[str, str]) -> tuple[list[str], list[str]]:
    variables = [sym.nodes[i].name for i in sym.variables]
    return [v for v in variables if kinds[v] != "aux"], [v for v in variables if kinds[v] == "aux"]


def test_zoo_symbols_as_mxnet_sees_them(zoo):
    texts = {name: m.symbol.read_text() for name, m in zoo.items()}
    views = dict(zip(texts, _mxnet_view(list(texts.values()))))
    identifier = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
    for name, m in zoo.items():
        sym = load_symbol(m.symbol)
        view = views[name]
        assert sym.version == 10901
        arguments, aux = _names_by_kind(sym, sym.classify())
        assert arguments == view["arguments"], name
        assert aux == view["aux"] == sym.aux_names, name
        assert len(sym.heads) == len(view["outputs"])
        # The parameters MXNet exported say which variables are weights and which are aux states.
        arg_params, aux_params = split_params(load_params(m.params))
        kinds = sym.classify(list(arg_params) + list(aux_params))
        assert sorted(k for k, v in kinds.items() if v == "weight") == sorted(arg_params), name
        assert sorted(k for k, v in kinds.items() if v == "aux") == sorted(aux_params), name
        assert [k for k, v in kinds.items() if v == "data"] == ["data"], name
        row_ptr = json.loads(texts[name])["node_row_ptr"]
        assert [n.num_outputs for n in sym.nodes] == [b - a for a, b in zip(row_ptr, row_ptr[1:])]
        for node in sym.nodes:
            if node.op == "BatchNorm":
                assert node.num_outputs == 3 and isinstance(node.attrs["fix_gamma"], bool)
            if node.op == "Convolution":
                assert isinstance(node.attrs["kernel"], tuple) and isinstance(node.attrs["num_filter"], int)
            for key, value in node.attrs.items():  # every string left is a word such as "relu" or "NCHW"
                assert not isinstance(value, str) or identifier.match(value), (name, node.name, key, value)


# Legacy files, written as MXNet 0.8 and 0.9 wrote them: "param"/"attr" keys, two-element inputs, no
# mxnet_version, no aux variables before 0.9, argmax axis=-1 meaning "no axis" before 0.9.5.
LEGACY_080 = """{
  "nodes": [
    {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
    {"op": "null", "param": {}, "name": "conv0_weight", "inputs": [], "backward_source_id": -1,
     "attr": {"lr_mult": "2"}},
    {"op": "Convolution", "param": {"kernel": "(3, 3)", "num_filter": "4", "no_bias": "True",
     "pad": "(1, 1)"}, "name": "conv0", "inputs": [[0, 0], [1, 0]], "backward_source_id": -1,
     "attr": {"ctx_group": "stage1"}},
    {"op": "null", "param": {}, "name": "bn0_gamma", "inputs": [], "backward_source_id": -1},
    {"op": "null", "param": {}, "name": "bn0_beta", "inputs": [], "backward_source_id": -1},
    {"op": "BatchNorm", "param": {"eps": "0.001", "fix_gamma": "False"}, "name": "bn0",
     "inputs": [[2, 0], [3, 0], [4, 0]], "backward_source_id": -1},
    {"op": "Activation", "param": {"act_type": "relu"}, "name": "relu0", "inputs": [[5, 0]],
     "backward_source_id": -1},
    {"op": "Pooling", "param": {"kernel": "(2, 2)", "stride": "(2, 2)", "pool_type": "max",
     "pooling_convention": "full"}, "name": "pool0", "inputs": [[6, 0]], "backward_source_id": -1},
    {"op": "argmax", "param": {"axis": "-1"}, "name": "am", "inputs": [[7, 0]], "backward_source_id": -1}
  ],
  "arg_nodes": [0, 1, 3, 4],
  "heads": [[7, 0], [8, 0]]
}"""

LEGACY_090 = """{
  "nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "fc_weight", "inputs": []},
    {"op": "null", "name": "fc_bias", "inputs": []},
    {"op": "FullyConnected", "attr": {"num_hidden": "3"}, "name": "fc", "inputs": [[0, 0, 0], [1, 0, 0],
     [2, 0, 0]]},
    {"op": "null", "name": "bn_gamma", "inputs": []},
    {"op": "null", "name": "bn_beta", "inputs": []},
    {"op": "null", "name": "bn_moving_mean", "attr": {"__init__": "[\\"zero\\", {}]"}, "inputs": []},
    {"op": "null", "name": "bn_moving_var", "attr": {"__init__": "[\\"one\\", {}]"}, "inputs": []},
    {"op": "BatchNorm", "attr": {"fix_gamma": "True"}, "name": "bn", "inputs": [[3, 0, 0], [4, 0, 0],
     [5, 0, 0], [6, 0, 1], [7, 0, 1]]},
    {"op": "argmax", "attr": {"axis": "-1", "keepdims": "False"}, "name": "am", "inputs": [[8, 0, 0]]},
    {"op": "SliceChannel", "attr": {"num_outputs": "3", "axis": "1"}, "name": "split", "inputs": [[8, 0, 0]]},
    {"op": "Dropout", "attr": {"p": "0.5"}, "name": "drop", "inputs": [[10, 2, 0]]}
  ],
  "arg_nodes": [0, 1, 2, 4, 5, 6, 7],
  "heads": [[9, 0, 0], [10, 0, 0], [11, 0, 0]],
  "attrs": {"mxnet_version": ["int", 903]}
}"""

# The current form with the same graph as LEGACY_090 but version 1.9.1: argmax keeps axis=-1.
MODERN = LEGACY_090.replace('"attr"', '"attrs"').replace('["int", 903]', '["int", 10901]')


def _structure(sym: Symbol) -> list:
    return [(n.op, n.name, n.attrs, n.inputs, n.num_outputs) for n in sym.nodes]


LEGACY = {"0.8.0": LEGACY_080, "0.9.3": LEGACY_090, "1.9.1": MODERN}


@pytest.fixture(scope="module")
def legacy_views():
    """MXNet's reading of every legacy text, in one MXNet process (each start costs seconds)."""
    return dict(zip(LEGACY, _mxnet_view(list(LEGACY.values()))))


@pytest.mark.parametrize("version", LEGACY)
def test_legacy_files_read_as_mxnet_upgrades_them(legacy_views, version):
    text, view = LEGACY[version], legacy_views[version]
    ours, upgraded = loads_symbol(text, "legacy.json"), loads_symbol(view["json"], "upgraded.json")
    assert _structure(ours) == _structure(upgraded)
    assert ours.heads == upgraded.heads
    assert ours.arg_nodes == upgraded.arg_nodes
    arguments, aux = _names_by_kind(ours, ours.classify())
    assert arguments == view["arguments"] and aux == view["aux"] == ours.aux_names


def test_legacy_details():
    old = loads_symbol(LEGACY_080)
    assert old.version == 800
    bn = next(n for n in old.nodes if n.op == "BatchNorm")
    assert [old.nodes[i].name for i, _ in bn.inputs][3:] == ["bn0_moving_mean", "bn0_moving_var"]
    assert "axis" not in next(n for n in old.nodes if n.op == "argmax").attrs  # -1 meant "all axes"
    conv = next(n for n in old.nodes if n.op == "Convolution")
    assert conv.attrs == {"kernel": (3, 3), "num_filter": 4, "no_bias": True, "pad": (1, 1)}
    assert conv.hidden == {"__ctx_group__": "stage1"}
    assert next(n for n in old.nodes if n.op == "Pooling").num_outputs == 2  # no node_row_ptr: MXNet's count
    modern = loads_symbol(MODERN)
    assert next(n for n in modern.nodes if n.op == "argmax").attrs["axis"] == -1
    assert next(n for n in modern.nodes if n.op == "SliceChannel").num_outputs == 3


@pytest.mark.parametrize("text, value", [
    ("(3, 3)", (3, 3)), ("(3,)", (3,)), ("()", ()), ("[1, 2]", (1, 2)), ("(3L, 3L)", (3, 3)),
    ("True", True), ("false", False), ("None", None), ("1e-05", 1e-05), ("-1", -1), ("0.9", 0.9),
    ("inf", float("inf")), ("(None, 2)", (None, 2)), ("(1.5, -inf)", (1.5, float("-inf"))),
    ("relu", "relu"), ("float32", "float32"), ("NCHW", "NCHW"), ("", ""), ("(a, b)", "(a, b)"),
])
def test_parse_attr(text, value):
    assert parse_attr(text) == value and type(parse_attr(text)) is type(value)


def _with(**changes) -> str:
    obj = json.loads(MODERN)
    for path, value in changes.items():
        target = obj
        *parents, last = path.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        target[int(last) if last.isdigit() else last] = value
    return json.dumps(obj)


MALFORMED = {
    "truncated": (MODERN[: len(MODERN) // 2], "it is not JSON"),
    "not json": ("\x89PNG", "it is not JSON"),
    "no nodes": ('{"heads": []}', "no 'nodes' list and 'heads'"),
    "a list": ("[1, 2]", "no 'nodes' list and 'heads'"),
    "node not a dict": (_with(nodes__3="fc"), "node 3 has no string 'op' and 'name'"),
    "attrs not strings": (_with(nodes__3__attrs={"num_hidden": 3}),
                          "node 3 (fc) has 'attrs' that is not a map"),
    "input out of range": (_with(nodes__3__inputs=[[0, 0, 0], [99, 0, 0]]), "refers to node 99"),
    "input later node": (_with(nodes__3__inputs=[[0, 0, 0], [5, 0, 0]]), "does not come before it"),
    "input not a pair": (_with(nodes__3__inputs=[[0]]), "input 0 of node 3 (fc) is [0]"),
    "head out of range": (_with(heads=[[42, 0, 0]]), "head 0 refers to node 42"),
    "no heads": (_with(heads=[]), "'heads' is not a non-empty list"),
    "bad row ptr": (_with(node_row_ptr=[0, 1, 2]), "'node_row_ptr' is not 13 ascending counts"),
    "hidden output": (_with(heads=[[3, 1, 0]], node_row_ptr=list(range(13))), "used at output 1 but has 1"),
    "bad version": (_with(attrs={"mxnet_version": ["int", "x"]}), "its mxnet_version is"),
    "arg node not a variable": (_with(arg_nodes=[3]), "'arg_nodes' names nodes that are not variables"),
    "variable with inputs": (_with(nodes__1__inputs=[[0, 0, 0]]), "variable node 1 (fc_weight) has inputs"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_symbol_is_one_sentence(tmp_path, case):
    text, expected = MALFORMED[case]
    path = tmp_path / "net-symbol.json"
    path.write_text(text)
    with pytest.raises(ModelLoadError) as info:
        load_symbol(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and expected in msg, msg


def _paths(obj, prefix=()):
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from _paths(value, (*prefix, key))


@pytest.mark.parametrize("text", [MODERN, LEGACY_080], ids=["1.9.1", "0.8.0"])
def test_any_wrong_value_anywhere_is_one_sentence(text):
    """Every value of the file replaced by each of a dozen wrong ones: a ModelLoadError or a parse."""
    wrong = [None, -1, 0, 7, 10**9, "x", "(3, 3)", [], {}, [1], [[1, 2]], [[0, 0, 0, 0]], True, 1.5]
    for path in list(_paths(json.loads(text)))[1:]:
        for value in wrong:
            obj = json.loads(text)
            target = obj
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            try:
                loads_symbol(json.dumps(obj), "fuzz.json")
            except ModelLoadError as exc:
                assert "\n" not in str(exc)


def test_missing_symbol_file(tmp_path):
    with pytest.raises(ModelLoadError, match=r"cannot read the MXNet symbol .*nope-symbol.json"):
        load_symbol(tmp_path / "nope-symbol.json")
