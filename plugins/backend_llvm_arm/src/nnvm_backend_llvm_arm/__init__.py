"""The LLVM backend for Arm (targets ``aarch64`` and ``armv7``), on the shared LLVM layer (nnvm_backend_llvm).

    mod = nnvm.compile("resnet18.onnx", target="aarch64")
    mod.run(x)                     # on x86: under qemu-aarch64, with the device runtime nnvm-run
    mod.export("resnet18-aarch64.so")   # copy it and nnvm-run to the board; no Python needed there

``python -m nnvm_backend_llvm_arm size`` prints the device runtime's size per target.
"""
