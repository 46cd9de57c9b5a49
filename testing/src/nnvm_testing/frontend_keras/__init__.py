"""The Keras 3 reference harness: Keras itself (JAX backend), in its own cached venv, writes the models
the Keras frontend's tests read and the predictions they compare against (nnvm never imports keras).

* ``keras_python()``: the venv ``$NNVM_CACHE_DIR/venvs/keras-3`` (Python 3.11, keras 3.15, CPU jax,
  h5py), built with uv on first use through ``nnvm_testing.venvs``.
* ``keras_models(names)``: keras.applications nets (``weights=None``, small inputs, random weights and
  BatchNorm statistics) and the per-layer cases of ``keras_tool.CASES``, each saved as ``.keras`` and
  ``.h5`` with a seeded NHWC input and Keras's output, cached under ``$NNVM_CACHE_DIR/models/keras/``
  and redone when ``keras_tool.py`` or the venv changes. All missing models are built in one process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nnvm_testing.venvs import build_venv, cache_dir, clean_env, file_lock, run_checked

TOOL = Path(__file__).with_name("keras_tool.py")
CASES_SCRIPT = Path(__file__).with_name("keras_cases.py")
# Built by keras_cases.py (a change there rebuilds only these); every other name by keras_tool.py.
EXTRA_CASES = ["channels_first_norms", "upsampling_prelu", "repeat_permute", "conv1d", "group_norm", "dot",
               "conv_transpose", "recurrent", "embedding",
               "conv3d", "attention", "bidirectional"]
VENV_NAME = "keras-3"
REQUIREMENTS = ["keras==3.15.*", "jax[cpu]", "h5py"]


def keras_python() -> Path:
    """The Python of the Keras reference venv, built on first use."""
    return build_venv(VENV_NAME, REQUIREMENTS, python="3.11")


@dataclass(frozen=True)
class KerasModel:
    name: str
    keras: Path  # NAME.keras (Keras 3 zip)
    h5: Path  # NAME.h5 (legacy HDF5)
    input: Path  # NAME-input.npy, NHWC
    output: Path  # NAME-output.npy, Keras's prediction


def keras_models(names: list[str]) -> dict[str, KerasModel]:
    """``{name: KerasModel}``, building (one Keras process per script) only the models missing or stale."""
    python = keras_python()
    root = cache_dir() / "models" / "keras"
    root.mkdir(parents=True, exist_ok=True)
    venv = (python.parent.parent / ".nnvm-complete").read_text()
    tool = hashlib.sha256(TOOL.read_bytes()).hexdigest()[:16]
    extra = hashlib.sha256(TOOL.read_bytes() + CASES_SCRIPT.read_bytes()).hexdigest()[:16]
    stamps = {n: f"{extra if n in EXTRA_CASES else tool} {venv}" for n in names}
    models = {n: KerasModel(n, root / f"{n}.keras", root / f"{n}.h5", root / f"{n}-input.npy",
                            root / f"{n}-output.npy") for n in names}

    def fresh(m: KerasModel) -> bool:
        stamp_file = root / f"{m.name}.stamp"
        return stamp_file.exists() and stamp_file.read_text() == stamps[m.name] and all(
            p.exists() for p in (m.keras, m.h5, m.input, m.output))

    with file_lock(root / ".build.lock"):
        todo = [n for n in names if not fresh(models[n])]
        if todo:
            env = clean_env()
            env["KERAS_BACKEND"] = "jax"
            env.setdefault("OMP_NUM_THREADS", "2")
            env.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=2")
            for script in (TOOL, CASES_SCRIPT):
                batch = [n for n in todo if (n in EXTRA_CASES) == (script == CASES_SCRIPT)]
                if batch:
                    _build(python, script, root, [models[n] for n in batch], stamps, env)
    return models


def _build(python: Path, script: Path, root: Path, models: list, stamps: dict, env: dict) -> None:
    # Build into a scratch folder beside the cache, then move: readers never see half a model.
    names = [m.name for m in models]
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        run_checked([str(python), str(script), tmp, *names], f"building {', '.join(names)} with Keras",
                    3600, cwd=Path(tempfile.gettempdir()), env=env)
        for m in models:
            for p in (m.keras, m.h5, m.input, m.output):
                os.replace(Path(tmp) / p.name, p)
            (root / f"{m.name}.stamp").write_text(stamps[m.name])


def graph_digest(graph) -> str:
    """A hash of an imported graph: its structure, types and weights (the ``.keras`` and ``.h5`` files of
    one model must import to the same graph)."""
    import numpy as np

    h = hashlib.sha256(graph.to_json(include_params=False).encode())
    for name in sorted(graph.params):
        a = np.ascontiguousarray(graph.params[name])
        h.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def max_rel_err(got, want) -> float:
    import numpy as np

    want = np.asarray(want, dtype=np.float64)
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max() / max(np.abs(want).max(), 1e-30))
