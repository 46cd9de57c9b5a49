"""The shared GPU layer without a GPU: target keys, the GPU templates served for the key ``gpu``, and the
device library base (``nnvm.gpu.library``) driven by a device whose memory is numpy bytes and whose
kernels run in the core's reference interpreter. Checked against numpy: the whole path a GPU backend
takes (templates, ``lower_for_gpu``, launch table, device-resident runs, export and load)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import nnvm
import nnvm.target
from nnvm import plugins
from nnvm.backend import Backend
from nnvm.gpu.kernels import lower_for_gpu
from nnvm.gpu.library import GPUKernelLibrary, launch_table, read_export
from nnvm.graph.builder import GraphBuilder
from nnvm.hookspecs import hookimpl
from nnvm.target import parse_target
from nnvm.tir.interpreter import run_primfunc


class _InterpDevice(GPUKernelLibrary):
    """Device memory is numpy bytes; a launch runs the kernel (thread loops and all) in the interpreter.
    ``base_align`` 128 makes the runner scale the plan's 64-byte offsets, as an OpenCL device may."""

    format = "nnvm-test-interp"
    language = "test"
    base_align = 128

    def __init__(self, kernels: dict, tables: list, blobs=None):
        super().__init__(tables, {"kernels.txt": "\n\n".join(str(k) for k in kernels.values())}, {}, blobs)
        self.kernels = kernels
        self.launched = []

    def alloc(self, nbytes):
        return np.zeros(max(nbytes, 1), np.uint8)

    def view(self, buf, offset, nbytes):
        assert offset % self.base_align == 0
        return buf[offset:offset + nbytes]

    def copy_in(self, stream, buf, offset, host):
        buf[offset:offset + host.nbytes] = host.reshape(-1).view(np.uint8)

    def copy_out(self, stream, host, buf, offset):
        host.reshape(-1).view(np.uint8)[:] = buf[offset:offset + host.nbytes]

    def new_stream(self):
        return object()

    def synchronize(self, stream):
        pass

    def prepare(self, kernel, args):
        func = self.kernels[kernel]
        arrays = []
        for buf, arg in zip(func.params, args):
            dtype = np.dtype("bool" if buf.dtype == "bool" else buf.dtype)
            count = int(np.prod([int(d.value) for d in buf.shape])) if buf.shape else 1
            arrays.append(arg[:count * dtype.itemsize].view(dtype))
        return func, arrays

    def launch(self, stream, prepared, grid, block):
        self.launched.append(prepared[0].name)
        run_primfunc(*prepared)


class _InterpBackend(Backend):
    name = "test-gpu"
    target_kinds = ("testgpu",)
    keys, device = ("gpu",), "gpu"

    def build(self, funcs, target):
        programs = [lower_for_gpu(f) for f in funcs]
        kernels = {k.name: k for p in programs for k in p.kernels}
        return _InterpDevice(kernels, [launch_table(p) for p in programs])

    def open_foreign(self, path):
        found = read_export(path, _InterpDevice.format, text_files=("kernels.txt",))
        if found is None:
            return None
        raise AssertionError("not reached: the test reads the export itself")


class _Plugin:
    @hookimpl
    def nnvm_register_backends(self, register):
        register(_InterpBackend())


@pytest.fixture
def testgpu(monkeypatch):
    plugins.reset()
    plugins.manager().register(_Plugin(), name="test-gpu")
    yield "testgpu"
    plugins.reset()


