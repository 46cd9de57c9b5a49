"""The WebGPU device under the core's GPU library (``nnvm.gpu.library.GPUKernelLibrary``).

Every kernel is an entry point of one WGSL module; each gets a compute pipeline with an explicit
layout (every parameter a read-write storage buffer, so one arena may be bound twice). A stream is a
command encoder: launches are dispatches in one compute pass, a copy out is a copy into a mappable
staging buffer, and ``synchronize`` submits the one command buffer of the run, then maps the staging
buffers back. Copies in go through ``queue.write_buffer``, which the queue orders before that submit.
Views are (buffer, offset, size) bindings, offsets multiples of the device's storage alignment. A
kernel whose parameters are packed (``wgsl.pack_plan``) binds one more buffer, filled by copies from
those parameters before each launch, between compute passes.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from nnvm.errors import Error, InputError, ModelLoadError
from nnvm.gpu.library import DeviceModule, DeviceTensor, GPUKernelLibrary
from nnvm_backend_webgpu import device as webgpu_device
from nnvm_backend_webgpu.web import export_web, read_web
from nnvm_backend_webgpu.wgsl import fold_at_run, pack_plan

FORMAT = "nnvm-webgpu"
SOURCE = "kernels.wgsl"


def _wgpu_reason(exc: Exception) -> str:
    """What wgpu's validation error says, on one line: the cause below its "Validation Error" heading."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    cause = lines[lines.index("Caused by:") + 1:] if "Caused by:" in lines else lines
    text = "; ".join(cause) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


@contextmanager
def refused(what: str):
    """wgpu's error (a validation error: a binding the device refuses, a submit of a failed encoder) as one
    sentence: wgpu-py raises it from the call, and a run going on past it would return stale memory."""
    import wgpu

    try:
        yield
    except wgpu.GPUError as exc:
        raise Error(f"the WebGPU device refused {what}: {_wgpu_reason(exc)}") from None


def check_32_bits(host: np.ndarray, what: str) -> None:
    """WGSL computes int64 and uint64 in 32 bits (``wgsl.WIDE``): a weight or input beyond them would give a
    wrong answer, so it is an error instead."""
    if host.dtype.kind in "iu" and host.dtype.itemsize == 8 and host.size:
        info = np.iinfo(np.int32 if host.dtype.kind == "i" else np.uint32)
        low, high = host.min(), host.max()
        if low < info.min or high > info.max:
            value = low if low < info.min else high
            raise InputError(f"{what} holds {value}, beyond the 32 bits the webgpu target computes "
                             f"{host.dtype} in; compile for another target")


class WebGPUDeviceModule(DeviceModule):
    """The GPU layer's device module, refusing 64-bit integers that 32 bits do not hold."""

    def __init__(self, lib, plan: dict, params: dict):
        for name, value in params.items():
            check_32_bits(np.asarray(value), f"the weight {name!r}")
        super().__init__(lib, plan, params)

    def run(self, values: list, timings: dict | None = None, shaped: tuple | None = None, keep=()) -> list:
        for d, v in zip(self.plan["inputs"], values):
            if not isinstance(v, DeviceTensor):  # one on the device was computed there, in 32 bits
                check_32_bits(np.asarray(v), f"the input {d['name']!r}")
        return super().run(values, timings, shaped, keep)


