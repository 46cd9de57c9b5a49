"""``nnvm-backend-metal`` installs alone next to the core (a real, non-editable install into a fresh venv;
on Linux without pyobjc), is listed by ``nnvm plugins``, and builds and runs a tensor expression for
``metal`` there (on a Mac natively, elsewhere on the CPU runner with clang), checked against numpy."""

from __future__ import annotations

import json

SCRIPT = """
import numpy as np, nnvm
from nnvm import te
A = te.placeholder((256,), name="A")
B = te.compute((256,), lambda i: A[i] * 2.0 + 1.0, name="B")
s = te.create_schedule(B.op)
xo, xi = s[B].split(B.op.axis[0], factor=64)
s[B].bind(xo, "blockIdx.x")
s[B].bind(xi, "threadIdx.x")
f = nnvm.build(s, [A, B], target="metal")
a = np.random.default_rng(0).standard_normal(256).astype("float32")
b = np.zeros_like(a)
f(a, b)
print(float(np.max(np.abs(b - (a * 2 + 1)))))
"""


def test_metal_plugin_alone_next_to_the_core(fresh_venv, run_in):
    bin_dir = fresh_venv("core", "plugins/backend_metal")
    proc = run_in(bin_dir, "nnvm", "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    backends = {(row["name"], row["distribution"]) for row in json.loads(proc.stdout)["backend"]}
    assert backends == {("metal", "nnvm-backend-metal")}, f"nnvm plugins lists {backends}"
    proc = run_in(bin_dir, "python", "-c", SCRIPT)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip()) < 1e-6
