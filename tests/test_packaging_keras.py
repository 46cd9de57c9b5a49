"""The Keras frontend installed alone next to the core (not editable, as a user would): ``nnvm plugins``
lists it, and it reads a ``.keras`` file with its own dependencies (h5py), no keras and no backend."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _write_model(path: Path) -> None:
    """A one-Dense Sequential ``.keras`` file, in the layout Keras writes."""
    import io
    import zipfile

    import h5py
    import numpy as np

    config = {"class_name": "Sequential", "config": {"name": "s", "layers": [
        {"class_name": "InputLayer", "config": {"name": "x", "batch_shape": [None, 3], "dtype": "float32"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "relu", "use_bias": True,
                                           "trainable": True, "dtype": "float32"}}]}}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f["layers/dense/vars/0"] = np.ones((3, 2), np.float32)
        f["layers/dense/vars/1"] = np.zeros(2, np.float32)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("model.weights.h5", buf.getvalue())


def test_core_with_keras_frontend_lists_it_and_reads_a_file(fresh_venv, run_in, tmp_path):
    bin_dir = fresh_venv("core", "plugins/frontend_keras")
    with open(REPO_ROOT / "plugins/frontend_keras/pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    proc = run_in(bin_dir, "nnvm", "plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    got = [(r["name"], r["distribution"], r["version"]) for r in json.loads(proc.stdout)["frontend"]]
    assert got == [("keras", "nnvm-frontend-keras", version)]
    model = tmp_path / "m.keras"
    _write_model(model)
    probe = (f"import nnvm; g, p = nnvm.load_model({str(model)!r}); "
             f"print([n.op for n in g.nodes], g.types[g.outputs[0]].shape)")
    proc = run_in(bin_dir, "python", "-c", probe)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['dense', 'add', 'relu'] (1, 2)"
