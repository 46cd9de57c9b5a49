"""Generators of hostile input for the fuzz tests (``tests/test_fuzz_inputs.py``) and ``scripts/fuzz.py``.

Each generator takes Hypothesis's ``draw`` (``st.data().draw``), so the same code serves a seeded
test with a small budget and a long random campaign. ``check_cli`` is the oracle: the command line,
run in this process, exits 0, or exits 1 with exactly one line on stderr and no traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import numpy as np
from hypothesis import strategies as st


def base_models(folder: str) -> dict:
    """A small conv model (and a second one to splice with), written to ``folder``, with an input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(20)

    def model(cout: int):
        inits = [numpy_helper.from_array(rng.standard_normal((cout, 2, 3, 3)).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal((cout,)).astype(np.float32), "b"),
                 numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 helper.make_node("Reshape", ["r", "shape"], ["y"], name="flat")]
        graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, 2, 4, 4])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)

    proto, other = model(3), model(5)
    path = os.path.join(folder, "base.onnx")
    onnx.save(proto, path)
    x_npy = os.path.join(folder, "x.npy")
    np.save(x_npy, rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    return {"proto": proto, "path": path, "bytes": proto.SerializeToString(),
            "other_bytes": other.SerializeToString(), "x_npy": x_npy}


def mapped_model(folder: str) -> dict:
    """A dense layer whose weight is just large enough to be read in place from the mapped file
    (``nnvm_frontend_onnx.mapped``), written to ``folder``, with an input: the walk over the wire format
    gets corrupted bytes too."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from nnvm_frontend_onnx.mapped import MIN_MAPPED_BYTES

    rng = np.random.default_rng(21)
    rows = MIN_MAPPED_BYTES // (4 * 128)
    inits = [numpy_helper.from_array(rng.standard_normal((rows, 128)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(128).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "b"], ["y"], name="bias")]
    graph = helper.make_graph(nodes, "fuzz_mapped",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    path = os.path.join(folder, "mapped.onnx")
    onnx.save(proto, path)
    x_npy = os.path.join(folder, "x_mapped.npy")
    np.save(x_npy, rng.standard_normal((1, rows)).astype(np.float32))
    return {"path": path, "x_npy": x_npy}


def check_cli(argv: list[str]) -> int:
    """Run ``nnvm ARGV`` in this process; assert exit 0, or exit 1 with one line and no traceback."""
    from nnvm.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    text = err.getvalue()
    assert rc in (0, 1), f"nnvm {' '.join(argv)} exited {rc}:\n{text}"
    if rc == 1:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("nnvm: note")]
        assert len(lines) == 1 and lines[0].startswith("nnvm: error: "), text
        assert "Traceback" not in text, text
    return rc


# Runs in a child process: each argv through the CLI's main; its exit status and stderr as JSON lines.
_CHILD = r"""
import contextlib, io, json, sys
from nnvm.cli import main
cases = json.loads(sys.argv[1])
for k, argv in enumerate(cases):
    print(json.dumps({"start": k}), flush=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    print(json.dumps({"case": k, "rc": rc, "stderr": err.getvalue()}), flush=True)
"""


def run_in_child(argvs: list[list[str]], timeout: float = 600) -> tuple[list[dict], int | None, str]:
    """Run each ``nnvm ARGV`` in one child process, for inputs that could kill a process rather than raise
    (module files reaching ``dlopen`` or a kernel). Returns the finished cases' reports (``rc``,
    ``stderr``), and, when the child died, the index of the case it died on and its stderr's tail."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(argvs)], capture_output=True, text=True,
                          timeout=timeout)
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    finished = [r for r in reports if "case" in r]
    died = None
    if proc.returncode != 0:
        started = [r["start"] for r in reports if "start" in r]
        died = started[-1] if started else -1
    return finished, died, f"status {proc.returncode}: {proc.stderr[-2000:]}"


def check_report(report: dict) -> str | None:
    """What is wrong with one ``run_in_child`` report (the ``check_cli`` oracle), or None."""
    if report["rc"] not in (0, 1):
        return f"exit {report['rc']}\n{report['stderr']}"
    lines = [ln for ln in report["stderr"].splitlines() if ln.strip() and not ln.startswith("nnvm: note")]
    if report["rc"] == 1 and not (len(lines) == 1 and lines[0].startswith("nnvm: error: ")):
        return report["stderr"]
    return None


def mutate_bytes(draw, blob: bytes, other: bytes) -> bytes:
    """``blob`` truncated, with bytes flipped or overwritten, spliced with ``other``, or padded."""
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "splice", "insert", "append"]))
    n = len(blob)
    if kind == "truncate":
        return blob[:draw(st.integers(0, n - 1))]
    if kind == "flip":
        out = bytearray(blob)
        for pos in draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8)):
            out[pos] ^= draw(st.integers(1, 255))
        return bytes(out)
    if kind == "overwrite":
        pos = draw(st.integers(0, n - 1))
        junk = draw(st.binary(min_size=1, max_size=32))
        return blob[:pos] + junk + blob[pos + len(junk):]
    if kind == "splice":
        return blob[:draw(st.integers(0, n))] + other[draw(st.integers(0, len(other))):]
    if kind == "insert":
        pos = draw(st.integers(0, n))
        return blob[:pos] + draw(st.binary(min_size=1, max_size=64)) + blob[pos:]
    return blob + draw(st.binary(min_size=1, max_size=64))


