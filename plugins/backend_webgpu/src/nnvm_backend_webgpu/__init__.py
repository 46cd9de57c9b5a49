"""The WebGPU backend (target ``webgpu``): WGSL printed by the core's C-family printer, run with wgpu."""
