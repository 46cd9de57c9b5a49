"""An example vendor plugin: the ``riscv64`` target on nnvm's shared LLVM layer (see docs/plugins.md)."""
