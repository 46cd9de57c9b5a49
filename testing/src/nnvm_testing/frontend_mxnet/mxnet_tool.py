"""Run inside the MXNet 1.9.1 reference venv (never imported by nnvm): MXNet runs symbols and reads and
writes ``.params`` files for the tests. Every command is deterministic (fixed seeds). The model zoo is
exported by ``mxnet_zoo.py``, kept apart so that editing this file does not redo those exports.

    python mxnet_tool.py run CASEDIR...          each CASEDIR holds symbol.json, params.npz, inputs.npz and
                                                 names.json; writes outputs.npz (output i as "o<i>")
    python mxnet_tool.py load OUT.npz FILE...    what mx.nd.load reads from each .params FILE, as float32/
                                                 native numpy arrays, with the names in OUT.json
    python mxnet_tool.py upgrade OUT.json FILE... each symbol JSON FILE as MXNet loads it (legacy forms
                                                 upgraded) and writes it back with tojson(), or its error
    python mxnet_tool.py fixtures OUTDIR         .params files for the reader tests (see ``fixtures``)
"""

from __future__ import annotations

import json
import os
import sys

import mxnet as mx
import numpy as np

BFLOAT16 = np.dtype([("bfloat16", np.uint16)])  # MXNet's own stand-in for bfloat16


def run(case_dirs: list[str]) -> None:
    for case in case_dirs:
        with open(os.path.join(case, "names.json")) as f:
            names = json.load(f)
        with open(os.path.join(case, "symbol.json")) as f:
            sym = mx.sym.load_json(f.read())
        params = np.load(os.path.join(case, "params.npz"))
        inputs = np.load(os.path.join(case, "inputs.npz"))
        aux_names = set(sym.list_auxiliary_states())
        args, aux = {}, {}
        for i, key in enumerate(names["params"]):
            kind, sep, plain = key.partition(":")
            if not sep or kind not in ("arg", "aux"):
                kind, plain = ("aux" if key in aux_names else "arg"), key
            value = params[f"p{i}"]
            (aux if kind == "aux" else args)[plain] = mx.nd.array(value, dtype=value.dtype)
        for i, key in enumerate(names["inputs"]):
            args[key] = mx.nd.array(inputs[f"i{i}"], dtype=inputs[f"i{i}"].dtype)
        executor = sym.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
        outs = executor.forward(is_train=bool(names.get("is_train", False)))
        np.savez(os.path.join(case, "outputs.npz"), **{f"o{i}": o.asnumpy() for i, o in enumerate(outs)})


def _plain(array) -> np.ndarray:
    """An NDArray as numpy: sparse densified, bfloat16 widened to float32 by MXNet itself."""
    if array.stype != "default":
        array = array.tostype("default")
    if array.dtype == BFLOAT16:
        array = mx.nd.amp_cast(array, dtype="float32")
    return array.asnumpy()


def load(out: str, files: list[str]) -> None:
    arrays, manifest = {}, []
    for k, path in enumerate(files):
        with open(path, "rb") as f:
            np_shape = f.read(28)[24:] == b"\xca\xfa\x93\xf9"  # V3 arrays load only in numpy semantics
        try:
            with mx.util.np_shape(np_shape):
                loaded = mx.nd.load(path)
        except Exception as exc:  # MXNetError, or its Python wrapper failing on what the C++ side read
            manifest.append({"error": (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]})
            continue
        if isinstance(loaded, dict):
            names = list(loaded)
            values = [loaded[n] for n in names]
        else:
            names, values = None, list(loaded)
        for i, v in enumerate(values):
            arrays[f"f{k}_{i}"] = _plain(v)
        manifest.append({"names": names, "count": len(values)})
    np.savez(out, **arrays)
    with open(out[: -len(".npz")] + ".json", "w") as f:
        json.dump(manifest, f)


def upgrade(out: str, files: list[str]) -> None:
    results = []
    for path in files:
        try:
            sym = mx.sym.load(path)
            results.append({"json": sym.tojson(), "arguments": sym.list_arguments(),
                            "aux": sym.list_auxiliary_states(), "outputs": sym.list_outputs()})
        except mx.base.MXNetError as exc:
            results.append({"error": str(exc).strip().splitlines()[-1][:200]})
    with open(out, "w") as f:
        json.dump(results, f)


def fixtures(outdir: str) -> None:
    """The files the .params reader is tested on, all written by MXNet itself."""
    rng = np.random.RandomState(16)
    x = rng.normal(0, 4, (3, 4)).astype(np.float32)
    nd = mx.nd
    dense = {f"arg:{dt}": nd.array(x).astype(dt) for dt in
             ("float32", "float64", "float16", "uint8", "int8", "int32", "int64", "bool")}
    dense["aux:bfloat16"] = nd.amp_cast(nd.array(x), dtype=BFLOAT16)
    nd.save(os.path.join(outdir, "dtypes.params"), dense)

    rows = np.zeros((6, 3), np.float32)
    rows[[1, 4]] = rng.normal(size=(2, 3))
    cols = np.where(rng.uniform(size=(4, 5)) < 0.4, rng.normal(size=(4, 5)), 0).astype(np.float32)
    nd.save(os.path.join(outdir, "sparse.params"), {
        "arg:row_sparse": nd.array(rows).tostype("row_sparse"),
        "arg:csr": nd.array(cols).tostype("csr"),
        "arg:csr_float64": nd.array(cols, dtype="float64").tostype("csr"),
        "arg:empty_row_sparse": nd.zeros((3, 2), stype="row_sparse"),
        "arg:dense": nd.array(x),
    })
    nd.save(os.path.join(outdir, "unnamed.params"), [nd.array(x), nd.array(x[0]).astype("int32")])

    from mxnet import gluon

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=2), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Dense(3))
    net.initialize(mx.init.Normal(0.5))
    net(nd.array(rng.normal(size=(1, 2, 5, 5))))
    net.save_parameters(os.path.join(outdir, "gluon.params"))
    with mx.util.np_shape(True):
        nd.save(os.path.join(outdir, "v3.params"), {"scalar": nd.array(np.float32(2.5).reshape(())),
                                                    "matrix": nd.array(x), "empty": nd.ones((2, 0))})


def main(argv: list[str]) -> None:
    command, rest = argv[0], argv[1:]
    if command == "run":
        run(rest)
    elif command == "load":
        load(rest[0], rest[1:])
    elif command == "upgrade":
        upgrade(rest[0], rest[1:])
    elif command == "fixtures":
        fixtures(rest[0])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
