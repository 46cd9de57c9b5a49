"""ResNet-18 and MobileNetV2 on an NVIDIA GPU: nnvm's ``cuda`` target against PyTorch eager (cuDNN).

    uv run python bench/cuda_vs_torch.py [--repeat 50] [--torch-python /path/to/python-with-cuda-torch]

Needs an NVIDIA GPU and driver; without one it says so and exits 0 (``bench/cuda_static.py`` is the
report that needs no GPU). nnvm runs the seeded ONNX builds of ``nnvm_frontend_onnx.testing.models``
natively (weights on the device, a run copies the input in and the output out, both timed);
PyTorch runs torchvision's same architecture with random weights, ``cudnn.benchmark`` on, in its own
interpreter (``--torch-python``: torch is not in nnvm's environment), input already on the device.
Median of ``--repeat`` runs after a warm-up, batch 1, float32.

Not named ``cuda.py``: ``python bench/cuda.py`` puts ``bench/`` first on ``sys.path``, where the script
itself shadowed the ``cuda`` namespace of ``cuda-bindings`` wherever nothing imported ``cuda`` at start-up
(cuda-bindings 12.x's ``.pth`` does; an install on ``PYTHONPATH`` does not), so ``open_device`` found
"no GPU" on a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

import nnvm
from nnvm.bench import alternate_ms
from nnvm_backend_cuda.native import open_device
from nnvm_frontend_onnx.testing.models import cached_model_path

TORCH_SCRIPT = r"""
import json, sys, time, torch, torchvision
torch.backends.cudnn.benchmark = True
out = {}
for name in sys.argv[2].split(","):
    net = getattr(torchvision.models, name)(weights=None).cuda().eval()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    times = []
    with torch.no_grad():
        for i in range(int(sys.argv[1]) + 5):
            torch.cuda.synchronize(); t = time.perf_counter(); net(x); torch.cuda.synchronize()
            if i >= 5: times.append((time.perf_counter() - t) * 1e3)
    out[name] = sorted(times)[len(times) // 2]
print(json.dumps(out))
"""


def time_nnvm(model: str, arch: str, repeat: int) -> float:
    mod = nnvm.compile(cached_model_path(model), target=f"cuda -arch={arch}")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    return alternate_ms([lambda: mod.run(x)], repeat, warmup=5)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--torch-python", help="an interpreter with CUDA-enabled torch and torchvision")
    args = p.parse_args(argv)
    dev = open_device()
    if dev is None:
        print("no NVIDIA GPU and driver here: nothing to time (bench/cuda_static.py needs none)")
        return 0
    models = args.models.split(",")
    torch_ms = {}
    if args.torch_python:
        proc = subprocess.run([args.torch_python, "-c", TORCH_SCRIPT, str(args.repeat), ",".join(models)],
                              capture_output=True, text=True, check=True)
        torch_ms = json.loads(proc.stdout)
    print(f"device {dev.arch}; median of {args.repeat} runs, batch 1, ms")
    print(f"{'model':14}{'nnvm cuda':>11}{'torch eager':>13}{'speedup':>9}")
    for m in models:
        ours = time_nnvm(m, dev.arch, args.repeat)
        theirs = torch_ms.get(m)
        ratio = f"{theirs / ours:8.2f}x" if theirs else "       -"
        print(f"{m:14}{ours:11.3f}{(f'{theirs:.3f}' if theirs else '-'):>13}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
