"""Helpers: build several schedules or hand-written loop programs in one LLVM module."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import nnvm
from nnvm.compiler import group_compute
from nnvm.runtime.kernel import BuiltFunction
from nnvm.target import parse_target
from nnvm.te.examples import matmul_api_schedule
from nnvm.te.lower import lower_schedule
from nnvm_backend_llvm_x86.plugin import X86Backend
from nnvm_testing.hosts import DECISION_TARGETS


def save_conv_model(path: str, channels: int, hw: int) -> str:
    """A one-node ONNX model, a 3x3 padded Conv of ``channels`` to ``channels`` with all-ones weights on
    a ``1 x channels x hw x hw`` input, saved at ``path`` (for tests about compiling, not numbers)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((channels, channels, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def build_funcs(funcs, target: str = "llvm") -> dict:
    """PrimFuncs -> {name: callable on numpy arrays}, all compiled by one ``build`` call."""
    lib = X86Backend().build(list(funcs), parse_target(target))
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


def check_api_matmul(n: int, rng, rtol: float, atol: float, target: str = "llvm"):
    """``api.md``'s matmul schedule at n x n, built for ``target``, run on random data and compared with
    numpy's float64 product; returns the built function (for checks of its code)."""
    s, args = matmul_api_schedule(n)
    f = nnvm.build(s, args, target=target)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    c = np.full((n, n), np.nan, "float32")
    f(a, b, c)
    assert_close(f"matmul {n} (api.md schedule)", c, a.astype("float64") @ b.astype("float64"), rtol, atol)
    return f


def group_with_op(graph, op: str):
    """The tensor expressions (``GroupCompute``) of the first fused group of ``graph`` holding an ``op``."""
    by_name = {n.name: n for n in graph.nodes}
    k = next(k for k, g in enumerate(graph.groups) if any(by_name[n].op == op for n in g))
    return group_compute(graph, k, [by_name[n] for n in graph.groups[k]])


def check_every_config(template, group, params: dict, x, want, what: str, rtol: float = 1e-5,
                       configs=None, target: str = "llvm") -> None:
    """Every config of ``template`` (or of ``configs``) lowered and built in one module, run on ``x`` (the
    group's input that is not in ``params``, in the group's layout) and compared with ``want`` (the
    group's output, in its layout) by max relative error; built for ``target`` (the template's)."""
    from nnvm.te.lower import lower_schedule

    args = [t for _, t in group.inputs] + list(group.outputs)
    configs = list(template.configs() if configs is None else configs)
    funcs = build_funcs([lower_schedule(template.apply(c), args, f"cfg_{q}") for q, c in enumerate(configs)],
                        target)
    ins = [np.array(params[v]) if v in params else x for v, _ in group.inputs]
    for q, config in enumerate(configs):
        got = np.full(want.shape, np.nan, np.float32)
        funcs[f"cfg_{q}"](*ins, got)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < rtol, f"{what} config {config}: max relative error {err:.2e}"


_C_CALLERS = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int bad;
%s
int main(int argc, char **argv) {
  int m = atoi(argv[1]);
  pthread_t t[8];
  for (int k = 0; k < m; k++) pthread_create(&t[k], 0, caller, (void *)(intptr_t)(k + 1));
  for (int k = 0; k < m; k++) pthread_join(t[k], 0);
  report();
  return bad != 0;
}
"""


def run_c_callers(tmp_path, body: str, callers: int):
    """A C stress test of the runtime (``nnvm_pool.c``): ``body`` defines ``caller`` (a thread's work,
    seeded by its argument; counts failures in ``bad``) and ``report`` (prints the counts); built
    against the pool and run with ``callers`` threads. The finished process (its stdout, exit status)."""
    import subprocess

    from nnvm_backend_llvm import pool_build

    src = tmp_path / "callers.c"
    src.write_text(_C_CALLERS % body)
    exe = str(tmp_path / "callers")
    subprocess.run(["cc", "-O2", "-std=c11", "-o", exe, str(src), pool_build("cc", "o", "test"), "-lpthread"],
                   check=True)
    return subprocess.run([exe, str(callers)], capture_output=True, text=True, timeout=300)


# Fixtures hand the helpers to tests: with --import-mode=importlib test folders are not importable.
@pytest.fixture
def build():
    return build_funcs


@pytest.fixture
def build_all():
    return build_schedules


@pytest.fixture
def conv_model():
    return save_conv_model


@pytest.fixture
def close():
    return assert_close


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def api_matmul():
    return check_api_matmul


@pytest.fixture
def group_of():
    return group_with_op


@pytest.fixture
def every_config():
    return check_every_config


@pytest.fixture
def c_callers():
    return run_c_callers


class ISATarget(NamedTuple):
    """One vector width a test checks: ``isa`` (``avx2``/``avx512``), ``decide`` (the named CPU of
    ``DECISION_TARGETS``, the same decisions on every machine) and ``run`` (what code of this width runs
    for here: the host's own target where it has this width, else the named CPU where this machine runs
    it, else None: an AVX2 machine compiles AVX-512 code but cannot run it)."""

    isa: str
    decide: str
    run: str | None

    @property
    def lanes(self) -> int:
        """float32 lanes of this width's vectors."""
        return {"avx2": 8, "avx512": 16}[self.isa]

    @property
    def build(self) -> str:
        """The target to build code for: ``run`` where code of this width runs here, else ``decide``."""
        return self.run or self.decide


@pytest.fixture(params=list(DECISION_TARGETS))
def isa_target(request, host):
    """Each vector width in turn (``ISATarget``), whatever the host's."""
    isa = request.param
    return ISATarget(isa, DECISION_TARGETS[isa], host.run_targets().get(isa))
