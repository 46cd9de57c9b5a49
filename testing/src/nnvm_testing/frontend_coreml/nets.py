"""The CoreML reference: coremltools 9 + PyTorch 2.13 in a cached venv, and the nets built there.

``reference_python()`` is that venv's Python (built once under ``$NNVM_CACHE_DIR/venvs``; torch comes
from the local CPU wheel, as for ``tests/test_pytorch_export.py``). ``coreml_nets()`` runs
``make_nets.py`` there once and returns ``$NNVM_CACHE_DIR/models/coreml/<hash>``, the folder of the
converted nets with PyTorch's inputs and outputs; the hash covers the script and the venv, so a change
to either rebuilds them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from nnvm_testing.venvs import (
    VenvUnavailable,
    build_venv,
    cache_dir,
    clean_env,
    file_lock,
    run_checked,
    torch_find_links,
)

REQUIREMENTS = ["torch==2.13.0", "coremltools==9.0", "numpy==2.3.5"]
FIND_LINKS = torch_find_links()
SCRIPT = Path(__file__).with_name("make_nets.py")


def reference_python() -> Path:
    if not list(Path(FIND_LINKS).glob("torch-2.13.0*-cp311-*.whl")):
        raise VenvUnavailable(
            f"no torch 2.13.0 CPU wheel for Python 3.11 in {FIND_LINKS} (NNVM_TORCH_FIND_LINKS)"
        )
    return build_venv("coreml-9", REQUIREMENTS, find_links=FIND_LINKS)


def coreml_nets() -> Path:
    """The converted ResNet-18 and MobileNetV2 (``make_nets.py``)."""
    return _built(SCRIPT, "converting the test nets with coremltools")


def coreml_ops() -> Path:
    """The one-op ML Programs of ``make_ops.py``."""
    return _built(SCRIPT.with_name("make_ops.py"), "building one-op ML Programs with coremltools")


def coreml_nn_ops() -> Path:
    """The one-layer NeuralNetwork models of ``make_nn_ops.py``."""
    return _built(SCRIPT.with_name("make_nn_ops.py"), "building one-layer NeuralNetworks with coremltools")


def _built(script: Path, what: str) -> Path:
    python = reference_python()
    digest = hashlib.sha256(script.read_bytes() + " ".join(REQUIREMENTS).encode()).hexdigest()[:12]
    out = cache_dir() / "models" / "coreml" / f"{script.stem}-{digest}"
    marker = out / ".complete"
    if marker.exists():
        return out
    with file_lock(out.with_name(out.name + ".lock")):
        if not marker.exists():
            run_checked([str(python), str(script), str(out)], what, 900, out.parent, clean_env())
            marker.write_text("ok")
    return out
