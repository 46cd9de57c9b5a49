"""What every GPU backend (target key ``gpu``: cuda, opencl, metal) shares, written once.

- ``schedules``: tunable schedule templates for every fused group (blocks, threads, shared memory),
  offered for the key ``gpu`` by ``plugin`` through ``nnvm_schedule_template``;
- ``library``: ``GPUKernelLibrary``, the device library base (allocate, copy, launch, free), the launch
  table, the device-resident runner (weights uploaded once, activations on the device) and the one-file
  export and load. A language plugin subclasses it with its device calls, and ``nnvm.tir.c_printer``
  with its spelling.
"""
