"""Helpers: build several schedules or hand-written loop programs in one LLVM module."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.runtime.kernel import BuiltFunction
from nnvm.target import parse_target
from nnvm.tir.lower import lower_schedule
from nnvm_backend_llvm_x86.plugin import LLVMBackend


def build_funcs(funcs, target: str = "llvm") -> dict:
    """PrimFuncs -> {name: callable on numpy arrays}, all compiled by one ``build`` call."""
    lib = LLVMBackend().build(list(funcs), parse_target(target))
    return {f.name: BuiltFunction(f, lib, f.name) for f in funcs}


def build_schedules(items, target: str = "llvm") -> dict:
    """``items``: (name, schedule, args) triples, lowered and compiled together."""
    return build_funcs([lower_schedule(s, list(args), name) for name, s, args in items], target)


def assert_close(name: str, got, want, rtol=1e-5, atol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = got != want
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        err = np.abs(got.astype("float64") - want.astype("float64"))
        raise AssertionError(f"{name}: {int(bad.sum())} of {bad.size} elements differ; first at {idx}: "
                             f"got {got[idx]!r}, want {want[idx]!r}; max abs error {np.nanmax(err)}")


# Fixtures hand the helpers to tests: with --import-mode=importlib test folders are not importable.
@pytest.fixture
def build():
    return build_funcs


@pytest.fixture
def build_all():
    return build_schedules


@pytest.fixture
def close():
    return assert_close


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
