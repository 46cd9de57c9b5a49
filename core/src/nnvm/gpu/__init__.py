"""What every GPU backend (target key ``gpu``: cuda, opencl, metal) shares, written once.

- ``schedules``: tunable schedule templates for every fused group (blocks, threads, shared memory),
  offered for the key ``gpu`` by ``plugin`` through ``nnvm_schedule_template``;
- ``backend``: ``GPUBackend``, the stage pipeline (lower, vectorize, print, compile) a language plugin
  configures with its printer, ``VectorTarget``, library class and compiler call;
- ``kernels``: ``lower_for_gpu``, thread loops and shared memory lowered to launches of kernels;
- ``c_printer``: ``CPrinter``, the C-family source printer every language subclasses;
- ``host``: ``HostRunner``, the device of a library whose hardware is absent (kernels run on the CPU);
- ``library``: ``GPUKernelLibrary``, the device library base (allocate, copy, launch, free), the launch
  table, the device-resident runner (weights uploaded once, activations on the device) and the one-file
  export and load. A language plugin subclasses it with its device calls, and ``nnvm.gpu.c_printer``
  with its spelling.
"""