_BIG = st.sampled_from([0, -1, -7, 2**31, 2**40, 2**62, 2**63 - 1])


def mutate_model(draw, proto, folder: str) -> str:
    """A copy of ``proto`` with one field changed, saved in ``folder``; returns its path."""
    import onnx
    from onnx import TensorProto

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    kind = draw(st.sampled_from(["opset", "ir", "input_dim", "init_dim", "raw_data", "data_type",
                                 "node_input", "op_type", "attribute", "external", "duplicate_output",
                                 "drop_node"]))
    if kind == "opset":
        m.opset_import[0].version = draw(st.sampled_from([0, 1, 6, 999, 2**40]))
    elif kind == "ir":
        m.ir_version = draw(st.sampled_from([1, 3, 99, 2**40]))
    elif kind == "input_dim":
        dims = g.input[0].type.tensor_type.shape.dim
        dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(_BIG)
    elif kind == "init_dim":
        t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        t.dims[draw(st.integers(0, len(t.dims) - 1))] = draw(_BIG)
    elif kind == "raw_data":
        t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        raw = t.raw_data or np.zeros(1, np.float32).tobytes()
        t.raw_data = raw[:draw(st.integers(0, len(raw)))] + draw(st.binary(max_size=16))
    elif kind == "data_type":
        t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
        t.data_type = draw(st.sampled_from([0, TensorProto.STRING, TensorProto.FLOAT16, TensorProto.INT8,
                                            TensorProto.BFLOAT16, 40, 255]))
    elif kind == "node_input":
        node = g.node[draw(st.integers(0, len(g.node) - 1))]
        name = draw(st.sampled_from(["", "nowhere", "y", "c"]))
        node.input[draw(st.integers(0, len(node.input) - 1))] = name
    elif kind == "op_type":
        g.node[draw(st.integers(0, len(g.node) - 1))].op_type = draw(
            st.sampled_from(["Relu", "NoSuchOp", "Loop", "Conv", "Gemm", "", "Reshape"]))
    elif kind == "attribute":
        node = g.node[0]
        attr = node.attribute[0] if node.attribute else None
        if attr is not None:
            del attr.ints[:]
            attr.ints.extend(draw(st.lists(st.sampled_from([-5, 0, 1, 2**40]), max_size=6)))
    elif kind == "external":
        t = g.initializer[0]
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        del t.external_data[:]
        location = draw(st.sampled_from(["missing.bin", "../escape.bin", "/etc/passwd", "", "sub/../w.bin",
                                         "w.bin"]))
        entry = t.external_data.add()
        entry.key, entry.value = "location", location
        if draw(st.booleans()):
            entry = t.external_data.add()
            entry.key, entry.value = "length", str(draw(_BIG))
        if location == "w.bin":
            with open(os.path.join(folder, "w.bin"), "wb") as f:
                f.write(draw(st.binary(max_size=64)))
    elif kind == "duplicate_output":
        g.node[1].output[0] = g.node[0].output[0]
    else:
        del g.node[draw(st.integers(0, len(g.node) - 1))]
    path = os.path.join(folder, "mutated.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def npy_bytes(draw) -> bytes:
    """A ``.npy`` file for the model's input (float32[1, 2, 4, 4]), whole or damaged."""
    buf = io.BytesIO()
    kind = draw(st.sampled_from(["good", "dtype", "shape", "object", "truncate", "header", "garbage",
                                 "fortran", "version"]))
    x = np.zeros((1, 2, 4, 4), np.float32)
    if kind == "dtype":
        x = x.astype(draw(st.sampled_from([np.float64, np.int32, np.uint8, np.bool_, np.complex64])))
    elif kind == "shape":
        x = np.zeros(draw(st.sampled_from([(32,), (1, 2, 4), (2, 2, 4, 4), (0,), ()])), np.float32)
    elif kind == "fortran":
        x = np.asfortranarray(x)
    if kind == "object":
        np.save(buf, np.array([1, "two", None], dtype=object), allow_pickle=True)
    else:
        np.save(buf, x)
    data = buf.getvalue()
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == "header":
        end = data.index(b"}") + 1
        header = data[10:end]
        pos = draw(st.integers(0, len(header) - 1))
        header = header[:pos] + draw(st.binary(min_size=1, max_size=8)) + header[pos + 1:]
        return data[:10] + header + data[end:]
    if kind == "garbage":
        return draw(st.binary(max_size=256))
    if kind == "version":
        return data[:6] + bytes([draw(st.integers(0, 255)), draw(st.integers(0, 255))]) + data[8:]
    return data


def _record_line(draw) -> str:
    value = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True),
                      st.text(max_size=8), st.lists(st.integers(), max_size=3))
    d = {"version": 1, "target": "llvm", "template": "dense", "workload": "w1", "config": {"tile": 8},
         "seconds": 1e-3, "gflops": 2.0, "error": None, "timestamp": "2026-01-01T00:00:00+00:00",
         "label": "x"}
    for key in draw(st.lists(st.sampled_from(sorted(d)), max_size=2)):
        if draw(st.booleans()):
            d.pop(key, None)
        else:
            d[key] = draw(value)
    return json.dumps(d)


