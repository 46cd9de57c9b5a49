"""Each GPU language plugin (``nnvm-backend-cuda``, ``nnvm-backend-metal``, ``nnvm-backend-webgpu``) installs
alone next to the core (a real, non-editable install into a fresh venv; Metal on Linux without pyobjc), is
listed by ``nnvm plugins``, and builds and runs a tensor expression for its target there (natively on its
GPU, elsewhere on the CPU runner: CUDA as host C++, Metal as C++ with clang; WebGPU on wgpu-native, here
on lavapipe), checked against numpy."""

from __future__ import annotations

import json

import pytest

SCRIPT = """
import sys
import numpy as np, nnvm
from nnvm import te
A = te.placeholder((256,), name="A")
B = te.compute((256,), lambda i: A[i] * 2.0 + 1.0, name="B")
s = te.create_schedule(B.op)
xo, xi = s[B].split(B.op.axis[0], factor=64)
s[B].bind(xo, "blockIdx.x")
s[B].bind(xi, "threadIdx.x")
f = nnvm.build(s, [A, B], target=sys.argv[1])
a = np.random.default_rng(0).standard_normal(256).astype("float32")
b = np.zeros_like(a)
f(a, b)
print(float(np.max(np.abs(b - (a * 2 + 1)))))
"""

PLUGINS = [  # (folder, backend name, distribution, target)
    ("plugins/backend_cuda", "cuda", "nnvm-backend-cuda", "cuda -arch=sm_80"),
    ("plugins/backend_metal", "metal", "nnvm-backend-metal", "metal"),
    ("plugins/backend_webgpu", "webgpu", "nnvm-backend-webgpu", "webgpu"),
]


@pytest.mark.parametrize(("folder", "name", "distribution", "target"), PLUGINS, ids=[p[1] for p in PLUGINS])
def test_gpu_plugin_alone_next_to_the_core(fresh_venv, run_in, folder, name, distribution, target):
    bin_dir = fresh_venv("core", folder)
    proc = run_in(bin_dir, "nnvm", "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    backends = {(row["name"], row["distribution"]) for row in json.loads(proc.stdout)["backend"]}
    assert backends == {(name, distribution)}, f"nnvm plugins lists {backends}"
    proc = run_in(bin_dir, "python", "-c", SCRIPT, target)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip()) < 1e-6
