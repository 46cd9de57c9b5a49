"""Reference frameworks in their own cached virtual environments (torch, MXNet 1.9.1, ...).

A framework that cannot share the main venv (MXNet 1.9.1 needs numpy < 1.24; torch is huge) is installed
once into ``$NNVM_CACHE_DIR/venvs/<name>`` with uv and driven through subprocesses. A marker file records
exactly what was installed, so a changed requirement list rebuilds the venv; an ``flock`` serialises
builders (pytest-xdist workers, concurrent sessions) and dies with its holder, so a killed build leaves
no stale lock behind.

Two failures differ: ``VenvUnavailable`` (a tool is missing on this machine: a test may skip, except
under ``CI=true``) and ``VenvBuildError`` (the build itself failed: always a failure). ``pytest_venv``
turns them into pytest's skip or fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from nnvm import environment


class VenvUnavailable(Exception):
    """A tool the venv needs (uv, an interpreter, a local wheel) is not on this machine."""


class VenvBuildError(Exception):
    """Building the venv, or a command run in it, failed."""


def cache_dir() -> Path:
    """``$NNVM_CACHE_DIR`` or ``~/.cache/nnvm``: outside any checkout."""
    return environment.cache_dir()


def torch_find_links() -> str:
    """Where the local torch CPU wheel for the reference venvs is: ``$NNVM_TORCH_FIND_LINKS``, else
    ``/opt/wheels``. A fact of the test machine, read only here, by the test helpers (README, "Environment
    variables"): nothing in nnvm or a plugin's runtime reads it."""
    return os.environ.get("NNVM_TORCH_FIND_LINKS") or "/opt/wheels"


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@contextlib.contextmanager
def file_lock(path: Path):
    """Exclusive lock between processes. ``flock`` rather than a mkdir lock: the kernel releases it when
    the holder dies (this is what the ``filelock`` package does on POSIX, and it is not a dependency)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_checked(cmd: list[str], what: str, timeout: float, cwd: Path | None = None,
                env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``cmd``; a non-zero exit or a timeout is a ``VenvBuildError`` with the output's tail."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise VenvBuildError(f"{what} took over {timeout:.0f}s: {' '.join(map(str, cmd))}") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise VenvBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return proc


def clean_env() -> dict:
    """The environment for a venv's programs: nothing of the main venv leaks in."""
    env = dict(os.environ)
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    return env


def _spec(python: str, requirements: list[str]) -> str:
    return " ".join([f"python{python}", *requirements])


def ready_venv(name: str, requirements: list[str], python: str = "3.11") -> Path | None:
    """The Python of the venv when it is complete and holds exactly ``requirements``, else None."""
    venv = cache_dir() / "venvs" / name
    marker = venv / ".nnvm-complete"
    if marker.exists() and marker.read_text() == _spec(python, requirements):
        return venv / "bin" / "python"
    return None


def build_venv(name: str, requirements: list[str], python: str = "3.11",
               find_links: str | None = None) -> Path:
    """The Python of ``$NNVM_CACHE_DIR/venvs/<name>`` holding ``requirements``, built unless complete."""
    venv = cache_dir() / "venvs" / name
    py = venv / "bin" / "python"
    marker = venv / ".nnvm-complete"
    spec = _spec(python, requirements)
    if ready_venv(name, requirements, python):
        return py
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        raise VenvUnavailable("uv is not on PATH")
    if subprocess.run([uv, "python", "find", python], capture_output=True).returncode != 0:
        raise VenvUnavailable(f"uv finds no Python {python} interpreter")
    with file_lock(venv.with_name(venv.name + ".lock")):
        if marker.exists() and marker.read_text() == spec:  # another process built it while we waited
            return py
        shutil.rmtree(venv, ignore_errors=True)
        # cwd outside the repo so uv does not discover (and touch) this workspace.
        env = clean_env()
        run_checked([uv, "venv", "--no-project", "--python", python, str(venv)], f"creating the {name} venv",
                    300, venv.parent, env)
        links = ["--find-links", find_links] if find_links else []
        run_checked([uv, "pip", "install", "--python", str(py), *links, *requirements],
                    f"installing {' '.join(requirements)} into the {name} venv", 1800, venv.parent, env)
        marker.write_text(spec)
    return py


def pytest_venv(build, *args, **kwargs):
    """``build(*args, **kwargs)`` with its failures as pytest outcomes: a missing tool skips (fails under
    ``CI=true``, where any skip is a failure), a failed build fails."""
    import pytest

    try:
        return build(*args, **kwargs)
    except VenvUnavailable as exc:
        if under_ci():
            pytest.fail(f"reference venv cannot be built under CI: {exc}", pytrace=False)
        pytest.skip(reason=f"reference venv cannot be built: {exc}")
    except VenvBuildError as exc:
        pytest.fail(str(exc), pytrace=False)
