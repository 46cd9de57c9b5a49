"""The CUDA backend (target ``cuda -arch=sm_XY``): CUDA C++ compiled by NVRTC to a cubin (PTX kept for
newer GPUs), run through the CUDA driver API where an NVIDIA GPU is present and, where none is, as host
C++ on the CPU (each CUDA thread a fiber of ``nnvm.runtime.host_kernels``)."""
