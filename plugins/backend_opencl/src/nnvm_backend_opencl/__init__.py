"""The OpenCL backend (target ``opencl``): OpenCL C printed by the core's C-family printer, run with pyopencl.

``opencl -device=cpu`` picks a CPU device (PoCL's, installed with the ``pocl-binary-distribution``
wheel), ``opencl -device=gpu`` a GPU; plain ``opencl`` takes the first GPU, else the first device.
"""
