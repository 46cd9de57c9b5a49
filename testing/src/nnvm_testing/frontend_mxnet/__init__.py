"""The MXNet 1.9.1 reference harness: MXNet itself, in its own cached venv, writes and runs what the MXNet
frontend's tests compare against (nnvm never imports mxnet; it only imports beside numpy < 1.24).

* ``mxnet_python()``: the venv ``$NNVM_CACHE_DIR/venvs/mxnet-1.9.1`` (Python 3.11, ``mxnet==1.9.1``,
  ``numpy<1.24``), built with uv on first use (``nnvm_testing.venvs``, shared with the torch tests).
* ``zoo_models(names)``: gluon model-zoo nets with random weights and random BatchNorm statistics, exported
  with ``hybridize()`` + ``export()``, plus a seeded input and MXNet's output, cached under
  ``$NNVM_CACHE_DIR/models/mxnet/`` and redone when ``mxnet_tool.py`` or the venv changes.
* ``mxnet_reference(symbol_json, params, inputs)``: any symbol run in MXNet (``mxnet_references`` runs
  many cases in one subprocess: each start imports mxnet, about 2 s). Results are cached by a hash of
  the case, so a second test run starts no subprocess at all.
* ``mxnet_symbols(texts)``: symbol JSON as MXNet loads (and upgrades) it.
* ``mxnet_load(paths)``: what ``mx.nd.load`` reads from ``.params`` files; ``reader_fixtures()``: the
  ``.params`` files MXNet writes for the reader tests (dtypes, sparse, gluon keys, unnamed list, V3).

Failures are ``VenvUnavailable`` (a tool is missing: tests may skip, except under ``CI=true``) or
``VenvBuildError``; wrap calls in ``nnvm_testing.venvs.pytest_venv`` inside tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnvm_testing.venvs import VenvBuildError, build_venv, cache_dir, clean_env, file_lock, run_checked

TOOL = Path(__file__).with_name("mxnet_tool.py")
ZOO_SCRIPT = Path(__file__).with_name("mxnet_zoo.py")
VENV_NAME = "mxnet-1.9.1"
REQUIREMENTS = ["mxnet==1.9.1", "numpy<1.24"]
ZOO = ["resnet18_v1", "resnet50_v2", "mobilenet1.0", "mobilenetv2_1.0", "squeezenet1.1", "densenet121",
       "vgg11_bn", "inceptionv3", "alexnet"]


def mxnet_python() -> Path:
    """The Python of the MXNet reference venv, built on first use."""
    return build_venv(VENV_NAME, REQUIREMENTS, python="3.11")


def _stamp(python: Path, script: Path = TOOL) -> str:
    """Changes when the script or the venv does, so stale cached references are redone."""
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    return f"{digest} {(python.parent.parent / '.nnvm-complete').read_text()}"


def _tool(python: Path, *args: str, what: str, timeout: float = 900, script: Path = TOOL) -> None:
    env = clean_env()
    env.setdefault("OMP_NUM_THREADS", "2")  # the machines these run on are shared: stay polite
    run_checked([str(python), str(script), *args], what, timeout, cwd=Path(tempfile.gettempdir()), env=env)


@dataclass(frozen=True)
class ZooModel:
    name: str
    symbol: Path  # NAME-symbol.json
    params: Path  # NAME-0000.params
    input: Path  # NAME-input.npy: the seeded input (1, 3, 224, 224), inceptionv3 (1, 3, 299, 299)
    output: Path  # NAME-output.npy: MXNet's output for it


def zoo_models(names: list[str] | None = None) -> dict[str, ZooModel]:
    """``{name: ZooModel}`` of ``names`` (default all nine). When any of them is missing or stale, every
    missing or stale net of the zoo is exported, in one MXNet process: tests ask for the nets one by one
    (one per test, spread over xdist workers) and each MXNet start costs seconds."""
    names = list(ZOO if names is None else names)
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        raise ValueError(f"not in the zoo list: {unknown}")
    python = mxnet_python()
    root = cache_dir() / "models" / "mxnet"
    root.mkdir(parents=True, exist_ok=True)
    stamp = _stamp(python, ZOO_SCRIPT)
    models = {n: ZooModel(n, root / f"{n}-symbol.json", root / f"{n}-0000.params", root / f"{n}-input.npy",
                          root / f"{n}-output.npy") for n in ZOO}

    def fresh(m: ZooModel) -> bool:
        stamp_file = root / f"{m.name}.stamp"
        return stamp_file.exists() and stamp_file.read_text() == stamp and all(
            p.exists() for p in (m.symbol, m.params, m.input, m.output))

    with file_lock(root / ".export.lock"):
        todo = [n for n in ZOO if not fresh(models[n])]
        if any(n in todo for n in names):
            # Export into a scratch folder beside the cache, then move: readers never see half a model.
            with tempfile.TemporaryDirectory(dir=root, prefix=".export-") as tmp:
                _tool(python, tmp, *todo, what=f"exporting {', '.join(todo)} with MXNet", timeout=1800,
                      script=ZOO_SCRIPT)
                for n in todo:
                    m = models[n]
                    for p in (m.symbol, m.params, m.input, m.output):
                        os.replace(Path(tmp) / p.name, p)
                    (root / f"{n}.stamp").write_text(stamp)
    return {n: models[n] for n in names}


def _case_key(symbol_json: str, params: dict, inputs: dict, is_train: bool) -> str:
    h = hashlib.sha256(symbol_json.encode())
    for group in (params, inputs):
        for key in group:
            a = np.ascontiguousarray(group[key])
            h.update(f"|{key}|{a.dtype.str}|{a.shape}|".encode())
            h.update(a.tobytes())
    h.update(b"train" if is_train else b"infer")
    return h.hexdigest()[:32]


def _numbered(prefix: str, arrays: dict) -> dict[str, np.ndarray]:
    """npz keys that are always valid file names (parameter names may hold ':' or '/')."""
    return {f"{prefix}{k}": np.asarray(v) for k, v in enumerate(arrays.values())}


def mxnet_references(cases: list[tuple[str, dict, dict]], is_train: bool = False) -> list[list[np.ndarray]]:
    """MXNet's outputs for each ``(symbol_json, params, inputs)``, run together in one subprocess.

    ``params`` keys may carry ``arg:``/``aux:`` (as in ``.params`` files) or be plain names (aux states
    are then told apart by ``list_auxiliary_states``); ``inputs`` bind the data variables. Arrays keep
    their dtype. Results are cached under ``$NNVM_CACHE_DIR/mxnet-ref/`` by a hash of the case.
    """
    python = mxnet_python()
    store = cache_dir() / "mxnet-ref"
    store.mkdir(parents=True, exist_ok=True)
    stamp = hashlib.sha256(_stamp(python).encode()).hexdigest()[:8]
    keys = [f"{_case_key(s, p, i, is_train)}-{stamp}" for s, p, i in cases]
    todo = [k for k in dict.fromkeys(keys) if not (store / f"{k}.npz").exists()]
    if todo:
        with tempfile.TemporaryDirectory(prefix="mxnet-ref-") as tmp:
            dirs = []
            for key, (symbol_json, params, inputs) in zip(keys, cases):
                case = Path(tmp) / key
                if key not in todo or case.exists():
                    continue
                case.mkdir()
                dirs.append(case)
                (case / "symbol.json").write_text(symbol_json)
                (case / "names.json").write_text(json.dumps(
                    {"params": list(params), "inputs": list(inputs), "is_train": is_train}))
                np.savez(case / "params.npz", **_numbered("p", params))
                np.savez(case / "inputs.npz", **_numbered("i", inputs))
            _tool(python, "run", *map(str, dirs), what=f"running {len(dirs)} symbols in MXNet")
            for case in dirs:
                tmp_out = store / f".{case.name}.{os.getpid()}.npz"
                os.replace(case / "outputs.npz", tmp_out)
                os.replace(tmp_out, store / f"{case.name}.npz")
    results = []
    for key in keys:
        with np.load(store / f"{key}.npz") as data:
            results.append([data[f"o{i}"] for i in range(len(data.files))])
    return results


def mxnet_reference(symbol_json: str, params: dict, inputs: dict, is_train: bool = False) -> list[np.ndarray]:
    """MXNet's outputs of one symbol (see ``mxnet_references``)."""
    return mxnet_references([(symbol_json, params, inputs)], is_train=is_train)[0]


