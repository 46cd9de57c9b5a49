"""A large output is copied out of the arena into a buffer an earlier run handed out once nothing else
refers to it (``_Workspace._copy_out``): results stay independent of later runs, numbers checked
against numpy."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import nnvm

SHAPE = (512, 1024)  # 2 MiB of float32: over RECYCLE_MIN_BYTES


def _doubling_model():
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return nnvm.compile(model, target="llvm")


def test_results_held_are_never_overwritten_and_dropped_ones_are_reused():
    mod = _doubling_model()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(6)]
    held = [mod.run(x)[0] for x in xs[:3]]  # three results alive at once
    view = mod.run(xs[3])[0][:4]  # only a view of the fourth kept: its buffer stays taken
    for x, y in zip(xs, held):
        np.testing.assert_array_equal(y, x + x)
    np.testing.assert_array_equal(view, (xs[3] + xs[3])[:4])
    addresses = {y.ctypes.data for y in held} | {view.base.ctypes.data}
    assert len(addresses) == 4  # four distinct buffers

    del held
    last = None
    seen = set()
    for x in xs * 2:  # the usual loop: the last result held while the next is asked for
        last = mod.run(x)[0]
        np.testing.assert_array_equal(last, x + x)
        seen.add(last.ctypes.data)
    (ws,) = mod._free  # one run at a time: one workspace
    assert any(buf is last for buf in ws.recycled[0])  # handed out from the recycled buffers
    assert len(seen) <= 3  # which come round again instead of a fresh one each run
    np.testing.assert_array_equal(view, (xs[3] + xs[3])[:4])  # still untouched by the runs after it
