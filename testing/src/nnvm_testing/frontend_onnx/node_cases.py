"""ONNX's own node test cases, written once to a cache folder, and which of them an inference compiler
should handle (the "eligible" cases of issue 6).

Why a cache: the onnx wheel does not ship the node test data; ``onnx.backend.test`` builds the cases in
memory by running every operator's reference code (about a minute). Every pytest-xdist worker would pay
that again, so ``node_cases_dir()`` writes them once, in the layout ``onnx.backend.test``'s loader
reads (``node/<case>/model.onnx``, ``test_data_set_0/{input,output}_k.pb``, ``data.json`` with the
tolerances), keyed by the onnx version, and renames the finished folder into place so concurrent
workers never see half a folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from nnvm import environment

# Operators whose results are random (nothing to compare with) or only make sense while training.
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
              "Bernoulli"}
STRING_OPS = {
    "StringNormalizer",
    "StringConcat",
    "StringSplit",
    "RegexFullMatch",
}  # TfIdfVectorizer reads ints
STANDARD_DOMAINS = ("", "ai.onnx")


def cache_root() -> str:
    """``$NNVM_CACHE_DIR`` or ``~/.cache/nnvm``: outside any checkout."""
    return str(environment.cache_dir())


def node_cases_dir() -> str:
    """The folder holding ``node/<case>/`` for every node test case of the installed onnx; built once."""
    import fcntl

    import onnx

    root = os.path.join(cache_root(), "onnx-node-tests", onnx.__version__)
    if os.path.isdir(os.path.join(root, "node")):
        return root
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one test worker writes, the others wait for it
        if os.path.isdir(os.path.join(root, "node")):
            return root
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(root))
        try:
            write_node_cases(os.path.join(tmp, "node"))
            os.rename(tmp, root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def write_node_cases(out: str) -> int:
    """Write every case of ``onnx.backend.test.case.node.collect_testcases`` under ``out``."""
    import warnings

    import numpy as np
    from onnx import TensorProto, numpy_helper
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    for case in cases:
        folder = os.path.join(out, case.name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        with open(os.path.join(folder, "data.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol}, f)
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data = os.path.join(folder, f"test_data_set_{i}")
            os.makedirs(data, exist_ok=True)
            for kind, values, infos in (
                ("input", inputs, case.model.graph.input),
                ("output", outputs, case.model.graph.output),
            ):
                for j, value in enumerate(values):
                    with open(os.path.join(data, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(_serialized(value, infos[j], numpy_helper, TensorProto))
    return len(cases)


def _serialized(value, info, numpy_helper, TensorProto) -> bytes:  # noqa: N803
    t = info.type
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, info.name).SerializeToString()
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, info.name).SerializeToString()
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, info.name).SerializeToString()
    return numpy_helper.from_array(value, info.name).SerializeToString()


# -- eligibility ------------------------------------------------------------------------------------
def _excluded_types() -> set:
    from onnx import TensorProto

    names = (
        "STRING",
        "BFLOAT16",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "FLOAT8E8M0",
        "UINT4",
        "INT4",
        "FLOAT4E2M1",
        "UINT2",
        "INT2",
        "UNDEFINED",
    )
    return {getattr(TensorProto, n) for n in names if hasattr(TensorProto, n)}


def _all_nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.HasField("g"):
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _value_type_reason(type_proto, bad: set) -> str | None:
    """Why an input or output of this type is out of scope: tensors, sequences of tensors and optionals of
    either are in scope (a compiler resolves sequences when importing); maps and sparse tensors are not."""
    if type_proto.HasField("sequence_type"):
        return _value_type_reason(type_proto.sequence_type.elem_type, bad)
    if type_proto.HasField("optional_type"):
        return _value_type_reason(type_proto.optional_type.elem_type, bad)
    if not type_proto.HasField("tensor_type"):
        return "a map or sparse-tensor input or output"
    if type_proto.tensor_type.elem_type in bad:
        return "an element type out of scope"
    return None


def ineligible_reason(model) -> str | None:
    """Why a node test case is out of scope for an inference compiler, or None if it is in scope.

    Out of scope: inputs or outputs that are maps or sparse tensors, or whose element type is a string,
    bfloat16, an 8-, 4- or 2-bit float or integer (sequences of tensors and optionals are in scope);
    operators outside the standard domain (ai.onnx.ml, the preview and training domains); random
    operators; string operators anywhere (subgraphs included); training-mode BatchNormalization and
    Dropout.
    """
    bad = _excluded_types()
    for vi in list(model.graph.input) + list(model.graph.output):
        reason = _value_type_reason(vi.type, bad)
        if reason:
            return reason
    for n in _all_nodes(model.graph):
        if n.domain not in STANDARD_DOMAINS:
            return f"domain {n.domain}"
        if n.op_type in RANDOM_OPS:
            return "a random operator"
        if n.op_type in STRING_OPS:
            return "a string operator"
        if n.op_type in ("BatchNormalization", "Dropout"):
            if any(a.name == "training_mode" and a.i for a in n.attribute) or (
                n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]
            ):
                return "training mode"
    return None


def eligible_cases(root: str | None = None) -> list[str]:
    """Names of the eligible node cases, sorted."""
    import onnx

    node = os.path.join(root or node_cases_dir(), "node")
    out = []
    for name in sorted(os.listdir(node)):
        model = onnx.load(os.path.join(node, name, "model.onnx"), load_external_data=False)
        if ineligible_reason(model) is None:
            out.append(name)
    return out


def case_info(name: str, root: str | None = None) -> dict:
    """``{"op": the operator the case tests, "opset": the case's default-domain opset}``."""
    import onnx

    model = onnx.load(
        os.path.join(root or node_cases_dir(), "node", name, "model.onnx"), load_external_data=False
    )
    opset = max((o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS), default=1)
    return {"op": tested_op(name, [n.op_type for n in model.graph.node]), "opset": int(opset)}


def tested_op(name: str, ops: list[str]) -> str:
    """The operator a case tests: its only operator, or for a multi-node case (an ``_expanded``
    function body) the longest standard operator name its case name starts with."""
    if len(set(ops)) == 1:
        return ops[0]
    from onnx import defs

    key = name.removeprefix("test_").replace("_", "").lower()
    names = {s.name for s in defs.get_all_schemas() if s.domain in STANDARD_DOMAINS}
    best = max((op for op in names if key.startswith(op.lower())), key=len, default="")
    return best or (ops[0] if ops else "?")


# -- running one case -------------------------------------------------------------------------------
def load_case(name: str, root: str | None = None):
    """``(model, [(inputs, expected outputs)], rtol, atol)`` of one cached case."""
    import glob

    import onnx
    from onnx import numpy_helper

    folder = os.path.join(root or node_cases_dir(), "node", name)
    model = onnx.load(os.path.join(folder, "model.onnx"))
    with open(os.path.join(folder, "data.json")) as f:
        tol = json.load(f)
    sets = []
    infos = {"input": list(model.graph.input), "output": list(model.graph.output)}
    for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        arrays = {}
        for kind in ("input", "output"):
            files = sorted(
                glob.glob(os.path.join(data, f"{kind}_*.pb")),
                key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]),
            )
            arrays[kind] = [_read_value(p, infos[kind][k].type, onnx, numpy_helper)
                            for k, p in enumerate(files)]
        sets.append((arrays["input"], arrays["output"]))
    return model, sets, tol["rtol"], tol["atol"]


def _read_value(path: str, type_proto, onnx, numpy_helper):
    """A case's input or output as ONNX's runner reads it: an array, a list for a sequence, None or the
    value for an optional."""
    with open(path, "rb") as f:
        data = f.read()
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def run_case(name: str, root: str | None = None) -> tuple[str, str]:
    """``("pass" | "fail" | "error" | "bug", message)``: one case through ``nnvm_frontend_onnx.backend``,
    compared as ``onnx.backend.test``'s runner compares (shape, dtype, then values within tolerance)."""
    import warnings

    import numpy as np
    from onnx.backend.test.runner import Runner

    from nnvm.errors import Error
    from nnvm_frontend_onnx import backend

    model, sets, rtol, atol = load_case(name, root)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = backend.prepare(model, "CPU")
            for inputs, expected in sets:
                got = rep.run(inputs)
                Runner.assert_similar_outputs(expected, got, rtol=rtol, atol=atol)
    except AssertionError as exc:
        return "fail", _first_line(exc)
    except Error as exc:
        return "error", _first_line(exc)
    except Exception as exc:  # a bug in nnvm: report it, keep going
        return "bug", f"{type(exc).__name__}: {_first_line(exc)}"
    return "pass", ""


def _first_line(exc) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]
