"""Models exported by PyTorch's own ONNX exporter, in torch's cached venv; the main venv never imports torch.

The venv (``$NNVM_CACHE_DIR/venvs/torch-2.13``, built once with uv from the local CPU wheel in
``$NNVM_TORCH_FIND_LINKS``, default ``/opt/wheels``) is shared by ``tests/test_pytorch_export.py``
(``scripts/torch_export.py``'s exporter variants) and the issue-19 benchmark zoo
(``scripts/torch_zoo.py``: eleven CNNs and three transformers, ``bench/zoo.py``). ``zoo_model_path``
exports one zoo model at one batch size into ``$NNVM_CACHE_DIR/models`` and redoes it only when the
scripts or the venv change (a stamp file next to it). Raises ``VenvUnavailable`` when a tool or the
wheel is missing and ``VenvBuildError`` when the build or the export fails.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nnvm.testing.venvs import (
    VenvBuildError,
    VenvUnavailable,
    build_venv,
    cache_dir,
    clean_env,
    file_lock,
    ready_venv,
    run_checked,
)

# Pinned to what was tested; torch comes from the local CPU wheel (PyPI's torch would pull CUDA).
REQUIREMENTS = ["torch==2.13.0", "onnx==1.23.2", "onnxscript==0.7.2", "onnx-ir==1.1.0", "numpy==2.4.6"]
PYTHON = "3.11"
VENV = "torch-2.13"
SCRIPTS = Path(__file__).resolve().parents[5] / "scripts"  # the checkout's scripts/ (workspace install)
ZOO_SCRIPT = SCRIPTS / "torch_zoo.py"
# Keep in step with scripts/torch_zoo.py (checked by tests/test_zoo_models.py).
ZOO_CNNS = ("alexnet", "densenet121", "googlenet", "inception_v2", "resnet50", "shufflenet", "squeezenet",
            "vgg19", "zfnet512", "resnet18", "mobilenet_v2")
ZOO_TRANSFORMERS = ("bert", "gpt2", "vit")


def find_links() -> str:
    return os.environ.get("NNVM_TORCH_FIND_LINKS", "/opt/wheels")


def torch_python() -> Path:
    """The torch venv's Python, built on first use (``nnvm.testing.venvs``)."""
    ready = ready_venv(VENV, REQUIREMENTS, PYTHON)
    if ready:
        return ready
    if not list(Path(find_links()).glob(f"torch-2.13.0*-cp{PYTHON.replace('.', '')}-*.whl")):
        raise VenvUnavailable(f"no torch 2.13.0 CPU wheel for Python {PYTHON} in {find_links()} "
                              "(NNVM_TORCH_FIND_LINKS)")
    return build_venv(VENV, REQUIREMENTS, python=PYTHON, find_links=find_links())


def _stamp(python: Path, scripts: list[Path]) -> str:
    """Changes when a script or the torch venv does, so a stale export is redone."""
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in scripts)).hexdigest()[:16]
    return f"{digest} {(python.parent.parent / '.nnvm-complete').read_text()}"


def zoo_model_path(name: str, batch: int = 1) -> str:
    """Path of zoo model ``name`` (``ZOO_CNNS`` or ``ZOO_TRANSFORMERS``) exported with a fixed batch."""
    if name not in (*ZOO_CNNS, *ZOO_TRANSFORMERS):
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join([*ZOO_CNNS, *ZOO_TRANSFORMERS])}")
    if not ZOO_SCRIPT.exists():
        raise VenvUnavailable(f"{ZOO_SCRIPT} is missing: the zoo is exported from a source checkout")
    python = torch_python()
    directory = cache_dir() / "models"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"torch_zoo_{name}_b{batch}.onnx"
    stamp_file = path.with_name(path.name + ".stamp")
    stamp = _stamp(python, [ZOO_SCRIPT, SCRIPTS / "torch_export.py"])
    with file_lock(directory / f".torch_zoo_{name}.lock"):
        if not (path.exists() and stamp_file.exists() and stamp_file.read_text() == stamp):
            tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
            try:
                run_checked([str(python), str(ZOO_SCRIPT), name, str(tmp), "--batch", str(batch)],
                            f"exporting {name} (batch {batch}) with torch", 1800, SCRIPTS.parent,
                            clean_env())
                os.replace(tmp, path)  # readers never see a half-written model
            finally:
                tmp.unlink(missing_ok=True)
            stamp_file.write_text(stamp)
    return str(path)


__all__ = ["REQUIREMENTS", "PYTHON", "VENV", "ZOO_CNNS", "ZOO_TRANSFORMERS", "VenvBuildError",
           "VenvUnavailable", "find_links", "torch_python", "zoo_model_path"]