def _graph():
    """conv 3x3 + relu, max pool, dense, softmax: the conv2d, generic and dense templates."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("small")
    x = b.input("x", (1, 3, 8, 8))
    w = b.param("w", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32"))
    c = b.node1("conv2d", [x, w], {"padding": (1, 1, 1, 1)})
    r = b.node1("relu", [c])
    p = b.node1("max_pool2d", [r], {"pool_size": (2, 2), "strides": (2, 2)})
    f = b.node1("reshape", [p], {"newshape": (1, 128)})
    d = b.node1("dense", [f, b.param("wd", (rng.standard_normal((10, 128)) * 0.1).astype("float32"))])
    b.output(b.node1("softmax", [d], {"axis": -1}))
    return b.build()


def _reference(graph, x):
    w, wd = graph.params["w"], graph.params["wd"]
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 8, 8, 8))
    for i in range(8):
        for j in range(8):
            conv[0, :, i, j] = np.tensordot(w, xp[0, :, i:i + 3, j:j + 3], axes=([1, 2, 3], [0, 1, 2]))
    pooled = np.maximum(conv, 0).reshape(1, 8, 4, 2, 4, 2).max(axis=(3, 5))
    d = pooled.reshape(1, 128) @ wd.T.astype("float64")
    e = np.exp(d - d.max())
    return e / e.sum()


def test_a_targets_keys_are_what_its_backend_declared(testgpu):
    """No table in the core: ``Target.keys`` is the registered backend's ``keys``; a kind no backend
    builds for has none."""
    assert parse_target("testgpu").keys == ("gpu",)
    assert parse_target("no-such-target").keys == ()


@pytest.mark.parametrize("facts, missing", [({"keys": ()}, "declares no target keys"),
                                            ({"keys": ("gpu",), "device": ""}, "declares no device")])
def test_a_backend_declaring_no_target_facts_is_refused_at_registration(facts, missing):
    class Undeclared(_InterpBackend):
        name = "undeclared"
        target_kinds = ("undeclared",)
        keys, device = (), ""

    for key, value in facts.items():
        setattr(Undeclared, key, value)

    class Plugin:
        @hookimpl
        def nnvm_register_backends(self, register):
            register(Undeclared())

    plugins.reset()
    try:
        plugins.manager().register(Plugin(), name="undeclared-plugin")
        with pytest.raises(nnvm.Error, match=f"backend 'undeclared' of plugin undeclared-plugin .*{missing}"):
            plugins.backends()
    finally:
        plugins.reset()


def _record_templates(block_schedules, monkeypatch) -> list:
    """The names of the templates ``block_schedules.group_template`` hands out from now on, in order."""
    names = []
    real = block_schedules.group_template

    def recording(group, **kwargs):
        template = real(group, **kwargs)
        names.append(template.name)
        return template

    monkeypatch.setattr(block_schedules, "group_template", recording)
    return names


def test_the_gpu_templates_serve_every_gpu_target_and_decline_cpu_ones(testgpu, monkeypatch):
    from nnvm.gpu import block_schedules, plugin

    names = _record_templates(block_schedules, monkeypatch)
    mod = nnvm.compile(_graph(), target=testgpu)  # a target kind nnvm.gpu has never heard of, key gpu
    assert {"gpu.conv2d", "gpu.dense", "gpu.generic"} <= set(names)
    source = mod.library.source()
    assert "threadIdx" in source and "blockIdx" in source and "shared" in source  # blocks, tiles
    for cpu in ("llvm", "aarch64"):
        assert plugin.nnvm_schedule_template(target=parse_target(cpu), group=None) is None


def test_weights_upload_once_and_runs_copy_only_inputs_and_outputs(testgpu):
    graph = _graph()
    mod = nnvm.compile(graph, target=testgpu)
    lib = mod.library
    weights = sum(v.nbytes for v in mod.params.values())
    assert lib.bytes_to_device == weights  # at load, once
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    want = _reference(graph, x)
    for _ in range(2):
        before_in, before_out = lib.bytes_to_device, lib.bytes_from_device
        got = mod.run(x)[0]
        assert lib.bytes_to_device - before_in == x.nbytes
        assert lib.bytes_from_device - before_out == got.nbytes
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert len(lib.launched) >= 2 * mod.stats()["kernels"]


def test_concurrent_runs_use_their_own_device_arenas(testgpu):
    graph = _graph()
    mod = nnvm.compile(graph, target=testgpu)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 3, 8, 8)).astype("float32") for _ in range(4)]
    serial = [mod.run(x)[0] for x in xs]
    got = [None] * 4
    start = threading.Barrier(4)

    def work(k):
        start.wait()
        got[k] = mod.run(xs[k])[0]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, s in zip(got, serial):
        np.testing.assert_array_equal(g, s)
    assert len(mod._device._pool) >= 1


def test_a_launch_table_binding_less_than_its_tensor_is_refused(testgpu):
    """A launch table (of a tampered file) binding an activation in fewer bytes than the plan's tensor: the
    kernels would read past the binding (zeros on WebGPU, no error), so the plan is refused."""
    from nnvm.errors import ModelLoadError
    from nnvm.gpu.library import check_plan_against_tables

    mod = nnvm.compile(_graph(), target=testgpu)
    plan, tables, params = mod._device.plan, mod._device.tables, mod._device.params
    check_plan_against_tables(plan, tables, params, plan["arena_bytes"])
    first = plan["calls"][0]["kernel"]
    four = [{**p, "nbytes": 4} for p in tables[first]["params"]]
    short = {**tables, first: {**tables[first], "params": four}}
    with pytest.raises(ModelLoadError, match=rf"{first}'s argument \w+ is bound as 4 bytes, its tensor has"):
        check_plan_against_tables(plan, short, params, plan["arena_bytes"])


def test_export_is_one_zip_the_backend_reads_back(testgpu, tmp_path):
    mod = nnvm.compile(_graph(), target=testgpu)
    path = str(tmp_path / "m.nnvm")
    mod.export(path)
    manifest, files, blobs = read_export(path, _InterpDevice.format, text_files=("kernels.txt",))
    assert set(blobs) == {"graph", "params"} and "kernels.txt" in files
    assert [f["name"] for f in manifest["functions"]] == list(mod.library.tables)
    assert read_export(path, "nnvm-something-else") is None


def test_conv2d_chunk_shrinks_with_the_input_tile_a_round_copies():
    """``chunk`` 0 (the fallback): input channels per round such that each thread copies about
    ``COPY_PER_THREAD`` values; a stride-2 3x3 window triples the input tile of a 7x7 output tile."""
    from nnvm.gpu.block_schedules import COPY_PER_THREAD, _auto_chunk

    def attrs(k, s):
        return {"kernel_shape": (128, 64, k, k), "strides": (s, s), "dilation": (1, 1)}

    # 98 threads (7 x 7 x 2), 8 output channels per block: 81 + 72 values per channel at stride 1,
    # 225 + 72 at stride 2, 49 + 8 for a 1x1 convolution (capped at 8 channels)
    assert COPY_PER_THREAD == 8
    assert [_auto_chunk(attrs(k, s), 7, 7, 8, 98) for k, s in ((3, 1), (3, 2), (1, 1))] == [5, 2, 8]


def test_8bit_convolutions_and_dense_take_the_tiled_templates_and_are_exact(testgpu, monkeypatch):
    """qconv2d (plain and depthwise) and qdense get the conv2d/dense templates (tiles in shared memory),
    not the generic one, and give numpy's int64 sums exactly."""
    from nnvm.gpu import block_schedules

    names = _record_templates(block_schedules, monkeypatch)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (1, 4, 6, 6)).astype("uint8")
    w = rng.integers(-128, 128, (8, 4, 3, 3)).astype("int8")
    wd = rng.integers(-128, 128, (4, 1, 3, 3)).astype("int8")
    wf = rng.integers(-128, 128, (5, 36)).astype("int8")
    b = GraphBuilder("q")
    xin = b.input("x", x.shape, "uint8")
    zp = {"data_zero_point": 121, "weight_zero_point": 0}
    b.output(b.node1("qconv2d", [xin, b.param("w", w)], {"padding": (1, 1, 1, 1), **zp}))
    b.output(b.node1("qconv2d", [xin, b.param("wd", wd)], {"padding": (1, 1, 1, 1), "groups": 4, **zp}))
    b.output(b.node1("qdense", [b.node1("reshape", [xin], {"newshape": (4, 36)}), b.param("wf", wf)], zp))
    got = nnvm.compile(b.build(), target=testgpu).run(x)
    assert {"gpu.conv2d", "gpu.depthwise_conv2d", "gpu.dense"} <= set(names), names
    xc = np.pad(x.astype(np.int64) - 121, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xc, (3, 3), axis=(2, 3))  # [1, 4, 6, 6, 3, 3]
    want = [np.einsum("nchwyx,ocyx->nohw", win, w.astype(np.int64)),
            np.einsum("nchwyx,cyx->nchw", win, wd[:, 0].astype(np.int64)),
            (x.astype(np.int64).reshape(4, 36) - 121) @ wf.astype(np.int64).T]
    for k, (g, e) in enumerate(zip(got, want)):
        assert g.dtype == np.int32 and np.array_equal(g, e), f"output {k}: {int((g != e).sum())} sums differ"
