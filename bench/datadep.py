"""Data-dependent output shapes (``nnvm.staged``): one staged compile against onnxruntime, per run.

    uv run python bench/datadep.py [--threads 1] [--repeat 30] [--rounds 5]

Five models, built here with seeded data and cached in ``~/.cache/nnvm/bench/datadep``:
``mask_select`` (``nnvm_testing.frontend_onnx.shape_models.mask_select``: 2000 boxes, about half selected,
``Greater -> NonZero -> Transpose -> GatherND`` and arithmetic), ``topk_k`` (``x`` [64, 2048], ``k`` a graph
input, 16: ``TopK`` on the host, then arithmetic) and ``range_gather`` (a length computed from a mask,
``Range(0, sum(mask))``, rows of a [4096, 64] table gathered and scaled); at a realistic size,
``nonzero_image`` (``Greater(x, 1) -> NonZero -> Transpose -> GatherND`` over ``x`` [1, 3, 224, 224],
about 16% selected) and ``topk_scores`` (``TopK`` of k = 100, a graph input, over 5000 scores).
``mask_select``'s ``count`` and ``range_gather``'s ``range_0`` are bounded to 4096 (an export plans
memory for the upper bounds). Each is compiled once by ``nnvm.compile`` (a ``StagedModule``), checked
against onnxruntime, exported (``mod.export``, one staged file) and loaded back (``nnvm.load``, checked
bit-equal to the in-process module); the three timed in blocks of their own, alternated
(``nnvm.bench.blocks_ms``); printed: medians (ms), the ratios nnvm / onnxruntime and loaded file /
in-process module, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import sys


def _models():
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from nnvm_testing.frontend_onnx.shape_models import mask_select

    rng = np.random.default_rng(0)
    out = {"mask_select": (mask_select(), {"boxes": rng.standard_normal((2000, 4)).astype(np.float32),
                                           "scores": rng.random(2000).astype(np.float32)})}
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
             helper.make_node("Mul", ["v", "two"], ["y"])]
    graph = helper.make_graph(nodes, "topk_k", [helper.make_tensor_value_info("x", T.FLOAT, [64, 2048]),
                                                helper.make_tensor_value_info("k", T.INT64, [1])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("i", T.INT64, None)],
                              [helper.make_tensor("two", T.FLOAT, [], [2.0])])
    out["topk_k"] = (helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                     {"x": rng.standard_normal((64, 2048)).astype(np.float32), "k": np.array([16], np.int64)})
    nodes = [helper.make_node("ReduceSum", ["mask"], ["len"], keepdims=0),
             helper.make_node("Range", ["zero", "len", "one"], ["pos"]),
             helper.make_node("Gather", ["table", "pos"], ["rows"]),
             helper.make_node("Mul", ["rows", "scale"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(rng.standard_normal((4096, 64)).astype(np.float32), "table"),
             numpy_helper.from_array(np.float32(0.125), "scale")]
    graph = helper.make_graph(nodes, "range_gather", [helper.make_tensor_value_info("mask", T.INT64, [4096])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    mask = (rng.random(4096) < 0.25).astype(np.int64)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out["range_gather"] = (model, {"mask": mask})
    # at a realistic size: a NonZero over an image-sized mask, a TopK of 100 over a detector's scores
    nodes = [helper.make_node("Greater", ["x", "one"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["picked"]),
             helper.make_node("Mul", ["picked", "two"], ["y"])]
    graph = helper.make_graph(nodes, "nonzero_image",
                              [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("nz", T.INT64, None)],
                              [helper.make_tensor("one", T.FLOAT, [], [1.0]),
                               helper.make_tensor("two", T.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out["nonzero_image"] = (model, {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)})
    nodes = [helper.make_node("TopK", ["scores", "k"], ["v", "i"], axis=1),
             helper.make_node("Mul", ["v", "two"], ["y"])]
    graph = helper.make_graph(nodes, "topk_scores",
                              [helper.make_tensor_value_info("scores", T.FLOAT, [1, 5000]),
                               helper.make_tensor_value_info("k", T.INT64, [1])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("i", T.INT64, None)],
                              [helper.make_tensor("two", T.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out["topk_scores"] = (model, {"scores": rng.random((1, 5000)).astype(np.float32),
                                  "k": np.array([100], np.int64)})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)  # before nnvm starts its pool

    import numpy as np
    import onnx

    import nnvm
    from nnvm.bench import blocks_ms, onnxruntime_session

    folder = os.path.join(os.path.expanduser("~"), ".cache", "nnvm", "bench", "datadep")
    os.makedirs(folder, exist_ok=True)
    print(f"threads {args.threads}, repeat {args.repeat}, rounds {args.rounds}")
    print("| model | nnvm ms | loaded file ms | onnxruntime ms | nnvm / ort | loaded / nnvm | stages | "
          "load before; after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name, (model, feeds) in _models().items():
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(model, path)
        # an export plans memory for every dim's upper bound: mask_select's count, range_gather's length
        bounds = {"mask_select": {"count": (1, 4096)}, "range_gather": {"range_0": (0, 4096)}}.get(name)
        mod = nnvm.compile(path, tuning_log=False, bounds=bounds)
        sess, _ = onnxruntime_session(path, args.threads)
        got, want = mod.run(**feeds), sess.run(None, feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (name, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)
        mod.export(os.path.join(folder, f"{name}.so"))
        loaded = nnvm.load(os.path.join(folder, f"{name}.so"))
        for g, m in zip(loaded.run(**feeds), got):
            assert g.shape == m.shape and np.array_equal(g, m), f"{name}: the loaded file differs"
        before = os.getloadavg()[0]
        ours, file, theirs = blocks_ms([lambda m=mod, f=feeds: m.run(**f),
                                        lambda m=loaded, f=feeds: m.run(**f),
                                        lambda s=sess, f=feeds: s.run(None, f)], args.repeat, args.rounds)
        after = os.getloadavg()[0]
        stages = " / ".join(s["op"] if s["kind"] == "host" else s["mode"]
                            for s in mod.stats()["symbolic"]["stages"])
        print(f"| {name} | {ours:.3f} | {file:.3f} | {theirs:.3f} | {ours / theirs:.2f}x | "
              f"{file / ours:.2f}x | {stages} | {before:.2f}; {after:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
