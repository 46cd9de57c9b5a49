"""Compiling as if on another CPU (``nnvm.target.assume_host``, the suites' ``--host-cpu``): ``llvm`` means
the assumed CPU, its caches decide, named CPUs are unchanged, and code still runs here where this
machine cannot run the assumed CPU's; targets stating caches and cores (``-l2=1M -cores=8``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cpu.cost_model import machine_of, streams_from_memory
from nnvm.errors import TargetError
from nnvm.target import HostCPU, assume_host, assumed_host, parse_target
from nnvm_backend_llvm import host_cpu
from nnvm_backend_llvm_x86 import plugin as x86_plugin
from nnvm_testing.hosts import DECISION_TARGETS, describe_host

ROOT = Path(__file__).resolve().parents[3]


def test_llvm_means_the_assumed_cpu_and_named_cpus_stay(assume_cpu):
    assume_cpu(HostCPU("haswell", 32 << 10, 256 << 10, 8 << 20, cores=6))
    llvm = parse_target("llvm")
    backend = llvm.backend
    assert backend.resolve(llvm).cpu == "haswell" and backend.vector_lanes(llvm) == 8
    sig = backend.cpu_signature(llvm)
    assert (sig.l1d, sig.l2, sig.l3, sig.cores) == (32 << 10, 256 << 10, 8 << 20, 6)
    named = parse_target("llvm -mcpu=skylake-avx512")
    assert backend.vector_lanes(named) == 16 and backend.cpu_signature(named).l2 is None
    assert previous_is_returned()


def previous_is_returned() -> bool:
    before = assumed_host()
    znver5 = HostCPU("znver5")
    try:
        return assume_host(znver5) is before and assumed_host() is znver5
    finally:
        assume_host(before)


def test_code_for_a_cpu_this_machine_cannot_run_is_built_for_this_one(tmp_path, assume_cpu, monkeypatch):
    """The assumed CPU's decisions (16 lanes), code this machine runs, right against onnxruntime; a target
    naming that CPU stays a cross compile."""
    monkeypatch.setattr(x86_plugin, "_runs_here", lambda resolved: resolved.cpu != "sapphirerapids")
    assume_cpu("sapphirerapids")
    llvm = parse_target("llvm")
    backend = llvm.backend
    assert backend.vector_lanes(llvm) == 16 and backend.code_target(llvm).cpu == host_cpu()
    assert backend.host_can_run(llvm)
    assert "cannot run sapphirerapids's code" in describe_host().note
    named = parse_target("llvm -mcpu=sapphirerapids")
    assert backend.code_target(named).cpu == "sapphirerapids" and not backend.host_can_run(named)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    x = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    assert any(t.shape[-1] == 16 for t in mod.graph.types.values() if len(t.shape) == 5)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(mod.run(x)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("option", ["-l2=big", "-l3=0", "-cores=two", "-cores=0", "-l1d"])
def test_cache_and_core_options_are_checked(option):
    target = parse_target(f"llvm -mcpu=znver5 {option}")
    with pytest.raises(TargetError, match=option.split("=")[0]):
        target.backend.check_target(target)


def test_stated_caches_decide_a_named_cpu():
    """``llvm -mcpu=znver5`` alone knows no last-level cache (nothing streams from memory); stating it
    makes the decision the same on every machine."""
    bare = parse_target("llvm -mcpu=znver5")
    stated = parse_target("llvm -mcpu=znver5 -l2=1M -l3=32M -cores=2")
    if bare.backend.resolve(bare).cpu != describe_host().cpu:
        assert not streams_from_memory(bare, 1 << 40)
    assert streams_from_memory(stated, 17 << 20) and not streams_from_memory(stated, 15 << 20)
    assert (machine_of(stated).l2, machine_of(stated).threads) == (1 << 20, 2)


def test_the_host_fixture_runs_each_width_this_machine_runs(host):
    targets = host.run_targets()
    assert targets[host.isa] == "llvm"
    assert "avx2" in targets  # every x86-64 machine this suite runs on has AVX2 (its CI and dev hosts)
    if host.runs(DECISION_TARGETS["avx512"]):
        assert "avx512" in targets


def test_the_host_cpu_option_runs_a_suite_as_if_on_haswell(pytester):
    """``pytest --host-cpu=haswell``: the header names it, ``llvm`` is an AVX2 CPU with Haswell's caches."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_as_if="""
        from nnvm.target import parse_target

        def test_haswell(host):
            llvm = parse_target("llvm")
            assert host.cpu == "haswell" and host.lanes == 8 and host.l2 == 256 << 10
            assert llvm.backend.vector_lanes(llvm) == 8
    """)
    result = pytester.runpytest_subprocess("--host-cpu=haswell", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["host cpu: haswell (assumed, --host-cpu): haswell, 256-bit vectors*"])
    result.assert_outcomes(passed=1)
