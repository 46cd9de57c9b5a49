"""Run inside the MXNet 1.9.1 reference venv (never imported by nnvm): exports gluon model-zoo nets.

    python mxnet_zoo.py OUTDIR NAME...

writes, for each NAME, NAME-symbol.json and NAME-0000.params (``hybridize()`` + ``export()``), a seeded
input NAME-input.npy and MXNet's output for it, NAME-output.npy. Weights and BatchNorm statistics are
random with a seed fixed per net, so the files are the same on every machine and in any order.
"""

from __future__ import annotations

import os
import sys
import time

import mxnet as mx
import numpy as np

ZOO_SHAPES = {"inceptionv3": (1, 3, 299, 299)}


def _randomize(net, rng: np.random.RandomState) -> None:
    """Weights He-normal by fan-in (deep nets stay finite), biases small, and BatchNorm's gamma, beta,
    running mean and variance all random: zero means and unit variances would hide a wrong formula."""
    for name, param in sorted(net.collect_params().items()):
        shape = param.shape
        if name.endswith("running_var") or name.endswith("moving_var"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("running_mean") or name.endswith("moving_mean"):
            value = rng.normal(0, 0.1, shape)
        elif name.endswith("gamma"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("beta") or name.endswith("bias"):
            value = rng.normal(0, 0.1, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            value = rng.normal(0, np.sqrt(2.0 / fan_in), shape)
        param.set_data(mx.nd.array(value.astype(np.float32)))


def zoo(outdir: str, names: list[str]) -> None:
    from mxnet.gluon.model_zoo import vision

    for name in names:
        started = time.perf_counter()
        seed = sum(map(ord, name))  # fixed per net, independent of the order they are asked for
        mx.random.seed(seed)
        rng = np.random.RandomState(seed)
        shape = ZOO_SHAPES.get(name, (1, 3, 224, 224))
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        net = vision.get_model(name, pretrained=False)
        net.initialize()
        net(mx.nd.array(x))  # finishes deferred initialisation: every shape known
        _randomize(net, rng)
        net.hybridize()
        out = net(mx.nd.array(x)).asnumpy()
        prefix = os.path.join(outdir, name)
        net.export(prefix, epoch=0)
        np.save(prefix + "-input.npy", x)
        np.save(prefix + "-output.npy", out)
        print(f"{name}: {time.perf_counter() - started:.1f}s", file=sys.stderr)




if __name__ == "__main__":
    zoo(sys.argv[1], sys.argv[2:])
