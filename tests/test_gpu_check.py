"""``make gpu-check``, proven without a GPU: its rehearsal installs nnvm from this tree with the carried
wheels into a Python 3.12 venv of the device image's packages (``scripts/gpu_image.txt``) and runs every
step on the CUDA backend's CPU runner, so a session lent a GPU spends its minutes on the GPU, not on the
install. The native check itself refuses to pass without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CARRY_LIMIT = 64 << 20  # bytes a device call carries with the working tree


def _image_pins() -> dict:
    pins = {}
    for line in (REPO_ROOT / "scripts" / "gpu_image.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name] = version
    return pins


def test_rehearsal_runs_every_step_in_the_image_python(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--rehearse", "--out", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=1500)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mode"] == "rehearse"
    statuses = {name: row["status"] for name, row in report["steps"].items()}
    assert statuses == dict.fromkeys(["environment", "conformance", "models", "bench", "opencl", "tune"],
                                     "pass"), tail
    env = report["steps"]["environment"]["result"]
    assert env["python"].startswith("3.12.")
    pins = _image_pins()
    for name in ("numpy", "onnx", "onnxruntime", "cuda-bindings", "nvidia-cuda-nvrtc"):
        assert env["packages"][name] == pins[name], f"{name}: the rehearsal is not the image's"
    assert env["nvrtc"].startswith(pins["nvidia-cuda-nvrtc"].split(".")[0] + ".")
    bench = report["steps"]["bench"]["result"]["rows"]
    assert bench and all(r["max_rel_err"] < 1e-4 for r in bench)  # nnvm against torch, same weights
    assert report["steps"]["tune"]["result"]["records"] > 0
    assert "| conformance | pass |" in (out / "gpu_check.md").read_text()
    carried = sum(f.stat().st_size for f in (REPO_ROOT / ".gpu").rglob("*") if f.is_file())
    assert carried <= CARRY_LIMIT, f".gpu holds {carried >> 20} MiB: over what a device call carries"


def test_native_check_fails_without_a_gpu(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path), "--only",
                           "environment"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]["environment"]
    assert row["status"] == "fail" and "found no GPU" in row["error"]
