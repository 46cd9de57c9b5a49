"""The process's WebGPU device (wgpu-native), opened once, with the adapter's own limits.

wgpu-native runs on Vulkan, Metal or D3D12; on a machine without a GPU, Mesa's lavapipe (Debian's
``mesa-vulkan-drivers``) is a CPU Vulkan driver it finds like any other. The device is requested with
every limit the adapter has (WebGPU hands out its guaranteed minimums otherwise), and those limits are
what the printer checks kernels against.
"""

from __future__ import annotations

import os
import threading

from nnvm.errors import Error

_lock = threading.Lock()
_device: dict = {}

LIMIT_NAMES = ("max_compute_workgroup_size_x", "max_compute_workgroup_size_y", "max_compute_workgroup_size_z",
               "max_compute_invocations_per_workgroup", "max_compute_workgroups_per_dimension",
               "max_storage_buffers_per_shader_stage", "max_compute_workgroup_storage_size",
               "max_storage_buffer_binding_size", "min_storage_buffer_offset_alignment")


def device():
    """(adapter, device) of the first WebGPU adapter, made once per process."""
    with _lock:
        if "device" not in _device:
            # Vulkan's loader complains on stderr when there is no XDG_RUNTIME_DIR, harmlessly.
            os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
            import wgpu

            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
            if adapter is None:
                raise Error("no WebGPU adapter found: install a GPU driver, or Mesa's CPU Vulkan driver "
                            "(apt-get install mesa-vulkan-drivers libvulkan1)")
            dev = adapter.request_device_sync(required_limits=dict(adapter.limits))
            _device["adapter"], _device["device"] = adapter, dev
        return _device["adapter"], _device["device"]


def limits() -> dict:
    """The device's limits the compiler checks, by the printer's names (``max_compute_...``)."""
    adapter, _ = device()
    return {name: int(adapter.limits[name.replace("_", "-")]) for name in LIMIT_NAMES}


def describe() -> str:
    """The adapter in words: ``llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, CPU)``."""
    info = device()[0].info
    return f"{info['device']} ({info['backend_type']}, {info['adapter_type']})"
