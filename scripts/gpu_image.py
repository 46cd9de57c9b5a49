"""The rehearsal's interpreter: a cached Python 3.12 venv holding exactly the GPU machine's packages.

    python scripts/gpu_image.py        # prints the venv's python, building it on first use

``scripts/gpu_image.txt`` lists the packages (read off the device image by ``make gpu-check``), so the
rehearsal installs and imports nnvm against the same numpy, onnx, cuda-bindings and NVRTC as the GPU.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from nnvm_testing.venvs import VenvBuildError, VenvUnavailable, build_venv

IMAGE = Path(__file__).with_name("gpu_image.txt")
PYTHON = "3.12"  # the image's python3


def requirements() -> list[str]:
    lines = (line.split("#")[0].strip() for line in IMAGE.read_text().splitlines())
    return [line for line in lines if line]


def interpreter() -> str:
    """What uv finds for 3.12, else pyenv's 3.12 (uv cannot run pyenv's shims, and it cannot download an
    interpreter here: no registry but PyPI's is reached)."""
    uv = os.environ.get("UV") or shutil.which("uv") or "uv"
    found = subprocess.run([uv, "python", "find", PYTHON], capture_output=True, text=True)
    if found.returncode == 0:
        return PYTHON
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(str(root / "versions" / f"{PYTHON}.*" / "bin" / f"python{PYTHON}")))
    return candidates[-1] if candidates else PYTHON


def main() -> int:
    try:
        print(build_venv("gpu-image", requirements(), python=interpreter()))
    except (VenvUnavailable, VenvBuildError) as exc:
        print(f"gpu-check: cannot build the rehearsal venv: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