def _round4(n: int) -> int:
    return max(4, -(-int(n) // 4) * 4)


class Stream:
    """A command encoder of one run, its open compute pass and the copies back it waits for."""

    def __init__(self, dev):
        self.dev = dev
        self.encoder = dev.create_command_encoder()
        self.compute = None
        self.pending: list = []  # (staging buffer, host array)
        self.staging: dict = {}  # size -> free staging buffers, reused run after run

    def end_pass(self) -> None:
        if self.compute is not None:
            self.compute.end()
            self.compute = None


class WebGPUKernelLibrary(GPUKernelLibrary):
    """Kernels of one build: one WGSL module, a pipeline per kernel, on the process's device."""

    format = FORMAT
    language = "WebGPU"
    text_files = (SOURCE,)

    def __init__(self, source: str, tables: list, blobs: dict | None = None):
        import wgpu

        super().__init__(tables, {SOURCE: source}, {}, blobs)
        self._wgpu = wgpu
        _, self.dev = webgpu_device.device()
        self.base_align = int(webgpu_device.limits()["min_storage_buffer_offset_alignment"])
        try:
            self.module = self.dev.create_shader_module(code=source)
        except Exception as exc:  # wgpu's validation error: naga's message, with the line
            raise Error(f"the WGSL compiler rejected the kernels: {_wgpu_reason(exc)}") from None
        limits = webgpu_device.limits()
        self.max_workgroups = limits["max_compute_workgroups_per_dimension"]
        self.pipelines: dict = {}
        self.packed: dict = {}  # kernel -> wgsl.pack_plan of its function (recomputed, never read)
        # kernel -> how its grid folds at run time (wgsl.fold_at_run); kernel -> its read-only bindings
        self.run_folds = {la["kernel"]: la["fold"] for t in tables for la in t["launches"] if la.get("fold")}
        self.read_only = {la["kernel"]: la.get("read_only", []) for t in tables for la in t["launches"]}
        for table in tables:
            packed = pack_plan(table["params"], table["temporaries"])
            count = len(table["params"]) + len(table["temporaries"]) - len(packed) + bool(packed)
            for launch in table["launches"]:
                fold, read_only = launch.get("fold", True), launch.get("read_only", [])
                if fold not in (True, "y") or not (isinstance(read_only, list) and all(
                        isinstance(i, int) and 0 <= i < count for i in read_only)):  # a corrupt file's
                    raise ModelLoadError(f"kernel {launch['kernel']}: the launch table's fold {fold!r} or "
                                         f"read-only bindings {read_only!r} are not ones this runtime knows")
                if max(g if isinstance(g, int) else 1 for g in launch["grid"]) > limits[
                        "max_compute_workgroups_per_dimension"]:  # over symbolic dims: ``launch`` checks
                    raise Error(f"kernel {launch['kernel']}: {max(launch['grid'])} workgroups along one "
                                "axis, more than this WebGPU device allows")
                if launch["kernel"] not in self.pipelines:
                    self.pipelines[launch["kernel"]] = self._pipeline(launch["kernel"], count)
                    self.packed[launch["kernel"]] = packed

    def _pipeline(self, kernel: str, count: int):
        try:
            return self._make_pipeline(kernel, count)
        except Exception as exc:  # wgpu's validation error (a launch table that does not fit the kernels)
            raise Error(f"WebGPU cannot make a pipeline for kernel {kernel}: {_wgpu_reason(exc)}") from None

    def _make_pipeline(self, kernel: str, count: int):
        wgpu = self._wgpu
        types = wgpu.BufferBindingType
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {
            "type": types.read_only_storage if i in self.read_only[kernel] else types.storage}}
            for i in range(count)]
        layout = self.dev.create_bind_group_layout(entries=entries)
        pipeline = self.dev.create_compute_pipeline(
            layout=self.dev.create_pipeline_layout(bind_group_layouts=[layout]),
            compute={"module": self.module, "entry_point": kernel})
        return pipeline, layout

    @classmethod
    def open_export(cls, path: str) -> WebGPUKernelLibrary | None:
        """The library of a file ``export`` wrote, or of a folder for the web (``model.webgpu``)."""
        web = read_web(path)
        return cls(*web) if web is not None else super().open_export(path)

    @classmethod
    def from_files(cls, manifest: dict, files: dict, blobs: dict) -> WebGPUKernelLibrary:
        return cls(files[SOURCE], manifest["functions"], blobs)

    def export(self, path: str, blobs: dict) -> None:
        """A path ending in ``.webgpu``: the folder ``nnvm-webgpu.js`` loads (``web.py``); any other: the
        one file ``nnvm.load`` reads, as every GPU backend writes it."""
        if str(path).rstrip("/").endswith(".webgpu"):
            export_web(str(path), self.files[SOURCE], list(self.tables.values()), blobs)
        else:
            super().export(path, blobs)

    def describe_launch(self, launch: dict) -> str:
        return f"workgroups {tuple(launch['grid'])} workgroup_size {tuple(launch['block'])}"

    # -- the device -------------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        usage = self._wgpu.BufferUsage
        return self.dev.create_buffer(size=_round4(nbytes),
                                      usage=usage.STORAGE | usage.COPY_SRC | usage.COPY_DST)

    def free(self, buf) -> None:
        buf.destroy()

    def view(self, buf, offset: int, nbytes: int):
        return buf, offset, min(_round4(nbytes), buf.size - offset)

    def device_module(self, plan: dict, params: dict) -> WebGPUDeviceModule:
        return WebGPUDeviceModule(self, plan, params)

    def copy_in(self, stream, buf, offset: int, host: np.ndarray) -> None:
        data = host.view(np.uint8).reshape(-1)
        if data.nbytes % 4:  # write whole words: the tail lies in the tensor's own padding
            data = np.concatenate([data, np.zeros(4 - data.nbytes % 4, np.uint8)])
        with refused("a copy to the device"):
            self.dev.queue.write_buffer(buf, offset, data)

    def copy_out(self, stream, host: np.ndarray, buf, offset: int) -> None:
        stream.end_pass()
        size = _round4(host.nbytes)
        free = stream.staging.setdefault(size, [])
        usage = self._wgpu.BufferUsage
        staging = free.pop() if free else self.dev.create_buffer(size=size,
                                                                 usage=usage.MAP_READ | usage.COPY_DST)
        with refused("a copy from the device"):
            stream.encoder.copy_buffer_to_buffer(buf, offset, staging, 0, size)
        stream.pending.append((staging, host))

    def new_stream(self):
        return Stream(self.dev)

    def synchronize(self, stream) -> None:
        with refused("the run's commands"):
            stream.end_pass()
            self.dev.queue.submit([stream.encoder.finish()])
        for staging, host in stream.pending:
            with refused("reading an output back"):
                staging.map_sync(self._wgpu.MapMode.READ)
            data = np.frombuffer(staging.read_mapped(), np.uint8)
            host.reshape(-1).view(np.uint8)[:] = data[:host.nbytes]
            staging.unmap()
            stream.staging[staging.size].append(staging)
        stream.pending = []
        stream.encoder = self.dev.create_command_encoder()

    def release_stream(self, stream) -> None:
        for bufs in stream.staging.values():
            for b in bufs:
                b.destroy()

    def prepare(self, kernel: str, args: list):
        """(pipeline, bind group, copies): ``copies`` fill the packed binding (``wgsl.pack_plan``) from the
        parameters it holds, before each launch."""
        pipeline, layout = self.pipelines[kernel]
        args = [arg if isinstance(arg, tuple) else (arg, 0, arg.size) for arg in args]
        packed, copies = self.packed[kernel], []
        if packed:
            pack = self.alloc(4 * sum(-(-nbytes // 4) for _, _, nbytes in packed))
            copies = [(*args[i][:2], pack, 4 * words, _round4(nbytes)) for i, words, nbytes in packed]
            skip = {i for i, _, _ in packed}
            args = [a for i, a in enumerate(args) if i not in skip] + [(pack, 0, pack.size)]
        entries = [{"binding": i, "resource": {"buffer": buf, "offset": offset, "size": size}}
                   for i, (buf, offset, size) in enumerate(args)]
        with refused(f"the buffers bound to kernel {kernel}"):
            group = self.dev.create_bind_group(layout=layout, entries=entries)
        return pipeline, group, copies, self.run_folds.get(kernel)

    def launch(self, stream, prepared, grid: list, block: list) -> None:
        pipeline, group, copies, fold = prepared
        if fold:  # a grid of the dims, folded past 65535 workgroups (``wgsl.fold_at_run``)
            grid = fold_at_run(grid, fold)
        if max(grid) > (most := self.max_workgroups):
            raise InputError(f"these input shapes need {max(grid)} workgroups along one axis, more than this "
                             f"WebGPU device allows ({most}); use smaller inputs or another target")
        try:  # no context manager on this path: a run launches hundreds of kernels
            if copies:
                stream.end_pass()  # copies go between passes
                for copy in copies:
                    stream.encoder.copy_buffer_to_buffer(*copy)
            if stream.compute is None:
                stream.compute = stream.encoder.begin_compute_pass()
            stream.compute.set_pipeline(pipeline)
            stream.compute.set_bind_group(0, group)
            stream.compute.dispatch_workgroups(*grid)
        except self._wgpu.GPUError as exc:
            reason = _wgpu_reason(exc)
            raise Error(f"the WebGPU device refused a launch of {grid} workgroups: {reason}") from None
