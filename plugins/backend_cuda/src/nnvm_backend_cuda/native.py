"""Native execution through the CUDA driver API (``cuda.bindings.driver``): load a cubin, device memory,
streams with pinned staging memory and timing events, launches checked against the device's limits.

Everything goes through one ``driver`` object with the driver API's functions (each returns a tuple
whose first element is a ``CUresult``), so tests can hand in a fake at exactly this boundary. "No GPU
here" is ``cuInit`` failing, which it does by raising when the driver library is missing and by
returning an error when the library is there but no device is: ``open_device`` then returns None.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from dataclasses import dataclass

from nnvm.errors import Error
from nnvm.gpu.host import say_once

_lock = threading.Lock()
_device: dict = {}  # "device" -> CUDADevice or None, probed once per process


def _driver():
    from cuda.bindings import driver

    return driver


def open_device(driver=None):
    """The first CUDA device, or None when there are no bindings, no driver or no device. Probed once per
    process unless a ``driver`` is given; a device that is there but fails to open raises ``Error``."""
    if driver is not None:
        return CUDADevice.open(driver)
    with _lock:
        if "device" not in _device:
            try:
                driver = _driver()
            except ImportError:  # no cuda-bindings wheel: no GPU to use
                _device["device"] = None
            else:  # a driver that fails past cuInit is an error, not "no GPU": tests must not skip it
                _device["device"] = CUDADevice.open(driver)
        return _device["device"]


@dataclass(frozen=True)
class DeviceLimits:
    """What one launch may ask of the device, read once when it opens."""

    threads_per_block: int
    block: tuple  # (x, y, z) threads
    grid: tuple  # (x, y, z) blocks
    shared_per_block: int  # bytes of static shared memory

    # attribute name suffix (CU_DEVICE_ATTRIBUTE_...) of each field
    ATTRIBUTES = {"threads_per_block": ("MAX_THREADS_PER_BLOCK",),
                  "block": ("MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z"),
                  "grid": ("MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z"),
                  "shared_per_block": ("MAX_SHARED_MEMORY_PER_BLOCK",)}


class CUDADevice:
    """One CUDA device with its primary context. Errors are ``nnvm.Error`` naming the call and, for
    launches, synchronizations and copies after a launch, the kernel.

    The driver keeps the current context per OS thread, and a run may come from any thread (a device
    module's runs, ``nnvm.build``'s functions called back from C), so every call that needs a context
    makes the primary one current first: a thread whose first call is ``synchronize`` or ``free`` would
    otherwise get ``CUDA_ERROR_INVALID_CONTEXT``.
    """

    def __init__(self, driver, device, context, arch: str, limits: DeviceLimits | None = None):
        self.driver = driver
        self.device = device
        self.context = context
        self.arch = arch
        self.limits = limits

    @classmethod
    def open(cls, driver) -> CUDADevice | None:
        try:
            (err,) = driver.cuInit(0)
        except Exception:  # the driver library itself is missing: no GPU
            return None
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return None
        probe = cls(driver, None, None, "")
        dev = probe._ok(driver.cuDeviceGet(0), "cuDeviceGet")
        major = probe._attribute(dev, "COMPUTE_CAPABILITY_MAJOR")
        minor = probe._attribute(dev, "COMPUTE_CAPABILITY_MINOR")
        try:
            limits = DeviceLimits(**{field: tuple(probe._attribute(dev, a) for a in names) if len(names) > 1
                                     else probe._attribute(dev, names[0])
                                     for field, names in DeviceLimits.ATTRIBUTES.items()})
        except (AttributeError, Error) as exc:  # a run is still possible: the driver checks launches itself
            limits = None
            say_once(f"could not read the CUDA device's launch limits ({exc}): launches are checked by the "
                     f"driver only")
        ctx = probe._ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        return cls(driver, dev, ctx, f"sm_{major}{minor}", limits)

    def _attribute(self, dev, name: str) -> int:
        attr = getattr(self.driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(self._ok(self.driver.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))

    def _ok(self, result, what: str, kernel: str | None = None, after: str | None = None):
        """The call's value(s); an error raises naming ``what`` was called and the ``kernel`` launched
        (or, for a copy or synchronize that reports an earlier launch's fault, the kernel ``after`` which)."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self.driver.CUresult.CUDA_SUCCESS:
            raise Error(f"CUDA {what} failed{_where(kernel, after)}: {self.error_text(err)}")
        return values[0] if len(values) == 1 else (values or None)

    def error_text(self, err) -> str:
        """``CUDA_ERROR_X`` and, where the driver has one, its description."""
        try:
            name = self.driver.cuGetErrorName(err)[1].decode()
        except Exception:
            name = str(err)
        try:
            description = self.driver.cuGetErrorString(err)[1].decode()
        except Exception:
            description = ""
        return f"{name} ({description})" if description else name

    def _current(self) -> None:
        self._ok(self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # -- modules ----------------------------------------------------------------------------------
    def load(self, cubin: bytes, ptx: bytes, arch: str):
        """A loaded module: the cubin when it was built for this device's architecture, else the PTX
        (JIT-compiled by the driver for a newer GPU)."""
        self._current()
        native = arch == self.arch
        image = cubin if native else ptx + b"\0"
        what = f"the {arch} cubin" if native else f"the {arch} PTX on an {self.arch} device"
        return self._ok(self.driver.cuModuleLoadData(image), f"cuModuleLoadData ({what})")

    def function(self, module, kernel: str):
        self._current()
        return self._ok(self.driver.cuModuleGetFunction(module, kernel.encode()), "cuModuleGetFunction",
                        kernel)

    def check_launch(self, kernel: str, grid, block, shared_bytes: int = 0, function=None) -> None:
        """Refuse a launch the device cannot run, before it is made: ``Error`` naming the kernel, the launch
        and the limit. ``function`` (a loaded kernel) adds the driver's own threads-per-block limit for
        it, which its registers may make lower than the device's."""
        grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
        launch = f"grid {grid} block {block}"

        def refuse(limit: str):
            raise Error(f"CUDA kernel {kernel}: launch {launch} exceeds the device's {limit}; refused before "
                        f"launch")

        if len(grid) != 3 or len(block) != 3 or min(grid + block) < 1:
            refuse("shape (three positive sizes each)")
        lim = self.limits
        threads = math.prod(block)
        if lim is not None:
            if threads > lim.threads_per_block:
                refuse(f"maximum of {lim.threads_per_block} threads per block ({threads})")
            for axis, size, most in zip("xyz", block, lim.block):
                if size > most:
                    refuse(f"maximum block size {most} along {axis} ({size})")
            for axis, size, most in zip("xyz", grid, lim.grid):
                if size > most:
                    refuse(f"maximum grid size {most} along {axis} ({size})")
            if shared_bytes > lim.shared_per_block:
                refuse(f"maximum of {lim.shared_per_block} bytes of shared memory per block ({shared_bytes})")
        if function is not None and hasattr(self.driver, "cuFuncGetAttribute"):
            self._current()
            attr = self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
            most = int(self._ok(self.driver.cuFuncGetAttribute(attr, function),
                                "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", kernel))
            if threads > most:
                refuse(f"maximum of {most} threads per block for this kernel's registers ({threads})")

    # -- memory -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """A device buffer of ``nbytes`` (at least 4); its address as an int."""
        self._current()
        nbytes = max(int(nbytes), 4)
        return int(self._ok(self.driver.cuMemAlloc(nbytes), f"cuMemAlloc of {nbytes} bytes"))

    def free(self, ptr: int) -> None:
        self._current()
        self._ok(self.driver.cuMemFree(ptr), "cuMemFree")

    def upload(self, ptr: int, host: int, nbytes: int) -> None:
        """Copy ``nbytes`` from host address ``host`` to device address ``ptr`` (synchronous)."""
        self._current()
        self._ok(self.driver.cuMemcpyHtoD(ptr, host, nbytes), f"cuMemcpyHtoD of {nbytes} bytes")

    def download(self, host: int, ptr: int, nbytes: int) -> None:
        self._current()
        self._ok(self.driver.cuMemcpyDtoH(host, ptr, nbytes), f"cuMemcpyDtoH of {nbytes} bytes")

    # -- running ----------------------------------------------------------------------------------
    def launch(self, function, kernel: str, grid, block, args: int, stream=None) -> None:
        """Launch on ``stream`` (a ``CUDAStream``; None: the default stream); ``args`` is the address of the
        ``void *[]`` of argument pointers."""
        self._current()
        handle = 0 if stream is None else stream.handle
        self._ok(self.driver.cuLaunchKernel(function, *[int(g) for g in grid], *[int(b) for b in block],
                                            0, handle, args, 0), "cuLaunchKernel", kernel)
        if stream is not None:
            stream.last_kernel = kernel

    def synchronize(self, kernel: str | None = None) -> None:
        """Wait for the launches so far; a fault in a kernel surfaces here, named by ``kernel`` (the
        last one launched)."""
        self._current()
        self._ok(self.driver.cuCtxSynchronize(), "cuCtxSynchronize", kernel)

    def new_stream(self) -> CUDAStream:
        return CUDAStream(self)


def _where(kernel: str | None, after: str | None) -> str:
    if kernel:
        return f" (kernel {kernel})"
    return f" (after kernel {after})" if after else ""


STAGING_ALIGN = 256  # bytes: each staged copy starts at a multiple (what cudaMalloc'd memory guarantees)
STAGING_MIN = 1 << 16  # bytes of the first pinned chunk of a stream


class CUDAStream:
    """A ``cuStreamCreate``'d stream with what its asynchronous work needs on the host: pinned staging
    memory (``cuMemHostAlloc``) that copies go through, so ``cuMemcpy*Async`` really is asynchronous and
    a caller's array may be dropped or reused as soon as its copy is enqueued; named timing events; and
    the last kernel launched, which errors of later calls name (a kernel's fault surfaces at the next
    copy or synchronize).

    Staged copies take consecutive slices of the last pinned chunk, a new chunk when it is full; nothing
    is reused before ``synchronize``, which then copies downloads out to their arrays and merges the
    chunks into one, so a stream's runs after its first allocate nothing. ``close`` (or the stream being
    collected) releases the stream, its events and its pinned memory."""

    def __init__(self, device: CUDADevice):
        self.device = device
        drv = device.driver
        device._current()
        self.handle = device._ok(drv.cuStreamCreate(0), "cuStreamCreate")
        self.chunks: list = []  # [address, nbytes] of pinned memory, the last one being filled
        self.used = 0  # bytes of the last chunk taken since the last synchronize
        self.pending: list = []  # (host array, staged address, nbytes) to copy out after synchronize
        self.events: dict = {}  # name -> CUevent
        self.last_kernel: str | None = None
        self._release = weakref.finalize(self, _release_stream, device, self.handle, self.chunks, self.events,
                                         True)

    # -- staging ----------------------------------------------------------------------------------
    def _stage(self, nbytes: int) -> int:
        size = -(-max(nbytes, 1) // STAGING_ALIGN) * STAGING_ALIGN
        if not self.chunks or self.used + size > self.chunks[-1][1]:
            chunk = max(size, STAGING_MIN, 2 * self.chunks[-1][1] if self.chunks else 0)
            self.chunks.append([self._host_alloc(chunk), chunk])
            self.used = 0
        address = self.chunks[-1][0] + self.used
        self.used += size
        return address

    def _host_alloc(self, nbytes: int) -> int:
        dev = self.device
        dev._current()
        return int(dev._ok(dev.driver.cuMemHostAlloc(nbytes, 0), f"cuMemHostAlloc of {nbytes} bytes"))

    # -- work -------------------------------------------------------------------------------------
    def copy_in(self, ptr: int, host) -> None:
        """Enqueue a copy of the contiguous numpy array ``host`` to device address ``ptr``; ``host`` is
        staged now, so the caller may change it at once."""
        nbytes = host.nbytes
        if not nbytes:
            return
        staged = self._stage(nbytes)
        ctypes.memmove(staged, host.ctypes.data, nbytes)
        dev = self.device
        dev._current()
        dev._ok(dev.driver.cuMemcpyHtoDAsync(ptr, staged, nbytes, self.handle),
                f"cuMemcpyHtoDAsync of {nbytes} bytes", after=self.last_kernel)

    def copy_out(self, host, ptr: int) -> None:
        """Enqueue a copy from device address ``ptr`` into the contiguous numpy array ``host``, which
        holds the bytes once ``synchronize`` returns."""
        nbytes = host.nbytes
        if not nbytes:
            return
        staged = self._stage(nbytes)
        dev = self.device
        dev._current()
        dev._ok(dev.driver.cuMemcpyDtoHAsync(staged, ptr, nbytes, self.handle),
                f"cuMemcpyDtoHAsync of {nbytes} bytes", after=self.last_kernel)
        self.pending.append((host, staged, nbytes))

    def launch(self, function, kernel: str, grid, block, args: int) -> None:
        self.device.launch(function, kernel, grid, block, args, stream=self)

    def record(self, name: str) -> None:
        """Record the timing event ``name`` (created on first use) at this point of the stream."""
        dev = self.device
        dev._current()
        if name not in self.events:
            self.events[name] = dev._ok(dev.driver.cuEventCreate(0), "cuEventCreate")
        dev._ok(dev.driver.cuEventRecord(self.events[name], self.handle), f"cuEventRecord({name})",
                after=self.last_kernel)

    def elapsed_ms(self, start: str, stop: str) -> float:
        """Device milliseconds between two recorded events, after ``synchronize``."""
        dev = self.device
        dev._current()
        # CUDA 13 headers map the name to cuEventElapsedTime_v2; a binding may spell either
        elapsed = getattr(dev.driver, "cuEventElapsedTime", None) or dev.driver.cuEventElapsedTime_v2
        return float(dev._ok(elapsed(self.events[start], self.events[stop]),
                             f"cuEventElapsedTime({start}, {stop})"))

    def synchronize(self) -> None:
        """Wait for everything enqueued; then the downloads are in their arrays. A kernel's fault
        surfaces here, named by the last kernel launched on the stream."""
        dev = self.device
        try:
            dev._current()
            dev._ok(dev.driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize", self.last_kernel)
            for host, staged, nbytes in self.pending:
                ctypes.memmove(host.ctypes.data, staged, nbytes)
        finally:
            self.pending.clear()
            self.used = 0
        if len(self.chunks) > 1:  # the work is done: one chunk as large as all of them from now on
            total = sum(n for _, n in self.chunks)
            for address, _ in self.chunks:
                dev._ok(dev.driver.cuMemFreeHost(address), "cuMemFreeHost")
            self.chunks.clear()
            self.chunks.append([self._host_alloc(total), total])

    def close(self) -> None:
        """Release the stream, its events and its pinned memory (after waiting for its work)."""
        if self._release.detach() is not None:
            _release_stream(self.device, self.handle, self.chunks, self.events, False)


def _release_stream(device: CUDADevice, handle, chunks: list, events: dict, quiet: bool) -> None:
    """Free what a stream holds; ``quiet`` (when collected, maybe at exit) ignores the driver's errors."""
    drv = device.driver
    try:
        device._current()
        device._ok(drv.cuStreamSynchronize(handle), "cuStreamSynchronize")
        for event in events.values():
            device._ok(drv.cuEventDestroy(event), "cuEventDestroy")
        events.clear()
        for address, _ in chunks:
            device._ok(drv.cuMemFreeHost(address), "cuMemFreeHost")
        chunks.clear()
        device._ok(drv.cuStreamDestroy(handle), "cuStreamDestroy")
    except Exception:
        if not quiet:
            raise