def mxnet_load(paths: list[str | os.PathLike]) -> list[dict | list | str]:
    """What ``mx.nd.load`` reads from each file: a dict (named), a list (unnamed), or MXNet's error text.
    Sparse arrays come back dense and bfloat16 as float32, both converted by MXNet. Cached by the files'
    contents under ``$NNVM_CACHE_DIR/mxnet-ref/``."""
    python = mxnet_python()
    store = cache_dir() / "mxnet-ref"
    store.mkdir(parents=True, exist_ok=True)
    stamp = hashlib.sha256(_stamp(python).encode()).hexdigest()[:8]
    keys = [f"load-{hashlib.sha256(Path(p).read_bytes()).hexdigest()[:32]}-{stamp}" for p in paths]
    todo = {k: p for k, p in zip(keys, paths) if not (store / f"{k}.json").exists()}
    if todo:
        with tempfile.TemporaryDirectory(prefix="mxnet-load-") as tmp:
            out = Path(tmp) / "loaded.npz"
            _tool(python, "load", str(out), *map(os.fspath, todo.values()), what="loading .params in MXNet")
            manifest = json.loads(out.with_suffix(".json").read_text())
            with np.load(out) as data:
                for k, (key, entry) in enumerate(zip(todo, manifest)):
                    arrays = {f"a{i}": data[f"f{k}_{i}"] for i in range(entry.get("count", 0))}
                    np.savez(store / f"{key}.npz", **arrays)
                    (store / f"{key}.json").write_text(json.dumps(entry))  # last: marks the entry complete
    results = []
    for key in keys:
        entry = json.loads((store / f"{key}.json").read_text())
        if "error" in entry:
            results.append(entry["error"])
            continue
        with np.load(store / f"{key}.npz") as data:
            values = [data[f"a{i}"] for i in range(entry["count"])]
        results.append(dict(zip(entry["names"], values)) if entry["names"] is not None else values)
    return results


