"""Models that PyTorch's own exporter writes compile for ``llvm`` and agree with onnxruntime.

Torch never enters the main environment: a session fixture builds a separate venv (once, cached in
``$NNVM_CACHE_DIR/venvs/torch-2.13``) from the local CPU wheel and runs ``scripts/torch_export.py``
there; the exported files are cached in ``$NNVM_CACHE_DIR/models/torch_<model>_<variant>.onnx``.
Where the venv cannot be built because a tool is missing, the tests skip, and fail under ``CI=true``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm_testing.frontend_onnx.torch_models import torch_python
from nnvm_testing.venvs import cache_dir, file_lock, pytest_venv

REPO = Path(__file__).resolve().parents[1]
EXPORT_SCRIPT = REPO / "scripts" / "torch_export.py"
MODELS = ["resnet18", "mobilenet_v2"]
VARIANTS = ["dynamo", "dynamo_unoptimized", "torchscript"]  # as in scripts/torch_export.py


def _run(cmd: list[str], what: str, timeout: float, cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}", pytrace=False)


def _export_stamp(python: Path) -> str:
    """Changes when the export script or the torch venv does, so a stale export is redone."""
    digest = hashlib.sha256(EXPORT_SCRIPT.read_bytes()).hexdigest()[:16]
    return f"{digest} {(python.parent.parent / '.nnvm-complete').read_text()}"


def _export(python: Path, name: str, variant: str, path: Path) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        _run([str(python), str(EXPORT_SCRIPT), name, str(tmp), "--variant", variant],
             f"exporting {name} ({variant}) with torch", 900, REPO)
        os.replace(tmp, path)  # readers never see a half-written model
    finally:
        tmp.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def torch_models() -> dict[tuple[str, str], Path]:
    """``{(model, variant): path}`` of every export, made (in parallel) only where missing or stale."""
    started = time.perf_counter()
    python = pytest_venv(torch_python)
    built = time.perf_counter()
    models_dir = cache_dir() / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    paths = {(m, v): models_dir / f"torch_{m}_{v}.onnx" for m in MODELS for v in VARIANTS}
    stamp = _export_stamp(python)

    def stale(path: Path) -> bool:
        stamp_file = path.with_name(path.name + ".stamp")
        return not path.exists() or not stamp_file.exists() or stamp_file.read_text() != stamp

    with file_lock(models_dir / ".torch_export.lock"):
        todo = [key for key, path in paths.items() if stale(path)]
        if todo:
            # Exporting is mostly single-threaded Python tracing, so the exports run side by side.
            with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
                list(pool.map(lambda key: _export(python, *key, paths[key]), todo))
            for key in todo:
                paths[key].with_name(paths[key].name + ".stamp").write_text(stamp)
    exported = time.perf_counter()
    print(f"torch venv ready in {built - started:.1f}s; {len(todo)} exports in {exported - built:.1f}s",
          file=sys.stderr)
    return paths


def _op_summary(model: onnx.ModelProto) -> str:
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    return f"opset {opsets}; ops {sorted({n.op_type for n in model.graph.node})}"


def _seeded_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        if inp.name not in inits:
            shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


# Every export on the host CPU; on ``cuda`` and ``metal`` (natively, or the same CUDA or MSL source on the
# CPU runner where there is no such GPU, about 20 s a model here) the default exporter's two models.
CASES = [(n, v, "llvm") for n in MODELS for v in VARIANTS] + [(n, "dynamo", t) for t in ("cuda", "metal")
                                                              for n in MODELS]


@pytest.mark.parametrize(("name", "variant", "target"), CASES)
def test_torch_exported_model_matches_onnxruntime(torch_models, name, variant, target):
    path = str(torch_models[name, variant])
    model = onnx.load(path)
    where = f"torch-exported {name} ({variant} exporter; {_op_summary(model)}) on {target}"
    feeds = _seeded_inputs(model)
    shapes = {k: v.shape for k, v in feeds.items()}
    assert list(shapes.values()) == [(1, 3, 224, 224)], f"{where}: unexpected inputs {shapes}"

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    try:
        mod = nnvm.compile(path, target=target)
    except Exception as exc:  # any failure, ours or a bug, is reported with the graph's op list
        pytest.fail(f"{where}: nnvm.compile failed: {type(exc).__name__}: {exc}")
    got = mod.run(**feeds)

    assert len(got) == len(want), f"{where}: {len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{where} output {k}: shape {g.shape} != onnxruntime's {w.shape}"
        scale = max(float(np.abs(w).max()), 1e-6)
        err = float(np.abs(g - w).max()) / scale
        assert err < 1e-4, f"{where} output {k}: max relative error {err:.2e} against onnxruntime"
