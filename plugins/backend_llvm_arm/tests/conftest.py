"""Shared fixtures: the Arm targets, the tools they need, and a comparison that says where it differs.

Every test here runs Arm code, so on x86 it needs the cross compilers and qemu-user that ``make install``
installs; without them the tests skip (which fails under CI=true, where they must be present).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from nnvm_backend_llvm_arm.plugin import ARM_TARGETS


def require_tools(kind: str) -> None:
    tc = ARM_TARGETS[kind]
    tools = (tc.cc, None if tc.runs_natively() else tc.qemu)
    missing = [tool for tool in tools if tool and not shutil.which(tool)]
    if missing:
        pytest.skip(f"{kind} needs {', '.join(missing)} (make install installs them)")


@pytest.fixture(autouse=True)
def fresh_emulation_notes(monkeypatch):
    """The qemu note is printed once per process; each test starts as a fresh process would, so the
    tests that check the note see it whatever ran before them in this worker."""
    import nnvm.runtime.module

    monkeypatch.setattr(nnvm.runtime.module, "_NOTES_SHOWN", set())


@pytest.fixture(params=sorted(ARM_TARGETS))
def arm_target(request) -> str:
    """Each Arm target in turn, with its tools checked."""
    require_tools(request.param)
    return request.param


@pytest.fixture
def need_tools():
    """``require_tools``, for a test that names its own target (``aarch64 -mcpu=...``)."""
    return require_tools


def relative_error(got, want) -> float:
    """Largest absolute difference over the largest reference magnitude (the models' criterion)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def assert_close(what: str, got, want, rtol: float = 1e-4) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    err = relative_error(got, want)
    if not err < rtol:
        where = np.unravel_index(int(np.argmax(np.abs(got.astype(np.float64) - want))), want.shape)
        raise AssertionError(f"{what}: relative error {err:.3g} >= {rtol}; worst at "
                             f"{tuple(map(int, where))}: got {got[where]!r}, want {want[where]!r}")


@pytest.fixture
def close():
    return assert_close


@pytest.fixture
def rel_error():
    return relative_error
