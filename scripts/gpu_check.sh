#!/usr/bin/env bash
# `make gpu-check`: the GPU backends on a real NVIDIA GPU, as one prepared command for the lent machine.
#
#   bash scripts/gpu_check.sh --wheels      here: download what the device image lacks into .gpu/wheels
#   bash scripts/gpu_check.sh [OPTIONS]     on the GPU machine: install nnvm from this tree, run the check
#   bash scripts/gpu_check.sh --rehearse    here: the same in a Python 3.12 venv of the image's packages,
#                                           the CUDA kernels on the CPU runner (what `make test` runs)
#
# The GPU machine reaches no package registry: its python3 (3.12) already holds numpy, onnx, onnxruntime,
# pluggy, llvmlite, h5py, cuda-bindings and NVRTC 13 (scripts/gpu_image.txt); what it lacks travels in
# .gpu/wheels (hatchling to build our packages from the copied tree; pyopencl for NVIDIA's OpenCL).
# Every other option goes to scripts/gpu_check.py (--out DIR, --budget SECONDS, --tune-seconds N, ...).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=.gpu/wheels
# What the image lacks, each pinned; hatchling's and pyopencl's own needs included (pip runs --no-deps).
CARRIED=(hatchling==1.33.0 pathspec==1.1.1 trove-classifiers==2026.9.21.13 tomlkit==0.15.2
         pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.8 siphash24==1.9)
# Every plugin: a conformance or export path may look up any of them, and a missing one is a failure there.
PACKAGES=(./core ./conformance ./plugins/frontend_onnx ./plugins/backend_cuda ./plugins/backend_opencl
          ./plugins/backend_llvm ./plugins/backend_llvm_x86 ./plugins/backend_llvm_arm ./plugins/backend_metal
          ./testing)  # nnvm_testing: the reference venvs the checks compare against
CARRY_LIMIT_MB=64

say() { printf 'gpu-check: %s\n' "$*" >&2; }

# An interpreter with pip for `pip download`: $1 if given, else python3 (under `uv run`, python3 is the
# workspace venv's, which has no pip: the rehearsal passes its image venv's, which does).
download_wheels() {
  local pip_python=${1:-python3}
  mkdir -p "$WHEELS"
  local have=1
  for spec in "${CARRIED[@]}"; do
    local name=${spec%%==*} version=${spec#*==}
    ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl >/dev/null 2>&1 || have=0
  done
  [ "$have" = 1 ] && return 0
  say "downloading ${CARRIED[*]} into $WHEELS"
  "$pip_python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$WHEELS" "${CARRIED[@]}"
  local mb
  mb=$(du -sm "$WHEELS" | cut -f1)
  if [ "$mb" -gt "$CARRY_LIMIT_MB" ]; then
    say "$WHEELS holds $mb MiB: over the $CARRY_LIMIT_MB MiB a device call carries"
    exit 1
  fi
}

# Install nnvm from this tree into $1 (a --target folder) with interpreter $2, the carried wheels first.
install_nnvm() {
  local site=$1 python=$2 start=$SECONDS
  rm -rf "$site" && mkdir -p "$site/build"
  "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
    --target "$site/build" "$WHEELS"/hatchling-*.whl "$WHEELS"/pathspec-*.whl "$WHEELS"/trove_classifiers-*.whl \
    "$WHEELS"/tomlkit-*.whl
  "$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
    --target "$site/lib" "$WHEELS"/pyopencl-*.whl "$WHEELS"/pytools-*.whl "$WHEELS"/platformdirs-*.whl \
    "$WHEELS"/siphash24-*.whl
  # pip builds each package with the carried hatchling (no registry to fetch a build backend from).
  PYTHONPATH="$site/build" "$python" -m pip install --quiet --disable-pip-version-check --no-index \
    --no-deps --no-build-isolation --no-compile --target "$site/lib" "${PACKAGES[@]}"
  say "installed nnvm from this tree into $site/lib in $((SECONDS - start)) s"
}

mode=device
args=()
for a in "$@"; do
  case $a in
    --wheels) mode=wheels ;;
    --rehearse) mode=rehearse; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done

case $mode in
  wheels)
    download_wheels
    ;;
  device)
    [ -d "$WHEELS" ] || { say "no $WHEELS: run 'bash scripts/gpu_check.sh --wheels' here and carry .gpu"; exit 1; }
    site=/tmp/nnvm-gpu-check
    install_nnvm "$site" python3
    PYTHONPATH="$site/lib" PYTHONUNBUFFERED=1 exec python3 scripts/gpu_check.py "${args[@]}"
    ;;
  rehearse)
    # The image's interpreter and packages (scripts/gpu_image.txt) in a cached venv; built once.
    python=$(bash scripts/uv run --no-sync python scripts/gpu_image.py)
    download_wheels "$python"
    # PyTorch's side: the CPU torch venv the test suite already uses (the GPU image's python3 has torch).
    case " ${args[*]} " in
      *" --torch-python "*) ;;
      *) args+=(--torch-python "$(bash scripts/uv run --no-sync python -c \
           'from nnvm_testing.frontend_onnx.torch_models import torch_python; print(torch_python())')") ;;
    esac
    site=$(mktemp -d /tmp/nnvm-gpu-rehearse.XXXXXX)
    trap 'rm -rf "$site"' EXIT
    install_nnvm "$site" "$python"
    PYTHONPATH="$site/lib" PYTHONUNBUFFERED=1 "$python" scripts/gpu_check.py "${args[@]}"
    ;;
esac
