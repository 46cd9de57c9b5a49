#!/usr/bin/env bash
# `make install`: everything `make test` and `make demo` need, on a fresh Debian machine with nothing
# installed by hand. Idempotent: when everything is present it prints nothing and takes about a second.
#
#   1. system packages (as root, with apt-get; `apt-get update` only when something is missing):
#        gcc        checked with `command -v gcc`  - links exported modules into shared libraries (`cc -shared`)
#        g++        checked with `command -v g++`  - compiles CUDA kernels as host C++ where there is no GPU,
#                                                 and the C++ example of docs/deploy.md (its test)
#        clang      checked with `command -v clang++` - compiles Metal kernels as C++ off a Mac (address spaces,
#                                                    ext_vector_type: g++ has neither)
#        libc6-dev  checked with dpkg-query       - the C library files the linker needs
#        Arm cross toolchains and emulator (targets aarch64, armv7), checked with dpkg-query:
#          gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf libc6-dev-arm64-cross libc6-dev-armhf-cross
#                                                     - link exported Arm modules and the nnvm-run runtime
#        RISC-V cross toolchain (the vendor example examples/backend_riscv, target riscv64):
#          gcc-riscv64-linux-gnu libc6-dev-riscv64-cross - link its exported modules and nnvm-run
#          qemu-user                                  - runs Arm and RISC-V code on this host (mod.run, nnvm run, tests)
#        pocl-opencl-icd  checked with dpkg-query  - Debian's PoCL, an OpenCL CPU driver the loader lists before
#          the one bundled in pyopencl's wheel: that one's LLVM 14 does not know newer CPUs (AMD Zen 5 here)
#          and then fails every kernel build with "unknown target CPU 'generic'"; Debian's picks its
#          kernel library's CPU (skylake-avx512 on Zen 5) instead of asking LLVM for the host's
#        mesa-vulkan-drivers libvulkan1  checked with dpkg-query - Mesa's lavapipe, a CPU Vulkan driver: the
#          WebGPU backend (wgpu-native, target webgpu) runs its WGSL kernels on it where there is no GPU
#        npm        checked with `command -v npm`  - installs deno (below)
#      Not root, or not Debian: prints what is missing and goes on (tests that need it will skip,
#      which fails under CI=true).
#   2. uv: on PATH or importable by python3, else `python3 -m pip install uv`.
#   3. `uv sync --all-packages`: the workspace's .venv with the core, every plugin and the dev group.
#   4. deno from npm (its Linux binary comes in @deno/linux-x64-glibc), under
#      ${NNVM_CACHE_DIR:-~/.cache/nnvm}/tools/deno: a JavaScript runtime with navigator.gpu, where the
#      WebGPU backend's tests run nnvm-webgpu.js on lavapipe.
#   5. Dawn for Node (npm webgpu, about 130 MB), under ${NNVM_CACHE_DIR:-~/.cache/nnvm}/tools/dawn: Tint,
#      the browsers' WGSL compiler, which the WebGPU tests run on the kernels (null backend, no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'install: %s\n' "$*" >&2; }
is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

apt_updated=0
apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "missing system packages: $*; install them with: sudo apt-get install $*"
    return 0
  fi
  say "installing system packages: $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. System packages.
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v clang++ >/dev/null 2>&1 || missing+=(clang)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if command -v dpkg-query >/dev/null 2>&1; then
  for pkg in libc6-dev gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf libc6-dev-arm64-cross \
      libc6-dev-armhf-cross gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user pocl-opencl-icd \
      mesa-vulkan-drivers libvulkan1; do
    is_installed "$pkg" || missing+=("$pkg")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

# 2. uv.
if ! bash scripts/uv --version >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
  fi
  say "installing uv with pip"
  # A Debian system python refuses plain `pip install` (PEP 668); then install for this user only.
  python3 -m pip install --quiet --disable-pip-version-check uv 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages uv
  bash scripts/uv --version >/dev/null
fi

# 3. The workspace environment (uv is silent when it is already in sync).
bash scripts/uv sync --all-packages --quiet

# 4. deno (the WebGPU backend's JavaScript tests), from npm, outside the checkout.
deno_dir="${NNVM_CACHE_DIR:-$HOME/.cache/nnvm}/tools/deno"
if command -v npm >/dev/null 2>&1 && ! "$deno_dir/node_modules/.bin/deno" --version >/dev/null 2>&1; then
  say "installing deno with npm into $deno_dir"
  mkdir -p "$deno_dir"
  npm install --prefix "$deno_dir" --no-audit --no-fund --silent deno@2.9.6 >/dev/null
fi

# 5. Dawn for Node (npm `webgpu`): Tint, the browsers' WGSL compiler, which checks what naga (wgpu) does
# not (uniformity around barriers, constant expressions); the WebGPU tests compile the kernels with it
# on Dawn's null backend (no adapter needed), outside the checkout.
dawn_dir="${NNVM_CACHE_DIR:-$HOME/.cache/nnvm}/tools/dawn"
if command -v npm >/dev/null 2>&1 && [ ! -f "$dawn_dir/node_modules/webgpu/package.json" ]; then
  say "installing Dawn for Node (webgpu) with npm into $dawn_dir"
  mkdir -p "$dawn_dir"
  npm install --prefix "$dawn_dir" --no-audit --no-fund --silent webgpu@0.6.2 >/dev/null
fi
