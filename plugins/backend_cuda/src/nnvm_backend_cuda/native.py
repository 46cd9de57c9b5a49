"""Native execution through the CUDA driver API (``cuda.bindings.driver``): load a cubin, device memory,
launch, synchronize.

Everything goes through one ``driver`` object with the driver API's functions (each returns a tuple
whose first element is a ``CUresult``), so tests can hand in a fake at exactly this boundary. "No GPU
here" is ``cuInit`` failing, which it does by raising when the driver library is missing and by
returning an error when the library is there but no device is: ``open_device`` then returns None.
"""

from __future__ import annotations

import threading

from nnvm.errors import Error

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


class CUDADevice:
    """One CUDA device with its primary context. Errors are ``nnvm.Error`` naming the call and, for
    launches, the kernel.

    The driver keeps the current context per OS thread, and a run may come from any thread (a device
    module's runs, ``nnvm.build``'s functions called back from C), so every call that needs a context
    makes the primary one current first: a thread whose first call is ``synchronize`` or ``free`` would
    otherwise get ``CUDA_ERROR_INVALID_CONTEXT``.
    """

    def __init__(self, driver, device, context, arch: str):
        self.driver = driver
        self.device = device
        self.context = context
        self.arch = arch

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
        attr = driver.CUdevice_attribute
        major = probe._ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                          "cuDeviceGetAttribute")
        minor = probe._ok(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                          "cuDeviceGetAttribute")
        ctx = probe._ok(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        return cls(driver, dev, ctx, f"sm_{major}{minor}")

    def _ok(self, result, what: str, kernel: str | None = None):
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self.driver.CUresult.CUDA_SUCCESS:
            try:
                name = self.driver.cuGetErrorName(err)[1].decode()
            except Exception:
                name = str(err)
            where = f" (kernel {kernel})" if kernel else ""
            raise Error(f"CUDA {what} failed{where}: {name}")
        return values[0] if len(values) == 1 else (values or None)

    def _current(self) -> None:
        self._ok(self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # -- modules ----------------------------------------------------------------------------------
    def load(self, cubin: bytes, ptx: bytes, arch: str):
        """A loaded module: the cubin when it was built for this device's architecture, else the PTX
        (JIT-compiled by the driver for a newer GPU)."""
        self._current()
        image = cubin if arch == self.arch else ptx + b"\0"
        return self._ok(self.driver.cuModuleLoadData(image), "cuModuleLoadData")

    def function(self, module, kernel: str):
        self._current()
        return self._ok(self.driver.cuModuleGetFunction(module, kernel.encode()), "cuModuleGetFunction",
                        kernel)

    # -- memory -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """A device buffer of ``nbytes`` (at least 4); its address as an int."""
        self._current()
        return int(self._ok(self.driver.cuMemAlloc(max(int(nbytes), 4)), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        self._current()
        self._ok(self.driver.cuMemFree(ptr), "cuMemFree")

    def upload(self, ptr: int, host: int, nbytes: int) -> None:
        """Copy ``nbytes`` from host address ``host`` to device address ``ptr``."""
        self._current()
        self._ok(self.driver.cuMemcpyHtoD(ptr, host, nbytes), "cuMemcpyHtoD")

    def download(self, host: int, ptr: int, nbytes: int) -> None:
        self._current()
        self._ok(self.driver.cuMemcpyDtoH(host, ptr, nbytes), "cuMemcpyDtoH")

    # -- running ----------------------------------------------------------------------------------
    def launch(self, function, kernel: str, grid, block, args: int) -> None:
        """Launch on the default stream; ``args`` is the address of the ``void *[]`` of argument pointers."""
        self._current()
        self._ok(self.driver.cuLaunchKernel(function, *[int(g) for g in grid], *[int(b) for b in block],
                                            0, 0, args, 0), "cuLaunchKernel", kernel)

    def synchronize(self, kernel: str | None = None) -> None:
        """Wait for the launches so far; a fault in a kernel surfaces here, named by ``kernel`` (the
        last one launched)."""
        self._current()
        self._ok(self.driver.cuCtxSynchronize(), "cuCtxSynchronize", kernel)