def tuning_log_bytes(draw) -> tuple[bytes, bool]:
    """A tuning log: whole records, some damaged; returns (bytes, whether the only damage is a torn
    last line, which must be skipped, not refused)."""
    good = {"version": 1, "target": "llvm", "template": "dense", "workload": "w", "config": {"tile": 4},
            "seconds": 2e-3, "gflops": 1.0, "error": None, "timestamp": "", "label": "g"}
    lines = [json.dumps(dict(good, workload=f"w{k}")) for k in range(draw(st.integers(0, 4)))]
    kind = draw(st.sampled_from(["torn", "field", "bytes", "blank", "splice"]))
    if kind == "torn":
        last = json.dumps(good)
        data = "".join(line + "\n" for line in lines) + last[:draw(st.integers(1, len(last) - 1))]
        return data.encode(), True
    if kind == "field":
        lines.insert(draw(st.integers(0, len(lines))), _record_line(draw))
        return "".join(line + "\n" for line in lines).encode(), False
    data = "".join(line + "\n" for line in lines).encode()
    if kind == "blank":
        return data + b"\n\n   \n", True
    if kind == "splice":
        return data + draw(st.binary(max_size=64)), False
    return mutate_bytes(draw, data or b"{}\n", json.dumps(good).encode()), False


GPU_TARGETS = ("opencl", "cuda", "metal", "webgpu")
_HOSTILE = [-1, 0, 1, 7, 2**31, 2**40, -2**63, 1.5, True, None, "", "x", "../x", [], [0], [1, 1], {},
            {"a": 1}]


def gpu_modules(folder: str, models: dict) -> dict:
    """The tiny model of ``base_models`` exported for each GPU target: target -> path of the zip."""
    import nnvm

    out = {}
    for target in GPU_TARGETS:
        out[target] = os.path.join(folder, f"good-{target}.so")
        nnvm.compile(models["path"], target=target).export(out[target])
    return out


def _mutate_tree(draw, tree):
    """``tree`` (parsed JSON) with one node, reached by a random walk, replaced, deleted or scaled."""
    import copy

    tree = copy.deepcopy(tree)
    node, depth = tree, draw(st.integers(1, 8))
    for _ in range(depth):
        keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) \
            else []
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        child = node[key]
        if not isinstance(child, (dict, list)) or not child or draw(st.integers(0, 3)) == 0:
            action = draw(st.sampled_from(["replace", "delete", "scale"]))
            if action == "delete":
                del node[key]
            elif action == "scale" and isinstance(child, int) and not isinstance(child, bool):
                node[key] = child * draw(st.sampled_from([2, 64, 4096, -1])) + draw(st.integers(-64, 64))
            else:
                node[key] = draw(st.sampled_from(_HOSTILE))
            return tree
        node = child
    return tree


def mutate_gpu_module(draw, good: bytes, other: bytes) -> bytes:
    """A GPU module zip (``GPUKernelLibrary.export``) damaged: its bytes (truncated, flipped, spliced with
    ``other``), or its manifest (launch tables), execution plan or a member's content changed and the
    zip rewritten with valid CRCs. A changed plan is also resealed (its content digest recomputed), so
    the plan checks, not the digest, must refuse it; a resealed launch table or kernel source is code the
    file's author controls anyway, so only the digest guards those."""
    import zipfile

    from nnvm.gpu.library import content_digest

    kind = draw(st.sampled_from(["bytes", "manifest", "manifest", "plan", "plan", "member"]))
    if kind == "bytes":
        return mutate_bytes(draw, good, other)
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        members = {name: z.read(name) for name in z.namelist()}
    if kind == "manifest":
        members["manifest.json"] = json.dumps(_mutate_tree(draw, json.loads(members["manifest.json"])))
    elif kind == "plan":
        meta = json.loads(members["blobs/graph"])
        meta["plan"] = _mutate_tree(draw, meta["plan"])
        members["blobs/graph"] = json.dumps(meta).encode()
        manifest = json.loads(members["manifest.json"])
        files = {n: members[f"files/{n}"] for n in manifest["files"]}
        blobs = {n: members[f"blobs/{n}"] for n in manifest["blobs"]}
        manifest["digest"] = content_digest(manifest, files, blobs)
        members["manifest.json"] = json.dumps(manifest)
    else:
        name = draw(st.sampled_from(sorted(members)))
        if draw(st.booleans()):
            del members[name]
        else:
            members[name] = mutate_bytes(draw, members[name] or b"\0", other)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()
