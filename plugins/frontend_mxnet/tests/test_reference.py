"""The MXNet reference harness itself: what it runs in MXNet agrees with numpy, and the zoo exports hold
what they claim (random BatchNorm statistics, MXNet's output for the saved input)."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm_frontend_mxnet.params import load_params, split_params
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv

FC_BN = """{"nodes": [
  {"op": "null", "name": "data", "inputs": []},
  {"op": "null", "name": "fc_weight", "inputs": []},
  {"op": "null", "name": "fc_bias", "inputs": []},
  {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3"},
   "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
  {"op": "null", "name": "bn_gamma", "inputs": []},
  {"op": "null", "name": "bn_beta", "inputs": []},
  {"op": "null", "name": "bn_moving_mean", "inputs": []},
  {"op": "null", "name": "bn_moving_var", "inputs": []},
  {"op": "BatchNorm", "name": "bn", "attrs": {"fix_gamma": "False", "eps": "0.01"},
   "inputs": [[3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 1], [7, 0, 1]]}
 ], "arg_nodes": [0, 1, 2, 4, 5, 6, 7], "heads": [[8, 0, 0], [3, 0, 0]],
 "attrs": {"mxnet_version": ["int", 10901]}}"""


def _numpy_fc_bn(x, p):
    fc = x.reshape(len(x), -1) @ p["fc_weight"].T + p["fc_bias"]
    bn = (fc - p["bn_moving_mean"]) / np.sqrt(p["bn_moving_var"] + 0.01) * p["bn_gamma"] + p["bn_beta"]
    return bn, fc


def test_mxnet_reference_agrees_with_numpy():
    rng = np.random.default_rng(0)
    p = {"fc_weight": rng.normal(size=(3, 8)), "fc_bias": rng.normal(size=3),
         "bn_gamma": rng.uniform(1, 2, 3), "bn_beta": rng.normal(size=3),
         "bn_moving_mean": rng.normal(size=3),
         "bn_moving_var": rng.uniform(0.5, 1.5, 3)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    x = rng.normal(size=(2, 2, 4)).astype(np.float32)
    prefixed = {("aux:" if "moving" in k else "arg:") + k: v for k, v in p.items()}
    cases = [(FC_BN, p, {"data": x}), (FC_BN, prefixed, {"data": x * 2})]
    results = pytest_venv(testing.mxnet_references, cases)
    for (_, _, inputs), outs in zip(cases, results):
        expected = _numpy_fc_bn(inputs["data"], p)
        assert len(outs) == 2
        for got, want in zip(outs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    again = pytest_venv(testing.mxnet_reference, *cases[0])  # now from the cache
    np.testing.assert_array_equal(again[0], results[0][0])


def test_op_json_cases():
    """``op_json`` builds per-operator cases MXNet runs: attribute strings it parses, aux states bound."""
    x = np.linspace(-3, 3, 2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5)
    pool = testing.op_json("Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                                       "pooling_convention": "full", "count_include_pad": False})
    leaky = testing.op_json("LeakyReLU", {"act_type": "leaky", "slope": 0.25})
    bn = testing.op_json("BatchNorm", {"eps": 1e-3, "fix_gamma": True}, ["data", "gamma", "beta"],
                         aux=["mean", "var"])
    stats = {"gamma": np.full(3, 5.0, np.float32), "beta": np.arange(3, dtype=np.float32),
             "mean": np.ones(3, np.float32), "var": np.full(3, 4.0, np.float32)}
    cases = [(pool, {}, {"data": x}), (leaky, {}, {"data": x}), (bn, stats, {"data": x})]
    pooled, relu, normed = (outs[0] for outs in pytest_venv(testing.mxnet_references, cases))
    assert pooled.shape == (2, 3, 3, 3)  # 'full': 1 + ceil((5 + 2 - 3) / 2)
    np.testing.assert_allclose(pooled[:, :, 0, 0], x[:, :, :2, :2].mean(axis=(2, 3)), rtol=1e-6)
    np.testing.assert_allclose(relu, np.where(x > 0, x, 0.25 * x), rtol=1e-6)
    # fix_gamma=True: gamma is read as 1 whatever is stored.
    want = (x - 1) / np.sqrt(4 + 1e-3) + np.arange(3, dtype=np.float32)[:, None, None]
    np.testing.assert_allclose(normed, want, rtol=1e-5, atol=1e-6)
    assert testing.attr_string((3,)) == "(3,)" and testing.attr_string(True) == "True"


def test_zoo_exports():
    zoo = pytest_venv(testing.zoo_models, ["resnet18_v1", "inceptionv3"])
    for name, m in zoo.items():
        arg, aux = split_params(load_params(m.params))
        means = [v for k, v in aux.items() if k.endswith("running_mean")]
        variances = [v for k, v in aux.items() if k.endswith("running_var")]
        assert means and all(np.abs(v).max() > 0 for v in means), name  # not the zeros gluon starts from
        assert all(not np.allclose(v, 1) for v in variances), name
        x = np.load(m.input)
        assert x.shape == ((1, 3, 299, 299) if name == "inceptionv3" else (1, 3, 224, 224))
        out = np.load(m.output)
        assert out.shape == (1, 1000) and np.isfinite(out).all() and out.std() > 0
    with pytest.raises(ValueError, match="not in the zoo list"):
        testing.zoo_models(["resnet1000"])
