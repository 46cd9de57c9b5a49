"""What ptxas says about every CUDA kernel of ResNet-18 and MobileNetV2, on sm_80 and sm_90: no GPU needed.

    uv run python bench/cuda_static.py [--archs sm_80,sm_90] [--models resnet18,mobilenet_v2] [--markdown]

Each model (the seeded ONNX builds of ``nnvm_testing.frontend_onnx.models``) is compiled for
``cuda -arch=...``; NVRTC's ``-Xptxas=-v`` report gives per kernel its registers, static shared memory
and spill stores/loads, and ``nnvm_backend_cuda.compiler.occupancy`` the theoretical occupancy
(resident warps over the SM's maximum, limited by registers, shared memory, warps and blocks); ``cap``
is the blocks per SM of ``__launch_bounds__`` where the compile capped a kernel's registers. The
goals: no spills anywhere, occupancy of at least 50% for every kernel. The exit status is 1 when a
kernel spills or falls below 50%.
"""

from __future__ import annotations

import argparse
import sys

import nnvm
from nnvm_backend_cuda.compiler import GOAL_OCCUPANCY
from nnvm_testing.frontend_onnx.models import cached_model_path


def report(model: str, arch: str) -> list[dict]:
    """One row per distinct kernel of ``model`` compiled for ``arch``."""
    mod = nnvm.compile(cached_model_path(model), target=f"cuda -arch={arch}")
    stats = mod.stats()
    return [{"model": model, "arch": arch, "kernel": k, **u} for k, u in stats["cuda_kernels"].items()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default="sm_80,sm_90")
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--markdown", action="store_true", help="a markdown table (for bench/RESULTS.md)")
    args = p.parse_args(argv)
    rows = [r for m in args.models.split(",") for a in args.archs.split(",") for r in report(m, a)]
    cols = ("model", "arch", "kernel", "threads", "min_blocks", "registers", "shared_bytes", "spill_stores",
            "spill_loads", "occupancy")
    if args.markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    else:
        print(f"{'model':14}{'arch':7}{'kernel':44}{'thr':>5}{'cap':>5}{'regs':>6}{'smem':>7}"
              f"{'spill st/ld':>13}{'occ':>7}")
        for r in rows:
            print(f"{r['model']:14}{r['arch']:7}{r['kernel'][:43]:44}{r['threads']:>5}"
                  f"{r['min_blocks'] or '':>5}{r['registers']:>6}"
                  f"{r['shared_bytes']:>7}{r['spill_stores']:>7}/{r['spill_loads']:<5}{r['occupancy']:>7.0%}")
    spills = [r for r in rows if r["spill_stores"] or r["spill_loads"]]
    low = [r for r in rows if r["occupancy"] < GOAL_OCCUPANCY]
    print(f"\n{len(rows)} kernels; spilling: {len(spills)}; below {GOAL_OCCUPANCY:.0%} occupancy: {len(low)}"
          + "".join(f"\n  low: {r['model']} {r['arch']} {r['kernel']} {r['occupancy']:.0%}" for r in low),
          file=sys.stderr)
    return 1 if spills or low else 0


if __name__ == "__main__":
    sys.exit(main())
