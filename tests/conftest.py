"""Fixtures for the end-to-end tests: uv, and fresh virtual environments holding chosen packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def uv_bin() -> str:
    """The uv executable: ``uv run`` exports its own path as ``UV``; else the one on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv is not installed (make install installs it)")
    return found


def _clean_env() -> dict:
    """The environment of a process that must see only its own virtual environment's packages."""
    env = dict(os.environ)
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "NNVM_PLUGINS", "NNVM_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(var, None)
    return env


@pytest.fixture(scope="module")
def fresh_venv(uv_bin, tmp_path_factory) -> Callable[..., Path]:
    """``fresh_venv("core", "plugins/frontend_onnx")``: a new Python 3.11 venv with those folders
    (relative to the repository root, or absolute) installed as a user would, not editable; returns the
    venv's ``bin`` folder. uv builds the folders afresh each time, so a wheel is never stale.

    Dependencies come from the uv cache (``UV_CACHE_DIR``, else uv's default) without touching the
    network when the cache has them, so this works offline once the cache is warm; otherwise uv fetches
    what is missing from the index.
    """
    python = sys.executable if sys.version_info[:2] == (3, 11) else "3.11"
    env = _clean_env()

    def make(*folders: str) -> Path:
        venv = tmp_path_factory.mktemp("venv")
        proc = subprocess.run([uv_bin, "venv", "--quiet", "--python", python, str(venv)],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, f"uv venv failed: {proc.stderr}"
        install = [uv_bin, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                   *(str(REPO_ROOT / f) for f in folders)]
        proc = subprocess.run([*install, "--offline"], capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:  # the cache lacks something: fetch it
            proc = subprocess.run(install, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, f"uv pip install {' '.join(folders)} failed: {proc.stderr}"
        return venv / "bin"

    return make


@pytest.fixture
def run_in() -> Callable[..., subprocess.CompletedProcess]:
    """``run_in(bin_dir, "nnvm", "plugins")``: run a program of a fresh venv with a clean environment."""

    def run(bin_dir: Path, program: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bin_dir / program), *args], capture_output=True, text=True,
                              env=_clean_env(), timeout=300, cwd=bin_dir)

    return run
