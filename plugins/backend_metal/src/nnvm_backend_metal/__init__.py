"""The Metal backend (target ``metal``): Metal Shading Language from the core's C-family printer, run
natively on a Mac through pyobjc and, everywhere else, compiled as C++ by clang against a shim that
keeps Metal's address spaces and run on the CPU (each Metal thread a fiber of
``nnvm.runtime.host_kernels``)."""
