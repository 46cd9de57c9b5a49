"""1x1 convolutions tiled over their flattened plane (``flat_plane`` of ``cpu.conv2d_nchwc.direct``).

A 1x1 stride-1 unpadded convolution may walk its H x W output plane as one row of H * W pixels, so a
register tile spans rows (MobileNetV2's 7x7 planes: 49 pixels in tiles of 5, not 7-pixel rows in tiles
of 3, 3 and 1). These force the knob on shapes with a partial last tile of pixels, one and several
channel blocks in either unrolled order, an epilogue (bias -> relu, a residual add) and none, batch 1
and 3, and compare with onnxruntime; then check which layers the fallback flattens.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu import templates
from nnvm.cpu.cost_model import machine_of, register_tile
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template


def _model(path, batch, c, h, w, oc, epilogue):
    """A 1x1 Conv of ``batch x c x h x w`` to ``oc`` channels, then ``epilogue``: ``none`` (no bias),
    ``relu`` (bias -> relu) or ``add`` (bias -> relu -> + r)."""
    rng = np.random.default_rng(c * 7 + oc)
    weight = (rng.standard_normal((oc, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, h, w])]
    feeds = {"x": rng.standard_normal((batch, c, h, w)).astype(np.float32)}
    if epilogue == "none":
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b"))
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
                 helper.make_node("Relu", ["c"], ["y" if epilogue == "relu" else "t"])]
        if epilogue == "add":
            nodes.append(helper.make_node("Add", ["t", "r"], ["y"]))
            inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, oc, h, w]))
            feeds["r"] = rng.standard_normal((batch, oc, h, w)).astype(np.float32)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "conv1x1", inputs, [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path, feeds


def _forcing(monkeypatch, config: dict) -> None:
    """Make the NCHW[x]c template's fallback ``config`` (overriding the keys it names)."""
    def forced(target, group):
        template = conv2d_nchwc_template(target, group)
        if template is not None:
            assert "flat_plane" in template.space, "the knob is offered for every 1x1 stride-1 unpadded conv"
            template.fallback.update(config)
        return template

    builders = [forced if b is conv2d_nchwc_template else b for b in templates.TEMPLATE_BUILDERS]
    monkeypatch.setattr(templates, "TEMPLATE_BUILDERS", builders)


# (input channels, h, w, output channels, pixels per tile, channel blocks per tile): a partial last tile
# of pixels on 7x7 and 5x9, tiles longer than a row, one block, blocks outside pixels (4 x 2: pixel-major
# is ow >= blocks) and inside them (2 x 3)
FORCED = [(48, 7, 7, 32, 5, 2), (32, 5, 9, 48, 4, 3), (24, 3, 3, 16, 8, 1), (16, 7, 7, 48, 2, 3),
          (40, 6, 4, 32, 12, 1)]


@pytest.mark.parametrize("epilogue", ["none", "relu", "add"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("shape", FORCED, ids=["x".join(map(str, s)) for s in FORCED])
def test_flat_plane_matches_onnxruntime(tmp_path, monkeypatch, isa_target, shape, batch, epilogue):
    """Each forced tile at each vector width (every shape is whole groups of blocks at 8 and 16 lanes),
    run where this machine runs the width's code."""
    c, h, w, oc, ow_block, oc_blocks = shape
    path, feeds = _model(str(tmp_path / "conv.onnx"), batch, c, h, w, oc, epilogue)
    blocks = -(-oc // vector_lanes(optimized_graph(path, isa_target.build)[1]))
    assert blocks % oc_blocks == 0, f"{oc} channels are not {oc_blocks}-block groups at {isa_target.isa}"
    _forcing(monkeypatch, {"flat_plane": True, "ow_block": ow_block, "oc_blocks": oc_blocks,
                           "parallel": "n_oc" if batch > 1 else "oc"})
    mod = nnvm.compile(path, target=isa_target.build, tuning_log=False)
    if isa_target.run is None:
        return  # an AVX2 machine: the AVX-512 code compiled, run where it is the host's
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = mod.run(**feeds)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{shape} batch {batch} {epilogue} {isa_target.run}: max relative error {err:.2e}"


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"],
                         ids=["avx2", "avx512"])
def test_flat_plane_compiles_for_either_vector_width(tmp_path, monkeypatch, target):
    """The flattened schedule lowers and compiles at 8 and 16 lanes (AVX-512 cannot run on every host)."""
    path, _ = _model(str(tmp_path / "conv.onnx"), 1, 64, 7, 7, 128, "add")
    _forcing(monkeypatch, {"flat_plane": True, "ow_block": 5, "oc_blocks": 2, "parallel": "oc"})
    assert nnvm.compile(path, target=target, tuning_log=False) is not None


def _fallback(path, target):
    from nnvm.compiler import group_compute

    graph, tgt, *_ = optimized_graph(path, target)
    by_name = {n.name: n for n in graph.nodes}
    k = next(k for k, g in enumerate(graph.groups) if any(by_name[n].op == "conv2d_nchwc" for n in g))
    group = group_compute(graph, k, [by_name[n] for n in graph.groups[k]])
    return tgt, conv2d_nchwc_template(tgt, group).fallback


@pytest.mark.parametrize("batch", [1, 8])
def test_avx2_fallback_flattens_7x7_planes_with_partial_row_tiles(tmp_path, cpu_switch, batch):
    """On AVX2, MobileNetV2's 960 -> 160 on 7x7 (20 blocks: 3 x 4 tiles on 7-pixel rows, one of them a
    single pixel) takes 5 x 2 tiles over the 49-pixel plane (measured 1.12x faster); 160 -> 960 (4 x 3
    on rows: measured level) and 14x14 planes (mixed, -3% to +1%) keep their rows. Off with
    ``cpu_switches={"flat_plane": "0"}``."""
    path, _ = _model(str(tmp_path / "a.onnx"), batch, 960, 7, 7, 160, "relu")
    tgt, flat = _fallback(path, "llvm -mcpu=haswell")
    tile = register_tile(machine_of(tgt), 49, 20, max_ow=12)
    assert flat["flat_plane"]
    assert (flat["ow_block"], flat["oc_blocks"]) == (tile.ow_block, tile.oc_blocks) == (5, 2)
    assert flat["parallel"] == ("n_oc" if batch > 1 else "oc")
    cpu_switch("flat_plane", "0")
    assert not _fallback(path, "llvm -mcpu=haswell")[1]["flat_plane"]
    cpu_switch("flat_plane", None)
    for c, hw, oc in [(160, 7, 960), (576, 14, 96), (96, 14, 576)]:
        path, _ = _model(str(tmp_path / "b.onnx"), batch, c, hw, hw, oc, "relu")
        assert not _fallback(path, "llvm -mcpu=haswell")[1]["flat_plane"], (c, hw, oc)


def test_avx512_fallback_keeps_rows(tmp_path):
    """32 registers fill 7-pixel rows without a partial tile: nothing flattens there (not measured)."""
    path, _ = _model(str(tmp_path / "a.onnx"), 1, 960, 7, 7, 160, "relu")
    assert not _fallback(path, "llvm -mcpu=skylake-avx512")[1]["flat_plane"]


def test_strided_1x1_has_no_flat_plane(tmp_path):
    """A strided 1x1 reads every other pixel: its input index is no affine function of the flat pixel."""
    path = str(tmp_path / "s.onnx")
    weight = numpy_helper.from_array(np.ones((32, 16, 1, 1), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2])], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    assert "flat_plane" not in _fallback(path, "llvm -mcpu=haswell")[1]