def mxnet_symbols(texts: list[str]) -> list[dict]:
    """Each symbol JSON text as MXNet 1.9.1 loads it: ``{"json": sym.tojson() (legacy forms upgraded),
    "arguments", "aux", "outputs"}`` (its ``list_*`` answers), or ``{"error": MXNet's message}``. Cached
    by the texts under ``$NNVM_CACHE_DIR/mxnet-ref/``."""
    python = mxnet_python()
    store = cache_dir() / "mxnet-ref"
    store.mkdir(parents=True, exist_ok=True)
    stamp = hashlib.sha256(_stamp(python).encode()).hexdigest()[:8]
    keys = [f"sym-{hashlib.sha256(t.encode()).hexdigest()[:32]}-{stamp}" for t in texts]
    todo = {k: t for k, t in zip(keys, texts) if not (store / f"{k}.json").exists()}
    if todo:
        with tempfile.TemporaryDirectory(prefix="mxnet-sym-") as tmp:
            paths = []
            for k, text in enumerate(todo.values()):
                paths.append(Path(tmp) / f"s{k}.json")
                paths[-1].write_text(text)
            out = Path(tmp) / "symbols.json"
            _tool(python, "upgrade", str(out), *map(str, paths), what="loading symbol JSON in MXNet")
            for key, view in zip(todo, json.loads(out.read_text())):
                part = store / f".{key}.{os.getpid()}"
                part.write_text(json.dumps(view))
                os.replace(part, store / f"{key}.json")
    return [json.loads((store / f"{k}.json").read_text()) for k in keys]


def attr_string(value) -> str:
    """A Python value as MXNet writes it in symbol JSON: ``(3, 3)``, ``(3,)``, ``True``, ``1e-05``."""
    if isinstance(value, list | tuple):
        inner = ", ".join(attr_string(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return str(value)


def op_json(op: str, attrs: dict | None = None, inputs: list[str] = ("data",), aux: list[str] = (),
            num_outputs: int = 1, name: str | None = None) -> str:
    """Symbol JSON of one operator on fresh variables: per-operator tests build cases with it.

    ``inputs`` name the variables in the operator's input order (data, weight, bias, ...), ``aux`` the
    auxiliary states that follow them (BatchNorm's moving mean and variance); the heads are the first
    ``num_outputs`` outputs. Attribute values are Python values, written as MXNet writes them.
    """
    names = [*inputs, *aux]
    nodes = [{"op": "null", "name": n, "inputs": []} for n in names]
    nodes.append({"op": op, "name": name or op.lower(),
                  "attrs": {k: attr_string(v) for k, v in (attrs or {}).items()},
                  "inputs": [[i, 0, 1 if n in aux else 0] for i, n in enumerate(names)]})
    return json.dumps({"nodes": nodes, "arg_nodes": list(range(len(names))),
                       "heads": [[len(names), k, 0] for k in range(num_outputs)],
                       "attrs": {"mxnet_version": ["int", 10901]}})


FIXTURES = ["dtypes.params", "sparse.params", "unnamed.params", "gluon.params", "v3.params"]


def reader_fixtures() -> dict[str, Path]:
    """``{file name: path}`` of the ``.params`` files MXNet writes for the reader tests (cached)."""
    python = mxnet_python()
    root = cache_dir() / "models" / "mxnet" / "reader"
    stamp = _stamp(python)
    stamp_file = root / "stamp"
    with file_lock(root.parent / ".reader.lock"):
        if not (stamp_file.exists() and stamp_file.read_text() == stamp
                and all((root / f).exists() for f in FIXTURES)):
            root.mkdir(parents=True, exist_ok=True)
            _tool(python, "fixtures", str(root), what="writing the .params reader fixtures with MXNet")
            missing = [f for f in FIXTURES if not (root / f).exists()]
            if missing:
                raise VenvBuildError(f"mxnet_tool.py fixtures did not write {missing}")
            stamp_file.write_text(stamp)
    return {f: root / f for f in FIXTURES}
